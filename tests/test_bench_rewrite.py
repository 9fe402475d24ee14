"""benchmarks/rewrite.py: one real run on a small model, and its parts on made-up data."""

from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import asdict
from types import ModuleType

import pytest
from conftest import BENCHMARKS, load_benchmark

from tasoc.passes.rewrite.equality_rewrite import TIMEOUT_MARGIN_S

SCRIPT = BENCHMARKS / "rewrite.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("rewrite")


def table_rows(output: str) -> dict[str, list[str]]:
    """Markdown body rows by search name."""
    rows = [line.strip("|").split(" | ") for line in output.splitlines() if line.startswith("| `")]
    return {cells[1].strip(): [cell.strip() for cell in cells] for cells in rows}


def test_small_model_end_to_end() -> None:
    command = [sys.executable, str(SCRIPT), "--models", "nasrnn", "--small"]
    command += ["--searches", "backtrack,nosuch", "--timeout", "1", "--repeats", "2"]
    command += ["--measure-seconds", "0.5", "--markdown"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "onnxruntime" in done.stdout.splitlines()[0]
    rows = table_rows(done.stdout)
    model, _, ops, predicted, jax, ort, error, search_s, _ = rows["backtrack"]
    assert model == "`nasrnn?hidden=32&length=2`"
    assert ops.startswith("92 → ")
    assert float(predicted) >= 1.0  # the search never returns a graph it predicts slower
    for speedup in (jax, ort):
        assert speedup.endswith("n=2)") and float(speedup.split()[0]) > 0
    assert float(error) < 1e-4
    # The pass's timeout bounds it, re-timing included; on a loaded machine the search's
    # share can be spent before it starts, and 0.0 s is then what the table says.
    assert 0 <= float(search_s) < 1 + TIMEOUT_MARGIN_S
    assert rows["nosuch"][2:8] == ["—"] * 6
    failure = rows["nosuch"][8]  # the option error, as `tasoc opt` words it
    assert failure.startswith("error: ") and "equality-rewrite" in failure
    assert "search" in failure and "nosuch" in failure


def test_ratios_pair_up_and_stop_on_time(bench: ModuleType) -> None:
    calls: list[str] = []

    def sampler(name: str, seconds: float):
        return lambda: calls.append(name) or seconds

    speedup = bench.interleaved_speedup(sampler("a", 3.0), sampler("b", 1.5), 50, 0.0)
    assert (speedup.median, speedup.q1, speedup.q3) == (2.0, 2.0, 2.0)
    assert speedup.pairs == bench.MIN_PAIRS
    assert calls[:4] == ["a", "b", "b", "a"]  # each side goes first in turn


def test_a_stopped_child_keeps_what_it_finished(bench: ModuleType) -> None:
    finished = bench.Result(phase="jax", ops_before=10, ops_after=8, predicted=1.25)
    finished.jax = bench.PairedRatio(1.1, 1.0, 1.2, 7)
    output = f"noise\n{json.dumps(asdict(bench.Result()))}\n{json.dumps(asdict(finished))}\n"
    result = bench.last_result(output.encode())
    assert result == finished
    row = bench.Row("m", "backtrack", "timed out after 9 s during jax", result)
    cells = bench.cells(row, markdown=False)
    assert cells[:6] == ["m", "backtrack", "10 → 8", "1.250", "1.100 (1.000-1.200, n=7)", "—"]
    assert cells[-1] == "timed out after 9 s during jax"


def test_unknown_model_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", "nosuchnet"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "unknown zoo model 'nosuchnet'" in done.stderr


def test_the_notes_say_what_retiming_kept(bench: ModuleType) -> None:
    timed = [
        {"input": True, "search_best": False, "predicted": 4.0},
        {"input": False, "search_best": True, "predicted": 2.0},
    ]
    section = {"cost_before": 4.0, "retimed": timed}
    assert bench.retime_note(section) == "retime kept the input of 2; search predicted 2.000"
    timed.reverse()
    assert bench.retime_note(section).startswith("retime kept the search's best of 2")
    assert bench.retime_note({"cost_before": 4.0}) == ""
