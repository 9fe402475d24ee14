"""`soap-shard`: decide how every op is split across devices, and write it as IR.

    tasoc opt step.mlir -p 'soap-shard{mesh=8 search=data-parallel}'
    tasoc opt step.mlir -p 'soap-shard{mesh=2x4 search=expert}'
    tasoc opt step.mlir -p 'soap-shard{mesh=16 machine=k80-cluster search=mcmc timeout=60}'

The pass is a shell: it reads `@main` into the light graph once, lets the strategy
named by `search` prescribe configurations (`strategies.py`), completes the rest and
lays out the arguments (`plan.py`), or lets a search choose every op's configuration
by simulating the step on `machine` (`mcmc.py`, `exhaustive.py`, starting from the
named strategies' plans), and writes the sharded program back
(`tasoc.ir.shard_plan`): a `parallel.mesh`, sharded types, and explicit collectives wherever
a value lies otherwise than its consumer reads it. Everything about an op's parallel
dims comes from its SOAP rule (`tasoc.ir.soap`).

The mesh is `mesh=N` (one axis "d") or `mesh=AxB(xC)` (axes "x", "y", "z"), or the
module's own `parallel.mesh` when it has one (then `mesh=`, if given, must say the
same). A user fixes an argument's sharding by hand with the argument attribute
`parallel.sharding = #parallel.sharding<@mesh, ...>`; the plan keeps it.

The report section says the strategy, mesh and machine, the simulated iteration time
of the plan and of data parallel and expert (and the speedups), each op's
configuration, the bytes each link carries, each device's memory, the search's
figures (`passes/search.py`'s keys, proposals, acceptance rate, simulations per
second, delta vs full simulation), the configurations chosen per op kind,
the count and bytes of each kind of collective, the device groups of a plan on
several (each one's devices and weights), and notes (a batch the mesh does not
split, ...). `--verify-each` compares the unsharded program of the output
(`parallel.unsharded`) with the input.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost import machines
from tasoc.cost.machines import Machine
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.parallel import ShardingAttr, meshes, sharding_of, unsharded
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Collective, Config, Mesh, Sharding, internal_collectives
from tasoc.ir.training import training_signature
from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_option_types,
    parse_byte_size,
)
from tasoc.passes.report import current_report
from tasoc.passes.search import Deadline, SearchOutcome, resolve_seed, speedup
from tasoc.passes.soap import exhaustive, mcmc
from tasoc.passes.soap.mcmc import Settings, SimulatedStrategy
from tasoc.passes.soap.pictures import sharding_map, timeline
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.strategies import STRATEGIES

HINT_ATTR = "parallel.sharding"
"""Argument attribute fixing that argument's sharding by hand."""

MESH_NAME = "mesh"
"""The name of the mesh the pass adds when the module has none."""

AXIS_NAMES = {1: ("d",), 2: ("x", "y"), 3: ("x", "y", "z")}
"""Axis names of a mesh given as an option, by its number of axes."""

Search = Literal["data-parallel", "expert", "mcmc", "exhaustive"]

SEARCHES = {"mcmc": mcmc.search, "exhaustive": exhaustive.search}
"""The searches that choose by simulating, by `search=` name; the other names are
`STRATEGIES`."""

SEARCH_SHARE = 0.8
"""The part of `timeout` a search takes; the pass simulates the plans it reports after."""

BASELINES = ("data-parallel", "expert")
"""The named strategies every report compares with, and every search starts from."""


class SoapShardFailed(PassFailedException):
    """A program or mesh `soap-shard` cannot plan, in one line, which the driver prints
    as `tasoc: error: soap-shard: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"soap-shard: {message}")


def parse_mesh(spec: int | str) -> Mesh:
    """The mesh of option `mesh=8` or `mesh=2x4` (ValueError naming the option)."""
    parts = str(spec).split("x")
    if not all(part.isdigit() and int(part) > 0 for part in parts) or len(parts) > 3:
        raise ValueError(
            f"mesh must be a device count or up to three axis sizes such as 8 or 2x4, got {spec!r}"
        )
    sizes = [int(part) for part in parts]
    return Mesh(MESH_NAME, tuple(zip(AXIS_NAMES[len(sizes)], sizes, strict=True)))


@dataclass(frozen=True)
class SoapShardPass(ModulePass):
    """Options (docs/parallel.md), checked when the pass is built."""

    name: ClassVar[str] = "soap-shard"

    mesh: int | str | None = None
    """Devices used: `8` (axis "d") or `2x4` (axes "x", "y"); the module's own
    `parallel.mesh` when not given."""
    search: Search = "data-parallel"
    """How configurations are chosen: a named strategy (`strategies.py`), or a search
    simulating the step on `machine` (`mcmc`, `exhaustive`)."""
    machine: str | None = None
    """What the step is simulated on: a preset, `cpu-N` or a machine file
    (`tasoc.cost.machines`); `cpu-N` for the mesh's N devices when not given."""
    budget: int = 2000
    """The most proposals (mcmc) or complete strategies simulated (exhaustive)."""
    timeout: int | float = 60
    """Seconds the search may take; it returns the best found so far."""
    beta: int | float = 20
    """Eq. 3.1's inverse temperature, costs in units of the starting strategy's time."""
    memory_cap: int | float | str | None = None
    """The most memory one device may hold (bytes, or a size such as 16GiB): a search
    takes strategies above it as infeasible."""
    seed: int | None = None
    """Seed of searches that sample (the named strategies are deterministic); the
    run's `--seed` when not given."""

    def __post_init__(self) -> None:
        check_option_types(self)
        if self.mesh is not None:
            parse_mesh(self.mesh)
        check_at_least(self, "budget", 1)
        check_at_least(self, "timeout", 0, exclusive=True)
        check_at_least(self, "beta", 0, exclusive=True)
        if not math.isfinite(self.beta):
            raise ValueError(f"beta must be finite, got {self.beta}")
        check_at_least(self, "seed", 0)
        check_byte_size(self, "memory_cap")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        start = time.perf_counter()
        deadline = Deadline.after(self.timeout)
        outcome: SearchOutcome[Plan] | None = None
        try:
            mesh = self._mesh_of(op)
            machine = self._machine_for(mesh)
            signature = training_signature(entry_function(op))
            dag = dag_module.from_module(op)
            problem = Problem(dag, mesh, signature, _hints(dag, mesh))
            baselines = {name: complete(problem, STRATEGIES[name](problem)) for name in BASELINES}
            if self.search in SEARCHES:
                # the rest of the time is the report's: its simulations of the plans
                settings = self._settings(machine, deadline.share(SEARCH_SHARE))
                outcome = SEARCHES[self.search](problem, baselines, settings)
                plan = outcome.best
            else:
                plan = baselines[self.search]
            simulated = {
                name: SimulatedStrategy.of(problem, candidate, machine, None)
                for name, candidate in (("plan", plan), *baselines.items())
            }
        except ValueError as err:
            raise SoapShardFailed(str(err)) from None
        collectives = write_sharded(op, dag, plan, mesh)
        report = current_report()
        groups = {group.name: group for group in plan.meshes} or {mesh.name: mesh}
        title = f"soap-shard {self.search}: which block of each op every device computes"
        report.figure("soap-shard-sharding-map", sharding_map(dag, plan, groups, title))
        chosen = simulated["plan"]
        title = f"soap-shard {self.search}: the simulated step on {machine.name}"
        report.figure(
            "soap-shard-timeline",
            timeline(chosen.step.graph, chosen.simulator.timeline, title, chosen.step.stands_for),
        )
        section = report.section(self.name)
        if outcome is not None:
            outcome.seconds = time.perf_counter() - start
            outcome.write_report(section, resolve_seed(self.seed))
        section.update(
            search=self.search,
            mesh={axis: size for axis, size in mesh.axes},
            seed=resolve_seed(self.seed),
            seconds=round(time.perf_counter() - start, 3),
            **_prediction(machine, simulated),
            op_configs={
                problem.describe(node): _config_text(config)
                for node, config in plan.configs.items()
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
        )

    def _mesh_of(self, module: ModuleOp) -> Mesh:
        """The module's mesh (which `mesh=` must match), else the option's."""
        defined = meshes(module)
        if len(defined) > 1:
            names = ", ".join(f"@{name}" for name in sorted(defined))
            raise ValueError(
                f"the module defines several meshes ({names}); soap-shard plans on one"
            )
        wanted = None if self.mesh is None else parse_mesh(self.mesh)
        if defined:
            (mesh,) = defined.values()
            if wanted is not None and wanted.axes != mesh.axes:
                raise ValueError(
                    f"mesh={self.mesh} disagrees with the module's parallel.mesh @{mesh.name} "
                    f"{_axes_text(mesh)}"
                )
            return mesh
        if wanted is None:
            raise ValueError("give mesh=N or mesh=AxB: the module has no parallel.mesh")
        return wanted

    def _machine_for(self, mesh: Mesh) -> Machine:
        """The machine option's machine (`cpu-N` for the mesh's N by default), which must
        have a device for every device of the mesh."""
        found = machines.machine(self.machine or f"cpu-{mesh.size}")
        if mesh.size > found.size:
            raise ValueError(
                f"the mesh has {mesh.size} devices, more than machine {found.name}'s {found.size}"
            )
        return found

    def _settings(self, machine: Machine, deadline: Deadline) -> Settings:
        cap = None if self.memory_cap is None else parse_byte_size(self.memory_cap)
        return Settings(machine, self.budget, self.beta, cap, resolve_seed(self.seed), deadline)

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares: the sharded program's
        one-device equal (collectives dropped, layouts removed) against the input."""
        return unsharded(before), unsharded(after)


def _prediction(machine: Machine, simulated: dict[str, SimulatedStrategy]) -> dict[str, Any]:
    """The report's simulated figures: the iteration time of the plan and of each
    baseline on `machine`, the plan's speedups over them, and the plan's memory per
    device (its peak, and what it holds by kind)."""
    times = {name: strategy.time for name, strategy in simulated.items()}
    plan = simulated["plan"]
    return {
        "machine": machine.name,
        "predicted_seconds": times,
        "speedup_over": {name: speedup(times[name], times["plan"]) for name in BASELINES},
        "peak_memory": {name: strategy.memory for name, strategy in simulated.items()},
        "memory_per_device": {
            device: dataclasses.asdict(breakdown)
            for device, breakdown in plan.step.memory(plan.simulator.timeline).items()
        },
    }


def _axes_text(mesh: Mesh) -> str:
    return "[" + ", ".join(f'"{axis}" = {size}' for axis, size in mesh.axes) + "]"


def _hints(dag: Dag, mesh: Mesh) -> dict[int, Sharding]:
    """The argument shardings fixed by hand; ValueError for a program already sharded
    or a hint that does not fit its argument or the mesh."""
    for node in (*dag.args, *dag.ops):
        if any(sharding_of(sig) is not None for sig in node.sigs):
            raise ValueError("@main is already sharded (its tensors carry #parallel.sharding)")
    hints = {}
    for index, arg in enumerate(dag.args):
        attr = dict(arg.attr("attributes")).get(HINT_ATTR)
        if attr is None:
            continue
        where = f"argument #{index} (%{arg.attr('name')}): {HINT_ATTR}"
        if not isinstance(attr, ShardingAttr):
            raise ValueError(f"{where} must be a #parallel.sharding, got {attr}")
        sharding = attr.sharding
        if sharding.unreduced:
            raise ValueError(f"{where} holds partial sums; an argument is a complete value")
        try:
            sharding.check(arg.out.sig, mesh)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        hints[index] = sharding
    return hints


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
    for step in collectives:
        if step.kind == "all_slice":
            continue
        mesh = groups[step.result.mesh]
        devices = everyone if step.kind == "replicate" else _first_group(mesh, step.axes)
        crossed = {
            f"{names[id(link)]} {link.kind}"
            for a in devices
            for b in devices
            for link in machine.path(a, b)
        }
        for link in crossed:
            totals[link] += step.bytes
    return dict(sorted(totals.items()))


def _first_group(mesh: Mesh, axes: tuple[str, ...]) -> list[int]:
    """The devices of `mesh` communicating with its first over `axes` (row-major
    positions: those at position 0 along every other axis)."""
    positions = itertools.product(*(range(size) for _, size in mesh.axes))
    return [
        device
        for device, coords in zip(mesh.device_ids, positions, strict=True)
        if all(c == 0 for (axis, _), c in zip(mesh.axes, coords, strict=True) if axis not in axes)
    ]


def _collective_totals(collectives: list[Collective]) -> dict[str, dict[str, Any]]:
    """Count and bytes (per device) of each kind of collective inserted."""
    totals: dict[str, dict[str, Any]] = {}
    for step in collectives:
        entry = totals.setdefault(step.kind, {"count": 0, "bytes": 0})
        entry["count"] += 1
        entry["bytes"] += step.bytes
    return dict(sorted(totals.items()))
