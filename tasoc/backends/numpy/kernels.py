"""NumPy reference kernels: the semantic ground truth of every `graph` op.

One function per op maps the op's Python attributes (`GraphOp.py_attrs()`) and its
operand arrays to its result arrays. Every other backend, and every rewrite rule, is
judged against these, so they favour being obviously right over being fast: each is
a direct transcription of the op's docstring in `tasoc.ir.graph`.

Precision policy. Float operands are widened to float64, the kernel computes in
float64 and its float results are rounded back to the operand's type once (bfloat16
is `ml_dtypes.bfloat16`, which jax installs). So every op of the reference is
rounded once, as if computed exactly: the ground truth the backends are judged
against carries no error of its own from summation order. That matters for long
chains: through a training step's backward (batch statistics, relu kinks) the
errors of two float32 computations grow apart, and only against a reference that
makes none does a backend's own error show. Integers compute in their own type (sums
wrap like fixed-width integers do, and an integer `mean` rounds toward zero), and so
do booleans. `cast` alone is not widened: its operand's own type is what it converts.
The JAX lowering applies the same shape of policy with float32 as the wide type for
float16 and bfloat16 (`in_float32`), which is what a careful mixed-precision
implementation does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from functools import wraps
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tasoc.backends import NUMPY_DTYPES, numpy_dtype
from tasoc.ir.shapes import ConstData, DType, window_pads

Kernel = Callable[[Mapping[str, Any], Sequence[np.ndarray]], list[np.ndarray]]
AnyKernel = Callable[[Mapping[str, Any], Sequence[Any]], list[Any]]
"""A kernel over any array type with `.dtype` and `.astype` (NumPy or JAX)."""

LOW_PRECISION: frozenset[np.dtype] = frozenset((NUMPY_DTYPES[DType.F16], NUMPY_DTYPES[DType.BF16]))
FLOATS: frozenset[np.dtype] = LOW_PRECISION | {NUMPY_DTYPES[DType.F32]}


def widened(kernel: AnyKernel, narrow: frozenset[np.dtype], wide: type) -> AnyKernel:
    """Run `kernel` on `wide` copies of the operands whose type is in `narrow` and
    round its `wide` results back to the first such operand's type.

    Only `.dtype` and `.astype` are used, so the JAX lowering applies the same policy
    to its kernels. Integer operands (embedding ids, labels) pass through unchanged.
    """

    @wraps(kernel)
    def run(attrs: Mapping[str, Any], inputs: Sequence[Any]) -> list[Any]:
        low = next((a.dtype for a in inputs if a.dtype in narrow), None)
        if low is None:
            return kernel(attrs, inputs)
        wide_inputs = [a.astype(wide) if a.dtype in narrow else a for a in inputs]
        return [r.astype(low) if r.dtype == wide else r for r in kernel(attrs, wide_inputs)]

    return run


def in_float32(kernel: AnyKernel) -> AnyKernel:
    """float16/bfloat16 operands computed in float32 (the JAX lowering's policy)."""
    return widened(kernel, LOW_PRECISION, np.float32)


def in_float64(kernel: AnyKernel) -> AnyKernel:
    """Every float operand computed in float64 (the reference's policy)."""
    return widened(kernel, FLOATS, np.float64)


KERNELS: dict[str, Kernel] = {}
"""Reference kernel by op short name (`"conv2d"`), one for every op in `GRAPH_OPS`."""


def _kernel(*names: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for name in names:
            KERNELS[name] = in_float64(fn)
        return fn

    return register


# ------------------------------------------------------------------ element-wise


@_kernel("add")
def _add(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.add(inputs[0], inputs[1])]


@_kernel("mul")
def _mul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.multiply(inputs[0], inputs[1])]


@_kernel("scale")
def _scale(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, scalar = inputs
    return [np.multiply(x, scalar)]


@_kernel("relu")
def _relu(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.maximum(inputs[0], 0)]


@_kernel("sigmoid")
def _sigmoid(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    # 1/(1+exp(-x)) rewritten through tanh: the same function, without overflow in exp.
    return [0.5 * (1 + np.tanh(0.5 * inputs[0]))]


@_kernel("tanh")
def _tanh(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.tanh(inputs[0])]


_ERFC = np.frompyfunc(math.erfc, 1, 1)


@_kernel("gelu")
def _gelu(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    # NumPy has no erf; math.erfc is exact to double precision, and Phi(x) written as
    # erfc(-x/sqrt 2)/2 keeps its relative accuracy for very negative x.
    x = inputs[0]
    phi = 0.5 * np.asarray(_ERFC(-x.astype(np.float64) / math.sqrt(2)), np.float64)
    return [(x * phi).astype(x.dtype)]


# ------------------------------------------------------------------------ linear


@_kernel("transpose")
def _transpose(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.transpose(inputs[0], attrs["perm"])]


@_kernel("matmul")
def _matmul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.matmul(inputs[0], inputs[1])]


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    padding: str | Sequence[int],
    fill: float,
) -> np.ndarray:
    """All kh x kw windows of an NCHW tensor: shape [N, C, OH, OW, kh, kw].

    Padding is `shapes.window_pads`, filled with `fill`, so the result has exactly
    the output size the type system inferred.
    """
    top, left, bottom, right = window_pads(padding, x.shape[2:4], kernel, strides)
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    windows = sliding_window_view(padded, kernel, axis=(2, 3))
    return windows[:, :, :: strides[0], :: strides[1]]


@_kernel("conv2d")
def _conv2d(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, w = inputs
    groups = attrs["groups"]
    out_channels, group_channels, kh, kw = w.shape
    windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], fill=0.0)
    n, _, oh, ow = windows.shape[:4]
    # Channel c of group g is input channel g*Cg + c; output o of group g likewise.
    grouped = windows.reshape(n, groups, group_channels, oh, ow, kh, kw)
    weights = w.reshape(groups, out_channels // groups, group_channels, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", grouped, weights, optimize=True)
    out = out.reshape(n, out_channels, oh, ow)
    return [np.maximum(out, 0) if attrs["activation"] == "relu" else out]


@_kernel("enlarge")
def _enlarge(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    (w,) = inputs
    kh, kw = attrs["kernel"]
    dh, dw = (kh - w.shape[2]) // 2, (kw - w.shape[3]) // 2
    return [np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw)))]


@_kernel("pool2d")
def _pool2d(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    kh, kw = attrs["kernel"]
    if attrs["kind"] == "max":
        windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], fill=-np.inf)
        return [windows.max(axis=(4, 5))]
    # Average pooling counts the padded zeros: divide by the full window size.
    windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], fill=0.0)
    return [(windows.sum(axis=(4, 5)) / (kh * kw)).astype(x.dtype)]


# --------------------------------------------------------------------- structure


@_kernel("concat")
def _concat(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate(inputs, axis=attrs["axis"])]


@_kernel("split")
def _split(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return list(np.split(inputs[0], cuts, axis=attrs["axis"]))


@_kernel("reshape")
def _reshape(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [inputs[0].reshape(attrs["shape"])]


# --------------------------------------------------------------------- constants


@_kernel("ones")
def _ones(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.ones(attrs["shape"], numpy_dtype(attrs["dtype"]))]


@_kernel("zeros")
def _zeros(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.zeros(attrs["shape"], numpy_dtype(attrs["dtype"]))]


@_kernel("c_pool")
def _c_pool(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    kh, kw = attrs["kernel"]
    shape = (attrs["channels"], 1, kh, kw)
    return [np.full(shape, 1.0 / (kh * kw)).astype(numpy_dtype(attrs["dtype"]))]


@_kernel("i_conv")
def _i_conv(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    channels = attrs["channels"]
    kh, kw = attrs["kernel"]
    kernel = np.zeros((channels, channels, kh, kw), numpy_dtype(attrs["dtype"]))
    kernel[:, :, kh // 2, kw // 2] = np.eye(channels)
    return [kernel]


@_kernel("i_matmul")
def _i_matmul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.eye(attrs["size"], dtype=numpy_dtype(attrs["dtype"]))]


@_kernel("constant")
def _constant(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    value: ConstData = attrs["value"]
    return [np.asarray(value.values, numpy_dtype(value.dtype)).reshape(value.shape)]


# -------------------------------------------------------------------- model ops


@_kernel("softmax")
def _softmax(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x = inputs[0]
    axis = attrs["axis"]
    # Subtracting the maximum changes nothing mathematically and avoids overflow.
    exp = np.exp(x - x.max(axis=axis, keepdims=True))
    return [exp / exp.sum(axis=axis, keepdims=True)]


def lowest(dtype: np.dtype) -> float | int:
    """The identity of max: the maximum of no values, -inf for floats and the least
    value for integers (as ONNX's ReduceMax defines it)."""
    return -math.inf if np.issubdtype(dtype, np.floating) else int(np.iinfo(dtype).min)


def highest(dtype: np.dtype) -> float | int:
    """The identity of min: +inf for floats and the largest value for integers."""
    return math.inf if np.issubdtype(dtype, np.floating) else int(np.iinfo(dtype).max)


@_kernel("reduce")
def _reduce(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x = inputs[0]
    axes, keepdims = tuple(attrs["axes"]), attrs["keepdims"]
    if attrs["kind"] == "max":
        return [np.max(x, axis=axes, keepdims=keepdims, initial=lowest(x.dtype))]
    if attrs["kind"] == "min":
        return [np.min(x, axis=axes, keepdims=keepdims, initial=highest(x.dtype))]
    if attrs["kind"] == "prod":
        return [np.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)]
    # dtype=x.dtype: NumPy would otherwise widen small integer sums to int64.
    total = np.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    if attrs["kind"] == "sum":
        return [total]
    count = math.prod(x.shape[a] for a in axes)
    if np.issubdtype(x.dtype, np.integer):
        return [np.sign(total) * (np.abs(total) // count)]
    return [(total / count).astype(x.dtype)]


@_kernel("batchnorm")
def _batchnorm(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias, mean, var = inputs
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # per-channel vectors broadcast over N,C,...
    normalized = (x - mean.reshape(shape)) / np.sqrt(var.reshape(shape) + attrs["epsilon"])
    return [normalized * scale.reshape(shape) + bias.reshape(shape)]


@_kernel("layernorm")
def _layernorm(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, gamma, beta = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    centred = x - x.mean(axis=axes, keepdims=True)
    var = np.mean(centred * centred, axis=axes, keepdims=True)
    return [centred / np.sqrt(var + attrs["epsilon"]) * gamma + beta]


@_kernel("embedding")
def _embedding(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    ids, table = inputs
    rows = table.shape[0]
    bad = ids[(ids < 0) | (ids >= rows)]
    if bad.size:
        raise ValueError(f"graph.embedding: id {bad.flat[0]} is out of range [0, {rows})")
    return [table[ids]]


# ------------------------------------------ arithmetic, comparison, logic, indexing


def _ieee(*names: str) -> Callable[[Kernel], Kernel]:
    """Register a kernel that computes IEEE results (inf, NaN) at poles and outside its
    domain without NumPy's warnings: log(0) is -inf and sqrt(-1) NaN on purpose."""

    def register(fn: Kernel) -> Kernel:
        @wraps(fn)
        def quiet(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
            with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
                return fn(attrs, inputs)

        _kernel(*names)(quiet)
        return fn

    return register


def _applying(fn: Callable[..., np.ndarray]) -> Kernel:
    """The kernel applying the NumPy function `fn` to the operands."""
    return lambda attrs, inputs: [np.asarray(fn(*inputs))]


_ERF = np.frompyfunc(math.erf, 1, 1)

for _name, _fn in {
    "neg": np.negative,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "reciprocal": np.reciprocal,
    "erf": lambda x: np.asarray(_ERF(x), np.float64),
    "abs": np.abs,
    "sub": np.subtract,
    "max": np.maximum,
    "min": np.minimum,
    "not": np.logical_not,
    "and": np.logical_and,
    "or": np.logical_or,
    "xor": np.logical_xor,
    "where": np.where,
}.items():
    _ieee(_name)(_applying(_fn))


@_ieee("div")
def _div(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lhs, rhs = inputs
    if not np.issubdtype(lhs.dtype, np.integer):
        return [np.divide(lhs, rhs)]
    if (rhs == 0).any():
        raise ValueError("graph.div: integer division by zero")
    # Truncation toward zero: lhs - fmod(lhs, rhs) is an exact multiple of rhs (fmod
    # takes the dividend's sign, as C's %), so the floor division of it is exact.
    return [(lhs - np.fmod(lhs, rhs)) // rhs]


@_ieee("pow")
def _pow(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lhs, rhs = inputs
    if np.issubdtype(rhs.dtype, np.integer) and (rhs < 0).any():
        raise ValueError(f"graph.pow: an integer raised to the negative integer {rhs.min()}")
    return [np.power(lhs, rhs)]


COMPARISONS: Mapping[str, Callable[..., Any]] = {
    "eq": np.equal,
    "ne": np.not_equal,
    "lt": np.less,
    "le": np.less_equal,
    "gt": np.greater,
    "ge": np.greater_equal,
}
"""`graph.compare`'s predicates as NumPy functions (JAX's `jnp` has the same names)."""


@_ieee("compare")
def _compare(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(COMPARISONS[attrs["predicate"]](inputs[0], inputs[1]))]


def _cast(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Registered unwidened: the operand's own type is what is converted. A float
    becomes an integer truncated toward zero and saturated at the type's range, NaN 0,
    which is what XLA does (NumPy leaves values outside the range undefined)."""
    (x,) = inputs
    target = numpy_dtype(attrs["to"])
    if not (np.issubdtype(target, np.integer) and x.dtype in _EVERY_FLOAT):
        return [x.astype(target)]
    bounds = np.iinfo(target)
    wide = np.trunc(x.astype(np.float64))
    # float(bounds.max) may round up past the range (2**63 - 1 does), so the ends
    # are set as integers rather than clipped as floats.
    above, below = wide >= float(bounds.max), wide <= float(bounds.min)
    result = np.where(above | below | np.isnan(wide), 0, wide).astype(target)
    result[above] = bounds.max
    result[below] = bounds.min
    return [result]


_EVERY_FLOAT = FLOATS | {NUMPY_DTYPES[DType.F64]}
KERNELS["cast"] = _cast


@_kernel("broadcast")
def _broadcast(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.array(np.broadcast_to(inputs[0], attrs["shape"]))]


@_kernel("gather")
def _gather(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    data, indices = inputs
    axis = attrs["axis"] % data.ndim
    size = data.shape[axis]
    bad = indices[(indices < -size) | (indices >= size)]
    if bad.size:
        raise ValueError(f"graph.gather: index {bad.flat[0]} is out of range [-{size}, {size})")
    return [np.take(data, indices, axis=axis)]
