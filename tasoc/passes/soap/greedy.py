"""Spartan's maximum-connectivity-group-first tiling (Huang's thesis §2.3.3, Fig. 2.8):
a fast greedy choice of one option per node that keeps communicated bytes low.

Spartan turns each operator into a node group, one tiling node per way to tile it, and
weighs the edges between tiling nodes of adjacent groups by the bytes re-tiling costs.
Choosing a tiling per group to minimize the total is NP-complete (its Appendix A), so
it decides greedily: groups in order of connectivity (how many groups they touch), most
first, because a group's cost depends on its neighbours' choices and a group with more
neighbours weighs more on the total. For group x each option y costs FindCost(x, y):
for every adjacent group g, the least bytes between y and g's options still open (only
g's chosen one once g is decided), all edges between x and g summed per option pair.
x takes its cheapest option and its other options' edges are removed, so later groups
see only that one. On a `CostGraph` a node group is a node, a tiling node an option
and the edge weight `CostEdge.bytes`.

Not carried over: FindCost's recursion through view operators (swapaxis, transpose),
whose tiling follows from their neighbour's. Spartan needs it because a view has no
tiling choice of its own; tasoc's SOAP rules already give each op its own options
(a transposing op's configurations name the layout it reads), so no node of a
`CostGraph` is a view of another.

The greedy is not exact: Spartan's Fig. 3.3 (C = A + B, D = A^T + B^T, E = C + D)
decides C and D first, finds both free row-wise, and so pays for conflicting views of
A and B where tiling D column-wise would have paid only at E. Spartan found it optimal
on 95 of 100 random programs (§3.2); it runs in O(E * K^2) here, milliseconds where
brute force takes hours.

Memory: Spartan §2.3.4 lets users give a memory budget that its "duplication" tiling
nodes (a replica per access axis) draw on, and never chooses duplication beyond it.
Generalized to every option's memory, an option is allowed only if a lower bound on
the memory of every strategy completing the choices so far stays within the budget:
`fixed_memory`, plus the decided nodes' memory and the candidate's, plus every
undecided node's least memory, plus for each edge with a memory matrix the least of
its pairs still open. If no option is allowed the node takes the one with the least
such bound (it is over budget whatever it does).

What the budget guarantees: the bound is exact once every node is decided, so when no
node fell back the result's memory is within the budget. Without edge memory, a
node's least-memory option never raises the bound, so the greedy never falls back
while the least-memory strategy fits: if ANY strategy fits the budget, the result
does. With edge memory an allowed choice can raise the bound for later nodes until
none fits, so the result may exceed a budget some strategy meets (the tests show one).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np

from tasoc.passes.soap.cost_graph import Choice, CostGraph, Floats


@dataclass(frozen=True)
class Tiling:
    """The greedy's strategy and what it communicates."""

    choice: Choice
    """One option per node."""
    bytes: float
    """`graph.communicated(choice)` (inf if the greedy ended on an impossible pair)."""
    order: tuple[int, ...]
    """The nodes in the order decided (most connected first)."""
    seconds: float


def _merged(graph: CostGraph, *, memory: bool) -> dict[int, dict[int, Floats]]:
    """Per node x and neighbour g, all edges between them summed, oriented (K_x, K_g):
    their bytes, or (memory=True) the memory of the edges that have a memory matrix."""
    merged: dict[int, dict[int, Floats]] = {index: {} for index in range(len(graph.nodes))}
    for edge in graph.edges:
        if memory and edge.memory is None:
            continue
        matrix = edge.memory_matrix() if memory else edge.bytes
        a, b = edge.source, edge.target
        for x, g, oriented in ((a, b, matrix), (b, a, matrix.T)):
            old = merged[x].get(g)
            merged[x][g] = oriented.astype(float) if old is None else old + oriented
    return merged


def connectivity(graph: CostGraph) -> list[int]:
    """Per node, how many distinct nodes share an edge with it (Spartan's connectivity)."""
    neighbours: list[set[int]] = [set() for _ in graph.nodes]
    for edge in graph.edges:
        neighbours[edge.source].add(edge.target)
        neighbours[edge.target].add(edge.source)
    return [len(n) for n in neighbours]


def tile(graph: CostGraph, *, memory_budget: float | None = None) -> Tiling:
    """Fig. 2.8's FindTiling on `graph`'s bytes, optionally within a memory budget (see
    the module docstring for what the budget guarantees).

    Ties between options: the lower node time, then the lower node memory, then the
    lower index (so a tie in Fig. 3.3 picks the first option, as Spartan's row-wise)."""
    started = time.perf_counter()
    nodes = graph.nodes
    communicated = _merged(graph, memory=False)
    held = _merged(graph, memory=True)
    links = connectivity(graph)
    order = tuple(sorted(range(len(nodes)), key=lambda n: (-links[n], n)))
    chosen: list[int | None] = [None] * len(nodes)

    def open_options(g: int) -> slice | list[int]:
        decided = chosen[g]
        return slice(None) if decided is None else [decided]

    # The memory lower bound, kept up to date as nodes are decided: the node part
    # (decided memory, undecided least memory) and per memory edge its least open pair.
    least = [float(np.min(node.memory)) for node in nodes]
    bound = graph.fixed_memory + sum(least)
    edge_least: dict[tuple[int, int], float] = {}
    for x, row in held.items():
        for g, matrix in row.items():
            if x < g:
                edge_least[x, g] = float(np.min(matrix))
                bound += edge_least[x, g]

    for x in order:
        node = nodes[x]
        cost = np.zeros(node.options)
        for g, matrix in communicated[x].items():
            cost = cost + np.min(matrix[:, open_options(g)], axis=1)
        # The bound with x at each option: its memory for its least, its edges' least
        # open pairs (with x fixed) for their current least.
        with_x = bound - least[x] + node.memory.astype(float)
        for g, matrix in held[x].items():
            with_x = with_x + np.min(matrix[:, open_options(g)], axis=1)
            with_x = with_x - edge_least[min(x, g), max(x, g)]
        candidates = list(range(node.options))
        if memory_budget is not None:
            # Within the budget, or else the least bound (over budget whatever it does).
            fits = [k for k in candidates if with_x[k] <= memory_budget]
            candidates = fits or [min(candidates, key=lambda k: (with_x[k], cost[k], k))]
        pick = min(candidates, key=lambda k: (cost[k], node.time[k], node.memory[k], k))
        chosen[x] = pick
        bound = float(with_x[pick])
        least[x] = float(node.memory[pick])
        for g, matrix in held[x].items():
            edge_least[min(x, g), max(x, g)] = float(np.min(matrix[pick, open_options(g)]))

    choice = tuple(k for k in chosen if k is not None)
    assert len(choice) == len(nodes)
    return Tiling(
        choice=choice,
        bytes=graph.communicated(choice),
        order=order,
        seconds=time.perf_counter() - started,
    )
