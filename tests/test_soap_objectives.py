"""soap-shard's objectives and the searches on the cost graph (`search=ft|greedy|ilp`),
through the pass: what each objective writes, the report and pictures, and the one-line
errors of options and caps no strategy meets."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Result, assert_one_line_error
from soap_helpers import assert_runs_as_the_reference, parse, shard, step
from soap_programs import MLP
from xdsl.dialects.builtin import ModuleOp

from tasoc.driver.plots import render
from tasoc.driver.sources import make_context
from tasoc.passes.figures import FrontierFigure, ProfileFigure
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.soap import SoapShardFailed, SoapShardPass, cost_searches

MACHINE = "v100-tensoropt"


@pytest.fixture(scope="module")
def mlp_step() -> ModuleOp:
    return step(parse(MLP), loss="mse", optimizer="adam", lr=0.01)


def frontier_run(module: ModuleOp, **options: Any) -> tuple[ModuleOp, dict[str, Any], RunReport]:
    sharded = module.clone()
    with reporting(RunReport()) as report:
        SoapShardPass(machine=MACHINE, search="ft", **options).apply(make_context(), sharded)
    return sharded, report.sections["soap-shard"], report


def test_frontier_reports_every_point_and_writes_the_fastest(mlp_step: ModuleOp) -> None:
    _, section, report = frontier_run(mlp_step, mesh=4, objective="frontier", seed=0)
    points = section["frontier"]
    assert len(points) >= 2
    memories, times = zip(*points, strict=True)
    assert list(memories) == sorted(set(memories)) and list(times) == sorted(times, reverse=True)
    assert section["picked"] == len(points)
    chosen = section["chosen"]
    assert chosen["estimated_seconds"] == pytest.approx(times[-1])
    assert chosen["simulated_seconds"] == section["predicted_seconds"]["plan"]
    assert set(section["compared"]) == {"ft", "mcmc", "ilp", "greedy", *section["baselines"]}
    # the ILP optimum of the same cost graph is no faster than the frontier's fastest point
    assert section["compared"]["ilp"]["estimated_seconds"] >= times[-1] * (1 - 1e-9)
    sample = section["frontier_simulated"]
    assert sample[0][0] == 1 and sample[-1][0] == len(points)
    assert sample[-1][1:] == [chosen["simulated_memory"], chosen["simulated_seconds"]]
    figure = report.figures["soap-shard-frontier"]
    assert isinstance(figure, FrontierFigure) and len(figure.frontier) == len(points)
    assert len(figure.simulated_frontier) == len(sample)
    names = {mark.name for mark in figure.marks if mark.simulated}
    assert names == set(section["compared"])
    assert figure.written == "ft"  # the plan written is marked


def test_pick_names_a_point_by_number_or_end(mlp_step: ModuleOp) -> None:
    _, section, _ = frontier_run(mlp_step, mesh=4, objective="frontier", pick="smallest")
    assert section["picked"] == 1
    assert section["chosen"]["estimated_memory"] == section["frontier"][0][0]
    count = len(section["frontier"])
    with pytest.raises(SoapShardFailed, match=f"pick={count + 5} names no frontier point.*{count}"):
        frontier_run(mlp_step, mesh=4, objective="frontier", pick=count + 5)


def test_mini_time_is_the_fastest_point_under_the_cap(mlp_step: ModuleOp) -> None:
    _, section, _ = frontier_run(mlp_step, mesh=4, objective="frontier", compare="none")
    points = section["frontier"]
    cap = (points[0][0] + points[-1][0]) // 2
    _, capped, _ = frontier_run(mlp_step, mesh=4, objective="mini-time", memory_cap=cap)
    best_under = max(i for i, (memory, _) in enumerate(points) if memory <= cap)
    assert capped["picked"] <= best_under + 1
    assert capped["chosen"]["estimated_memory"] <= cap or capped["frontier_notes"]
    with pytest.raises(SoapShardFailed, match=r"under the frontier's least memory.*, \d+ bytes"):
        frontier_run(mlp_step, mesh=4, objective="mini-time", memory_cap=1)


@pytest.mark.parametrize("search", ["greedy", "ilp"])
def test_greedy_and_ilp_write_a_plan_with_their_figures(mlp_step: ModuleOp, search: str) -> None:
    _, section = shard(mlp_step, mesh=4, machine=MACHINE, search=search)
    assert section["chosen"]["simulated_seconds"] == section["predicted_seconds"]["plan"]
    assert section["cost_graph"]["nodes"] > 0
    key = "communicated_bytes" if search == "greedy" else "ilp"
    assert key in section


def test_an_ilp_too_large_falls_back_to_the_tiling_with_a_note(
    mlp_step: ModuleOp, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(cost_searches, "ILP_MAX_VARIABLES", 3)
    _, section = shard(mlp_step, mesh=4, machine=MACHINE, search="ilp")
    assert "communicated_bytes" in section
    assert "search=greedy's tiling instead" in section["ilp_notes"][0]


def test_mcmc_also_starts_from_the_tiling(mlp_step: ModuleOp) -> None:
    _, section = shard(mlp_step, mesh=4, machine=MACHINE, search="mcmc", budget=50, seed=0)
    assert "greedy" in section["chains"]


def test_profile_and_mini_parallelism_try_each_device_count(mlp_step: ModuleOp) -> None:
    sharded = mlp_step.clone()
    with reporting(RunReport()) as report:
        SoapShardPass(machine=MACHINE, search="ft", objective="profile", devices="1-4").apply(
            make_context(), sharded
        )
    profile = report.sections["soap-shard"]["profile"]
    assert set(profile) == {"1", "2", "4"}
    figure = report.figures["soap-shard-profile"]
    assert isinstance(figure, ProfileFigure) and figure.devices == (1, 2, 4)
    # a cap one device cannot meet (its one strategy holds the whole step) but more
    # can, by splitting: the fewest devices that fit (the fastest plans of the profile
    # are all replicated, the same bytes per device, so its figures give no cap between)
    cap = profile["1"]["simulated_memory"] - 1
    with reporting(RunReport()) as report:
        SoapShardPass(
            machine=MACHINE,
            search="ft",
            objective="mini-parallelism",
            memory_cap=cap,
            devices="1-4",
        ).apply(make_context(), mlp_step.clone())
    section = report.sections["soap-shard"]
    assert section["mesh"]["d"] in (2, 4)
    assert section["peak_memory"]["plan"] <= cap


def test_the_pictures_draw(mlp_step: ModuleOp, tmp_path: Path) -> None:
    _, _, report = frontier_run(mlp_step, mesh=4, objective="frontier", compare="greedy")
    with (tmp_path / "f.png").open("wb") as stream:
        render(report.figures["soap-shard-frontier"], stream)
    assert (tmp_path / "f.png").stat().st_size > 1000


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ("mesh=4 search=ft pick=2", "pick= chooses a frontier point: give objective=frontier"),
        ("mesh=4 search=mcmc objective=frontier", "objective=frontier needs search=ft"),
        ("mesh=4 search=ft objective=mini-time", "objective=mini-time needs memory-cap"),
        ("mesh=4 search=ft devices=1-4", "devices= is for objective=mini-parallelism or profile"),
        ("mesh=4 search=ft objective=frontier pick=middle", "pick must be fastest, smallest"),
        ("mesh=4 search=ft objective=frontier compare=annealing", "compare must list searches"),
        ("mesh=4 search=ft heuristic=random", "heuristic"),
        ("search=ft objective=profile devices=3-2 machine=v100-tensoropt", "devices must be"),
        (
            "search=ft objective=profile devices=1-64 machine=v100-tensoropt",
            "asks for 64 devices, more than machine v100-tensoropt's 16",
        ),
        ("mesh=4 search=ft objective=profile machine=v100-tensoropt", "give devices=, not mesh="),
        (
            "search=greedy objective=mini-parallelism memory-cap=1 devices=1-2 machine=cpu-2",
            "no device count of 1, 2 fits memory-cap=1 bytes per device",
        ),
        (
            "mesh=2 machine=cpu-2 search=ft objective=mini-time memory-cap=1",
            "under the frontier's least memory",
        ),
    ],
)
def test_bad_objectives_are_one_line_errors(
    tasoc: Callable[..., Result], tmp_path: Path, options: str, fragment: str
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(str(step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)))
    output = tmp_path / "out.mlir"
    result = tasoc("opt", source, "-p", f"soap-shard{{{options}}}", "-o", output)
    assert_one_line_error(result, fragment)
    assert not output.exists()


def test_the_chosen_point_runs_on_8_fake_devices_as_the_reference(
    mlp_step: ModuleOp, tmp_path: Path
) -> None:
    sharded = mlp_step.clone()
    with reporting(RunReport()) as report:
        options = {"objective": "frontier", "compare": "none"}
        SoapShardPass(machine="cpu-8", mesh=8, search="ft", **options).apply(
            make_context(), sharded
        )
    assert report.sections["soap-shard"]["mesh"] == {"d": 8}
    assert_runs_as_the_reference(sharded, tmp_path, 8)
