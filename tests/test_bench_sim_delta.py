"""benchmarks/sim_delta.py: one quick run of the soap-shard edit measurement on the
smallest model. The issue's goal (an update >= 3x faster than `simulate`) is a
measurement reported in docs/benchmarks.md, not a test."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark

QUICK = [
    *("--soap", "candle_uno", "--soap-devices", "4", "--proposals", "4"),
    *("--memory", "yes", "--skip-synthetic"),
]


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("sim_delta")


def test_soap_edits_times_every_update_of_the_chain(bench: ModuleType) -> None:
    edits, tasks = bench.soap_edits("candle_uno", 4, 6, memory=False)
    assert tasks > 0 and set(edits) == set(bench.EDIT_KINDS)
    timed = [edit for kind in edits.values() for edit in kind]
    assert len(timed) >= 6  # one per proposal, and one per revert
    assert all(edit.update_s >= 0 and edit.simulate_s > 0 for edit in timed)
    assert all(0.0 <= edit.moved <= 1.0 for edit in timed)


def test_quick_run_prints_a_row_per_edit_kind(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    bench.main(QUICK)
    output = capsys.readouterr().out
    assert "memory=True" in output
    assert any(line.startswith("candle_uno      4") for line in output.splitlines())
