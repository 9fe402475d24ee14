"""benchmarks/placement.py: one quick real run on a tiny RNN at twice oversubscription.
Its goals (fractions of ideal) are measurements; here, the row must be well formed and
the plan no slower than LRU."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark


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
