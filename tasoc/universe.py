"""xDSL plugin entry point: makes the `graph` dialect and tasoc's passes visible to
xdsl-opt and friends (`xdsl-opt -p equality-rewrite m.mlir`).

Only tasoc's own passes are offered: the xDSL passes `tasoc opt` also lists are
xDSL's already, and the multiverse refuses a name defined twice.
"""

from xdsl.ir import Dialect
from xdsl.universe import Universe

from tasoc.passes.registry import TASOC_PASSES


def _graph_dialect() -> Dialect:
    from tasoc.ir.graph import Graph

    return Graph


TASOC_UNIVERSE = Universe(all_dialects={"graph": _graph_dialect}, all_passes=TASOC_PASSES)
