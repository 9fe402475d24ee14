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
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.traits import DataMovement

ITEM_BYTES: dict[DType, int] = {
    DType.F32: 4,
    DType.F16: 2,
    DType.BF16: 2,
    DType.I32: 4,
    DType.I64: 8,
}

_FLOPS_PER_ELEMENT: dict[str, int] = {
    "add": 1,
    "mul": 1,
    "scale": 1,
    "relu": 1,
    "sigmoid": 4,
    "tanh": 4,
    "gelu": 8,
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
    return sig.size * ITEM_BYTES[sig.dtype]


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

_ZERO = OpStats(0, 0, 0)

_CACHE: weakref.WeakKeyDictionary[Node, OpStats] = weakref.WeakKeyDictionary()


def node_stats(node: Node) -> OpStats:
    """FLOPs and bytes of `node` run as a standalone kernel (cached per node).

    Arguments and constants (`ConstantLike`) cost nothing; layout ops and embedding
    lookups (`DataMovement`) move data without arithmetic. An embedding reads only
    the rows it gathers, not the whole table.
    """
    stats = _CACHE.get(node)
    if stats is None:
        stats = _CACHE[node] = _compute(node)
    return stats


def _compute(node: Node) -> OpStats:
    if node.is_arg or node.op in ops_with(ConstantLike):
        return _ZERO
    written = sum(sig_bytes(sig) for sig in node.sigs)
    if node.op == "embedding":
        read = sig_bytes(node.inputs[0].sig) + written
    else:
        read = sum(sig_bytes(value.sig) for value in node.inputs)
    if node.op in ops_with(DataMovement):
        flops = 0
    elif node.op in _FLOPS:
        flops = _FLOPS[node.op](node)
    else:
        flops = _FLOPS_PER_ELEMENT[node.op] * node.sigs[0].size
    return OpStats(flops, read, written)
