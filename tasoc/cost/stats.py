"""What one op does, independent of any machine: FLOPs and bytes moved.

`node_stats` counts an op as a standalone kernel would run it: every operand read
once from memory, every result written once. Fusion (`tasoc.cost.fusion`) later
removes the traffic of intermediates that never reach memory. Element-wise
transcendentals count a few FLOPs each (`_FLOPS_PER_ELEMENT`): rough, but they are
memory-bound on every preset, so the figure rarely decides anything.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.traits import ConstantLike

from tasoc.ir.dag import Node
from tasoc.ir.op_sets import ops_with
from tasoc.ir.opdef import op_def
from tasoc.ir.shapes import TensorSig


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


_ZERO = OpStats(0, 0, 0)

_CACHE: dict[tuple[object, ...], OpStats] = {}
"""Stats by what they depend on (op, attributes, operand and result types), not by node:
a search's candidates rebuild every op downstream of a rewrite as new nodes of the
same structure, and each would miss a cache keyed by node."""
_CACHE_LIMIT = 1 << 16


def node_stats(node: Node) -> OpStats:
    """FLOPs and bytes of `node` run as a standalone kernel (cached by structure).

    Arguments and constants (`ConstantLike`) cost nothing; layout ops, embedding
    lookups and gathers move data without arithmetic (0 FLOPs in their definition).
    An embedding or a gather reads only the entries it gathers (`OpDef.gathers`), not
    the whole table.
    """
    key = (node.op, node.attrs, tuple(value.sig for value in node.inputs), node.sigs)
    stats = _CACHE.get(key)
    if stats is None:
        if len(_CACHE) >= _CACHE_LIMIT:
            _CACHE.clear()
        stats = _CACHE[key] = _compute(node)
    return stats


def _compute(node: Node) -> OpStats:
    if node.is_arg or node.op in ops_with(ConstantLike):
        return _ZERO
    written = sum(sig_bytes(sig) for sig in node.sigs)
    definition = op_def(node.op)
    if definition.gathers is not None:
        read = sig_bytes(node.inputs[definition.gathers].sig) + written
    else:
        read = sum(sig_bytes(value.sig) for value in node.inputs)
    inputs = [value.sig for value in node.inputs]
    flops = definition.count_flops(inputs, dict(node.attrs), node.sigs)
    return OpStats(flops, read, written)
