"""benchmarks/joint.py: one quick run on a tiny transformer on cpu-4. The issue's figures
(times and speedups on v100-tensoropt) are measurements recorded in docs/benchmarks.md;
here, the rows must be well formed, an infeasible cell never a number nor a speedup's
denominator, and the search pricing swapping no slower than the best plan that fits
without it (that plan is still among the ones it may return)."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("joint")


def test_quick_run_prints_well_formed_rows(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    results = bench.main(["--quick"])
    output = capsys.readouterr().out
    assert "simulated on cpu-4 (4 CPUs)" in output and "Python 3" in output
    (base,) = results.baselines
    assert base.seconds > 0 and base.peak > 0
    assert [row.ratio for row in results.rows] == list(bench.RATIOS)
    lines = output.splitlines()
    for row in results.rows:
        (line,) = [line for line in lines if line.startswith(f"| transformer | {row.ratio:g} |")]
        assert row.cap == int(base.peak * row.ratio)
        a, b = row.fitting, row.priced
        assert line.count("|") == 15
        if a.seconds is None:
            assert a.why and row.over_fitting is None
        else:  # a plan that fits, found in the budget
            assert a.peak is not None and a.peak <= row.cap
            assert a.stopped == "budget" and a.proposals == bench.QUICK_SETUP.budget
            assert b.seconds is not None and b.seconds <= a.seconds * (1 + 1e-9)
        if b.seconds is None:
            assert row.over_data_parallel is None and row.over_fitting is None
        if row.data_parallel is None:
            assert row.over_data_parallel is None
        cells = line.count("none fits")
        expected = sum(x is None for x in (a.seconds, b.seconds, row.data_parallel))
        assert cells == expected
    # at the whole peak data parallel fits: nothing swaps, nothing is infeasible
    first = results.rows[0]
    assert first.ratio == 1 and first.fitting.seconds is not None
    assert not first.priced.swaps and not first.data_parallel_swaps
    # under it nothing fits without swapping, and data parallel fits by swapping
    assert any(
        row.fitting.seconds is None
        and row.priced.seconds is not None
        and row.data_parallel is not None
        and row.data_parallel_swaps
        for row in results.rows
    )


def test_a_measured_row_runs_the_plan_at_the_replays_peak(bench: ModuleType) -> None:
    """`--measured`'s row on the tiny transformer at half data parallel's peak: (b)'s
    plan placed within the cap, run op by op on 4 devices, each holding what the
    replay says."""
    setup = bench.QUICK_SETUP
    step = bench.build_zoo_model(bench.QUICK_MODELS["transformer"])
    base = bench.baseline("transformer", "", step, setup)
    row = bench.measured_row("transformer", step, setup, base.peak, 0.5)
    assert row.checked, row.why
    assert row.planned is not None and row.planned <= row.cap
    assert row.measured == row.planned
