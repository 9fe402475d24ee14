"""benchmarks/memory.py: one quick real run on a tiny RNN. Its goal (measured peak
within 5 % of the replay's) is a measurement; here, the two must agree exactly, since
the runtime mode does what the plan says."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("memory")


def test_quick_run_measures_the_replayed_peak(
    bench: ModuleType, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(
        bench.MODELS, "rnn", ({"layers": 1, "hidden": 16, "seq": 4, "batch": 2}, "mse")
    )
    rows = bench.main(["--quick", "--models", "rnn"])
    output = capsys.readouterr().out
    assert [row.placement for row in rows] == list(bench.PLACEMENTS)
    for row in rows:
        assert row.measured_peak == row.predicted_peak <= row.unplaced_peak
        assert row.compile_s > 0 and row.compiled_ratio.pairs == 2
    # Adam's moments dominate this step's peak: moving them to the host lowers it
    assert rows[-1].predicted_peak < rows[-1].unplaced_peak
    lines = [line for line in output.splitlines() if line.startswith("| rnn |")]
    assert len(lines) == 2 and "0.00%" in lines[0]
    assert "jax " in output.splitlines()[0]
