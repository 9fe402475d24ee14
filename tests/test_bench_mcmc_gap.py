"""benchmarks/mcmc_gap.py: one quick row (AlexNet at FlexFlow's shapes on 4 P100s, a
budget of 10). The issue's goal (MCMC within 2 % of the ILP at 16 GPUs) is a
measurement in docs/benchmarks.md, not a test."""

from __future__ import annotations

import pytest
from conftest import load_benchmark


def test_a_quick_row_sets_mcmc_and_auto_beside_the_ilp(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("mcmc_gap")
    (row,) = bench.main(["--models", "alexnet", "--devices", "4", "--budget", "10"])
    assert (row.model, row.ops) == ("alexnet", 68)
    assert row.mcmc.details["proposals"] <= 10 and row.ilp_s > 0
    # auto starts from the ILP's plan: never slower than it (simulated)
    assert row.auto.cost_after <= row.ilp_s * (1 + 1e-9)
    assert row.gap == pytest.approx(row.mcmc.cost_after / row.ilp_s - 1)
    assert f"| alexnet | 68 | {row.ilp_s * 1e3:.1f} |" in capsys.readouterr().out
