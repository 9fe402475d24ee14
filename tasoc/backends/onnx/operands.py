"""Reading a node's configuring operands as ONNX specifies them: optional inputs,
integer lists (attributes in older opsets, constant inputs in newer ones), axes,
slice bounds, element types.

The handlers and the folders both read these, and both must refuse what the spec
does not allow (an axis out of range, a step of 0, a float where a shape belongs)
with one line naming the node, rather than let NumPy fail or guess.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto

from tasoc.backends.onnx.tensors import element_dtype

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer


def optional_input(node: onnx.NodeProto, index: int) -> str | None:
    """The name of optional input `index`, or None when it is absent or empty."""
    return node.input[index] if index < len(node.input) and node.input[index] else None


def used_output(imp: Importer, node: onnx.NodeProto, index: int) -> bool:
    """Whether optional output `index` is there and read (by a node or as a graph
    output), so that a handler computes only what the model uses."""
    return index < len(node.output) and bool(node.output[index]) and imp.is_used(node.output[index])


def f32_decimal(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as `value`.

    ONNX float attributes are float32 while IR attributes are f64: an epsilon of
    1e-5 comes back from ONNX as 9.99999974e-06, and this turns it into 1e-5 again.
    """
    return float(np.format_float_scientific(np.float32(value), unique=True))


def int_list(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], attr: str, index: int
) -> list[int] | None:
    """An integer list given as attribute `attr` (older opsets) or as known input
    `index` (newer ones), or None when the node gives neither."""
    if attr in attrs:
        return [int(v) for v in attrs[attr]]
    name = optional_input(node, index)
    return None if name is None else [int(v) for v in imp.known_ints(name, attr).reshape(-1)]


def axis_index(imp: Importer, axis: int, rank: int) -> int:
    """`axis` counted from 0, after checking it is in [-rank, rank - 1]."""
    if not -rank <= axis < rank:
        imp.fail(f"axis {axis} is out of range for rank {rank}")
    return axis % rank


def distinct_axes(imp: Importer, axes: list[int], rank: int) -> list[int]:
    """`axes` counted from 0; ONNX forbids naming an axis twice (Squeeze, Unsqueeze,
    Slice, Pad)."""
    counted = [axis_index(imp, axis, rank) for axis in axes]
    if len(set(counted)) != len(counted):
        imp.fail(f"axes {axes} name an axis twice")
    return counted


def slice_specs(imp: Importer, node: onnx.NodeProto, rank: int) -> list[tuple[int, int, int, int]]:
    """(axis, start, end, step) per sliced axis, from the known starts/ends/axes/steps:
    one of each per axis, distinct axes, no step of 0."""
    starts = imp.known_ints(node.input[1], "starts").reshape(-1)
    ends = imp.known_ints(node.input[2], "ends").reshape(-1)
    axes_name, steps_name = optional_input(node, 3), optional_input(node, 4)
    axes = imp.known_ints(axes_name, "axes").reshape(-1) if axes_name else np.arange(len(starts))
    steps = imp.known_ints(steps_name, "steps").reshape(-1) if steps_name else np.ones(len(starts))
    if not len(starts) == len(ends) == len(axes) == len(steps):
        imp.fail(
            f"starts, ends, axes and steps must have one entry per sliced axis, got "
            f"{len(starts)}, {len(ends)}, {len(axes)} and {len(steps)}"
        )
    if not all(steps):
        imp.fail(f"steps {[int(t) for t in steps]} hold a 0")
    counted = distinct_axes(imp, [int(a) for a in axes], rank)
    # NumPy clamps out-of-range bounds (ONNX uses INT64_MAX for "to the end") the same way.
    return [
        (axis, int(s), int(e), int(t))
        for axis, s, e, t in zip(counted, starts, ends, steps, strict=True)
    ]


def element_type(imp: Importer, data_type: int, what: str) -> np.dtype:
    """The NumPy type of ONNX element type `data_type` (a Cast's `to`, an EyeLike's
    `dtype`), refusing a number ONNX does not define."""
    dtype = element_dtype(data_type)
    if dtype is None or data_type == TensorProto.UNDEFINED:
        imp.fail(f"{what} {data_type} is not an ONNX element type")
    return dtype
