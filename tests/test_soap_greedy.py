"""Spartan's maximum-connectivity-group-first tiling on `CostGraph`s
(`tasoc.passes.soap.greedy`): the thesis's examples (a chain it tiles for free, Fig.
3.3's conflicting views where it is suboptimal, §2.3.4's duplication budget), never
better than the exact least bytes, its order, and what its memory budget guarantees."""

from __future__ import annotations

import itertools
import math

import numpy as np
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tasoc.passes.soap.cost_graph import Choice, CostEdge, CostGraph, CostNode
from tasoc.passes.soap.greedy import connectivity, tile
from tasoc.verify.cost_graph_strategies import cost_graphs

SIZE = 100.0
"""Bytes of each array in the hand-built examples."""

ROW, COLUMN = 0, 1


def every_choice(graph: CostGraph) -> list[Choice]:
    return list(itertools.product(*(range(node.options) for node in graph.nodes)))


def least_bytes(graph: CostGraph) -> float:
    """The exact least communicated bytes, by brute force."""
    return min(graph.communicated(choice) for choice in every_choice(graph))


def least_memory(graph: CostGraph) -> float:
    """The least memory of any strategy (impossible pairs included), by brute force."""
    return min(graph.cost(choice)[0] for choice in every_choice(graph))


def tiled(name: str, memory: tuple[float, ...] = (SIZE, SIZE)) -> CostNode:
    """An array tiled row-wise or column-wise (more options with `memory`): no compute."""
    return CostNode(name, np.zeros(len(memory)), np.array(memory))


def edge(source: int, target: int, matrix: list[list[float]]) -> CostEdge:
    """An edge whose time and bytes are `matrix` (Spartan weighs only bytes)."""
    weights = np.array(matrix)
    return CostEdge(source, target, weights, weights)


MAP = [[0.0, SIZE], [SIZE, 0.0]]
"""Fig. 2.7(a): a map reads its input for free when both are tiled alike, and the whole
input across the network otherwise."""

TRANSPOSED = [[SIZE, 0.0], [0.0, SIZE]]
"""A map reading its input transposed: free when the tilings differ."""


def test_a_chain_with_one_consistent_tiling_costs_nothing() -> None:
    """A -> B = A + 1 -> C = B^T (a transpose, an op with its own options in tasoc) ->
    D = C + 1: tiling A and B row-wise and C and D column-wise communicates nothing."""
    nodes = tuple(tiled(name) for name in "ABCD")
    graph = CostGraph(nodes, (edge(0, 1, MAP), edge(1, 2, TRANSPOSED), edge(2, 3, MAP)))
    result = tile(graph)
    assert least_bytes(graph) == 0.0
    assert result.bytes == 0.0 and result.choice == (ROW, ROW, COLUMN, COLUMN)
    assert result.order == (1, 2, 0, 3)
    assert result.seconds >= 0.0


def test_conflicting_views_make_it_suboptimal() -> None:
    """Spartan's Fig. 3.3: C = A + B, D = A^T + B^T, E = C + D. C and D touch three
    groups each, so they are decided first; each is free row-wise, so both take rows,
    and A and B then pay for one of their two conflicting views each (2 SIZE). The best
    tiles D column-wise, the rest row-wise, and pays only at E (SIZE)."""
    nodes = tuple(tiled(name) for name in "ABCDE")
    A, B, C, D, E = range(5)
    edges = (
        edge(A, C, MAP),
        edge(B, C, MAP),
        edge(A, D, TRANSPOSED),
        edge(B, D, TRANSPOSED),
        edge(C, E, MAP),
        edge(D, E, MAP),
    )
    graph = CostGraph(nodes, edges)
    result = tile(graph)
    assert result.order[:2] == (C, D)
    assert result.choice[C] == result.choice[D] == ROW
    assert result.bytes == 2 * SIZE
    assert least_bytes(graph) == SIZE
    assert graph.communicated((ROW, ROW, ROW, COLUMN, ROW)) == SIZE


def test_the_duplication_budget() -> None:
    """§2.3.4: an array read along both axes (ALS's rating matrix) can be duplicated,
    a replica tiled each way, at twice the memory; a budget decides whether it may. Its
    readers read along a fixed axis (one option each)."""
    nodes = (
        tiled("R", (SIZE, SIZE, 2 * SIZE)),
        tiled("reads rows", (SIZE,)),
        tiled("reads columns", (SIZE,)),
    )
    edges = (edge(0, 1, [[0.0], [SIZE], [0.0]]), edge(0, 2, [[SIZE], [0.0], [0.0]]))
    graph = CostGraph(nodes, edges)
    free = tile(graph)
    assert free.choice == (2, 0, 0) and free.bytes == 0.0
    assert tile(graph, memory_budget=4 * SIZE).choice == free.choice
    budgeted = tile(graph, memory_budget=3.5 * SIZE)
    assert budgeted.choice == (ROW, 0, 0) and budgeted.bytes == SIZE
    assert graph.cost(budgeted.choice)[0] == 3 * SIZE


def test_edge_memory_can_lead_the_budget_astray() -> None:
    """With edge memory the budget is not a guarantee: X (decided first, by index)
    takes its cheaper option 0, whose bound still fits, but then Y's two options each
    hold 10 bytes on one of its edges, over a budget of 5 that X = Y = 1 meets."""
    nodes = tuple(CostNode(name, np.zeros(2), np.zeros(2)) for name in "XYZ")
    zero = np.zeros((2, 2))
    edges = (
        CostEdge(0, 1, zero, zero, np.array([[0.0, 10.0], [0.0, 0.0]])),
        CostEdge(1, 2, zero, zero, np.array([[10.0, 10.0], [0.0, 0.0]])),
        CostEdge(0, 2, zero, np.array([[0.0, 0.0], [100.0, 100.0]])),
    )
    graph = CostGraph(nodes, edges)
    assert graph.cost((1, 1, 0))[0] == 0.0
    result = tile(graph, memory_budget=5.0)
    assert result.choice[0] == 0 and graph.cost(result.choice)[0] == 10.0


@settings(max_examples=examples(200))
@given(cost_graphs())
def test_never_better_than_brute_force(graph: CostGraph) -> None:
    result = tile(graph)
    assert len(result.choice) == len(graph.nodes)
    for node, k in zip(graph.nodes, result.choice, strict=True):
        assert 0 <= k < node.options
    assert result.bytes == graph.communicated(result.choice)
    assert result.bytes >= least_bytes(graph)
    # The order: every node once, most connected first, ties by index.
    links = connectivity(graph)
    assert sorted(result.order) == list(range(len(graph.nodes)))
    keys = [(-links[n], n) for n in result.order]
    assert keys == sorted(keys)


@settings(max_examples=examples(200))
@given(cost_graphs(edge_memory=False), st.data())
def test_without_edge_memory_a_budget_any_strategy_meets_is_met(
    graph: CostGraph, data: st.DataObject
) -> None:
    """The guarantee: with memory on nodes only, if any strategy's memory is within the
    budget, so is the greedy's; below the least memory, it takes the least."""
    memories = [graph.cost(choice)[0] for choice in every_choice(graph)]
    budget = data.draw(st.floats(min(memories) - 5, max(memories) + 5), label="budget")
    result = tile(graph, memory_budget=budget)
    memory = graph.cost(result.choice)[0]
    if min(memories) <= budget:
        assert memory <= budget
    else:
        assert memory == min(memories)


@settings(max_examples=examples(100))
@given(cost_graphs())
def test_a_budget_every_strategy_meets_changes_nothing(graph: CostGraph) -> None:
    most = max(graph.cost(choice)[0] for choice in every_choice(graph))
    assert tile(graph, memory_budget=most).choice == tile(graph).choice
    assert tile(graph, memory_budget=math.inf).choice == tile(graph).choice
