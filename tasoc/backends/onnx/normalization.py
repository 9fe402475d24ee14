"""ONNX's normalizations over features: LayerNormalization (with its Mean and
InvStdDev outputs), InstanceNormalization and LRN.

LayerNormalization's Y is `graph.layernorm`; its statistics outputs, when a node reads
them, are computed beside it as the ONNX function defines them, in the `stash_type`
precision. InstanceNormalization is a layernorm over the spatial dims (unit gamma, zero
beta) times the per-channel scale plus the bias. LRN's sum of squares over a window of
channels is an average pool across the channels (times the window size, which the
`alpha / size` factor cancels). InstanceNormalization and LRN compute in float32 for
float16 and bfloat16 inputs, rounding once at the end.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

import onnx
from xdsl.ir import SSAValue

from tasoc.backends.onnx.conventions import DTYPES_BY_ONNX
from tasoc.backends.onnx.elementwise import cast, dtype_of, in_float32
from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import Value
from tasoc.backends.onnx.operands import axis_index, f32_decimal, optional_input, used_output
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)


@_handles("LayerNormalization")
def _layer_norm(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    axis = axis_index(imp, int(attrs.get("axis", -1)), len(shape))
    normalized = shape[axis:]
    gamma = _shaped(imp, imp.data(node.input[1]), normalized)
    bias = optional_input(node, 2)
    if bias is None:
        beta = imp.op(G.ZerosOp, shape=normalized, dtype=dtype_of(x))
    else:
        beta = _shaped(imp, imp.data(bias), normalized)
    epsilon = f32_decimal(attrs.get("epsilon", 1e-5))
    y = imp.op(G.LayernormOp, x, gamma, beta, axis=int(attrs.get("axis", -1)), epsilon=epsilon)
    if not (used_output(imp, node, 1) or used_output(imp, node, 2)):
        return [y]
    stash = DTYPES_BY_ONNX.get(int(attrs.get("stash_type", onnx.TensorProto.FLOAT)))
    if stash is None or not stash.is_float:
        imp.fail(f"stash_type {attrs['stash_type']} is not a float type the dialect has")
    # Mean = ReduceMean(X), InvStdDev = 1 / sqrt(ReduceMean((X - Mean)^2) + epsilon),
    # over the normalized dims, kept as size 1, in the stash type.
    wide = cast(imp, x, stash)
    axes = tuple(range(axis, len(shape)))
    mean = imp.op(G.ReduceOp, wide, kind="mean", axes=axes, keepdims=True)
    centred = imp.op(G.SubOp, wide, mean)
    variance = imp.op(
        G.ReduceOp, imp.op(G.MulOp, centred, centred), kind="mean", axes=axes, keepdims=True
    )
    deviation = imp.op(G.SqrtOp, imp.op(G.AddOp, variance, imp.literal(epsilon, variance)))
    return [y, mean, imp.op(G.ReciprocalOp, deviation)]


def _shaped(imp: Importer, x: SSAValue, shape: tuple[int, ...]) -> SSAValue:
    """x reshaped to `shape`, or x itself when it has that shape already."""
    return x if imp.shape(x) == shape else imp.reshape(x, shape)


@_handles("InstanceNormalization")
def _instance_norm(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    if len(shape) < 3:
        imp.fail(f"input must be N x C x D1 x ..., got shape {format_dims(shape)}")
    per_channel = (1, shape[1]) + (1,) * (len(shape) - 2)
    scale, bias = (imp.reshape(imp.data(name), per_channel) for name in node.input[1:3])
    epsilon = f32_decimal(attrs.get("epsilon", 1e-5))

    def normalized(x: SSAValue) -> SSAValue:
        spatial, dtype = shape[2:], dtype_of(x)
        gamma = imp.op(G.OnesOp, shape=spatial, dtype=dtype)
        beta = imp.op(G.ZerosOp, shape=spatial, dtype=dtype)
        y = imp.op(G.LayernormOp, x, gamma, beta, axis=2, epsilon=epsilon)
        wide_scale, wide_bias = (cast(imp, p, dtype) for p in (scale, bias))
        return imp.op(G.AddOp, imp.op(G.MulOp, y, wide_scale), wide_bias)

    return [in_float32(imp, x, normalized)]


@_handles("LRN")
def _lrn(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """y = x / (bias + alpha / size * square_sum) ** beta, with square_sum the sum of
    x^2 over channels c - floor((size-1)/2) .. c + ceil((size-1)/2) (those that exist)."""
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    if len(shape) < 3:
        imp.fail(f"input must be N x C x D1 x ..., got shape {format_dims(shape)}")
    size = int(attrs["size"])
    if size < 1:
        imp.fail(f"size {size} must be positive")
    return [in_float32(imp, x, lambda wide: _lrn_of(imp, wide, size, attrs))]


def _lrn_of(imp: Importer, x: SSAValue, size: int, attrs: dict[str, Any]) -> SSAValue:
    shape = imp.shape(x)
    batch, channels, points = shape[0], shape[1], math.prod(shape[2:])
    # The channels as the last dim of an [N, 1, D1*...*Dk, C] image, and the window a
    # (1, size) pool over them, padded with zeros (which average pools count).
    squares = imp.reshape(imp.op(G.MulOp, x, x), (batch, channels, points))
    image = imp.reshape(
        imp.op(G.TransposeOp, squares, perm=(0, 2, 1)), (batch, 1, points, channels)
    )
    before, after = (size - 1) // 2, size // 2
    mean = imp.op(
        G.Pool2dOp,
        image,
        kind="avg",
        kernel=(1, size),
        strides=(1, 1),
        padding=(0, before, 0, after),
    )
    mean = imp.op(G.TransposeOp, imp.reshape(mean, (batch, points, channels)), perm=(0, 2, 1))
    mean = imp.reshape(mean, shape)
    # alpha / size * square_sum = alpha * (the window's mean).
    alpha, beta, bias = (attrs.get(name, default) for name, default in _LRN_DEFAULTS.items())
    base = imp.op(G.AddOp, imp.op(G.ScaleOp, mean, imp.literal(alpha, mean)), imp.literal(bias, x))
    return imp.op(G.DivOp, x, imp.op(G.PowOp, base, imp.literal(beta, x)))


_LRN_DEFAULTS = {"alpha": 1e-4, "beta": 0.75, "bias": 1.0}
