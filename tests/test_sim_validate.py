"""benchmarks/sim_validate.py kept running: a few plans of a tiny training step in each
setup (2 fake devices here, 2 `jax.distributed` processes of one device), whose
collectives the simulator, the written IR and the compiled HLO must agree on. The
issue's goals on measured times (Kendall tau, error) are measurements reported in
docs/benchmarks.md, not tests: they depend on the machine's load."""

from __future__ import annotations

import dataclasses
import itertools
import json
import math
from pathlib import Path
from types import ModuleType

import pytest
from conftest import load_benchmark

from tasoc.cost.machines import CollectivePrice, machine

TINY = {
    "feature_width": 16,
    "feature_layers": 1,
    "top_width": 16,
    "top_layers": 1,
    "cell_features": 8,
    "drug_descriptors": 16,
    "drug_fingerprints": 8,
    "batch": 4,
}
"""candle_uno small enough to compile in a fraction of a second at XLA's -O0."""


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("sim_validate")


@pytest.fixture(scope="module")
def plans(bench: ModuleType) -> list:
    """The first three plans (named strategies: no search runs) of the tiny step."""
    step = bench.step_of("candle_uno", TINY)
    problem = bench.problem_of(step)
    planned = bench.plans_of(problem, machine("cpu-2"), budget=1, randoms=0)
    return bench.written("candle_uno", step, problem, itertools.islice(planned, 3), TINY)


def rows_of(bench: ModuleType, name: str, plans: list, runs: list) -> list:
    setup = bench.SETUPS[name]
    cluster, _ = setup.view(machine("cpu-2"))
    return [bench.row_of(setup, cluster, c, m) for c, m in zip(plans, runs, strict=True)]


def test_one_process_of_two_devices(bench: ModuleType, plans: list) -> None:
    assert plans[0].strategy == "data-parallel" and len({c.strategy for c in plans}) == 3
    rows = rows_of(bench, "1x2", plans, bench.measured_here([c.module for c in plans], 1))
    for row in rows:
        assert row.predicted, f"{row.candidate.strategy} communicates nothing: no check"
        assert row.predicted == row.measured.ir == row.measured.hlo
        assert row.measured.ir_bytes == row.measured.hlo_bytes
        assert len(row.measured.samples) == 1 and row.measured_s > 0
    goals = bench.goals_of(rows)
    assert goals.same_collectives == 1.0 and set(goals.taus) == {"all", "1x2", "1x2 candle_uno"}
    table = bench.table(rows)
    assert table.count("| yes |") == len(rows)


def test_two_processes_of_one_device(bench: ModuleType, plans: list) -> None:
    """The launcher starts this script as its workers; they agree on call counts (a
    collective program must be called alike everywhere) and process 0 reports."""
    setup = bench.SETUPS["2x1"]
    runs = bench.measured_in_processes(setup, [plans[0].module], 1)
    (row,) = rows_of(bench, "2x1", plans[:1], runs)
    # data parallel: the weights' gradients summed across the processes, nothing else
    assert set(row.predicted) == {"all-reduce"}
    assert row.predicted == row.measured.ir == row.measured.hlo
    assert row.measured_s > 0


def test_goals_miss_on_a_misranked_or_wrong_plan(bench: ModuleType, plans: list) -> None:
    """The verdicts read the rows: swapped times miss tau, distant ones the error, one
    plan whose HLO differs the collectives."""
    setup = bench.SETUPS["1x2"]
    cluster, _ = setup.view(machine("cpu-2"))

    def row(plan: object, seconds: float, hlo: dict[str, int] | None = None) -> object:
        simulated = bench.row_of(setup, cluster, plan, bench.Measured({}, {}, 0, 0, [1.0]))
        counts = simulated.predicted
        simulated.measured = bench.Measured(counts, counts if hlo is None else hlo, 0, 0, [seconds])
        return simulated

    ordered = sorted(plans, key=lambda p: row(p, 1.0).simulated_s)
    right = [row(p, row(p, 1.0).simulated_s) for p in ordered]
    assert bench.goals_of(right).met
    swapped = [row(p, row(q, 1.0).simulated_s) for p, q in zip(ordered, ordered[::-1], strict=True)]
    assert bench.goals_of(swapped).taus["all"] < 0 and not bench.goals_of(swapped).met
    slow = [row(p, 2 * row(p, 1.0).simulated_s) for p in ordered]
    assert math.isclose(bench.goals_of(slow).median_error, 0.5) and not bench.goals_of(slow).met
    assert bench.fits(slow)[0] == "- 1x2: measured = 2.00 x simulated + 0.000 ms"
    wrong = [*right[:-1], row(ordered[-1], right[-1].measured_s, {"all-gather": 99})]
    assert bench.goals_of(wrong).same_collectives < 1 and not bench.goals_of(wrong).met
    # the tau is over all rows: a setup ranking one pair wrong, far from the
    # other's times, misses only the stricter per-setup bar, which is reported apart
    far = [dataclasses.replace(r, setup="2x1", simulated_s=10 * r.simulated_s) for r in right]
    for r, other in zip(far, [far[1], far[0], *far[2:]], strict=True):
        r.measured = dataclasses.replace(r.measured, samples=[other.simulated_s])
    mixed = bench.goals_of([*right, *far])
    assert mixed.taus["2x1"] < 0.8 <= mixed.taus["all"]
    assert mixed.met and not mixed.ranked_in_every_group


def test_a_run_shows_its_calibrations_spread_and_scales(bench: ModuleType) -> None:
    """The reader of a run sees how the machine's links and compute were measured and
    how much the link's rounds varied: a calibration's luck, not the model's."""
    calibrated = dataclasses.replace(
        machine("cpu-2"),
        sources=(
            "calibrated by a test",
            "intra: ... 5 round(s) fitted alone: bandwidth IQR 2.6-4.2 GB/s, latency IQR 16-17 us",
            "compute: a probe ... compute_scales 2x1 = 1.4",
            "host: ...",
        ),
        compute_scales=(("2x1", 1.4),),
    )
    assert bench.calibration_lines(calibrated) == [
        "# intra: ... 5 round(s) fitted alone: bandwidth IQR 2.6-4.2 GB/s, latency IQR 16-17 us",
        "# compute: a probe ... compute_scales 2x1 = 1.4",
        "# compute scales: 2x1 x1.4",
    ]
    assert bench.calibration_lines(machine("cpu-2")) == ["# compute scales: none"]
    by_kind = dataclasses.replace(
        calibrated.intra, collectives=(("all_reduce", CollectivePrice(2e9, 30e-6)),)
    )
    assert bench.calibration_lines(dataclasses.replace(calibrated, intra=by_kind))[-2:] == [
        "# intra per collective kind: all_reduce 2 GB/s, 30 us",
        "# compute scales: 2x1 x1.4",
    ]


def test_a_measured_machine_without_a_compute_scale_is_noted(bench: ModuleType) -> None:
    """A machine calibrated before compute scales (or with one process) prices the 2x1
    processes' ops as one process runs them: the run says so beside its results."""
    measured = dataclasses.replace(
        machine("cpu-2"), nodes=2, devices_per_node=2, inter=machine("cpu-2").intra
    )
    measured = dataclasses.replace(measured, pricing="measured")
    _, note = bench.SETUPS["2x1"].view(measured)
    assert "no compute scale for 2x1" in note and "--processes 2" in note
    scaled = dataclasses.replace(measured, compute_scales=(("2x1", 1.3),))
    shaped, note = bench.SETUPS["2x1"].view(scaled)
    assert note == "" and shaped.compute_scale(2) == 1.3
    assert bench.SETUPS["1x2"].view(measured)[1] == ""
    _, both = bench.SETUPS["2x1"].view(dataclasses.replace(measured, nodes=1, inter=None))
    assert "has one node" in both and "no compute scale" in both


# ------------------------------------------------------------------ saved rows


def _saved(bench: ModuleType, plans: list, path: Path) -> list[dict]:
    """The rows of `plans` on both setups of cpu-2, with made-up measurements (none is
    timed: re-pricing reads them as saved), written as `--json` writes them."""
    runs = [bench.Measured({}, {}, 0, 0, [1e-3 * (i + 1), 2e-3]) for i in range(len(plans))]
    rows = [row for name in bench.SETUPS for row in rows_of(bench, name, plans, runs)]
    saved = [row.to_json() for row in rows]
    path.write_text(json.dumps(saved))
    return saved


def test_a_saved_plan_reads_back_as_the_same_plan(bench: ModuleType, plans: list) -> None:
    for candidate in plans:
        data = json.loads(json.dumps(bench.plan_to_json(candidate.problem.dag, candidate.plan)))
        back = bench.plan_from_json(candidate.problem.dag, data)
        assert bench._same_plan(back, candidate.plan) and back.order == candidate.plan.order


def test_reprice_simulates_the_saved_plans_again_against_the_saved_times(
    bench: ModuleType, plans: list, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Same code, same machine: every row simulated as saved, beside its saved
    measurement; a row saved without its plan is priced on the one its strategy makes
    again. Another machine moves the simulated times, not the measured ones."""
    path = tmp_path / "rows.json"
    saved = _saved(bench, plans, path)
    del saved[0]["plan"]  # as a file written before plans were saved
    path.write_text(json.dumps(saved))
    results = bench.main(["--reprice", str(path), "--machine", "cpu-2"])
    out = capsys.readouterr().out
    assert f"# 1x2: {len(plans)} of {len(plans)} simulated as saved" in out
    assert f"# 2x1: {len(plans)} of {len(plans)} simulated as saved" in out
    assert [r.measured.samples for r in results.rows] == [r["samples"] for r in saved]
    assert [r.simulated_s for r in results.rows] == [r["simulated_s"] for r in saved]
    slower = dataclasses.replace(machine("cpu-2"), name="slower")
    slower = dataclasses.replace(slower, device=dataclasses.replace(slower.device, peak_flops=1e6))
    pairs = bench.repriced(saved, slower, 1, 0)
    assert all(row.simulated_s > then["simulated_s"] for then, row in pairs)
    assert [row.measured_s for _, row in pairs] == [r["measured_s"] for r in saved]


@pytest.mark.parametrize(
    ("content", "message"),
    [
        ("not json", "is not JSON"),
        ("{}", "holds no rows"),
        ('[{"setup": "1x2"}]', "row 1 lacks model"),
        ("WRONG_SETUP", "unknown setup '3x3'"),
        ("OTHER_STEP", "plan of another step"),
        ("NO_SAMPLES", "samples must be positive seconds"),
    ],
)
def test_a_bad_saved_file_is_one_line(
    bench: ModuleType, plans: list, tmp_path: Path, content: str, message: str
) -> None:
    path = tmp_path / "rows.json"
    if content.isupper():
        saved = _saved(bench, plans, path)[:1]
        if content == "WRONG_SETUP":
            saved[0]["setup"] = "3x3"
        elif content == "OTHER_STEP":
            saved[0]["plan"]["dag"] = "0" * 16
        else:
            saved[0]["samples"] = []
        content = json.dumps(saved)
    path.write_text(content)
    with pytest.raises(SystemExit) as raised:
        bench.main(["--reprice", str(path), "--machine", "cpu-2"])
    text = str(raised.value.code)
    assert text.startswith("sim_validate: error: ") and message in text and "\n" not in text
    with pytest.raises(SystemExit) as raised:
        bench.main(["--reprice", str(tmp_path / "absent.json"), "--machine", "cpu-2"])
    assert "cannot read" in str(raised.value.code)
