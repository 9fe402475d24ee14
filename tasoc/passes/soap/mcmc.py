"""`search=mcmc`: FlexFlow's Metropolis-Hastings search over the SOAP space (Jia
thesis §3.5), priced by the execution simulator (`tasoc.sim`).

A strategy is every op's configuration. The search starts from the plans it is given
(the practitioners' baselines that apply, each plan once, and, from the pass,
Spartan's greedy tiling), every op
replicated (one device's program on each: no communication at all, which wins on
small steps where collectives' latency outweighs the compute they save) and a random
strategy, one chain each, and proposes one change at a time: a random
op takes a random other legal configuration of its rule on its mesh. The proposal is
priced by editing the step's task graph (`ShardedStep.set_config`) and re-simulating
only what the edit touches (`DeltaSimulator.update`), never by rebuilding IR. It is
accepted with eq. 3.1's probability min(1, exp(beta (cost_old - cost_new))), costs in
units of the chain's starting time, so `beta` means the same on every model and
machine: at beta=20 a proposal 5 % slower than the start is accepted with
probability 1/e. A strategy whose per-device peak memory exceeds `memory-cap` costs
infinitely much (infeasible): the chain never moves from a feasible strategy to one.

A chain stops when its share of the `budget` (proposals) is spent, at the deadline,
or when its best has not improved for the second half of its proposals (§3.5.2:
"cannot further improve the best discovered strategy for half of the search time",
counted in proposals so that a seed gives one result whatever the machine's speed;
only the timeout depends on the clock), and for at least `PATIENCE` proposals per
alternative configuration. The search returns the best strategy any chain found:
never worse than any baseline it was given, which are candidates.

`SimulatedStrategy` (a strategy being edited op by op, and its simulated cost) and
`Settings` are shared with `search=exhaustive` (`exhaustive.py`).
"""

from __future__ import annotations

import dataclasses
import functools
import heapq
import math
import random
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tasoc.cost.machines import Machine
from tasoc.ir import soap
from tasoc.ir.dag import Node
from tasoc.ir.limits import bytes_and_size
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Mesh, OpRule
from tasoc.passes.search import Deadline, Progress, SearchOutcome, StopReason
from tasoc.passes.soap.plan import PlanError, Prescription, Problem, cheapest_config, complete
from tasoc.passes.soap.swap_pricing import SwapPricing
from tasoc.sim.core import DeltaSimulator, paused_gc, simulate
from tasoc.sim.parallel import ShardedStep

Objective = Literal["time", "frontier", "mini-time", "mini-parallelism", "profile"]
"""TensorOpt's objectives (§4.1) and FlexFlow's (`time`: the fastest strategy)."""

Heuristic = Literal["memory", "time", "weighted"]
"""How FT's heuristic elimination chooses a node's option (`frontier.py`)."""

PROPAGATING = 0.5
"""The share of proposals that propagate to the changed op's readers (`Chain._propagate`);
the others are FlexFlow's, one op alone."""

PROPAGATION_LIMIT = 256
"""The most readers one propagating proposal re-chooses: a bound on its price (each
costs a few resharding estimates and an edit of the step), not on how far it reaches
in a small step."""

PATIENCE = 4
"""A chain runs at least this many proposals per alternative configuration (of all
ops together) without improving before it stops (a chain stopped by the half-time
rule after a handful of proposals would not have seen most single changes)."""


class MemoryCapError(ValueError):
    """No strategy the search saw fits under `memory-cap`; one line naming the smallest
    per-device memory it found."""


@dataclass(frozen=True)
class Settings:
    """What a search is given besides the problem: the machine it prices on and its limits."""

    machine: Machine
    budget: int
    """Proposals (mcmc) or complete strategies simulated (exhaustive)."""
    beta: float
    memory_cap: int | None
    """Bytes per device; None: no cap."""
    seed: int
    deadline: Deadline
    objective: Objective = "time"
    """What the cost-graph searches choose (`cost_searches.py`)."""
    pick: str | None = None
    """Which frontier point `objective=frontier` writes (`fastest`, `smallest`, a number)."""
    heuristic: Heuristic | None = "weighted"
    """How FT fixes a node it cannot eliminate exactly; None: it conditions (exact)."""
    max_points: int | None = None
    """The most points FT keeps per frontier (None: all, exact)."""
    place: SwapPricing | None = None
    """How a strategy over `memory_cap` is priced by swapping (`soap-shard{place=}`);
    None: it is infeasible."""
    progress: Progress | None = None
    """Hears of the proposals (mcmc) or strategies simulated (exhaustive) so far and
    the best cost (`search.search_progress`)."""

    @property
    def traces_memory(self) -> bool:
        """Whether the search simulates memory: only a memory cap needs it."""
        return self.memory_cap is not None


@functools.lru_cache(maxsize=1 << 12)
def configurations(rule: OpRule, mesh: Mesh) -> tuple[Config, ...]:
    """Every legal configuration of `rule` on `mesh` (the unsplit one first)."""
    return tuple(soap.configurations(rule, mesh))


def mesh_of(plan: Plan, problem: Problem, node: Node) -> Mesh:
    """The mesh (whole mesh or device group) `node` runs on in `plan`."""
    name = plan.values[node.results[0]].mesh
    return next((mesh for mesh in plan.meshes if mesh.name == name), problem.mesh)


@dataclass
class SimulatedStrategy:
    """A strategy being edited one op at a time, and its simulated iteration time: the
    step's task graph (`ShardedStep`) and the delta simulator over it.

    `ShardedStep.set_config` reads an op's operands complete, so it is its own inverse
    only where no op reads partial sums; `normalize` first brings every op there (what
    completion's partial sums saved is recovered at the end by `polish`)."""

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
    smallest_memory: int = field(init=False)
    """The smallest per-device peak memory this strategy has had (for `MemoryCapError`)."""
    edited: bool = field(default=False, init=False)
    """Whether ops were `set` since the last update (the simulation is behind them)."""
    _peak: int | None = field(default=None, init=False, repr=False)
    """`memory` as of the last `set` (a replay of every device's tasks: once per edit)."""

    def __post_init__(self) -> None:
        self.smallest_memory = self.memory

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
    ) -> SimulatedStrategy:
        """`plan` simulated on `machine`; without `memory` (a search without a memory
        cap) its time alone, and `memory` reads 0 (`DeltaSimulator`); over the cap,
        priced by swapping when `place` says how."""
        step = ShardedStep(problem.dag, copy_plan(plan), machine, mesh=problem.mesh)
        simulator = DeltaSimulator(step.graph, memory=memory)
        return cls(problem, step, simulator, dict(plan.configs), memory_cap, place)

    @classmethod
    def under(cls, settings: Settings, problem: Problem, plan: Plan) -> SimulatedStrategy:
        """`plan` simulated as a search with `settings` prices it: on its machine, memory
        traced only under a cap, strategies over it priced by swapping with `place`."""
        return cls.of(
            problem,
            plan,
            settings.machine,
            settings.memory_cap,
            memory=settings.traces_memory,
            place=settings.place,
        )

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
            self._peak = self.step.peak_memory()
        return self._peak

    @property
    def cost(self) -> float:
        """The time; over the memory cap, the time with the stall of swapping to fit it
        (`place`), else infinity."""
        if self.memory_cap is None or self.memory <= self.memory_cap:
            return self.time
        if self.place is None:
            return math.inf
        return self.time + self.place.stall(self.problem.dag, self.plan, self.problem.mesh)

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

    def set(self, node: Node, config: Config) -> None:
        """`node` in `config`, without re-simulating (`update` does)."""
        start = time.perf_counter()
        self._peak = None
        try:
            self.step.set_config(node, config)
        finally:
            self.edit_seconds += time.perf_counter() - start
        self.configs[node] = config
        self.edited = True

    def update(self) -> float:
        """Re-simulate after `set`s (delta simulation); the new cost."""
        start = time.perf_counter()
        self.simulator.update()
        self.update_seconds += time.perf_counter() - start
        self.updates += 1
        self.edited = False
        self.smallest_memory = min(self.smallest_memory, self.memory)
        return self.cost

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
    second over `states`' proposals, and against one full simulation of the last
    state's strategy, as the thesis measures it (§3.4.2: build the task graph, then
    simulate; Table 3.4) and of the simulator alone (`simulate` of the built graph
    against an `update`). None where the search made no proposal (`proposals`: the
    strategies it priced) or nothing was simulated: a speed of no work is no figure."""
    updates = sum(state.updates for state in states) if proposals else 0
    update_seconds = sum(state.update_seconds for state in states)
    delta = (update_seconds + sum(state.edit_seconds for state in states)) / max(updates, 1)
    names = ("simulations_per_second", "full_simulations_per_second", "delta_vs_full")
    if not updates or not states:
        return dict.fromkeys((*names, "update_vs_simulate"))
    last = states[-1]
    start = time.perf_counter()
    step = ShardedStep(
        last.problem.dag, copy_plan(last.plan), last.step.machine, mesh=last.problem.mesh
    )
    built = time.perf_counter()
    simulate(step.graph, memory=last.simulator.memory)
    done = time.perf_counter()
    return {
        "simulations_per_second": round(1 / max(delta, 1e-9), 1),
        "full_simulations_per_second": round(1 / (done - start), 1),
        "delta_vs_full": round((done - start) / max(delta, 1e-9), 2),
        "update_vs_simulate": round((done - built) / max(update_seconds / updates, 1e-9), 2),
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


@dataclass
class Best:
    """The cheapest strategy a search has seen, as the plan it is written as, and the
    smallest per-device memory seen (for the memory cap's error)."""

    settings: Settings
    cost: float = math.inf
    plan: Plan | None = None
    origin: str = ""
    """The initial candidate whose chain found it."""
    smallest_memory: float = math.inf

    def offer(self, state: SimulatedStrategy, origin: str) -> None:
        """`state` as it stands, kept when it costs less than the best."""
        self.smallest_memory = min(self.smallest_memory, state.smallest_memory)
        if state.cost < self.cost:
            self.cost, self.plan, self.origin = state.cost, copy_plan(state.plan), origin

    def polish(self, problem: Problem) -> None:
        """The best configurations completed again (`plan.complete`), which lets linear
        ops read partial sums where that saves bytes (the searches' edits read
        operands complete), kept when that simulates faster. Plans on one mesh only."""
        if self.plan is None or self.plan.meshes:
            return
        try:
            plan = complete(problem, Prescription(configs=dict(self.plan.configs)))
        except PlanError:
            return
        settings = self.settings
        self.offer(
            SimulatedStrategy.under(settings, problem, plan),
            self.origin,
        )

    def result(self) -> tuple[float, Plan]:
        """The cost and plan; MemoryCapError when nothing fit under the cap."""
        if self.plan is None:
            swapping = (
                f", even swapping (place={self.settings.place.placer})"
                if self.settings.place is not None
                else ""
            )
            raise MemoryCapError(
                f"no strategy fits under memory-cap={bytes_and_size(self.settings.memory_cap)} "
                f"per device{swapping}: the smallest per-device memory found is "
                f"{bytes_and_size(int(self.smallest_memory))}"
            )
        return self.cost, self.plan


def uniform_plan(problem: Problem, choose: Callable[[OpRule, Mesh], Config]) -> Plan | None:
    """Every op in the configuration `choose` gives it (a random one, the unsplit one),
    completed; None when completion finds an op its operands cannot reach so."""
    configs = {node: choose(rule, problem.mesh) for node, rule in problem.rules.items()}
    try:
        return complete(problem, Prescription(configs=configs))
    except PlanError:
        return None


@dataclass
class Chain:
    """One Metropolis-Hastings chain from one (normalized) initial strategy."""

    state: SimulatedStrategy
    choices: Mapping[Node, Sequence[Config]]
    """The ops proposals change (those with two configurations or more) and theirs."""
    rng: random.Random
    beta: float
    propagating: float = PROPAGATING
    """The share of proposals that propagate (`_propagate`)."""
    proposals: int = 0
    accepted: int = 0
    illegal: int = 0
    propagated: int = 0
    """Proposals that propagated, and so changed more than their op."""

    def __post_init__(self) -> None:
        step = self.state.step
        self._consumers = step.dag.consumers()
        self._position = {node: i for i, node in enumerate(step.order)}

    def run(
        self, budget: int, deadline: Deadline, progress: Progress | None = None
    ) -> tuple[dict[Node, Config], float, StopReason]:
        """The best configurations this chain found and their cost, and why it stopped;
        `progress` hears of its proposals and best cost after each proposal."""
        ops = list(self.choices)
        patience = PATIENCE * sum(len(options) - 1 for options in self.choices.values())
        scale = self.state.time or 1.0
        current = self.state.cost
        best, best_cost, since_best = dict(self.state.configs), current, 0
        while True:
            if self.proposals >= budget:
                return best, best_cost, StopReason.BUDGET
            if deadline.expired():
                return best, best_cost, StopReason.TIMEOUT
            if not ops or since_best > max(patience, self.proposals // 2):
                return best, best_cost, StopReason.CONVERGED
            if progress is not None:
                progress(self.proposals, best_cost)
            self.proposals += 1
            since_best += 1
            node = self.rng.choice(ops)
            old = self.state.configs[node]
            others = [config for config in self.choices[node] if config != old]
            propagate = self.rng.random() < self.propagating
            try:
                self.state.set(node, self.rng.choice(others))
            except ValueError:  # a layout a reader cannot reach: the step is unchanged
                self.illegal += 1
                continue
            undo = [(node, old), *(self._propagate(node) if propagate else ())]
            self.propagated += len(undo) > 1
            cost = self.state.update()
            if self._accept(current, cost, scale):
                self.accepted += 1
                current = cost
                if cost < best_cost:
                    best, best_cost, since_best = dict(self.state.configs), cost, 0
            else:
                for changed, config in reversed(undo):
                    self.state.set(changed, config)
                current = self.state.update()

    def _propagate(self, node: Node) -> list[tuple[Node, Config]]:
        """After `node` changed: its readers, and theirs in turn (in program order, up
        to `PROPAGATION_LIMIT` of them), re-choose the configuration completion would
        give them now (`cheapest_config`); the readers changed, with their old
        configurations.

        One op's change alone is mostly a change *against* its neighbours, costing
        the communication between them: a dense layer split by features while the
        rest stays data parallel gathers its result back, and its backward ops, which
        read that split, still compute as before. FlexFlow gives an op's forward and
        backward one configuration (its tasks are the op's, both passes); a tasoc
        training step has them as separate ops, which only move together when the
        change propagates."""
        step, problem = self.state.step, self.state.problem
        queue = [
            (self._position[use.node], use.node)
            for v in node.results
            for use in self._consumers.get(v, ())
        ]
        heapq.heapify(queue)
        seen: set[Node] = {node}
        changed: list[tuple[Node, Config]] = []
        while queue and len(changed) < PROPAGATION_LIMIT:
            _, reader = heapq.heappop(queue)
            if reader in seen or reader not in self.choices:
                continue
            seen.add(reader)
            old = self.state.configs[reader]
            try:
                chosen = cheapest_config(
                    problem, step.plan, reader, step.mesh_of(reader), self.choices[reader]
                )
                if chosen == old:
                    continue
                self.state.set(reader, chosen)
            except ValueError:  # no reachable configuration, or a reader cannot follow
                continue
            changed.append((reader, old))
            for value in reader.results:
                for use in self._consumers.get(value, ()):
                    heapq.heappush(queue, (self._position[use.node], use.node))
        return changed

    def _accept(self, current: float, proposed: float, scale: float) -> bool:
        """Eq. 3.1: always when not worse, else with probability exp(beta (old - new))."""
        if proposed <= current:
            return True
        if proposed == math.inf:
            return False
        return self.rng.random() < math.exp(self.beta * (current - proposed) / scale)


def _chain_progress(progress: Progress | None, done: int, best: float) -> Progress | None:
    """A chain's progress as the search's: the proposals of the chains before it
    (`done`) added, and the best cost of any chain so far (`best`)."""
    if progress is None:
        return None
    return lambda proposals, cost: progress(done + proposals, min(best, cost))


@paused_gc()  # steps of 10^5 tasks built and edited: `paused_gc` says why
def search(
    problem: Problem, baselines: Mapping[str, Plan], settings: Settings
) -> SearchOutcome[Plan]:
    """The best strategy chains from `baselines` (data parallel and the others) and a random
    strategy find (see the module docstring)."""
    started = time.perf_counter()
    rng = random.Random(settings.seed)
    made = {
        "replicated": uniform_plan(problem, lambda rule, mesh: {}),
        "random": uniform_plan(problem, lambda rule, mesh: rng.choice(configurations(rule, mesh))),
    }
    starts = {**baselines, **{name: plan for name, plan in made.items() if plan is not None}}
    best = Best(settings)
    chains: dict[str, dict[str, Any]] = {}
    stops: list[StopReason] = []
    totals = {"proposals": 0, "accepted": 0, "illegal": 0, "propagated": 0}
    states: list[SimulatedStrategy] = []
    for index, (origin, plan) in enumerate(starts.items()):
        left = len(starts) - index
        state = SimulatedStrategy.under(settings, problem, plan)
        start_cost = state.cost
        best.offer(state, origin)
        deadline = settings.deadline.share(1 / left)
        if not deadline.expired():
            state.normalize()
        choices = {
            node: options
            for node in problem.rules
            if len(options := configurations(problem.rules[node], mesh_of(plan, problem, node))) > 1
        }
        chain = Chain(state, choices, rng, settings.beta)
        progress = _chain_progress(settings.progress, totals["proposals"], best.cost)
        configs, cost, stopped = chain.run(
            (settings.budget - totals["proposals"]) // left, deadline, progress
        )
        if cost < best.cost:
            state.move_to(configs)
            best.offer(state, origin)
        stops.append(stopped)
        chains[origin] = {
            "start": start_cost,
            "best": min(cost, start_cost),
            "proposals": chain.proposals,
            "stopped": str(stopped),
        }
        for key in totals:
            totals[key] += getattr(chain, key)
        states.append(state)
    statistics = simulation_statistics(states, totals["proposals"])
    best.polish(problem)
    cost, plan = best.result()
    details = {
        "proposals": totals["proposals"],
        "accepted": totals["accepted"],
        "acceptance_rate": round(totals["accepted"] / max(totals["proposals"], 1), 4),
        "illegal_proposals": totals["illegal"],
        "propagated_proposals": totals["propagated"],
        "simulations": sum(state.updates for state in states),
        **statistics,
        "found_by": best.origin,
        "chains": chains,
    }
    stopped = next(
        (reason for reason in (StopReason.TIMEOUT, StopReason.BUDGET) if reason in stops),
        StopReason.CONVERGED,
    )
    return SearchOutcome(
        best=plan,
        cost_before=chains["data-parallel"]["start"],
        cost_after=cost,
        seconds=time.perf_counter() - started,
        stopped=stopped,
        details=details,
    )
