"""`tasoc opt --plots DIR`: the figures passes ask for, drawn with matplotlib."""

from __future__ import annotations

import io
import itertools
import re
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
from conftest import Result

from tasoc.driver.plots import draw, render
from tasoc.ir.dag import from_module
from tasoc.passes.figures import (
    Bar,
    Figure,
    FrontierFigure,
    MemoryFigure,
    MemorySeries,
    ProfileFigure,
    ShardingMapFigure,
    StrategyMark,
    TimelineFigure,
)
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.pictures import sharding_map
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.strategies import STRATEGIES

PNG = b"\x89PNG\r\n\x1a\n"
CLASSIFIER = Path(__file__).resolve().parent.parent / "examples" / "classifier.mlir"
UNIT = re.compile(r"\((µs|ms|s|bytes|KiB|MiB|GiB)\)")
"""An axis label's unit, as every time and memory axis says it."""

LEGEND = (("S", "Sn: sample"), ("P", "Pn: parameter"), ("all", "all: whole op"), ("", "idle"))


def drawn(figure: Figure) -> bytes:
    stream = io.BytesIO()
    render(figure, stream)
    return stream.getvalue()


def series(name: str, seconds: float, peak: int) -> MemorySeries:
    return MemorySeries(name, seconds, (0.0, seconds / 2), (0, peak), (seconds / 4,), ())


def frontier(written: str | None = "ft") -> FrontierFigure:
    marks = (
        StrategyMark("ilp", 2**20, 1e-3, simulated=False),
        StrategyMark("ft", 2**20, 1e-3, simulated=False),  # on ilp's point
        StrategyMark("data-parallel", 3 * 2**20, 2e-3, simulated=False),
        StrategyMark("ft", 2**21, 1.5e-3, simulated=True),
    )
    line = ((2**19, 3e-3), (2**20, 1e-3))
    return FrontierFigure("f", line, line[1:], marks, cap=2**22, written=written)


def figures() -> dict[str, Figure]:
    """One small figure of each kind."""
    touching = tuple(Bar("net 0", i * 1e-3, (i + 1) * 1e-3, "all_reduce") for i in range(5))
    return {
        "timeline": TimelineFigure(
            "step", ("device 0", "net 0"), (Bar("device 0", 0.0, 5e-3, "compute"), *touching)
        ),
        "sharding map": ShardingMapFigure(
            "map", ("0: matmul", "1: add"), (0, 1), (("S0", "S1"), ("all", "")), LEGEND
        ),
        "memory": MemoryFigure(
            "memory",
            capacity=3 * 2**20,
            series=(series("belady", 2e-3, 3 * 2**20), series("lru", 7e-3, 2**20)),
            unplaced_peak=5 * 2**20,
            ideal=series("ideal", 1e-3, 5 * 2**20),
        ),
        "frontier": frontier(),
        "profile": ProfileFigure("profile", (1, 2, 4), (3.0, 2.0, 1.5), (2**30, 2**29, 2**28)),
    }


@pytest.mark.parametrize("kind", list(figures()))
def test_every_figure_draws_with_units_and_a_legend(kind: str) -> None:
    """Each axis of time or memory says its unit, and each panel is explained by a
    legend of its own or the figure's."""
    from matplotlib import pyplot

    figure = figures()[kind]
    picture = draw(figure)
    try:
        for axes in picture.axes:
            assert axes.get_legend() is not None or picture.legends, (kind, axes.get_title())
            for label in (axes.get_xlabel(), axes.get_ylabel()):
                if label.startswith(("time", "simulated time", "memory", "device memory")):
                    assert UNIT.search(label), (kind, label)
    finally:
        pyplot.close(picture)
    assert drawn(figure).startswith(PNG)


def legend_texts(picture: Any) -> list[str]:
    legends = [axes.get_legend() for axes in picture.axes] + list(picture.legends)
    return [text.get_text() for legend in legends if legend for text in legend.get_texts()]


def test_times_and_bytes_take_the_unit_that_fits() -> None:
    from matplotlib import pyplot

    picture = draw(figures()["profile"])  # seconds 1.5-3 and memory 256 MiB-1 GiB
    assert [axes.get_ylabel() for axes in picture.axes] == [
        "time per iteration (s)",
        "memory per device (GiB)",
    ]
    pyplot.close(picture)
    picture = draw(figures()["timeline"])  # 5 ms
    assert picture.axes[0].get_xlabel().startswith("simulated time (ms)")
    pyplot.close(picture)


def test_the_sharding_map_explains_the_kinds_it_shows() -> None:
    from matplotlib import pyplot

    picture = draw(figures()["sharding map"])
    assert legend_texts(picture) == ["Sn: sample", "all: whole op", "idle"]  # no P shown
    pyplot.close(picture)
    assert ShardingMapFigure.kind_of("S1 P10") == "S P"
    assert ShardingMapFigure.kind_of("all") == "all" and ShardingMapFigure.kind_of("") == ""


def test_touching_tasks_stay_separate_bars() -> None:
    """Five all-reduces back to back on one row are five bars, told apart by shade."""
    from matplotlib import pyplot

    picture = draw(figures()["timeline"])
    net = picture.axes[0].collections[-1]  # the rows are drawn in order
    assert len(net.get_paths()) == 5
    shades = [tuple(colour) for colour in net.get_facecolors()]
    assert all(left != right for left, right in itertools.pairwise(shades))
    pyplot.close(picture)


def test_memory_panels_share_time_only_when_their_runs_compare() -> None:
    from matplotlib import pyplot

    apart = figures()["memory"]  # belady 2 ms, lru 7 ms: 3.5x apart
    assert isinstance(apart, MemoryFigure)
    picture = draw(apart)
    first, second = picture.axes
    assert not first.get_shared_x_axes().joined(first, second)
    assert "own time axis" in " ".join(text.get_text() for text in picture.texts)
    assert "ideal (infinite memory): 1 ms" in legend_texts(picture)
    pyplot.close(picture)
    close = replace(apart, series=(series("belady", 2e-3, 2**20), series("lru", 3e-3, 2**20)))
    picture = draw(close)
    first, second = picture.axes
    assert first.get_shared_x_axes().joined(first, second)
    assert "One time axis" in " ".join(text.get_text() for text in picture.texts)
    pyplot.close(picture)


def test_the_frontier_names_marks_that_meet_and_the_plan_written() -> None:
    from matplotlib import pyplot

    picture = draw(frontier())
    estimated, simulated = picture.axes
    assert [text.get_text() for text in estimated.texts] == ["ilp = ft (written)"]
    assert [text.get_text() for text in simulated.texts] == ["ft (written)"]
    assert "the plan written (ft)" in legend_texts(picture)
    pyplot.close(picture)
    picture = draw(frontier(written=None))
    assert [text.get_text() for text in picture.axes[0].texts] == ["ilp = ft"]
    pyplot.close(picture)


def test_figures_refuse_what_they_cannot_draw() -> None:
    with pytest.raises(ValueError, match="not among its rows"):
        TimelineFigure("t", ("a",), (Bar("b", 0, 1, "compute"),))
    with pytest.raises(ValueError, match="ends before it starts"):
        TimelineFigure("t", ("a",), (Bar("a", 2, 1, "compute"),))
    with pytest.raises(ValueError, match="one cell per op and device"):
        ShardingMapFigure("m", ("op",), (0, 1), (("S0",),), LEGEND)
    with pytest.raises(ValueError, match="'R0': its kind is not in the legend"):
        ShardingMapFigure("m", ("op",), (0,), (("R0",),), LEGEND)
    with pytest.raises(ValueError, match="no mark of the written plan 'mcmc'"):
        frontier(written="mcmc")
    with pytest.raises(ValueError, match="needs a series"):
        MemoryFigure("m", capacity=None, series=())


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
    legend = dict(figure.legend)
    assert legend["S"] == "Sn: block n of the sample dim (the batch)"
    assert list(legend)[:6] == ["S", "P", "A", "R", "all", ""]  # colours stay put


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
