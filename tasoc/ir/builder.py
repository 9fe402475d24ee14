"""`GraphBuilder`: write `graph` programs from Python with shapes inferred.

    g = GraphBuilder()
    x = g.input("x", (1, 3, 32, 32))
    w = g.param("w", (16, 3, 3, 3))
    y = g.conv2d(x, w, strides=(1, 1), padding="same", activation="relu")
    module = g.build(y)

Every method checks its operands the way the verifier does (the same
`shapes.infer`), so a mistake fails where it is made, with the op named.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, SSAValue

from tasoc.ir import graph as G
from tasoc.ir.program import ENTRY, make_function
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig

Padding = str | Sequence[int]


class GraphBuilder:
    """Appends `graph` ops to the body of one function and wraps it in a module."""

    def __init__(self, name: str = ENTRY) -> None:
        self.name = name
        self.block = Block()
        self._params: list[bool] = []
        self._names: set[str] = set()
        self._built = False

    # ---------------------------------------------------------------- arguments
    def _argument(self, name: str, shape: Sequence[int], dtype: str, param: bool) -> SSAValue:
        _check_argument_name(name, self._names)
        self._names.add(name)
        sig = TensorSig(tuple(int(d) for d in shape), DType(dtype))
        if any(d < 0 for d in sig.shape):
            raise ShapeError(f"argument '{name}': negative dimension in {list(shape)}")
        arg = self.block.insert_arg(G.tensor_type(sig), len(self.block.args))
        arg.name_hint = name
        self._params.append(param)
        return arg

    def input(self, name: str, shape: Sequence[int], dtype: str = "f32") -> SSAValue:
        """An activation input of the program."""
        return self._argument(name, shape, dtype, param=False)

    def param(self, name: str, shape: Sequence[int], dtype: str = "f32") -> SSAValue:
        """A weight: an argument marked `{graph.param}` whose value lives outside the IR."""
        return self._argument(name, shape, dtype, param=True)

    # ------------------------------------------------------------------- core
    def emit(self, op_cls: type[G.GraphOp], *operands: SSAValue, **attrs: Any) -> G.GraphOp:
        """Append one op with inferred result types and return it."""
        if self._built:
            raise RuntimeError("GraphBuilder.build() was already called")
        op = op_cls.create_typed(operands, **attrs)
        self.block.add_op(op)
        return op

    def _one(self, op_cls: type[G.GraphOp], *operands: SSAValue, **attrs: Any) -> SSAValue:
        return self.emit(op_cls, *operands, **attrs).results[0]

    def _three(
        self, op_cls: type[G.GraphOp], *operands: SSAValue, **attrs: Any
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        first, second, third = self.emit(op_cls, *operands, **attrs).results
        return first, second, third

    # ------------------------------------------------------------ element-wise
    def add(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.AddOp, lhs, rhs)

    def mul(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.MulOp, lhs, rhs)

    def scale(self, x: SSAValue, scalar: SSAValue | float) -> SSAValue:
        """x times a rank-0 tensor; a Python number becomes a `graph.constant`."""
        if not isinstance(scalar, SSAValue):
            scalar = self.constant(np.asarray(scalar, dtype=np.float32), G.sig_of(x.type).dtype)
        return self._one(G.ScaleOp, x, scalar)

    def relu(self, x: SSAValue) -> SSAValue:
        return self._one(G.ReluOp, x)

    def sigmoid(self, x: SSAValue) -> SSAValue:
        return self._one(G.SigmoidOp, x)

    def tanh(self, x: SSAValue) -> SSAValue:
        return self._one(G.TanhOp, x)

    def gelu(self, x: SSAValue) -> SSAValue:
        return self._one(G.GeluOp, x)

    # ---------------------------------------------------------------- linear
    def transpose(self, x: SSAValue, perm: Sequence[int]) -> SSAValue:
        return self._one(G.TransposeOp, x, perm=tuple(perm))

    def matmul(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.MatmulOp, lhs, rhs)

    def conv2d(
        self,
        x: SSAValue,
        w: SSAValue,
        strides: Sequence[int] = (1, 1),
        padding: Padding = "same",
        activation: str = "none",
        groups: int = 1,
    ) -> SSAValue:
        return self._one(
            G.Conv2dOp,
            x,
            w,
            strides=tuple(strides),
            padding=_padding(padding),
            activation=activation,
            groups=groups,
        )

    def enlarge(self, w: SSAValue, kernel: Sequence[int]) -> SSAValue:
        return self._one(G.EnlargeOp, w, kernel=tuple(kernel))

    def pool2d(
        self,
        x: SSAValue,
        kind: str,
        kernel: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: Padding = "valid",
    ) -> SSAValue:
        return self._one(
            G.Pool2dOp,
            x,
            kind=kind,
            kernel=tuple(kernel),
            strides=tuple(strides or kernel),
            padding=_padding(padding),
        )

    # ------------------------------------------------------------- structure
    def concat(self, xs: Sequence[SSAValue], axis: int) -> SSAValue:
        return self._one(G.ConcatOp, *xs, axis=axis)

    def split(self, x: SSAValue, axis: int, sizes: Sequence[int]) -> list[SSAValue]:
        return list(self.emit(G.SplitOp, x, axis=axis, sizes=tuple(sizes)).results)

    def reshape(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        return self._one(G.ReshapeOp, x, shape=tuple(shape))

    # ------------------------------------------------------------- constants
    def ones(self, shape: Sequence[int], dtype: str = "f32") -> SSAValue:
        return self._one(G.OnesOp, shape=tuple(shape), dtype=DType(dtype))

    def zeros(self, shape: Sequence[int], dtype: str = "f32") -> SSAValue:
        return self._one(G.ZerosOp, shape=tuple(shape), dtype=DType(dtype))

    def c_pool(self, channels: int, kernel: Sequence[int], dtype: str = "f32") -> SSAValue:
        return self._one(G.CPoolOp, channels=channels, kernel=tuple(kernel), dtype=DType(dtype))

    def i_conv(self, channels: int, kernel: Sequence[int], dtype: str = "f32") -> SSAValue:
        return self._one(G.IConvOp, channels=channels, kernel=tuple(kernel), dtype=DType(dtype))

    def i_matmul(self, size: int, dtype: str = "f32") -> SSAValue:
        return self._one(G.IMatmulOp, size=size, dtype=DType(dtype))

    def constant(self, value: Any, dtype: str = "f32") -> SSAValue:
        """A small dense constant (a scalar, a bias folded in, ...) kept in the IR text."""
        array = np.asarray(value)
        kind = DType(dtype)
        cast = int if not kind.is_float else float
        data = ConstData(array.shape, kind, tuple(cast(v) for v in array.reshape(-1).tolist()))
        return self._one(G.ConstantOp, value=data)

    # ------------------------------------------------------------ model ops
    def softmax(self, x: SSAValue, axis: int = -1) -> SSAValue:
        return self._one(G.SoftmaxOp, x, axis=axis)

    def reduce(
        self, x: SSAValue, kind: str, axes: Sequence[int], keepdims: bool = False
    ) -> SSAValue:
        return self._one(G.ReduceOp, x, kind=kind, axes=tuple(axes), keepdims=keepdims)

    def batchnorm(
        self,
        x: SSAValue,
        scale: SSAValue,
        bias: SSAValue,
        mean: SSAValue,
        var: SSAValue,
        epsilon: float = 1e-5,
    ) -> SSAValue:
        return self._one(G.BatchnormOp, x, scale, bias, mean, var, epsilon=float(epsilon))

    def layernorm(
        self, x: SSAValue, gamma: SSAValue, beta: SSAValue, axis: int = -1, epsilon: float = 1e-5
    ) -> SSAValue:
        return self._one(G.LayernormOp, x, gamma, beta, axis=axis, epsilon=float(epsilon))

    def embedding(self, ids: SSAValue, table: SSAValue) -> SSAValue:
        return self._one(G.EmbeddingOp, ids, table)

    # ------------------------------- arithmetic, comparison, logic and indexing
    def neg(self, x: SSAValue) -> SSAValue:
        return self._one(G.NegOp, x)

    def exp(self, x: SSAValue) -> SSAValue:
        return self._one(G.ExpOp, x)

    def log(self, x: SSAValue) -> SSAValue:
        return self._one(G.LogOp, x)

    def sqrt(self, x: SSAValue) -> SSAValue:
        return self._one(G.SqrtOp, x)

    def reciprocal(self, x: SSAValue) -> SSAValue:
        return self._one(G.ReciprocalOp, x)

    def erf(self, x: SSAValue) -> SSAValue:
        return self._one(G.ErfOp, x)

    def abs(self, x: SSAValue) -> SSAValue:
        return self._one(G.AbsOp, x)

    def sub(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.SubOp, lhs, rhs)

    def div(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.DivOp, lhs, rhs)

    def pow(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.PowOp, lhs, rhs)

    def max(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.MaxOp, lhs, rhs)

    def min(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.MinOp, lhs, rhs)

    def compare(self, lhs: SSAValue, rhs: SSAValue, predicate: str) -> SSAValue:
        """An i1 tensor: `predicate` is eq, ne, lt, le, gt or ge."""
        return self._one(G.CompareOp, lhs, rhs, predicate=predicate)

    def not_(self, x: SSAValue) -> SSAValue:
        return self._one(G.NotOp, x)

    def and_(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.AndOp, lhs, rhs)

    def or_(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.OrOp, lhs, rhs)

    def xor(self, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.XorOp, lhs, rhs)

    def where(self, condition: SSAValue, lhs: SSAValue, rhs: SSAValue) -> SSAValue:
        return self._one(G.WhereOp, condition, lhs, rhs)

    def cast(self, x: SSAValue, to: str) -> SSAValue:
        return self._one(G.CastOp, x, to=DType(to))

    def broadcast(self, x: SSAValue, shape: Sequence[int]) -> SSAValue:
        return self._one(G.BroadcastOp, x, shape=tuple(shape))

    def gather(self, data: SSAValue, indices: SSAValue, axis: int = 0) -> SSAValue:
        return self._one(G.GatherOp, data, indices, axis=axis)

    # ------------------------- backward ops, losses and optimizer updates (autodiff)
    # Each backward op takes its forward op's attributes, with the same defaults.
    def relu_grad(self, y: SSAValue, dy: SSAValue) -> SSAValue:
        """relu's gradient from its output `y`."""
        return self._one(G.ReluGradOp, y, dy)

    def sigmoid_grad(self, y: SSAValue, dy: SSAValue) -> SSAValue:
        """sigmoid's gradient from its output `y`."""
        return self._one(G.SigmoidGradOp, y, dy)

    def tanh_grad(self, y: SSAValue, dy: SSAValue) -> SSAValue:
        """tanh's gradient from its output `y`."""
        return self._one(G.TanhGradOp, y, dy)

    def gelu_grad(self, x: SSAValue, dy: SSAValue) -> SSAValue:
        """gelu's gradient from its input `x`."""
        return self._one(G.GeluGradOp, x, dy)

    def conv2d_grad_input(
        self,
        dy: SSAValue,
        w: SSAValue,
        input_shape: Sequence[int],
        strides: Sequence[int] = (1, 1),
        padding: Padding = "same",
        groups: int = 1,
    ) -> SSAValue:
        return self._one(
            G.Conv2dGradInputOp,
            dy,
            w,
            strides=tuple(strides),
            padding=_padding(padding),
            groups=groups,
            input_shape=tuple(input_shape),
        )

    def conv2d_grad_weight(
        self,
        x: SSAValue,
        dy: SSAValue,
        kernel: Sequence[int],
        strides: Sequence[int] = (1, 1),
        padding: Padding = "same",
        groups: int = 1,
    ) -> SSAValue:
        return self._one(
            G.Conv2dGradWeightOp,
            x,
            dy,
            strides=tuple(strides),
            padding=_padding(padding),
            groups=groups,
            kernel=tuple(kernel),
        )

    def pool2d_grad(
        self,
        x: SSAValue,
        dy: SSAValue,
        kind: str,
        kernel: Sequence[int],
        strides: Sequence[int] | None = None,
        padding: Padding = "valid",
    ) -> SSAValue:
        return self._one(
            G.Pool2dGradOp,
            x,
            dy,
            kind=kind,
            kernel=tuple(kernel),
            strides=tuple(strides or kernel),
            padding=_padding(padding),
        )

    def reduce_grad(
        self, x: SSAValue, dy: SSAValue, kind: str, axes: Sequence[int], keepdims: bool = False
    ) -> SSAValue:
        return self._one(G.ReduceGradOp, x, dy, kind=kind, axes=tuple(axes), keepdims=keepdims)

    def scatter_add(self, ids: SSAValue, updates: SSAValue, rows: int) -> SSAValue:
        """The gradient of an embedding table of `rows` rows."""
        return self._one(G.ScatterAddOp, ids, updates, rows=rows)

    # ------------------------------------------------- graph neural networks
    def aggregate(
        self,
        x: SSAValue,
        src: SSAValue,
        dst: SSAValue,
        weight: SSAValue | None = None,
        *,
        reduce: str = "sum",
        block_rows: int,
    ) -> SSAValue:
        """Neighbour aggregation over the edge arrays `src`, `dst` ([blocks, edges])."""
        edges = (src, dst) if weight is None else (src, dst, weight)
        return self._one(G.AggregateOp, x, *edges, reduce=reduce, block_rows=block_rows)

    def edge_softmax(self, scores: SSAValue, dst: SSAValue, block_rows: int) -> SSAValue:
        return self._one(G.EdgeSoftmaxOp, scores, dst, block_rows=block_rows)

    def edge_scores(
        self, a: SSAValue, b: SSAValue, src: SSAValue, dst: SSAValue, block_rows: int
    ) -> SSAValue:
        """Every edge's a[source] + b[target]."""
        return self._one(G.EdgeScoresOp, a, b, src, dst, block_rows=block_rows)

    def layernorm_grad(
        self, x: SSAValue, gamma: SSAValue, dy: SSAValue, axis: int = -1, epsilon: float = 1e-5
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(dx, dgamma, dbeta)."""
        return self._three(G.LayernormGradOp, x, gamma, dy, axis=axis, epsilon=float(epsilon))

    def batchnorm_train(
        self, x: SSAValue, scale: SSAValue, bias: SSAValue, epsilon: float = 1e-5
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(y, batch mean, biased batch variance)."""
        return self._three(G.BatchnormTrainOp, x, scale, bias, epsilon=float(epsilon))

    def batchnorm_grad(
        self, x: SSAValue, scale: SSAValue, dy: SSAValue, epsilon: float = 1e-5
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(dx, dscale, dbias) of batchnorm_train's output."""
        return self._three(G.BatchnormGradOp, x, scale, dy, epsilon=float(epsilon))

    def softmax_cross_entropy(self, logits: SSAValue, labels: SSAValue) -> SSAValue:
        return self._one(G.SoftmaxCrossEntropyOp, logits, labels)

    def softmax_cross_entropy_grad(
        self, logits: SSAValue, labels: SSAValue, dloss: SSAValue
    ) -> SSAValue:
        return self._one(G.SoftmaxCrossEntropyGradOp, logits, labels, dloss)

    def adam_update(
        self,
        param: SSAValue,
        grad: SSAValue,
        m: SSAValue,
        v: SSAValue,
        step: SSAValue,
        lr: float = 1e-3,
        beta1: float = 0.9,
        beta2: float = 0.999,
        epsilon: float = 1e-8,
    ) -> tuple[SSAValue, SSAValue, SSAValue]:
        """(param', m', v') after the update numbered `step` (1-based, a rank-0 tensor)."""
        return self._three(
            G.AdamUpdateOp,
            param,
            grad,
            m,
            v,
            step,
            lr=float(lr),
            beta1=float(beta1),
            beta2=float(beta2),
            epsilon=float(epsilon),
        )

    # ------------------------------------------------------------------ finish
    def build(self, *outputs: SSAValue) -> ModuleOp:
        """Return `builtin.module { func.func @name(...) { ...; func.return outputs } }`."""
        if not outputs:
            raise ValueError("a program needs at least one output")
        if self._built:
            raise RuntimeError("GraphBuilder.build() was already called")
        self._built = True
        function = make_function(self.name, self.block, self._params, outputs)
        return ModuleOp([function])


def _padding(padding: Padding) -> str | tuple[int, ...]:
    """A window op's `padding` attribute: a mode name, or the 4 integers as a tuple."""
    return padding if isinstance(padding, str) else tuple(padding)


_PRINTABLE_NAME = re.compile(r"[A-Za-z_$.-][\w$.-]*")
_NUMBERED_SUFFIX = re.compile(r"_\d+$")


def _check_argument_name(name: str, taken: set[str]) -> None:
    """Reject names the IR cannot keep, since weights are matched to values by name.

    xDSL prints a value name only if it is a valid MLIR identifier, and strips a
    trailing `_<digits>` (its own uniquing suffix), so `w_1` and `w_2` would both
    print as `%w...` and their `.npz` values could not be told apart.
    """
    if not _PRINTABLE_NAME.fullmatch(name):
        raise ValueError(f"argument name '{name}' is not a valid IR identifier")
    if _NUMBERED_SUFFIX.search(name):
        raise ValueError(
            f"argument name '{name}' ends in '_<digits>', which the IR printer strips; "
            f"use e.g. '{_NUMBERED_SUFFIX.sub(lambda m: m.group(0)[1:], name)}'"
        )
    if name in taken:
        raise ValueError(f"argument name '{name}' is used twice")


def shape_of(value: SSAValue) -> tuple[int, ...]:
    """The static shape of a builder value (handy when writing models)."""
    return G.sig_of(value.type).shape
