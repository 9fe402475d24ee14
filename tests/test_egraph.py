"""The e-graph engine of `search=egraph`: hash-consing and congruence, e-matching against
matching on dags, saturation, cycle pruning, and ILP extraction against greedy."""

from __future__ import annotations

import math

import pytest
from rewrite_helpers import (
    ADD_COMMUTES,
    MATMUL_FUSION,
    RULES,
    arg,
    assert_equal,
    matches,
    sig,
)

from tasoc.cost import AnalyticCost
from tasoc.ir.dag import Dag, Node, from_module
from tasoc.models import build_model, list_models
from tasoc.passes.rewrite.backtrack import BacktrackLimits, backtracking_search
from tasoc.passes.rewrite.egraph import EGraph, EGraphError, EGraphLimits, egraph_search
from tasoc.passes.rewrite.egraph.egraph import PROJECT
from tasoc.passes.rewrite.egraph.ematch import Index, ematch
from tasoc.passes.rewrite.egraph.extract import Pricing, acyclic, extract, greedy, to_dag
from tasoc.passes.rewrite.egraph.saturate import SaturationLimits, saturate
from tasoc.passes.search import Deadline

FAR = math.inf


def two_matmuls() -> Dag:
    """Two matmuls sharing an input: the multi-output fusion's source (TASO Fig. 2.2)."""
    x, a, b = arg(0, "x", 4, 32), arg(1, "a", 32, 16, param=True), arg(2, "b", 32, 16, param=True)
    return Dag([x, a, b], [Node("matmul", [x.out, a.out]).out, Node("matmul", [x.out, b.out]).out])


def test_equal_subexpressions_are_one_class() -> None:
    x = arg(0, "x", 4, 4)
    relu = Node("relu", [x.out]).out
    graph = Dag([x], [Node("add", [relu, relu]).out, relu])
    egraph = EGraph()
    roots, args = egraph.add_dag(graph)
    assert egraph.num_classes == 3 and egraph.num_nodes == 3
    assert roots[1] == egraph.lookup(("relu", (), (next(iter(args)),)))


def test_union_restores_congruence_on_rebuild() -> None:
    x, y = arg(0, "x", 4, 4), arg(1, "y", 4, 4)
    graph = Dag([x, y], [Node("relu", [x.out]).out, Node("relu", [y.out]).out])
    egraph = EGraph()
    (rx, ry), args = egraph.add_dag(graph)
    cx, cy = args  # argument classes, in order
    assert rx != ry
    egraph.union(cx, cy)
    egraph.rebuild()
    assert egraph.find(rx) == egraph.find(ry)
    assert len(egraph.classes[egraph.find(rx)]) == 1


def test_a_union_across_types_is_refused() -> None:
    graph = Dag([arg(0, "x", 4, 4), arg(1, "y", 4, 8)], [arg(0, "x", 4, 4).out])
    egraph = EGraph()
    _, args = egraph.add_dag(graph)
    with pytest.raises(EGraphError, match="types"):
        egraph.union(*args)


def test_multi_result_ops_are_tuple_classes_with_projections() -> None:
    x = arg(0, "x", 4, 6)
    split = Node("split", [x.out], axis=1, sizes=(2, 4))
    egraph = EGraph()
    roots, _ = egraph.add_dag(Dag([x], list(split.results)))
    (owner,) = {child for r in roots for op, _, children in egraph.classes[r] for child in children}
    assert egraph.sigs(owner) == split.sigs
    assert [egraph.result_class(owner, i) for i in (0, 1)] == list(roots)
    assert all(egraph.classes[r][0][0] == PROJECT for r in roots)


@pytest.mark.parametrize("name", ["nasrnn", "resnext50", "bert"])
def test_ematching_finds_every_match_the_dag_matcher_finds(name: str) -> None:
    model = next(m for m in list_models() if m.name == name)
    graph = from_module(build_model(model.spec(model.small)))
    egraph = EGraph()
    egraph.add_dag(graph)
    index = Index(egraph)
    classes = {node.out: _arg_class(egraph, node) for node in graph.args}
    for node in graph.ops:
        for value in node.results:
            classes[value] = egraph.add_value(value, {a: classes[a.out] for a in graph.args})
    found = 0
    for rule in RULES:
        ematches = {(tuple(sorted(m.inputs.items())), m.outputs) for m in ematch(index, rule)}
        for match in matches(graph, rule):
            inputs = tuple(sorted((k, classes[v]) for k, v in match.inputs.items()))
            assert (inputs, tuple(classes[v] for v in match.outputs)) in ematches, rule.name
            found += 1
    assert found > 0


def _arg_class(egraph: EGraph, node: Node) -> int:
    cid = egraph.lookup(("arg", (("node", node),), ()))
    assert cid is not None
    return cid


def test_saturation_holds_both_forms_and_extraction_picks_the_cheaper() -> None:
    graph = two_matmuls()
    egraph = EGraph()
    egraph.add_dag(graph)
    result = saturate(egraph, [MATMUL_FUSION], SaturationLimits(), Deadline.after(60))
    assert result.applied[MATMUL_FUSION.name] == 2  # (a, b) and (b, a)
    assert result.stopped == "saturated"
    assert any(op == "split" for _, (op, _, _) in egraph.items())
    model = AnalyticCost()
    best = egraph_search(graph, [MATMUL_FUSION], model, deadline=Deadline.after(30))
    assert best.cost_after < best.cost_before
    assert "split" in {node.op for node in best.best.ops}
    assert_equal(graph, best.best)


def test_saturation_stops_at_the_node_limit() -> None:
    model = next(m for m in list_models() if m.name == "nasrnn")
    graph = from_module(build_model(model.spec(model.small)))
    egraph = EGraph()
    egraph.add_dag(graph)
    limits = SaturationLimits(node_limit=graph.num_ops + 20)
    result = saturate(egraph, RULES, limits, Deadline.after(60))
    assert result.stopped == "node limit"
    assert egraph.num_nodes < graph.num_ops + 20 + 20  # one match may add a few e-nodes


def test_cycles_are_pruned_without_losing_the_input_graph() -> None:
    x = arg(0, "x", 4, 6)
    graph = Dag([x], [Node("relu", [x.out]).out])
    egraph = EGraph()
    (root,), args = egraph.add_dag(graph)
    (cx,) = args
    egraph.generation = 1
    split = Node("split", [egraph.placeholder(cx)], axis=1, sizes=(2, 4))
    joined = egraph.add_value(Node("concat", list(split.results), axis=1).out)
    egraph.union(cx, joined)  # x == concat(split(x)): a cycle through x's class
    egraph.rebuild()
    classes = acyclic(egraph, [root])
    assert len(classes[egraph.find(cx)]) == 1  # the concat e-node is dropped
    choice = greedy(classes, lambda cid, enode: 1.0)
    assert to_dag(egraph, [root], choice, graph) == graph


@pytest.mark.parametrize("unit", [1.0, 1e-9])
def test_the_ilp_pays_for_a_shared_class_once_where_greedy_double_counts(unit: float) -> None:
    # unit=1e-9: costs in seconds of nanosecond ops, far below HiGHS's tolerances
    # out = add(f(s), g(s)) with s expensive, or add(f(t), g(u)) with t, u cheaper than s
    # each but more than s together: greedy picks t and u, the ILP shares s.
    x = arg(0, "x", 8, 8)
    s = Node("relu", [x.out]).out
    f, g = Node("sigmoid", [s]).out, Node("tanh", [s]).out
    graph = Dag([x], [Node("add", [f, g]).out])
    egraph = EGraph()
    (root,), _ = egraph.add_dag(graph)
    t, u = Node("gelu", [x.out]).out, Node("softmax", [x.out], axis=1).out
    known = {x: egraph.lookup(("arg", (("node", x),), ()))}
    egraph.union(egraph.add_value(f, known), egraph.add_value(Node("sigmoid", [t]).out, known))
    egraph.union(egraph.add_value(g, known), egraph.add_value(Node("tanh", [u]).out, known))
    egraph.rebuild()
    prices = {"relu": 10.0, "gelu": 6.0, "softmax": 6.0}
    cost = lambda cid, enode: prices.get(enode[0], 1e-3) * unit  # noqa: E731
    greedy_pick = greedy(acyclic(egraph, [root]), cost)
    assert {e[0] for e in greedy_pick.values()} >= {"gelu", "softmax"}
    extraction, _greedy = extract(egraph, [root], cost, Deadline.after(10))
    assert extraction.method == "ilp (optimal)"
    chosen = to_dag(egraph, [root], extraction.choice, graph)
    assert {node.op for node in chosen.ops} == {"relu", "sigmoid", "tanh", "add"}
    assert extraction.cost == pytest.approx((10.0 + 4e-3) * unit)  # relu, sigmoid, tanh, add, x


def test_a_choice_that_costs_nothing_is_optimal_without_the_ilp() -> None:
    """transpose(transpose(x)) is x, and x costs nothing: the ILP would have no cost to
    scale its objective by, and is not needed."""
    x = arg(0, "x", 2, 3)
    twice = Node("transpose", [Node("transpose", [x.out], perm=(1, 0)).out], perm=(1, 0)).out
    graph = Dag([x], [twice])
    egraph = EGraph()
    (root,), args = egraph.add_dag(graph)
    egraph.union(root, next(iter(args)))
    egraph.rebuild()
    cost = lambda cid, enode: 0.0 if enode[0] == "arg" else 1.0  # noqa: E731
    (extraction,) = extract(egraph, [root], cost, Deadline.after(10))
    assert extraction.cost == 0.0 and extraction.method == "greedy (costs nothing: optimal)"
    assert to_dag(egraph, [root], extraction.choice, graph).outputs == (x.out,)


class _JoinsTanh:
    """Fusion pricing for the test below: a relu costs 1 alone and 0.25 inside its
    operand's kernel, which it can join when that is a tanh (say, not a sigmoid)."""

    def fused(self, enode: tuple) -> float | None:
        return 0.25 if enode[0] == "relu" else None

    def joinable(self, cid: int, enode: tuple) -> bool:
        return enode[0] == "tanh"


def test_extraction_charges_a_fusible_op_its_launch_only_where_it_cannot_join() -> None:
    # relu(y) with y = sigmoid(x) (0.5) or tanh(x) (0.8). Priced alone, 0.5 + 1 beats
    # 0.8 + 1; when relu joins tanh's kernel, 0.8 + 0.25 wins.
    x = arg(0, "x", 8, 8)
    graph = Dag([x], [Node("relu", [Node("sigmoid", [x.out]).out]).out])
    egraph = EGraph()
    (root,), args = egraph.add_dag(graph)
    known = {x: next(iter(args))}
    sigmoid = egraph.add_value(Node("sigmoid", [x.out]).out, known)
    egraph.union(sigmoid, egraph.add_value(Node("tanh", [x.out]).out, known))
    egraph.rebuild()
    prices = {"relu": 1.0, "tanh": 0.8, "sigmoid": 0.5}
    cost = lambda cid, enode: prices.get(enode[0], 1e-3)  # noqa: E731
    pricing = Pricing(cost, _JoinsTanh())
    alone = extract(egraph, [root], cost, Deadline.after(10))[0]
    fused, local = extract(egraph, [root], pricing, Deadline.after(10))
    assert fused.method == "ilp (optimal)"
    ops = lambda e: {enode[0] for enode in e.choice.values()}  # noqa: E731
    assert "sigmoid" in ops(alone) and "tanh" in ops(fused)
    assert fused.cost == pytest.approx(0.8 + 0.25 + 1e-3)  # tanh, fused relu, x
    # Greedy picks each class's cheapest tree: sigmoid, then relu alone.
    assert local.cost == pytest.approx(0.5 + 1.0 + 1e-3)


def test_polishing_finds_what_per_enode_prices_miss_on_squeezenet() -> None:
    graph = from_module(build_model("squeezenet"))
    cost = AnalyticCost()
    plain = egraph_search(
        graph, RULES, cost, EGraphLimits(polish_budget=0), deadline=Deadline.after(30)
    )
    polished = egraph_search(graph, RULES, cost, EGraphLimits(), deadline=Deadline.after(30))
    assert "polish_gain" not in plain.details and polished.details["polish_gain"] > 1
    assert polished.cost_after < plain.cost_after
    assert_equal(graph, polished.best)


def test_egraph_search_is_at_least_as_good_as_backtracking_on_nasrnn() -> None:
    model = next(m for m in list_models() if m.name == "nasrnn")
    graph = from_module(build_model(model.spec(model.small)))
    cost = AnalyticCost()
    # each bounded by its work (saturation, a budget), not by the clock
    limits = EGraphLimits(node_limit=5000, polish_budget=0)
    saturation = egraph_search(graph, RULES, cost, limits, deadline=Deadline.after(300))
    backtrack = backtracking_search(
        graph, RULES, cost, BacktrackLimits(budget=10), Deadline.after(300)
    )
    assert saturation.stopped == "saturated" and backtrack.stopped == "budget"
    assert saturation.cost_after <= backtrack.cost_after * 1.001
    assert_equal(graph, saturation.best)


def test_rules_that_never_match_leave_a_one_class_per_value_egraph() -> None:
    graph = Dag([arg(0, "x", 3, 3)], [Node("softmax", [arg(0, "x", 3, 3).out], axis=1).out])
    egraph = EGraph()
    egraph.add_dag(graph)
    result = saturate(egraph, [ADD_COMMUTES], SaturationLimits(), Deadline.after(10))
    assert result.stopped == "saturated" and result.rounds == 1 and not result.applied
    assert egraph.num_nodes == 2
    assert sig(3, 3) == egraph.sig(egraph.find(0))
