"""MetaFlow's graph split (`tasoc.passes.rewrite.split`): pieces that cover the graph,
stay convex and come in a topological order; cuts that avoid rule matches; extracting
and splicing pieces; and optimizing piece by piece with the boundary search that
recovers rewrites spanning a cut."""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Sequence

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost import make_cost_model
from tasoc.cost.analytic import AnalyticCost
from tasoc.cost.devices import CPU
from tasoc.cost.model import CostModel
from tasoc.ir.dag import Dag, Node, from_module, to_module
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.subgraph import extract, splice
from tasoc.models import build_model, get_model
from tasoc.passes.rewrite.apply import apply
from tasoc.passes.rewrite.backtrack import BacktrackLimits, backtracking_search
from tasoc.passes.rewrite.library import load_library
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.passes.rewrite.split import (
    _core,
    _hull,
    _is_weight,
    _sites,
    match_weights,
    optimize_in_pieces,
    partition,
)
from tasoc.passes.search import Deadline
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import graphs

RULES = directed(load_library().rules)
COST = make_cost_model("analytic")
CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


def sig(*shape: int) -> TensorSig:
    return TensorSig(tuple(shape), DType.F32)


def arg(index: int, name: str, *shape: int, param: bool = False) -> Node:
    return Node.arg(index, name, sig(*shape), is_param=param)


def small(name: str) -> Dag:
    model = get_model(name)
    return from_module(build_model(model.spec(model.small)))


def search(budget: int, cost: CostModel = COST) -> Callable[[Dag], Dag]:
    """TASO's backtracking search as the optimizer of one piece."""
    limits = BacktrackLimits(budget=budget)
    return lambda graph: backtracking_search(graph, RULES, cost, limits, Deadline.after(10.0)).best


def identity(graph: Dag) -> Dag:
    return graph


def first_rewrite(graph: Dag) -> Dag:
    """The first rule application that changes the graph, or the graph itself."""
    for match in find_matches(graph, RULES):
        new = apply(graph, match)
        if new is not None and new != graph:
            return new
    return graph


def assert_same_results(before: Dag, after: Dag) -> None:
    report = equivalent(to_module(before), to_module(after))
    assert report.ok, report.summary()


def assert_valid_partition(graph: Dag, pieces: Sequence[tuple[Node, ...]], size: int) -> None:
    """Every op once, pieces within `size`, each in `dag.ops` order, and every edge
    from a piece to the same or a later one (so no path leaves a piece and returns)."""
    owner = {node: i for i, piece in enumerate(pieces) for node in piece}
    assert sum(map(len, pieces)) == len(owner) == graph.num_ops
    assert set(owner) == set(graph.ops)
    position = {node: i for i, node in enumerate(graph.ops)}
    for piece in pieces:
        assert 1 <= len(piece) <= size
        assert [position[node] for node in piece] == sorted(position[node] for node in piece)
    for node in graph.ops:
        for value in node.inputs:
            if not value.node.is_arg:
                assert owner[value.node] <= owner[node]


def lost(graph: Dag, pieces: Sequence[tuple[Node, ...]]) -> int:
    """Connected matches whose ops lie in more than one piece."""
    owner = {node: i for i, piece in enumerate(pieces) for node in piece}
    return sum(1 for site in _sites(graph, RULES) if len({owner[node] for node in site}) > 1)


def fusable() -> Dag:
    """Two matmuls reading one activation: TASO's Figure 2.2, fused by one rule."""
    x, a, b = arg(0, "x", 4, 32), arg(1, "a", 32, 16, param=True), arg(2, "b", 32, 16, param=True)
    return Dag([x, a, b], [Node("matmul", [x.out, a.out]).out, Node("matmul", [x.out, b.out]).out])


def two_convs_added() -> Dag:
    """conv(x, w) + conv(x, v) -> conv(x, w + enlarge(v)): a match along edges."""
    x, w = arg(0, "x", 1, 8, 16, 16), arg(1, "w", 8, 8, 3, 3, param=True)
    v = arg(2, "v", 8, 8, 1, 1, param=True)
    first = Node("conv2d", [x.out, w.out], **CONV)
    second = Node("conv2d", [x.out, v.out], **CONV)
    return Dag([x, w, v], [Node("add", [first.out, second.out]).out])


def chain(length: int) -> Dag:
    x = arg(0, "x", 4, 4)
    value = x.out
    for _ in range(length):
        value = Node("tanh", [value]).out
    return Dag([x], [value])


# ------------------------------------------------------------------ weights


def test_match_weights_count_connected_matches_only() -> None:
    weights = match_weights(fusable(), RULES)
    assert sorted(weights.values()) == [2, 2]  # the fusion, read both ways
    # Two alike pools far apart match a batching rule, yet no split can keep them.
    x = arg(0, "x", 1, 4, 8, 8)
    pool = {"kind": "max", "kernel": (2, 2), "strides": (1, 1), "padding": "same"}
    first = Node("pool2d", [Node("relu", [x.out]).out], **pool)
    second = Node("pool2d", [Node("tanh", [x.out]).out], **pool)
    apart = Dag([x], [first.out, second.out])
    assert any(len(m.outputs) == 2 for m in find_matches(apart, RULES))
    assert set(match_weights(apart, RULES).values()) == {0}


# ---------------------------------------------------------------- partition


@pytest.mark.parametrize(
    ("model", "size"), [("nasrnn", 30), ("nasrnn", 12), ("inception_v3", 23), ("resnet50", 12)]
)
def test_partition_covers_every_op_once_in_convex_pieces(model: str, size: int) -> None:
    graph = small(model)
    pieces = partition(graph, RULES, size)
    assert len(pieces) > 1
    assert_valid_partition(graph, pieces, size)
    assert partition(graph, RULES, size) == pieces
    for piece in pieces:
        extract(graph, piece)  # convex, else ValueError


def test_partition_cuts_where_no_match_is_lost() -> None:
    """An RNN step splits cleanly between its input projections and its gate tree;
    cutting the op order into equal chunks breaks fusable matmul groups instead."""
    graph = small("nasrnn")
    pieces = partition(graph, RULES, 30)
    chunks = [graph.ops[i : i + 30] for i in range(0, graph.num_ops, 30)]
    assert len(pieces) == len(chunks)
    assert lost(graph, chunks) > 100
    assert lost(graph, pieces) == 0


def test_a_chain_splits_in_the_middle() -> None:
    assert [len(piece) for piece in partition(chain(12), RULES, 6)] == [6, 6]


def test_a_small_graph_is_one_piece_and_split_size_must_be_positive() -> None:
    graph = chain(3)
    assert partition(graph, RULES, 3) == [graph.ops]
    with pytest.raises(ValueError, match="split_size"):
        partition(graph, RULES, 0)


# ---------------------------------------------------------- extract, splice


def test_extract_makes_a_standalone_program_with_sensible_arguments() -> None:
    x, w = arg(0, "x", 4, 8), arg(1, "w", 8, 8, param=True)
    weight = Node("transpose", [w.out], perm=(1, 0))  # weights only: folded
    hidden = Node("relu", [Node("matmul", [x.out, weight.out]).out])
    out = Node("tanh", [Node("matmul", [hidden.out, weight.out]).out])
    graph = Dag([x, w], [out.out, hidden.out])
    piece = extract(graph, [out, out.inputs[0].node], is_weight=_is_weight)
    assert piece.inputs == (hidden.out, weight.out)
    assert piece.outputs == (out.out,)
    args = [(a.attr("name"), a.attr("is_param")) for a in piece.dag.args]
    assert args == [("relu", False), ("transpose", True)]
    assert [node.op for node in piece.dag.ops] == ["matmul", "tanh"]
    unfolded = extract(graph, [out, out.inputs[0].node])
    assert [a.attr("is_param") for a in unfolded.dag.args] == [False, False]
    first = extract(graph, [weight, hidden.inputs[0].node, hidden])
    assert [(a.attr("name"), a.attr("is_param")) for a in first.dag.args] == [
        ("w", True),
        ("x", False),
    ]
    # relu is a program output and read by the other piece; transpose is read there.
    assert first.outputs == (weight.out, hidden.out)


def test_extract_rejects_what_cannot_be_a_piece() -> None:
    graph = chain(3)
    first, _, last = graph.ops
    with pytest.raises(ValueError, match="convex"):
        extract(graph, [first, last])
    with pytest.raises(ValueError, match="at least one"):
        extract(graph, [])
    with pytest.raises(ValueError, match="ops of the dag"):
        extract(graph, [Node("relu", [graph.args[0].out])])


@pytest.mark.parametrize("model", ["inception_v3", "nasrnn"])
def test_splicing_each_piece_back_unchanged_gives_the_same_dag(model: str) -> None:
    graph = small(model)
    for nodes in partition(graph, RULES, 20):
        piece = extract(graph, nodes)
        assert splice(graph, piece, piece.dag) == graph
    assert optimize_in_pieces(graph, RULES, 20, identity).dag == graph


def test_a_rewritten_piece_spliced_back_computes_the_same() -> None:
    graph = small("nasrnn")
    pieces = [extract(graph, nodes) for nodes in partition(graph, RULES, 30)]
    piece = next(p for p in pieces if any(len(m.outputs) == 2 for m in find_matches(p.dag, RULES)))
    optimized = search(10)(piece.dag)
    assert COST.cost(optimized) < COST.cost(piece.dag)
    result = splice(graph, piece, optimized)
    assert result != graph
    assert_same_results(graph, result)


def test_splice_rejects_a_program_of_other_types_or_a_piece_of_another_dag() -> None:
    graph = chain(4)
    piece = extract(graph, graph.ops[:2])
    (x,) = piece.dag.args
    wider = arg(0, "x", 4, 8)
    with pytest.raises(ValueError, match="other arguments"):
        splice(graph, piece, Dag([wider], [Node("tanh", [wider.out]).out]))
    with pytest.raises(ValueError, match="other types"):
        splice(graph, piece, Dag([x], [Node("reshape", [x.out], shape=(16,)).out]))
    with pytest.raises(ValueError, match="not part of this dag"):
        splice(chain(1), piece, piece.dag)


# ------------------------------------------------------- optimize_in_pieces


def test_optimizing_a_zoo_model_in_pieces_keeps_it_equal_and_no_dearer() -> None:
    graph = small("squeezenet")
    result = optimize_in_pieces(graph, RULES, 20, search(4), cost=COST.cost)
    assert result.pieces > 1 and len(result.cut_sizes) == result.pieces - 1
    assert COST.cost(result.dag) < COST.cost(graph)
    assert_same_results(graph, result.dag)


@pytest.mark.parametrize("build", [fusable, two_convs_added], ids=["siblings", "edges"])
def test_the_boundary_search_recovers_a_rewrite_spanning_a_cut(build: Callable[[], Dag]) -> None:
    """With one op per piece no piece holds the match; the search around the cuts
    finds it."""
    graph = build()
    optimize = search(20)
    assert all(
        optimize(extract(graph, nodes).dag) == extract(graph, nodes).dag
        for nodes in partition(graph, RULES, 1)
    )
    result = optimize_in_pieces(graph, RULES, 1, optimize, boundary_radius=0)
    assert result.pieces == graph.num_ops and sum(result.cut_weights) > 0
    assert COST.cost(result.dag) < COST.cost(graph)
    assert_same_results(graph, result.dag)


def recording(seen: list[Dag]) -> Callable[[Dag], Dag]:
    """An optimizer that changes nothing and keeps every piece it is given."""

    def optimize(piece: Dag) -> Dag:
        seen.append(piece)
        return piece

    return optimize


def skip_connection(length: int) -> tuple[Dag, Node, Node]:
    """relu(x) feeding a chain of `length` ops and, directly, the add at its end."""
    x = arg(0, "x", 4, 4)
    start = Node("relu", [x.out])
    value = start.out
    for _ in range(length):
        value = Node("tanh", [value]).out
    end = Node("add", [value, start.out])
    return Dag([x], [end.out]), start, end


def test_regions_around_a_cut_are_made_convex_by_growing_or_shrinking() -> None:
    graph, start, end = skip_connection(8)
    assert _hull(graph, {start, end}) == set(graph.ops)
    assert _core(graph, {start, end}) == {start}
    # The ops around a cut include both ends of a skip connection across it: a short
    # chain between them joins them, a long one is left out with the end it reaches.
    for length, whole in [(8, True), (40, False)]:
        graph, _, _ = skip_connection(length)
        seen: list[Dag] = []
        result = optimize_in_pieces(graph, RULES, 3, recording(seen))
        assert result.dag == graph and len(seen) > result.pieces
        assert (max(piece.num_ops for piece in seen) == graph.num_ops) == whole


def convolutions_with_batchnorm_and_fusable_matmuls() -> Dag:
    """Two convolutions of one input, each followed by batchnorm and relu, and two
    matmuls of another input (`fusable`)."""
    x = arg(0, "x", 1, 16, 8, 8)
    args, outputs = [x], []
    for i in range(2):
        w = arg(len(args), f"w{i}", 8, 16, 1, 1, param=True)
        norms = [arg(len(args) + 1 + k, f"n{i}k{k}", 8, param=True) for k in range(4)]
        args += [w, *norms]
        conv = Node("conv2d", [x.out, w.out], **CONV)
        norm = Node("batchnorm", [conv.out, *(n.out for n in norms)], epsilon=1e-3)
        outputs.append(Node("relu", [norm.out]).out)
    y = arg(len(args), "y", 4, 32)
    a, b = arg(len(args) + 1, "a", 32, 16, param=True), arg(len(args) + 2, "b", 32, 16, param=True)
    args += [y, a, b]
    outputs += [Node("matmul", [y.out, a.out]).out, Node("matmul", [y.out, b.out]).out]
    return Dag(args, outputs)


def test_a_piece_cheaper_alone_but_dearer_in_place_is_left_out_given_the_cost() -> None:
    """Merging the two convolutions (concat weights, one conv, split) is cheaper in a
    piece of just the two, but the split keeps each batchnorm from fusing: given the
    cost, only the matmul fusion is kept. On a device that relays no weight out per
    call: on the CPU preset the merged weight's one relayout instead of two pays for
    the split (`Device.conv_weight_relayout`), which is not what this test is about."""
    cost = AnalyticCost(dataclasses.replace(CPU, conv_weight_relayout=False))
    graph = convolutions_with_batchnorm_and_fusable_matmuls()
    blind = optimize_in_pieces(graph, RULES, 1, search(20, cost), boundary_radius=0)
    assert [node.op for node in blind.dag.ops].count("conv2d") == 1
    assert cost.cost(blind.dag) > cost.cost(graph)
    result = optimize_in_pieces(
        graph, RULES, 1, search(20, cost), boundary_radius=0, cost=cost.cost
    )
    assert [node.op for node in result.dag.ops].count("conv2d") == 2
    assert cost.cost(result.dag) < cost.cost(graph)
    assert_same_results(graph, result.dag)


def test_the_result_never_costs_more_than_the_input() -> None:
    """Under a cost that is not a sum over ops, pieces that are cheaper one at a time
    can be dearer together; then the input is kept."""
    x, y = arg(0, "x", 4, 6), arg(1, "y", 4, 6)

    def round_trip(value: Node) -> Node:
        there = Node("transpose", [value.out], perm=(1, 0))
        return Node("tanh", [Node("transpose", [there.out], perm=(1, 0)).out])

    graph = Dag([x, y], [round_trip(x).out, round_trip(y).out])

    def cost(candidate: Dag) -> float:  # removing 2 ops is best, removing 4 worst
        return (graph.num_ops - candidate.num_ops - 1.8) ** 2

    assert optimize_in_pieces(graph, RULES, 3, first_rewrite).dag.num_ops == 2
    assert optimize_in_pieces(graph, RULES, 3, first_rewrite, cost=cost).dag == graph


def test_optimize_in_pieces_checks_its_options_and_optimizes_small_graphs_whole() -> None:
    graph = fusable()
    assert optimize_in_pieces(graph, RULES, 2, search(20)).pieces == 1
    with pytest.raises(ValueError, match="boundary_radius"):
        optimize_in_pieces(graph, RULES, 1, identity, boundary_radius=-1)


# ------------------------------------------------------------- random graphs


@given(graphs(min_ops=2, max_ops=10), st.integers(1, 4))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_graphs_split_and_splice_back(module: ModuleOp, size: int) -> None:
    graph = from_module(module)
    pieces = partition(graph, RULES, size)
    assert_valid_partition(graph, pieces, size)
    for nodes in pieces:
        piece = extract(graph, nodes)
        assert splice(graph, piece, piece.dag) == graph
    assert optimize_in_pieces(graph, RULES, size, identity).dag == graph
    assert_same_results(graph, optimize_in_pieces(graph, RULES, size, first_rewrite).dag)
