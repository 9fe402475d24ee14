"""Batch chains (`egraph/batching.py`): n matmuls that share a weight become one on
stacked rows, through steps of the proven two-operand rule, and the result is equal."""

from __future__ import annotations

import pytest
from rewrite_helpers import BY_NAME, MATMUL_FUSION, RULES, arg, assert_equal

from tasoc.cost import AnalyticCost
from tasoc.ir.dag import Dag, Node, from_module
from tasoc.models import build_model
from tasoc.passes.rewrite.egraph import EGraph, EGraphLimits, egraph_search
from tasoc.passes.rewrite.egraph.batching import batch_concat
from tasoc.passes.rewrite.egraph.ematch import Index, ematch
from tasoc.passes.rewrite.egraph.saturate import Saturation, SaturationLimits, saturate
from tasoc.passes.search import Deadline

ROW_BATCHING = BY_NAME["g3-0196.rev"]
"""matmul(x, z), matmul(y, z) -> split(matmul(concat{0}(x, y), z)): stacked rows."""

STEPS = 4
"""Time steps (rows) of `shared_weight`."""


def shared_weight(steps: int = STEPS) -> Dag:
    """`steps` one-row inputs, each through the same weight: an RNN's input projections."""
    w = arg(0, "w", 16, 16, param=True)
    xs = [arg(1 + t, f"x{t}", 1, 16) for t in range(steps)]
    return Dag([w, *xs], [Node("matmul", [x.out, w.out]).out for x in xs])


def row_counts(egraph: EGraph, weight: int) -> set[int]:
    """The row counts of every matmul by class `weight` in `egraph`."""
    return {
        egraph.sig(children[0]).shape[0]
        for _, (op, _, children) in egraph.items()
        if op == "matmul" and children[1] == weight
    }


def saturated(
    graph: Dag, limits: SaturationLimits, deadline: Deadline | None = None
) -> tuple[EGraph, int, Saturation]:
    egraph = EGraph()
    _, args = egraph.add_dag(graph)
    weight = next(cid for cid, node in args.items() if node.attr("is_param"))
    result = saturate(egraph, [ROW_BATCHING], limits, deadline or Deadline.after(60))
    return egraph, weight, result


class TickingClock:
    """A clock one second later at every reading: a deadline of n seconds expires
    after n readings, whatever the machine's load."""

    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        self.now += 1.0
        return self.now


def test_batching_rules_are_the_multi_output_rules_that_concatenate_two_inputs() -> None:
    assert batch_concat(ROW_BATCHING) is not None
    assert batch_concat(MATMUL_FUSION) is not None  # the column twin
    assert batch_concat(BY_NAME["g3-0196"]) is None  # the other direction splits
    assert batch_concat(BY_NAME["g3-0001"]) is None  # one output
    batching = [rule.name for rule in RULES if batch_concat(rule)]
    assert batching and all(name.endswith(".rev") for name in batching)


def test_a_chain_stacks_every_row_and_never_a_row_twice() -> None:
    egraph, weight, _ = saturated(shared_weight(), SaturationLimits())
    # Round 1 joins every pair; the chain then grows one row a round, to all four.
    # A row joined twice (a pair's concatenation taken as a member) would give more.
    assert row_counts(egraph, weight) == {1, 2, 3, 4}


def test_without_chains_multi_output_rules_stop_at_pairs() -> None:
    egraph, weight, _ = saturated(shared_weight(), SaturationLimits(batch_chains=False))
    assert row_counts(egraph, weight) == {1, 2}


def test_rounds_cut_short_leave_the_chains_their_share_of_the_time() -> None:
    # Round 1 reads the clock 14 times (a check per rule and per match): 12 readings
    # cut it short. With no time kept for them, the chains never start ...
    egraph, weight, result = saturated(
        shared_weight(), SaturationLimits(chain_share=0.0), Deadline.after(12, TickingClock())
    )
    assert (result.stopped.value, result.chain_rounds) == ("timeout", 0)
    assert row_counts(egraph, weight) == {1, 2}
    # ... with half the time kept, round 1 is cut at the same point and they grow to all
    # four rows; the rounds' stop is what the report says.
    egraph, weight, result = saturated(
        shared_weight(), SaturationLimits(chain_share=0.5), Deadline.after(24, TickingClock())
    )
    assert (result.stopped.value, result.chain_rounds) == ("timeout", 3)
    assert row_counts(egraph, weight) == {1, 2, 3, 4}


def test_matches_anchored_at_a_class_are_the_matches_that_start_there() -> None:
    """A chain's next step is looked up among the matches at its prefix only: the
    same matches full e-matching finds there, and no others."""
    egraph = EGraph()
    _, args = egraph.add_dag(shared_weight())
    first = next(cid for cid, node in args.items() if node.attr("name") == "x0")
    everywhere = list(ematch(Index(egraph), ROW_BATCHING))
    anchored = list(ematch(Index(egraph, {first}), ROW_BATCHING))
    assert anchored == [m for m in everywhere if m.inputs["x"] == first]
    assert 0 < len(anchored) < len(everywhere)


def test_a_chain_share_outside_its_range_is_refused() -> None:
    with pytest.raises(ValueError, match="chain_share"):
        saturated(shared_weight(), SaturationLimits(chain_share=1.0))


def test_the_search_extracts_one_matmul_for_all_rows_and_it_is_equal() -> None:
    graph = shared_weight()
    result = egraph_search(graph, [ROW_BATCHING], AnalyticCost(), deadline=Deadline.after(30))
    matmuls = [node for node in result.best.ops if node.op == "matmul"]
    assert [node.sigs[0].shape for node in matmuls] == [(STEPS, 16)]
    assert result.details["chain_steps"] >= STEPS - 2
    assert result.cost_after < result.cost_before
    assert_equal(graph, result.best)


def test_nasrnn_input_projections_are_batched_across_time_steps() -> None:
    """The rewrite that makes nasrnn faster on a CPU: each input weight multiplies all
    time steps' inputs at once (`docs/benchmarks.md`); the recurrent ones cannot be
    batched (step t+1's state needs step t's), and extraction rules those cycles out."""
    graph = from_module(build_model("nasrnn?hidden=256&length=2"))
    limits = EGraphLimits(polish_budget=0)
    result = egraph_search(graph, RULES, AnalyticCost(), limits, deadline=Deadline.after(60))
    batched = [n for n in result.best.ops if n.op == "matmul" and n.sigs[0].shape[0] == 2]
    assert len(batched) == 8  # one per input weight, over both steps (batch 1)
    assert result.cost_after < result.cost_before
    assert_equal(graph, result.best)
