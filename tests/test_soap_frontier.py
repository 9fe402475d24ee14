"""TensorOpt's Frontier Tracking (`tasoc.passes.soap.frontier`): exact against brute
force where it claims to be, real strategies everywhere, and each elimination where
its shape of graph calls for it."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tasoc.passes.search import Deadline
from tasoc.passes.soap.cost_graph import CostEdge, CostGraph, CostNode, frontier
from tasoc.passes.soap.frontier import FrontierTimeout, Tracked, _reduce, _State, track
from tasoc.verify.strategies import cost_graphs


def node(time: list[float], memory: list[float] | None = None) -> CostNode:
    memory = memory if memory is not None else [float(len(time) - k) for k in range(len(time))]
    return CostNode("n", np.array(time, float), np.array(memory, float))


def edge(source: int, target: int, time: list[list[float]], memory=None) -> CostEdge:
    seconds = np.array(time, float)
    held = None if memory is None else np.array(memory, float)
    return CostEdge(source, target, seconds, np.where(np.isfinite(seconds), seconds, np.inf), held)


def varied(rows: int, columns: int, seed: int) -> list[list[float]]:
    """A cost matrix with no structure: every pair its own small integer."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 5, (rows, columns)).astype(float).tolist()


def graph_of(options: list[int], pairs: list[tuple[int, int]], seed: int = 0) -> CostGraph:
    """Nodes trading memory for time, and one varied edge per pair."""
    rng = np.random.default_rng(seed)
    nodes = tuple(
        node(
            rng.integers(0, 9, k).astype(float).tolist(),
            rng.integers(0, 9, k).astype(float).tolist(),
        )
        for k in options
    )
    edges = tuple(
        edge(a, b, varied(options[a], options[b], seed + i)) for i, (a, b) in enumerate(pairs)
    )
    return CostGraph(nodes, edges)


def costs(tracked: Tracked) -> list[tuple[float, float]]:
    return [(p.memory, p.time) for p in tracked.points]


def exact(graph: CostGraph) -> list[tuple[float, float]]:
    return [(memory, time) for memory, time, _ in graph.brute_force_frontier()]


def assert_points_cost_what_they_say(graph: CostGraph, tracked: Tracked) -> None:
    for point in tracked.points:
        memory, time = graph.cost(point.choice)
        assert math.isclose(memory, point.memory, rel_tol=1e-9, abs_tol=1e-9), point
        assert math.isclose(time, point.time, rel_tol=1e-9, abs_tol=1e-9), point


def assert_is_a_frontier(tracked: Tracked) -> None:
    pairs = costs(tracked)
    assert all(a[0] < b[0] and a[1] > b[1] for a, b in itertools.pairwise(pairs))


# -- properties ---------------------------------------------------------------------


@settings(max_examples=500, deadline=None)
@given(cost_graphs(max_nodes=6))
def test_exact_ft_is_the_brute_force_frontier(graph: CostGraph) -> None:
    tracked = track(graph, heuristic=None)
    assert costs(tracked) == exact(graph)
    assert tracked.exact and tracked.eliminations["heuristic"] == 0
    assert_points_cost_what_they_say(graph, tracked)


@settings(max_examples=150, deadline=None)
@given(cost_graphs(max_nodes=9, max_options=2, max_extra_edges=9))
def test_exact_ft_is_the_brute_force_frontier_on_tangled_graphs(graph: CostGraph) -> None:
    # more edges than nodes: the stuck shapes conditioning (and marked cycles) are for
    tracked = track(graph, heuristic=None)
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


@settings(max_examples=300, deadline=None)
@given(cost_graphs(max_nodes=7, max_extra_edges=6), st.sampled_from(["memory", "time", "weighted"]))
def test_heuristic_ft_finds_real_strategies_no_better_than_exact(
    graph: CostGraph, heuristic: str
) -> None:
    tracked = track(graph, heuristic=heuristic)  # type: ignore[arg-type]
    assert_points_cost_what_they_say(graph, tracked)
    assert_is_a_frontier(tracked)
    best = exact(graph)
    for point in tracked.points:
        assert any(m <= point.memory and t <= point.time for m, t in best), point
    if tracked.exact:
        assert costs(tracked) == best


def dense(seed: int) -> CostGraph:
    """8-14 nodes of 1-3 options, each pair joined with chance 0.4: many nodes stuck
    with three or more neighbours, so many heuristic eliminations."""
    rng = np.random.default_rng(seed)
    count = int(rng.integers(8, 15))
    pairs = [(a, b) for a, b in itertools.combinations(range(count), 2) if rng.random() < 0.4]
    return graph_of(rng.integers(1, 4, count).tolist(), pairs, seed)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_every_cached_heuristic_choice_is_what_a_fresh_one_would_be(seed: int) -> None:
    # every elimination must drop the cached choice of each node whose frontiers,
    # edges or neighbours' frontiers it changed; a stale one often still picks the
    # same, so each cached answer is checked against a fresh one when it is read.
    graph = dense(seed)
    assess = _State.assess
    read: list[tuple[tuple[int, float], tuple[int, float]]] = []

    def checked(state: _State, node: int) -> tuple[int, float]:
        if node in state.assessed:
            kept = state.assessed.pop(node)
            read.append((kept, assess(state, node)))
        return assess(state, node)

    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(_State, "assess", checked)
        track(graph)
    assert all(kept == fresh for kept, fresh in read)


@settings(max_examples=100, deadline=None)
@given(st.integers(0, 2**32 - 1))
def test_anchored_runs_unite_as_if_each_ran_alone(seed: int) -> None:
    # the runs share the exact eliminations before their first heuristic one and
    # each goes on from its own copy: with two anchors the frontier is the union
    # of the runs with one, and each anchor's strategy is matched or beaten
    graph = dense(seed)
    rng = np.random.default_rng(seed)
    anchors = [tuple(int(rng.integers(n.options)) for n in graph.nodes) for _ in range(2)]
    both = track(graph, anchors=anchors)
    alone = [p for a in anchors for p in track(graph, anchors=[a]).points]
    assert costs(both) == [(m, t) for m, t, _ in frontier([(p.memory, p.time, p) for p in alone])]
    assert_points_cost_what_they_say(graph, both)
    for choice in anchors:
        memory, time = graph.cost(choice)
        if math.isfinite(time):
            assert any(p.memory <= memory and p.time <= time for p in both.points)


points = st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None)
@given(st.lists(points, min_size=1, max_size=6), st.sampled_from(["grid", "loop", "ranks"]))
def test_reduce_is_algorithm_1_in_every_group(groups: list, shape: str) -> None:
    # copies of the first group's points make one group long: long groups take the
    # per-group loop, short ones the padded grid, one long among many the shifted ranks
    copies = {"grid": 1, "loop": 1600, "ranks": 1000}[shape]
    padding = groups[1:] * 120 if shape == "ranks" else groups[1:]
    blown = [groups[0] * copies, *padding]
    memory = np.array([m for group in blown for m, _ in group], float)
    time = np.array([t for group in blown for _, t in group], float)
    counts = np.array([len(group) for group in blown], np.int64)
    kept = _reduce(memory, time, counts)
    expected = []
    for group in [groups[0], *padding]:
        expected += [(m, t) for m, t, _ in frontier([(m, t, None) for m, t in group])]
    assert [(memory[i], time[i]) for i in kept] == expected


def test_reduce_sorts_exactly_where_shifting_memory_rounds() -> None:
    # group 1's memories differ by less than a rounding step of group 1's shift
    memory = np.array([0.0, 1e6, 1.0 + 2.0**-40, 1.0])
    time = np.array([1.0, 0.0, 0.0, 1.0])
    kept = _reduce(memory, time, np.array([2, 2]))
    assert kept.tolist() == [0, 1, 3, 2]


# -- each elimination on its shape of graph ------------------------------------------


def test_a_chain_runs_ldp_alone() -> None:
    graph = graph_of([3, 2, 3, 2], [(0, 1), (1, 2), (2, 3)])
    tracked = track(graph)
    assert sum(tracked.eliminations.values()) == 0
    assert tracked.chain == 4 and tracked.exact and tracked.thinned == 0
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_parallel_edges_merge_by_edge_elimination() -> None:
    graph = graph_of([3, 3, 2], [(0, 1), (1, 0), (0, 1), (1, 2)])
    tracked = track(graph)
    assert tracked.eliminations == {"edge": 2}
    assert costs(tracked) == exact(graph)


def test_a_diamond_needs_node_elimination() -> None:
    graph = graph_of([2, 3, 3, 2], [(0, 1), (0, 2), (1, 3), (2, 3)])
    tracked = track(graph)
    assert tracked.eliminations["node"] == 2 and tracked.eliminations["edge"] == 1
    assert tracked.chain == 2 and tracked.exact
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_a_leaf_off_a_chain_is_folded_by_branch_elimination() -> None:
    graph = graph_of([2, 3, 2, 3, 3], [(0, 1), (1, 2), (2, 3), (1, 4)])
    tracked = track(graph)
    assert tracked.eliminations == {"branch": 1}
    assert tracked.chain == 4
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_skip_connections_leave_the_chain_for_ldp() -> None:
    pairs = [(i, i + 1) for i in range(9)] + [(0, 3), (3, 6), (6, 9)]
    graph = graph_of([2] * 10, pairs)
    tracked = track(graph)
    assert set(tracked.eliminations) == {"node", "edge"}
    assert tracked.chain == 4 and tracked.exact
    assert costs(tracked) == exact(graph)


def complete(count: int, seed: int = 0) -> CostGraph:
    return graph_of([2] * count, [(a, b) for a in range(count) for b in range(a + 1, count)], seed)


def test_stuck_nodes_get_heuristic_elimination() -> None:
    graph = complete(5)
    tracked = track(graph)
    assert tracked.eliminations["heuristic"] >= 1 and not tracked.exact
    assert_points_cost_what_they_say(graph, tracked)
    assert_is_a_frontier(tracked)


def test_without_a_heuristic_stuck_nodes_are_conditioned_on_exactly() -> None:
    graph = complete(5)
    tracked = track(graph, heuristic=None)
    assert tracked.eliminations["conditioned"] >= 1 and tracked.exact
    assert "heuristic" not in tracked.eliminations
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_the_heuristic_rule_picks_the_option() -> None:
    # node 1 is stuck (four neighbours): option 0 is small and slow, option 1 big and fast
    nodes = [node([1.0, 1.0], [1.0, 1.0]) for _ in range(5)]
    nodes[1] = node([100.0, 0.0], [0.0, 100.0])
    pairs = [(a, b) for a in range(5) for b in range(a + 1, 5)]
    graph = CostGraph(tuple(nodes), tuple(edge(a, b, [[0.0, 0.0], [0.0, 0.0]]) for a, b in pairs))
    for rule, option in (("memory", 0), ("time", 1)):
        tracked = track(graph, heuristic=rule)  # type: ignore[arg-type]
        assert tracked.eliminations["heuristic"] >= 1
        assert {p.choice[1] for p in tracked.points} == {option}


def timed(times: list[float]) -> CostNode:
    """A node whose options differ in time only (every memory 0): one-point frontiers."""
    return node(times, [0.0] * len(times))


def test_the_heuristic_scores_an_option_with_its_neighbours_frontiers() -> None:
    # a wheel: hub 4 (four neighbours) fixed heuristically, rim 0-1-2-3 exact after.
    # Every rim node's option 0 costs 100. The hub's option 0 is free on its edges
    # only next to a rim node's option 0, and 10 next to option 1; its option 1 costs
    # 1 next to the rim's option 1. Edges alone favour the hub's option 0 (0 < 1),
    # which costs 10 per rim node; with the rim's frontiers option 1 wins: 1 each.
    spoke = [[0.0, 10.0], [5.0, 1.0]]
    nodes = (*(timed([100.0, 0.0]) for _ in range(4)), timed([0.0, 0.0]))
    rim = [edge(a, (a + 1) % 4, [[0.0, 0.0], [0.0, 0.0]]) for a in range(4)]
    spokes = [edge(4, a, spoke) for a in range(4)]
    graph = CostGraph(nodes, (*rim, *spokes))
    tracked = track(graph)
    assert tracked.eliminations["heuristic"] == 1
    assert costs(tracked) == exact(graph) == [(0.0, 4.0)]
    assert tracked.points[0].choice[4] == 1


def test_heuristic_elimination_fixes_first_the_tied_node_whose_best_option_leads_most() -> None:
    # K4, every node stuck with three neighbours; node 0 is marked, so 1, 2 or 3 is
    # fixed, then the triangle left is exact. Node 1's scores (0 for option 0, 1 for
    # option 1) mislead: option 0 is free only if 2 and 3 both take option 0, which
    # edge 2-3 forbids (100), so fixing node 1 first ends at 10. Node 2's best option
    # (0) leads its other by 20.5, node 3's by 19.5; fixing node 2 first leaves the
    # rest exact and finds the least time, 1.
    zero = [[0.0, 0.0], [0.0, 0.0]]
    nodes = (timed([0.0, 0.0]), timed([0.0, 0.0]), timed([0.0, 20.0]), timed([0.0, 0.0]))
    lured = [[0.0, 10.0], [0.5, 0.5]]
    edges = (
        edge(0, 1, zero),
        edge(0, 2, zero),
        edge(0, 3, zero),
        edge(1, 2, lured),
        edge(1, 3, lured),
        edge(2, 3, [[100.0, 0.0], [0.0, 0.0]]),
    )
    graph = CostGraph(nodes, edges)
    tracked = track(graph)
    assert tracked.eliminations["heuristic"] == 1
    assert costs(tracked) == exact(graph) == [(0.0, 1.0)]
    assert tracked.points[0].choice[1:] == (1, 0, 1)


def test_marked_nodes_are_eliminated_when_they_alone_make_a_cycle() -> None:
    # marks run 0-5-6-7; eliminating 3 joins 5 and 7, a cycle of marked nodes
    options = [2, 1, 1, 3, 1, 2, 3, 2]
    graph = graph_of(options, [(0, 5), (5, 6), (6, 7), (3, 5), (3, 7)])
    tracked = track(graph, heuristic=None)
    assert tracked.exact
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_a_marked_tip_is_eliminated_when_the_marks_close_a_cycle() -> None:
    # marks run 0-5-6-7-8-9; eliminating 1, 2 and 3 joins 5-7, 5-8 and 6-9, after
    # which the tip 9 is the only marked node with two neighbours
    pairs = [(0, 5), (5, 6), (6, 7), (7, 8), (8, 9), (1, 5), (1, 7), (2, 5), (2, 8)]
    graph = graph_of([2, 2, 1, 2, 2, 2, 2, 2, 2, 2], [*pairs, (3, 6), (3, 9)])
    tracked = track(graph, heuristic=None)
    assert tracked.exact
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_marked_nodes_alone_stuck_get_the_heuristic_too() -> None:
    # marks run 0-5-6-7-8; eliminating 1, 2 and 3 makes 5-6-7-8 a complete graph
    pairs = [(0, 5), (5, 6), (6, 7), (7, 8), (1, 5), (1, 7), (2, 5), (2, 8), (3, 6), (3, 8)]
    graph = graph_of([2] * 9, pairs)
    tracked = track(graph)
    assert tracked.eliminations["heuristic"] == 1
    assert_points_cost_what_they_say(graph, tracked)
    conditioned = track(graph, heuristic=None)
    assert conditioned.eliminations["conditioned"] == 1
    assert costs(conditioned) == exact(graph)
    assert_points_cost_what_they_say(graph, conditioned)


def test_no_feasible_strategy_gives_no_points() -> None:
    blocked = [[math.inf, 0.0], [0.0, math.inf]]
    graph = CostGraph(
        (node([1.0, 2.0]), node([1.0, 2.0]), node([1.0, 2.0])),
        (edge(0, 1, blocked), edge(1, 2, blocked), edge(0, 2, blocked)),
    )
    assert graph.brute_force_frontier() == []
    assert track(graph).points == []
    assert track(graph, heuristic=None).points == []
    impossible = CostGraph((node([math.inf, math.inf]),), ())
    assert track(impossible).points == []


def test_disconnected_components_combine_by_product() -> None:
    graph = graph_of([2, 3, 2, 3, 2], [(0, 1), (2, 3), (3, 4)])
    tracked = track(graph)
    assert tracked.chain == 5 and sum(tracked.eliminations.values()) == 0
    assert costs(tracked) == exact(graph)
    assert_points_cost_what_they_say(graph, tracked)


def test_fixed_costs_are_added_and_an_empty_graph_has_one_strategy() -> None:
    graph = graph_of([2, 2], [(0, 1)])
    fixed = CostGraph(graph.nodes, graph.edges, fixed_memory=100.0, fixed_time=0.5)
    shifted = [(m + 100.0, t + 0.5) for m, t in costs(track(graph))]
    assert costs(track(fixed)) == shifted
    assert_points_cost_what_they_say(fixed, track(fixed))
    empty = track(CostGraph((), (), fixed_memory=3.0, fixed_time=2.0))
    assert [(p.memory, p.time, p.choice) for p in empty.points] == [(3.0, 2.0, ())]


def long_chain(count: int, options: int, seed: int = 0) -> CostGraph:
    """Nodes whose options trade memory against time at random: long frontiers."""
    rng = np.random.default_rng(seed)
    nodes = tuple(
        CostNode(f"n{i}", rng.random(options), rng.random(options) * 1000) for i in range(count)
    )
    edges = tuple(
        CostEdge(i, i + 1, rng.random((options, options)) * 0.1, np.zeros((options, options)))
        for i in range(count - 1)
    )
    return CostGraph(nodes, edges)


def test_max_points_thins_every_frontier() -> None:
    graph = long_chain(12, 4)
    full = track(graph)
    assert full.exact and len(full.points) > 8
    thinned = track(graph, max_points=8)
    assert not thinned.exact and thinned.thinned > 0
    assert 2 <= len(thinned.points) <= 8
    assert thinned.points[0].memory == full.points[0].memory  # the ends survive
    assert thinned.points[-1].time == full.points[-1].time
    assert_points_cost_what_they_say(graph, thinned)
    assert_is_a_frontier(thinned)


def test_an_expired_deadline_raises() -> None:
    graph = graph_of([2, 2, 2], [(0, 1), (1, 2), (0, 2)])
    with pytest.raises(FrontierTimeout, match="ran out of time"):
        track(graph, deadline=Deadline.after(0.0))
    assert track(graph, deadline=Deadline.never()).points


def test_bad_options_are_refused() -> None:
    graph = graph_of([2], [])
    with pytest.raises(ValueError, match="heuristic"):
        track(graph, heuristic="fastest")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="max_points"):
        track(graph, max_points=1)


def test_a_long_chain_with_skips_tracks_quickly_and_exactly() -> None:
    count = 400
    rng = np.random.default_rng(1)
    base = long_chain(count, 6, seed=2)
    skips = tuple(
        CostEdge(i, i + 3, rng.random((6, 6)) * 0.1, np.zeros((6, 6)))
        for i in range(0, count - 3, 4)
    )
    graph = CostGraph(base.nodes, base.edges + skips)
    tracked = track(graph, max_points=64)
    assert tracked.seconds < 10
    assert tracked.eliminations["heuristic"] == 0 and tracked.chain < count
    for point in tracked.points[:: max(1, len(tracked.points) // 8)]:
        memory, time = graph.cost(point.choice)
        assert math.isclose(memory, point.memory, rel_tol=1e-9)
        assert math.isclose(time, point.time, rel_tol=1e-9)
