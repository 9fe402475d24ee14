"""Pictures a pass asks for, as plain data: what `tasoc opt --plots DIR` draws.

A pass says *what* to draw (the bars of a simulated timeline, who holds which shard of
each op) and the driver draws it with matplotlib (`tasoc/driver/plots.py`), so passes
stay free of plotting and of files, as they are of the report's JSON:

    from tasoc.passes.report import current_report

    current_report().figure("soap-shard-timeline", TimelineFigure(...))

A figure is kept beside the report, not in its JSON: a timeline of a 64-device step
has hundreds of thousands of bars, which a picture shows better than a file of numbers.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Bar:
    """One task of a timeline: on `row`, from `start` to `end` seconds; `kind` picks
    its colour (compute, communication, ...) and names it in the legend."""

    row: str
    start: float
    end: float
    kind: str


@dataclass(frozen=True, slots=True)
class TimelineFigure:
    """A Gantt chart: resources (devices, links) as rows, tasks as bars."""

    title: str
    rows: tuple[str, ...]
    """Row labels, top to bottom; every bar's row is one of them."""
    bars: tuple[Bar, ...]

    def __post_init__(self) -> None:
        known = set(self.rows)
        for bar in self.bars:
            if bar.row not in known:
                raise ValueError(f"timeline bar on row {bar.row!r}, which is not among its rows")
            if bar.end < bar.start:
                raise ValueError(f"timeline bar on {bar.row!r} ends before it starts")


@dataclass(frozen=True, slots=True)
class ShardingMapFigure:
    """Ops down, devices across: which part of each op every device computes.

    `cells[i][j]` labels what device `devices[j]` does of op `ops[i]`: the same label
    on several devices is a replicated piece, distinct labels are shards, "" is idle
    (the op runs on another device group). A label is words, each letters and a block
    number (`S2`, `S1 P0`) or a word alone (`all`); its *kind* is the label without
    the numbers (`S`, `S P`, `all`, "" for idle). Cells are coloured by kind, and
    `legend` says what each kind means, so the picture explains its letters itself.
    """

    title: str
    ops: tuple[str, ...]
    devices: tuple[int, ...]
    cells: tuple[tuple[str, ...], ...]
    legend: tuple[tuple[str, str], ...]
    """(kind, the legend's line saying what it means) of every kind the cells may show.
    The renderer colours kinds by their place here and lists those the cells show, so
    kinds listed first in a fixed order keep their colours from picture to picture."""

    def __post_init__(self) -> None:
        if len(self.cells) != len(self.ops) or any(
            len(row) != len(self.devices) for row in self.cells
        ):
            raise ValueError("a sharding map needs one cell per op and device")
        explained = {kind for kind, _ in self.legend}
        for cell in {cell for row in self.cells for cell in row}:
            if self.kind_of(cell) not in explained:
                raise ValueError(f"sharding map cell {cell!r}: its kind is not in the legend")

    @staticmethod
    def kind_of(label: str) -> str:
        """`S1 P0` -> `S P`: the label without its block numbers."""
        return " ".join(word.rstrip("0123456789") for word in label.split())


@dataclass(frozen=True, slots=True)
class MemorySeries:
    """Device bytes over a simulated run of `seconds`: `held[i]` from `times[i]` on (a
    step function), and when its swaps out and in started."""

    name: str
    seconds: float
    times: tuple[float, ...]
    held: tuple[int, ...]
    swap_outs: tuple[float, ...]
    swap_ins: tuple[float, ...]

    def __post_init__(self) -> None:
        if len(self.times) != len(self.held):
            raise ValueError(f"memory series {self.name!r}: one byte count per time")


@dataclass(frozen=True, slots=True)
class MemoryFigure:
    """Device memory over time, one panel per series (a plan above its baseline), each
    beside `ideal` (the step with infinite memory: what a plan's memory would be
    without a capacity, and the time it could take), with the capacity as a line, the
    peak without placement as another (the level the plans bring down to the
    capacity), and the swaps marked."""

    title: str
    capacity: int | None
    series: tuple[MemorySeries, ...]
    unplaced_peak: int | None = None
    """The step's peak device memory without placement (`liveness.peak_memory`)."""
    ideal: MemorySeries | None = None

    def __post_init__(self) -> None:
        if not self.series:
            raise ValueError("a memory figure needs a series to draw")


@dataclass(frozen=True, slots=True)
class StrategyMark:
    """One strategy in a frontier picture: who chose it, and its memory per device and
    time, either by the cost model's estimate or by the simulator."""

    name: str
    memory: float
    seconds: float
    simulated: bool


@dataclass(frozen=True, slots=True)
class FrontierFigure:
    """Time against memory per device: a frontier (cost-model estimates, TensorOpt
    Fig. 6) with strategies placed beside it, estimated on one panel and simulated on
    the other, and the memory cap."""

    title: str
    frontier: tuple[tuple[float, float], ...]
    """(memory, seconds) of each frontier point, by increasing memory."""
    simulated_frontier: tuple[tuple[float, float], ...]
    """(memory, seconds) of some frontier points as the simulator sees them."""
    marks: tuple[StrategyMark, ...]
    cap: int | None
    written: str | None = None
    """The name of the marks of the plan the pass wrote (drawn so it stands out)."""

    def __post_init__(self) -> None:
        if self.written is not None and all(m.name != self.written for m in self.marks):
            raise ValueError(f"frontier figure: no mark of the written plan {self.written!r}")


@dataclass(frozen=True, slots=True)
class ProfileFigure:
    """The best time (and its memory per device) at each device count."""

    title: str
    devices: tuple[int, ...]
    seconds: tuple[float, ...]
    memory: tuple[int, ...]

    def __post_init__(self) -> None:
        if not len(self.devices) == len(self.seconds) == len(self.memory):
            raise ValueError("a profile needs one time and one memory per device count")


Figure = TimelineFigure | ShardingMapFigure | MemoryFigure | FrontierFigure | ProfileFigure
