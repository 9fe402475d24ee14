"""`soap-shard`: decide how every op is split across devices, and write it as IR.

    tasoc opt step.mlir -p 'soap-shard{mesh=8}'          # search=auto: the ILP, then MCMC
    tasoc opt step.mlir -p 'soap-shard{mesh=8 search=data-parallel}'
    tasoc opt step.mlir -p 'soap-shard{mesh=2x4 search=expert}'
    tasoc opt step.mlir -p 'soap-shard{mesh=16 machine=k80-cluster search=mcmc timeout=60}'
    tasoc opt step.mlir -p 'soap-shard{machine=v100-tensoropt search=ft objective=frontier}'

The pass is a shell: it reads `@main` into the light graph once, lets the strategy
named by `search` prescribe configurations (`strategies.py`), completes the rest and
lays out the arguments (`plan.py`), or lets a search choose every op's configuration
by simulating the step on `machine` (`mcmc.py`, `exhaustive.py`, starting from the
named strategies' plans; by default `auto.py`: MCMC from the ILP's plan too), and
writes the sharded program back (`tasoc.ir.shard_plan`): a `parallel.mesh`, sharded
types, and explicit collectives wherever a value lies otherwise than its consumer
reads it.

The searches on TensorOpt's cost graph (`cost_searches.py`: `ft`, `greedy`, `ilp`)
choose by `objective`: the fastest (`time`), a point of the time/memory frontier
(`frontier`, `pick=`), the fastest under `memory-cap` (`mini-time`); `profile` and
`mini-parallelism` plan once per device count of `devices` and write the fastest, or
the fewest devices that fit. `compare=` places other searches' strategies beside the
written one, in the report and the frontier picture. Everything about an op's parallel
dims comes from its SOAP rule (`tasoc.ir.soap`).

The mesh is `mesh=N` (one axis "d") or `mesh=AxB(xC)` (axes "x", "y", "z"), or the
module's own `parallel.mesh` when it has one (then `mesh=`, if given, must say the
same). A user fixes an argument's sharding by hand with the argument attribute
`parallel.sharding = #parallel.sharding<@mesh, ...>`; the plan keeps it.

The report section says the strategy, mesh and machine, the simulated iteration time
of the plan and of every practitioner's baseline that applies (`BASELINES`; the
others with why they do not) and the speedups, each op's
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
import math
import time
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, get_args

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost import machines
from tasoc.cost.machines import Machine
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.limits import bytes_and_size, format_bytes
from tasoc.ir.parallel import MACHINE_ATTR, ShardingAttr, meshes, unsharded
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Collective, Config, Mesh, Sharding, internal_collectives
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.kinds import Kind, PassContract, require
from tasoc.passes.options import (
    check_at_least,
    check_byte_size,
    check_option_types,
    parse_byte_size,
)
from tasoc.passes.report import current_report
from tasoc.passes.search import (
    Deadline,
    SearchOutcome,
    resolve_seed,
    search_progress,
    speedup,
)
from tasoc.passes.soap import exhaustive, mcmc
from tasoc.passes.soap.auto import search_auto
from tasoc.passes.soap.cost_searches import (
    COST_SEARCHES,
    Evaluated,
    FrontierError,
    cost_model,
    evaluate,
    frontier_points,
    greedy_plan,
)
from tasoc.passes.soap.mcmc import (
    Heuristic,
    MemoryCapError,
    Objective,
    Settings,
    SimulatedStrategy,
)
from tasoc.passes.soap.pictures import frontier_figure, profile_figure, sharding_map, timeline
from tasoc.passes.soap.plan import Prescription, Problem, complete
from tasoc.passes.soap.strategies import STRATEGIES, prescribe, unsplit_batch
from tasoc.passes.soap.swap_pricing import Placer, SwapPricing
from tasoc.passes.summary import Summary, format_seconds, format_speedup, stop_line
from tasoc.sim.parallel import axis_groups

HINT_ATTR = "parallel.sharding"
"""Argument attribute fixing that argument's sharding by hand."""

MESH_NAME = "mesh"
"""The name of the mesh the pass adds when the module has none."""

AXIS_NAMES = {1: ("d",), 2: ("x", "y"), 3: ("x", "y", "z")}
"""Axis names of a mesh given as an option, by its number of axes."""

Search = Literal[
    "auto",
    "data-parallel",
    "owt",
    "dlrm-hybrid",
    "megatron",
    "layer-wise",
    "zero",
    "expert",
    "mcmc",
    "exhaustive",
    "ft",
    "greedy",
    "ilp",
]

SEARCHES = {
    "auto": search_auto,
    "mcmc": mcmc.search,
    "exhaustive": exhaustive.search,
    **COST_SEARCHES,
}
"""The searches that choose by simulating or on the cost graph, by `search=` name; the
other names are `STRATEGIES`."""

Compared = Literal["mcmc", "ft", "greedy", "ilp", "exhaustive"]

FRONTIER_COMPARE: tuple[Compared, ...] = ("mcmc", "ilp", "greedy")
"""The searches `objective=frontier` places beside FT's frontier unless `compare=` says."""

FT_MAX_POINTS = 64
"""FT's default bound on any frontier's points. Exact frontiers of training steps grow
to 10^5 points once re-scheduled copies hold memory (a 13-layer transformer step), and
node elimination multiplies two frontiers per option triple, which ran a 2,000-op
inception_v3 step out of 22 GB; 64 points draw the trade-off and keep FT to seconds."""

COMPARE_SHARE = 0.5
"""The part of the time left that the compared searches share, after the pass's own."""

SEARCH_SHARE = 0.8
"""The part of `timeout` a search takes; the pass simulates the plans it reports after."""

BASELINES = ("data-parallel", "owt", "dlrm-hybrid", "megatron", "layer-wise", "zero", "expert")
"""The named strategies every report compares with, and every search starts from, where
they apply (`Prescription.inapplicable`): the plans a practitioner would pick."""

PROGRESS_UNITS = {
    "auto": ("proposal", "proposals"),
    "mcmc": ("proposal", "proposals"),
    "exhaustive": ("strategy", "simulations"),
}
"""The searches that draw a progress bar: the unit of their steps, and the report key
that counts them."""

SHOWN_OPS = 3
"""Ops a summary's warning names before saying how many more."""


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

    contract: ClassVar[PassContract] = PassContract(
        refuses={
            Kind.SHARDED: "@main is already sharded (its tensors carry #parallel.sharding); "
            "soap-shard plans an unsharded program, once",
            Kind.PLACED: "the program is placed; run soap-shard before placement "
            "(soap-shard{place=belady} prices swapping while it searches)",
        },
        adds=frozenset({Kind.SHARDED}),
    )

    mesh: int | str | None = None
    """Devices used: `8` (axis "d") or `2x4` (axes "x", "y"); the module's own
    `parallel.mesh` when not given, else all of `machine`'s devices on one axis."""
    search: Search = "auto"
    """How configurations are chosen: `auto` (the ILP's plan refined by MCMC,
    `auto.py`; `ft` for `objective=frontier`), a named strategy (`strategies.py`), a
    search simulating the step on `machine` (`mcmc`, `exhaustive`) or one on the cost
    graph (`ft`, `greedy`, `ilp`)."""
    machine: str | None = None
    """What the step is simulated on: a preset, `cpu-N`, `local` or a machine file
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
    objective: Objective = "time"
    """`time` (the fastest), `frontier` (FT's whole time/memory frontier, `pick=` one),
    `mini-time` (the fastest under `memory-cap`), `mini-parallelism` (the fewest of
    `devices` that fit `memory-cap`), `profile` (the fastest at each of `devices`)."""
    pick: int | str | None = None
    """The frontier point `objective=frontier` writes: `fastest` (default),
    `smallest`, or its number (1: the least memory)."""
    devices: int | str | tuple[int, ...] | None = None
    """Device counts `mini-parallelism` and `profile` try: `1-16` (the powers of two
    in that range) or a list `2,4,8`; the powers of two up to the machine's size when
    not given."""
    compare: tuple[Compared, ...] | str | None = None
    """Searches whose strategies the report and the frontier picture place beside the
    chosen one (`none`: no others); `mcmc,ilp,greedy` for `objective=frontier`."""
    heuristic: Heuristic | Literal["exact"] = "weighted"
    """How FT fixes a node no exact elimination removes (`memory`, `time`, `weighted`),
    or `exact`: it tries every option of that node (exponential, exact)."""
    place: Placer | None = None
    """How a strategy over each device's memory may still fit: by swapping, planned by
    placement's `belady`, `lru` or `offload-all` and priced on the simulator with the
    candidate (`swap_pricing.py`). The capacity is `memory-cap`, else the machine's
    device memory. Without it a strategy over `memory-cap` is infeasible."""
    max_points: int | None = None
    """The most points FT keeps in any frontier (thinning: both ends kept, the rest
    spread evenly in memory); `FT_MAX_POINTS` when not given, no limit with
    `heuristic=exact`."""

    def __post_init__(self) -> None:
        check_option_types(self)
        if self.search == "auto" and self.objective == "frontier":
            object.__setattr__(self, "search", "ft")  # the one search that tracks it
        if self.mesh is not None:
            parse_mesh(self.mesh)
        check_at_least(self, "budget", 1)
        check_at_least(self, "timeout", 0, exclusive=True)
        check_at_least(self, "beta", 0, exclusive=True)
        check_at_least(self, "seed", 0)
        check_byte_size(self, "memory_cap")
        check_at_least(self, "max_points", 2)
        if isinstance(self.pick, int) and self.pick < 1:
            raise ValueError(
                f"pick must be fastest, smallest or a point's number from 1, got {self.pick}"
            )
        if isinstance(self.pick, str) and self.pick not in ("fastest", "smallest"):
            raise ValueError(
                f"pick must be fastest, smallest or a point's number, got {self.pick!r}"
            )
        if self.pick is not None and self.objective != "frontier":
            raise ValueError("pick= chooses a frontier point: give objective=frontier")
        if self.objective == "frontier" and self.search != "ft":
            raise ValueError("objective=frontier needs search=ft (the search that tracks it)")
        needs_cap = self.objective in ("mini-time", "mini-parallelism")
        if needs_cap and self.memory_cap is None:
            raise ValueError(f"objective={self.objective} needs memory-cap=BYTES")
        if self.devices is not None:
            if self.objective not in ("mini-parallelism", "profile"):
                raise ValueError("devices= is for objective=mini-parallelism or profile")
            device_counts(self.devices)
        if self.place is not None and self.search not in (
            "auto",
            "mcmc",
            "exhaustive",
            *STRATEGIES,
        ):
            raise ValueError(
                f"place= prices strategies by simulating them: search=auto, mcmc, exhaustive, "
                f"or a named strategy ({', '.join(STRATEGIES)}), not {self.search}"
            )
        if self.place is not None and self.objective != "time":
            raise ValueError("place= is for objective=time (the fastest strategy, swaps priced)")
        self._compared()

    def _compared(self) -> tuple[Compared, ...]:
        """The searches to compare with (`compare=`), the pass's own left out."""
        given = self.compare
        if given is None:
            given = FRONTIER_COMPARE if self.objective == "frontier" else ()
        elif given == "none":
            given = ()
        elif isinstance(given, str):
            given = (given,)  # type: ignore[assignment]
        known = get_args(Compared)
        for name in given:
            if name not in known:
                raise ValueError(
                    f"compare must list searches among {', '.join(known)}, got {name!r}"
                )
        return tuple(name for name in given if name != self.search)  # type: ignore[misc]

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require(self.contract, op, SoapShardFailed)
        start = time.perf_counter()
        deadline = Deadline.after(self.timeout)
        try:
            dag = dag_module.from_module(op)
            tried = self._plan_meshes(op, dag, deadline)
            chosen = self._chosen(tried)
            compared, compare_notes = self._compare(chosen, deadline)
        except ValueError as err:
            raise SoapShardFailed(str(err)) from None
        collectives = write_sharded(op, dag, chosen.plan, chosen.mesh)
        op.attributes[MACHINE_ATTR] = StringAttr(self.machine or chosen.machine.name)
        self._report(start, dag, chosen, tried, collectives, compared, compare_notes)

    def _plan_meshes(
        self, module: ModuleOp, dag: dag_module.Dag, deadline: Deadline
    ) -> dict[int, _Planned]:
        """The strategy on each mesh tried (one, or one per device count), by device
        count; `mini-parallelism` stops at the first count that fits."""
        meshes_tried = self._meshes(module)
        signature = training_signature(entry_function(module))
        tried: dict[int, _Planned] = {}
        for index, mesh in enumerate(meshes_tried):
            share = deadline.share(1 / (len(meshes_tried) - index))
            try:
                planned = self._plan(dag, mesh, signature, share)
            except (FrontierError, MemoryCapError):
                if self.objective != "mini-parallelism":
                    raise
                continue  # the cap is under this count's least memory
            tried[mesh.size] = planned
            if self.objective == "mini-parallelism" and planned.fits(self._cap()):
                break
        return tried

    def _report(
        self,
        start: float,
        dag: dag_module.Dag,
        chosen: _Planned,
        tried: Mapping[int, _Planned],
        collectives: list[Collective],
        compared: Mapping[str, Evaluated],
        compare_notes: list[str],
    ) -> None:
        """The report section and the pictures of the written plan."""
        problem, plan, mesh, machine = chosen.problem, chosen.plan, chosen.mesh, chosen.machine
        report = current_report()
        groups = {group.name: group for group in plan.meshes} or {mesh.name: mesh}
        title = f"soap-shard {self.search}: which block of each op every device computes"
        report.figure("soap-shard-sharding-map", sharding_map(dag, plan, groups, title))
        simulated = chosen.simulated
        peak, capacity = simulated["plan"].memory, self._capacity(machine)
        fits = "within" if peak <= capacity else "OVER"
        title = (
            f"soap-shard {self.search}: the simulated step on {machine.name} "
            f"(peak {format_bytes(peak)} per device, {fits} its {format_bytes(capacity)})"
        )
        report.figure(
            "soap-shard-timeline",
            timeline(
                simulated["plan"].step.graph,
                simulated["plan"].simulator.timeline,
                title,
                simulated["plan"].step.stands_for,
            ),
        )
        section = report.section(self.name)
        outcome = chosen.outcome
        if outcome is not None:
            outcome.seconds = time.perf_counter() - start
            outcome.write_report(section, resolve_seed(self.seed))
        section.update(
            search=self.search,
            objective=self.objective,
            mesh={axis: size for axis, size in mesh.axes},
            seed=resolve_seed(self.seed),
            seconds=round(time.perf_counter() - start, 3),
            **_prediction(machine, simulated, self._capacity(machine)),
            not_applying=chosen.not_applying,
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
            replicated_batch={
                problem.describe(node): size
                for node, size in unsplit_batch(problem).items()
                if not plan.configs.get(node)
            },
        )
        section.update(
            capacity=self._capacity(machine),
            capacity_from="memory-cap" if self._cap() is not None else f"machine {machine.name}",
            device_memory=int(machine.device.memory_bytes),
        )
        if compared:
            section["compared"] = {name: entry.figures() for name, entry in compared.items()}
        if compare_notes:
            section["compare_notes"] = compare_notes
        if len(tried) > 1 or self.objective in ("mini-parallelism", "profile"):
            section["profile"] = {
                str(count): {
                    "simulated_seconds": planned.simulated["plan"].time,
                    "simulated_memory": planned.simulated["plan"].memory,
                }
                for count, planned in sorted(tried.items())
            }
            report.figure(
                "soap-shard-profile",
                profile_figure(
                    f"soap-shard {self.search}: the best step per device count on {machine.name}",
                    {
                        count: (p.simulated["plan"].time, p.simulated["plan"].memory)
                        for count, p in tried.items()
                    },
                ),
            )
        if (outcome is not None and "frontier" in outcome.details) or compared:
            cap = self._cap()
            title = f"soap-shard {self.search}: time against memory per device on {machine.name}"
            report.figure(
                "soap-shard-frontier",
                frontier_figure(
                    title, chosen.frontier, chosen.simulated_frontier, compared, cap, self.search
                ),
            )

    def summary(self, section: Mapping[str, Any]) -> Summary:
        """The search, mesh and simulated step against the baselines, memory per device
        against the capacity, the collectives and how the search stopped; warnings for
        a plan slower than a baseline the pass simulated and for ops whose batch the
        mesh cannot split (`summary.py`)."""
        search = section["search"]
        mesh = "x".join(f"{axis}={size}" for axis, size in section["mesh"].items())
        seconds = section["predicted_seconds"]
        speedups = section["speedup_over"]
        best = section["best_feasible_baseline"]
        against = "".join(
            f", {format_speedup(speedups[name])} over {name.replace('-', ' ')}"
            + (" (the fastest baseline)" if name == best != "data-parallel" else "")
            if section["feasible"][name]
            else f", {name.replace('-', ' ')} infeasible "
            f"(peak {format_bytes(section['peak_memory'][name])})"
            for name in dict.fromkeys(("data-parallel", best))
            if name not in (search, None)
        )
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
        _, counted = PROGRESS_UNITS.get(search, (None, None))
        steps = f"{section[counted]} {counted}" if counted in section else None
        stopped = stop_line(section, steps)
        if stopped is not None:
            details.append(stopped)
        return Summary(headline, tuple(details), tuple(_warnings(section, mesh)))

    def _max_points(self) -> int | None:
        if self.max_points is not None or self.heuristic == "exact":
            return self.max_points
        return FT_MAX_POINTS

    def _cap(self) -> int | None:
        return None if self.memory_cap is None else parse_byte_size(self.memory_cap)

    def _meshes(self, module: ModuleOp) -> list[Mesh]:
        """The meshes to plan on: the one mesh, or one per device count tried."""
        if self.objective not in ("mini-parallelism", "profile"):
            return [self._mesh_of(module)]
        if meshes(module):
            raise ValueError(
                f"objective={self.objective} chooses the mesh: the module has its own parallel.mesh"
            )
        if self.mesh is not None:
            raise ValueError(
                f"objective={self.objective} chooses the mesh: give devices=, not mesh="
            )
        machine = machines.machine(self.machine) if self.machine else None
        if self.devices is None:
            if machine is None:
                raise ValueError(f"objective={self.objective} needs machine= or devices=")
            counts = [1 << k for k in range(machine.size.bit_length()) if 1 << k <= machine.size]
        else:
            counts = device_counts(self.devices)
        largest = max(counts)
        if machine is not None and largest > machine.size:
            raise ValueError(
                f"devices={_devices_text(self.devices)} asks for {largest} devices, more than "
                f"machine {machine.name}'s {machine.size}"
            )
        return [parse_mesh(count) for count in counts]

    def _plan(
        self, dag: dag_module.Dag, mesh: Mesh, signature: Any, deadline: Deadline
    ) -> _Planned:
        """The strategy of the `search` on `mesh`, with its baselines, all simulated."""
        machine = self._machine_for(mesh)
        problem = Problem(dag, mesh, signature, _hints(dag, mesh))
        baselines, not_applying = baseline_plans(problem)
        outcome: SearchOutcome[Plan] | None = None
        pricing = self._pricing(machine, signature)
        if self.search in SEARCHES:
            # the rest of the time is the report's: its simulations of the plans
            settings = self._settings(machine, deadline.share(SEARCH_SHARE), pricing)
            unit, _ = PROGRESS_UNITS.get(self.search, ("step", None))
            with search_progress(self.name, unit, self.budget, settings.deadline) as progress:
                settings = dataclasses.replace(settings, progress=progress)
                outcome = _search(self.search, problem, baselines, settings)
            plan = outcome.best
        else:
            plan = (
                baselines[self.search]
                if self.search in baselines
                else complete(problem, prescribe(problem, self.search))
            )
        capacity = self._capacity(machine)
        simulated: dict[str, SimulatedStrategy] = {}
        by_plan: dict[int, SimulatedStrategy] = {}
        for name, candidate in (("plan", plan), *baselines.items()):
            if id(candidate) not in by_plan:
                by_plan[id(candidate)] = SimulatedStrategy.of(
                    problem, candidate, machine, capacity, place=pricing
                )
            simulated[name] = by_plan[id(candidate)]
        return _Planned(mesh, machine, problem, baselines, not_applying, outcome, plan, simulated)

    def _chosen(self, tried: dict[int, _Planned]) -> _Planned:
        if not tried:
            raise FrontierError(
                f"no device count of devices={_devices_text(self.devices)} fits "
                f"memory-cap={bytes_and_size(self._cap())} per device"
            )
        if self.objective == "mini-parallelism":
            cap = self._cap()
            fitting = [planned for planned in tried.values() if planned.fits(cap)]
            if not fitting:
                least = min(tried.values(), key=lambda p: p.simulated["plan"].memory)
                raise FrontierError(
                    f"no device count of {', '.join(map(str, tried))} fits "
                    f"memory-cap={bytes_and_size(cap)} per device: the least simulated is "
                    f"{bytes_and_size(int(least.simulated['plan'].memory))} at "
                    f"{least.mesh.size} devices"
                )
            return min(fitting, key=lambda planned: planned.mesh.size)
        return min(tried.values(), key=lambda planned: planned.simulated["plan"].cost)

    def _compare(
        self, chosen: _Planned, deadline: Deadline
    ) -> tuple[dict[str, Evaluated], list[str]]:
        """The compared searches' strategies and the baselines, each with its estimate
        and simulation (empty when nothing is compared), and why a compared search
        has none."""
        names = self._compared()
        notes: list[str] = []
        if not names and not (chosen.outcome and "frontier" in chosen.outcome.details):
            return {}, notes
        problem, machine = chosen.problem, chosen.machine
        budget = deadline.share(COMPARE_SHARE)
        model = cost_model(problem, self._settings(machine, budget))
        found: dict[str, Evaluated] = {}
        for index, name in enumerate(names):
            settings = self._settings(machine, budget.share(1 / (len(names) - index)))
            try:
                outcome = _search(name, problem, chosen.baselines, settings)
            except ValueError as err:
                notes.append(f"search={name}: {err}")
                continue
            found[name] = evaluate(model, outcome.best, settings)
        settings = self._settings(machine, budget)
        for name, plan in chosen.baselines.items():
            found[name] = evaluate(model, plan, settings)
        found[self.search] = evaluate(model, chosen.plan, settings)
        return found, notes

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
        if wanted is None and self.machine is not None:
            return parse_mesh(machines.machine(self.machine).size)
        if wanted is None:
            raise ValueError(
                "give mesh=N or mesh=AxB (or machine=, whose devices it then uses): the "
                "module has no parallel.mesh"
            )
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

    def _capacity(self, machine: Machine) -> int:
        """Each device's memory: `memory-cap`, else the machine's. A plan over it is
        infeasible (or, with `place=`, priced with the swaps that make it fit): no
        search writes, and no report divides by, a plan the device cannot hold."""
        cap = self._cap()
        return int(machine.device.memory_bytes) if cap is None else cap

    def _pricing(self, machine: Machine, signature: TrainingSignature | None) -> SwapPricing | None:
        """How strategies over the capacity are priced (`place=`), None: infeasible."""
        if self.place is None:
            return None
        return SwapPricing(self.place, self._capacity(machine), machine, signature)

    def _settings(
        self, machine: Machine, deadline: Deadline, place: SwapPricing | None = None
    ) -> Settings:
        return Settings(
            machine,
            self.budget,
            self.beta,
            self._capacity(machine),
            resolve_seed(self.seed),
            deadline,
            objective=self.objective,
            pick=None if self.pick is None else str(self.pick),
            heuristic=None if self.heuristic == "exact" else self.heuristic,
            max_points=self._max_points(),
            place=place,
        )

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares: the sharded program's
        one-device equal (collectives dropped, layouts removed) against the input."""
        return unsharded(before), unsharded(after)


@dataclass
class _Planned:
    """One mesh's strategy: the problem, baselines, the search's outcome, and the
    plan and baselines simulated."""

    mesh: Mesh
    machine: Machine
    problem: Problem
    baselines: dict[str, Plan]
    """The plans of the baselines that apply (one object for equal prescriptions)."""
    not_applying: dict[str, str]
    """The baselines that do not apply, and why."""
    outcome: SearchOutcome[Plan] | None
    plan: Plan
    simulated: dict[str, SimulatedStrategy]

    def fits(self, cap: int | None) -> bool:
        return cap is None or self.simulated["plan"].memory <= cap

    @property
    def frontier(self) -> list[tuple[int, float]]:
        """FT's frontier (estimates), empty for other searches."""
        return [] if self.outcome is None else frontier_points(self.outcome)

    @property
    def simulated_frontier(self) -> list[tuple[int, float]]:
        """The frontier points FT re-simulated, as (memory, seconds)."""
        if self.outcome is None:
            return []
        return [
            (memory, seconds)
            for _, memory, seconds in self.outcome.details.get("frontier_simulated", ())
        ]


def baseline_plans(problem: Problem) -> tuple[dict[str, Plan], dict[str, str]]:
    """The completed plans of the baselines that apply to `problem`, and why each other
    does not. Baselines prescribing alike (expert and owt where there are no recurrent
    layers) share one plan object, which the pass simulates and a search starts from
    once."""
    plans: dict[str, Plan] = {}
    not_applying: dict[str, str] = {}
    done: list[tuple[Prescription, Plan]] = []
    for name in BASELINES:
        prescription = STRATEGIES[name](problem)
        if prescription.inapplicable is not None:
            not_applying[name] = prescription.inapplicable
            continue
        same = next((plan for other, plan in done if other == prescription), None)
        plans[name] = same if same is not None else complete(problem, prescription)
        done.append((prescription, plans[name]))
    return plans, not_applying


def distinct(baselines: Mapping[str, Plan]) -> dict[str, Plan]:
    """`baselines` with each plan once, under the first name it has: the starts of a
    search (one chain, or one FT anchor, per plan)."""
    starts: dict[str, Plan] = {}
    for origin, plan in baselines.items():
        if all(plan is not other for other in starts.values()):
            starts[origin] = plan
    return starts


def _search(
    name: str, problem: Problem, baselines: Mapping[str, Plan], settings: Settings
) -> SearchOutcome[Plan]:
    """Search `name` from the baselines, each distinct plan once (MCMC, alone or after
    the ILP, also from Spartan's tiling: one more chain's start, as the tiling is cheap
    and often close)."""
    starts = distinct(baselines)
    if name in ("mcmc", "auto"):
        starts["greedy"] = greedy_plan(problem, settings)[0]
    return SEARCHES[name](problem, starts, settings)


def device_counts(spec: int | str | tuple[int, ...]) -> list[int]:
    """The device counts of option `devices` (ValueError naming it): `8`, `1-16` (the
    powers of two from 1 to 16), or a list `2,4,8`."""
    if isinstance(spec, int):
        counts = [spec]
    elif isinstance(spec, tuple):
        counts = list(spec)
    else:
        low, sep, high = spec.partition("-")
        if not (sep and low.isdigit() and high.isdigit() and 0 < int(low) <= int(high)):
            raise ValueError(f"devices must be N, LOW-HIGH or a list such as 2,4,8, got {spec!r}")
        counts = [1 << k for k in range(int(high).bit_length()) if int(low) <= 1 << k <= int(high)]
        if not counts:
            raise ValueError(f"devices={spec} holds no power of two")
    if any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"devices must be positive device counts, got {spec!r}")
    return sorted(set(counts))


def _devices_text(spec: int | str | tuple[int, ...] | None) -> str:
    return ",".join(map(str, spec)) if isinstance(spec, tuple) else str(spec)


def _prediction(
    machine: Machine, simulated: dict[str, SimulatedStrategy], capacity: int
) -> dict[str, Any]:
    """The report's simulated figures: the iteration time of the plan and of each
    baseline that applies (`baselines`) on `machine` (with `place=`, the stall of
    swapping added where a strategy is over the capacity, None where nothing fits it)
    and without that (`simulated_seconds`), which of them fit each device's `capacity`
    (`feasible`), the plan's speedups over the feasible ones (None over one that cannot
    run: never a denominator) and over the best of them, and the plan's memory per
    device (its peak, and what it holds by kind)."""
    times = {name: strategy.cost for name, strategy in simulated.items()}
    feasible = {name: cost < math.inf for name, cost in times.items()}
    baselines = [name for name in BASELINES if name in simulated]
    runnable = [name for name in baselines if feasible[name]]
    best = min(runnable, key=times.__getitem__, default=None)
    plan = simulated["plan"]
    priced = {}
    if plan.place is not None:
        priced["place"] = {
            "placer": plan.place.placer,
            "capacity": plan.place.capacity,
            "swaps": sorted(name for name, s in simulated.items() if s.memory > s.place.capacity),
            "strategies_priced": plan.place.plans,
        }
    return priced | {
        "machine": machine.name,
        "baselines": baselines,
        "predicted_seconds": {name: t if t < math.inf else None for name, t in times.items()},
        "simulated_seconds": {name: strategy.time for name, strategy in simulated.items()},
        "feasible": feasible,
        "speedup_over": {
            name: speedup(times[name], times["plan"]) if feasible[name] else None
            for name in baselines
        },
        "best_feasible_baseline": best,
        "speedup_over_best_feasible": None if best is None else speedup(times[best], times["plan"]),
        "peak_memory": {name: strategy.memory for name, strategy in simulated.items()},
        "memory_per_device": {
            device: dataclasses.asdict(breakdown)
            for device, breakdown in plan.step.memory().items()
        },
    }


def _warnings(section: Mapping[str, Any], mesh: str) -> list[str]:
    """What the summary warns of: a written plan over each device's memory, one
    simulated slower than the fastest feasible baseline (`search=data-parallel` where
    megatron is faster), a named strategy that does not apply (data parallel written),
    ops whose batch the mesh cannot split left replicated."""
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


def _axes_text(mesh: Mesh) -> str:
    return "[" + ", ".join(f'"{axis}" = {size}' for axis, size in mesh.axes) + "]"


def _hints(dag: Dag, mesh: Mesh) -> dict[int, Sharding]:
    """The argument shardings fixed by hand; ValueError for a hint that does not fit
    its argument or the mesh."""
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
        devices = everyone if step.kind == "replicate" else axis_groups(mesh, step.axes)[0]
        crossed = {
            f"{names[id(link)]} {link.kind}"
            for a in devices
            for b in devices
            for link in machine.path(a, b)
        }
        for link in crossed:
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
