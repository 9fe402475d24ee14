"""benchmarks/sim_memory.py: one quick row. The issue's goal (every plan within 5 % of
XLA's figure) is a measurement reported in docs/benchmarks.md ("Per-device memory: the
simulator against XLA"), not a test."""

from __future__ import annotations

import pytest
from conftest import load_benchmark


def test_one_row_prints_the_breakdown(capsys: pytest.CaptureFixture[str]) -> None:
    bench = load_benchmark("sim_memory")
    (row,) = bench.main(["--models", "dlrm", "--plans", "data-parallel"])
    output = capsys.readouterr().out
    assert (row.model, row.plan) == ("dlrm", "data-parallel")
    assert row.xla == row.argument + row.output - row.alias + row.temp > 0
    assert row.alias > 0  # the replaced weights donated, as the simulator assumes
    line = next(line for line in output.splitlines() if line.startswith("| dlrm |"))
    assert f"| {row.peak.total} |" in line and f"{row.signed_error:+.1%}" in line
    assert "within 5%: " in output
