"""Pooling: `pool2d` (average or max over NCHW windows; average counts padded zeros)
and its gradient `pool2d_grad`.

A spatial dim splits only where the windows tile it exactly (`window_factors`).
Average pooling is linear, max pooling is not. The kernels differ by backend
(windows in NumPy, `lax.reduce_window` and its vjp in JAX).
"""

from __future__ import annotations

from collections.abc import Sequence

from tasoc.ir.opdef import OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    check_forward,
    choice_attr,
    need_float,
    padding_attr,
    pair_attr,
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


def _pool2d_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    need_float(x)
    if x.rank != 4:
        raise ShapeError(f"input must be 4-D (NCHW), got {x.rank}-D")
    choice_attr(attrs, "kind", ("avg", "max"))
    n, c, h, w = x.shape
    kernel, strides = pair_attr(attrs, "kernel"), pair_attr(attrs, "strides")
    oh, ow = window_output((h, w), kernel, strides, padding_attr(attrs))
    return [TensorSig((n, c, oh, ow), x.dtype)]


def _pool2d_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    check_forward(_pool2d_type, "pool2d", [x], attrs, dy)
    return [x]


# ---------------------------------------------------------------- SOAP rules
def _pool(x: TensorSig, out: Sequence[int], attrs: Attrs) -> tuple[list[Factor], Dims]:
    spatial, (h, w) = window_factors(
        x.shape[2:], attrs["kernel"], attrs["strides"], attrs["padding"], out[2:]
    )
    channels = [Factor("n", x.shape[0], "sample"), Factor("c", x.shape[1], "parameter")]
    return [*channels, *spatial], ("n", "c", h, w)


def _pool2d_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _pool(inputs[0], results[0].shape, attrs)
    # Average pooling is linear; max pooling is not.
    return op_rule(factors, [dims], [dims], ((0,),) if attrs["kind"] == "avg" else ())


def _pool2d_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # avg spreads dy over each window whatever x holds: x gives only dx's shape.
    x, dy = inputs
    factors, dims = _pool(x, dy.shape, attrs)
    return op_rule(factors, [dims, dims], [dims], ((1,),), (0,) if attrs["kind"] == "avg" else ())


# -------------------------------------------------------------------- FLOPs


def _pool2d_flops(inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]) -> int:
    kh, kw = attrs["kernel"]
    return results[0].size * kh * kw


def _pool2d_grad_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    """Like the forward pooling: one pass over every window of dy's size."""
    kh, kw = attrs["kernel"]
    return inputs[1].size * kh * kw


define(
    OpDef(
        "pool2d",
        (1, 1),
        _pool2d_type,
        _pool2d_soap,
        _pool2d_flops,
        None,
        domains={
            "kind": ("avg", "max"),
            "kernel": ((1, 1), (2, 2), (3, 3)),
            "strides": ((1, 1), (2, 2)),
            "padding": ("same", "valid"),
        },
    ),
    OpDef(
        "pool2d_grad",
        (2, 2),
        _pool2d_grad_type,
        _pool2d_grad_soap,
        _pool2d_grad_flops,
        "a gradient op made by autodiff, not differentiated again",
    ),
)
