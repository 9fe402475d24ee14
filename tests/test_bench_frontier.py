"""benchmarks/frontier.py: one quick run of every table (VGG16 on TensorOpt's cluster,
candle_uno on FlexFlow's, 20 random graphs). How fast FT is against TensorOpt's and how
close each search comes are measurements reported in docs/benchmarks.md, not tests;
what holds whatever the numbers are is tested here."""

from __future__ import annotations

import itertools
import math
from types import ModuleType

import numpy as np
import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("frontier")


def test_quick_run_fills_every_table(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    results = bench.main(["--quick"])
    output = capsys.readouterr().out
    lines = output.splitlines()
    assert "scipy " in lines[0] and "numpy " in lines[0] and "load " in lines[0]
    assert "simulated" in lines[1] and lines[-1].startswith("# load at the end")

    (vgg,) = results.tensoropt
    assert vgg.model == "vgg16" and vgg.ops > 0 and vgg.nodes > 0 and vgg.edges > 0
    local, anchored = vgg.local, vgg.anchored
    assert (local.label, anchored.label) == ("local", "anchored")
    assert local.anchors == () and local.runs == 1 and local.anchors_s == 0
    # the pass's anchors: each distinct baseline that applies (expert's plan is owt's),
    # the tiling and the ILP's optimum (VGG16's is quick)
    baselines = {"data-parallel", "owt", "megatron", "zero"}
    assert set(anchored.anchors) == {*baselines, "greedy", "ilp"}
    assert anchored.runs == 1 + len(anchored.anchors)
    assert 0 < anchored.anchors_s < anchored.seconds  # the anchored time includes them
    for ft in vgg.fts:
        assert not ft.error and ft.points >= 1 and ft.seconds > 0 and ft.heuristic > 0
        # the frontier runs from the least memory to the fastest
        assert ft.least[0] <= ft.fastest[0] and ft.least[1] >= ft.fastest[1]
        assert ft.fastest_simulated[0] > 0
        # the ILP is exact on the estimates: no FT's fastest point is faster
        assert ft.distance(vgg.ilp.time) >= -1e-9
        assert vgg.goal(ft).startswith("n/a")
        assert f"{vgg.speedup(ft):.2f}x" in output
    # the anchored run includes the local one, and follows the ILP's optimum
    assert anchored.fastest[1] <= local.fastest[1] + 1e-12
    assert anchored.distance(vgg.ilp.time) <= 1e-6
    assert vgg.ilp.status == "optimal" and vgg.data_parallel[0] > 0
    assert vgg.table4 == (0.10, 0.16) and vgg.mini_time.startswith("point ")
    assert "| anchored (as search=ft runs it) |" in output and "[1] The anchored FT" in output

    (candle,) = results.flexflow
    strategies = [row.strategy for row in candle.rows]
    assert strategies[:5] == ["mcmc", "ft-local", "ft-anchored", "greedy", "ilp"]
    assert strategies[5:] == ["data-parallel", "zero"]  # the baselines that apply at --quick
    assert all(row.simulated_s > 0 and row.simulated_memory > 0 for row in candle.rows)
    by_name = {row.strategy: row for row in candle.rows}
    assert by_name["ilp"].note.startswith("optimal")
    # the ILP's estimate is the least of every strategy the graph can express
    least = by_name["ilp"].estimate[1]
    assert all(row.estimate is None or row.estimate[1] >= least - 1e-12 for row in candle.rows)
    assert any(line.startswith("| candle_uno (") for line in lines)
    # the anchored FT follows the ILP's optimum: its fastest point is the ILP's estimate
    assert by_name["ft-anchored"].estimate[1] <= least * (1 + 1e-6)
    assert "5 runs" in by_name["ft-anchored"].note and "1 run)" in by_name["ft-local"].note

    summary = results.greedy
    assert summary.graphs == bench.QUICK_GRAPHS and summary.free
    # the exact least is a least: greedy never communicates less within the budget
    # (over it, when edge memory pushed it there, it may)
    for compared in (*summary.free, *summary.budgeted):
        assert compared.ratio >= 1 or compared.over_budget
    (mlp,) = results.real
    assert mlp.method == "ILP" and mlp.free.least_bytes == 0  # everything replicated
    assert mlp.budgeted.least_bytes <= mlp.budgeted.greedy_bytes

    exact = results.exact
    assert exact.graphs == bench.QUICK_GRAPHS and exact.equal == exact.graphs


def test_numpy_brute_force_is_every_strategy(bench: ModuleType) -> None:
    rng = np.random.default_rng(7)
    for _ in range(10):
        graph = bench.random_graph(rng, max_nodes=5, max_options=3)
        choices = list(itertools.product(*(range(node.options) for node in graph.nodes)))
        costs = [(graph.communicated(c), graph.cost(c)[0]) for c in choices]
        possible = [(moved, memory) for moved, memory in costs if math.isfinite(moved)]
        least_memory = min((memory for _, memory in possible), default=math.inf)
        cap = least_memory * 1.25
        fitting = [moved for moved, memory in possible if memory <= cap]
        least = min((moved for moved, _ in possible), default=math.inf)
        assert bench.brute_force(graph) == (least, least_memory)
        assert bench.brute_force(graph, cap)[0] == min(fitting, default=math.inf)


def test_unknown_model_is_a_usage_error(bench: ModuleType) -> None:
    with pytest.raises(SystemExit) as exit_info:
        bench.main(["--models", "nosuchnet"])
    assert exit_info.value.code == 2
