"""xDSL plugin entry point: makes the `graph`, `parallel` and `memory` dialects and tasoc's
passes visible to xdsl-opt and friends (`xdsl-opt -p equality-rewrite m.mlir`).

Only tasoc's own passes are offered: the xDSL passes `tasoc opt` also lists are
xDSL's already, and the multiverse refuses a name defined twice.
"""

from xdsl.ir import Dialect
from xdsl.universe import Universe

from tasoc.passes.registry import TASOC_PASSES


def _graph_dialect() -> Dialect:
    from tasoc.ir.graph import Graph

    return Graph


def _parallel_dialect() -> Dialect:
    from tasoc.ir.parallel import Parallel

    return Parallel


def _memory_dialect() -> Dialect:
    from tasoc.ir.memory import Memory

    return Memory


TASOC_UNIVERSE = Universe(
    all_dialects={
        "graph": _graph_dialect,
        "parallel": _parallel_dialect,
        "memory": _memory_dialect,
    },
    all_passes=TASOC_PASSES,
)
