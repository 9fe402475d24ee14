"""ONNX's Reduce* ops: `graph.reduce`, with element-wise ops before or after it.

ReduceSum, ReduceMean, ReduceMax, ReduceMin and ReduceProd are one `reduce` each;
ReduceL1 sums |x|, ReduceSumSquare x * x, ReduceL2 is the square root of that,
ReduceLogSum the log of a sum, and ReduceLogSumExp is computed as onnxruntime does,
m + log(sum(exp(x - m))) with m the maximum, so that it does not overflow where the
result does not. The compositions compute in float32 for float16 and bfloat16 inputs.
With `noop_with_empty_axes` and no axes nothing is reduced, and the element-wise parts
apply alone (ReduceSumSquare gives x * x), as in ONNX's reference.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import onnx
from xdsl.ir import SSAValue

from tasoc.backends.onnx.elementwise import cast, dtype_of, in_float32
from tasoc.backends.onnx.known_values import Value
from tasoc.backends.onnx.operands import int_list
from tasoc.backends.onnx.registry import Handler
from tasoc.ir import graph as G
from tasoc.ir.shapes import DType

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

Reduce = Callable[[SSAValue, str, bool], SSAValue]
"""Reduces a value (`kind`, keeping the reduced dims or not) over the node's axes."""


def _reduction(
    compose: Callable[[Importer, SSAValue, Reduce, bool], SSAValue], wide: bool = True
) -> Handler:
    """The handler of a Reduce* op computing `compose(imp, x, reduce, keepdims)`: with
    `wide`, in float32 for float16 and bfloat16 inputs (`elementwise.in_float32`), as
    a composition of several ops should be."""

    def handler(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
        x = imp.data(node.input[0])
        axes = int_list(imp, node, attrs, "axes", 1) or []
        noop = not axes and bool(attrs.get("noop_with_empty_axes", 0))
        axes = axes or list(range(len(imp.shape(x))))

        def reduce(value: SSAValue, kind: str, keepdims: bool) -> SSAValue:
            if noop or not axes:  # no axes: a rank-0 input, or the noop flag
                return value
            return imp.op(G.ReduceOp, value, kind=kind, axes=tuple(axes), keepdims=keepdims)

        keepdims = bool(attrs.get("keepdims", 1))
        if not wide:
            return [compose(imp, x, reduce, keepdims)]
        return [in_float32(imp, x, lambda value: compose(imp, value, reduce, keepdims))]

    return handler


def _plain(kind: str) -> Handler:
    """One `reduce`; ReduceMax and ReduceMin of booleans (opset 20) reduce them as the
    bytes 0 and 1, which makes max `any` and min `all`: the dialect orders no i1."""

    def compose(imp: Importer, x: SSAValue, reduce: Reduce, keepdims: bool) -> SSAValue:
        if dtype_of(x) != DType.BOOL or kind not in ("max", "min"):
            return reduce(x, kind, keepdims)
        return cast(imp, reduce(cast(imp, x, DType.U8), kind, keepdims), DType.BOOL)

    return _reduction(compose, wide=False)


def _square(imp: Importer, x: SSAValue) -> SSAValue:
    return imp.op(G.MulOp, x, x)


def _log_sum_exp(imp: Importer, x: SSAValue, reduce: Reduce, keepdims: bool) -> SSAValue:
    peak = reduce(x, "max", True)
    total = reduce(imp.op(G.ExpOp, imp.op(G.SubOp, x, peak)), "sum", keepdims)
    return imp.op(G.AddOp, imp.op(G.LogOp, total), imp.reshape(peak, imp.shape(total)))


HANDLERS: dict[str, Handler] = {
    "ReduceSum": _plain("sum"),
    "ReduceMean": _plain("mean"),
    "ReduceMax": _plain("max"),
    "ReduceMin": _plain("min"),
    "ReduceProd": _plain("prod"),
    "ReduceL1": _reduction(lambda imp, x, reduce, k: reduce(imp.op(G.AbsOp, x), "sum", k)),
    "ReduceSumSquare": _reduction(lambda imp, x, reduce, k: reduce(_square(imp, x), "sum", k)),
    "ReduceL2": _reduction(
        lambda imp, x, reduce, k: imp.op(G.SqrtOp, reduce(_square(imp, x), "sum", k))
    ),
    "ReduceLogSum": _reduction(lambda imp, x, reduce, k: imp.op(G.LogOp, reduce(x, "sum", k))),
    "ReduceLogSumExp": _reduction(_log_sum_exp),
}
