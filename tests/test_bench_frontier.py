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
    assert vgg.points >= 1 and vgg.ft_s > 0 and vgg.eliminations
    # the frontier runs from the least memory to the fastest
    assert vgg.least[0] <= vgg.fastest[0] and vgg.least[1] >= vgg.fastest[1]
    assert vgg.fastest_simulated[0] > 0 and vgg.data_parallel[0] > 0
    # the ILP is exact on the estimates: FT's fastest point is never faster
    assert vgg.ilp.status == "optimal" and vgg.distance >= -1e-9
    assert vgg.goal.startswith("n/a") and vgg.table4 == (0.10, 0.16)
    assert f"{vgg.speedup:.2f}x" in output

    (candle,) = results.flexflow
    strategies = [row.strategy for row in candle.rows]
    assert strategies == ["mcmc", "ft", "greedy", "ilp", "data-parallel", "expert"]
    assert all(row.simulated_s > 0 and row.simulated_memory > 0 for row in candle.rows)
    by_name = {row.strategy: row for row in candle.rows}
    assert by_name["ilp"].note.startswith("optimal")
    # the ILP's estimate is the least of every strategy the graph can express
    least = by_name["ilp"].estimate[1]
    assert all(row.estimate is None or row.estimate[1] >= least - 1e-12 for row in candle.rows)
    assert any(line.startswith("| candle_uno (") for line in lines)

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
