"""Element-wise ops: arithmetic, activations, comparison and logic, casts, and the
activation gradients autodiff emits.

Each op's definition is here: its typing rule, its SOAP rule (element-wise ops split
along every dim of the result; the `linear` operands say which partial sums pass
through), its FLOPs per element, and its kernel, written once against an array
namespace `xp` (NumPy for the reference, `jax.numpy` for the JAX lowering). The
gradient formulas of relu, sigmoid, tanh and gelu are written here once, as the
kernels of `relu_grad`, `sigmoid_grad`, `tanh_grad` and `gelu_grad`; a backend keeps
its own kernel only where it must differ (`div` and `cast` on integers, JAX's fused
`sigmoid` and `gelu`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, InferFn, OpDef, SoapFn, XpKernel, define
from tasoc.ir.shapes import (
    Attrs,
    DType,
    ShapeError,
    TensorSig,
    broadcast_shapes,
    choice_attr,
    dtype_attr,
    expect_shape,
    fmt_shape,
    need_boolean,
    need_float,
    need_number,
    same_dtype,
)
from tasoc.ir.soap import OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    elementwise_rule,
)

# ------------------------------------------------------------------ typing


def _binary_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    dtype = same_dtype(lhs, rhs)
    need_number(lhs, "operands")
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), dtype)]


def _unary_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    need_float(inputs[0])
    return [inputs[0]]


def _signed_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    need_number(inputs[0])
    return [inputs[0]]


COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
"""The predicates of `graph.compare`."""


def _compare_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    same_dtype(lhs, rhs)
    choice_attr(attrs, "predicate", COMPARISONS)
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), DType.BOOL)]


def _not_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    need_boolean(inputs[0])
    return [inputs[0]]


def _logic_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    need_boolean(lhs, "lhs")
    need_boolean(rhs, "rhs")
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), DType.BOOL)]


def _where_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    condition, lhs, rhs = inputs
    need_boolean(condition, "condition")
    dtype = same_dtype(lhs, rhs)
    shape = broadcast_shapes(condition.shape, broadcast_shapes(lhs.shape, rhs.shape))
    return [TensorSig(shape, dtype)]


def _cast_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    return [TensorSig(inputs[0].shape, dtype_attr(attrs, "to"))]


def _scale_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, s = inputs
    if s.rank != 0:
        raise ShapeError(f"scalar operand must have rank 0, got {fmt_shape(s.shape)}")
    same_dtype(x, s)
    return [x]


def _activation_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    forward, dy = inputs
    need_float(forward)
    same_dtype(forward, dy)
    expect_shape(dy, "dy", forward.shape)
    return [forward]


# ---------------------------------------------------------------- SOAP rules
def _add_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return elementwise_rule(inputs, results, ((0, 1),))


def _mul_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return elementwise_rule(inputs, results, ((0,), (1,)))


def _sub_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # A difference of partial sums is the partial sum of differences, as for add.
    return elementwise_rule(inputs, results, ((0, 1),))


def _linear_in_first_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # -x and x / d are linear in x (for a fixed divisor d).
    return elementwise_rule(inputs, results, ((0,),))


def _where_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # A selection between partial sums (of a complete condition) is the partial sum
    # of the selections.
    return elementwise_rule(inputs, results, ((1, 2),))


def _pointwise_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return elementwise_rule(inputs, results, ())


def _pointwise_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dx = f'(y) * dy: linear in dy for a fixed forward value.
    return elementwise_rule(inputs, results, ((1,),))


# ------------------------------------------------------------------ kernels


def _applying(function: str) -> XpKernel:
    """The kernel applying `xp.<function>` to the operands."""
    return lambda xp, attrs, inputs: [getattr(xp, function)(*inputs)]


_PREDICATES: Mapping[str, str] = {
    "eq": "equal",
    "ne": "not_equal",
    "lt": "less",
    "le": "less_equal",
    "gt": "greater",
    "ge": "greater_equal",
}
"""`graph.compare`'s predicates as array-API function names."""


def _compare(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [getattr(xp, _PREDICATES[attrs["predicate"]])(inputs[0], inputs[1])]


def _relu(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.maximum(inputs[0], 0)]


def _sigmoid(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    # 1/(1+exp(-x)) rewritten through tanh: the same function, without overflow in exp.
    return [0.5 * (1 + xp.tanh(0.5 * inputs[0]))]


def _normal_cdf(xp: ArrayNamespace, x: Any) -> Any:
    """Phi(x), written as erfc(-x/sqrt 2)/2, which keeps its relative accuracy for
    very negative x."""
    return 0.5 * xp.erfc(-x / math.sqrt(2))


def _gelu(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x = inputs[0]
    return [x * _normal_cdf(xp, x)]


# The activation gradients, from the forward's saved output y (relu, sigmoid, tanh)
# or its input x (gelu, which cannot be inverted): the closed forms of JAX's jvp rules.


def _relu_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    y, dy = inputs
    return [xp.where(y > 0, dy, xp.zeros_like(dy))]


def _sigmoid_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    y, dy = inputs
    return [dy * y * (1 - y)]


def _tanh_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    y, dy = inputs
    return [dy * (1 - y * y)]


def _gelu_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    # d/dx x*Phi(x) = Phi(x) + x*phi(x).
    x, dy = inputs
    pdf = xp.exp(-0.5 * x * x) / math.sqrt(2 * math.pi)
    return [dy * (_normal_cdf(xp, x) + x * pdf)]


# -------------------------------------------------------------- definitions

_NO_BOOLEAN_GRADIENT = "a boolean result has no gradient"
_MADE_BY_AUTODIFF = "a gradient op made by autodiff, not differentiated again"


def _binary(name: str, soap: SoapFn, flops: int, kernel: XpKernel | None) -> OpDef:
    """A differentiable broadcasting binary op on numbers."""
    return OpDef(name, (2, 2), _binary_type, soap, flops, None, kernel=kernel, in_place=True)


def _unary(name: str, flops: int, kernel: XpKernel) -> OpDef:
    """A differentiable unary op on floats."""
    return OpDef(
        name, (1, 1), _unary_type, _pointwise_soap, flops, None, kernel=kernel, in_place=True
    )


def _logic(name: str, arity: int, infer: InferFn, kernel: XpKernel) -> OpDef:
    """An op with a boolean result, which has no gradient."""
    return OpDef(
        name,
        (arity, arity),
        infer,
        _pointwise_soap,
        1,
        _NO_BOOLEAN_GRADIENT,
        kernel=kernel,
        in_place=True,
    )


def _activation_grad(name: str, flops: int, kernel: XpKernel) -> OpDef:
    return OpDef(
        name,
        (2, 2),
        _activation_grad_type,
        _pointwise_grad_soap,
        flops,
        _MADE_BY_AUTODIFF,
        kernel=kernel,
        in_place=True,
    )


define(
    _binary("add", _add_soap, 1, _applying("add")),
    _binary("mul", _mul_soap, 1, _applying("multiply")),
    _binary("sub", _sub_soap, 1, _applying("subtract")),
    # Integer division truncates toward zero, which NumPy and JAX each spell their way.
    _binary("div", _linear_in_first_soap, 1, None),
    _binary("max", _pointwise_soap, 1, _applying("maximum")),
    _binary("min", _pointwise_soap, 1, _applying("minimum")),
    OpDef(
        "pow",
        (2, 2),
        _binary_type,
        _pointwise_soap,
        8,
        "not differentiated yet",
        kernel=_applying("power"),
        in_place=True,
    ),
    OpDef(
        "scale",
        (2, 2),
        _scale_type,
        _mul_soap,
        1,
        None,
        kernel=_applying("multiply"),
        in_place=True,
    ),
    _unary("relu", 1, _relu),
    _unary("sigmoid", 4, _sigmoid),
    _unary("tanh", 4, _applying("tanh")),
    _unary("gelu", 8, _gelu),
    _unary("exp", 4, _applying("exp")),
    _unary("log", 4, _applying("log")),
    _unary("sqrt", 2, _applying("sqrt")),
    _unary("reciprocal", 1, _applying("reciprocal")),
    _unary("erf", 8, _applying("erf")),
    OpDef(
        "neg",
        (1, 1),
        _signed_type,
        _linear_in_first_soap,
        1,
        None,
        kernel=_applying("negative"),
        in_place=True,
    ),
    OpDef(
        "abs",
        (1, 1),
        _signed_type,
        _pointwise_soap,
        1,
        None,
        kernel=_applying("abs"),
        in_place=True,
    ),
    _logic("compare", 2, _compare_type, _compare),
    _logic("not", 1, _not_type, _applying("logical_not")),
    *(_logic(name, 2, _logic_type, _applying(f"logical_{name}")) for name in ("and", "or", "xor")),
    OpDef(
        "where", (3, 3), _where_type, _where_soap, 1, None, kernel=_applying("where"), in_place=True
    ),
    # A float to an integer saturates, as XLA converts; NumPy needs that spelled out.
    OpDef("cast", (1, 1), _cast_type, _pointwise_soap, 1, None, in_place=True),
    _activation_grad("relu_grad", 1, _relu_grad),
    _activation_grad("sigmoid_grad", 3, _sigmoid_grad),
    _activation_grad("tanh_grad", 3, _tanh_grad),
    _activation_grad("gelu_grad", 12, _gelu_grad),
)
