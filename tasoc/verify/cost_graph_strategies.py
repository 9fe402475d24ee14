"""Hypothesis strategies for `CostGraph`s (`tasoc.passes.soap.cost_graph`): small random
graphs of choices whose exact frontier brute force can still enumerate, for
property-testing the frontier, tiling and ILP searches.

    @given(cost_graphs(max_nodes=6))
    def test_ft_is_exact(graph):
        assert tracked(graph) == graph.brute_force_frontier()

Costs are small integers (times in whole units, memory in whole bytes), so sums are
exact in floating point and two strategies tie exactly or not at all; some option
pairs are impossible (`inf`), as a reader that cannot reach a layout is.
"""

from __future__ import annotations

import numpy as np
from hypothesis import strategies as st

from tasoc.passes.soap.cost_graph import CostEdge, CostGraph, CostNode


@st.composite
def cost_graphs(
    draw: st.DrawFn,
    *,
    max_nodes: int = 6,
    max_options: int = 3,
    max_extra_edges: int = 4,
    impossible: bool = True,
    edge_memory: bool = True,
) -> CostGraph:
    """A connected graph: a random tree over the nodes (each node joined to an earlier
    one), then up to `max_extra_edges` more edges between any two (parallel edges
    included), so chains, branches, cycles and the stuck shapes heuristic elimination
    exists for all occur. `impossible` lets some option pairs cost `inf` (each edge
    keeps one possible pair, but a graph may still have no feasible strategy, which
    the searches must say); `edge_memory` gives some edges a memory matrix."""
    count = draw(st.integers(1, max_nodes))
    costs = st.integers(0, 9)
    nodes = []
    for index in range(count):
        options = draw(st.integers(1, max_options))
        time = np.array(draw(st.lists(costs, min_size=options, max_size=options)), float)
        memory = np.array(draw(st.lists(costs, min_size=options, max_size=options)), float)
        nodes.append(CostNode(f"n{index}", time, memory))
    pairs = [(draw(st.integers(0, index - 1)), index) for index in range(1, count)]
    if count > 1:
        extra = st.tuples(st.integers(0, count - 1), st.integers(0, count - 1))
        pairs += [(a, b) for a, b in draw(st.lists(extra, max_size=max_extra_edges)) if a != b]
    edges = []
    for a, b in pairs:
        shape = (nodes[a].options, nodes[b].options)
        cells = shape[0] * shape[1]
        time = np.array(draw(st.lists(costs, min_size=cells, max_size=cells)), float)
        if impossible and cells > 1:
            blocked = draw(st.lists(st.booleans(), min_size=cells, max_size=cells))
            blocked[draw(st.integers(0, cells - 1))] = False
            time[np.array(blocked)] = np.inf
        time = time.reshape(shape)
        communicated = np.where(np.isfinite(time), time * 10, np.inf)
        memory = None
        if edge_memory and draw(st.booleans()):
            memory = np.array(draw(st.lists(costs, min_size=cells, max_size=cells)), float)
            memory = memory.reshape(shape)
        edges.append(CostEdge(a, b, time, communicated, memory))
    return CostGraph(tuple(nodes), tuple(edges))
