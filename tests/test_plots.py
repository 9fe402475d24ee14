"""`tasoc opt --plots DIR`: the figures passes ask for, drawn with matplotlib."""

from __future__ import annotations

import io
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result

from tasoc.driver.plots import render
from tasoc.ir.dag import from_module
from tasoc.passes.figures import Bar, ShardingMapFigure, TimelineFigure
from tasoc.passes.soap.pictures import sharding_map
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.soap_shard import parse_mesh
from tasoc.passes.soap.strategies import STRATEGIES

PNG = b"\x89PNG\r\n\x1a\n"
CLASSIFIER = Path(__file__).resolve().parent.parent / "examples" / "classifier.mlir"


def drawn(figure: TimelineFigure | ShardingMapFigure) -> bytes:
    stream = io.BytesIO()
    render(figure, stream)
    return stream.getvalue()


def test_a_timeline_and_a_sharding_map_are_drawn_as_png() -> None:
    timeline = TimelineFigure(
        "step",
        ("device 0", "net 0"),
        (Bar("device 0", 0.0, 1e-3, "compute"), Bar("net 0", 1e-3, 2e-3, "all-reduce")),
    )
    sharding = ShardingMapFigure("map", ("0: matmul",), (0, 1), (("S0", "S1"),))
    for figure in (timeline, sharding):
        assert drawn(figure).startswith(PNG)


def test_figures_refuse_what_they_cannot_draw() -> None:
    with pytest.raises(ValueError, match="not among its rows"):
        TimelineFigure("t", ("a",), (Bar("b", 0, 1, "compute"),))
    with pytest.raises(ValueError, match="ends before it starts"):
        TimelineFigure("t", ("a",), (Bar("a", 2, 1, "compute"),))
    with pytest.raises(ValueError, match="one cell per op and device"):
        ShardingMapFigure("m", ("op",), (0, 1), (("S0",),))


def test_the_sharding_map_labels_blocks_by_soap_dimension(tasoc: Callable[..., Result]) -> None:
    from xdsl.parser import Parser

    from tasoc.driver.sources import make_context

    module = Parser(make_context(), CLASSIFIER.read_text()).parse_module()
    dag, mesh = from_module(module), parse_mesh("4")
    problem = Problem(dag, mesh, None, {})
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    figure = sharding_map(dag, plan, {mesh.name: mesh}, "map")
    assert figure.devices == (0, 1, 2, 3)
    first = figure.cells[0]
    assert first == ("S0", "S1", "S2", "S3"), figure.cells  # the batch, one block per device


def test_plots_are_written_with_the_run(tasoc: Callable[..., Result], tmp_path: Path) -> None:
    plots = tmp_path / "plots"
    result = tasoc(
        "opt",
        str(CLASSIFIER),
        "-p",
        "soap-shard{mesh=4 machine=cpu-4 search=mcmc budget=20}",
        "-o",
        str(tmp_path / "s.mlir"),
        "--plots",
        str(plots),
    )
    assert result.code == 0, result
    assert (plots / "soap-shard-sharding-map.png").read_bytes().startswith(PNG)
    assert (plots / "soap-shard-timeline.png").read_bytes().startswith(PNG)


def test_plots_of_a_failing_run_are_not_written(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    plots = tmp_path / "plots"
    twice = "soap-shard{mesh=4},soap-shard{mesh=4}"  # the second refuses a sharded program
    result = tasoc("opt", str(CLASSIFIER), "-p", twice, "--plots", str(plots))
    assert result.code == 1 and result.err.startswith("tasoc: error: ")
    assert not plots.exists()


def test_plots_into_a_file_is_one_error_line(tasoc: Callable[..., Result], tmp_path: Path) -> None:
    target = tmp_path / "file"
    target.write_text("x")
    result = tasoc("opt", str(CLASSIFIER), "--plots", str(target))
    assert result.code == 1
    assert result.err == f"tasoc: error: --plots '{target}' is not a directory\n"
    assert target.read_text() == "x"


def test_the_timeline_has_a_compute_and_a_network_row_per_simulated_device() -> None:
    from xdsl.parser import Parser

    from tasoc.cost.machines import machine
    from tasoc.driver.sources import make_context
    from tasoc.passes.soap.pictures import timeline
    from tasoc.sim import simulate
    from tasoc.sim.parallel import ShardedStep

    step_text = CLASSIFIER.read_text()
    module = Parser(make_context(), step_text).parse_module()
    dag, mesh = from_module(module), parse_mesh("4")
    problem = Problem(dag, mesh, None, {})
    plan = complete(problem, STRATEGIES["expert"](problem))
    step = ShardedStep(dag, plan, machine("cpu-4"), mesh=mesh)
    simulated = simulate(step.graph)
    figure = timeline(step.graph, simulated, "step", step.stands_for)
    # the 4 devices run alike: one simulated for all, its rows named for all
    assert step.stands_for == {0: (0, 1, 2, 3)}
    assert figure.rows == ("devices 0-3", "nets 0-3")
    assert timeline(step.graph, simulated, "step").rows == ("device 0", "net 0")
    assert {bar.kind for bar in figure.bars} >= {"compute", "all_gather"}
    assert max(bar.end for bar in figure.bars) == simulated.makespan
    assert drawn(figure).startswith(PNG)
