"""What every soap search is given, and what they share to answer it.

A soap search is one function (`searches.SEARCHES`):

    search(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits) -> SearchOutcome[Plan]

- `problem`: the step on its mesh and its space (`program`: the dag, the mesh, every
  op's SOAP rule and so its legal configurations, `configurations`), how a plan is
  priced (`machine`, each device's `memory_cap`, swapping with `place`), the
  `objective` and a few knobs of particular searches (`Tuning`);
- `starts`: the completed plans the search starts from, by origin (the practitioners'
  baselines that apply, each plan once; `data-parallel` always among them);
- `limits`: the one contract's limits (`passes/search.py`): a budget of steps, a
  deadline, a seed and a progress callback.

It returns the best plan it found as a `SearchOutcome` (its `seconds` measured from
its limits' deadline, so a search made of searches, `auto`, reports the whole), never
a plan over `memory_cap` (it raises `MemoryCapError` when nothing fits). Searches
price plans with the one simulator (`problem.simulate`, a `SimulatedStrategy`) and
keep the cheapest with `Best`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal

from tasoc.cost.machines import Machine
from tasoc.ir import soap
from tasoc.ir.dag import Node
from tasoc.ir.limits import bytes_and_size
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Mesh, OpRule
from tasoc.passes.search import Deadline, Progress
from tasoc.passes.soap.plan import PlanError, Prescription, Problem, complete
from tasoc.passes.soap.simulated import Priced, SimulatedStrategy, copy_plan
from tasoc.passes.soap.swap_pricing import SwapPricing

Objective = Literal["time", "frontier", "mini-time", "mini-parallelism", "profile"]
"""TensorOpt's objectives (§4.1) and FlexFlow's (`time`: the fastest strategy)."""

Heuristic = Literal["memory", "time", "weighted"]
"""How FT's heuristic elimination chooses a node's option (`frontier.py`)."""


class MemoryCapError(ValueError):
    """No strategy the search saw fits under `memory-cap`; one line naming the smallest
    per-device memory it found."""


@dataclass(frozen=True)
class Limits:
    """When a search stops (the contract of `passes/search.py`) and what it draws from."""

    budget: int
    """Steps: proposals (mcmc), complete strategies simulated (exhaustive); the
    cost-graph searches take none."""
    deadline: Deadline
    seed: int = 0
    progress: Progress | None = None
    """Hears of the steps so far and the best cost (`search.search_progress`)."""

    def share(self, fraction: float) -> Limits:
        """The limits of a phase: `fraction` of the time left, the budget whole, drawing
        no progress bar (the phase's caller owns it)."""
        return dataclasses.replace(self, deadline=self.deadline.share(fraction), progress=None)


@dataclass(frozen=True)
class Tuning:
    """The knobs of particular searches (the pass's options of the same names)."""

    beta: float = 100.0
    """MCMC: eq. 3.1's inverse temperature, costs in units of a chain's start."""
    heuristic: Heuristic | None = "weighted"
    """FT: how it fixes a node it cannot eliminate exactly; None: it conditions (exact)."""
    max_points: int | None = None
    """FT: the most points kept per frontier (None: all, exact)."""


@dataclass(frozen=True)
class SoapProblem:
    """A step to plan on its mesh, how plans of it are priced, and what is wanted."""

    program: Problem
    """The program on its mesh: the dag, every op's SOAP rule, the training roles."""
    machine: Machine
    memory_cap: int | None = None
    """Bytes per device a plan may hold; None: no cap (memory is then not simulated)."""
    objective: Objective = "time"
    pick: str | None = None
    """Which frontier point `objective=frontier` writes (`fastest`, `smallest`, a number)."""
    place: SwapPricing | None = None
    """How a strategy over `memory_cap` is priced by swapping (`soap-shard{place=}`);
    None: it is infeasible."""
    tuning: Tuning = field(default_factory=Tuning)
    _priced: dict[int, tuple[Plan, Priced]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """`price`'s figures by plan (the plan kept with them, so its id stays its own)."""
    _states: list[SimulatedStrategy] = field(
        default_factory=list, init=False, repr=False, compare=False
    )
    """Every state this problem made, as chains have left them (`state_of`)."""
    _waiting: dict[int, tuple[Plan, SimulatedStrategy]] = field(
        default_factory=dict, init=False, repr=False, compare=False
    )
    """States `prepare` set aside for the `simulate` of a plan object, by the plan's id
    (the plan kept with it, so that its id stays its own)."""
    _taken: set[int] = field(default_factory=set, init=False, repr=False, compare=False)
    """The ids of the states `simulate` handed out or `prepare` set aside: a caller may
    edit them, so no other is given one of them."""

    def price(self, plan: Plan) -> Priced:
        """`plan`'s simulated figures, memory traced (what a report shows of a
        baseline), from a search's own simulation of it where it made one
        (`remember`, or a state of it never edited, `state_of`): a step of thousands of
        ops on 64 devices takes seconds to build."""
        if id(plan) not in self._priced:
            self.remember(plan, self.state_of(plan))
        return self._priced[id(plan)][1]

    def remember(self, plan: Plan, state: SimulatedStrategy) -> None:
        """Keep `state`'s figures as `plan`'s before a search edits it, where it traces
        memory (a report shows every baseline's peak)."""
        if state.simulator.memory and id(plan) not in self._priced:
            self._priced[id(plan)] = (plan, state.priced())

    @property
    def traces_memory(self) -> bool:
        """Whether the search simulates memory: only a memory cap needs it."""
        return self.memory_cap is not None

    def simulate(self, plan: Plan) -> SimulatedStrategy:
        """`plan` simulated as a search prices it: on the machine, memory traced only
        under a cap, a strategy over it priced by swapping with `place`; the caller
        may edit it. Where `prepare` set a state aside for this very plan object, that
        state is the answer."""
        kept = self._waiting.pop(id(plan), None)
        if kept is not None and kept[0] is plan and kept[1].pristine:
            return kept[1]
        state = self._made(plan, self.traces_memory)
        self._taken.add(id(state))
        return state

    def prepare(self, plan: Plan) -> None:
        """Make the state the next `simulate(plan)` (with this very plan object) will
        hand out, now: a state this problem made of an equal plan, never edited, traced
        alike and not handed out (the ILP's plan, simulated for its own outcome by
        `state_of`, is a chain's start next: one build less), else a new one.
        `search=auto` prepares its starts while HiGHS solves the ILP in another thread
        (`auto.py`)."""
        untaken = (s for s in self._unedited(plan, self.traces_memory) if id(s) not in self._taken)
        state = next(untaken, None) or self._made(plan, self.traces_memory)
        self._taken.add(id(state))
        self._waiting[id(plan)] = (plan, state)

    def _made(self, plan: Plan, memory: bool) -> SimulatedStrategy:
        """`plan` simulated, memory traced where `memory` says, derived from the
        nearest state this problem made where one is near enough
        (`ShardedStep.derived`: the same figures as a build), and kept among them."""
        state = SimulatedStrategy.of(
            self.program,
            plan,
            self.machine,
            self.memory_cap,
            memory=memory,
            place=self.place,
            near=self._states[::-1],
        )
        self._states.append(state)
        return state

    def simulated(self, plan: Plan) -> SimulatedStrategy:
        """`plan` priced as `simulate` prices it, for reading alone (the caller edits
        nothing): a state this problem simulated of an equal plan and never edited
        where there is one, else a new one. A chain's best completed again is mostly
        that best itself, simulated just before (`Best.polish`), and a step of
        thousands of ops takes a build and a memory check to price again."""
        return next(self._unedited(plan, self.traces_memory), None) or self._made(
            plan, self.traces_memory
        )

    def _unedited(self, plan: Plan, memory: bool) -> Iterator[SimulatedStrategy]:
        """The states this problem made of a plan equal to `plan`, never edited, memory
        traced as `memory` says, the newest first."""
        for state in reversed(self._states):
            if state.pristine and state.simulator.memory == memory and state.plan == plan:
                yield state

    def state_of(self, plan: Plan) -> SimulatedStrategy:
        """`plan` simulated with memory traced (what the pass reports and draws): a
        state a search simulated of `plan` and never edited (the written plan is mostly
        a start's, or a chain's best simulated afresh: building a 3,000-op step again
        costs what a search's last proposals would), else one derived from a state
        near it or built (`SimulatedStrategy.of`); the same figures either way."""
        return next(self._unedited(plan, memory=True), None) or self._made(plan, memory=True)

    def space(self, plan: Plan) -> dict[Node, tuple[Config, ...]]:
        """The ops a search may change, from `plan` (on the mesh or device group each
        runs on there), with their legal configurations: those with two or more."""
        rules = self.program.rules
        return {
            node: options
            for node in rules
            if len(options := configurations(rules[node], mesh_of(plan, self.program, node))) > 1
        }


@functools.lru_cache(maxsize=1 << 12)
def configurations(rule: OpRule, mesh: Mesh) -> tuple[Config, ...]:
    """Every legal configuration of `rule` on `mesh` (the unsplit one first)."""
    return tuple(soap.configurations(rule, mesh))


def mesh_of(plan: Plan, program: Problem, node: Node) -> Mesh:
    """The mesh (whole mesh or device group) `node` runs on in `plan`."""
    name = plan.values[node.results[0]].mesh
    return next((mesh for mesh in plan.meshes if mesh.name == name), program.mesh)


@dataclass
class Best:
    """The cheapest strategy a search has seen, as the plan it is written as, and the
    smallest per-device memory seen (for the memory cap's error)."""

    problem: SoapProblem
    cost: float = math.inf
    plan: Plan | None = None
    origin: str = ""
    """The start whose chain (or walk) found it."""
    smallest_memory: float = math.inf

    def offer(self, state: SimulatedStrategy, origin: str) -> None:
        """`state` as it stands, kept when it costs less than the best."""
        cost = state.cost  # checks the cap, which finds the memory the error names
        self.smallest_memory = min(self.smallest_memory, state.smallest_below(self.smallest_memory))
        if cost < self.cost:
            self.cost, self.plan, self.origin = cost, copy_plan(state.plan), origin

    def polish(self, plan: Plan | None = None, origin: str | None = None) -> None:
        """`plan`'s configurations (the best's by default) completed again
        (`plan.complete`), which lets linear ops read partial sums where that saves
        bytes (the exhaustive walk's edits read operands complete; a chain's keep
        those their ops could read when edited, not those a later edit made possible),
        offered. Plans on one mesh
        only."""
        plan = self.plan if plan is None else plan
        if plan is None or plan.meshes:
            return
        try:
            completed = complete(self.problem.program, Prescription(configs=dict(plan.configs)))
        except PlanError:
            return
        self.offer(self.problem.simulated(completed), self.origin if origin is None else origin)

    def result(self) -> tuple[float, Plan]:
        """The cost and plan; MemoryCapError when nothing fit under the cap."""
        if self.plan is None:
            place = self.problem.place
            swapping = f", even swapping (place={place.placer})" if place is not None else ""
            raise MemoryCapError(
                f"no strategy fits under memory-cap={bytes_and_size(self.problem.memory_cap)} "
                f"per device{swapping}: the smallest per-device memory found is "
                f"{bytes_and_size(int(self.smallest_memory))}"
            )
        return self.cost, self.plan


def starting_cost(problem: SoapProblem, starts: Mapping[str, Plan]) -> float:
    """The cost a search's outcome is measured against (`cost_before`): data parallel's
    simulated time, which every soap search is given as a start."""
    return problem.price(starts["data-parallel"]).time
