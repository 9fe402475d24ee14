"""Which operands of `graph` ops are indices, and into what.

Class labels (`graph.softmax_cross_entropy` and its gradient: classes are the logits'
last dimension) and ids (`graph.embedding`: rows of the table, `graph.scatter_add`:
rows of its result) must lie in [0, bound); `graph.gather`'s indices in [-bound,
bound), the size of the gathered axis; a GNN op's sources rows of its features and its
targets rows of a block. Two places need that fact: drawing valid
random arguments (`backends.arguments`) and refusing out-of-range ones before a JAX
run, which cannot raise on data (`driver.index_ranges`). It is written once, here.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from xdsl.ir import Operation

from tasoc.ir.graph import sig_of


@dataclass(frozen=True, slots=True)
class IndexOperand:
    """Operand `operand` of an op indexes `[0, bound(op))`, or `[-bound, bound)` when
    `from_end` (a negative index counts from the end); `role` names the operand and
    `bound_is` what the bound is, for the error message."""

    operand: int
    role: str
    bound_is: str
    bound: Callable[[Operation], int]
    from_end: bool = False

    def least(self, op: Operation) -> int:
        """The least index `op` accepts in this operand."""
        return -self.bound(op) if self.from_end else 0


def _logits_classes(op: Operation) -> int:
    return sig_of(op.operands[0].type).shape[-1]


def _table_rows(op: Operation) -> int:
    return sig_of(op.operands[1].type).shape[0]


def _result_rows(op: Operation) -> int:
    return sig_of(op.results[0].type).shape[0]


def _gathered_axis(op: Operation) -> int:
    data = sig_of(op.operands[0].type)
    return data.shape[op.py_attrs()["axis"] % data.rank]


def _source_rows(op: Operation) -> int:
    return sig_of(op.operands[0].type).shape[0]


def _block_rows(op: Operation) -> int:
    return int(op.py_attrs()["block_rows"])


def _edges(src: int | None, dst: int) -> tuple[IndexOperand, ...]:
    """A GNN op's edge arrays: sources are rows of operand 0, targets rows of a block
    (an argument never holds -1 padding, which only constants written by a pass do)."""
    target = IndexOperand(dst, "dst", "rows of a block (block_rows)", _block_rows)
    if src is None:
        return (target,)
    return (IndexOperand(src, "src", "rows of the sources", _source_rows), target)


_LABELS = IndexOperand(1, "labels", "classes, the logits' last dimension", _logits_classes)

INDEX_OPERANDS: Mapping[str, tuple[IndexOperand, ...]] = {
    "graph.softmax_cross_entropy": (_LABELS,),
    "graph.softmax_cross_entropy_grad": (_LABELS,),
    "graph.embedding": (IndexOperand(0, "ids", "rows of the table", _table_rows),),
    "graph.scatter_add": (IndexOperand(0, "ids", "rows of the result", _result_rows),),
    "graph.gather": (
        IndexOperand(
            1, "indices", "entries along the gathered axis", _gathered_axis, from_end=True
        ),
    ),
    "graph.aggregate": _edges(1, 2),
    "graph.aggregate_grad": _edges(1, 2),
    "graph.aggregate_weight_grad": _edges(1, 2),
    "graph.edge_softmax": _edges(None, 1),
    "graph.edge_softmax_grad": _edges(None, 1),
    "graph.edge_scores": _edges(2, 3),
}
"""The ops' index operands, by op name (so this works whichever ops are loaded)."""


def index_operand(op: Operation, operand: int) -> IndexOperand | None:
    """What operand `operand` of `op` indexes, or None when it is no index."""
    return next((i for i in INDEX_OPERANDS.get(op.name, ()) if i.operand == operand), None)
