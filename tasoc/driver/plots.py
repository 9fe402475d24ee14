"""`tasoc opt --plots DIR`: draw the figures the passes asked for, with matplotlib.

Each figure of the run report (`RunReport.figures`, data from `passes/figures.py`)
becomes `DIR/<name>.png`. Drawing happens after the run succeeded and the files are
staged with the run's other outputs, so they appear together with `-o` and
`--report` or not at all. matplotlib is imported here only, on the Agg backend (no
display needed).

Every picture explains itself: axes say their units (time in µs, ms or s, memory in
KiB, MiB or GiB, whichever keeps the numbers short) and every panel has a legend.
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping, Sequence
from typing import IO, Any

from tasoc.driver.errors import UsageError
from tasoc.passes.figures import (
    Figure,
    FrontierFigure,
    MemoryFigure,
    ProfileFigure,
    ShardingMapFigure,
    StrategyMark,
    TimelineFigure,
)

MAX_ROWS = 64
"""Rows drawn of a timeline or a sharding map; the rest are summed up in the title
(a picture of 512 rows is a grey block)."""

SHARED_TIME_WITHIN = 2.0
"""Memory panels share one time axis when their runs' lengths are within this factor;
past it the shorter run would be squeezed into a corner of the longer one's axis, so
each panel gets its own (and the caption says so)."""

NEAR = 0.015
"""Frontier marks closer than this part of both axes' spans are named together
beside the point (`ilp = ft`): their rings alone would be hard to tell apart."""

IDLE = "#f2f2f2"
"""The colour of an idle cell of a sharding map."""


def check_plots_directory(given: str | None) -> str | None:
    """UsageError unless `given` is a directory or can be made one (its parent is)."""
    if given is None:
        return None
    if os.path.exists(given) and not os.path.isdir(given):
        raise UsageError(f"--plots {given!r} is not a directory")
    parent = os.path.dirname(os.path.abspath(given))
    if not os.path.isdir(parent):
        raise UsageError(f"--plots {given!r}: its parent directory does not exist")
    return given


def render(figure: Figure, stream: IO[bytes]) -> None:
    """Draw `figure` as PNG into `stream`."""
    from matplotlib import pyplot

    drawn = draw(figure)
    try:
        drawn.savefig(stream, format="png", dpi=110, bbox_inches="tight")
    finally:
        pyplot.close(drawn)


def draw(figure: Figure) -> Any:
    """`figure` as a matplotlib figure, which the caller closes: what `render` saves,
    and what tests read the axes' units and legends from."""
    import matplotlib

    matplotlib.use("Agg")
    if isinstance(figure, TimelineFigure):
        return _timeline(figure)
    if isinstance(figure, MemoryFigure):
        return _memory(figure)
    if isinstance(figure, FrontierFigure):
        return _frontier(figure)
    if isinstance(figure, ProfileFigure):
        return _profile(figure)
    return _sharding_map(figure)


def _figure(rows: int, width: float) -> Any:
    from matplotlib import pyplot

    return pyplot.figure(figsize=(width, max(2.5, 0.28 * rows + 1.2)))


def _timeline(figure: TimelineFigure) -> Any:
    """One bar per task. Tasks that touch on a row (five all-reduces back to back)
    stay apart: every other task of a row is drawn lighter, with a white edge. Tasks
    of a few pixels or less keep their plain colour and no edge: on a step's
    thousands of short tasks edges would wash everything out white, and alternating
    shades would alias into stripes that are no tasks."""
    from matplotlib.patches import Patch

    rows = figure.rows[:MAX_ROWS]
    index = {row: i for i, row in enumerate(rows)}
    kinds = sorted({bar.kind for bar in figure.bars}, key=lambda kind: (kind != "compute", kind))
    colours = _palette(kinds)
    drawn = _figure(len(rows), 12)
    axes = drawn.add_subplot()
    end = max((bar.end for bar in figure.bars), default=0.0)
    scale, unit = _time_scale(end)
    on_row: dict[int, list[tuple[float, float, str]]] = {}
    for bar in figure.bars:
        if bar.row in index:
            on_row.setdefault(index[bar.row], []).append((bar.start, bar.end, bar.kind))
    visible = end / 300  # about 4 pixels of the axis
    for row, tasks in on_row.items():
        tasks.sort()
        wide = [stop - start > visible for start, stop, _ in tasks]
        axes.broken_barh(
            [(start * scale, (stop - start) * scale) for start, stop, _ in tasks],
            (row - 0.4, 0.8),
            facecolors=[
                _lighter(colours[kind], 0.45 * (i % 2 and wide[i]))
                for i, (_, _, kind) in enumerate(tasks)
            ],
            edgecolors="white",
            linewidths=[0.8 * seen for seen in wide],
        )
    axes.set_yticks(range(len(rows)), rows)
    axes.invert_yaxis()
    axes.set_xlabel(f"simulated time ({unit}); one bar per task, every other one lighter")
    axes.set_xlim(0, end * scale * 1.01 or 1)
    axes.set_title(_titled(figure.title, len(rows), len(figure.rows), "rows"))
    handles = [Patch(facecolor=colours[kind], label=kind) for kind in kinds]
    _legend_beside(axes, handles, "task")
    return drawn


def _sharding_map(figure: ShardingMapFigure) -> Any:
    """A cell per op and device, coloured by the kind of its label (the figure's
    legend, in its order, picks the colours), the label written in it while the
    devices are few enough to read it, white lines between the cells."""
    from matplotlib.colors import ListedColormap
    from matplotlib.patches import Patch

    ops = figure.ops[:MAX_ROWS]
    cells = figure.cells[: len(ops)]
    kinds = [kind for kind, _ in figure.legend]
    colours = {
        kind: IDLE if kind == "" else _lighter(colour, 0.35)
        for kind, colour in _palette(kinds).items()
    }
    code = {kind: i for i, kind in enumerate(kinds)}
    grid = [[code[figure.kind_of(cell)] for cell in row] for row in cells]
    drawn = _figure(len(ops), max(6.0, 0.35 * len(figure.devices) + 4))
    axes = drawn.add_subplot()
    axes.imshow(
        grid,
        aspect="auto",
        cmap=ListedColormap([colours[kind] for kind in kinds]),
        vmin=-0.5,
        vmax=len(kinds) - 0.5,
        interpolation="nearest",
    )
    if len(figure.devices) <= 16:
        for i, row in enumerate(cells):
            for j, cell in enumerate(row):
                axes.text(j, i, cell, ha="center", va="center", fontsize="x-small")
    axes.set_yticks(range(len(ops)), ops, fontsize="small")
    axes.set_xticks(range(len(figure.devices)), [str(d) for d in figure.devices])
    axes.set_xticks([j - 0.5 for j in range(1, len(figure.devices))], minor=True)
    axes.set_yticks([i - 0.5 for i in range(1, len(ops))], minor=True)
    axes.grid(which="minor", color="white", linewidth=0.8)
    axes.tick_params(which="minor", length=0)
    axes.set_xlabel("device")
    axes.set_title(_titled(figure.title, len(ops), len(figure.ops), "ops"))
    shown = {figure.kind_of(cell) for row in cells for cell in row}
    handles = [
        Patch(facecolor=colours[kind], edgecolor="grey", label=line)
        for kind, line in figure.legend
        if kind in shown
    ]
    _legend_beside(
        axes, handles, "each cell: the block of the op the device computes", title_fontsize="small"
    )
    return drawn


def _memory(figure: MemoryFigure) -> Any:
    """One panel per series: device memory as a step line beside the ideal step's,
    the capacity dashed, the peak without placement dotted, swap-outs and swap-ins
    as ticks under the line. The panels share their time axis only when their runs
    compare (`SHARED_TIME_WITHIN`); the caption says which."""
    from matplotlib import pyplot

    panels = len(figure.series)
    longest = max(figure.series, key=lambda series: series.seconds)
    shortest = min(figure.series, key=lambda series: series.seconds)
    spread = _ratio(longest.seconds, shortest.seconds)
    shared = spread <= SHARED_TIME_WITHIN
    drawn, grid = pyplot.subplots(
        panels, 1, figsize=(9, 2.7 * panels + 0.8), sharex=shared, squeeze=False
    )
    axes = list(grid[:, 0])
    ideal = figure.ideal
    traced = [*figure.series, *([ideal] if ideal else [])]
    levels = (figure.capacity or 0, figure.unplaced_peak or 0)
    largest = max([*(max(s.held) for s in traced), *levels])
    scale, unit = _byte_scale(largest)
    common = _time_scale(longest.seconds)
    for ax, series in zip(axes, figure.series, strict=True):
        end = max(series.seconds, ideal.seconds if ideal else 0.0)
        seconds, time_unit = common if shared else _time_scale(end)
        if ideal is not None:
            ax.step(
                [t * seconds for t in ideal.times],
                [b / scale for b in ideal.held],
                where="post",
                color="tab:purple",
                linewidth=0.9,
                alpha=0.75,
                label=f"ideal (infinite memory): {_duration(ideal.seconds)}",
            )
        ax.step(
            [t * seconds for t in series.times],
            [b / scale for b in series.held],
            where="post",
            color="tab:blue",
            label=f"{series.name}: {_duration(series.seconds)}",
        )
        if figure.capacity is not None:
            ax.axhline(figure.capacity / scale, linestyle="--", color="black", label="capacity")
        if figure.unplaced_peak is not None:
            ax.axhline(
                figure.unplaced_peak / scale,
                linestyle=":",
                color="grey",
                label="peak without placement",
            )
        low = -0.04 * largest / scale
        for when, marker, colour, label in (
            (series.swap_outs, "v", "tab:orange", "swap-out starts"),
            (series.swap_ins, "^", "tab:green", "swap-in starts"),
        ):
            if when:
                ax.plot(
                    [t * seconds for t in when],
                    [low] * len(when),
                    marker,
                    color=colour,
                    markersize=4,
                    linestyle="none",
                    label=f"{label} ({len(when)})",
                )
        ax.set_ylabel(f"device memory ({unit})")
        ax.set_xlim(0, end * seconds * 1.01 or 1)
        if not shared or ax is axes[-1]:
            ax.set_xlabel(f"simulated time ({time_unit})")
        slower = _ratio(series.seconds, ideal.seconds) if ideal else None
        ax.set_title(
            series.name + (f": {slower:.2f}x the ideal step's time" if slower else ""),
            fontsize=9,
            loc="left",
        )
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    drawn.suptitle(figure.title, fontsize=10)
    if panels > 1:
        caption = (
            f"One time axis: the runs' lengths are within {SHARED_TIME_WITHIN:g}x."
            if shared
            else f"Each panel has its own time axis: {longest.name} runs {spread:.2f}x "
            f"longer than {shortest.name}."
        )
        drawn.text(0.01, 0.0, caption, fontsize=8, ha="left", va="top")
    drawn.tight_layout()
    return drawn


def _frontier(figure: FrontierFigure) -> Any:
    """Two panels sharing their axes' units: the cost model's estimates (the frontier
    as a step line, each strategy's estimate) and the simulator's figures for the same
    strategies and a sample of the frontier's points; the memory cap dashed on both.

    Strategies often land on one point (an ILP optimum is a frontier point), so none
    may hide another: each is a hollow marker of its own shape and size, the largest
    drawn first, and marks that meet are named together beside the point. The written
    plan sits on a gold star behind its marker, labelled."""
    from matplotlib import pyplot

    drawn, axes = pyplot.subplots(1, 2, figsize=(12, 4.8))
    points = [*figure.frontier, *figure.simulated_frontier]
    points += [(mark.memory, mark.seconds) for mark in figure.marks]
    scale, unit = _byte_scale(int(max([*(m for m, _ in points), figure.cap or 0])))
    seconds, time_unit = _time_scale(max((t for _, t in points), default=0.0))
    names = list(dict.fromkeys(mark.name for mark in figure.marks))
    colours = _palette(names)
    shapes = dict(zip(names, "osD^vPXh<>p", strict=False))
    sizes = {name: max(6.0, 15.0 - 1.5 * i) for i, name in enumerate(names)}
    for ax, simulated, panel in (
        (axes[0], False, "cost model (TensorOpt eq. 3)"),
        (axes[1], True, "simulated"),
    ):
        line = figure.simulated_frontier if simulated else figure.frontier
        if line:
            what = "points simulated" if simulated else "points"
            xs, ys = [m / scale for m, _ in line], [t * seconds for _, t in line]
            ax.plot(xs, ys, ".-" if simulated else ".", color="grey", zorder=1)
            if not simulated:
                ax.step(xs, ys, where="post", color="grey", zorder=1)
            ax.plot([], [], ".-", color="grey", label=f"FT frontier ({len(line)} {what})")
        marks = [mark for mark in figure.marks if mark.simulated == simulated]
        for mark in marks:
            if mark.name == figure.written:
                ax.plot(
                    mark.memory / scale,
                    mark.seconds * seconds,
                    "*",
                    markersize=26,
                    color="gold",
                    markeredgecolor="black",
                    markeredgewidth=0.6,
                    linestyle="none",
                    zorder=2,
                    label=f"the plan written ({mark.name})",
                )
        for mark in sorted(marks, key=lambda mark: -sizes[mark.name]):
            ax.plot(
                mark.memory / scale,
                mark.seconds * seconds,
                shapes.get(mark.name, "o"),
                markersize=sizes[mark.name],
                markerfacecolor="none",
                markeredgecolor=colours[mark.name],
                markeredgewidth=1.8,
                linestyle="none",
                zorder=3,
                label=mark.name,
            )
        _name_meeting_marks(ax, marks, scale, seconds, figure.written)
        if figure.cap is not None:
            ax.axvline(figure.cap / scale, linestyle="--", color="black", label="memory cap")
        ax.set_xlabel(f"memory per device ({unit})")
        ax.set_ylabel(f"time per iteration ({time_unit})")
        ax.set_title(panel, fontsize=9, loc="left")
        ax.margins(0.08)
    labelled = {}
    for ax in axes:
        labelled.update(zip(*reversed(ax.get_legend_handles_labels()), strict=True))
    drawn.legend(
        list(labelled.values()),
        list(labelled),
        loc="center left",
        bbox_to_anchor=(1.0, 0.5),
        fontsize=8,
        markerscale=0.7,
    )
    drawn.suptitle(figure.title, fontsize=10)
    drawn.tight_layout()
    return drawn


def _name_meeting_marks(
    ax: Any, marks: Sequence[StrategyMark], scale: float, seconds: float, written: str | None
) -> None:
    """Write `a = b` beside marks closer than `NEAR` of the panel's spans, and
    `(written)` beside the written plan's."""
    if not marks:
        return
    xs = [mark.memory / scale for mark in marks]
    ys = [mark.seconds * seconds for mark in marks]
    near_x, near_y = NEAR * (max(xs) - min(xs)), NEAR * (max(ys) - min(ys))
    groups: list[list[int]] = []
    for i in range(len(marks)):
        for group in groups:
            if abs(xs[group[0]] - xs[i]) <= near_x and abs(ys[group[0]] - ys[i]) <= near_y:
                group.append(i)
                break
        else:
            groups.append([i])
    middle = (max(xs) + min(xs)) / 2
    for group in groups:
        names = [marks[i].name for i in group]
        if len(group) > 1 or written in names:
            left = xs[group[0]] > middle  # the name goes toward the panel's inside
            ax.annotate(
                " = ".join(names) + (" (written)" if written in names else ""),
                (xs[group[0]], ys[group[0]]),
                xytext=(-14 if left else 14, -16),
                textcoords="offset points",
                ha="right" if left else "left",
                fontsize=8,
                zorder=4,
            )


def _profile(figure: ProfileFigure) -> Any:
    """Time and memory per device against the device count (log scale)."""
    from matplotlib import pyplot

    drawn, (time_axis, memory_axis) = pyplot.subplots(1, 2, figsize=(10, 3.8))
    scale, unit = _byte_scale(max(figure.memory, default=0))
    seconds, time_unit = _time_scale(max(figure.seconds, default=0.0))
    time_axis.plot(
        figure.devices,
        [t * seconds for t in figure.seconds],
        "o-",
        label="best simulated time per iteration",
    )
    time_axis.set_ylabel(f"time per iteration ({time_unit})")
    memory_axis.plot(
        figure.devices,
        [m / scale for m in figure.memory],
        "s-",
        color="tab:orange",
        label="its memory per device",
    )
    memory_axis.set_ylabel(f"memory per device ({unit})")
    for ax in (time_axis, memory_axis):
        ax.set_xscale("log", base=2)
        ax.set_xticks(figure.devices, [str(d) for d in figure.devices])
        ax.set_xlabel("devices")
        ax.legend(fontsize=7)
    drawn.suptitle(figure.title, fontsize=10)
    return drawn


def _byte_scale(largest: int) -> tuple[float, str]:
    """Bytes -> the IEC unit that keeps `largest` short."""
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return float(scale), unit
    return 1.0, "bytes"


def _time_scale(longest: float) -> tuple[float, str]:
    """Seconds -> (factor, unit) that keeps `longest` between 1 and 1000 where it can."""
    for scale, unit in ((1.0, "s"), (1e3, "ms")):
        if longest * scale >= 1:
            return scale, unit
    return 1e6, "µs"


def _ratio(longer: float, shorter: float) -> float:
    """`longer` over `shorter`, infinite when `shorter` is a run of no time."""
    return longer / shorter if shorter else math.inf


def _duration(seconds: float) -> str:
    scale, unit = _time_scale(seconds)
    return f"{seconds * scale:.3g} {unit}"


def _titled(title: str, shown: int, total: int, what: str) -> str:
    return title if shown == total else f"{title} (first {shown} of {total} {what})"


def _palette(names: Sequence[str]) -> Mapping[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}


def _lighter(colour: Any, amount: float) -> tuple[float, float, float]:
    """`colour` mixed with white: `amount` 0 keeps it, 1 is white."""
    from matplotlib.colors import to_rgb

    red, green, blue = to_rgb(colour)
    return red + (1 - red) * amount, green + (1 - green) * amount, blue + (1 - blue) * amount


def _legend_beside(axes: Any, handles: list[Any], title: str, **more: Any) -> None:
    """A legend of `handles` to the right of `axes`, where it hides no bar or cell."""
    axes.legend(
        handles=handles,
        title=title,
        loc="upper left",
        bbox_to_anchor=(1.01, 1.0),
        fontsize="small",
        **more,
    )
