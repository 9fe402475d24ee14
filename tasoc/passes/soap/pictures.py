"""The pictures `soap-shard` asks for (`tasoc opt --plots DIR`), as figure data.

* `sharding_map`: ops down, devices across; each cell says which block of the op's
  iteration space the device computes, by SOAP dimension — `S2` is block 2 of the
  sample dim (the batch), `P1` of a parameter dim (output channels or features), `A0`
  of an attribute dim, `R3` of a reduction dim (partial sums), `S1 P0` a block of two;
  `all` the whole op (replicated), empty an op on another device group. One colour per
  kind of label (`S`, `P`, `S P`, `all`, ...), explained in the picture's legend, so
  data parallelism reads as columns of S and model parallelism of P.
* `timeline`: the simulated step (`tasoc.sim`), devices' compute streams and their
  network ports as rows, tasks as bars coloured by kind (compute, all_reduce, ...):
  where the step waits on communication, and which device is the straggler.
* `frontier_figure`: time against memory per device: FT's frontier (estimates) and
  every compared strategy (searches, the baselines), estimated on one panel
  and simulated on the other, with the memory cap and the written plan marked.
* `profile_figure`: the best simulated time and its memory at each device count.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence

from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, FactorKind, Mesh, OpRule
from tasoc.passes.figures import (
    Bar,
    FrontierFigure,
    ProfileFigure,
    ShardingMapFigure,
    StrategyMark,
    TimelineFigure,
)
from tasoc.passes.soap.cost_searches import Evaluated
from tasoc.sim import TaskGraph, Timeline

DIMENSIONS: dict[FactorKind, str] = {
    "sample": "the batch",
    "parameter": "channels, features",
    "attribute": "sequence, pixels",
    "reduction": "partial sums, reduced after",
}
"""The SOAP dimensions a label names by their first letter (`_letter`), and what
they split, in the legend's order."""


def sharding_map(dag: Dag, plan: Plan, meshes: Mapping[str, Mesh], title: str) -> ShardingMapFigure:
    """Which block of every op each device computes, under `plan`, with a legend of
    the label kinds (`_legend`)."""
    devices = sorted({device for mesh in meshes.values() for device in mesh.device_ids})
    column = {device: j for j, device in enumerate(devices)}
    ops, cells = [], []
    for node in dag.ops:
        if not node.inputs:
            continue  # constants are made where they are read
        row = [""] * len(devices)
        mesh = meshes[plan.values[node.results[0]].mesh]
        rule = soap.rule_of(node.op, [v.sig for v in node.inputs], dict(node.attrs), node.sigs)
        for device, label in _blocks(rule, plan.configs.get(node, {}), mesh).items():
            row[column[device]] = label
        ops.append(_name(node, len(ops)))
        cells.append(tuple(row))
    return ShardingMapFigure(title, tuple(ops), tuple(devices), tuple(cells), _legend(cells))


def _legend(cells: Sequence[Sequence[str]]) -> tuple[tuple[str, str], ...]:
    """Each dimension's letter, `all` and idle, in a fixed order, then the blocks of
    several dimensions that `cells` show (`S P`): what `ShardingMapFigure.legend` asks."""
    name = {_letter(kind): kind for kind in DIMENSIONS}
    single = [
        (_letter(kind), f"{_letter(kind)}n: block n of the {kind} dim ({split})")
        for kind, split in DIMENSIONS.items()
    ]
    several = sorted(
        {kind for row in cells for cell in row if " " in (kind := ShardingMapFigure.kind_of(cell))}
    )
    joined = [
        (kind, f"{kind}: a block of each of " + ", ".join(name[letter] for letter in kind.split()))
        for kind in several
    ]
    return (
        *single,
        ("all", "all: the whole op (replicated)"),
        ("", "blank: idle (the op runs on other devices)"),
        *joined,
    )


def _letter(kind: FactorKind) -> str:
    return kind[0].upper()


def _blocks(rule: OpRule, config: Config, mesh: Mesh) -> dict[int, str]:
    """Device id -> the label of the block it computes under `config` on `mesh`."""
    split = {factor: axes for factor, axes in config.items() if axes}
    letter = {f.name: _letter(f.kind) for f in rule.factors}
    labels = {}
    sizes = [size for _, size in mesh.axes]
    for position, coords in enumerate(itertools.product(*(range(size) for size in sizes))):
        at = dict(zip(mesh.axis_names, coords, strict=True))
        parts = []
        for factor, axes in split.items():
            index = 0
            for axis in axes:  # major to minor, as the sharding splits the dim
                index = index * mesh.axis_size(axis) + at[axis]
            parts.append(f"{letter[factor]}{index}")
        labels[mesh.device_ids[position]] = " ".join(parts) or "all"
    return labels


def _name(node: Node, index: int) -> str:
    return f"{index}: {node.op}"


def timeline(
    graph: TaskGraph,
    simulated: Timeline,
    title: str,
    stands_for: Mapping[int, tuple[int, ...]] | None = None,
) -> TimelineFigure:
    """The simulated step as a Gantt chart: per device its compute row, then its
    network row; zero-length tasks (arguments laid out) are left out. A device that
    `stands_for` devices besides itself (`ShardedStep.stands_for`: they run the same
    tasks at the same times) has its rows labelled with all of them."""
    rows: dict[object, str] = {}
    bars = []
    for task_id in graph.ids():
        task = graph[task_id]
        start, end = simulated.start[task_id], simulated.end[task_id]
        if end <= start or not isinstance(task.resource, tuple):
            continue
        if task.resource not in rows:
            kind, device = task.resource
            devices = (stands_for or {}).get(device, (device,))
            plural = "s" if len(devices) > 1 else ""
            rows[task.resource] = f"{kind}{plural} {_devices_text(devices)}"
        kind = "compute" if task.resource[0] == "device" else task.name.split(" ", 1)[0]
        bars.append(Bar(rows[task.resource], start, end, kind))
    order = sorted(rows, key=lambda resource: (resource[1:], resource[0]))  # type: ignore[index]
    return TimelineFigure(title, tuple(rows[r] for r in order), tuple(bars))


def _devices_text(devices: tuple[int, ...]) -> str:
    """`3`, `0-15` for a run of ids, else `0,2,4`."""
    if len(devices) > 1 and devices == tuple(range(devices[0], devices[-1] + 1)):
        return f"{devices[0]}-{devices[-1]}"
    return ",".join(map(str, devices))


def frontier_figure(
    title: str,
    frontier: Sequence[tuple[float, float]],
    simulated_frontier: Sequence[tuple[float, float]],
    strategies: Mapping[str, Evaluated],
    cap: int | None,
    written: str,
) -> FrontierFigure:
    """The frontier (estimates, and some points simulated) and each strategy's
    estimate (where the cost graph can express it) and simulation; `written` names
    the strategy whose plan the pass wrote."""
    marks = []
    for name, strategy in strategies.items():
        if strategy.estimate is not None:
            marks.append(StrategyMark(name, *strategy.estimate, simulated=False))
        simulated = strategy.simulated
        marks.append(StrategyMark(name, simulated.memory, simulated.time, simulated=True))
    return FrontierFigure(
        title, tuple(frontier), tuple(simulated_frontier), tuple(marks), cap, written
    )


def profile_figure(title: str, best: Mapping[int, tuple[float, int]]) -> ProfileFigure:
    """`best`: device count -> (seconds, memory per device) of its best strategy."""
    counts = tuple(sorted(best))
    return ProfileFigure(
        title, counts, tuple(best[c][0] for c in counts), tuple(best[c][1] for c in counts)
    )
