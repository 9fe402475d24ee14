"""ONNX activation functions and Clip.

Relu, Sigmoid, Tanh and Gelu are `graph` ops; the others are their ONNX definitions
spelled in element-wise ops (`where` on a comparison for the piecewise ones, `max`
and `min` for the bounded ones), each rounding as its definition's steps do. Softplus
is the overflow-free form of log(1 + e^x), relu(x) + log(1 + e^-|x|), the one
onnxruntime computes. Those spelled in several ops compute in float32 for float16 and
bfloat16 inputs, rounding once at the end, as onnxruntime's kernels do.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx
from xdsl.ir import SSAValue

from tasoc.backends.onnx.elementwise import in_float32
from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import Value
from tasoc.backends.onnx.operands import optional_input
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

_UNARY: dict[str, type[G.GraphOp]] = {"Relu": G.ReluOp, "Sigmoid": G.SigmoidOp, "Tanh": G.TanhOp}


@_handles(*_UNARY)
def _unary(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    conv = x.owner
    if (
        node.op_type == "Relu"
        and imp.form(node) == "fused"
        and isinstance(conv, G.Conv2dOp)
        and conv.py_attrs()["activation"] == "none"
        and imp.readers[node.input[0]] == 1
        and not imp.is_output(node.input[0])
    ):
        conv.properties["activation"] = G.to_attr("relu")
        return [x]
    return [imp.op(_UNARY[node.op_type], x)]


Composition = Callable[["Importer", SSAValue, dict[str, Any]], SSAValue]
"""An activation spelled in several ops: (importer, x, the node's attributes) -> y."""


def _composed(*op_types: str) -> Callable[[Composition], Composition]:
    """Register the handler of an activation spelled in several ops, which computes
    them in float32 for float16 and bfloat16 inputs (`elementwise.in_float32`)."""

    def register(compose: Composition) -> Composition:
        def handler(
            imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]
        ) -> list[Value | None]:
            x = imp.data(node.input[0])
            return [in_float32(imp, x, lambda wide: compose(imp, wide, attrs))]

        _handles(*op_types)(handler)
        return compose

    return register


@_handles("Gelu")
def _gelu(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    if attrs.get("approximate", "none") == "none":
        return [imp.op(G.GeluOp, x)]
    return [in_float32(imp, x, lambda wide: _tanh_gelu(imp, wide))]


def _tanh_gelu(imp: Importer, x: SSAValue) -> SSAValue:
    """0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    cube = imp.op(G.MulOp, imp.op(G.MulOp, x, x), x)
    inner = imp.op(G.AddOp, x, imp.op(G.ScaleOp, cube, imp.literal(0.044715, x)))
    tanh = imp.op(G.TanhOp, imp.op(G.ScaleOp, inner, imp.literal(math.sqrt(2 / math.pi), x)))
    half_x = imp.op(G.ScaleOp, x, imp.literal(0.5, x))
    return imp.op(G.MulOp, half_x, imp.op(G.AddOp, tanh, imp.literal(1.0, x)))


# ---------------------------------------------------------------------- piecewise


def _below_zero(imp: Importer, x: SSAValue, predicate: str = "lt") -> SSAValue:
    """The i1 tensor x < 0 (or another comparison with 0)."""
    return imp.op(G.CompareOp, x, imp.literal(0.0, x), predicate=predicate)


def _scaled(imp: Importer, x: SSAValue, factor: float) -> SSAValue:
    return imp.op(G.ScaleOp, x, imp.literal(factor, x))


@_handles("LeakyRelu")
def _leaky_relu(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    alpha = attrs.get("alpha", 0.01)
    return [imp.op(G.WhereOp, _below_zero(imp, x), _scaled(imp, x, alpha), x)]


@_handles("PRelu")
def _prelu(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x, slope = imp.data(node.input[0]), imp.data(node.input[1])
    y = imp.op(G.WhereOp, _below_zero(imp, x), imp.op(G.MulOp, x, slope), x)
    if imp.shape(y) != imp.shape(x):  # the slope broadcasts to X, never X to it
        imp.fail(
            f"slope of shape {format_dims(imp.shape(slope))} does not broadcast to X's "
            f"shape {format_dims(imp.shape(x))}"
        )
    return [y]


@_composed("Elu")
def _elu(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    expm1 = imp.op(G.SubOp, imp.op(G.ExpOp, x), imp.literal(1.0, x))
    return imp.op(G.WhereOp, _below_zero(imp, x), _scaled(imp, expm1, attrs.get("alpha", 1.0)), x)


_SELU_ALPHA = 1.67326319217681884765625
_SELU_GAMMA = 1.05070102214813232421875
"""Selu's default alpha and gamma, as the ONNX spec writes them (float32 values)."""


@_composed("Selu")
def _selu(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    alpha, gamma = attrs.get("alpha", _SELU_ALPHA), attrs.get("gamma", _SELU_GAMMA)
    # gamma * (alpha * e^x - alpha) for x <= 0, gamma * x above.
    negative = imp.op(G.SubOp, _scaled(imp, imp.op(G.ExpOp, x), alpha), imp.literal(alpha, x))
    y = imp.op(G.WhereOp, _below_zero(imp, x, "le"), negative, x)
    return _scaled(imp, y, gamma)


# ------------------------------------------------------------------------ bounded


def _bounded(imp: Importer, x: SSAValue, low: SSAValue | None, high: SSAValue | None) -> SSAValue:
    """min(max(x, low), high), leaving out an absent bound."""
    if low is not None:
        x = imp.op(G.MaxOp, x, low)
    if high is not None:
        x = imp.op(G.MinOp, x, high)
    return x


@_handles("Clip")
def _clip(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """Clip to inputs `min` and `max`; an absent bound leaves that side unbounded."""
    x = imp.data(node.input[0])
    low, high = (optional_input(node, index) for index in (1, 2))
    for name, what in ((low, "min"), (high, "max")):
        if name is not None and imp.shape(name) not in ((), (1,)):
            imp.fail(f"{what} must be a scalar, got shape {format_dims(imp.shape(name))}")
    bounds = [None if name is None else _scalar(imp, name) for name in (low, high)]
    return [_bounded(imp, x, *bounds)]


def _scalar(imp: Importer, name: str) -> SSAValue:
    value = imp.data(name)
    return value if imp.shape(value) == () else imp.reshape(value, ())


def _hard_sigmoid(imp: Importer, x: SSAValue, alpha: float, beta: float) -> SSAValue:
    """max(0, min(1, alpha x + beta))."""
    linear = imp.op(G.AddOp, _scaled(imp, x, alpha), imp.literal(beta, x))
    return _bounded(imp, linear, imp.literal(0.0, x), imp.literal(1.0, x))


@_composed("HardSigmoid")
def _hard_sigmoid_node(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    return _hard_sigmoid(imp, x, attrs.get("alpha", 0.2), attrs.get("beta", 0.5))


@_composed("HardSwish")
def _hard_swish(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    return imp.op(G.MulOp, x, _hard_sigmoid(imp, x, 1 / 6, 0.5))


# ------------------------------------------------------------------------- smooth


@_composed("Softplus")
def _softplus(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    decay = imp.op(G.ExpOp, imp.op(G.NegOp, imp.op(G.AbsOp, x)))
    log1p = imp.op(G.LogOp, imp.op(G.AddOp, decay, imp.literal(1.0, x)))
    return imp.op(G.AddOp, imp.op(G.ReluOp, x), log1p)


@_composed("Softsign")
def _softsign(imp: Importer, x: SSAValue, attrs: dict[str, Any]) -> SSAValue:
    return imp.op(G.DivOp, x, imp.op(G.AddOp, imp.op(G.AbsOp, x), imp.literal(1.0, x)))
