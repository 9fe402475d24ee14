"""NumPy reference kernels of the backward `graph` ops (issue 14, autodiff).

Each op's value is defined as a gradient: "the gradient of sum(F(...) * dy)" for its
forward op F. The kernels here transcribe that definition directly from the forward
kernels in `kernels.py` rather than from a fused formula: a convolution's weight
gradient contracts the same windows the forward contracts, its input gradient
scatters each output position back over its window, a max pool routes each window's
gradient to the position its forward picked. They register into the same `KERNELS`
table under the same precision policy (`in_float64`). The activation gradients and the
Adam update are not here: they are element-wise formulas, written once as their ops'
own kernels (`tasoc/ir/ops/`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from tasoc.backends.numpy.kernels import NUMPY, _kernel, _windows
from tasoc.ir.opdef import op_def
from tasoc.ir.shapes import window_pads

# ------------------------------------------------------------------ convolution


def _scatter_windows(
    per_offset: np.ndarray,
    in_shape: tuple[int, ...],
    strides: tuple[int, int],
    padding: str | Sequence[int],
) -> np.ndarray:
    """The adjoint of `_windows`: add window values back onto the input they came from.

    `per_offset` is [N, C, OH, OW, kh, kw], a value for every position of every
    window (what `_windows` would read there); the result is the [N, C, H, W] sum, at
    each input position, of the values of every window position that reads it.
    Values landing in the padding are dropped, as the padding is not the input.
    """
    kh, kw = per_offset.shape[4:]
    oh, ow = per_offset.shape[2:4]
    sh, sw = strides
    top, left, bottom, right = window_pads(padding, in_shape[2:4], (kh, kw), strides)
    n, c, h, w = in_shape
    padded = np.zeros((n, c, h + top + bottom, w + left + right), per_offset.dtype)
    for i in range(kh):
        for j in range(kw):
            padded[:, :, i : i + sh * (oh - 1) + 1 : sh, j : j + sw * (ow - 1) + 1 : sw] += (
                per_offset[:, :, :, :, i, j]
            )
    return padded[:, :, top : top + h, left : left + w]


@_kernel("conv2d_grad_input")
def _conv2d_grad_input(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    # Forward: out[n, g*Og+o, p] = sum_{c,i,j} window[n, g*Cg+c, p, i, j] * w[g*Og+o, c, i, j];
    # so each window position (n, g*Cg+c, p, i, j) receives sum_o dy[n, g*Og+o, p] * w[...].
    dy, w = inputs
    groups = attrs["groups"]
    out_channels, group_channels, kh, kw = w.shape
    n, _, oh, ow = dy.shape
    grouped_dy = dy.reshape(n, groups, out_channels // groups, oh, ow)
    weights = w.reshape(groups, out_channels // groups, group_channels, kh, kw)
    per_offset = np.einsum("ngohw,gocij->ngchwij", grouped_dy, weights, optimize=True)
    per_offset = per_offset.reshape(n, groups * group_channels, oh, ow, kh, kw)
    dx = _scatter_windows(
        per_offset, tuple(attrs["input_shape"]), attrs["strides"], attrs["padding"]
    )
    return [dx.astype(dy.dtype)]


@_kernel("conv2d_grad_weight")
def _conv2d_grad_weight(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    # The forward's contraction "ngchwij,gocij->ngohw", with w's index as the output.
    x, dy = inputs
    groups = attrs["groups"]
    kh, kw = attrs["kernel"]
    windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], fill=0.0)
    n, channels, oh, ow = windows.shape[:4]
    out_channels = dy.shape[1]
    grouped = windows.reshape(n, groups, channels // groups, oh, ow, kh, kw)
    grouped_dy = dy.reshape(n, groups, out_channels // groups, oh, ow)
    dw = np.einsum("ngchwij,ngohw->gocij", grouped, grouped_dy, optimize=True)
    return [dw.reshape(out_channels, channels // groups, kh, kw).astype(x.dtype)]


# ---------------------------------------------------------------------- pooling


@_kernel("pool2d_grad")
def _pool2d_grad(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """avg: every window position, padding included, gets dy/(kh*kw) (the forward
    divides by the full window); max: the whole dy goes to the FIRST maximum of the
    window in row-major order, padding positions (-inf) included, which is the choice
    XLA's select-and-scatter makes (select `>=` keeps the earlier of equal values)."""
    x, dy = inputs
    kh, kw = attrs["kernel"]
    strides, padding = attrs["strides"], attrs["padding"]
    n, c, oh, ow = dy.shape
    if attrs["kind"] == "avg":
        spread = np.broadcast_to((dy / (kh * kw))[..., None, None], (n, c, oh, ow, kh, kw))
        return [_scatter_windows(spread, x.shape, strides, padding).astype(x.dtype)]
    windows = _windows(x, (kh, kw), strides, padding, fill=-np.inf)
    first_max = windows.reshape(n, c, oh, ow, kh * kw).argmax(axis=-1)
    chosen = first_max[..., None] == np.arange(kh * kw)
    routed = np.where(chosen, dy[..., None], 0).reshape(n, c, oh, ow, kh, kw)
    return [_scatter_windows(routed, x.shape, strides, padding).astype(x.dtype)]


# -------------------------------------------------------------------- reduction


@_kernel("reduce_grad")
def _reduce_grad(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """sum: dy broadcast back; mean: also divided by the count; max: dy split equally
    among the positions equal to the maximum (JAX's rule for reduce_max)."""
    x, dy = inputs
    axes = tuple(sorted(a % x.ndim for a in attrs["axes"]))
    kept = dy if attrs["keepdims"] else np.expand_dims(dy, axes)
    spread = np.broadcast_to(kept, x.shape)
    if attrs["kind"] == "sum":
        return [spread.copy()]
    if attrs["kind"] == "mean":
        count = math.prod(x.shape[a] for a in axes)
        return [(spread / count).astype(x.dtype)]
    at_max = x == np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    ties = at_max.sum(axis=axes, keepdims=True)
    return [(np.where(at_max, spread, 0) / np.maximum(ties, 1)).astype(x.dtype)]


# -------------------------------------------------------------------- embedding


def _check_indices(op: str, what: str, indices: np.ndarray, bound: int) -> None:
    """Raise ValueError, naming the op and the first bad index, unless 0 <= i < bound."""
    bad = indices[(indices < 0) | (indices >= bound)]
    if bad.size:
        raise ValueError(f"graph.{op}: {what} {bad.flat[0]} is out of range [0, {bound})")


@_kernel("scatter_add")
def _scatter_add(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    ids, updates = inputs
    rows = attrs["rows"]
    _check_indices("scatter_add", "id", ids, rows)
    features = updates.shape[-1]
    table = np.zeros((rows, features), updates.dtype)
    # add.at, not table[ids] += ...: repeated ids must accumulate.
    np.add.at(table, ids.reshape(-1), updates.reshape(-1, features))
    return [table]


# ------------------------------------------------------ graph neural networks
# The ops' own kernels (`tasoc/ir/ops/gnn.py`), after the checks a jitted function
# cannot make: every source a row of x, every target a row of its block or padding.


def _check_edges(
    op: str,
    attrs: Mapping[str, Any],
    sources: int | None,
    targets: int,
    inputs: Sequence[np.ndarray],
) -> None:
    """ValueError naming the first bad index: a target outside -1 .. block_rows-1, a
    source (operand `sources`, read from operand 0) outside operand 0's rows."""
    dst = inputs[targets]
    bad = dst[(dst < -1) | (dst >= attrs["block_rows"])]
    if bad.size:
        raise ValueError(
            f"graph.{op}: target {bad.flat[0]} is out of range [0, {attrs['block_rows']}) "
            "(-1: padding)"
        )
    if sources is not None:
        _check_indices(op, "source", inputs[sources][dst >= 0], inputs[0].shape[0])


def _checked(op: str, sources: int | None, targets: int) -> None:
    kernel = op_def(op).kernel
    assert kernel is not None

    def run(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
        _check_edges(op, attrs, sources, targets, inputs)
        return [np.asarray(r) for r in kernel(NUMPY, attrs, inputs)]

    _kernel(op)(run)


for _op, _sources, _targets in (
    ("aggregate", 1, 2),
    ("aggregate_grad", 1, 2),
    ("aggregate_weight_grad", 1, 2),
    ("edge_softmax", None, 1),
    ("edge_softmax_grad", None, 1),
    ("edge_scores", 2, 3),
):
    _checked(_op, _sources, _targets)


# ---------------------------------------------------------------- normalization


def _standardize(
    x: np.ndarray, axes: tuple[int, ...], epsilon: float
) -> tuple[np.ndarray, np.ndarray]:
    """(xhat, 1/std): x centred and scaled by its mean and BIASED variance over `axes`."""
    centred = x - x.mean(axis=axes, keepdims=True)
    inv_std = 1 / np.sqrt(np.mean(centred * centred, axis=axes, keepdims=True) + epsilon)
    return centred * inv_std, inv_std


def _standardized_dx(
    xhat: np.ndarray, inv_std: np.ndarray, dxhat: np.ndarray, axes: tuple[int, ...]
) -> np.ndarray:
    """dx of sum(xhat * dxhat), through xhat's own mean and variance over `axes`.

    The chain rule through the centring and the variance simplifies to
    inv_std * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
    """
    mean_g = dxhat.mean(axis=axes, keepdims=True)
    mean_gx = (dxhat * xhat).mean(axis=axes, keepdims=True)
    return inv_std * (dxhat - mean_g - xhat * mean_gx)


@_kernel("layernorm_grad")
def _layernorm_grad(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, gamma, dy = inputs
    axis = attrs["axis"] % x.ndim
    normalized, leading = tuple(range(axis, x.ndim)), tuple(range(axis))
    xhat, inv_std = _standardize(x, normalized, attrs["epsilon"])
    dx = _standardized_dx(xhat, inv_std, dy * gamma, normalized)
    dgamma = np.sum(dy * xhat, axis=leading)
    dbeta = np.sum(dy, axis=leading)
    return [dx.astype(x.dtype), dgamma.astype(x.dtype), dbeta.astype(x.dtype)]


def _channel_axes(x: np.ndarray) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(the axes batch statistics reduce: all but 1, the shape a (C,) vector takes)."""
    return (0, *range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


@_kernel("batchnorm_train")
def _batchnorm_train(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias = inputs
    axes, shape = _channel_axes(x)
    mean = x.mean(axis=axes)
    centred = x - mean.reshape(shape)
    var = np.mean(centred * centred, axis=axes)  # biased: divided by the count
    y = centred / np.sqrt(var.reshape(shape) + attrs["epsilon"]) * scale.reshape(shape)
    return [(y + bias.reshape(shape)).astype(x.dtype), mean.astype(x.dtype), var.astype(x.dtype)]


@_kernel("batchnorm_grad")
def _batchnorm_grad(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, scale, dy = inputs
    axes, shape = _channel_axes(x)
    xhat, inv_std = _standardize(x, axes, attrs["epsilon"])
    dx = _standardized_dx(xhat, inv_std, dy * scale.reshape(shape), axes)
    dscale = np.sum(dy * xhat, axis=axes)
    dbias = np.sum(dy, axis=axes)
    return [dx.astype(x.dtype), dscale.astype(x.dtype), dbias.astype(x.dtype)]


# ------------------------------------------------------------------------- loss


def _log_softmax(logits: np.ndarray) -> np.ndarray:
    # Subtracting the maximum changes nothing mathematically and avoids overflow.
    shifted = logits - logits.max(axis=-1, keepdims=True)
    return shifted - np.log(np.exp(shifted).sum(axis=-1, keepdims=True))


@_kernel("softmax_cross_entropy")
def _softmax_cross_entropy(
    attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]
) -> list[np.ndarray]:
    logits, labels = inputs
    _check_indices("softmax_cross_entropy", "label", labels, logits.shape[-1])
    picked = np.take_along_axis(_log_softmax(logits), labels[..., None].astype(np.intp), axis=-1)
    return [(-picked[..., 0]).astype(logits.dtype)]


@_kernel("softmax_cross_entropy_grad")
def _softmax_cross_entropy_grad(
    attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]
) -> list[np.ndarray]:
    logits, labels, dloss = inputs
    classes = logits.shape[-1]
    _check_indices("softmax_cross_entropy_grad", "label", labels, classes)
    one_hot = labels[..., None] == np.arange(classes)
    dlogits = (np.exp(_log_softmax(logits)) - one_hot) * dloss[..., None]
    return [dlogits.astype(logits.dtype)]
