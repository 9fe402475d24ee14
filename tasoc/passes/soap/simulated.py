"""A strategy priced by the one simulator, edited op by op: what every soap search
that simulates (`mcmc`, `exhaustive`, `auto`) moves through, and what the pass and the
cost-graph searches simulate their plans with.

The step's task graph (`ShardedStep`) is built once and edited in place; the delta
simulator (`DeltaSimulator.update`) re-times only what an edit touches.

Two ways to edit. `edit` (MCMC's) gives an op a configuration as completion would,
reading partial sums where its producers leave them and it is linear in them, and
returns what it changed as `Edit`s that `restore` undoes exactly: a chain prices its
proposals on the plans it would write. `set` (the exhaustive walk's, over
configurations alone) reads operands complete, and is its own inverse once
`normalize` has brought every op there.
"""

from __future__ import annotations

import dataclasses
import math
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Node, Use, Value
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Sharding
from tasoc.passes.soap.plan import (
    Problem,
    cheapest_config,
    operand_layouts,
    result_layouts,
    runs,
)
from tasoc.passes.soap.swap_pricing import SwapPricing
from tasoc.sim.core import DeltaSimulator, simulate
from tasoc.sim.parallel import ShardedStep

DERIVED_EDITS = 64
"""The most op edits a step is derived with from another (`SimulatedStrategy.of`): an
edit of an op and its neighbours' communication costs about a sixtieth of building a
3,000-op step afresh."""


@dataclass(frozen=True, slots=True)
class Priced:
    """A strategy's simulated figures, kept while its state goes on being edited: what
    a report shows of a baseline (`SoapProblem.price`)."""

    time: float
    memory: int
    cost: float


@dataclass(frozen=True, slots=True)
class Edit:
    """One op as it was before an edit (`SimulatedStrategy.edit`): what `restore`
    puts back."""

    node: Node
    config: Config
    operands: tuple[Sharding, ...]


@dataclass
class SimulatedStrategy:
    """A strategy being edited one op at a time, and its simulated iteration time: the
    step's task graph (`ShardedStep`) and the delta simulator over it.

    `edit` keeps partial sums and undoes exactly (`restore`); `set` reads an op's
    operands complete, so it is its own inverse only where no op reads partial sums:
    `normalize` first brings every op there (what completion's partial sums saved is
    recovered at the end by `polish`)."""

    problem: Problem
    step: ShardedStep
    simulator: DeltaSimulator
    configs: dict[Node, Config]
    memory_cap: int | None
    place: SwapPricing | None = None
    """Prices a strategy over `memory_cap` by swapping (`swap_pricing.py`)."""
    updates: int = 0
    update_seconds: float = 0.0
    """Seconds spent in the delta simulator's updates..."""
    edit_seconds: float = 0.0
    """... and editing the task graph for them (`ShardedStep.set_config`)."""
    full_seconds: tuple[float, float] | None = field(default=None, init=False)
    """Seconds its task graph took to build and to simulate in full, where it was built
    (not derived): the thesis' full simulation, which `simulation_statistics` compares
    a delta update with."""
    smallest_memory: float = field(init=False)
    """The smallest per-device peak memory this strategy has had over the cap, once its
    memory was checked or read (for `MemoryCapError`; at most the cap once under it)."""
    edited: bool = field(default=False, init=False)
    """Whether ops were `set` since the last update (the simulation is behind them)."""
    pristine: bool = field(default=True, init=False)
    """Whether no op was ever `set`: the step is as built (or derived), with a fresh
    build's task ids, so it simulates as one, ties and all (`SoapProblem.state_of`)."""
    _low: float | None = field(default=None, init=False, repr=False)
    """The memory check's lower bound of the peak, where it told "over" alone (`over_cap`)."""
    _peak: int | None = field(default=None, init=False, repr=False)
    """`memory` as of the last `set` (a replay of every device's tasks: once per edit)."""
    consumers: Mapping[Value, Sequence[Use]] = field(init=False, repr=False)
    run_of: Mapping[Node, int] = field(init=False, repr=False)
    """Each op's run on a program on device groups (`plan.runs`): partial sums stay in one."""

    def __post_init__(self) -> None:
        self.smallest_memory = math.inf  # found when the cap is first checked (`over_cap`)
        self.consumers = self.step.dag.consumers()
        order = self.step.order
        self.run_of = (
            runs(order, {node: self.step.mesh_of(node) for node in order})
            if self.plan.meshes
            else {}
        )

    @classmethod
    def of(
        cls,
        problem: Problem,
        plan: Plan,
        machine: Machine,
        memory_cap: int | None,
        *,
        memory: bool = True,
        place: SwapPricing | None = None,
        near: Sequence[SimulatedStrategy] = (),
    ) -> SimulatedStrategy:
        """`plan` simulated on `machine`; without `memory` (a search without a memory
        cap) its time alone, and `memory` reads 0 (`DeltaSimulator`); over the cap,
        priced by swapping when `place` says how. Its step is derived from the first
        state of `near` (on the same machine) within `DERIVED_EDITS` op edits of it
        (`ShardedStep.derived`: the same task graph as a build's), else built."""
        start = time.perf_counter()
        step = next(
            (
                derived
                for other in near
                if other.step.machine == machine
                and not other.edited
                and (derived := other.step.derived(plan, DERIVED_EDITS)) is not None
            ),
            None,
        )
        built = None
        if step is None:
            step = ShardedStep(
                problem.dag,
                copy_plan(plan),
                machine,
                mesh=problem.mesh,
                signature=problem.signature,
            )
            built = time.perf_counter() - start
        start = time.perf_counter()
        simulator = DeltaSimulator(step.graph, memory=memory)
        state = cls(problem, step, simulator, dict(plan.configs), memory_cap, place)
        if built is not None:
            state.full_seconds = (built, time.perf_counter() - start)
        return state

    @property
    def time(self) -> float:
        """Simulated iteration time (seconds)."""
        return self.simulator.timeline.makespan

    @property
    def memory(self) -> int:
        """The largest device's peak bytes (`ShardedStep.peak_memory`); 0 when memory
        is not simulated."""
        if not self.simulator.memory:
            return 0
        if self._peak is None:
            self._known(self.step.peak_memory())
        return self._peak  # type: ignore[return-value]

    def _known(self, peak: int) -> None:
        """The peak memory as of the last `set`, found."""
        self._peak = peak
        self.smallest_memory = min(self.smallest_memory, peak)

    @property
    def cost(self) -> float:
        """The time; over the memory cap, the time with the stall of swapping to fit it
        (`place`), else infinity."""
        if self.memory_cap is None or not self.over_cap():
            return self.time
        if self.place is None:
            return math.inf
        return self.time + self.place.stall(self.problem.dag, self.plan, self.problem.mesh)

    def over_cap(self) -> bool:
        """Whether the peak memory exceeds the cap, told by bounds on it
        (`ShardedStep.peak_bounds`) where the peak itself is not known: a proposal's
        memory check without the full replay's second heap packing, or any packing
        when the bytes live at once are already over. The peak is kept where the
        bounds give it, or where it is over the cap and below `smallest_memory` (the
        error's figure), but for a state never edited: there the lower bound waits
        for `smallest_below` (a start every op replicated on 64 devices is over the
        cap many times, and replaying it costs seconds). A plan under the cap leaves
        `smallest_memory` at most its upper bound, a figure read only when nothing
        fits (`Best.result`)."""
        cap = self.memory_cap
        if cap is None or not self.simulator.memory:
            return False
        if self._peak is None:
            bounds = self.step.peak_bounds(cap)
            if bounds.exact is not None:
                self._known(bounds.exact)
            elif not bounds.over(cap):
                self.smallest_memory = min(self.smallest_memory, int(bounds.high))
                return False
            elif self.pristine or bounds.low >= self.smallest_memory:
                self._low = bounds.low
                return True
        return self.memory > cap

    def smallest_below(self, bound: float) -> float:
        """`smallest_memory`, made exact where the peak as it stands, over the cap, may
        be below `bound` (`Best.offer`'s smallest so far): any figure at least `bound`
        serves the same."""
        if self._peak is None and self._low is not None and self._low < bound:
            self._known(self.step.peak_memory())
        return self.smallest_memory

    def priced(self) -> Priced:
        """The figures as they stand."""
        return Priced(self.time, self.memory, self.cost)

    @property
    def plan(self) -> Plan:
        """The plan as it stands (the step's own: `copy_plan` it to keep it)."""
        return self.step.plan

    def normalize(self) -> None:
        """Every op reads its operands complete, in its configuration (readers first, so
        no producer stops making partial sums a reader still wants). Not counted among
        the search's simulations: it is setting up, not a proposal."""
        for node in reversed(self.step.order):
            if any(operand.unreduced for operand in self.plan.operands.get(node, ())):
                self.set(node, self.configs[node])
        self.simulator.update()
        self.edit_seconds = 0.0
        self.edited = False

    def set(self, node: Node, config: Config, operands: Sequence[Sharding] | None = None) -> None:
        """`node` in `config` reading `operands` (complete by default), without
        re-simulating (`update` does)."""
        start = time.perf_counter()
        self._peak = self._low = None
        try:
            self.step.set_config(node, config, operands)
        finally:
            self.edit_seconds += time.perf_counter() - start
        self.configs[node] = config
        self.edited = True
        self.pristine = False

    def choose(
        self, node: Node, candidates: Sequence[Config]
    ) -> tuple[Config, tuple[Sharding, ...]]:
        """The configuration of `candidates` completion would give `node` in the plan as
        it stands, and the operand layouts it would read (`plan.cheapest_config`)."""
        return cheapest_config(
            self.problem, self.plan, node, self.step.mesh_of(node), candidates, self.run_of
        )

    def edit(self, node: Node, config: Config, operands: Sequence[Sharding]) -> list[Edit]:
        """`node` in `config` reading `operands` (`choose`'s), without re-simulating;
        first, every reader that reads partial sums its new results no longer hold
        reads them complete (and so on down its own readers). The ops changed as they
        were, in the order changed: `restore` undoes them. A ValueError (an illegal
        layout) leaves the step as it was."""
        edits: list[Edit] = []
        try:
            self._edit(node, config, tuple(operands), edits)
        except ValueError:
            self.restore(edits)
            raise
        return edits

    def _edit(
        self, node: Node, config: Config, operands: tuple[Sharding, ...], edits: list[Edit]
    ) -> None:
        rules, plan = self.problem.rules, self.plan
        results = result_layouts(rules[node], operands, self.step.mesh_of(node).name)
        for value, result in zip(node.results, results, strict=True):
            for use in self.consumers.get(value, ()):
                need = plan.operands[use.node][use.operand]
                if need.unreduced and not set(need.unreduced) <= set(result.unreduced):
                    reader, kept = use.node, self.configs[use.node]
                    complete = operand_layouts(rules[reader], kept, self.step.mesh_of(reader).name)
                    self._edit(reader, kept, complete, edits)
        edits.append(Edit(node, self.configs[node], plan.operands[node]))
        self.set(node, config, operands)

    def restore(self, edits: Sequence[Edit]) -> None:
        """Undo `edits` (`edit`'s), last first: the step is again as it was, exactly."""
        for undone in reversed(edits):
            self.set(undone.node, undone.config, undone.operands)

    def update(self) -> float:
        """Re-simulate after `set`s (delta simulation); the new cost."""
        self.resimulate()
        return self.cost

    def resimulate(self) -> None:
        """Re-simulate after `set`s (delta simulation), the time alone: the memory
        replay (`memory`, a cap's check) waits until `cost` or `memory` is read, which
        a proposal rejected on its time alone, or undone, never needs."""
        start = time.perf_counter()
        self.simulator.update()
        self.update_seconds += time.perf_counter() - start
        self.updates += 1
        self.edited = False

    def move_to(self, configs: Mapping[Node, Config]) -> float:
        """Every op in its configuration of `configs`; the new cost. Where that changes
        nothing the simulation stands, and no update is made or counted: the search's
        statistics are of the simulations it needed."""
        for node, config in configs.items():
            if self.configs[node] != config:
                self.set(node, config)
        return self.update() if self.edited else self.cost


def simulation_statistics(
    states: Sequence[SimulatedStrategy], proposals: int
) -> dict[str, float | None]:
    """How fast a search simulated: delta updates (the edit and the update) per
    second over `states`' proposals, and against one full simulation, as the thesis
    measures it (§3.4.2: build the task graph, then simulate; Table 3.4) and of the
    simulator alone (`simulate` of the built graph against an `update`). The full
    simulation is the last built state's own, as the search made it (`full_seconds`);
    where every state was derived, the last state's strategy built and simulated anew.
    None where the search made no proposal (`proposals`: the strategies it priced) or
    nothing was simulated: a speed of no work is no figure."""
    updates = sum(state.updates for state in states) if proposals else 0
    update_seconds = sum(state.update_seconds for state in states)
    delta = (update_seconds + sum(state.edit_seconds for state in states)) / max(updates, 1)
    names = ("simulations_per_second", "full_simulations_per_second", "delta_vs_full")
    if not updates or not states:
        return dict.fromkeys((*names, "update_vs_simulate"))
    timed = [state.full_seconds for state in states if state.full_seconds is not None]
    if timed:
        build, full = timed[-1]
    else:
        last = states[-1]
        start = time.perf_counter()
        step = ShardedStep(
            last.problem.dag, copy_plan(last.plan), last.step.machine, mesh=last.problem.mesh
        )
        built = time.perf_counter()
        simulate(step.graph, memory=last.simulator.memory)
        build, full = built - start, time.perf_counter() - built
    return {
        "simulations_per_second": round(1 / max(delta, 1e-9), 1),
        "full_simulations_per_second": round(1 / (build + full), 1),
        "delta_vs_full": round((build + full) / max(delta, 1e-9), 2),
        "update_vs_simulate": round(full / max(update_seconds / updates, 1e-9), 2),
    }


def copy_plan(plan: Plan) -> Plan:
    """A copy `ShardedStep` may edit (it edits its plan in place) leaving `plan` as it is."""
    return dataclasses.replace(
        plan,
        configs=dict(plan.configs),
        operands=dict(plan.operands),
        values=dict(plan.values),
        notes=list(plan.notes),
    )
