"""Element-wise ONNX ops: arithmetic, math functions, comparisons, logic, Where, Cast.

Each is one `graph` op of the same meaning (the binary ones broadcast as ONNX's do),
except where noted: Mul by a scalar is TASO's `scale`, Div by a known float tensor is
a multiplication by its reciprocal (`docs/onnx.md`), variadic ops are chains of binary
ones, and Pow of mixed element types computes in f64 as onnxruntime does.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from onnx import TensorProto
from xdsl.ir import SSAValue

from tasoc.backends.onnx.conventions import DTYPES_BY_ONNX
from tasoc.backends.onnx.known_values import Known, Origin, Value, is_float
from tasoc.backends.onnx.operands import element_type
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G
from tasoc.ir.shapes import DType

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)


def dtype_of(x: SSAValue) -> DType:
    """The element type of an SSA value."""
    return G.sig_of(x.type).dtype


# --------------------------------------------------------------------- arithmetic


@_handles("Add")
def _add(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.AddOp, imp.data(node.input[0]), imp.data(node.input[1]))]


@_handles("Mul")
def _mul(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    if imp.form(node) == "mul":
        return [imp.op(G.MulOp, imp.data(node.input[0]), imp.data(node.input[1]))]
    return [_multiply(imp, node.input[0], node.input[1])]


def _multiply(imp: Importer, a: str, b: str) -> SSAValue:
    """a * b: `graph.scale` when one side is a known scalar, else a broadcast `mul`."""
    for x, s in ((a, b), (b, a)):
        scalar = imp.scalar(s, len(imp.shape(x)))
        if scalar is not None:
            return imp.op(G.ScaleOp, imp.data(x), scalar)
    return imp.op(G.MulOp, imp.data(a), imp.data(b))


@_handles("Sub")
def _sub(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(G.SubOp, imp.data(node.input[0]), imp.data(node.input[1]))]


@_handles("Div")
def _div(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    divisor = imp.value(node.input[1])
    # A division by a known float tensor multiplies by its reciprocal, unless the
    # exporter recorded a `div` (TASO's rules know `scale` and `mul`, not `div`).
    if imp.form(node) == "div" or not (isinstance(divisor, Known) and is_float(divisor.array)):
        return [imp.op(G.DivOp, imp.data(node.input[0]), imp.data(node.input[1]))]
    # The reciprocal of a weight is a weight (named `<weight>.reciprocal`), of a literal a literal.
    origin = Origin.INITIALIZER if divisor.origin is Origin.INITIALIZER else Origin.DERIVED
    # x / 0 and x * (1 / 0) are the same inf or nan; an overflowing reciprocal (of a
    # subnormal) is not, and is an error (the importer raises floating-point errors).
    with np.errstate(divide="ignore"):
        inverse = np.asarray(1 / divisor.array)
    reciprocal = Known(f"{divisor.name}.reciprocal", inverse, origin)
    imp.env[reciprocal.name] = reciprocal
    return [_multiply(imp, node.input[0], reciprocal.name)]


@_handles("Pow")
def _pow(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    base, exponent = imp.data(node.input[0]), imp.data(node.input[1])
    kind, power = dtype_of(base), dtype_of(exponent)
    if kind == power:
        return [imp.op(G.PowOp, base, exponent)]
    if not (kind.is_float or power.is_float):  # integers of two widths: the base's
        return [imp.op(G.PowOp, base, imp.op(G.CastOp, exponent, to=kind))]
    # Mixed types compute in double, as onnxruntime's std::pow does, and the result
    # is converted to the base's type (an integer truncated).
    wide = [imp.op(G.CastOp, x, to=DType.F64) for x in (base, exponent)]
    return [imp.op(G.CastOp, imp.op(G.PowOp, *wide), to=kind)]


def _chain(op: type[G.GraphOp]) -> Handler:
    """A variadic op (Sum, Max, Min) as a left-to-right chain of a binary one."""

    def handler(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        return [_folded(imp, op, [imp.data(name) for name in node.input if name])]

    return handler


def _folded(imp: Importer, op: type[G.GraphOp], values: Sequence[SSAValue]) -> SSAValue:
    if not values:
        imp.fail("at least one input is required")
    result = values[0]
    for value in values[1:]:
        result = imp.op(op, result, value)
    return result


HANDLERS["Sum"] = _chain(G.AddOp)
HANDLERS["Max"] = _chain(G.MaxOp)
HANDLERS["Min"] = _chain(G.MinOp)


@_handles("Mean")
def _mean(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    values = [imp.data(name) for name in node.input if name]
    total = _folded(imp, G.AddOp, values)
    if len(values) == 1:
        return [total]
    return [imp.op(G.DivOp, total, imp.literal(float(len(values)), total))]


# ----------------------------------------------------------------- math functions

_UNARY: dict[str, type[G.GraphOp]] = {
    "Neg": G.NegOp,
    "Abs": G.AbsOp,
    "Sqrt": G.SqrtOp,
    "Exp": G.ExpOp,
    "Log": G.LogOp,
    "Reciprocal": G.ReciprocalOp,
    "Erf": G.ErfOp,
}


@_handles(*_UNARY)
def _unary(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(_UNARY[node.op_type], imp.data(node.input[0]))]


# ----------------------------------------------------- comparisons, logic, Where

_PREDICATES = {
    "Equal": "eq",
    "Less": "lt",
    "LessOrEqual": "le",
    "Greater": "gt",
    "GreaterOrEqual": "ge",
}


@_handles(*_PREDICATES)
def _compare(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    a, b = imp.data(node.input[0]), imp.data(node.input[1])
    return [imp.op(G.CompareOp, a, b, predicate=_PREDICATES[node.op_type])]


_LOGIC: dict[str, type[G.GraphOp]] = {"And": G.AndOp, "Or": G.OrOp, "Xor": G.XorOp}


@_handles(*_LOGIC)
def _logic(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    return [imp.op(_LOGIC[node.op_type], imp.data(node.input[0]), imp.data(node.input[1]))]


@_handles("Not")
def _not(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    x = imp.data(node.input[0])
    equal = x.owner
    if (
        imp.form(node) == "ne"
        and isinstance(equal, G.CompareOp)
        and equal.py_attrs()["predicate"] == "eq"
        and imp.readers[node.input[0]] == 1
        and not imp.is_output(node.input[0])
    ):
        # ONNX has no NotEqual: the exporter writes graph.compare{ne} as Not(Equal).
        equal.properties["predicate"] = G.to_attr("ne")
        return [x]
    return [imp.op(G.NotOp, x)]


@_handles("Where")
def _where(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    condition, a, b = (imp.data(name) for name in node.input[:3])
    return [imp.op(G.WhereOp, condition, a, b)]


# -------------------------------------------------------------------------- casts


@_handles("Cast")
def _cast(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    """Cast to a type the dialect has. `saturate` and `round_mode` only concern float8
    targets, which it does not have, so they change nothing here."""
    element_type(imp, attrs["to"], "to")
    target = DTYPES_BY_ONNX.get(attrs["to"])
    if target is None:
        name = TensorProto.DataType.Name(attrs["to"])
        imp.fail(f"a cast to {name} is not supported (the dialect has {_dialect_types()})")
    return [cast(imp, imp.data(node.input[0]), target)]


@_handles("CastLike")
def _cast_like(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    like = imp.value(node.input[1])
    target = imp.dtype(like) if isinstance(like, Known) else dtype_of(like)
    return [cast(imp, imp.data(node.input[0]), target)]


def cast(imp: Importer, x: SSAValue, target: DType) -> SSAValue:
    """x converted to `target`; itself when it has that type already."""
    return x if dtype_of(x) == target else imp.op(G.CastOp, x, to=target)


def in_float32(imp: Importer, x: SSAValue, compute: Callable[[SSAValue], SSAValue]) -> SSAValue:
    """`compute(x)`, a composition of several ops, on a float16 or bfloat16 `x` computed
    in float32 and rounded back once, as onnxruntime computes such functions and as
    ONNX's expected outputs round them: each op rounding to 8 or 11 bits would add an
    error of its own at every step (Elu's e^x - 1 loses most of its bits)."""
    kind = dtype_of(x)
    if kind not in (DType.F16, DType.BF16):
        return compute(x)
    return cast(imp, compute(cast(imp, x, DType.F32)), kind)


def _dialect_types() -> str:
    return ", ".join(TensorProto.DataType.Name(t) for t in DTYPES_BY_ONNX)
