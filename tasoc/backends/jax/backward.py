"""JAX lowerings of the backward `graph` ops (issue 14, autodiff).

A training step lowered by tasoc should run as fast as `jax.value_and_grad` of the
same forward, so each gradient op is lowered to what JAX's own autodiff emits for
its forward op: `jax.linear_transpose` of the forward lowering for the linear ones
(convolutions, average pooling, sums), `jax.vjp` of it for the others (max pooling
becomes XLA's select-and-scatter, a normalization the same fused reductions), and
the closed forms JAX's differentiation rules use for the activations (written once,
as those ops' own kernels, in `tasoc/ir/ops/elementwise.py`). The forward
lowerings are the ones in `lowering.py`, so precision (float32 accumulation,
`Precision.HIGHEST`) follows theirs.

Differences from the reference a user can observe, beyond rounding: data cannot
raise inside a jitted function, so `scatter_add` drops ids >= rows and counts
negative ids from the end (as the embedding lowering's gather does, whose transpose
this is), and `softmax_cross_entropy(_grad)` gives NaN for a row whose label is
outside [0, classes).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import jax
import jax.numpy as jnp
from jax import lax

from tasoc.backends.jax.lowering import _conv2d, _kernel, _pool2d, own_kernel

# ------------------------------------------------------------------ convolution


def _transpose_of(
    linear: Callable[[jax.Array], jax.Array], shape: Sequence[int], dtype: Any, cotangent: jax.Array
) -> jax.Array:
    """The transpose of `linear` (a function of one array of `shape`) at `cotangent`:
    exactly the backward computation `jax.grad` builds for it."""
    (transposed,) = jax.linear_transpose(linear, jax.ShapeDtypeStruct(tuple(shape), dtype))(
        cotangent
    )
    return transposed


def _conv_attrs(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """The attributes of the conv2d a gradient op differentiates (never a fused relu)."""
    return {
        "strides": attrs["strides"],
        "padding": attrs["padding"],
        "groups": attrs["groups"],
        "activation": "none",
    }


@_kernel("conv2d_grad_input", widen=False)
def _conv2d_grad_input(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    dy, w = inputs
    forward = _conv_attrs(attrs)
    return [
        _transpose_of(lambda x: _conv2d(forward, [x, w])[0], attrs["input_shape"], dy.dtype, dy)
    ]


@_kernel("conv2d_grad_weight", widen=False)
def _conv2d_grad_weight(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, dy = inputs
    forward = _conv_attrs(attrs)
    shape = (dy.shape[1], x.shape[1] // attrs["groups"], *attrs["kernel"])
    return [_transpose_of(lambda w: _conv2d(forward, [x, w])[0], shape, x.dtype, dy)]


# ------------------------------------------------------- pooling and reduction


def _vjp_x(
    forward: Callable[[Mapping[str, Any], Sequence[jax.Array]], list[jax.Array]],
    attrs: Mapping[str, Any],
    x: jax.Array,
    dy: jax.Array,
) -> list[jax.Array]:
    """The gradient w.r.t. x of sum(forward(attrs, [x])[0] * dy), as jax.grad builds it."""
    _, pullback = jax.vjp(lambda value: forward(attrs, [value])[0], x)
    return list(pullback(dy))


@_kernel("pool2d_grad")
def _pool2d_grad(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, dy = inputs
    return _vjp_x(_pool2d, attrs, x, dy)


@_kernel("reduce_grad")
def _reduce_grad(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, dy = inputs
    return _vjp_x(own_kernel("reduce"), attrs, x, dy)


# -------------------------------------------------------------------- embedding


@_kernel("scatter_add")
def _scatter_add(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    ids, updates = inputs
    table = jnp.zeros((attrs["rows"], updates.shape[-1]), updates.dtype)
    return [table.at[ids].add(updates, mode="drop")]


# ---------------------------------------------------------------- normalization


@_kernel("layernorm_grad")
def _layernorm_grad(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, gamma, dy = inputs
    _, pullback = jax.vjp(
        lambda x, gamma, beta: own_kernel("layernorm")(attrs, [x, gamma, beta])[0],
        x,
        gamma,
        jnp.zeros_like(gamma),
    )
    return list(pullback(dy))


def _batch_normalized(
    x: jax.Array, scale: jax.Array, bias: jax.Array, epsilon: float
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Training-mode batchnorm over channel axis 1: (y, mean, biased var)."""
    axes = (0, *range(2, x.ndim))
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)
    mean = jnp.mean(x, axis=axes)
    centred = x - mean.reshape(shape)
    var = jnp.mean(centred * centred, axis=axes)
    y = centred * lax.rsqrt(var.reshape(shape) + epsilon) * scale.reshape(shape)
    return y + bias.reshape(shape), mean, var


@_kernel("batchnorm_train")
def _batchnorm_train(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, scale, bias = inputs
    return list(_batch_normalized(x, scale, bias, attrs["epsilon"]))


@_kernel("batchnorm_grad")
def _batchnorm_grad(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
    x, scale, dy = inputs
    _, pullback = jax.vjp(
        lambda x, scale, bias: _batch_normalized(x, scale, bias, attrs["epsilon"])[0],
        x,
        scale,
        jnp.zeros_like(scale),
    )
    return list(pullback(dy))


# ------------------------------------------------------------------------- loss


def _valid(labels: jax.Array, classes: int) -> jax.Array:
    return (labels >= 0) & (labels < classes)


@_kernel("softmax_cross_entropy")
def _softmax_cross_entropy(
    attrs: Mapping[str, Any], inputs: Sequence[jax.Array]
) -> list[jax.Array]:
    logits, labels = inputs
    classes = logits.shape[-1]
    picked = jnp.take_along_axis(logits, labels[..., None], axis=-1, mode="clip")[..., 0]
    losses = jax.nn.logsumexp(logits, axis=-1) - picked
    return [jnp.where(_valid(labels, classes), losses, jnp.nan)]


@_kernel("softmax_cross_entropy_grad")
def _softmax_cross_entropy_grad(
    attrs: Mapping[str, Any], inputs: Sequence[jax.Array]
) -> list[jax.Array]:
    logits, labels, dloss = inputs
    classes = logits.shape[-1]
    one_hot = jax.nn.one_hot(labels, classes, dtype=logits.dtype)
    dlogits = (jax.nn.softmax(logits, axis=-1) - one_hot) * dloss[..., None]
    return [jnp.where(_valid(labels, classes)[..., None], dlogits, jnp.nan)]
