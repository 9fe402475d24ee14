"""benchmarks/roc.py: one quick run on the tiny GCN stand-in; the thesis' goal (1.4-5x
less transfer) is a measurement, not a test."""

from __future__ import annotations

from types import ModuleType

import pytest
from conftest import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("roc")


def test_quick_run_prints_both_tables(
    bench: ModuleType, capsys: pytest.CaptureFixture[str]
) -> None:
    modelled, placed = bench.main(["--quick", "--models", "gcn", "--factors", "1,1.5"])
    output = capsys.readouterr().out
    assert [row.factor for row in modelled] == [1.0, 1.5]
    for row in modelled:
        baselines = [row.loaded[p] for p in bench.POLICIES if row.loaded[p] is not None]
        assert row.loaded["dp"] <= min(baselines)  # the DP is optimal over every order
        assert row.pairs <= bench.DEFAULT_MAX_STATES and row.states >= row.coarse_ops
    assert placed and all(row.moved["dp"] <= row.moved["dp-fixed-order"] for row in placed)
    lines = [line for line in output.splitlines() if line.startswith("| gcn |")]
    assert len(lines) == len(modelled) + len(placed)
    assert "load average before" in output and "simulated on v100-swapadvisor" in output


def test_models_are_pluggable(bench: ModuleType, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(bench.MODELS, "one-layer", lambda quick: bench.gcn(quick, layers=1))
    modelled, _ = bench.main(["--quick", "--models", "one-layer", "--factors", "1"])
    (row,) = modelled
    assert row.model == "one-layer" and row.fine_ops < 28


def test_quick_partitioning_run(bench: ModuleType, capsys: pytest.CaptureFixture[str]) -> None:
    rows = bench.main(
        [
            "--partitioning",
            "--quick",
            "--where",
            "simulated",
            "--datasets",
            "pubmed",
            "--devices",
            "4",
        ]
    )
    (row,) = rows
    assert set(row.epochs) == set(bench.METHODS) and len(row.roc_history) == 4
    # simulated times are deterministic and ROC's first iteration is equal-vertex's,
    # so the partition it keeps is never slower than equal-vertex
    assert row.epochs["roc"] <= row.epochs["equal-vertex"] == row.roc_history[0]
    assert all(row.with_halo[m] > row.epochs[m] for m in bench.METHODS)
    assert "simulated on p100-cluster" in capsys.readouterr().out


def test_repartition_pairs_compare_the_same_steady_steps() -> None:
    """benchmarks/roc_repartition.py: each segment's first step (a compile) is left out
    of both runs, and B after its first re-partition is compared with A on the same
    steps (the runs themselves are the measurement, too slow for a test)."""
    bench = load_benchmark("roc_repartition")
    assert bench.steady_steps([9.0, 1.0, 1.0, 8.0, 2.0, 2.0], 3) == [1.0, 1.0, 2.0, 2.0]
    moved = {"step": 3, "moved_vertices": 7, "block_rows_before": 10, "block_rows_after": 9}
    plain = {"seconds_per_step": [9.0, 1.0, 1.0, 1.0, 4.0, 4.0]}
    repartitioned = {
        "seconds_per_step": [9.0, 1.0, 1.0, 8.0, 2.0, 2.0],
        "repartitions": [moved],
    }
    pair = bench.pair_of(plain, repartitioned, 3)
    assert (pair.plain, pair.before, pair.after, pair.after_plain) == (2.5, 1.0, 2.0, 4.0)
    assert pair.ratio == 0.5
    lines = bench.table([pair])
    assert "| 1 | 2500.0 | 1000.0 | 2000.0 | 4000.0 | step 3: 7, 10->9 |" in lines
    assert lines[-1].endswith("over A, same steps: 0.500 (0.500-0.500, n=1)")
