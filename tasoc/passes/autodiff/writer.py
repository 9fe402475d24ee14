"""`StepWriter`: makes the light-graph nodes of a training step, in program order.

Every node `autodiff` makes goes through one writer, which remembers the order the
nodes were first made in. That order is the step's schedule (forward, then the
backward layer by layer with each weight's update as soon as its gradient is
complete), which `Dag.scheduled` keeps when the step is written back: nodes are
interned, so making a node twice returns the first one and keeps its first place.

The helpers are the few compositions the gradient rules share (negation, scaling
by a number, summing a broadcast gradient back to an operand's shape, ...); each
makes ordinary `graph` ops, so the step stays an ordinary program.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.dag import Node, Value
from tasoc.ir.shapes import ConstData, DType, TensorSig


class StepWriter:
    """Makes nodes and records the order they were first made in (`order`)."""

    def __init__(self) -> None:
        self.order: list[Node] = []
        self._made: set[Node] = set()

    def node(self, op: str, *inputs: Value, **attrs: Any) -> Node:
        """The node `op(inputs; attrs)`, recorded at its first making."""
        made = Node(op, inputs, **attrs)
        if made not in self._made:
            self._made.add(made)
            self.order.append(made)
        return made

    def value(self, op: str, *inputs: Value, **attrs: Any) -> Value:
        """The only result of `op(inputs; attrs)`."""
        return self.node(op, *inputs, **attrs).out

    # ------------------------------------------------------------ constants
    def scalar(self, number: float, dtype: DType) -> Value:
        """A rank-0 constant of `dtype`."""
        return self.value("constant", value=ConstData((), dtype, (float(number),)))

    def ones(self, sig: TensorSig) -> Value:
        return self.value("ones", shape=sig.shape, dtype=sig.dtype)

    def zeros(self, sig: TensorSig) -> Value:
        return self.value("zeros", shape=sig.shape, dtype=sig.dtype)

    # ------------------------------------------------------------ arithmetic
    def add(self, lhs: Value, rhs: Value) -> Value:
        return self.value("add", lhs, rhs)

    def mul(self, lhs: Value, rhs: Value) -> Value:
        return self.value("mul", lhs, rhs)

    def times(self, x: Value, number: float) -> Value:
        """`x * number`, a `graph.scale` by a constant; `x` itself for 1."""
        if number == 1:
            return x
        return self.value("scale", x, self.scalar(number, x.sig.dtype))

    def subtract(self, lhs: Value, rhs: Value) -> Value:
        """`lhs - rhs`: the `graph` dialect has no subtraction, so `lhs + rhs * -1`."""
        return self.add(lhs, self.times(rhs, -1.0))

    def total(self, values: Sequence[Value]) -> Value:
        """The sum of `values` (one or more, of one type), added left to right."""
        result = values[0]
        for value in values[1:]:
            result = self.add(result, value)
        return result

    # ------------------------------------------------------------ shapes
    def reshape(self, x: Value, shape: Sequence[int]) -> Value:
        shape = tuple(shape)
        return x if x.sig.shape == shape else self.value("reshape", x, shape=shape)

    def transpose(self, x: Value, perm: Sequence[int]) -> Value:
        perm = tuple(perm)
        return x if perm == tuple(range(len(perm))) else self.value("transpose", x, perm=perm)

    def swap_last_two(self, x: Value) -> Value:
        """`x` with its last two dimensions exchanged (a matrix transpose per batch)."""
        rank = x.sig.rank
        return self.transpose(x, (*range(rank - 2), rank - 1, rank - 2))

    def sum_all(self, x: Value) -> Value:
        """The rank-0 sum of every element of `x`."""
        if x.sig.rank == 0:
            return x
        return self.value("reduce", x, kind="sum", axes=tuple(range(x.sig.rank)), keepdims=False)

    def sum_to(self, gradient: Value, shape: Sequence[int]) -> Value:
        """`gradient` of a broadcast result summed back to the operand's `shape`.

        NumPy broadcasting prepends dimensions and stretches size-1 ones; the
        gradient of a broadcast operand is the sum over exactly those dimensions.
        """
        shape = tuple(shape)
        have = gradient.sig.shape
        if have == shape:
            return gradient
        lead = len(have) - len(shape)
        axes = [*range(lead)]
        axes += [lead + i for i, size in enumerate(shape) if size == 1 and have[lead + i] != 1]
        if not axes:
            return self.reshape(gradient, shape)
        # Dropping only the leading axes gives `shape` itself; otherwise keep them all
        # as ones and reshape.
        keepdims = axes[-1] >= lead
        summed = self.value("reduce", gradient, kind="sum", axes=tuple(axes), keepdims=keepdims)
        return self.reshape(summed, shape)
