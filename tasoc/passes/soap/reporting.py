"""`soap-shard`'s report section, pictures and summary: the simulated step of the plan
written and of every practitioner's baseline that applies, which fit each device's
memory, the speedups over the feasible ones, each op's configuration, the bytes each
link carries, each device's memory, the search's figures, and warnings where the plan
is over the memory or slower than a baseline."""

from __future__ import annotations

import dataclasses
import functools
import math
import time
from collections import Counter
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag
from tasoc.ir.limits import format_bytes
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Collective, Config, Mesh, internal_collectives
from tasoc.passes.report import current_report
from tasoc.passes.search import resolve_seed, speedup
from tasoc.passes.soap.cost_searches import Evaluated
from tasoc.passes.soap.pictures import frontier_figure, profile_figure, sharding_map, timeline
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.profile import Planned
from tasoc.passes.soap.searches import BASELINES, SEARCHES
from tasoc.passes.soap.strategies import unsplit_batch
from tasoc.passes.summary import Summary, format_seconds, format_speedup, stop_line
from tasoc.sim.parallel import axis_groups

if TYPE_CHECKING:
    from tasoc.passes.soap.soap_shard import SoapShardPass

SHOWN_OPS = 3
"""Ops a summary's warning names before saying how many more."""


def write_report(
    options: SoapShardPass,
    start: float,
    dag: Dag,
    chosen: Planned,
    tried: Mapping[int, Planned],
    collectives: list[Collective],
    compared: Mapping[str, Evaluated],
    compare_notes: list[str],
) -> None:
    """The report section and the pictures of the written plan (`start`: when the pass
    began, on `time.perf_counter`)."""
    problem, plan, mesh, machine = chosen.problem.program, chosen.plan, chosen.mesh, chosen.machine
    report = current_report()
    groups = {group.name: group for group in plan.meshes} or {mesh.name: mesh}
    title = f"soap-shard {options.search}: which block of each op every device computes"
    # described when drawn (`Figures`): a run without --plots never pays for them
    report.figure(
        "soap-shard-sharding-map", functools.partial(sharding_map, dag, plan, groups, title)
    )
    state = chosen.state
    peak, capacity = state.memory, chosen.problem.memory_cap
    fits = "within" if peak <= capacity else "OVER"
    title = (
        f"soap-shard {options.search}: the simulated step on {machine.name} "
        f"(peak {format_bytes(peak)} per device, {fits} its {format_bytes(capacity)})"
    )
    report.figure(
        "soap-shard-timeline",
        functools.partial(
            timeline, state.step.graph, state.simulator.timeline, title, state.step.stands_for
        ),
    )
    section = report.section(options.name)
    outcome = chosen.outcome
    if outcome is not None:
        outcome.write_report(section, resolve_seed(options.seed))
    section.update(
        search=options.search,
        objective=options.objective,
        mesh={axis: size for axis, size in mesh.axes},
        seed=resolve_seed(options.seed),
        seconds=round(time.perf_counter() - start, 3),
        **_prediction(machine, chosen),
        not_applying=chosen.not_applying,
        op_configs={
            problem.describe(node): _config_text(config) for node, config in plan.configs.items()
        },
        configs=_configs_by_kind(problem, plan),
        collectives=_collective_totals(collectives),
        bytes_per_link=_bytes_per_link(collectives, groups, machine),
        internal_collectives=sum(
            len(internal_collectives(problem.rules[node], config))
            for node, config in plan.configs.items()
        ),
        groups=_groups(dag, plan),
        notes=plan.notes,
        replicated_batch={
            problem.describe(node): size
            for node, size in unsplit_batch(problem).items()
            if not plan.configs.get(node)
        },
    )
    section.update(
        capacity=chosen.problem.memory_cap,
        capacity_from="memory-cap" if options.cap() is not None else f"machine {machine.name}",
        device_memory=int(machine.device.memory_bytes),
    )
    if compared:
        section["compared"] = {name: entry.figures() for name, entry in compared.items()}
    if compare_notes:
        section["compare_notes"] = compare_notes
    if len(tried) > 1 or options.objective in ("mini-parallelism", "profile"):
        section["profile"] = {
            str(count): {
                "simulated_seconds": planned.state.time,
                "simulated_memory": planned.state.memory,
            }
            for count, planned in sorted(tried.items())
        }
        report.figure(
            "soap-shard-profile",
            profile_figure(
                f"soap-shard {options.search}: the best step per device count on {machine.name}",
                {count: (p.state.time, p.state.memory) for count, p in tried.items()},
            ),
        )
    if (outcome is not None and "frontier" in outcome.details) or compared:
        cap = options.cap()
        title = f"soap-shard {options.search}: time against memory per device on {machine.name}"
        report.figure(
            "soap-shard-frontier",
            frontier_figure(
                title, chosen.frontier, chosen.simulated_frontier, compared, cap, options.search
            ),
        )


def summary(section: Mapping[str, Any]) -> Summary:
    """The search, mesh and simulated step against the baselines, memory per device
    against the capacity, the collectives and how the search stopped; warnings for
    a plan slower than a baseline the pass simulated and for ops whose batch the
    mesh cannot split (`summary.py`)."""
    search = section["search"]
    mesh = "x".join(f"{axis}={size}" for axis, size in section["mesh"].items())
    seconds = section["predicted_seconds"]
    speedups = section["speedup_over"]
    best = section["best_feasible_baseline"]
    roc = section.get("roc")
    against = "".join(
        f", {format_speedup(speedups[name])} over {name.replace('-', ' ')}"
        + (" (the fastest baseline)" if name == best != "data-parallel" else "")
        if section["feasible"][name]
        else f", {name.replace('-', ' ')} infeasible "
        f"(peak {format_bytes(section['peak_memory'][name])})"
        for name in dict.fromkeys(("data-parallel", best))
        if name not in (search, None) and roc is None
    ) + _against_equal_vertex(roc, seconds["plan"])
    step = (
        f"infeasible: {format_seconds(section['simulated_seconds']['plan'])} per step "
        "simulated, over each device's memory"
        if seconds["plan"] is None
        else f"{format_seconds(seconds['plan'])} per step simulated"
    )
    headline = f"{search} on mesh {mesh} ({section['machine']}): {step}{against}"
    peak, capacity = section["peak_memory"]["plan"], section["capacity"]
    fits = "fits" if peak <= capacity else "over it"
    place = section.get("place")
    if place is not None:
        placer = place["placer"]
        fits = f"swaps ({placer}) to fit" if "plan" in place["swaps"] else "fits, no swapping"
    details = [
        f"memory per device: peak {format_bytes(peak)} of {format_bytes(capacity)} "
        f"({section['capacity_from']}): {fits}",
        _baselines_line(section),
    ]
    if roc is not None:
        details.insert(0, _partition_line(roc))
    collectives = section["collectives"]
    if collectives:
        kinds = ", ".join(f"{entry['count']} {kind}" for kind, entry in collectives.items())
        links = "".join(
            f", {format_bytes(moved)} over {link}"
            for link, moved in section["bytes_per_link"].items()
        )
        details.append(f"collectives: {kinds}{links} per device")
    if search == "auto":
        details.append(_auto_line(section))
    entry = SEARCHES.get(search)
    counted = None if entry is None or entry.unit is None else entry.unit[1]
    steps = f"{section[counted]} {counted}" if counted in section else None
    stopped = stop_line(section, steps)
    if stopped is not None:
        details.append(stopped)
    return Summary(headline, tuple(details), tuple(_warnings(section, mesh)))


def _against_equal_vertex(roc: Mapping[str, Any] | None, seconds: float | None) -> str:
    """`search=roc`'s headline comparison: its partition against equal vertex ranges
    laid out alike (the baselines run on the laid-out step, so they would compare the
    partition with itself)."""
    if roc is None or seconds is None or "equal_vertex_seconds" not in roc:
        return ""
    even = roc["equal_vertex_seconds"]
    ratio = format_speedup(speedup(even, seconds))
    return f", {ratio} over equal vertex ranges ({format_seconds(even)})"


def _partition_line(roc: Mapping[str, Any]) -> str:
    """`search=roc`'s vertex partition in one line (`vertex_layout.VertexLayout.report`)."""
    return (
        f"partition ({roc['partitioner']}): {roc['vertices']} vertices, {roc['edges']} edges "
        f"over {roc['devices']} devices, padded blocks of {roc['block_rows']} rows; "
        f"at most {roc['block_edges']} in-edges a device (largest over mean: "
        f"{roc['vertex_imbalance']:g} in vertices, {roc['edge_imbalance']:g} in edges)"
    )


def _prediction(machine: Machine, chosen: Planned) -> dict[str, Any]:
    """The report's simulated figures: the iteration time of the plan and of each
    baseline that applies (`baselines`) on `machine` (with `place=`, the stall of
    swapping added where a strategy is over the capacity, None where nothing fits it)
    and without that (`simulated_seconds`), which of them fit each device's `capacity`
    (`feasible`), the plan's speedups over the feasible ones (None over one that cannot
    run: never a denominator) and over the best of them, and the plan's memory per
    device (its peak, and what it holds by kind)."""
    simulated, place = chosen.simulated, chosen.problem.place
    times = {name: figures.cost for name, figures in simulated.items()}
    feasible = {name: cost < math.inf for name, cost in times.items()}
    baselines = [name for name in BASELINES if name in simulated]
    runnable = [name for name in baselines if feasible[name]]
    best = min(runnable, key=times.__getitem__, default=None)
    priced = {}
    if place is not None:
        priced["place"] = {
            "placer": place.placer,
            "capacity": place.capacity,
            "swaps": sorted(name for name, s in simulated.items() if s.memory > place.capacity),
            "strategies_priced": place.plans,
        }
    return priced | {
        "machine": machine.name,
        "baselines": baselines,
        "predicted_seconds": {name: t if t < math.inf else None for name, t in times.items()},
        "simulated_seconds": {name: figures.time for name, figures in simulated.items()},
        "feasible": feasible,
        "speedup_over": {
            name: speedup(times[name], times["plan"]) if feasible[name] else None
            for name in baselines
        },
        "best_feasible_baseline": best,
        "speedup_over_best_feasible": None if best is None else speedup(times[best], times["plan"]),
        "peak_memory": {name: figures.memory for name, figures in simulated.items()},
        "memory_per_device": {
            device: dataclasses.asdict(breakdown)
            for device, breakdown in chosen.state.step.memory().items()
        },
    }


def _warnings(section: Mapping[str, Any], mesh: str) -> list[str]:
    """What the summary warns of: a written plan over each device's memory, one
    simulated slower than the fastest feasible baseline (`search=data-parallel` where
    megatron is faster), a vertex partition simulated slower than equal vertex ranges
    (`search=roc`), a named strategy that does not apply (data parallel written), ops
    whose batch the mesh cannot split left replicated."""
    warnings = []
    if section["capacity"] > section["device_memory"]:
        warnings.append(
            f"memory-cap={format_bytes(section['capacity'])} is above a device's memory on "
            f"machine {section['machine']} ({format_bytes(section['device_memory'])}): a plan "
            "between the two is written as if it fitted, and may not run there"
        )
    if not section["feasible"]["plan"]:
        warnings.append(
            f"the written plan needs {format_bytes(section['peak_memory']['plan'])} per "
            f"device, over the {format_bytes(section['capacity'])} each holds "
            f"({section['capacity_from']}): it cannot run there; search=auto finds one that "
            "fits, or place= swaps to fit"
        )
    seconds, search = section["predicted_seconds"], section["search"]
    best, ratio = section["best_feasible_baseline"], section["speedup_over_best_feasible"]
    if best not in (None, search) and ratio is not None and ratio < 1 - 1e-9:
        warnings.append(
            f"the written plan is slower than {best}: {format_seconds(seconds['plan'])} "
            f"against {format_seconds(seconds[best])} simulated ({format_speedup(ratio)}); "
            f"search={best} writes the faster one"
        )
    roc = section.get("roc")
    if roc is not None and seconds["plan"] is not None:
        even = roc.get("equal_vertex_seconds", seconds["plan"])
        if even < seconds["plan"] * (1 - 1e-9):
            warnings.append(
                f"the {roc['partitioner']} partition simulates slower than equal vertex ranges: "
                f"{format_seconds(seconds['plan'])} against {format_seconds(even)} (every device "
                "runs the largest padded block); partitioner=equal-vertex writes those"
            )
    if search in section["not_applying"]:
        warnings.append(
            f"search={search} does not apply ({section['not_applying'][search]}): the plan "
            "written is data parallel's"
        )
    replicated = section["replicated_batch"]
    if replicated:
        names = list(replicated)
        sizes = ", ".join(str(size) for size in sorted(set(replicated.values())))
        more = f" and {len(names) - SHOWN_OPS} more" if len(names) > SHOWN_OPS else ""
        warnings.append(
            f"mesh {mesh} cannot split the batch ({sizes}): {len(names)} ops left "
            f"replicated ({', '.join(names[:SHOWN_OPS])}{more})"
        )
    return warnings


def _baselines_line(section: Mapping[str, Any]) -> str:
    """Each baseline simulated (its step, or its peak where it does not fit), and those
    that do not apply (the report's `not_applying` says why)."""
    simulated = ", ".join(
        f"{name} {format_seconds(section['predicted_seconds'][name])}"
        if section["feasible"][name]
        else f"{name} infeasible (peak {format_bytes(section['peak_memory'][name])})"
        for name in section["baselines"]
    )
    absent = section["not_applying"]
    return f"baselines simulated: {simulated}" + (
        f"; not applying: {', '.join(absent)}" if absent else ""
    )


def _auto_line(section: Mapping[str, Any]) -> str:
    """What `search=auto`'s ILP gave its MCMC, and which start the written plan came from."""
    exact, found = section["ilp"], f"the plan written found from {section['found_by']}"
    if not exact["started_from"]:
        return f"ilp gave MCMC no start ({exact['why_not']}); {found}"
    solved = "solved" if exact["solver"] is not None else "too large: greedy tiling"
    return (
        f"ilp ({solved}, {exact['seconds']:.2f} s): {format_seconds(exact['simulated_seconds'])}"
        f" simulated, then MCMC from it and the baselines: {found}"
    )


def _groups(dag: Dag, plan: Plan) -> dict[str, dict[str, list[Any]]]:
    """Each device group's devices and the weights laid out on it (so its layers), for
    a plan on device groups."""
    return {
        mesh.name: {
            "devices": list(mesh.device_ids),
            "weights": [
                arg.attr("name")
                for arg in dag.args
                if arg.attr("is_param") and plan.values[arg.out].mesh == mesh.name
            ],
        }
        for mesh in plan.meshes
    }


def _config_text(config: Config) -> str:
    """`n=[d]`, `m=[x] n=[y]`, or `replicated` for the unsplit configuration."""
    split = [f"{factor}=[{','.join(axes)}]" for factor, axes in config.items() if axes]
    return " ".join(split) or "replicated"


def _configs_by_kind(problem: Problem, plan: Plan) -> dict[str, dict[str, int]]:
    """How many ops of each kind got each configuration."""
    counts: dict[str, Counter[str]] = {}
    for node, config in plan.configs.items():
        counts.setdefault(node.op, Counter())[_config_text(config)] += 1
    return {op: dict(sorted(c.items())) for op, c in sorted(counts.items())}


def _bytes_per_link(
    collectives: list[Collective], groups: Mapping[str, Mesh], machine: Machine
) -> dict[str, int]:
    """Bytes (operand bytes per device, as `collectives` counts them) by the links they
    cross: `intra-node` or `inter-node` with the link's kind. A collective over mesh
    axes crosses the links between the devices of one of its groups (those differing
    along its axes only); a copy between device groups, those among all the groups'
    devices. A collective spanning nodes counts under both links."""
    names = {id(machine.intra): "intra-node"}
    if machine.inter is not None:
        names[id(machine.inter)] = "inter-node"
    everyone = sorted({d for group in groups.values() for d in group.device_ids})
    totals: Counter[str] = Counter()
    crossing: dict[tuple[int, ...], set[str]] = {}  # by group: 64 devices are 4,096 paths
    for step in collectives:
        if step.kind == "all_slice":
            continue
        mesh = groups[step.result.mesh]
        devices = everyone if step.kind == "replicate" else axis_groups(mesh, step.axes)[0]
        key = tuple(devices)
        if key not in crossing:
            crossing[key] = {
                f"{names[id(link)]} {link.kind}"
                for a in devices
                for b in devices
                for link in machine.path(a, b)
            }
        for link in crossing[key]:
            totals[link] += step.bytes
    return dict(sorted(totals.items()))


def _collective_totals(collectives: list[Collective]) -> dict[str, dict[str, Any]]:
    """Count and bytes (per device) of each kind of collective inserted."""
    totals: dict[str, dict[str, Any]] = {}
    for step in collectives:
        entry = totals.setdefault(step.kind, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += step.bytes
    return dict(sorted(totals.items()))
