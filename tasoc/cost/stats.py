"""What one op does, independent of any machine: FLOPs and bytes moved.

`node_stats` counts an op as a standalone kernel would run it: every operand read
once from memory, every result written once. Fusion (`tasoc.cost.fusion`) later
removes the traffic of intermediates that never reach memory. Element-wise
transcendentals count a few FLOPs each (`_FLOPS_PER_ELEMENT`): rough, but they are
memory-bound on every preset, so the figure rarely decides anything.
"""

from __future__ import annotations

import weakref
from collections.abc import Callable
from dataclasses import dataclass

from xdsl.traits import ConstantLike

from tasoc.ir.dag import Node
from tasoc.ir.op_sets import ops_with
from tasoc.ir.shapes import TensorSig
from tasoc.ir.traits import DataMovement

_FLOPS_PER_ELEMENT: dict[str, int] = {
    "add": 1,
    "mul": 1,
    "scale": 1,
    "relu": 1,
    "sigmoid": 4,
    "tanh": 4,
    "gelu": 8,
    "neg": 1,
    "exp": 4,
    "log": 4,
    "sqrt": 2,
    "reciprocal": 1,
    "erf": 8,
    "abs": 1,
    "sub": 1,
    "div": 1,
    "pow": 8,
    "max": 1,
    "min": 1,
    "compare": 1,
    "not": 1,
    "and": 1,
    "or": 1,
    "xor": 1,
    "where": 1,
    "cast": 1,
    "batchnorm": 4,
    "layernorm": 8,
    "softmax": 5,
    "relu_grad": 1,
    "sigmoid_grad": 3,
    "tanh_grad": 3,
    "gelu_grad": 12,
    "layernorm_grad": 12,
    "batchnorm_train": 8,
    "batchnorm_grad": 12,
    "softmax_cross_entropy_grad": 6,
    "adam_update": 14,
}
"""FLOPs per (first) result element of the element-wise, normalizing and optimizer ops,
their gradients included."""


@dataclass(frozen=True, slots=True)
class OpStats:
    """Work of one op run on its own: FLOPs, bytes read and bytes written."""

    flops: int
    bytes_read: int
    bytes_written: int

    @property
    def bytes(self) -> int:
        return self.bytes_read + self.bytes_written


def sig_bytes(sig: TensorSig) -> int:
    return sig.size * sig.dtype.itemsize


def _matmul_flops(node: Node) -> int:
    (out,) = node.sigs
    return 2 * out.size * node.inputs[0].sig.shape[-1]


def _convolution_flops(out: TensorSig, weight: TensorSig) -> int:
    """Multiply-adds of a convolution making `out` with `weight` (OIHW); each gradient
    of a convolution is a convolution of the same size, so it costs the same."""
    _, cin_per_group, kh, kw = weight.shape
    return 2 * out.size * cin_per_group * kh * kw


def _conv2d_flops(node: Node) -> int:
    (out,) = node.sigs
    activation = out.size if node.attr("activation") == "relu" else 0
    return _convolution_flops(out, node.inputs[1].sig) + activation


def _conv2d_grad_input_flops(node: Node) -> int:
    dy, weight = (value.sig for value in node.inputs)
    return _convolution_flops(dy, weight)


def _conv2d_grad_weight_flops(node: Node) -> int:
    return _convolution_flops(node.inputs[1].sig, node.sigs[0])


def _pool2d_flops(node: Node) -> int:
    kh, kw = node.attr("kernel")
    return node.sigs[0].size * kh * kw


def _pool2d_grad_flops(node: Node) -> int:
    """Like the forward pooling: one pass over every window of dy's size."""
    kh, kw = node.attr("kernel")
    return node.inputs[1].sig.size * kh * kw


def _first_operand_flops(per_element: int) -> Callable[[Node], int]:
    """`per_element` FLOPs per element of the first operand: for ops whose result is
    smaller than what they read (a reduction, a loss per row, a scatter)."""
    return lambda node: per_element * node.inputs[0].sig.size


def _scatter_add_flops(node: Node) -> int:
    """One addition per element of the updates."""
    return node.inputs[1].sig.size


_FLOPS: dict[str, Callable[[Node], int]] = {
    "matmul": _matmul_flops,
    "conv2d": _conv2d_flops,
    "pool2d": _pool2d_flops,
    "reduce": _first_operand_flops(1),
    "conv2d_grad_input": _conv2d_grad_input_flops,
    "conv2d_grad_weight": _conv2d_grad_weight_flops,
    "pool2d_grad": _pool2d_grad_flops,
    "reduce_grad": _first_operand_flops(1),
    "scatter_add": _scatter_add_flops,
    "softmax_cross_entropy": _first_operand_flops(5),
}

_LOOKUPS: dict[str, int] = {"embedding": 0, "gather": 1}
"""Ops that read only the entries they gather, by the index of their indices operand."""

_ZERO = OpStats(0, 0, 0)

_CACHE: weakref.WeakKeyDictionary[Node, OpStats] = weakref.WeakKeyDictionary()


def node_stats(node: Node) -> OpStats:
    """FLOPs and bytes of `node` run as a standalone kernel (cached per node).

    Arguments and constants (`ConstantLike`) cost nothing; layout ops, embedding
    lookups and gathers (`DataMovement`) move data without arithmetic. An embedding
    or a gather reads only the entries it gathers, not the whole table.
    """
    stats = _CACHE.get(node)
    if stats is None:
        stats = _CACHE[node] = _compute(node)
    return stats


def _compute(node: Node) -> OpStats:
    if node.is_arg or node.op in ops_with(ConstantLike):
        return _ZERO
    written = sum(sig_bytes(sig) for sig in node.sigs)
    if node.op in _LOOKUPS:
        read = sig_bytes(node.inputs[_LOOKUPS[node.op]].sig) + written
    else:
        read = sum(sig_bytes(value.sig) for value in node.inputs)
    if node.op in ops_with(DataMovement):
        flops = 0
    elif node.op in _FLOPS:
        flops = _FLOPS[node.op](node)
    else:
        flops = _FLOPS_PER_ELEMENT[node.op] * node.sigs[0].size
    return OpStats(flops, read, written)
