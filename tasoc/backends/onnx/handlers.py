"""How each ONNX op imports: one handler per op type (`folding` evaluates integer
shape arithmetic at import time; `operands` reads configuring inputs).

A handler reads its node through the `Importer` (operands as SSA values or known
values, attributes as Python values) and returns the node's output values; anything
the dialect cannot express ends in `imp.fail(...)`, one line naming what. The table
of what maps to what is in `docs/onnx.md`.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto
from xdsl.ir import SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.conventions import DTYPES_BY_ONNX
from tasoc.backends.onnx.errors import format_dims, shown
from tasoc.backends.onnx.known_values import (
    Known,
    Origin,
    Value,
    fill_forms,
    is_float,
    literal_forms,
    pick_form,
)
from tasoc.backends.onnx.operands import (
    axis_index,
    distinct_axes,
    element_type,
    int_list,
    optional_input,
    slice_specs,
)
from tasoc.ir import graph as G
from tasoc.ir.shapes import window_pads

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer


Handler = Callable[["Importer", onnx.NodeProto, dict[str, Any]], list[Value | None]]
"""Imports a node: its output values (None for one its readers take over)."""
HANDLERS: dict[str, Handler] = {}
"""How each ONNX op type is imported (default domain)."""


def _handles(*op_types: str) -> Callable[[Handler], Handler]:
    def register(fn: Handler) -> Handler:
        for op_type in op_types:
            HANDLERS[op_type] = fn
        return fn

    return register


# -------------------------------------------------------------------------- helpers


def canonical_padding(
    pads: tuple[int, int, int, int],
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    form: str | None = None,
) -> str | tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) pads as the IR writes them: `valid` when all
    zero, `same` when they are what `same` gives for this window, else the four ints.
    `form` (`same`, `valid` or `explicit`) picks among these where they agree.

    TASO's rewrite rules are stated for `same`/`valid`, so imported convolutions use
    those names whenever they mean the same thing.
    """
    meanings = {
        "valid": (0, 0, 0, 0),
        "same": window_pads("same", in_hw, kernel, strides),
        "explicit": pads,
    }
    if form is not None and meanings.get(form) == pads:
        return pads if form == "explicit" else form
    return next((name for name in ("valid", "same") if meanings[name] == pads), pads)


def _f32_decimal(value: float) -> float:
    """The shortest decimal that rounds to the same float32 as `value`.

    ONNX float attributes are float32 while IR attributes are f64: an epsilon of
    1e-5 comes back from ONNX as 9.99999974e-06, and this turns it into 1e-5 again.
    """
    return float(np.format_float_scientific(np.float32(value), unique=True))


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


@_handles("Cast")
def _cast(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    source = G.sig_of(x.type).dtype
    element_type(imp, attrs["to"], "to")
    target = DTYPES_BY_ONNX.get(attrs["to"])
    if target != source:
        name = TensorProto.DataType.Name(attrs["to"])
        imp.fail(f"a cast from {source} to {name} is not expressible (the dialect has no cast)")
    return [x]


# ------------------------------------------------------------------- element-wise

_UNARY = {"Relu": G.ReluOp, "Sigmoid": G.SigmoidOp, "Tanh": G.TanhOp}


@_handles(*_UNARY)
def _unary(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    conv = x.owner
    if (
        node.op_type == "Relu"
        and imp.form(node) == "fused"
        and isinstance(conv, G.Conv2dOp)
        and conv.py_attrs()["activation"] == "none"
        and imp.readers[node.input[0]] == 1
        and not imp.is_output(node.input[0])
    ):
        conv.properties["activation"] = G.to_attr("relu")
        return [x]
    return [imp.op(_UNARY[node.op_type], x)]


@_handles("Gelu")
def _gelu(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    if attrs.get("approximate", "none") == "none":
        return [imp.op(G.GeluOp, x)]
    # 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), spelled in graph ops.
    cube = imp.op(G.MulOp, imp.op(G.MulOp, x, x), x)
    inner = imp.op(G.AddOp, x, imp.op(G.ScaleOp, cube, imp.literal(0.044715, x)))
    tanh = imp.op(G.TanhOp, imp.op(G.ScaleOp, inner, imp.literal(math.sqrt(2 / math.pi), x)))
    half_x = imp.op(G.ScaleOp, x, imp.literal(0.5, x))
    return [imp.op(G.MulOp, half_x, imp.op(G.AddOp, tanh, imp.literal(1.0, x)))]


@_handles("Add")
def _add(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.AddOp, imp.data(node.input[0]), imp.data(node.input[1]))]


@_handles("Mul")
def _mul(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if imp.form(node) == "mul":
        return [imp.op(G.MulOp, imp.data(node.input[0]), imp.data(node.input[1]))]
    return [_multiply(imp, node.input[0], node.input[1])]


def _multiply(imp: Importer, a: str, b: str) -> SSAValue:
    """a * b: `graph.scale` when one side is a known scalar, else a broadcast `mul`."""
    for x, s in ((a, b), (b, a)):
        scalar = imp.scalar(s, len(imp.shape(x)))
        if scalar is not None:
            return imp.op(G.ScaleOp, imp.data(x), scalar)
    return imp.op(G.MulOp, imp.data(a), imp.data(b))


@_handles("Sub")
def _sub(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = node.input[0], node.input[1]
    subtrahend = imp.value(b)
    if isinstance(subtrahend, Known) and subtrahend.origin is not Origin.INITIALIZER:
        negated = Known(f"{subtrahend.name}.negated", -subtrahend.array, Origin.DERIVED)
        return [imp.op(G.AddOp, imp.data(a), imp.materialize(negated))]
    y = imp.data(b)
    return [imp.op(G.AddOp, imp.data(a), imp.op(G.ScaleOp, y, imp.literal(-1.0, y)))]


@_handles("Div")
def _div(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    divisor = imp.value(node.input[1])
    if not isinstance(divisor, Known):
        imp.fail(
            f"division by the computed tensor {shown(node.input[1])} is not expressible "
            "(the dialect has no div; only division by a constant imports)"
        )
    if not is_float(divisor.array):
        imp.fail("integer division of run-time values is not expressible")
    # The reciprocal of a weight is a weight (named `<weight>.reciprocal`), of a literal a literal.
    origin = Origin.INITIALIZER if divisor.origin is Origin.INITIALIZER else Origin.DERIVED
    # x / 0 and x * (1 / 0) are the same inf or nan; an overflowing reciprocal (of a
    # subnormal) is not, and is an error (the importer raises floating-point errors).
    with np.errstate(divide="ignore"):
        inverse = np.asarray(1 / divisor.array)
    reciprocal = Known(f"{divisor.name}.reciprocal", inverse, origin)
    imp.env[reciprocal.name] = reciprocal
    return [_multiply(imp, node.input[0], reciprocal.name)]


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


def _window(
    imp: Importer, attrs: dict[str, Any], in_hw: tuple[int, int], kernel: tuple[int, int]
) -> tuple[tuple[int, int], tuple[int, int, int, int]]:
    """Strides and explicit (top, left, bottom, right) pads of a Conv or pool node."""
    dilations = tuple(attrs.get("dilations", (1, 1)))
    if any(d != 1 for d in dilations):
        imp.fail(f"dilations {list(dilations)} are not supported (only 1)")
    strides = tuple(attrs.get("strides", (1, 1)))
    if len(strides) != 2 or min(strides) < 1:
        imp.fail(f"strides {list(strides)} must be two positive integers")
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        imp.fail(f"auto_pad {shown(auto_pad)} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        top, left, bottom, right = window_pads("same", in_hw, kernel, (strides[0], strides[1]))
        pads = (
            (top, left, bottom, right) if auto_pad == "SAME_UPPER" else (bottom, right, top, left)
        )
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        given = tuple(int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
        if len(given) != 4 or min(given) < 0:
            imp.fail(f"pads {list(given)} must be four non-negative integers")
        pads = (given[0], given[1], given[2], given[3])
    return (strides[0], strides[1]), pads


def _spatial_input(imp: Importer, name: str) -> tuple[SSAValue, tuple[int, int]]:
    x = imp.data(name)
    shape = imp.shape(x)
    if len(shape) != 4:
        imp.fail(f"only 2-D windows over NCHW inputs are supported, got a rank-{len(shape)} input")
    return x, (shape[2], shape[3])


@_handles("Conv")
def _conv(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, in_hw = _spatial_input(imp, node.input[0])
    weight = imp.value(node.input[1])
    w_shape = imp.shape(node.input[1])
    if len(w_shape) != 4:
        imp.fail(f"weight must be 4-D (OIHW), got shape {format_dims(w_shape)}")
    kernel = (w_shape[2], w_shape[3])
    strides, pads = _window(imp, attrs, in_hw, kernel)
    # The exporter writes an average pool whose padding onnxruntime's pools reject as
    # TASO's equal depthwise convolution with C_pool, and records it ("avg_pool same").
    pool_form, _, padding_form = (imp.form(node) or "").rpartition(" ")
    padding = canonical_padding(pads, in_hw, kernel, strides, padding_form or None)
    groups = int(attrs.get("group", 1))
    bias = optional_input(node, 2)
    if (
        pool_form == "avg_pool"
        and isinstance(weight, Known)
        and weight.form == "c_pool"
        and groups == w_shape[0] == imp.shape(x)[1]
        and bias is None
    ):
        return [imp.op(G.Pool2dOp, x, kind="avg", kernel=kernel, strides=strides, padding=padding)]
    w = imp.data(node.input[1])
    y = imp.op(G.Conv2dOp, x, w, strides=strides, padding=padding, activation="none", groups=groups)
    if bias is not None:
        y = imp.op(G.AddOp, y, imp.reshape(imp.data(bias), (1, w_shape[0], 1, 1)))
    return [y]


def _pool_window(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> tuple[SSAValue, tuple[int, int], tuple[int, int], tuple[int, int], tuple[int, int, int, int]]:
    """Input, input size, kernel, strides and explicit pads of MaxPool/AveragePool,
    counting a -inf Pad node in front of a MaxPool as the pool's own padding."""
    source, before = imp.max_pool_pads.get(node.input[0], (node.input[0], (0, 0, 0, 0)))
    x, in_hw = _spatial_input(imp, source)
    kernel_attr = tuple(attrs["kernel_shape"])
    if len(kernel_attr) != 2:
        imp.fail(f"kernel_shape {list(kernel_attr)} must be two integers")
    kernel = (int(kernel_attr[0]), int(kernel_attr[1]))
    padded_hw = (in_hw[0] + before[0] + before[2], in_hw[1] + before[1] + before[3])
    strides, own = _window(imp, attrs, padded_hw, kernel)
    if attrs.get("ceil_mode", 0):
        for size, k, s, low, high in zip(padded_hw, kernel, strides, own[:2], own[2:], strict=True):
            if (size + low + high - k) % s:
                imp.fail("ceil_mode=1 changes the output size here; only floor mode imports")
    top, left, bottom, right = (a + b for a, b in zip(before, own, strict=True))
    return x, in_hw, kernel, strides, (top, left, bottom, right)


@_handles("MaxPool")
def _max_pool(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, in_hw, kernel, strides, pads = _pool_window(imp, node, attrs)
    padding = canonical_padding(pads, in_hw, kernel, strides, imp.form(node))
    return [imp.op(G.Pool2dOp, x, kind="max", kernel=kernel, strides=strides, padding=padding)]


@_handles("AveragePool")
def _average_pool(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, in_hw, kernel, strides, pads = _pool_window(imp, node, attrs)
    padding = canonical_padding(pads, in_hw, kernel, strides, imp.form(node))
    y = imp.op(G.Pool2dOp, x, kind="avg", kernel=kernel, strides=strides, padding=padding)
    if attrs.get("count_include_pad", 0) or not any(pads):
        return [y]
    # graph.pool2d divides by kh*kw; ONNX divides by the window's unpadded elements.
    # That count is a product of a row and a column count, so two small constant
    # factors (kh / rows_in_window, kw / cols_in_window) correct it exactly.
    out_hw = imp.shape(y)[2:]
    for axis, (size, k, s, low) in enumerate(zip(in_hw, kernel, strides, pads[:2], strict=True)):
        starts = np.arange(out_hw[axis]) * s - low
        inside = np.minimum(starts + k, size) - np.maximum(starts, 0)
        if np.all(inside == k):
            continue
        if not np.all(inside > 0):
            imp.fail(f"pads {list(pads)} leave a window with no input element to average")
        factor = (k / inside).astype(numpy_dtype(G.sig_of(y.type).dtype))
        shape = (1, 1, -1, 1) if axis == 0 else (1, 1, 1, -1)
        correction = Known(f"{node.output[0]}.count{axis}", factor.reshape(shape), Origin.DERIVED)
        y = imp.op(G.MulOp, y, imp.materialize(correction))
    return [y]


def _global_pool(kind: str) -> Handler:
    def handler(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        x = imp.data(node.input[0])
        shape = imp.shape(x)
        if len(shape) == 4:
            return [
                imp.op(G.Pool2dOp, x, kind=kind, kernel=shape[2:], strides=(1, 1), padding="valid")
            ]
        axes = tuple(range(2, len(shape)))
        reduction = "mean" if kind == "avg" else "max"
        return [imp.op(G.ReduceOp, x, kind=reduction, axes=axes, keepdims=True)]

    return handler


HANDLERS["GlobalAveragePool"] = _global_pool("avg")
HANDLERS["GlobalMaxPool"] = _global_pool("max")


@_handles("Pad")
def _pad(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """A symmetric zero padding of the last two dims of a 4-D tensor is TASO's enlarge
    (which is how the exporter writes it); other paddings have no graph op."""
    x = imp.data(node.input[0])
    rank = len(imp.shape(x))
    pads = int_list(imp, node, attrs, "pads", 1) or []
    given_axes = int_list(imp, node, attrs, "axes", 3)
    axes = list(range(rank)) if given_axes is None else distinct_axes(imp, given_axes, rank)
    if len(pads) != 2 * len(axes):
        imp.fail(f"pads {pads} must hold two values (begin, end) for each of {len(axes)} axes")
    full = [0] * (2 * rank)
    for i, axis in enumerate(axes):
        full[axis], full[rank + axis] = pads[i], pads[len(axes) + i]
    pads = full
    fill_name = optional_input(node, 2)
    fill = imp.known(fill_name, "constant_value").reshape(-1) if fill_name else np.zeros(1)
    if fill.size != 1:
        imp.fail(f"constant_value must hold one element, got {fill.size}")
    spatial = (
        attrs.get("mode", "constant") == "constant"
        and rank == 4
        and pads[:2] == pads[4:6] == [0, 0]
        and min(pads) >= 0
    )
    if spatial and pads[2:4] == pads[6:8] and fill[0] == 0:
        _, _, h, w = imp.shape(x)
        return [imp.op(G.EnlargeOp, x, kernel=(h + 2 * pads[2], w + 2 * pads[3]))]
    readers = {n.op_type for n in imp.graph.node if node.output[0] in n.input}
    feeds_max_pools = readers == {"MaxPool"} and not imp.is_output(node.output[0])
    if spatial and fill[0] == -np.inf and feeds_max_pools:
        # -inf is what max pooling pads with: the MaxPools take the padding over.
        imp.max_pool_pads[node.output[0]] = (node.input[0], (pads[2], pads[3], pads[6], pads[7]))
        return [None]
    imp.fail(
        "only symmetric zero padding of the last two dims of a 4-D tensor (graph.enlarge) "
        f"or -inf padding before MaxPool imports; got mode {attrs.get('mode', 'constant')}, "
        f"pads {pads}, value {fill[0]}"
    )


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


@_handles("Gather")
def _gather(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    data, indices = node.input[0], node.input[1]
    axis = int(attrs.get("axis", 0))
    rank = len(imp.shape(data))
    if rank == 2 and axis_index(imp, axis, rank) == 0:
        return [imp.op(G.EmbeddingOp, imp.data(indices), imp.data(data))]
    index = imp.value(indices)
    if isinstance(index, Known) and index.array.ndim == 0:
        axis = axis_index(imp, axis, rank)
        x = imp.data(data)
        size = imp.shape(x)[axis]
        position = int(imp.known_ints(indices, "indices"))
        if not -size <= position < size:
            imp.fail(f"index {position} is out of range for axis {axis} of size {size}")
        piece = imp.take(x, axis, position % size, position % size + 1)
        shape = [d for i, d in enumerate(imp.shape(piece)) if i != axis]
        return [imp.reshape(piece, shape)]
    imp.fail(
        "only row lookups in a 2-D table (axis 0, as graph.embedding) and constant "
        "scalar indices import"
    )


def _reduction(kind: str) -> Handler:
    def handler(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        x = imp.data(node.input[0])
        axes = int_list(imp, node, attrs, "axes", 1) or []
        if not axes and attrs.get("noop_with_empty_axes", 0):
            return [x]
        axes = axes or list(range(len(imp.shape(x))))
        keepdims = bool(attrs.get("keepdims", 1))
        return [imp.op(G.ReduceOp, x, kind=kind, axes=tuple(axes), keepdims=keepdims)]

    return handler


HANDLERS["ReduceSum"] = _reduction("sum")
HANDLERS["ReduceMean"] = _reduction("mean")
HANDLERS["ReduceMax"] = _reduction("max")


# -------------------------------------------------------------------------- model ops


@_handles("Softmax")
def _softmax(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", -1 if imp.opset >= 13 else 1))
    if imp.opset >= 13 or axis_index(imp, axis, len(shape)) == len(shape) - 1:
        return [imp.op(G.SoftmaxOp, x, axis=axis)]
    # Before opset 13 softmax normalizes over all dims from `axis` on, as one row.
    axis = axis_index(imp, axis, len(shape))
    rows = imp.reshape(x, (math.prod(shape[:axis]), math.prod(shape[axis:])))
    return [imp.reshape(imp.op(G.SoftmaxOp, rows, axis=1), shape)]


@_handles("BatchNormalization")
def _batch_norm(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if attrs.get("training_mode", 0):
        imp.fail("training mode is not supported (the importer builds inference graphs)")
    x, scale, bias, mean, var = (imp.data(name) for name in node.input[:5])
    epsilon = _f32_decimal(attrs.get("epsilon", 1e-5))
    return [imp.op(G.BatchnormOp, x, scale, bias, mean, var, epsilon=epsilon)]


@_handles("LayerNormalization")
def _layer_norm(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = int(attrs.get("axis", -1))
    normalized = shape[axis_index(imp, axis, len(shape)) :]
    gamma = imp.data(node.input[1])
    if imp.shape(gamma) != normalized:
        gamma = imp.reshape(gamma, normalized)
    bias = optional_input(node, 2)
    if bias is None:
        beta = imp.op(G.ZerosOp, shape=normalized, dtype=G.sig_of(x.type).dtype)
    else:
        beta = imp.data(bias)
        if imp.shape(beta) != normalized:
            beta = imp.reshape(beta, normalized)
    epsilon = _f32_decimal(attrs.get("epsilon", 1e-5))
    return [imp.op(G.LayernormOp, x, gamma, beta, axis=axis, epsilon=epsilon)]
