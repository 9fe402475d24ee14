"""ONNX ops that select or repeat entries: Gather, Expand, Tile, Trilu.

Gather is TASO's `embedding` for a lookup in a 2-D table, a `split` for one known
index, and `graph.gather` otherwise (or where the exporter recorded one); known indices
are checked and made non-negative at import. Expand is `broadcast`; Tile broadcasts
the input, with a size-1 dim before each of its own, to the repeat counts; Trilu keeps
its triangle with `where` on a mask compared from two small constant ramps.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import Known, Origin, Value
from tasoc.backends.onnx.operands import axis_index, optional_input
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)


@_handles("Gather")
def _gather(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    data, indices = node.input[0], node.input[1]
    shape = imp.shape(data)
    if not shape:
        imp.fail("data must have rank >= 1, got a scalar")
    written = int(attrs.get("axis", 0))
    axis = axis_index(imp, written, len(shape))
    if imp.form(node) == "gather":  # the exporter wrote a graph.gather: its axis as it was
        return [imp.op(G.GatherOp, imp.data(data), imp.data(indices), axis=written)]
    index = imp.value(indices)
    if isinstance(index, Known):
        positions = imp.known_ints(indices, "indices")
        size = shape[axis]
        if positions.size and not (-size <= positions.min() and positions.max() < size):
            imp.fail(
                f"indices must lie in [{-size}, {size - 1}] for axis {axis} of size {size}, "
                f"got {positions.min()} to {positions.max()}"
            )
        if positions.ndim == 0:
            x = imp.data(data)
            position = int(positions) % size
            piece = imp.take(x, axis, position, position + 1)
            return [imp.reshape(piece, [d for i, d in enumerate(shape) if i != axis])]
        if np.any(positions < 0):
            index = Known(f"{index.name}.wrapped", positions % size, Origin.DERIVED)
    ids = imp.data(indices) if not isinstance(index, Known) else imp.materialize(index)
    if len(shape) == 2 and axis == 0:
        return [imp.op(G.EmbeddingOp, ids, imp.data(data))]
    return [imp.op(G.GatherOp, imp.data(data), ids, axis=axis)]


@_handles("Expand")
def _expand(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    target = imp.known_ints(node.input[1], "shape")
    if target.ndim != 1 or min(target, default=0) < 0:
        imp.fail(f"shape must be a list of dims >= 0, got {target.tolist()}")
    try:
        shape = tuple(np.broadcast_shapes(imp.shape(x), tuple(int(d) for d in target)))
    except ValueError:
        imp.fail(
            f"shape {target.tolist()} does not broadcast with the input's "
            f"{format_dims(imp.shape(x))}"
        )
    if shape == imp.shape(x):
        return [x]
    return [imp.op(G.BroadcastOp, x, shape=shape)]


@_handles("Tile")
def _tile(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """x repeated `repeats[i]` times along each dim i: x with a size-1 dim put before
    each of its own, broadcast to the counts, and the pairs of dims merged."""
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    repeats = [int(r) for r in imp.known_ints(node.input[1], "repeats").reshape(-1)]
    if len(repeats) != len(shape) or min(repeats, default=0) < 0:
        imp.fail(f"repeats {repeats} must hold one count >= 0 for each of the {len(shape)} dims")
    if all(count == 1 for count in repeats):
        return [x]
    pairs = list(zip(repeats, shape, strict=True))
    spread = imp.reshape(x, [n for _, d in pairs for n in (1, d)])
    copies = imp.op(G.BroadcastOp, spread, shape=tuple(n for pair in pairs for n in pair))
    return [imp.reshape(copies, [count * d for count, d in pairs])]


@_handles("Trilu")
def _trilu(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """The upper (`upper` = 1, the default) or lower triangle of the last two dims,
    from diagonal k (an optional known input) on, the rest zero: `where` on the mask
    column >= row + k (upper) or column <= row + k (lower), compared at run time from
    two small constant ramps rather than held as a rows x columns constant."""
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    if len(shape) < 2:
        imp.fail(f"input must have rank >= 2, got shape {format_dims(shape)}")
    k_name = optional_input(node, 1)
    k = 0
    if k_name is not None:
        given = imp.known_ints(k_name, "k")
        if given.size != 1:
            imp.fail(f"k must be one integer, got shape {format_dims(given.shape)}")
        k = int(given.reshape(-1)[0])
    rows, columns = shape[-2:]
    k = min(max(k, -rows - 1), columns + 1)  # beyond these every entry is in or out alike
    ramps = {
        "columns": np.arange(columns, dtype=np.int64).reshape(1, columns),
        "diagonal": (np.arange(rows, dtype=np.int64) + k).reshape(rows, 1),
    }
    column, diagonal = (
        imp.materialize(Known(f"{node.output[0]}.{name}", ramp, Origin.DERIVED))
        for name, ramp in ramps.items()
    )
    predicate = "ge" if attrs.get("upper", 1) else "le"
    kept = imp.op(G.CompareOp, column, diagonal, predicate=predicate)
    return [imp.op(G.WhereOp, kept, x, imp.literal(0, x))]
