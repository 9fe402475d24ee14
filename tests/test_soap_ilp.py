"""The exact ILP on `CostGraph`s (`tasoc.passes.soap.ilp`): the least time of brute
force's frontier with and without a memory cap, its cost read back through
`graph.cost`, the one-line errors (too large, infeasible, a cap below the least
memory) and the deadline."""

from __future__ import annotations

import time

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tasoc.passes.search import Deadline
from tasoc.passes.soap.cost_graph import CostEdge, CostGraph, CostNode
from tasoc.passes.soap.ilp import IlpInfeasible, IlpResult, IlpTooLarge, solve
from tasoc.verify.cost_graph_strategies import cost_graphs

TOLERANCE = 1e-6


def random_graph(nodes: int, options: int, edges: int, seed: int = 0) -> CostGraph:
    """A connected random graph (a random tree, then random extra edges) with integer
    costs: the shape of a large op graph without its structure (the hard case)."""
    rng = np.random.default_rng(seed)
    made = tuple(
        CostNode(
            f"n{i}",
            rng.integers(0, 10, options).astype(float),
            rng.integers(0, 10, options).astype(float),
        )
        for i in range(nodes)
    )
    pairs = [(int(rng.integers(0, i)), i) for i in range(1, nodes)]
    while len(pairs) < edges:
        a, b = (int(v) for v in rng.integers(0, nodes, 2))
        if a != b:
            pairs.append((a, b))
    joined = []
    for a, b in pairs:
        spent = rng.integers(0, 10, (options, options)).astype(float)
        joined.append(CostEdge(a, b, spent, spent * 10))
    return CostGraph(made, tuple(joined))


def assert_consistent(graph: CostGraph, result: IlpResult) -> None:
    """The reported cost is `graph.cost` of the choice, and equals HiGHS's objective."""
    assert result.choice is not None and result.objective is not None
    assert (result.memory, result.time) == graph.cost(result.choice)
    assert abs(result.objective - result.time) <= TOLERANCE
    for node, k in zip(graph.nodes, result.choice, strict=True):
        assert 0 <= k < node.options


@settings(max_examples=examples(150))
@given(cost_graphs())
def test_uncapped_time_is_the_frontiers_least(graph: CostGraph) -> None:
    points = graph.brute_force_frontier()
    if not points:
        with pytest.raises(IlpInfeasible, match="no strategy"):
            solve(graph)
        return
    result = solve(graph)
    assert result.status == "optimal" and result.gap == 0.0
    assert abs(result.time - min(time for _, time, _ in points)) <= TOLERANCE
    assert result.bound is not None and abs(result.bound - result.time) <= TOLERANCE
    assert_consistent(graph, result)


@settings(max_examples=examples(150))
@given(cost_graphs(), st.data())
def test_capped_time_is_the_least_under_the_cap(graph: CostGraph, data: st.DataObject) -> None:
    points = graph.brute_force_frontier()
    if not points:
        return
    # Whole or half bytes: memories are whole, so no cap lies within HiGHS's feasibility
    # tolerance (1e-7) of a strategy's memory without being equal to it.
    least, most = int(points[0][0]), int(points[-1][0])
    cap = data.draw(st.integers(2 * least, 2 * most), label="twice the cap") / 2
    result = solve(graph, memory_cap=cap)
    expected = min(time for memory, time, _ in points if memory <= cap)
    assert abs(result.time - expected) <= TOLERANCE
    assert result.memory <= cap + TOLERANCE
    assert_consistent(graph, result)


@settings(max_examples=examples(100))
@given(cost_graphs())
def test_a_cap_below_the_least_memory_names_it(graph: CostGraph) -> None:
    points = graph.brute_force_frontier()
    if not points:
        return
    least = points[0][0]
    with pytest.raises(IlpInfeasible) as raised:
        solve(graph, memory_cap=least - 0.5)
    assert raised.value.least_memory == least
    message = str(raised.value)
    assert "\n" not in message and f"least memory any strategy needs is {int(least)}" in message


def test_parallel_edges_that_exclude_each_other_leave_no_strategy() -> None:
    """Two edges between one pair: one allows only (0, 0), the other only (1, 1), so
    their sum rules out every pair (the ILP merges them first)."""
    inf = np.inf
    nodes = tuple(CostNode(name, np.zeros(2), np.ones(2)) for name in ("a", "b"))
    only_00 = np.array([[0.0, inf], [inf, inf]])
    only_11 = np.array([[inf, inf], [inf, 0.0]])
    graph = CostGraph(nodes, (CostEdge(0, 1, only_00, only_00), CostEdge(0, 1, only_11, only_11)))
    assert graph.brute_force_frontier() == []
    for cap in (None, 100.0, 0.0):
        with pytest.raises(IlpInfeasible, match=r"^no strategy: every strategy pairs impossible"):
            solve(graph, memory_cap=cap)


def test_single_option_nodes_fold_into_constants() -> None:
    """A node with one option has no variable: its costs and its edges' are constants
    (both ends single) or costs of the other end's options."""
    nodes = (
        CostNode("fixed", np.array([1.0]), np.array([2.0])),
        CostNode("free", np.array([5.0, 1.0]), np.array([0.0, 0.0])),
        CostNode("also fixed", np.array([3.0]), np.array([4.0])),
    )
    edges = (
        CostEdge(0, 1, np.array([[0.0, 10.0]]), np.zeros((1, 2))),
        CostEdge(0, 2, np.array([[7.0]]), np.zeros((1, 1)), np.array([[1.0]])),
    )
    graph = CostGraph(nodes, edges, fixed_memory=100.0, fixed_time=0.5)
    result = solve(graph)
    assert result.choice == (0, 0, 0) and result.variables == 2
    assert (result.memory, result.time) == (107.0, 16.5)
    with pytest.raises(IlpInfeasible, match=r"least memory any strategy needs is 107$"):
        solve(graph, memory_cap=106.0)


def test_too_large_is_refused_before_building() -> None:
    graph = random_graph(2000, 8, 4000)
    started = time.process_time()  # CPU seconds: other work on the machine cannot fail it
    with pytest.raises(IlpTooLarge) as raised:
        solve(graph, max_variables=1000)
    assert time.process_time() - started < 0.5
    message = str(raised.value)
    assert "\n" not in message and "max_variables=1000" in message
    # 16 x per node, 64 y per distinct pair of nodes.
    pairs = {(min(e.source, e.target), max(e.source, e.target)) for e in graph.edges}
    assert f"{2000 * 8 + 64 * len(pairs)} variables" in message


def test_a_short_deadline_returns_the_incumbent() -> None:
    graph = random_graph(200, 6, 450, seed=1)
    limit = 0.3
    started = time.perf_counter()
    result = solve(graph, deadline=Deadline.after(limit))
    assert time.perf_counter() - started < limit + 5.0  # returns near it; loaded machines lag
    assert result.status in ("timeout", "optimal")
    if result.choice is not None:
        assert_consistent(graph, result)
        if result.status == "timeout":
            assert result.gap is not None and result.gap >= 0.0
            assert result.bound is None or result.bound <= result.time + TOLERANCE
