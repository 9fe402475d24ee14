"""`soap-shard`: decide how every op is split across devices, and write it as IR.

    tasoc opt step.mlir -p 'soap-shard{mesh=8}'          # search=auto: the ILP, then MCMC
    tasoc opt step.mlir -p 'soap-shard{mesh=8 search=data-parallel}'
    tasoc opt step.mlir -p 'soap-shard{mesh=2x4 search=expert}'
    tasoc opt step.mlir -p 'soap-shard{mesh=16 machine=k80-cluster search=mcmc timeout=60}'
    tasoc opt step.mlir -p 'soap-shard{machine=v100-tensoropt search=ft objective=frontier}'

The pass is a shell: load -> plan -> write -> report. It reads `@main` into the light
graph once and its mesh, machine and hand-fixed shardings (`meshes.py`); plans on each
mesh tried (`profile.py`): the strategy named by `search` prescribes configurations
(`strategies.py`) and completion does the rest and lays out the arguments (`plan.py`),
or a search of the table in `searches.py` chooses every op's configuration (`mcmc.py`,
`exhaustive.py` by simulating the step on `machine`, starting from the named
strategies' plans; by default `auto.py`: MCMC from the ILP's plan too); writes the
sharded program back (`tasoc.ir.shard_plan`): a `parallel.mesh`, sharded types, and
explicit collectives wherever a value lies otherwise than its consumer reads it; and
reports (`reporting.py`). Its options are checked when it is built (`option_checks.py`);
`search=roc` first lays the program out by a partition of its graph (`graph_search.py`).

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

import time
from collections.abc import Mapping
from dataclasses import dataclass, replace
from typing import Any, ClassVar, Literal

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp, StringAttr
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.cost.machines import Machine
from tasoc.ir import dag as dag_module
from tasoc.ir.parallel import MACHINE_ATTR, unsharded
from tasoc.ir.shard_plan import write_sharded
from tasoc.passes.kinds import Kind, PassContract, require
from tasoc.passes.options import parse_byte_size
from tasoc.passes.search import Deadline
from tasoc.passes.soap import graph_search, profile, reporting
from tasoc.passes.soap.meshes import DeviceCounts
from tasoc.passes.soap.option_checks import check_options
from tasoc.passes.soap.problem import Heuristic, Objective
from tasoc.passes.soap.searches import GRAPH_SEARCH, comparable_names
from tasoc.passes.soap.swap_pricing import Placer
from tasoc.passes.summary import Summary
from tasoc.sim.core import paused_gc

FRONTIER_COMPARE = ("mcmc", "ilp", "greedy")
"""The searches `objective=frontier` places beside FT's frontier unless `compare=` says."""


class SoapShardFailed(PassFailedException):
    """A program or mesh `soap-shard` cannot plan, in one line, which the driver prints
    as `tasoc: error: soap-shard: ...`."""

    def __init__(self, message: str) -> None:
        super().__init__(f"soap-shard: {message}")


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
    search: str = "auto"
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
    beta: int | float = 100
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
    devices: DeviceCounts | None = None
    """Device counts `mini-parallelism` and `profile` try: `1-16` (the powers of two
    in that range) or a list `2,4,8`; the powers of two up to the machine's size when
    not given."""
    compare: tuple[str, ...] | str | None = None
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
    spread evenly in memory); `profile.FT_MAX_POINTS` when not given, no limit with
    `heuristic=exact`."""

    partitioner: str = "roc"
    """How `search=roc` partitions the input graph's vertices over the devices: a
    method of `tasoc.passes.soap.roc.partition.PARTITIONERS` (docs/soap-shard.md)."""

    def __post_init__(self) -> None:
        check_options(self)

    @paused_gc()  # its states hold 10^6 objects the collector would rescan again and again
    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require(self.contract, op, SoapShardFailed)
        start = time.perf_counter()
        deadline = Deadline.after(self.timeout)
        planner = self
        try:
            dag = dag_module.from_module(op)
            if self.search == GRAPH_SEARCH:
                dag = graph_search.lay_out(self, op, deadline)
                planner = replace(self, search="data-parallel")
            tried = profile.plan_meshes(planner, op, dag, deadline)
            chosen = profile.choose(self, tried)
            compared, notes = profile.compare(self, chosen, deadline)
        except ValueError as err:
            raise SoapShardFailed(str(err)) from None
        collectives = write_sharded(op, dag, chosen.plan, chosen.mesh)
        op.attributes[MACHINE_ATTR] = StringAttr(self.machine or chosen.machine.name)
        reporting.write_report(self, start, dag, chosen, tried, collectives, compared, notes)

    def summary(self, section: Mapping[str, Any]) -> Summary:
        """The search, mesh and simulated step against the baselines, memory per device
        against the capacity, the collectives and how the search stopped; warnings for
        a plan slower than a baseline the pass simulated and for ops whose batch the
        mesh cannot split (`reporting.summary`)."""
        return reporting.summary(section)

    def compared(self) -> tuple[str, ...]:
        """The searches to compare with (`compare=`), the pass's own left out."""
        given = self.compare
        if given is None:
            given = FRONTIER_COMPARE if self.objective == "frontier" else ()
        elif given == "none":
            given = ()
        elif isinstance(given, str):
            given = (given,)
        known = comparable_names()
        for name in given:
            if name not in known:
                raise ValueError(
                    f"compare must list searches among {', '.join(known)}, got {name!r}"
                )
        return tuple(name for name in given if name != self.search)

    def cap(self) -> int | None:
        """Option `memory-cap` in bytes; None when not given."""
        return None if self.memory_cap is None else parse_byte_size(self.memory_cap)

    def capacity(self, machine: Machine) -> int:
        """Each device's memory: `memory-cap`, else the machine's. A plan over it is
        infeasible (or, with `place=`, priced with the swaps that make it fit): no
        search writes, and no report divides by, a plan the device cannot hold."""
        cap = self.cap()
        return int(machine.device.memory_bytes) if cap is None else cap

    def verification_pair(self, before: ModuleOp, after: ModuleOp) -> tuple[ModuleOp, ModuleOp]:
        """The two programs `tasoc opt --verify-each` compares: the sharded program's
        one-device equal (collectives dropped, layouts removed) against the input, laid
        out as `search=roc` laid it out (the same partition: the layout's own
        equivalence with the input on permuted data is `tests/test_gnn.py`'s)."""
        if self.search == GRAPH_SEARCH:
            before = graph_search.laid_out_input(self, before)
        return unsharded(before), unsharded(after)
