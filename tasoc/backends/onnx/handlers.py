"""How each ONNX op imports: one handler per op type (`folding` evaluates integer
shape arithmetic at import time; `operands` reads configuring inputs).

A handler reads its node through the `Importer` (operands as SSA values or known
values, attributes as Python values) and returns the node's output values; anything
the dialect cannot express ends in `imp.fail(...)`, one line naming what. The table
of what maps to what is in `docs/onnx.md`.

This module holds the handlers of constants, linear algebra, the ops that move data
without computing on it, and softmax; those of other families live in a module each
(`activations`, `elementwise`, `einsum`, `indexing`, `normalization`, `padding`,
`recurrent`, `reductions`, `resize`, `windows`), and `HANDLERS` gathers them all.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx import (
    activations,
    einsum,
    elementwise,
    indexing,
    normalization,
    padding,
    recurrent,
    reductions,
    resize,
    windows,
)
from tasoc.backends.onnx.elementwise import in_float32
from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import (
    Known,
    Origin,
    Value,
    fill_forms,
    literal_forms,
    pick_form,
)
from tasoc.backends.onnx.operands import (
    axis_index,
    distinct_axes,
    element_type,
    f32_decimal,
    int_list,
    optional_input,
    slice_specs,
)
from tasoc.backends.onnx.registry import Handler, merged, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = merged(
    activations.HANDLERS,
    einsum.HANDLERS,
    elementwise.HANDLERS,
    indexing.HANDLERS,
    normalization.HANDLERS,
    padding.HANDLERS,
    recurrent.HANDLERS,
    reductions.HANDLERS,
    resize.HANDLERS,
    windows.HANDLERS,
)
"""How each ONNX op type is imported (default domain)."""
_handles = registrar(HANDLERS)


# ---------------------------------------------------------------------- constants


@_handles("Constant")
def _constant(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if "value" in attrs:
        array = imp.tensor_value(attrs["value"], "value")
    elif "value_float" in attrs or "value_floats" in attrs:
        array = np.asarray(attrs.get("value_float", attrs.get("value_floats")), np.float32)
    elif "value_int" in attrs or "value_ints" in attrs:
        array = np.asarray(attrs.get("value_int", attrs.get("value_ints")), np.int64)
    else:
        imp.fail(f"only dense tensor values are supported, got {', '.join(attrs)}")
    form = pick_form(literal_forms(array), imp.form(node))
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("ConstantOfShape")
def _constant_of_shape(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> list[Value | None]:
    shape = [int(d) for d in imp.known_ints(node.input[0], "shape").reshape(-1)]
    if min(shape, default=0) < 0:
        imp.fail(f"shape {shape} has a negative dim")
    fill = np.zeros(1, np.float32)
    if "value" in attrs:
        fill = imp.tensor_value(attrs["value"], "value")
    if fill.size != 1:
        imp.fail(f"value must hold one element, got shape {format_dims(fill.shape)}")
    imp.check_size(shape, fill.dtype, "the result")
    # A read-only view of the one value: a large fill costs memory only if it becomes a
    # weight (ones, zeros and C_pool are ops, and a literal is at most 1024 elements).
    array = np.broadcast_to(fill.reshape(()), shape)
    form = pick_form(fill_forms(array), imp.form(node))
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("EyeLike")
def _eye_like(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    source = imp.value(node.input[0])
    shape = imp.shape(node.input[0])
    if len(shape) != 2:
        imp.fail(f"input must be 2-D, got shape {format_dims(shape)}")
    dtype = (
        element_type(imp, attrs["dtype"], "dtype")
        if "dtype" in attrs
        else source.array.dtype
        if isinstance(source, Known)
        else numpy_dtype(G.sig_of(source.type).dtype)
    )
    k = attrs.get("k", 0)
    imp.check_size(shape, dtype, "the result")
    array = np.eye(shape[0], shape[1], k, dtype=dtype)
    form = "i_matmul" if shape[0] == shape[1] and k == 0 else None
    return [Known(node.output[0], array, Origin.LITERAL, form)]


@_handles("Shape")
def _shape(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    start, end = attrs.get("start", 0), attrs.get("end", len(shape))
    array = np.asarray(shape[start:end], np.int64)
    return [Known(node.output[0], array, Origin.DERIVED)]


@_handles("Identity")
def _identity(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.value(node.input[0])]


@_handles("Dropout")
def _dropout(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    training = optional_input(node, 2)
    flag = None if training is None else imp.known(training, "training_mode")
    if flag is not None and flag.size != 1:
        imp.fail(f"training_mode must be one boolean, got shape {format_dims(flag.shape)}")
    if flag is not None and bool(flag.reshape(-1)[0]):
        imp.fail("training mode is not supported (the importer builds inference graphs)")
    return [imp.value(node.input[0])]


# ----------------------------------------------------------------- linear algebra


@_handles("MatMul")
def _matmul(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = imp.data(node.input[0]), imp.data(node.input[1])
    a_shape, b_shape = imp.shape(a), imp.shape(b)
    # NumPy semantics: a 1-D operand is a row (left) or column (right) vector that
    # disappears from the result again.
    if len(a_shape) == 1:
        a = imp.reshape(a, (1, *a_shape))
    if len(b_shape) == 1:
        b = imp.reshape(b, (*b_shape, 1))
    y = imp.op(G.MatmulOp, a, b)
    if len(a_shape) == 1 or len(b_shape) == 1:
        shape = list(imp.shape(y))
        if len(b_shape) == 1:
            shape.pop(-1)
        if len(a_shape) == 1:
            shape.pop(-1 if len(b_shape) == 1 else -2)
        y = imp.reshape(y, shape)
    return [y]


@_handles("Gemm")
def _gemm(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = imp.data(node.input[0]), imp.data(node.input[1])
    if attrs.get("transA", 0):
        a = imp.op(G.TransposeOp, a, perm=(1, 0))
    if attrs.get("transB", 0):
        b = imp.op(G.TransposeOp, b, perm=(1, 0))
    y = imp.op(G.MatmulOp, a, b)
    alpha, beta = attrs.get("alpha", 1.0), attrs.get("beta", 1.0)
    if alpha != 1.0:
        y = imp.op(G.ScaleOp, y, imp.literal(alpha, y))
    bias = optional_input(node, 2)
    if bias is not None and beta != 0.0:
        c = imp.data(bias)
        if beta != 1.0:
            c = imp.op(G.ScaleOp, c, imp.literal(beta, c))
        y = imp.op(G.AddOp, y, c)
    return [y]


# -------------------------------------------------------------------------- structure


@_handles("Concat")
def _concat(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.ConcatOp, *[imp.data(n) for n in node.input if n], axis=attrs["axis"])]


@_handles("Split")
def _split(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", 0))
    size = shape[axis_index(imp, axis, len(shape))]
    sizes = int_list(imp, node, attrs, "split", 1)
    if sizes is None:
        count = int(attrs.get("num_outputs", len(node.output)))
        if count < 1:
            imp.fail(f"num_outputs {count} must be at least 1")
        if "num_outputs" in attrs:  # opset 18: the last piece may be smaller
            chunk = -(-size // count)
            sizes = [chunk] * (count - 1) + [size - chunk * (count - 1)]
        elif size % count:
            imp.fail(f"dimension {axis} of size {size} does not split into {count} equal parts")
        else:
            sizes = [size // count] * count
    return list(imp.ops(G.SplitOp, x, axis=axis, sizes=tuple(sizes)))


def _reshape_target(
    imp: Importer, in_shape: Sequence[int], spec: Sequence[int], allow_zero: bool
) -> tuple[int, ...]:
    """ONNX Reshape's target: 0 copies the input dimension (unless allowzero), one -1
    takes what is left."""
    dims = [
        in_shape[i] if d == 0 and not allow_zero and i < len(in_shape) else int(d)
        for i, d in enumerate(spec)
    ]
    total = math.prod(in_shape)
    if dims.count(-1) == 1:
        rest = math.prod(d for d in dims if d != -1)
        if rest and total % rest == 0:
            dims[dims.index(-1)] = total // rest
    if min(dims, default=0) < 0 or math.prod(dims) != total:
        imp.fail(f"cannot reshape {format_dims(in_shape)} to {list(spec)}")
    return tuple(dims)


@_handles("Reshape")
def _reshape(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    spec = [int(d) for d in imp.known_ints(node.input[1], "shape").reshape(-1)]
    target = _reshape_target(imp, imp.shape(node.input[0]), spec, bool(attrs.get("allowzero", 0)))
    return [imp.reshaped(node.input[0], target)]


@_handles("Flatten")
def _flatten(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    axis = int(attrs.get("axis", 1))
    axis = axis + len(shape) if axis < 0 else axis
    if not 0 <= axis <= len(shape):
        imp.fail(f"axis {attrs.get('axis')} is out of range for rank {len(shape)}")
    target = (math.prod(shape[:axis]), math.prod(shape[axis:]))
    return [imp.reshaped(node.input[0], target)]


@_handles("Squeeze")
def _squeeze(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = imp.shape(node.input[0])
    axes = int_list(imp, node, attrs, "axes", 1)
    if axes is None:
        drop = {i for i, d in enumerate(shape) if d == 1}
    else:
        drop = set(distinct_axes(imp, axes, len(shape)))
    if any(shape[a] != 1 for a in drop):
        imp.fail(f"cannot squeeze axes {sorted(drop)} of shape {format_dims(shape)}")
    return [imp.reshaped(node.input[0], [d for i, d in enumerate(shape) if i not in drop])]


@_handles("Unsqueeze")
def _unsqueeze(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    shape = list(imp.shape(node.input[0]))
    axes = int_list(imp, node, attrs, "axes", 1) or []
    rank = len(shape) + len(axes)
    for axis in sorted(distinct_axes(imp, axes, rank)):
        shape.insert(axis, 1)
    return [imp.reshaped(node.input[0], shape)]


@_handles("Transpose")
def _transpose(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    perm = attrs.get("perm", list(reversed(range(len(imp.shape(x))))))
    return [imp.op(G.TransposeOp, x, perm=tuple(int(p) for p in perm))]


@_handles("Slice")
def _slice(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    for axis, start, end, step in slice_specs(imp, node, len(imp.shape(x))):
        if step != 1:
            imp.fail(f"step {step} on axis {axis} is not supported (only 1)")
        bounds = range(imp.shape(x)[axis])[start:end]
        x = imp.take(x, axis, bounds.start, max(bounds.start, bounds.stop))
    return [x]


# -------------------------------------------------------------------------- model ops


def _over_axis(
    imp: Importer,
    node: onnx.NodeProto,
    attrs: dict[str, Any],
    normalize: Callable[[SSAValue, int], SSAValue],
) -> SSAValue:
    """`normalize(x, axis)` for Softmax and LogSoftmax: from opset 13 over the one axis
    `axis` (default -1); before, over all dims from `axis` (default 1) on, as one row
    (`reshape` -> normalize the rows -> `reshape`, unless `axis` is the last)."""
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    counted = axis_index(imp, axis, len(shape))
    if imp.opset >= 13 or counted == len(shape) - 1:
        return normalize(x, axis)
    rows = imp.reshape(x, (math.prod(shape[:counted]), math.prod(shape[counted:])))
    return imp.reshape(normalize(rows, 1), shape)


@_handles("Softmax")
def _softmax(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [_over_axis(imp, node, attrs, lambda x, axis: imp.op(G.SoftmaxOp, x, axis=axis))]


@_handles("LogSoftmax")
def _log_softmax(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """x - max - log(sum(exp(x - max))) over the axis, as onnxruntime computes it (the
    max keeps exp from overflowing); float16 and bfloat16 in float32, rounded once."""

    def log_softmax(x: SSAValue, axis: int) -> SSAValue:
        axis %= len(imp.shape(x))
        peak = imp.op(G.ReduceOp, x, kind="max", axes=(axis,), keepdims=True)
        shifted = imp.op(G.SubOp, x, peak)
        exp = imp.op(G.ExpOp, shifted)
        total = imp.op(G.ReduceOp, exp, kind="sum", axes=(axis,), keepdims=True)
        return imp.op(G.SubOp, shifted, imp.op(G.LogOp, total))

    def normalize(x: SSAValue, axis: int) -> SSAValue:
        return in_float32(imp, x, lambda wide: log_softmax(wide, axis))

    return [_over_axis(imp, node, attrs, normalize)]


@_handles("BatchNormalization")
def _batch_norm(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if attrs.get("training_mode", 0):
        imp.fail("training mode is not supported (the importer builds inference graphs)")
    x, scale, bias, mean, var = (imp.data(name) for name in node.input[:5])
    epsilon = f32_decimal(attrs.get("epsilon", 1e-5))
    return [imp.op(G.BatchnormOp, x, scale, bias, mean, var, epsilon=epsilon)]
