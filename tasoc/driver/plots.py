"""`tasoc opt --plots DIR`: draw the figures the passes asked for, with matplotlib.

Each figure of the run report (`RunReport.figures`, data from `passes/figures.py`)
becomes `DIR/<name>.png`. Drawing happens after the run succeeded and the files are
staged with the run's other outputs, so they appear together with `-o` and
`--report` or not at all. matplotlib is imported here only, on the Agg backend (no
display needed).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import IO, Any

from tasoc.driver.errors import UsageError
from tasoc.passes.figures import (
    Figure,
    FrontierFigure,
    MemoryFigure,
    ProfileFigure,
    ShardingMapFigure,
    TimelineFigure,
)

MAX_ROWS = 64
"""Rows drawn of a timeline or a sharding map; the rest are summed up in the title
(a picture of 512 rows is a grey block)."""


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
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib import pyplot

    if isinstance(figure, TimelineFigure):
        drawn = _timeline(figure)
    elif isinstance(figure, MemoryFigure):
        drawn = _memory(figure)
    elif isinstance(figure, FrontierFigure):
        drawn = _frontier(figure)
    elif isinstance(figure, ProfileFigure):
        drawn = _profile(figure)
    else:
        drawn = _sharding_map(figure)
    try:
        drawn.savefig(stream, format="png", dpi=110, bbox_inches="tight")
    finally:
        pyplot.close(drawn)


def _figure(rows: int, width: float) -> Any:
    from matplotlib import pyplot

    return pyplot.figure(figsize=(width, max(2.5, 0.28 * rows + 1.2)))


def _timeline(figure: TimelineFigure) -> Any:
    from matplotlib.patches import Patch

    rows = figure.rows[:MAX_ROWS]
    index = {row: i for i, row in enumerate(rows)}
    kinds = sorted({bar.kind for bar in figure.bars}, key=lambda kind: (kind != "compute", kind))
    colours = _palette(kinds)
    drawn = _figure(len(rows), 12)
    axes = drawn.add_subplot()
    end = max((bar.end for bar in figure.bars), default=0.0)
    scale, unit = (1e3, "ms") if end < 10 else (1.0, "s")
    for kind in kinds:
        spans: dict[int, list[tuple[float, float]]] = {}
        for bar in figure.bars:
            if bar.kind == kind and bar.row in index:
                spans.setdefault(index[bar.row], []).append(
                    (bar.start * scale, (bar.end - bar.start) * scale)
                )
        for row, pieces in spans.items():
            axes.broken_barh(
                pieces,
                (row - 0.4, 0.8),
                facecolor=colours[kind],
                linewidth=0,  # edges would wash out a step's thousands of short tasks
            )
    axes.set_yticks(range(len(rows)), rows)
    axes.invert_yaxis()
    axes.set_xlabel(f"time ({unit})")
    axes.set_xlim(0, end * scale * 1.01 or 1)
    hidden = len(figure.rows) - len(rows)
    axes.set_title(
        figure.title + (f" (first {len(rows)} of {len(figure.rows)} rows)" if hidden else "")
    )
    if kinds:
        handles = [Patch(facecolor=colours[kind], label=kind) for kind in kinds]
        axes.legend(handles=handles, loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small")
    return drawn


def _sharding_map(figure: ShardingMapFigure) -> Any:
    ops = figure.ops[:MAX_ROWS]
    labels = sorted({cell for row in figure.cells[: len(ops)] for cell in row if cell})
    code = {label: i + 1 for i, label in enumerate(labels)}
    grid = [[code.get(cell, 0) for cell in row] for row in figure.cells[: len(ops)]]
    drawn = _figure(len(ops), max(6.0, 0.35 * len(figure.devices) + 4))
    axes = drawn.add_subplot()
    from matplotlib.colors import ListedColormap

    colours = ["#f2f2f2", *_palette(labels).values()]
    axes.imshow(
        grid,
        aspect="auto",
        cmap=ListedColormap(colours),
        vmin=0,
        vmax=len(colours) - 1,
        interpolation="nearest",
    )
    for i, row in enumerate(figure.cells[: len(ops)]):
        for j, cell in enumerate(row):
            if cell and len(figure.devices) <= 16:
                axes.text(j, i, cell, ha="center", va="center", fontsize="x-small")
    axes.set_yticks(range(len(ops)), ops, fontsize="small")
    axes.set_xticks(range(len(figure.devices)), [str(d) for d in figure.devices])
    axes.set_xlabel("device")
    hidden = len(figure.ops) - len(ops)
    axes.set_title(
        figure.title + (f" (first {len(ops)} of {len(figure.ops)} ops)" if hidden else "")
    )
    return drawn


def _memory(figure: MemoryFigure) -> Any:
    """One panel per series, sharing the time axis: device bytes as a step line, the
    capacity dashed, the peak without placement dotted, swap-outs and swap-ins as ticks
    under the line."""
    from matplotlib import pyplot

    panels = max(1, len(figure.series))
    drawn, axes = pyplot.subplots(panels, 1, figsize=(9, 2.6 * panels + 0.6), sharex=True)
    axes = [axes] if panels == 1 else list(axes)
    levels = (figure.capacity or 0, figure.unplaced_peak or 0)
    scale, unit = _byte_scale(max([*(max(s.held) for s in figure.series), *levels]))
    for ax, series in zip(axes, figure.series, strict=True):
        times_ms = [t * 1e3 for t in series.times]
        ax.step(times_ms, [b / scale for b in series.held], where="post", label="device memory")
        if figure.capacity is not None:
            ax.axhline(figure.capacity / scale, linestyle="--", color="black", label="capacity")
        if figure.unplaced_peak is not None:
            ax.axhline(
                figure.unplaced_peak / scale,
                linestyle=":",
                color="grey",
                label="peak without placement",
            )
        low = -0.04 * max(max(series.held), *levels) / scale
        for when, marker, label in (
            (series.swap_outs, "v", "swap-out"),
            (series.swap_ins, "^", "swap-in"),
        ):
            if when:
                ax.plot(
                    [t * 1e3 for t in when],
                    [low] * len(when),
                    marker,
                    markersize=4,
                    linestyle="none",
                    label=f"{label} ({len(when)})",
                )
        ax.set_ylabel(unit)
        ax.set_title(series.name, fontsize=9, loc="left")
        ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    axes[-1].set_xlabel("simulated time (ms)")
    drawn.suptitle(figure.title, fontsize=10)
    return drawn


def _frontier(figure: FrontierFigure) -> Any:
    """Two panels sharing their axes' units: the cost model's estimates (the frontier
    as a step line, each strategy's estimate) and the simulator's figures for the same
    strategies and a sample of the frontier's points; the memory cap dashed on both."""
    from matplotlib import pyplot

    drawn, axes = pyplot.subplots(1, 2, figsize=(12, 4.6))
    largest = max(
        [
            *(m for m, _ in (*figure.frontier, *figure.simulated_frontier)),
            *(mark.memory for mark in figure.marks),
            figure.cap or 0,
        ]
    )
    scale, unit = _byte_scale(int(largest))
    names = list(dict.fromkeys(mark.name for mark in figure.marks))
    colours = _palette(names)
    markers = dict(zip(names, "osD^vP*Xh<>", strict=False))
    for ax, simulated, panel in (
        (axes[0], False, "cost model (TensorOpt eq. 3)"),
        (axes[1], True, "simulated"),
    ):
        line = figure.simulated_frontier if simulated else figure.frontier
        if line:
            what = "points simulated" if simulated else "points"
            ax.plot(
                [m / scale for m, _ in line],
                [t * 1e3 for _, t in line],
                ".-" if simulated else ".",
                color="grey",
                label=f"FT frontier ({len(line)} {what})",
            )
            if not simulated:
                ax.step(
                    [m / scale for m, _ in line],
                    [t * 1e3 for _, t in line],
                    where="post",
                    color="grey",
                )
        for mark in figure.marks:
            if mark.simulated == simulated:
                ax.plot(
                    mark.memory / scale,
                    mark.seconds * 1e3,
                    markers.get(mark.name, "o"),
                    color=colours[mark.name],
                    markersize=8,
                    linestyle="none",
                    label=mark.name,
                )
        if figure.cap is not None:
            ax.axvline(figure.cap / scale, linestyle="--", color="black", label="memory cap")
        ax.set_xlabel(f"memory per device ({unit})")
        ax.set_ylabel("time per iteration (ms)")
        ax.set_title(panel, fontsize=9, loc="left")
        ax.legend(fontsize=7)
    drawn.suptitle(figure.title, fontsize=10)
    return drawn


def _profile(figure: ProfileFigure) -> Any:
    """Time and memory per device against the device count (log scale)."""
    from matplotlib import pyplot

    drawn, (time_axis, memory_axis) = pyplot.subplots(1, 2, figsize=(10, 3.8))
    scale, unit = _byte_scale(max(figure.memory, default=0))
    time_axis.plot(figure.devices, [t * 1e3 for t in figure.seconds], "o-")
    time_axis.set_ylabel("best time per iteration (ms)")
    memory_axis.plot(figure.devices, [m / scale for m in figure.memory], "s-", color="tab:orange")
    memory_axis.set_ylabel(f"its memory per device ({unit})")
    for ax in (time_axis, memory_axis):
        ax.set_xscale("log", base=2)
        ax.set_xticks(figure.devices, [str(d) for d in figure.devices])
        ax.set_xlabel("devices")
    drawn.suptitle(figure.title, fontsize=10)
    return drawn


def _byte_scale(largest: int) -> tuple[float, str]:
    for scale, unit in ((2**30, "GiB"), (2**20, "MiB"), (2**10, "KiB")):
        if largest >= scale:
            return float(scale), unit
    return 1.0, "bytes"


def _titled(title: str, shown: int, total: int, what: str) -> str:
    return title if shown == total else f"{title} (first {shown} of {total} {what})"


def _palette(names: list[str]) -> Mapping[str, Any]:
    from matplotlib import colormaps

    cmap = colormaps["tab10" if len(names) <= 10 else "tab20"]
    return {name: cmap(i % cmap.N) for i, name in enumerate(names)}
