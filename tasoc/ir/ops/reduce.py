"""Reductions: `reduce` (sum, mean, max, min, prod over axes), its gradient
`reduce_grad`, and `softmax` (a reduction and a broadcast back along one axis).

A reduced dim splits for sum and mean (a `mean` factor divides by its degree), not
for max, min or prod. The reference and the JAX lowering share `reduce`'s kernel;
JAX keeps its own softmax (an optimization barrier) and differentiates through
`jax.vjp` where the reference writes the gradient out.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    axis_index,
    bool_attr,
    check_forward,
    choice_attr,
    fmt_shape,
    int_attr,
    ints_attr,
    need_float,
    need_number,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Dims,
    Inputs,
    Results,
    all_but,
    factor_names,
    op_rule,
    positional,
)

# ------------------------------------------------------------------ typing


def _softmax_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    need_float(x)
    axis_index(int_attr(attrs, "axis"), x.rank)
    return [x]


REDUCTIONS = ("sum", "mean", "max", "min", "prod")
"""The kinds of `graph.reduce`."""


DIFFERENTIABLE_REDUCTIONS = ("sum", "mean", "max")
"""The kinds `graph.reduce_grad` differentiates; min and prod have no gradient."""


def _reduce_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    need_number(x)
    kind = choice_attr(attrs, "kind", REDUCTIONS)
    given = ints_attr(attrs, "axes")
    axes = sorted({axis_index(a, x.rank) for a in given})
    if len(axes) != len(given) or not axes:
        raise ShapeError(f"axes {list(given)} must be distinct and non-empty")
    # Over no values a sum is 0, a product 1, a max -inf and a min +inf (ONNX's
    # identities; an integer type's least and largest value); a mean is 0/0,
    # which ONNX leaves undefined, so it is refused rather than given a meaning.
    if kind == "mean" and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(
            f"the mean over axes {axes} of the empty {fmt_shape(x.shape)} is undefined"
        )
    if bool_attr(attrs, "keepdims"):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSig(shape, x.dtype)]


def _reduce_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    need_float(x)
    choice_attr(attrs, "kind", DIFFERENTIABLE_REDUCTIONS)
    check_forward(_reduce_type, "reduce", [x], attrs, dy)
    return [x]


# ---------------------------------------------------------------- SOAP rules
def _softmax_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    factors, dims = all_but(x, [attrs["axis"] % x.rank])
    return op_rule(factors, [dims], [dims])


def _reduce_factors(x: TensorSig, attrs: Attrs) -> tuple[list[Factor], Dims, Dims]:
    """Factors of reduce (and its gradient): one per dim of x; a reduced dim splits
    for sum and mean (a `mean` factor: the op divides by its extent), not for max,
    min or prod (a local max or product is not a part of the global one that sums).
    Returns the factors and the dims of x and of the reduced value."""
    axes = {a % x.rank for a in attrs["axes"]}
    names = factor_names("d", x.rank)
    splits = attrs["kind"] in ("sum", "mean")
    mean = attrs["kind"] == "mean"
    factors = [
        Factor(f.name, f.size, f.kind, mean=mean and d in axes)
        for d, f in enumerate(positional(x.shape, names))
        if d not in axes or splits
    ]
    x_dims = tuple(None if d in axes and not splits else names[d] for d in range(x.rank))
    kept = [None if d in axes else names[d] for d in range(x.rank)]
    reduced = tuple(kept if attrs["keepdims"] else [n for d, n in enumerate(kept) if d not in axes])
    return factors, x_dims, reduced


def _reduce_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, x_dims, out_dims = _reduce_factors(inputs[0], attrs)
    linear = ((0,),) if attrs["kind"] in ("sum", "mean") else ()
    return op_rule(factors, [x_dims], [out_dims], linear)


def _reduce_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dx spreads dy over the reduced dims (divided by their extent for a mean), so
    # for sum and mean x gives only dx's shape; for max it needs the global maximum,
    # so max's reduced dims stay unsplit.
    factors, x_dims, dy_dims = _reduce_factors(inputs[0], attrs)
    shape_only = () if attrs["kind"] == "max" else (0,)
    return op_rule(factors, [x_dims, dy_dims], [x_dims], ((1,),), shape_only)


# ------------------------------------------------------------------ kernels


def lowest(xp: ArrayNamespace, dtype: Any) -> float | int:
    """The identity of max: the maximum of no values, -inf for floats and the least
    value for integers (as ONNX's ReduceMax defines it)."""
    return -math.inf if xp.issubdtype(dtype, xp.floating) else int(xp.iinfo(dtype).min)


def highest(xp: ArrayNamespace, dtype: Any) -> float | int:
    """The identity of min: +inf for floats and the largest value for integers."""
    return math.inf if xp.issubdtype(dtype, xp.floating) else int(xp.iinfo(dtype).max)


def _reduce(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x = inputs[0]
    axes, keepdims = tuple(attrs["axes"]), attrs["keepdims"]
    if attrs["kind"] == "max":
        return [xp.max(x, axis=axes, keepdims=keepdims, initial=lowest(xp, x.dtype))]
    if attrs["kind"] == "min":
        return [xp.min(x, axis=axes, keepdims=keepdims, initial=highest(xp, x.dtype))]
    if attrs["kind"] == "prod":
        return [xp.prod(x, axis=axes, keepdims=keepdims, dtype=x.dtype)]
    # dtype=x.dtype: NumPy would otherwise widen small integer sums to int64.
    total = xp.sum(x, axis=axes, keepdims=keepdims, dtype=x.dtype)
    if attrs["kind"] == "sum":
        return [total]
    count = math.prod(x.shape[a] for a in axes)
    if xp.issubdtype(x.dtype, xp.integer):
        return [xp.sign(total) * (xp.abs(total) // count)]
    return [(total / count).astype(x.dtype)]


def _softmax(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x = inputs[0]
    axis = attrs["axis"]
    # Subtracting the maximum changes nothing mathematically and avoids overflow.
    exp = xp.exp(x - xp.max(x, axis=axis, keepdims=True))
    return [exp / xp.sum(exp, axis=axis, keepdims=True)]


def _first_operand_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    """One FLOP per element read: the result is smaller than what the op reads."""
    return inputs[0].size


# -------------------------------------------------------------- definitions

define(
    OpDef("reduce", (1, 1), _reduce_type, _reduce_soap, _first_operand_flops, None, kernel=_reduce),
    OpDef(
        "reduce_grad",
        (2, 2),
        _reduce_grad_type,
        _reduce_grad_soap,
        _first_operand_flops,
        "a gradient op made by autodiff, not differentiated again",
    ),
    OpDef("softmax", (1, 1), _softmax_type, _softmax_soap, 5, None, kernel=_softmax),
)
