"""The generator's own evaluator of its operator set: exact (integers modulo a prime)
for fingerprints, floating point for re-tests.

The generator runs every graph it enumerates, so it needs an evaluator, and a pass may
not import a backend: this module is that evaluator, kept to the ops of TASO's Table
2.1. Both modes share one code path per op, so the float mode follows the reference
kernels (`tasoc.backends.numpy.kernels`: `window_pads` padding, average pooling that
counts padded zeros, `c_pool`'s 1/(kh*kw) entries) and the exact mode differs only
where exact arithmetic must:

* Values are integers modulo `PRIME`, a prime below 2**25: a product of two residues
  is below 2**50, so int64 sums of up to 2**13 products (any convolution window here)
  never overflow before they are reduced, and division (average pooling, `c_pool`) is
  multiplication by a modular inverse. In a field, two different polynomials agree on
  a random input with probability at most degree/PRIME (Schwartz-Zippel), which is
  what makes equal fingerprints evidence of equal graphs.
* Non-linear ops are replaced by fixed polynomials, as TASO does: `relu` (alone or as
  a convolution's activation) by `x*x + 3*x + 1`, and max pooling by `e1 + e2`, the
  first two elementary symmetric polynomials of the window (symmetric like a maximum,
  equal to `x` on a one-element window, and blind to padding, as zeros add nothing).
  A rule that holds for these polynomials need not hold for the real ops, and the
  float re-test throws it out; one that holds only for the real ops (`relu` is
  idempotent) is not found.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from tasoc.ir.shapes import window_pads

PRIME = 33_554_393
"""The largest prime below 2**25 (see the module docstring for why that size)."""

Array = np.ndarray
Kernel = Callable[[Mapping[str, Any], Sequence[Array], bool], list[Array]]

_KERNELS: dict[str, Kernel] = {}

SUPPORTED_OPS: frozenset[str]
"""The ops this evaluator runs (set at the end of the module)."""


def apply(op: str, attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    """Results of `op` on `args`: int64 residues modulo PRIME when `exact`, float64
    otherwise. Operands and attributes must already type-check (`shapes.infer`)."""
    return _KERNELS[op](attrs, args, exact)


def random_input(rng: np.random.Generator, shape: tuple[int, ...], exact: bool) -> Array:
    """A random operand: uniform residues, or uniform floats in [-1, 1] as TASO uses."""
    if exact:
        return rng.integers(0, PRIME, size=shape, dtype=np.int64)
    return rng.uniform(-1.0, 1.0, size=shape)


def _kernel(*names: str) -> Callable[[Kernel], Kernel]:
    def register(fn: Kernel) -> Kernel:
        for name in names:
            _KERNELS[name] = fn
        return fn

    return register


def _reduce(x: Array, exact: bool) -> Array:
    return np.remainder(x, PRIME) if exact else x


def _reciprocal(n: int, exact: bool) -> int | float:
    return pow(n, PRIME - 2, PRIME) if exact else 1.0 / n


def _relu(x: Array, exact: bool) -> Array:
    if exact:
        return np.remainder(x * x + 3 * x + 1, PRIME)
    return np.maximum(x, 0.0)


def _dtype(exact: bool) -> type:
    return np.int64 if exact else np.float64


# ------------------------------------------------------------------ element-wise


@_kernel("add")
def _add(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [_reduce(args[0] + args[1], exact)]


@_kernel("mul", "scale")
def _mul(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [_reduce(args[0] * args[1], exact)]


@_kernel("relu")
def _relu_kernel(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [_relu(args[0], exact)]


# ------------------------------------------------------------------------ linear


@_kernel("transpose")
def _transpose(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [np.ascontiguousarray(np.transpose(args[0], attrs["perm"]))]


@_kernel("matmul")
def _matmul(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [_reduce(np.matmul(args[0], args[1]), exact)]


def _windows(
    x: Array, kernel: tuple[int, int], strides: tuple[int, int], padding: Any, fill: float
) -> Array:
    """The kh x kw windows of an NCHW tensor, [N, C, OH, OW, kh, kw], padded as
    `shapes.window_pads` says (the reference kernels' padding)."""
    top, left, bottom, right = window_pads(padding, x.shape[2:4], kernel, strides)
    padded = np.pad(x, ((0, 0), (0, 0), (top, bottom), (left, right)), constant_values=fill)
    return sliding_window_view(padded, kernel, axis=(2, 3))[:, :, :: strides[0], :: strides[1]]


@_kernel("conv2d")
def _conv2d(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    x, w = args
    groups = attrs["groups"]
    out_channels, group_channels, kh, kw = w.shape
    windows = _windows(x, (kh, kw), tuple(attrs["strides"]), attrs["padding"], 0)
    n, _, oh, ow = windows.shape[:4]
    grouped = windows.reshape(n, groups, group_channels, oh, ow, kh, kw)
    weights = w.reshape(groups, out_channels // groups, group_channels, kh, kw)
    out = np.einsum("ngchwij,gocij->ngohw", grouped, weights, optimize=True)
    out = _reduce(out.reshape(n, out_channels, oh, ow), exact)
    return [_relu(out, exact) if attrs["activation"] == "relu" else out]


@_kernel("enlarge")
def _enlarge(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    (w,) = args
    kh, kw = attrs["kernel"]
    dh, dw = (kh - w.shape[2]) // 2, (kw - w.shape[3]) // 2
    return [np.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw)))]


@_kernel("pool2d")
def _pool2d(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    (x,) = args
    kernel, strides = tuple(attrs["kernel"]), tuple(attrs["strides"])
    if attrs["kind"] == "max" and not exact:
        windows = _windows(x, kernel, strides, attrs["padding"], -np.inf)
        return [windows.max(axis=(4, 5))]
    windows = _windows(x, kernel, strides, attrs["padding"], 0)
    total = _reduce(windows.sum(axis=(4, 5)), exact)
    if attrs["kind"] == "max":
        squares = np.remainder((windows * windows).sum(axis=(4, 5)), PRIME)
        pairs = np.remainder((total * total - squares) % PRIME * _reciprocal(2, True), PRIME)
        return [np.remainder(total + pairs, PRIME)]
    return [_reduce(total * _reciprocal(kernel[0] * kernel[1], exact), exact)]


# --------------------------------------------------------------------- structure


@_kernel("concat")
def _concat(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [np.concatenate(args, axis=attrs["axis"])]


@_kernel("split")
def _split(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return [np.ascontiguousarray(part) for part in np.split(args[0], cuts, axis=attrs["axis"])]


# --------------------------------------------------------------------- constants


@_kernel("ones")
def _ones(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [np.ones(tuple(attrs["shape"]), _dtype(exact))]


@_kernel("i_matmul")
def _i_matmul(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    return [np.eye(attrs["size"], dtype=_dtype(exact))]


@_kernel("i_conv")
def _i_conv(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    channels = attrs["channels"]
    kh, kw = attrs["kernel"]
    kernel = np.zeros((channels, channels, kh, kw), _dtype(exact))
    kernel[:, :, kh // 2, kw // 2] = np.eye(channels)
    return [kernel]


@_kernel("c_pool")
def _c_pool(attrs: Mapping[str, Any], args: Sequence[Array], exact: bool) -> list[Array]:
    kh, kw = attrs["kernel"]
    shape = (attrs["channels"], 1, kh, kw)
    return [np.full(shape, _reciprocal(kh * kw, exact), _dtype(exact))]


SUPPORTED_OPS = frozenset(_KERNELS)
