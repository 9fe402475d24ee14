"""benchmarks/placement.py: one quick real run on a tiny RNN at twice oversubscription.
Its goals (fractions of ideal) are measurements; here, the row must be well formed and
the plan no slower than LRU."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark

from tasoc.cost.machines import machine
from tasoc.ir.dag import from_module
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.recompute import recomputable
from tasoc.passes.placement.swap_planner import SwapSettings, plan_swaps


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("placement")


def test_quick_run_prints_a_row(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    (row,) = bench.main(["--quick", "--in-place"])
    output = capsys.readouterr().out
    (peaks,) = [line.split() for line in output.splitlines() if "with buffer reuse" in line]
    assert 0 < int(peaks[-1]) < int(peaks[5].rstrip(","))  # reuse lowers the unplaced peak
    assert not row.failed and row.ratio == 2.0 and row.ideal_ms > 0
    assert 0 < row.fractions["lru"] <= row.fractions["belady"] <= 1.0
    assert row.fractions["ideal"] == 1.0
    (line,) = [line for line in output.splitlines() if line.startswith("| rnn |")]
    assert line.count("%") == 3 and "simulated on v100-swapadvisor" in output
    assert row.fractions["belady"] <= row.bound <= 1.0  # the best possible fraction


def test_recompute_is_a_column_no_slower_than_belady(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    (row,) = bench.main(["--quick", "--papers", "--searches", "recompute", "--timeout", "5"])
    output = capsys.readouterr().out
    assert row.fractions["belady"] <= row.fractions["ga"] <= row.fractions["recompute"] <= 1.0
    assert "SwapAdvisor % (Fig. 5.1)" in output


def test_the_trace_accounts_for_the_time_over_ideal() -> None:
    """`benchmarks/placement_trace.py`: a plan's time over the ideal is its ops run
    again, the compute stream's waits and the copies after the last op, and no more."""
    trace = load_benchmark("placement_trace")
    step = trace.training_step("rnn", trace.QUICK_MODELS)
    problem = PlacementProblem.of(
        from_module(step, keep_order=True),
        training_signature(entry_function(step)),
        trace.reused_peak(step) // 4,
        machine(trace.MACHINE),
        in_place=True,
    )
    values = frozenset(recomputable(problem))
    settings = SwapSettings(problem.capacity, recompute=values, in_place=True)
    plan = plan_swaps(problem.dag, problem.signature, settings)
    run = problem.simulate(plan)
    over = trace.over_ideal(run, plan.schedule, problem)
    assert over["recompute"] > 0 and over["waits"] > 0
    assert over["step"] - over["ideal"] == pytest.approx(
        over["recompute"] + over["waits"] + over["tail"], rel=1e-9
    )
