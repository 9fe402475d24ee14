"""Normalizations: inference `batchnorm`, training-mode `batchnorm_train` and its
gradient, `layernorm` and its gradient.

Batch statistics are taken over `synced` factors: split, the op all-reduces them
itself (the one collective not written as a `parallel` op). The forward kernels of
inference batchnorm and layernorm are shared; the training ops keep a kernel per
backend (JAX differentiates its own forward with `jax.vjp`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    axis_index,
    check_forward,
    epsilon_attr,
    expect_shape,
    fmt_shape,
    int_attr,
    need_float,
    same_dtype,
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


def _per_channel(x: TensorSig, params: Mapping[str, TensorSig], attrs: Attrs) -> None:
    """The typing every batch normalization shares: a float input with a channel axis 1,
    per-channel `params` of its element type, and a valid epsilon."""
    need_float(x)
    same_dtype(x, *params.values())
    epsilon_attr(attrs)
    if x.rank < 2:
        raise ShapeError(f"input must have a channel dimension, got rank {x.rank}")
    for name, sig in params.items():
        if sig.shape != (x.shape[1],):
            raise ShapeError(f"{name} must have shape {x.shape[1]}, got {fmt_shape(sig.shape)}")


def _batchnorm_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, *stats = inputs
    _per_channel(x, dict(zip(("scale", "bias", "mean", "var"), stats, strict=True)), attrs)
    return [x]


def _layernorm_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, gamma, beta = inputs
    need_float(x)
    same_dtype(x, gamma, beta)
    epsilon_attr(attrs)
    axis = axis_index(int_attr(attrs, "axis"), x.rank)
    for name, sig in (("gamma", gamma), ("beta", beta)):
        if sig.shape != x.shape[axis:]:
            raise ShapeError(
                f"{name} must have shape {fmt_shape(x.shape[axis:])}, got {fmt_shape(sig.shape)}"
            )
    return [x]


def _layernorm_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, gamma, dy = inputs
    # beta types like gamma and does not enter the gradients: gamma stands in for it.
    check_forward(_layernorm_type, "layernorm", [x, gamma, gamma], attrs, dy)
    return [x, gamma, gamma]


def _batchnorm_train_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, scale, bias = inputs
    _per_channel(x, {"scale": scale, "bias": bias}, attrs)
    return [x, scale, scale]


def _batchnorm_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, scale, dy = inputs
    _per_channel(x, {"scale": scale}, attrs)
    same_dtype(x, dy)
    expect_shape(dy, "dy", x.shape)
    return [x, scale, scale]


# ---------------------------------------------------------------- SOAP rules
def _channels(x: TensorSig, synced: bool) -> tuple[list[Factor], Dims]:
    """Factors of a batch normalization's input (N, C, spatial...): the channel a
    `parameter` factor its per-channel vectors share; the others `synced` when the
    op takes batch statistics over them."""
    names = ("n", "c", *factor_names("s", x.rank - 2))
    factors = positional(x.shape, names, synced=synced)
    factors[1] = Factor("c", x.shape[1], "parameter")
    return factors, names


def _batchnorm_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _channels(inputs[0], synced=False)
    return op_rule(factors, [dims, *[("c",)] * 4], [dims])


def _batchnorm_train_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _channels(inputs[0], synced=True)
    return op_rule(factors, [dims, ("c",), ("c",)], [dims, ("c",), ("c",)])


def _batchnorm_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dscale and dbias are the statistics dx needs (sums of dy*xhat and dy): the op
    # all-reduces them, so they leave complete. Linear in dy for a fixed x.
    factors, dims = _channels(inputs[0], synced=True)
    return op_rule(factors, [dims, ("c",), dims], [dims, ("c",), ("c",)], ((2,),))


def _layer(x: TensorSig, attrs: Attrs) -> tuple[list[Factor], Dims, Dims]:
    """Factors of a layer normalization: the leading dims; the normalized ones
    (from `axis` on, which gamma and beta span) do not split."""
    axis = attrs["axis"] % x.rank
    factors, dims = all_but(x, range(axis, x.rank))
    return factors, dims, dims[axis:]


def _layernorm_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims, params = _layer(inputs[0], attrs)
    return op_rule(factors, [dims, params, params], [dims])


def _layernorm_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dgamma and dbeta sum over the leading dims: split, they are partial sums.
    factors, dims, params = _layer(inputs[0], attrs)
    return op_rule(factors, [dims, params, dims], [dims, params, params], ((2,),))


# ------------------------------------------------------------------ kernels


def _batchnorm(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x, scale, bias, mean, var = inputs
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # per-channel vectors broadcast over N,C,...
    normalized = (x - xp.reshape(mean, shape)) / xp.sqrt(xp.reshape(var, shape) + attrs["epsilon"])
    return [normalized * xp.reshape(scale, shape) + xp.reshape(bias, shape)]


def _layernorm(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x, gamma, beta = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    centred = x - xp.mean(x, axis=axes, keepdims=True)
    var = xp.mean(centred * centred, axis=axes, keepdims=True)
    return [centred / xp.sqrt(var + attrs["epsilon"]) * gamma + beta]


# -------------------------------------------------------------- definitions

_MADE_BY_AUTODIFF = "a gradient op made by autodiff, not differentiated again"

define(
    OpDef(
        "batchnorm",
        (5, 5),
        _batchnorm_type,
        _batchnorm_soap,
        4,
        "autodiff replaces it by batchnorm_train before differentiating",
        kernel=_batchnorm,
    ),
    OpDef("batchnorm_train", (3, 3), _batchnorm_train_type, _batchnorm_train_soap, 8, None),
    OpDef(
        "batchnorm_grad",
        (3, 3),
        _batchnorm_grad_type,
        _batchnorm_grad_soap,
        12,
        _MADE_BY_AUTODIFF,
    ),
    OpDef("layernorm", (3, 3), _layernorm_type, _layernorm_soap, 8, None, kernel=_layernorm),
    OpDef(
        "layernorm_grad",
        (3, 3),
        _layernorm_grad_type,
        _layernorm_grad_soap,
        12,
        _MADE_BY_AUTODIFF,
    ),
)
