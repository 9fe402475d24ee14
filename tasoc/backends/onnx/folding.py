"""Constant folding: how each ONNX op is computed at import time when its inputs are
known (`fold_dispatch` decides when that is).

Exporters compute shapes inside the graph (`Shape -> Gather -> Concat -> Reshape`, the
attention scale `Div(x, Sqrt(Cast(Gather(Shape(q), 3))))`, masks from `Range`,
`Expand`, `Trilu` and `Where`); on static shapes these are constants, and the importer
computes them. A file of a few bytes can ask for a `Range` of 2^40 elements or an
`Expand` to petabytes, and can give inputs the spec does not allow (an index out of
range, a step of 0, a bool where a number belongs), so every folded node's input types
are checked against its ONNX schema (`check_input_types`), each folder checks the rest
of its inputs as the spec states them and the size of its result against the limit
(`Importer.check_size`) before anything is computed. The arithmetic itself is onnx's
reference implementation (`onnx.reference.ops`) wherever that is exact; structural
ops whose results can stay NumPy views (Expand, Transpose) or must not round through
floats (Range, integer Gather) are NumPy here. The importer runs folders with NumPy's
floating-point errors raised (`Importer.import_node_strictly`): an overflow or an
invalid operation (0/0, the square root of -1) is the node's error line, while a float
division by 0 is the IEEE infinity the runtime computes too.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
import onnx.defs
from onnx import TensorProto

from tasoc.backends.onnx.errors import first_line, format_dims, shown
from tasoc.backends.onnx.known_values import is_float, is_integral
from tasoc.backends.onnx.operands import (
    axis_index,
    distinct_axes,
    element_type,
    int_list,
    optional_input,
    slice_specs,
)

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer


Folder = Callable[["Importer", onnx.NodeProto, dict[str, Any], list[np.ndarray]], np.ndarray]
"""Computes a node's (first) output from the arrays of its non-empty inputs, in order."""
FOLDERS: dict[str, Folder] = {}
"""Ops evaluated at import time when all their inputs are known."""

SHAPE_FOLDERS = frozenset({"Size"})
"""Ops whose result depends only on their inputs' shapes and types, which are static:
folded whether or not their inputs are known (a run-time input stands in as a view)."""

_RESULT = "the result"
"""How size messages name a folder's result (after the node that computes it)."""

_BOOLEAN_RESULTS = frozenset(
    {"Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor"}
)
"""Broadcasting ops whose result is bool whatever their inputs' type."""


def _folds(*op_types: str) -> Callable[[Folder], Folder]:
    def register(fn: Folder) -> Folder:
        for op_type in op_types:
            FOLDERS[op_type] = fn
        return fn

    return register


# ------------------------------------------------------------------------ input types


@functools.cache
def _signature(
    op_type: str, opset: int
) -> tuple[int, tuple[tuple[str, str, bool], ...], dict[str, frozenset[str]]]:
    """Op `op_type`'s schema at `opset`: its version, its formal inputs (name, type
    string, variadic) and the types each type parameter allows."""
    schema = onnx.defs.get_schema(op_type, opset, "")
    variadic = onnx.defs.OpSchema.FormalParameterOption.Variadic
    formals = tuple((p.name, p.type_str, p.option == variadic) for p in schema.inputs)
    allowed = {c.type_param_str: frozenset(c.allowed_type_strs) for c in schema.type_constraints}
    return schema.since_version, formals, allowed


def _type_name(dtype: np.dtype) -> str | None:
    """ONNX's name of a NumPy element type (`float`, `int64`, `bfloat16`), or None."""
    try:
        return TensorProto.DataType.Name(onnx.helper.np_dtype_to_tensor_dtype(dtype)).lower()
    except (KeyError, ValueError, TypeError):
        return None


def _kind(type_name: str) -> str:
    """`floats`, `integers` or `bool` for an ONNX element type name; others as named."""
    if type_name == "bool":
        return "bool"
    if type_name.startswith(("float", "bfloat")) or type_name == "double":
        return "floats"
    return "integers" if type_name.startswith(("int", "uint")) else type_name


def _describe(allowed: frozenset[str], got: str) -> str:
    """What a type constraint allows, as a message says it: `numbers`, `floats`,
    `integers` or `bool`, listing the types where `got` is of an allowed kind (an int8
    where only int32 and int64 are allowed)."""
    names = sorted(t.removeprefix("tensor(").removesuffix(")") for t in allowed)
    kinds = {_kind(name) for name in names}
    if kinds == {"floats", "integers"}:
        said = "numbers"
    elif len(kinds) == 1:
        (said,) = kinds
    else:
        return "one of " + ", ".join(names)
    return f"{said} ({', '.join(names)})" if _kind(got) in kinds else said


def check_input_types(
    imp: Importer, node: onnx.NodeProto, arrays: Sequence[np.ndarray | None]
) -> None:
    """Check the element types of `node`'s inputs (`arrays` by input position, None for
    an absent optional input) against its ONNX schema at the model's opset: each one a
    type its formal input allows, and one type for all inputs sharing a type parameter.
    `onnx.checker` leaves types unchecked, and NumPy would compute on any of them."""
    _, formals, allowed = _signature(node.op_type, imp.opset)
    seen: dict[str, tuple[str, np.dtype]] = {}
    for index, array in enumerate(arrays):
        if array is None:
            continue
        if index >= len(formals) and not (formals and formals[-1][2]):
            imp.fail(f"takes at most {len(formals)} inputs, got {len(arrays)}")
        formal, type_str, _ = formals[min(index, len(formals) - 1)]
        name = node.input[index]
        type_name = _type_name(array.dtype)
        if type_name is None or array.dtype.kind in "OSU":
            imp.fail(
                f"{formal} ({shown(name)}) has element type {array.dtype}, which tasoc "
                "does not compute with"
            )
        options = allowed.get(type_str, frozenset({type_str}))
        if f"tensor({type_name})" not in options:
            imp.fail(
                f"{formal} ({shown(name)}) must be {_describe(options, type_name)}, "
                f"got {array.dtype}"
            )
        first_name, first_type = seen.setdefault(type_str, (name, array.dtype))
        if first_type != array.dtype:
            imp.fail(
                f"the inputs {shown(first_name)} and {shown(name)} must have one element "
                f"type ({type_str}), got {first_type} and {array.dtype}"
            )


# ------------------------------------------------------------------- computing

_RUN_PARAMS: dict[str, Any] = {"log": lambda *args: None, "verbose": 0, "new_ops": None}
"""What onnx's reference op classes take beside the node (and the opsets)."""


@functools.cache
def _reference_op(op_type: str, opset: int) -> type:
    """onnx's reference implementation of `op_type` at `opset`. Imported on first use:
    `onnx.reference` takes a tenth of a second to load, which a run that folds nothing
    need not pay."""
    from onnx.reference.ops import load_op

    return load_op("", op_type, opset)


def _reference(imp: Importer, node: onnx.NodeProto, *arrays: np.ndarray) -> np.ndarray:
    """`node`'s first output on `arrays`, computed by onnx's reference implementation
    after the folder checked the inputs; whatever it still refuses is one line."""
    try:
        op = _reference_op(node.op_type, imp.opset)(
            node, {**_RUN_PARAMS, "opsets": {"": imp.opset}}
        )
        return np.asarray(op.run(*arrays)[0])
    except (ValueError, TypeError, IndexError, RuntimeError) as err:
        imp.fail(f"computing it at import time fails: {first_line(err)}")


def _broadcast(imp: Importer, shapes: Sequence[Sequence[int]]) -> tuple[int, ...]:
    """The shape `shapes` broadcast to (NumPy's rules are ONNX's multidirectional ones)."""
    try:
        return tuple(np.broadcast_shapes(*(tuple(shape) for shape in shapes)))
    except ValueError:
        imp.fail(f"shapes {', '.join(map(format_dims, shapes))} do not broadcast together")


# ------------------------------------------------------------------------ folders


@_folds("Size")
def _fold_size(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return np.asarray(arrays[0].size, np.int64)


@_folds("Gather")
def _fold_gather(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, indices = arrays
    if data.ndim == 0:
        imp.fail("data must have rank >= 1, got a scalar")
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
    ranks = sorted({array.ndim for array in arrays})
    if len(ranks) != 1 or ranks[0] == 0:
        imp.fail(f"the inputs must share one rank >= 1, got ranks {ranks}")
    axis = axis_index(imp, int(attrs["axis"]), ranks[0])
    if len({array.shape[:axis] + array.shape[axis + 1 :] for array in arrays}) != 1:
        shapes = ", ".join(format_dims(array.shape) for array in arrays)
        imp.fail(f"shapes {shapes} differ outside axis {axis}")
    shape = list(arrays[0].shape)
    shape[axis] = sum(array.shape[axis] for array in arrays)
    imp.check_size(shape, arrays[0].dtype, _RESULT)
    return np.concatenate(arrays, axis=axis)


@_folds("Cast")
def _fold_cast(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    dtype = element_type(imp, int(attrs["to"]), "to")
    if dtype.kind in "OSU":
        imp.fail(f"a cast to {TensorProto.DataType.Name(attrs['to'])} is not supported")
    imp.check_size(arrays[0].shape, dtype, _RESULT)
    # The reference saturates float8 casts and rounds float8e8m0 as `saturate` and
    # `round_mode` say; the other types are NumPy's astype.
    return _reference(imp, node, arrays[0])


@_folds("Slice")
def _fold_slice(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data = arrays[0]
    index = [slice(None)] * data.ndim
    for axis, start, end, step in slice_specs(imp, node, data.ndim):
        index[axis] = slice(start, end, step)
    return data[tuple(index)]


@_folds("Transpose")
def _fold_transpose(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data = arrays[0]
    perm = [int(p) for p in attrs.get("perm", reversed(range(data.ndim)))]
    if sorted(perm) != list(range(data.ndim)):
        imp.fail(f"perm {perm} is not a permutation of the {data.ndim} axes")
    return np.transpose(data, perm)


@_folds("Neg", "Abs", "Floor", "Ceil", "Sqrt", "Reciprocal", "Not")
def _fold_unary(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    return _reference(imp, node, arrays[0])


def _check_operands(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], a: np.ndarray, b: np.ndarray
) -> None:
    """What the spec leaves undefined in Div, Mod and Pow, refused: an integer divisor
    of 0, Mod's `fmod` other than 0 or 1 (0 on floats before Mod-28), an integer base
    to a negative integer power."""
    op_type = node.op_type
    if op_type in ("Div", "Mod") and is_integral(b) and not np.all(b):
        imp.fail(f"integer {'division' if op_type == 'Div' else 'modulo'} by zero")
    if op_type == "Mod":
        fmod = int(attrs.get("fmod", 0))
        if fmod not in (0, 1):
            imp.fail(f"fmod must be 0 or 1, got {fmod}")
        version = _signature(op_type, imp.opset)[0]
        if fmod == 0 and is_float(a) and version < 28:
            imp.fail(f"fmod must be 1 for floats (Mod-{version}; Mod-28 defines fmod 0 on them)")
    if op_type == "Pow" and is_integral(a) and is_integral(b) and b.size and b.min() < 0:
        imp.fail(f"an integer base to the negative integer power {b.min()} is not an integer")


@_folds(
    "Add", "Sub", "Mul", "Div", "Mod", "Pow", "Max", "Min", "Sum", "And", "Or", "Xor",
    *_BOOLEAN_RESULTS,
)  # fmt: skip
def _fold_elementwise(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    dtype = np.dtype(np.bool_) if node.op_type in _BOOLEAN_RESULTS else arrays[0].dtype
    imp.check_size(_broadcast(imp, [array.shape for array in arrays]), dtype, _RESULT)
    if len(arrays) == 2:
        _check_operands(imp, node, attrs, *arrays)
    # x / 0 is the infinity onnxruntime computes (and Reciprocal's reference gives);
    # 0 / 0 stays an invalid operation, an error.
    with np.errstate(divide="ignore" if node.op_type == "Div" else "raise"):
        return _reference(imp, node, *arrays)


@_folds("Where")
def _fold_where(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    condition, x, y = arrays
    imp.check_size(_broadcast(imp, [a.shape for a in arrays]), x.dtype, _RESULT)
    return np.where(condition, x, y)


@_folds("Range")
def _fold_range(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    """ONNX's formula: max(ceil((limit - start) / delta), 0) elements, start + i * delta.
    Integers are counted exactly; floats as onnxruntime counts them (the difference in
    the input type, divided in double), in float32 or float64 for float16/bfloat16 at
    Range-27 (`stash_type`)."""
    if any(array.ndim for array in arrays):
        shapes = ", ".join(format_dims(array.shape) for array in arrays)
        imp.fail(f"start, limit and delta must be scalars, got shapes {shapes}")
    dtype = arrays[0].dtype
    if is_integral(arrays[0]):
        start, limit, delta = (int(array) for array in arrays)
        if delta == 0:
            imp.fail("delta is 0")
        count = max(-((start - limit) // delta), 0)  # ceil((limit - start) / delta)
        imp.check_size((count,), dtype, _RESULT)
        return np.arange(start, limit, delta, dtype=dtype)
    compute = dtype
    if dtype.itemsize == 2 and _signature("Range", imp.opset)[0] >= 27:
        compute = np.dtype(np.float64 if attrs.get("stash_type", 1) == 11 else np.float32)
    start, limit, delta = (array.astype(compute) for array in arrays)
    if not all(np.isfinite(float(v)) for v in (start, limit, delta)):
        imp.fail(f"start, limit and delta must be finite, got {start}, {limit} and {delta}")
    if delta == 0:
        imp.fail("delta is 0")
    quotient = float(limit - start) / float(delta)
    if not math.isfinite(quotient):
        imp.fail(f"the range from {start} to {limit} by {delta} has no finite length")
    count = max(math.ceil(quotient), 0)
    imp.check_size((count,), dtype, _RESULT)
    return (start + np.arange(count, dtype=compute) * delta).astype(dtype)


@_folds("Expand")
def _fold_expand(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, shape = arrays
    if shape.ndim != 1 or min(shape, default=0) < 0:
        imp.fail(f"shape must be a list of dims >= 0, got {shape.tolist()}")
    target = _broadcast(imp, [data.shape, [int(d) for d in shape]])
    imp.check_size(target, data.dtype, _RESULT)
    # A read-only view: a large expanded value costs memory only where it is computed on.
    return np.broadcast_to(data, target)


@_folds("Tile")
def _fold_tile(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data, repeats = arrays
    if repeats.shape != (data.ndim,) or min(repeats, default=0) < 0:
        imp.fail(
            f"repeats must hold one count >= 0 per dimension of the rank-{data.ndim} input, "
            f"got {repeats.tolist()}"
        )
    shape = [d * int(r) for d, r in zip(data.shape, repeats, strict=True)]
    imp.check_size(shape, data.dtype, _RESULT)
    return _reference(imp, node, data, repeats)


@_folds("Trilu")
def _fold_trilu(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    data = arrays[0]
    if data.ndim < 2:
        imp.fail(f"input must have rank >= 2, got shape {format_dims(data.shape)}")
    if optional_input(node, 1) is not None and arrays[1].size != 1:
        imp.fail(f"k must be one integer, got shape {format_dims(arrays[1].shape)}")
    return _reference(imp, node, *arrays)


@_folds("ReduceSum", "ReduceProd", "ReduceMax", "ReduceMin", "ReduceMean")
def _fold_reduce(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any], arrays: list[np.ndarray]
) -> np.ndarray:
    """Axes from the attribute (older versions) or the input, distinct and in range; no
    axes reduce all (or nothing, with `noop_with_empty_axes`). Over an empty axis the
    reference gives ONNX's identities (0, 1, the least or greatest value); a mean there
    is undefined."""
    data = arrays[0]
    axes = int_list(imp, node, attrs, "axes", 1) or []
    if axes:
        reduced: Sequence[int] = distinct_axes(imp, axes, data.ndim)
    else:
        reduced = [] if attrs.get("noop_with_empty_axes", 0) else range(data.ndim)
    if node.op_type == "ReduceMean" and any(data.shape[axis] == 0 for axis in reduced):
        imp.fail(f"the mean over an empty axis of shape {format_dims(data.shape)} is undefined")
    return _reference(imp, node, *arrays)
