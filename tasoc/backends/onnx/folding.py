"""Constant folding: ONNX ops evaluated at import time when all their inputs are known
integers.

Exporters compute shapes inside the graph (`Shape -> Gather -> Concat -> Reshape`,
attention masks from `Range`, `Expand` and `Where`); on static shapes these are
constants, and the importer computes them. A file of a few bytes can ask for a
`Range` of 2^40 elements or an `Expand` to petabytes, and can give inputs the spec
does not allow (an index out of range, a step of 0), so each folder checks its inputs
as the ONNX spec states them and the size of its result against the limit
(`Importer.check_size`) before NumPy computes anything. The importer runs folders
with NumPy's floating-point errors raised (`Importer.import_node_strictly`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx

from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.operands import axis_index, element_type, slice_specs

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer


Folder = Callable[["Importer", onnx.NodeProto, dict[str, Any], list[np.ndarray]], np.ndarray]
FOLDERS: dict[str, Folder] = {}
"""Ops evaluated at import time when all their inputs are known integers (shapes)."""

_INDEX_TYPES = (np.dtype(np.int32), np.dtype(np.int64))
"""The element types ONNX allows for indices (Gather)."""

_RESULT = "the result"
"""How size messages name a folder's result (after the node that computes it)."""


def _folds(*op_types: str) -> Callable[[Folder], Folder]:
    def register(fn: Folder) -> Folder:
        for op_type in op_types:
            FOLDERS[op_type] = fn
        return fn

    return register


# ------------------------------------------------------------------- input checks


def _one_type(imp: Importer, arrays: Sequence[np.ndarray], numeric: bool = True) -> np.dtype:
    """The element type all `arrays` share (ONNX types these inputs with one `T`);
    with `numeric`, bool is refused (arithmetic and ranges are not defined on it)."""
    dtypes = sorted({str(array.dtype) for array in arrays})
    if len(dtypes) != 1:
        imp.fail(f"the inputs must have one element type, got {', '.join(dtypes)}")
    if numeric and arrays[0].dtype == np.bool_:
        imp.fail("the inputs must be numbers, got bool")
    return arrays[0].dtype


def _broadcast(imp: Importer, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to (NumPy's rules are ONNX's multidirectional ones)."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(shape) for shape in shapes)))
    except ValueError:
        imp.fail(f"shapes {', '.join(map(format_dims, shapes))} do not broadcast together")


# ------------------------------------------------------------------------ folders


@_folds("Gather")
def _fold_gather(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, indices = arrays
    if data.ndim == 0:
        imp.fail("data must have rank >= 1, got a scalar")
    if indices.dtype not in _INDEX_TYPES:
        imp.fail(f"indices must be int32 or int64, got {indices.dtype}")
    axis = axis_index(imp, int(attrs.get("axis", 0)), data.ndim)
    size = data.shape[axis]
    if indices.size and not (-size <= indices.min() and indices.max() < size):
        imp.fail(
            f"indices must lie in [{-size}, {size - 1}] for axis {axis} of size {size}, "
            f"got {indices.min()} to {indices.max()}"
        )
    shape = (*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :])
    imp.check_size(shape, data.dtype, _RESULT)
    return np.take(data, indices, axis=axis)


@_folds("Concat")
def _fold_concat(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    dtype = _one_type(imp, arrays, numeric=False)
    ranks = sorted({array.ndim for array in arrays})
    if len(ranks) != 1 or ranks[0] == 0:
        imp.fail(f"the inputs must share one rank >= 1, got ranks {ranks}")
    axis = axis_index(imp, int(attrs["axis"]), ranks[0])
    if len({array.shape[:axis] + array.shape[axis + 1 :] for array in arrays}) != 1:
        shapes = ", ".join(format_dims(array.shape) for array in arrays)
        imp.fail(f"shapes {shapes} differ outside axis {axis}")
    shape = list(arrays[0].shape)
    shape[axis] = sum(array.shape[axis] for array in arrays)
    imp.check_size(shape, dtype, _RESULT)
    return np.concatenate(arrays, axis=axis)


@_folds("Cast")
def _fold_cast(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    dtype = element_type(imp, int(attrs["to"]), "to")
    imp.check_size(arrays[0].shape, dtype, _RESULT)
    return arrays[0].astype(dtype)


@_folds("Slice")
def _fold_slice(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data = arrays[0]
    index = [slice(None)] * data.ndim
    for axis, start, end, step in slice_specs(imp, node, data.ndim):
        index[axis] = slice(start, end, step)
    return data[tuple(index)]


@_folds("Add", "Sub", "Mul", "Div", "Equal")
def _fold_arithmetic(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    a, b = arrays
    dtype = _one_type(imp, arrays, numeric=node.op_type != "Equal")
    result_type = np.dtype(np.bool_) if node.op_type == "Equal" else dtype
    imp.check_size(_broadcast(imp, [a.shape, b.shape]), result_type, _RESULT)
    if node.op_type == "Div":
        if not np.all(b):
            imp.fail("integer division by zero")
        # Integer division truncates toward zero, as in C.
        return (np.sign(a) * np.sign(b) * (np.abs(a) // np.abs(b))).astype(dtype)
    operation = {"Add": np.add, "Sub": np.subtract, "Mul": np.multiply, "Equal": np.equal}
    return operation[node.op_type](a, b)


@_folds("Where")
def _fold_where(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    condition, x, y = arrays
    if condition.dtype != np.bool_:
        imp.fail(f"the condition must be bool, got {condition.dtype}")
    dtype = _one_type(imp, [x, y], numeric=False)
    imp.check_size(_broadcast(imp, [a.shape for a in arrays]), dtype, _RESULT)
    return np.where(condition, x, y)


@_folds("Range")
def _fold_range(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    dtype = _one_type(imp, arrays)
    if any(array.ndim for array in arrays):
        shapes = ", ".join(format_dims(array.shape) for array in arrays)
        imp.fail(f"start, limit and delta must be scalars, got shapes {shapes}")
    start, limit, delta = (int(array) for array in arrays)
    if delta == 0:
        imp.fail("delta is 0")
    count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta)
    imp.check_size((count,), dtype, _RESULT)
    return np.arange(start, limit, delta, dtype=dtype)


@_folds("Expand")
def _fold_expand(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, shape = arrays
    if shape.ndim != 1 or shape.dtype == np.bool_ or min(shape, default=0) < 0:
        imp.fail(f"shape must be a list of dims >= 0, got {shape.tolist()}")
    target = _broadcast(imp, [data.shape, [int(d) for d in shape]])
    imp.check_size(target, data.dtype, _RESULT)
    # A read-only view: a large expanded value costs memory only where it is computed on.
    return np.broadcast_to(data, target)


@_folds("Neg")
def _fold_neg(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    _one_type(imp, arrays)
    return np.negative(arrays[0])
