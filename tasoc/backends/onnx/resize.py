"""ONNX Resize in modes `nearest` and `linear`, one resized axis at a time.

Both modes are separable: each output position along a resized axis reads one
(nearest) or two (linear) input positions along that axis, fixed by the sizes alone.
So the importer computes them, and their weights, as constants:

    nearest:  gather(x, indices, axis)
    linear:   gather(x, lower, axis) * w_lower + gather(x, upper, axis) * w_upper

(an N-linear resize is N of these in turn, as ONNX's reference computes it). The source
coordinate of each output position follows `coordinate_transformation_mode` with the
formulas of the ONNX spec and its reference implementation (the resized length is the
input length times the scale, a fraction when a scale gives it); positions beyond the
input's ends read its edge. Cubic and antialiased modes, `tf_crop_and_resize` and
`exclude_outside` are refused.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.elementwise import dtype_of, in_float32
from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import Known, Origin, Value
from tasoc.backends.onnx.operands import distinct_axes, optional_input
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

_TRANSFORMS = (
    "half_pixel",
    "half_pixel_symmetric",
    "pytorch_half_pixel",
    "align_corners",
    "asymmetric",
)
_NEAREST_MODES = ("round_prefer_floor", "round_prefer_ceil", "floor", "ceil")
_POLICIES = ("stretch", "not_larger", "not_smaller")


@_handles("Resize")
def _resize(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    shape = imp.shape(x)
    mode = attrs.get("mode", "nearest")
    transform = attrs.get("coordinate_transformation_mode", "half_pixel")
    nearest_mode = attrs.get("nearest_mode", "round_prefer_floor")
    for name, value, choices in (
        ("mode", mode, ("nearest", "linear")),
        ("coordinate_transformation_mode", transform, _TRANSFORMS),
        ("nearest_mode", nearest_mode, _NEAREST_MODES),
        ("keep_aspect_ratio_policy", attrs.get("keep_aspect_ratio_policy", "stretch"), _POLICIES),
    ):
        if value not in choices:
            imp.fail(f"{name} {value!r} is not supported (only {', '.join(choices)})")
    for flag in ("antialias", "exclude_outside"):
        if attrs.get(flag, 0):
            imp.fail(f"{flag}=1 is not supported")
    if mode == "linear" and not dtype_of(x).is_float:
        imp.fail(f"linear interpolation of {dtype_of(x)} values is not supported")
    plan = [
        (axis, size, scale)
        for axis, size, scale in _plan(imp, node, attrs, shape, numpy_dtype(dtype_of(x)))
        if not (size == shape[axis] and math.isclose(scale, 1.0))  # the identity, as ONNX's
    ]
    if any(not shape[axis] for axis, _, _ in plan):
        imp.fail(f"input of shape {format_dims(shape)}: an empty axis cannot be resized")

    def resized(x: SSAValue) -> SSAValue:
        for axis, size, scale in plan:
            length = shape[axis]
            source = _source(transform, length, size, scale)
            if mode == "nearest":
                indices = _nearest(source, nearest_mode, length)
                x = _gathered(imp, node, x, axis, indices, "index")
            else:
                x = _linear(imp, node, x, axis, source)
        return x

    # Linear interpolation in float32 for float16 and bfloat16, rounded once at the end
    # (as ONNX's reference computes, in float64); nearest computes nothing.
    return [in_float32(imp, x, resized) if mode == "linear" else resized(x)]


def _plan(
    imp: Importer,
    node: onnx.NodeProto,
    attrs: dict[str, Any],
    shape: Sequence[int],
    dtype: np.dtype,
) -> list[tuple[int, int, float]]:
    """(axis, output size, scale) for each axis the node resizes."""
    rank = len(shape)
    axes = distinct_axes(imp, [int(a) for a in attrs.get("axes", range(rank))], rank)
    scales_name, sizes_name = optional_input(node, 2), optional_input(node, 3)
    scales = imp.known(scales_name, "scales").reshape(-1) if scales_name else np.zeros(0)
    sizes = imp.known_ints(sizes_name, "sizes").reshape(-1) if sizes_name else np.zeros(0, int)
    if bool(scales.size) == bool(sizes.size):
        imp.fail("exactly one of scales and sizes must be given")
    given = scales if scales.size else sizes
    if given.size != len(axes):
        imp.fail(
            f"{'scales' if scales.size else 'sizes'} {given.tolist()} must hold one value "
            f"for each of the {len(axes)} axes"
        )
    lengths = [shape[a] for a in axes]
    if scales.size:
        if not np.all(scales > 0):
            imp.fail(f"scales {scales.tolist()} must be positive")
        factors = [float(s) for s in scales]
        out = [math.floor(n * s) for n, s in zip(lengths, factors, strict=True)]
    else:
        if np.any(sizes < 0):
            imp.fail(f"sizes {sizes.tolist()} must not be negative")
        out = [int(s) for s in sizes]
        factors = [o / n if n else 1.0 for o, n in zip(out, lengths, strict=True)]
        policy = attrs.get("keep_aspect_ratio_policy", "stretch")
        if policy != "stretch":
            scale = min(factors) if policy == "not_larger" else max(factors)
            factors = [scale] * len(axes)
            out = [int(scale * n + 0.5) for n in lengths]  # rounding halfway cases up
    resized = [out[axes.index(a)] if a in axes else d for a, d in enumerate(shape)]
    imp.check_size(resized, dtype, "the result")
    return list(zip(axes, out, factors, strict=True))


def _source(transform: str, length: int, size: int, scale: float) -> np.ndarray:
    """The input coordinate (a real number) each of `size` output positions samples."""
    y = np.arange(size, dtype=np.float64)
    resized = scale * length  # a fraction when a scale gives it
    if transform == "asymmetric":
        return y / scale
    if transform == "align_corners":
        return np.zeros(size) if resized == 1 else y * (length - 1) / (resized - 1)
    if transform == "pytorch_half_pixel" and resized == 1:
        return np.full(size, -0.5)
    offset = length / 2 * (1 - size / resized) if transform == "half_pixel_symmetric" else 0.0
    return offset + (y + 0.5) / scale - 0.5


def _nearest(source: np.ndarray, mode: str, length: int) -> np.ndarray:
    """The input index nearest each source coordinate, ties and rounding as `mode`
    says, clamped to the input."""
    low = np.floor(source)
    fraction = source - low
    if mode == "round_prefer_floor":
        up = fraction > 0.5
    elif mode == "round_prefer_ceil":
        up = fraction >= 0.5
    elif mode == "ceil":
        up = fraction > 0
    else:
        up = np.zeros(source.shape, bool)
    return np.clip(low + up, 0, length - 1).astype(np.int64)


def _linear(
    imp: Importer, node: onnx.NodeProto, x: SSAValue, axis: int, source: np.ndarray
) -> SSAValue:
    """Linear interpolation along `axis` between the two inputs around each source
    coordinate (both the edge one beyond the input's ends)."""
    shape = imp.shape(x)
    low = np.floor(source)
    fraction = source - low
    dtype = numpy_dtype(dtype_of(x))
    terms = []
    for which, index, weight in (("lower", low, 1 - fraction), ("upper", low + 1, fraction)):
        indices = np.clip(index, 0, shape[axis] - 1).astype(np.int64)
        taken = _gathered(imp, node, x, axis, indices, which)
        # The weights along `axis`, broadcasting over the dims after it.
        weights = weight.astype(dtype).reshape((-1,) + (1,) * (len(shape) - axis - 1))
        name = f"{node.output[0]}.{axis}.{which}.weight"
        terms.append(imp.op(G.MulOp, taken, imp.materialize(Known(name, weights, Origin.DERIVED))))
    return imp.op(G.AddOp, *terms)


def _gathered(
    imp: Importer, node: onnx.NodeProto, x: SSAValue, axis: int, indices: np.ndarray, what: str
) -> SSAValue:
    known = Known(f"{node.output[0]}.{axis}.{what}", indices, Origin.DERIVED)
    return imp.op(G.GatherOp, x, imp.materialize(known), axis=axis)
