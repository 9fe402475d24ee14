"""The equality-rewrite pass: equal graphs out on every small zoo model and on random
graphs, what it reports, determinism, and its one-line errors."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import assert_one_line_error
from hypothesis import HealthCheck, given, settings
from rewrite_helpers import tampered_copy
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import from_module
from tasoc.models import build_model, list_models
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.rewrite import retime as retime_module
from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass
from tasoc.passes.rewrite.retime import WIN_SHARE
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import graphs

QUICK = EqualityRewritePass(search="backtrack", budget=15, timeout=10.0, retime=0)
"""A short search: enough to apply rules, fast enough for every zoo model (nothing
re-timed, so the choice is the cost model's alone)."""

QUICK_SEARCHES = {
    "backtrack": QUICK,
    "egraph": EqualityRewritePass(search="egraph", timeout=10.0, node_limit=3000, retime=0),
}
"""Each search, short."""


def rewritten(module: ModuleOp, rewrite: EqualityRewritePass = QUICK) -> tuple[ModuleOp, dict]:
    """The module after the pass (on a clone) and the pass's report section."""
    report = RunReport()
    result = module.clone()
    with reporting(report):
        rewrite.apply(Context(), result)
    result.verify()
    return result, report.sections.get(rewrite.name, {})


def assert_equal_programs(before: ModuleOp, after: ModuleOp) -> None:
    arguments = random_inputs(before, seed=0)
    check = compare(run_reference(before, arguments), run_reference(after, arguments))
    assert check.ok, check.summary()


@pytest.mark.parametrize("search", QUICK_SEARCHES)
@pytest.mark.parametrize("model", list_models(), ids=lambda m: m.name)
def test_every_small_zoo_model_stays_equal(model, search: str) -> None:
    module = build_model(model.spec(model.small))
    after, section = rewritten(module, QUICK_SEARCHES[search])
    assert_equal_programs(module, after)
    if "note" not in section:
        assert section["cost_after"] <= section["cost_before"]


@pytest.mark.parametrize("search", QUICK_SEARCHES)
@given(module=graphs(max_ops=6))
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_random_graphs_stay_equal(search: str, module: ModuleOp) -> None:
    rewrite = EqualityRewritePass(search=search, budget=5, timeout=5.0, node_limit=500, retime=0)
    after, section = rewritten(module, rewrite)
    assert_equal_programs(module, after)
    if "note" not in section:
        assert section["cost_after"] <= section["cost_before"]


def fusable() -> ModuleOp:
    """Two small matmuls sharing an input (TASO's Figure 2.2): one launch-bound matmul on
    concatenated weights (folded ahead of time) is cheaper than two."""
    g = GraphBuilder()
    x = g.input("x", (4, 32))
    a, b = g.param("a", (32, 16)), g.param("b", (32, 16))
    return g.build(g.matmul(x, a), g.matmul(x, b))


def test_the_search_finds_a_cheaper_graph_and_reports_it() -> None:
    module = fusable()
    rewrite = EqualityRewritePass(search="backtrack", budget=50, retime=0)
    after, section = rewritten(module, rewrite)
    assert_equal_programs(module, after)
    assert section["cost_after"] < section["cost_before"]
    assert section["predicted_speedup"] > 1
    assert section["rules_applied"] and section["graphs_expanded"] >= 1
    assert section["stopped"] in ("exhausted", "budget", "timeout")
    assert section["rules_loaded"] >= 250


@pytest.mark.parametrize("search", QUICK_SEARCHES)
def test_both_searches_fuse_the_matmuls(search: str) -> None:
    module = fusable()
    after, section = rewritten(module, EqualityRewritePass(search=search, budget=50, retime=0))
    assert_equal_programs(module, after)
    assert section["cost_after"] < section["cost_before"]
    assert "graph.split" in str(after)


def test_retime_measures_the_input_and_the_best_candidates_and_keeps_the_fastest() -> None:
    module = fusable()
    after, section = rewritten(module, EqualityRewritePass(budget=50, retime=2))
    timed = section["retimed"]
    assert 2 <= len(timed) <= 3 and sum(t["input"] for t in timed) == 1
    kept, *others = timed
    assert [t["measured_s"] for t in others] == sorted(t["measured_s"] for t in others)
    assert all((t["wins"] is None) == t["input"] for t in timed)
    assert kept["input"] or kept["wins"] >= WIN_SHARE * 9
    assert section["ops_after"] == kept["ops"]
    assert ("graph.split" in str(after)) == (not timed[0]["input"])
    assert section["predicted_speedup"] == section["cost_before"] / section["cost_after"]
    assert section["cost_after"] == timed[0]["predicted"]
    assert (section["rules_applied"] == {}) == timed[0]["input"]
    assert_equal_programs(module, after)


def rounds_of(*medians_and_wins: tuple[float, int]) -> list[list[float]]:
    """Nine rounds of samples: the input's at 1.0, and per candidate one whose median is
    the given one and that beats the input in the given number of rounds."""
    rounds = [[1.0] * 9]
    for median, wins in medians_and_wins:
        rounds.append([median] * wins + [1.5] * (9 - wins))
        rounds[-1].sort()
    return rounds


@pytest.mark.parametrize(
    ("samples", "kept"),
    [
        (rounds_of((0.8, 9)), 1),  # faster in every round: kept
        (rounds_of((0.9, 6)), 0),  # a lower median, but faster in only 6 of 9: noise
        (rounds_of((0.9, 8), (0.7, 9)), 2),  # both measurably faster: the lowest median
    ],
)
def test_retime_keeps_the_input_unless_a_candidate_is_measurably_faster(
    monkeypatch: pytest.MonkeyPatch, samples: list[list[float]], kept: int
) -> None:
    graphs = [from_module(build_model(f"nasrnn?hidden=8&length={n}")) for n in (1, 2, 3)]
    monkeypatch.setattr(retime_module, "time_rounds", lambda dags, repeats: samples)
    candidates = [(graph, 1.0) for graph in graphs[1 : len(samples)]]
    timed = retime_module.retime(graphs[0], 2.0, candidates, count=len(candidates))
    assert timed[0].graph == graphs[kept]
    assert [t.wins for t in timed if t.graph == graphs[0]] == [None]


@pytest.mark.parametrize(("cost", "retimes"), [("analytic", True), ("analytic-h100", False)])
def test_candidates_are_retimed_by_default_when_the_cost_model_prices_this_machine(
    cost: str, retimes: bool
) -> None:
    _, searched = rewritten(fusable(), EqualityRewritePass(budget=50, cost=cost, retime=0))
    assert searched["cost_after"] < searched["cost_before"]  # a candidate to re-time
    _, section = rewritten(fusable(), EqualityRewritePass(budget=50, cost=cost))
    assert ("retimed" in section) == retimes


@pytest.mark.parametrize("search", QUICK_SEARCHES)
def test_split_size_searches_pieces_and_keeps_the_graph_equal(search: str) -> None:
    model = next(m for m in list_models() if m.name == "nasrnn")
    module = build_model(model.spec(model.small))
    rewrite = EqualityRewritePass(search=search, split_size=25, budget=10, timeout=20.0, retime=0)
    after, section = rewritten(module, rewrite)
    assert_equal_programs(module, after)
    assert section["pieces"] >= 4 and section["stopped"] == "pieces searched"
    assert len(section["cut_sizes"]) == section["pieces"] - 1
    assert section["cost_after"] < section["cost_before"]


def test_the_search_is_deterministic() -> None:
    first, _ = rewritten(fusable(), EqualityRewritePass(budget=30, retime=0))
    second, _ = rewritten(fusable(), EqualityRewritePass(budget=30, retime=0))
    assert str(first) == str(second)


def test_a_graph_no_rule_touches_is_returned_unchanged_with_a_note() -> None:
    g = GraphBuilder()
    module = g.build(g.softmax(g.input("x", (2, 8)), axis=1))
    after, section = rewritten(module)
    assert str(after) == str(module)
    assert "no rule matches" in section["note"]


def test_nasrnn_from_the_command_line(tasoc, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    out = tmp_path / "o.mlir"
    result = tasoc(
        "opt", "zoo:nasrnn?hidden=32&length=3", "-p", "equality-rewrite{retime=0}",
        "--verify-each", "--report", report, "-o", out,
    )  # fmt: skip
    assert result.code == 0, result
    section = json.loads(report.read_text())["sections"]["equality-rewrite"]
    assert section["search"] == "egraph"  # the default
    assert section["cost_after"] < section["cost_before"]  # nasrnn has rules that pay off
    assert section["rules_applied"] and section["chain_steps"] >= 1
    assert "graph.matmul" in out.read_text()


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ("rules=nonesuch", "unknown rule library 'nonesuch'"),
        ("search=annealing", "unknown search 'annealing'"),
        ("alpha=0.5", "alpha must be at least 1"),
        ("cost=psychic", "psychic"),
        ("memory-limit=10", "impossible memory limit"),
        ("retime=-1", "retime must not be negative"),
        ("split-size=0", "split-size must be positive"),
        ("search=egraph node-limit=0", "node-limit must be positive"),
    ],
)
def test_bad_options_are_one_line_errors(tasoc, options: str, fragment: str) -> None:
    result = tasoc("opt", "zoo:nasrnn?hidden=32&length=2", "-p", f"equality-rewrite{{{options}}}")
    assert_one_line_error(result, "equality-rewrite", fragment)


def test_a_tampered_rule_file_is_refused(tasoc, tmp_path: Path) -> None:
    tampered = tampered_copy(tmp_path)
    result = tasoc(
        "opt", "zoo:nasrnn?hidden=32&length=2", "-p", f'equality-rewrite{{rules="{tampered}"}}'
    )
    assert_one_line_error(result, "equality-rewrite", "changed after its proof")
