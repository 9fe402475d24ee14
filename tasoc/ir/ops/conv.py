"""Convolutions: `conv2d` (grouped, NCHW input, OIHW weight, optional fused relu),
its two gradients, and `enlarge` (a weight zero-padded to a larger kernel, TASO's).

The three convolutions share one factor layout (`_conv`), so a training step's
forward and backward split alike. Their kernels differ by backend (windows and
einsum in NumPy, `lax.conv_general_dilated` and its transpose in JAX). `groups` and
`input_shape` name global sizes, so local shards run with local ones (`local_attrs`).
The attribute domains are what rewrite rules are enumerated and tested over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    check_forward,
    choice_attr,
    fmt_shape,
    int_attr,
    ints_attr,
    need_float,
    padding_attr,
    pair_attr,
    same_dtype,
    window_output,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Dims,
    Inputs,
    Results,
    op_rule,
    window_factors,
)

# ------------------------------------------------------------------ typing


def _conv2d_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, w = inputs
    dtype = same_dtype(x, w)
    need_float(x)
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(
            f"input and weight must be 4-D (NCHW, OIHW), got {x.rank}-D and {w.rank}-D"
        )
    groups = int_attr(attrs, "groups")
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    if groups < 1 or c % groups or cout % groups:
        raise ShapeError(
            f"groups={groups} must divide input channels {c} and output channels {cout}"
        )
    if cin_g * groups != c:
        raise ShapeError(
            f"weight expects {cin_g * groups} input channels "
            f"({cin_g} x {groups} groups), input has {c}"
        )
    choice_attr(attrs, "activation", ("none", "relu"))
    oh, ow = window_output((h, wd), (kh, kw), pair_attr(attrs, "strides"), padding_attr(attrs))
    return [TensorSig((n, cout, oh, ow), dtype)]


def _enlarge_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (w,) = inputs
    if w.rank != 4:
        raise ShapeError(f"weight must be 4-D (OIHW), got {w.rank}-D")
    kh, kw = pair_attr(attrs, "kernel")
    for have, want in ((w.shape[2], kh), (w.shape[3], kw)):
        if want < have or (want - have) % 2:
            raise ShapeError(
                f"cannot enlarge kernel {fmt_shape(w.shape[2:])} to {kh}x{kw} symmetrically"
            )
    return [TensorSig((*w.shape[:2], kh, kw), w.dtype)]


def _conv2d_grad_input_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    dy, w = inputs
    shape = ints_attr(attrs, "input_shape", 4)
    if min(shape) < 0:
        raise ShapeError(f"input_shape {list(shape)} has a negative dimension")
    dx = TensorSig(shape, dy.dtype)
    check_forward(_conv2d_type, "conv2d", [dx, w], {**attrs, "activation": "none"}, dy)
    return [dx]


def _conv2d_grad_weight_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    if x.rank != 4 or dy.rank != 4:
        raise ShapeError(f"input and dy must be 4-D (NCHW), got {x.rank}-D and {dy.rank}-D")
    kh, kw = pair_attr(attrs, "kernel")
    # A non-positive `groups` gets the forward rule's message, not a division by zero.
    groups = max(int_attr(attrs, "groups"), 1)
    dw = TensorSig((dy.shape[1], x.shape[1] // groups, kh, kw), x.dtype)
    check_forward(_conv2d_type, "conv2d", [x, dw], {**attrs, "activation": "none"}, dy)
    return [dw]


# ---------------------------------------------------------------- SOAP rules
def _conv(
    x: Sequence[int], w: Sequence[int], out: Sequence[int], attrs: Attrs, sum_channels: bool
) -> tuple[list[Factor], Dims, Dims, Dims]:
    """Factors of a convolution with input shape `x`, weight `w` and output `out`,
    and the dims of x, w, out they index (its gradients reuse them, so the three
    ops split alike).

    Ungrouped, the input channels `c` are summed over (a split leaves partial sums)
    when `sum_channels`; a fused relu needs the complete sum first. Grouped, one
    factor `g` counts groups: a block of whole groups takes its input channels,
    output channels and weights with it (channel c of group g is g*Cg + c).
    """
    spatial, (h, w_) = window_factors(x[2:], w[2:], attrs["strides"], attrs["padding"], out[2:])
    factors = [Factor("n", x[0], "sample"), *spatial]
    if attrs["groups"] == 1:
        factors.append(Factor("o", w[0], "parameter"))
        c = "c" if sum_channels else None
        if sum_channels:
            factors.append(Factor("c", x[1], "parameter"))
        return factors, ("n", c, h, w_), ("o", c, None, None), ("n", "o", h, w_)
    factors.append(Factor("g", attrs["groups"], "parameter"))
    return factors, ("n", "g", h, w_), ("g", None, None, None), ("n", "g", h, w_)


def _conv2d_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    x, w = inputs
    relu = attrs["activation"] == "relu"
    factors, x_dims, w_dims, out_dims = _conv(x.shape, w.shape, results[0].shape, attrs, not relu)
    return op_rule(factors, [x_dims, w_dims], [out_dims], () if relu else ((0,), (1,)))


def _conv2d_grad_input_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    dy, w = inputs
    factors, x_dims, w_dims, out_dims = _conv(results[0].shape, w.shape, dy.shape, attrs, True)
    return op_rule(factors, [out_dims, w_dims], [x_dims], ((0,), (1,)))


def _conv2d_grad_weight_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    x, dy = inputs
    factors, x_dims, w_dims, out_dims = _conv(x.shape, results[0].shape, dy.shape, attrs, True)
    return op_rule(factors, [x_dims, out_dims], [w_dims], ((0,), (1,)))


def _enlarge_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (w,) = inputs
    factors = [Factor("o", w.shape[0], "parameter"), Factor("i", w.shape[1], "parameter")]
    return op_rule(factors, [("o", "i", None, None)], [("o", "i", None, None)], ((0,),))


def _groups(channels: int, group_channels: int) -> int:
    # Local input channels over the (never split) channels per group of the weight.
    return channels // group_channels if group_channels else 1


def _local_conv2d(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    x, w = operands
    return {**attrs, "groups": _groups(x[1], w[1])}


def _local_conv2d_grad_input(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    _, w = operands
    (dx,) = results
    return {**attrs, "input_shape": tuple(dx), "groups": _groups(dx[1], w[1])}


def _local_conv2d_grad_weight(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    x, _ = operands
    (dw,) = results
    return {**attrs, "groups": _groups(x[1], dw[1])}


# ------------------------------------------------------------------ kernels


def _enlarge(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    (w,) = inputs
    kh, kw = attrs["kernel"]
    dh, dw = (kh - w.shape[2]) // 2, (kw - w.shape[3]) // 2
    return [xp.pad(w, ((0, 0), (0, 0), (dh, dh), (dw, dw)))]


# -------------------------------------------------------------------- FLOPs


def _convolution_flops(out: TensorSig, weight: TensorSig) -> int:
    """Multiply-adds of a convolution making `out` with `weight` (OIHW); each gradient
    of a convolution is a convolution of the same size, so it costs the same."""
    _, cin_per_group, kh, kw = weight.shape
    return 2 * out.size * cin_per_group * kh * kw


def _conv2d_flops(inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]) -> int:
    (out,) = results
    activation = out.size if attrs["activation"] == "relu" else 0
    return _convolution_flops(out, inputs[1]) + activation


def _conv2d_grad_input_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    dy, weight = inputs
    return _convolution_flops(dy, weight)


def _conv2d_grad_weight_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    return _convolution_flops(inputs[1], results[0])


# -------------------------------------------------------------- definitions

_MADE_BY_AUTODIFF = "a gradient op made by autodiff, not differentiated again"

define(
    OpDef(
        "conv2d",
        (2, 2),
        _conv2d_type,
        _conv2d_soap,
        _conv2d_flops,
        None,
        local_attrs=_local_conv2d,
        domains={
            "strides": ((1, 1), (2, 2)),
            "padding": ("same", "valid"),
            "activation": ("none", "relu"),
            "groups": (1, 2),
        },
    ),
    OpDef(
        "conv2d_grad_input",
        (2, 2),
        _conv2d_grad_input_type,
        _conv2d_grad_input_soap,
        _conv2d_grad_input_flops,
        _MADE_BY_AUTODIFF,
        local_attrs=_local_conv2d_grad_input,
    ),
    OpDef(
        "conv2d_grad_weight",
        (2, 2),
        _conv2d_grad_weight_type,
        _conv2d_grad_weight_soap,
        _conv2d_grad_weight_flops,
        _MADE_BY_AUTODIFF,
        local_attrs=_local_conv2d_grad_weight,
    ),
    OpDef(
        "enlarge",
        (1, 1),
        _enlarge_type,
        _enlarge_soap,
        0,
        None,
        domains={"kernel": ((3, 3), (5, 5))},
        kernel=_enlarge,
    ),
)
