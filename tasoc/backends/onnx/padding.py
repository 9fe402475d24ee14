"""ONNX Pad, in every mode, and the constant padding the window ops build on.

The dialect has no pad op, so padding is data movement it has: `constant` mode
concatenates blocks of the fill value before and after the data along each padded axis
(a known fill as a constant op, a run-time one as a `broadcast` of it), and crops where
a pad is negative (a `split`); `edge`, `reflect` and `wrap` gather each padded axis at
constant indices, the positions NumPy's `np.pad` of a range gives, which is what ONNX's
reference computes. Every element of the result is an element of the input or the fill,
copied: padding is exact.

Two forms keep ops TASO's rules know: symmetric zero padding of the last two dims of a
4-D tensor is `graph.enlarge` (how the exporter writes enlarge), and -inf padding of
the last two dims read only by MaxPools becomes the pools' own padding.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.conventions import DTYPES_BY_NUMPY
from tasoc.backends.onnx.errors import format_dims, shown
from tasoc.backends.onnx.known_values import Known, Origin, Value, is_float
from tasoc.backends.onnx.operands import distinct_axes, int_list, optional_input
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

Widths = Sequence[tuple[int, int]]
"""(before, after) elements of padding per axis, negative to crop."""

Fill = np.ndarray | SSAValue
"""A padding value: a known rank-0 array of the data's type, or a one-element SSA value."""

_INDEXED_MODES = ("edge", "reflect", "wrap")


def pad_constant(imp: Importer, x: SSAValue, widths: Widths, fill: Fill, name: str) -> SSAValue:
    """`x` cropped where a width is negative and padded with `fill` where it is positive.

    `name` (the node's output) names the fill blocks, which are made once per shape."""
    for axis, (before, after) in enumerate(widths):
        x = _cropped(imp, x, axis, before, after)
        shape = list(imp.shape(x))
        pieces = []
        for width in (before, after):
            shape[axis] = width
            pieces.append(_fill_block(imp, fill, shape, name) if width > 0 else None)
        if pieces != [None, None]:
            x = imp.op(G.ConcatOp, *(p for p in (pieces[0], x, pieces[1]) if p), axis=axis)
    return x


def _cropped(imp: Importer, x: SSAValue, axis: int, before: int, after: int) -> SSAValue:
    """`x` without the elements that negative widths remove from `axis`."""
    size = imp.shape(x)[axis]
    start, stop = max(-before, 0), size - max(-after, 0)
    if start > stop:
        imp.fail(f"pads {before}, {after} crop more than the {size} elements of axis {axis}")
    return imp.take(x, axis, start, stop)


def _fill_block(imp: Importer, fill: Fill, shape: Sequence[int], name: str) -> SSAValue:
    """A tensor of `shape` holding `fill` everywhere."""
    if isinstance(fill, SSAValue):
        return imp.op(G.BroadcastOp, fill, shape=tuple(shape))
    form = "zeros" if _is_zero(fill) else "ones" if fill == 1 else None
    # A read-only view of the one value: materializing makes ones/zeros, a literal, or a
    # broadcast of the value when the block is too large for a literal.
    block = np.broadcast_to(fill, tuple(shape))
    return imp.materialize(Known(f"{name}.fill {format_dims(shape)}", block, Origin.DERIVED, form))


def _pad_by_index(imp: Importer, x: SSAValue, widths: Widths, mode: str, name: str) -> SSAValue:
    """`x` padded in `edge`, `reflect` or `wrap` mode, a `gather` per padded axis at the
    positions `np.pad` of a range gives (after cropping where a width is negative, as
    onnxruntime does)."""
    for axis, (before, after) in enumerate(widths):
        x = _cropped(imp, x, axis, before, after)
        if before <= 0 and after <= 0:
            continue
        size = imp.shape(x)[axis]
        if size == 0:
            imp.fail(f"mode {mode} cannot pad axis {axis}, which is empty")
        positions = np.pad(np.arange(size, dtype=np.int64), (max(before, 0), max(after, 0)), mode)
        indices = imp.materialize(Known(f"{name}.positions{axis}", positions, Origin.DERIVED))
        x = imp.op(G.GatherOp, x, indices, axis=axis)
    return x


def _widths(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], rank: int
) -> list[tuple[int, int]]:
    """(before, after) per axis from the node's `pads` and `axes` (opset 18)."""
    pads = int_list(imp, node, attrs, "pads", 1) or []
    given_axes = int_list(imp, node, attrs, "axes", 3)
    axes = list(range(rank)) if given_axes is None else distinct_axes(imp, given_axes, rank)
    if len(pads) != 2 * len(axes):
        imp.fail(f"pads {pads} must hold two values (begin, end) for each of {len(axes)} axes")
    widths = [(0, 0)] * rank
    for i, axis in enumerate(axes):
        widths[axis] = (pads[i], pads[len(axes) + i])
    return widths


def _fill(imp: Importer, node: onnx.NodeProto, x: SSAValue) -> Fill:
    """The node's `constant_value` (0 when absent), of the data's type: known, or the
    run-time value itself."""
    data_type = G.sig_of(x.type).dtype
    name = optional_input(node, 2)
    if name is None:
        return np.zeros((), numpy_dtype(data_type))
    value = imp.value(name)
    if isinstance(value, Known):
        kind = DTYPES_BY_NUMPY.get(value.array.dtype)
        size, given = value.array.size, kind.value if kind else str(value.array.dtype)
    else:
        size, given = G.sig_of(value.type).size, G.sig_of(value.type).dtype.value
    if size != 1:
        imp.fail(f"constant_value must hold one element, got {size}")
    if given != data_type.value:
        imp.fail(f"constant_value is {given}, but the data is {data_type.value}")
    return value.array.reshape(()) if isinstance(value, Known) else imp.data(name)


def _feeds_only_max_pools(imp: Importer, name: str) -> bool:
    """Whether value `name` is read by MaxPool nodes only (and is no graph output): a
    scan of the graph, so asked only of a -inf fill."""
    readers = {n.op_type for n in imp.graph.node if name in n.input}
    return readers == {"MaxPool"} and not imp.is_output(name)


def _is_zero(fill: np.ndarray) -> bool:
    """Whether `fill` is 0 and not -0.0 (which no graph.zeros or enlarge makes)."""
    return bool(fill == 0) and not (is_float(fill) and np.signbit(fill.astype(np.float32)))


@_handles("Pad")
def _pad(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    widths = _widths(imp, node, attrs, len(shape))
    mode = attrs.get("mode", "constant")
    if mode not in ("constant", *_INDEXED_MODES):
        imp.fail(f"mode {shown(mode)} is not constant, edge, reflect or wrap")
    if mode == "wrap" and imp.opset < 19:
        imp.fail(f"mode 'wrap' needs opset 19, the model's is {imp.opset}")
    if mode != "constant":
        return [_pad_by_index(imp, x, widths, mode, node.output[0])]
    fill = _fill(imp, node, x)
    spatial = (
        len(shape) == 4 and widths[0] == widths[1] == (0, 0) and min(widths[2] + widths[3]) >= 0
    )
    known_fill = None if isinstance(fill, SSAValue) else fill
    if spatial and known_fill is not None:
        (top, bottom), (left, right) = widths[2], widths[3]
        if top == bottom and left == right and _is_zero(known_fill):
            kernel = (shape[2] + 2 * top, shape[3] + 2 * left)
            return [imp.op(G.EnlargeOp, x, kernel=kernel)]
        if known_fill == -np.inf and _feeds_only_max_pools(imp, node.output[0]):
            # -inf is what max pooling pads with: the MaxPools take the padding over.
            imp.max_pool_pads[node.output[0]] = (node.input[0], (top, left, bottom, right))
            return [None]
    return [pad_constant(imp, x, widths, fill, node.output[0])]
