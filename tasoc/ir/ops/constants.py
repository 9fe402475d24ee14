"""Constants: `ones`, `zeros`, TASO's `c_pool`, `i_conv` and `i_matmul`, and small
dense `constant`s written in the IR.

They have no operands, so no SOAP configuration: their results are laid out as
declared. They cost nothing (the cost model skips `ConstantLike` ops) and have no
gradient. Their kernels are written once; `xp.dtype_of` gives the backend's type.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ConstData,
    ShapeError,
    TensorSig,
    dtype_attr,
    int_attr,
    ints_attr,
    pair_attr,
)
from tasoc.ir.soap import OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    op_rule,
)

# ------------------------------------------------------------------ typing


def _filled_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    shape = ints_attr(attrs, "shape")
    if min(shape, default=0) < 0:
        raise ShapeError(f"shape {list(shape)} has a negative dimension")
    return [TensorSig(shape, dtype_attr(attrs))]


def _c_pool_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    channels = int_attr(attrs, "channels")
    kh, kw = pair_attr(attrs, "kernel")
    if channels < 1:
        raise ShapeError(f"channels must be positive, got {channels}")
    return [TensorSig((channels, 1, kh, kw), dtype_attr(attrs))]


def _i_conv_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    channels = int_attr(attrs, "channels")
    kh, kw = pair_attr(attrs, "kernel")
    if channels < 1 or kh % 2 == 0 or kw % 2 == 0:
        raise ShapeError(f"identity kernel needs positive channels and odd sizes, got {kh}x{kw}")
    return [TensorSig((channels, channels, kh, kw), dtype_attr(attrs))]


def _i_matmul_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    size = int_attr(attrs, "size")
    if size < 1:
        raise ShapeError(f"size must be positive, got {size}")
    return [TensorSig((size, size), dtype_attr(attrs))]


def _constant_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    value = attrs["value"]
    if not isinstance(value, ConstData):
        raise ShapeError(f"value must be a dense constant, got {value!r}")
    return [TensorSig(value.shape, value.dtype)]


# ---------------------------------------------------------------- SOAP rules
def _constant_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # No operands to take a configuration from: the result is laid out as declared.
    return op_rule([], [], [(None,) * sig.rank for sig in results])


# ------------------------------------------------------------------ kernels


def _ones(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.ones(attrs["shape"], xp.dtype_of(attrs["dtype"]))]


def _zeros(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.zeros(attrs["shape"], xp.dtype_of(attrs["dtype"]))]


def _c_pool(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    kh, kw = attrs["kernel"]
    shape = (attrs["channels"], 1, kh, kw)
    return [xp.full(shape, 1.0 / (kh * kw), xp.dtype_of(attrs["dtype"]))]


def _i_conv(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    kh, kw = attrs["kernel"]
    eye = xp.eye(attrs["channels"], dtype=xp.dtype_of(attrs["dtype"]))[:, :, None, None]
    return [xp.pad(eye, ((0, 0), (0, 0), (kh // 2, kh // 2), (kw // 2, kw // 2)))]


def _i_matmul(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.eye(attrs["size"], dtype=xp.dtype_of(attrs["dtype"]))]


def _constant(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    value: ConstData = attrs["value"]
    return [xp.reshape(xp.asarray(value.values, xp.dtype_of(value.dtype)), value.shape)]


# -------------------------------------------------------------- definitions

_CONSTANT = "a constant"
_KERNEL_DOMAIN = {"kernel": ((1, 1), (3, 3))}

define(
    OpDef("ones", (0, 0), _filled_type, _constant_soap, 0, _CONSTANT, kernel=_ones),
    OpDef("zeros", (0, 0), _filled_type, _constant_soap, 0, _CONSTANT, kernel=_zeros),
    OpDef(
        "c_pool",
        (0, 0),
        _c_pool_type,
        _constant_soap,
        0,
        _CONSTANT,
        domains=_KERNEL_DOMAIN,
        kernel=_c_pool,
    ),
    OpDef(
        "i_conv",
        (0, 0),
        _i_conv_type,
        _constant_soap,
        0,
        _CONSTANT,
        domains=_KERNEL_DOMAIN,
        kernel=_i_conv,
    ),
    OpDef("i_matmul", (0, 0), _i_matmul_type, _constant_soap, 0, _CONSTANT, kernel=_i_matmul),
    OpDef("constant", (0, 0), _constant_type, _constant_soap, 0, _CONSTANT, kernel=_constant),
)
