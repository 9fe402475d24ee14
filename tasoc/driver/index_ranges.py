"""Integer arguments that index something, checked against what they index before a run.

Class labels (`graph.softmax_cross_entropy` and its gradient: classes are the logits'
last dimension) and ids (`graph.embedding`: rows of the table, `graph.scatter_add`:
rows of its result) must lie in [0, bound), `graph.gather`'s indices in [-bound, bound)
(`tasoc.ir.indices`). The reference interpreter raises on a
value outside, but a jitted JAX function cannot raise on data: it yields NaN or
drops the row, and a training run would go on with a NaN loss. So `tasoc run` checks
the argument values against the bound of every op that reads them, on any backend,
before running.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import numpy as np
from xdsl.dialects import func
from xdsl.ir import Operation, SSAValue

from tasoc.ir.indices import IndexOperand, index_operand
from tasoc.ir.program import arg_infos, entry_block

_REARRANGING = frozenset({"graph.reshape", "graph.transpose"})
"""Ops whose result holds exactly their operand's elements: ids reshaped are still ids."""


def _index_uses(value: SSAValue) -> Iterator[tuple[Operation, IndexOperand]]:
    """Each op that reads `value` (through reshapes and transposes) as an index."""
    for use in value.uses:
        name = use.operation.name
        if name in _REARRANGING:
            yield from _index_uses(use.operation.results[0])
        elif (index := index_operand(use.operation, use.index)) is not None:
            yield use.operation, index


def check_index_ranges(function: func.FuncOp, arguments: Sequence[np.ndarray]) -> None:
    """ValueError naming the argument, the first bad value, where it is and the range,
    when an argument used as an index holds a value outside what it indexes."""
    for info, argument, array in zip(
        arg_infos(function), entry_block(function).args, arguments, strict=True
    ):
        if info.sig.dtype.is_float or not np.size(array):
            continue
        for op, index in _index_uses(argument):
            least, bound = index.least(op), index.bound(op)
            bad = (array < least) | (array >= bound)
            if bad.any():
                where = tuple(int(i) for i in np.argwhere(bad)[0])
                at = f" at {list(where)}" if where else ""
                raise ValueError(
                    f"argument '{info.name}' holds {array[where]}{at}, "
                    f"outside [{least}, {bound}): "
                    f"it is the {index.role} of {op.name}, which has {bound} {index.bound_is}"
                )
