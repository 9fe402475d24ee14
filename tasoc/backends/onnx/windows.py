"""ONNX's window ops: Conv, ConvTranspose, MaxPool, AveragePool and the global pools.

The dialect's window ops are 2-D over NCHW (`conv2d`, `conv2d_grad_input`, `pool2d`).
A 1-D node, over an (N, C, L) input, is *lifted*: its input reshaped to (N, C, 1, L),
its weight to (O, I, 1, k), its attributes given a first spatial axis that does nothing
(kernel 1, stride 1, dilation 1, no pads), and its result reshaped back. Wider windows
(3-D) are refused.

Dilations: a dilated convolution is the convolution with the dilated kernel, the
weight's taps spread apart with zeros between them (`_dilated_weight`). A pool's dilated
window cannot hold zeros (a max would see them), so its taps are gathered instead: the
padded input is gathered along each axis at the window's tap positions, and a
`reduce` over the taps pools them (`_gathered_pool`).
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.elementwise import dtype_of
from tasoc.backends.onnx.errors import format_dims, shown
from tasoc.backends.onnx.known_values import Known, Origin, Value
from tasoc.backends.onnx.operands import optional_input
from tasoc.backends.onnx.padding import pad_constant
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G
from tasoc.ir.shapes import window_pads

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

Pair = tuple[int, int]
Pads = tuple[int, int, int, int]
"""Explicit (top, left, bottom, right) padding."""

_AXIS_ATTRIBUTES = {
    "kernel_shape": 1,
    "strides": 1,
    "dilations": 1,
    "output_padding": 0,
    "output_shape": 1,
}
"""The per-axis attributes of window nodes, with their value on the first axis of a
lifted 1-D node (`pads` holds two values per axis and is lifted on its own)."""

_POSITIVE_ATTRIBUTES = ("kernel_shape", "strides", "dilations")

_AUTO_PADS = ("NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID")


# ------------------------------------------------------------------- the window


def canonical_padding(
    pads: Pads,
    in_hw: Pair,
    kernel: Pair,
    strides: Pair,
    form: str | None = None,
) -> str | Pads:
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


@dataclass(frozen=True)
class Window:
    """Where a window op's windows lie, on two spatial axes."""

    kernel: Pair
    """Taps per axis."""
    strides: Pair
    dilations: Pair
    pads: Pads

    @property
    def extent(self) -> Pair:
        """Input elements a window spans per axis, (k - 1) * d + 1."""
        (kh, kw), (dh, dw) = self.kernel, self.dilations
        return ((kh - 1) * dh + 1, (kw - 1) * dw + 1)


def _lifted(
    imp: Importer, name: str, attrs: dict[str, Any]
) -> tuple[SSAValue, int, dict[str, Any]]:
    """Input `name` as a 4-D NCHW tensor, the node's number of spatial axes (1 or 2), and
    its attributes with values for two spatial axes (see the module's docstring)."""
    x = imp.data(name)
    shape = imp.shape(x)
    rank = len(shape) - 2
    if rank not in (1, 2):
        imp.fail(
            "only 1-D and 2-D windows over NCL and NCHW inputs are supported, got a "
            f"rank-{len(shape)} input"
        )
    lifted = dict(attrs)
    count = ("one", "two")[rank - 1]
    for attr, first in _AXIS_ATTRIBUTES.items():
        if attr in attrs:
            values = [int(v) for v in attrs[attr]]
            positive = attr in _POSITIVE_ATTRIBUTES
            if len(values) != rank or (positive and min(values) < 1):
                kind = "positive integer" if positive else "integer"
                imp.fail(f"{attr} {values} must be {count} {kind}{'s' * (rank - 1)}")
            lifted[attr] = [first] * (2 - rank) + values
    if "pads" in attrs:
        pads = [int(p) for p in attrs["pads"]]
        if len(pads) != 2 * rank:
            imp.fail(f"pads {pads} must be {2 * rank} integers, two per spatial axis")
        lifted["pads"] = [0] * (2 - rank) + pads[:rank] + [0] * (2 - rank) + pads[rank:]
    if rank == 1:
        x = imp.reshape(x, (shape[0], shape[1], 1, shape[2]))
    return x, rank, lifted


def _lowered(imp: Importer, y: SSAValue, rank: int) -> SSAValue:
    """A lifted node's 4-D result in the node's own rank."""
    if rank == 2:
        return y
    n, c, _, length = imp.shape(y)
    return imp.reshape(y, (n, c, length))


def _pair(attrs: dict[str, Any], attr: str) -> Pair:
    """Lifted attribute `attr` (checked by `_lifted`), 1 on both axes when absent."""
    values = attrs.get(attr, [1, 1])
    return (int(values[0]), int(values[1]))


def _auto_pad(imp: Importer, attrs: dict[str, Any]) -> str:
    auto_pad = attrs.get("auto_pad", "NOTSET")
    if auto_pad not in _AUTO_PADS:
        imp.fail(f"auto_pad {shown(auto_pad)} is not NOTSET, SAME_UPPER, SAME_LOWER or VALID")
    return auto_pad


def _explicit_pads(imp: Importer, attrs: dict[str, Any]) -> Pads:
    """The node's `pads` (lifted attributes, checked by `_lifted`), none negative; no
    padding when absent."""
    top, left, bottom, right = (int(p) for p in attrs.get("pads", (0, 0, 0, 0)))
    if min(top, left, bottom, right) < 0:
        imp.fail(f"pads {[top, left, bottom, right]} must not be negative")
    return (top, left, bottom, right)


def _window(imp: Importer, attrs: dict[str, Any], in_hw: Pair, kernel: Pair) -> Window:
    """The window of a Conv or pool node (lifted attributes) over an `in_hw` input."""
    strides = _pair(attrs, "strides")
    dilations = _pair(attrs, "dilations")
    extent = Window(kernel, strides, dilations, (0, 0, 0, 0)).extent
    auto_pad = _auto_pad(imp, attrs)
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        same = window_pads("same", in_hw, extent, strides)
        top, left, bottom, right = same
        pads = same if auto_pad == "SAME_UPPER" else (bottom, right, top, left)
    elif auto_pad == "VALID":
        pads = (0, 0, 0, 0)
    else:
        pads = _explicit_pads(imp, attrs)
    return Window(kernel, strides, dilations, pads)


# ---------------------------------------------------------------- convolutions


def _kernel(imp: Importer, node: onnx.NodeProto, rank: int, attrs: dict[str, Any]) -> Pair:
    """The kernel size of a Conv/ConvTranspose, from its weight (and `kernel_shape`,
    which must agree with it)."""
    shape = imp.shape(node.input[1])
    if len(shape) != rank + 2:
        imp.fail(f"weight must be {rank + 2}-D like the input, got shape {format_dims(shape)}")
    kernel = (1, shape[2]) if rank == 1 else (shape[2], shape[3])
    if "kernel_shape" in attrs and tuple(attrs["kernel_shape"]) != kernel:
        imp.fail(
            f"kernel_shape {list(attrs['kernel_shape'][2 - rank :])} is not the weight's "
            f"{format_dims(shape[2:])}"
        )
    return kernel


def _weight(imp: Importer, name: str, rank: int, dilations: Pair) -> SSAValue:
    """Weight `name` of a Conv/ConvTranspose as a 4-D (lifted) kernel, dilated."""
    shape = imp.shape(name)
    lifted = (shape[0], shape[1], 1, shape[2]) if rank == 1 else shape
    value = imp.value(name)
    if dilations != (1, 1) and isinstance(value, Known):
        imp.check_size(_dilated_shape(lifted, dilations), value.array.dtype, "the dilated weight")
        return imp.materialize(_dilated_weight(value, lifted, dilations))
    w = imp.data(name)
    if rank == 1:
        w = imp.reshape(w, lifted)
    return w if dilations == (1, 1) else _dilated_by_ops(imp, w, dilations)


def _dilated_shape(shape: tuple[int, ...], dilations: Pair) -> tuple[int, int, int, int]:
    o, i, kh, kw = shape
    (dh, dw) = dilations
    return (o, i, (kh - 1) * dh + 1, (kw - 1) * dw + 1)


def _dilated_weight(weight: Known, shape: tuple[int, ...], dilations: Pair) -> Known:
    """Known `weight` (of 4-D `shape`) as the kernel a convolution with `dilations`
    applies: its taps `dilations` apart, zeros between them. A weight stays a weight
    (named `<weight>.dilated<dh>x<dw>`), a literal a literal.

    Convolving with it is the dilated convolution exactly where the input is finite:
    each zero tap adds 0 * x = ±0 to a window's sum, which changes no sum (at most the
    sign of a zero result, -0 against +0, equal as numbers). Where an input element
    under a zero tap is inf or NaN, 0 * inf = NaN makes that window's output NaN, where
    a real dilated convolution never reads the element and stays finite. None of ONNX's
    node tests (`tests/onnx_node_cases.py`) has a non-finite input to a dilated
    convolution, so none is affected.
    """
    (dh, dw) = dilations
    array = np.zeros(_dilated_shape(shape, dilations), weight.array.dtype)
    array[:, :, ::dh, ::dw] = weight.array.reshape(shape)
    origin = Origin.INITIALIZER if weight.origin is Origin.INITIALIZER else Origin.DERIVED
    return Known(f"{weight.name}.dilated{dh}x{dw}", array, origin)


def _dilated_by_ops(imp: Importer, w: SSAValue, dilations: Pair) -> SSAValue:
    """A computed OIHW `w` dilated as `_dilated_weight` does, by data movement: along each
    dilated axis every tap gets d - 1 zero taps after it (a `concat` with zeros on a new
    axis, merged by a `reshape`), and the zeros after the last tap are cut off. The
    inf/NaN caveat of `_dilated_weight` holds here too."""
    for axis, d in zip((2, 3), dilations, strict=True):
        if d == 1:
            continue
        shape = imp.shape(w)
        taps = shape[axis]
        spread = (*shape[: axis + 1], 1, *shape[axis + 1 :])
        holes = (*shape[: axis + 1], d - 1, *shape[axis + 1 :])
        zeros = imp.op(G.ZerosOp, shape=holes, dtype=dtype_of(w))
        interleaved = imp.op(G.ConcatOp, imp.reshape(w, spread), zeros, axis=axis + 1)
        w = imp.reshape(interleaved, (*shape[:axis], taps * d, *shape[axis + 1 :]))
        w = imp.take(w, axis, 0, (taps - 1) * d + 1)
    return w


def _with_bias(imp: Importer, node: onnx.NodeProto, y: SSAValue) -> SSAValue:
    """`y` plus the node's optional bias input B (one value per output channel)."""
    bias = optional_input(node, 2)
    if bias is None:
        return y
    return imp.op(G.AddOp, y, imp.reshape(imp.data(bias), (1, imp.shape(y)[1], 1, 1)))


@_handles("Conv")
def _conv(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, rank, lifted = _lifted(imp, node.input[0], attrs)
    in_hw = (imp.shape(x)[2], imp.shape(x)[3])
    window = _window(imp, lifted, in_hw, _kernel(imp, node, rank, lifted))
    # The exporter writes an average pool whose padding onnxruntime's pools reject as
    # TASO's equal depthwise convolution with C_pool, and records it ("avg_pool same").
    pool_form, _, padding_form = (imp.form(node) or "").rpartition(" ")
    padding = canonical_padding(
        window.pads, in_hw, window.extent, window.strides, padding_form or None
    )
    groups = int(attrs.get("group", 1))
    weight = imp.value(node.input[1])
    if (
        pool_form == "avg_pool"
        and isinstance(weight, Known)
        and weight.form == "c_pool"
        and groups == weight.array.shape[0] == imp.shape(x)[1]
        and window.dilations == (1, 1)
        and optional_input(node, 2) is None
    ):
        return [
            imp.op(
                G.Pool2dOp,
                x,
                kind="avg",
                kernel=window.kernel,
                strides=window.strides,
                padding=padding,
            )
        ]
    w = _weight(imp, node.input[1], rank, window.dilations)
    y = imp.op(
        G.Conv2dOp,
        x,
        w,
        strides=window.strides,
        padding=padding,
        activation="none",
        groups=groups,
    )
    return [_lowered(imp, _with_bias(imp, node, y), rank)]


@dataclass(frozen=True)
class _Span:
    """Where a ConvTranspose's output lies on one axis, against the full transposed
    convolution F (each input element's kernel copy laid `stride` apart)."""

    begin: int
    """The output starts at F's row `begin` (what pads crop)."""
    computed: int
    """Output rows that `conv2d_grad_input` computes: F's rows from `begin`, and up to
    stride - 1 zero rows past F's end."""
    zeros: int
    """Zero rows after those, concatenated."""
    end_pad: int
    """The forward convolution's end padding that makes its output the input's size."""


def _transposed_span(
    imp: Importer,
    attrs: dict[str, Any],
    axis: int,
    size: int,
    extent: int,
    stride: int,
    output_padding: int,
) -> _Span:
    """The span of a ConvTranspose on spatial `axis` (0 or 1, lifted attributes) over an
    input of `size` rows.

    ONNX's output is F cropped by the pads, plus `output_padding` rows at the end. With
    `output_shape` (the pads then ignored, as the spec says and onnxruntime does) or SAME
    auto padding (an output of size * stride), the rows F and the output padding have
    beyond the output are cropped half at each end, the odd one at the begin (with
    SAME_UPPER at the end). An output longer than that has zeros at its end in
    onnxruntime, but with SAME auto padding ONNX's reference splits them between the
    ends, and onnxruntime refuses stride or more of them: those forms are refused.
    """
    full = stride * (size - 1) + extent
    natural = full + output_padding
    auto_pad = _auto_pad(imp, attrs)
    if "output_shape" in attrs or auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = attrs["output_shape"][axis] if "output_shape" in attrs else size * stride
        total = natural - out
        if total < 0 and (auto_pad != "NOTSET" or -total >= stride):
            imp.fail(
                f"output size {out} exceeds the {natural} the input gives by {-total}, which "
                f"imports only without SAME auto_pad and up to stride - 1 ({stride - 1})"
            )
        cropped_first = total // 2 if auto_pad == "SAME_UPPER" else total - total // 2
        begin = max(cropped_first, 0)  # a negative total: zeros at the end
    elif auto_pad == "VALID":
        begin, out = 0, natural
    else:
        pads = _explicit_pads(imp, attrs)
        begin, out = pads[axis], natural - pads[axis] - pads[axis + 2]
    computed = min(out, full + stride - 1 - begin)
    if computed < 1:
        imp.fail(f"the pads crop all {full} rows of the transposed convolution (axis {axis})")
    end_pad = max(stride * (size - 1) + extent - computed - begin, 0)
    return _Span(begin, computed, out - computed, end_pad)


@_handles("ConvTranspose")
def _conv_transpose(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> list[Value | None]:
    """The transposed convolution is `conv2d_grad_input`, the gradient of the forward
    convolution whose output has the ConvTranspose input's size: the ONNX weight
    (C, M / group, kh, kw) is that forward convolution's OIHW weight as it is."""
    x, rank, lifted = _lifted(imp, node.input[0], attrs)
    n, _, height, width = imp.shape(x)
    window = Window(
        _kernel(imp, node, rank, lifted),
        _pair(lifted, "strides"),
        _pair(lifted, "dilations"),
        (0, 0, 0, 0),
    )
    output_padding = [int(p) for p in lifted.get("output_padding", (0, 0))]
    if min(output_padding) < 0:
        imp.fail(f"output_padding {attrs['output_padding']} must not be negative")
    spans = [
        _transposed_span(imp, lifted, axis, size, extent, stride, extra)
        for axis, (size, extent, stride, extra) in enumerate(
            zip((height, width), window.extent, window.strides, output_padding, strict=True)
        )
    ]
    groups = int(attrs.get("group", 1))
    w = _weight(imp, node.input[1], rank, window.dilations)
    computed = (spans[0].computed, spans[1].computed)
    pads = (spans[0].begin, spans[1].begin, spans[0].end_pad, spans[1].end_pad)
    y = imp.op(
        G.Conv2dGradInputOp,
        x,
        w,
        strides=window.strides,
        padding=canonical_padding(pads, computed, window.extent, window.strides),
        groups=groups,
        input_shape=(n, imp.shape(w)[1] * groups, *computed),
    )
    if spans[0].zeros or spans[1].zeros:
        zero = np.zeros((), numpy_dtype(dtype_of(y)))
        widths = [(0, 0), (0, 0), (0, spans[0].zeros), (0, spans[1].zeros)]
        y = pad_constant(imp, y, widths, zero, node.output[0])
    return [_lowered(imp, _with_bias(imp, node, y), rank)]


# ----------------------------------------------------------------------- pools


def _pool_window(
    imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
) -> tuple[SSAValue, int, Pair, Window, Pads]:
    """A MaxPool/AveragePool's 4-D input, spatial rank, input size and window, counting a
    -inf Pad node in front of a MaxPool as the pool's own padding and what ceil mode
    adds at the end; then the pads as declared, without what ceil mode adds."""
    source, before = imp.max_pool_pads.get(node.input[0], (node.input[0], (0, 0, 0, 0)))
    if "kernel_shape" not in attrs:
        imp.fail("the kernel_shape attribute is required")
    x, rank, lifted = _lifted(imp, source, attrs)
    in_hw = (imp.shape(x)[2], imp.shape(x)[3])
    kernel = _pair(lifted, "kernel_shape")
    padded_hw = (in_hw[0] + before[0] + before[2], in_hw[1] + before[1] + before[3])
    window = _window(imp, lifted, padded_hw, kernel)
    if window.dilations != (1, 1) and _auto_pad(imp, attrs) in ("SAME_UPPER", "SAME_LOWER"):
        # onnxruntime pads for the undilated kernel, and its output is not the input's
        # size / stride that SAME promises; ONNX's reference reads past its padding.
        imp.fail(
            f"auto_pad {attrs['auto_pad']} with dilations {attrs['dilations']} is ambiguous "
            "(onnxruntime pads as for the undilated kernel): give explicit pads"
        )
    top, left, bottom, right = (a + b for a, b in zip(before, window.pads, strict=True))
    declared = (top, left, bottom, right)
    if attrs.get("ceil_mode", 0):
        bottom, right = (
            high + ceil_mode_extra(size, extent, s, low, high)
            for size, extent, s, low, high in zip(
                in_hw, window.extent, window.strides, (top, left), (bottom, right), strict=True
            )
        )
    return x, rank, in_hw, replace(window, pads=(top, left, bottom, right)), declared


def ceil_mode_extra(size: int, kernel: int, stride: int, low: int, high: int) -> int:
    """Rows (or columns) of padding past `high` that `ceil_mode=1` adds at the end
    (`kernel` is the window's extent, dilation included).

    ONNX (and PyTorch) round the window count up, ceil((size + low + high - kernel) /
    stride) + 1, but drop a last window that would start in the end padding or past
    it. The windows that remain are those of floor mode over the input padded by the
    returned amount more, which is how `graph.pool2d` expresses them.
    """
    span = size + low + high - kernel
    count = -(-span // stride) + 1
    if (count - 1) * stride >= size + low:
        count -= 1
    return max((count - 1) * stride + kernel - (size + low + high), 0)


def _pooled(
    imp: Importer, node: onnx.NodeProto, x: SSAValue, kind: str, in_hw: Pair, window: Window
) -> SSAValue:
    """`graph.pool2d` of `x` (kind `max` or `avg`, which divides by the taps), or the
    same by gathering the taps where the window is dilated or the data are integers
    (which pool2d does not take)."""
    if window.dilations == (1, 1) and dtype_of(x).is_float:
        kernel, strides = window.kernel, window.strides
        padding = canonical_padding(window.pads, in_hw, kernel, strides, imp.form(node))
        return imp.op(G.Pool2dOp, x, kind=kind, kernel=kernel, strides=strides, padding=padding)
    return _gathered_pool(imp, x, kind, window, node.output[0])


def _gathered_pool(imp: Importer, x: SSAValue, kind: str, window: Window, name: str) -> SSAValue:
    """A pool by data movement and a reduction: `x` padded (with -inf, or an integer
    type's least value, for max; 0 for avg), gathered along each spatial axis at the
    positions of every window's taps, [out, k] indices that give the axis the two, and
    reduced (max, or mean over the taps) over the tap axes. An axis whose windows are
    single elements one apart needs no gather."""
    dtype = numpy_dtype(dtype_of(x))
    least = -np.inf if dtype_of(x).is_float else np.iinfo(dtype).min
    fill = np.asarray(least if kind == "max" else 0, dtype)
    top, left, bottom, right = window.pads
    y = pad_constant(imp, x, [(0, 0), (0, 0), (top, bottom), (left, right)], fill, name)
    tap_axes: list[int] = []
    for spatial, (k, s, d, extent) in enumerate(
        zip(window.kernel, window.strides, window.dilations, window.extent, strict=True)
    ):
        if k == 1 and s == 1:
            continue
        axis = 2 + spatial + len(tap_axes)
        size = imp.shape(y)[axis]
        if size < extent:
            imp.fail(f"window {extent} is larger than the padded input {size}")
        starts = np.arange((size - extent) // s + 1, dtype=np.int64) * s
        positions = starts[:, None] + np.arange(k, dtype=np.int64) * d
        indices = imp.materialize(Known(f"{name}.taps{spatial}", positions, Origin.DERIVED))
        y = imp.op(G.GatherOp, y, indices, axis=axis)
        tap_axes.append(axis + 1)
    if not tap_axes:
        return y
    reduction = "max" if kind == "max" else "mean"
    return imp.op(G.ReduceOp, y, kind=reduction, axes=tuple(tap_axes), keepdims=False)


@_handles("MaxPool")
def _max_pool(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, rank, in_hw, window, _ = _pool_window(imp, node, attrs)
    return [_lowered(imp, _pooled(imp, node, x, "max", in_hw, window), rank)]


@_handles("AveragePool")
def _average_pool(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, rank, in_hw, window, declared = _pool_window(imp, node, attrs)
    y = _pooled(imp, node, x, "avg", in_hw, window)
    # The pool divides by kh*kw; ONNX divides by the window's taps that are counted:
    # those on the input, and with count_include_pad=1 also on its declared pads (never
    # on the extra end padding of ceil mode). That count is a product of a row and a
    # column count, so two small constant factors (kh / rows, kw / cols) correct it.
    counted = declared if attrs.get("count_include_pad", 0) else (0, 0, 0, 0)
    if window.pads == counted:
        return [_lowered(imp, y, rank)]
    out_hw = imp.shape(y)[2:]
    for axis, (size, k, s, d, low) in enumerate(
        zip(in_hw, window.kernel, window.strides, window.dilations, window.pads[:2], strict=True)
    ):
        taps = (np.arange(out_hw[axis]) * s - low)[:, None] + np.arange(k) * d
        first, end = -counted[axis], size + counted[axis + 2]
        inside = np.count_nonzero((taps >= first) & (taps < end), axis=1)
        if np.all(inside == k):
            continue
        if not np.all(inside > 0):
            imp.fail(f"pads {list(window.pads)} leave a window with no input element to average")
        factor = (k / inside).astype(numpy_dtype(dtype_of(y)))
        shape = (1, 1, -1, 1) if axis == 0 else (1, 1, 1, -1)
        correction = Known(f"{node.output[0]}.count{axis}", factor.reshape(shape), Origin.DERIVED)
        y = imp.op(G.MulOp, y, imp.materialize(correction))
    return [_lowered(imp, y, rank)]


def _global_pool(kind: str) -> Handler:
    def handler(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        shape = imp.shape(node.input[0])
        if len(shape) in (3, 4):
            x, rank, _ = _lifted(imp, node.input[0], {})
            kernel = imp.shape(x)[2:]
            y = imp.op(G.Pool2dOp, x, kind=kind, kernel=kernel, strides=(1, 1), padding="valid")
            return [_lowered(imp, y, rank)]
        x = imp.data(node.input[0])
        axes = tuple(range(2, len(shape)))
        reduction = "mean" if kind == "avg" else "max"
        return [imp.op(G.ReduceOp, x, kind=reduction, axes=axes, keepdims=True)]

    return handler


HANDLERS["GlobalAveragePool"] = _global_pool("avg")
HANDLERS["GlobalMaxPool"] = _global_pool("max")
