"""benchmarks/proposal_cost.py: one quick row (AlexNet at FlexFlow's shapes on 4 K80s, 3
proposals): the chain's figures and the CPU per proposal and per memory check."""

from __future__ import annotations

import pytest
from conftest import load_benchmark

from tasoc.passes.soap import simulated


def test_a_quick_row_times_proposals_and_checks(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("proposal_cost")
    cost = simulated.SimulatedStrategy.cost
    (row,) = bench.main(["--models", "alexnet", "--devices", "4", "--proposals", "3"])
    assert simulated.SimulatedStrategy.cost is cost  # the clock is taken off again
    assert (row.model, row.devices, row.proposals) == ("alexnet", 4, 3)
    assert 0 <= row.accepted <= 3 and row.best > 0 and row.per_proposal > 0
    assert row.checks >= 1 and row.per_check > 0
    assert f"| alexnet | 4 | 3 | {row.accepted} |" in capsys.readouterr().out
