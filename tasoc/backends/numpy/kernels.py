"""NumPy reference kernels: the semantic ground truth of every `graph` op.

One function per op maps the op's Python attributes (`GraphOp.py_attrs()`) and its
operand arrays to its result arrays. Every other backend, and every rewrite rule, is
judged against these, so they favour being obviously right over being fast: each is
a direct transcription of the op's docstring in `tasoc.ir.graph`. Most are the op's
own kernel (`OpDef.kernel`, written once in `tasoc/ir/ops/` against an array
namespace), run here on `NUMPY`; this module and `backward.py` hold only the ones
the reference computes its own way (windows, checked indices, saturating casts).
Every kernel computes IEEE results (inf, NaN) at poles and outside its domain
without NumPy's warnings: log(0) is -inf and sqrt(-1) NaN on purpose.

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

from tasoc.backends import NUMPY_DTYPES, ArrayModule, numpy_dtype
from tasoc.ir.opdef import XpKernel, op_defs
from tasoc.ir.shapes import DType, window_pads

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


_ERF = np.frompyfunc(math.erf, 1, 1)
_ERFC = np.frompyfunc(math.erfc, 1, 1)


def _segment_reduce(
    ufunc: np.ufunc, fill: float
) -> Callable[[np.ndarray, np.ndarray, int], np.ndarray]:
    """A segment reduction by `ufunc`: rows sorted by id, then `ufunc.reduceat` over
    each run of one id (vectorised, no Python loop over edges)."""

    def reduce(data: np.ndarray, ids: np.ndarray, segments: int) -> np.ndarray:
        keep = (ids >= 0) & (ids < segments)
        data, ids = data[keep], ids[keep]
        order = np.argsort(ids, kind="stable")
        ids, data = ids[order], data[order]
        out = np.full((segments, *data.shape[1:]), fill, data.dtype)
        if ids.size:
            starts = np.flatnonzero(np.concatenate([[True], ids[1:] != ids[:-1]]))
            out[ids[starts]] = ufunc.reduceat(data, starts, axis=0)
        return out

    return reduce


NUMPY = ArrayModule(
    np,
    # NumPy has no erf; math's are exact to double precision.
    erf=lambda x: np.asarray(_ERF(x), np.float64),
    erfc=lambda x: np.asarray(_ERFC(x), np.float64),
    dtype_of=numpy_dtype,
    segment_sum=_segment_reduce(np.add, 0.0),
    segment_max=_segment_reduce(np.maximum, -np.inf),
)
"""The array namespace the reference runs the ops' own kernels (`OpDef.kernel`) on."""


def _quiet(kernel: Kernel) -> Kernel:
    """`kernel` without NumPy's floating-point warnings (module docstring)."""

    @wraps(kernel)
    def run(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            return kernel(attrs, inputs)

    return run


def _on_numpy(kernel: XpKernel) -> Kernel:
    """An op's own kernel run on NumPy arrays (a 0-d result stays an array)."""
    return lambda attrs, inputs: [np.asarray(r) for r in kernel(NUMPY, attrs, inputs)]


KERNELS: dict[str, Kernel] = {
    op.name: in_float64(_quiet(_on_numpy(op.kernel)))
    for op in op_defs().values()
    if op.kernel is not None
}
"""Reference kernel by op short name (`"conv2d"`): each op's own kernel, replaced by
the reference's where it registers one (`_kernel`); one for every op of the dialect
(`tests/test_op_definitions.py`)."""


def _kernel(*names: str, widen: bool = True) -> Callable[[Kernel], Kernel]:
    """Register the reference's own kernel for `names`; `widen` applies the float64
    policy (module docstring)."""

    def register(fn: Kernel) -> Kernel:
        quiet = _quiet(fn)
        for name in names:
            KERNELS[name] = in_float64(quiet) if widen else quiet
        return fn

    return register


# ------------------------------------------------------------------ windows


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


@_kernel("embedding")
def _embedding(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    ids, table = inputs
    rows = table.shape[0]
    bad = ids[(ids < 0) | (ids >= rows)]
    if bad.size:
        raise ValueError(f"graph.embedding: id {bad.flat[0]} is out of range [0, {rows})")
    return [table[ids]]


# ------------------------------------------ arithmetic, comparison, logic, indexing


@_kernel("div")
def _div(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lhs, rhs = inputs
    if not np.issubdtype(lhs.dtype, np.integer):
        return [np.divide(lhs, rhs)]
    if (rhs == 0).any():
        raise ValueError("graph.div: integer division by zero")
    # Truncation toward zero: lhs - fmod(lhs, rhs) is an exact multiple of rhs (fmod
    # takes the dividend's sign, as C's %), so the floor division of it is exact.
    return [(lhs - np.fmod(lhs, rhs)) // rhs]


@_kernel("pow")
def _pow(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lhs, rhs = inputs
    if np.issubdtype(rhs.dtype, np.integer) and (rhs < 0).any():
        raise ValueError(f"graph.pow: an integer raised to the negative integer {rhs.min()}")
    return [np.power(lhs, rhs)]


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
_kernel("cast", widen=False)(_cast)


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
