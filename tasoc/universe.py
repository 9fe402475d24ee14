"""xDSL plugin entry point: makes the `graph` dialect visible to xdsl-opt and friends."""

from xdsl.universe import Universe


def _graph_dialect():
    from tasoc.ir.graph import Graph

    return Graph


TASOC_UNIVERSE = Universe(all_dialects={"graph": _graph_dialect})
