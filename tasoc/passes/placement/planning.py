"""Planning swaps within a capacity: the planner's plan, its baselines, their prices.

`plan_within` runs what `placement{search=...}` asks for and prices it beside the
baselines a user would otherwise run — *ideal* (infinite memory: the ops alone),
*lru* (SwapAdvisor's on-demand ODSwap) and *belady* (the swap planner with
prefetching, its prefetch windows tuned on the simulator: `prefetch.py`), both on the
step's own schedule — all on the one placed-step simulator
(`PlacementProblem.simulate`), and says how the plan's device memory moves over the
simulated iteration, beside the step's peak without placement (`memory_figure`).
`search=belady|lru` is that baseline's plan; a searching planner (`Searching`:
`search=ga`, `ga.py`) runs after the baselines with what is left of the deadline, and
its plan is kept only when it is faster than belady's — a search never makes the step
slower than the planner it starts from (the report says when belady's plan was kept).
With `recompute`, the swap planner's plans that recompute saved activations instead
of swapping some of them (`recompute.py`, then the joint choice of swapping and
recomputing value by value, `joint.py`) are priced too, as `recompute` (and each
seed schedule's plan without recomputation, as `seeds`: the GA plans seeds with one
window, the tuned planner per tensor), and the
fastest of those and the search's plan is the plan (`PlanningOutcome.chosen` names it).
The pass's `timeout` bounds all of it (`deadline`): past it, the prefetch tuning,
the search and the recomputation pricing stop and keep the fastest plan so far (scans
look at the clock every `CHECK_EVERY` ops); only the baselines' first plans (LRU, and
belady at one window) are made whatever the clock says, since a pass must return a
plan. A capacity the step's peak without placement fits in needs no swapping: the plan
moves nothing and a note says so. One below the largest single
op's working set cannot run at all: `CapacityTooSmall`, naming the op.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from typing import Any

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag, Node
from tasoc.ir.limits import format_bytes
from tasoc.ir.placement_plan import PlacementPlan
from tasoc.ir.training import TrainingSignature
from tasoc.passes.figures import MemoryFigure, MemorySeries
from tasoc.passes.placement.bound import LowerBound, lower_bound
from tasoc.passes.placement.joint import refine
from tasoc.passes.placement.prefetch import Tuned, tuned_plan
from tasoc.passes.placement.problem import NoPlanFound, PlacementProblem, Searcher, SearchLimits
from tasoc.passes.placement.recompute import RULES, Recomputed, plan_recomputing, recomputable
from tasoc.passes.placement.schedules import seed_orders
from tasoc.passes.placement.swap_planner import (
    CapacityTooSmall,
    OutOfTime,
    Policy,
    SwapSettings,
    plan_swaps,
    working_set,
)
from tasoc.passes.search import Deadline, SearchOutcome, search_progress
from tasoc.passes.summary import format_seconds
from tasoc.sim.placement import SWAP_IN, SWAP_OUT, PlacedSimulation

BASELINES: tuple[Policy, ...] = ("lru", "belady")

SEARCH_SHARE = 0.95
"""The part of what is left of the deadline a searching planner takes when it starts;
the rest is the pass's, to price the plan found and write it."""
JOINT_SHARE = 0.5
"""The part of what is left of the deadline, after the first rule is priced on the first
schedule, that the joint choice of swapping and recomputing may take there (`joint.py`);
the other rules and the seed schedules get the rest (and the joint choice again on the
plan that wins, when it is another)."""
SEARCH_SHARE_RECOMPUTING = 0.5
"""`SEARCH_SHARE` with `recompute`: the recomputation pricing, after the search, takes
about as long as a search on issue 32's models, so it gets the other half."""


def settings_for(policy: Policy, problem: PlacementProblem) -> SwapSettings:
    """The swap planner as each name runs it on `problem`: `belady` prefetches, `lru`
    swaps in on demand (right before the op that reads)."""
    return SwapSettings(
        problem.capacity, policy, prefetch=policy == "belady", in_place=problem.in_place
    )


@dataclass(frozen=True)
class Searching:
    """A searching planner for `plan_within`: its name (the `search` option), how to
    run it, and its limits."""

    name: str
    run: Searcher
    limits: SearchLimits
    unit: str = "plan"
    """What its progress counts (`search.search_progress`)."""
    total: int | None = None
    """How many of `unit` it takes at most (its budget)."""
    figure: str = "best"
    """The figure its progress reports beside: the best simulated seconds so far, or
    (`show`) another."""
    show: Callable[[float], str] = format_seconds


@dataclass
class PlanningOutcome:
    """The chosen plan and what the simulator says of it and of the baselines."""

    search: str
    plan: PlacementPlan
    simulated: dict[str, PlacedSimulation]
    """ideal, lru, belady and the search's, by name (one of them the plan)."""
    planner_seconds: dict[str, float]
    machine: Machine
    unplaced_peak: int
    """The step's peak device memory without placement (`liveness.peak_memory`)."""
    notes: list[str] = field(default_factory=list)
    searched: SearchOutcome[PlacementPlan] | None = None
    """A searching planner's outcome: its statistics go to the report."""
    seed: int = 0
    recomputed: Recomputed | None = None
    """The fastest recomputing plan, when `recompute` found one."""
    chosen: str = ""
    """The entry of `simulated` that is the plan: the search's unless `recompute` won."""
    bound: LowerBound | None = None
    """A floor on any plan's simulated time under the capacity (`bound.py`)."""

    @property
    def plan_name(self) -> str:
        return self.chosen or self.search

    def report(self) -> dict[str, Any]:
        """The report section's keys (docs/placement.md)."""
        plan, ideal = self.simulated[self.plan_name], self.simulated["ideal"]
        section = {
            "machine": self.machine.name,
            "simulated_seconds": {
                f"{name}_seconds": run.seconds for name, run in self.simulated.items()
            },
            "fraction_of_ideal": {
                name: ideal.seconds / run.seconds for name, run in self.simulated.items()
            },
            "speedup_over_lru": self.simulated["lru"].seconds / plan.seconds,
            "simulated_peak_bytes": {n: r.peak_bytes for n, r in self.simulated.items()},
            "swapped_bytes": {
                name: {"out": run.swapped_out_bytes, "in": run.swapped_in_bytes}
                for name, run in self.simulated.items()
            },
            "stall_seconds": plan.stall_seconds,
            "planner_seconds": self.planner_seconds,
            "host_arguments": len(self.plan.host_arguments),
            "plan": self.plan_name,
            "saved_bytes": {
                "swapping": plan.swapped_out_bytes,
                "recomputation": plan.recomputed_bytes,
            },
            "notes": self.notes,
        }
        if self.bound is not None:
            section["lower_bound"] = self.bound.report(ideal.seconds)
        if self.recomputed is not None:
            section["recompute"] = {
                "ratio": self.recomputed.rule.ratio,
                "several_results": self.recomputed.rule.several,
                "depth": self.recomputed.rule.depth,
                "candidates": self.recomputed.candidates,
                "recomputed_ops": len(self.recomputed.plan.recomputed()),
            }
            joint = self.recomputed.joint
            if joint is not None:
                section["recompute"]["joint"] = {
                    "to_swap": joint.to_swap,
                    "to_recompute": joint.to_recompute,
                    "evaluations": joint.evaluations,
                }
        if self.searched is not None:
            self.searched.write_report(section, self.seed)
        return section

    def memory_figure(self) -> MemoryFigure:
        """Device memory over the simulated iteration, swaps marked: the plan above its
        on-demand LRU baseline (the same picture for search=lru), each beside the ideal
        step's (infinite memory: what the plan gives up and how long it could take),
        below the peak without placement."""
        shown = [self.plan_name] + [name for name in ("lru",) if name != self.plan_name]
        return MemoryFigure(
            title=f"placement: device memory over one simulated iteration ({self.machine.name})",
            capacity=self.plan.capacity,
            series=tuple(_series(name, self.simulated[name]) for name in shown),
            unplaced_peak=self.unplaced_peak,
            ideal=_series("ideal", self.simulated["ideal"]),
        )


def plan_within(
    dag: Dag,
    signature: TrainingSignature,
    capacity: int,
    unplaced_peak: int,
    search: Policy | Searching,
    machine: Machine,
    seconds: Mapping[Node, float] | None = None,
    recompute: bool = False,
    deadline: Deadline | None = None,
    in_place: bool = False,
) -> PlanningOutcome:
    """Plan `dag` (ops in schedule order) within `capacity` with `search`, and price it
    beside the baselines (module docstring). `unplaced_peak` is the step's peak device
    memory without placement (`liveness.peak_memory`): a capacity at least that needs
    no plan. `seconds` are the ops' times when the dag knows them (a sharded step's
    device view); `recompute` lets the plan recompute saved activations; `deadline`
    bounds the planning (module docstring); `in_place` lets element-wise ops write
    their results over operands dying at them (`SwapSettings.in_place`)."""
    op, needed = working_set(dag, in_place)
    if capacity < needed:
        raise CapacityTooSmall.in_bytes(op, dag.ops.index(op), needed, capacity)
    problem = PlacementProblem.of(dag, signature, capacity, machine, seconds, in_place)
    ideal = PlacementPlan(dag.ops, capacity=capacity)
    name = search.name if isinstance(search, Searching) else search
    fits = capacity >= unplaced_peak
    plans: dict[str, PlacementPlan] = {}
    spent: dict[str, float] = {}
    notes = []
    simulated = {"ideal": problem.simulate(ideal)}
    if fits:
        notes.append(
            f"the step fits the capacity ({format_bytes(unplaced_peak)} at its peak): "
            "nothing is moved"
        )
        plans = {policy: ideal for policy in BASELINES}
        spent = {policy: 0.0 for policy in BASELINES}
        simulated.update({policy: simulated["ideal"] for policy in BASELINES})
    else:
        start = time.perf_counter()
        plans["lru"] = plan_swaps(dag, signature, settings_for("lru", problem))
        spent["lru"] = time.perf_counter() - start
        simulated["lru"] = problem.simulate(plans["lru"])
        start = time.perf_counter()
        tuned = tuned_plan(problem, settings_for("belady", problem), deadline)
        spent["belady"] = time.perf_counter() - start
        plans["belady"], simulated["belady"] = tuned.plan, tuned.simulated
    first = name if name in plans else "belady"  # a search starts from belady's plan
    simulated[name] = simulated[first]
    outcome = PlanningOutcome(name, plans[first], simulated, spent, machine, unplaced_peak, notes)
    outcome.bound = lower_bound(problem)
    if isinstance(search, Searching) and not fits:
        share = SEARCH_SHARE_RECOMPUTING if recompute else SEARCH_SHARE
        _run_search(problem, search, outcome, share)
    if recompute and not fits:
        _recompute(problem, outcome, deadline)
    return outcome


def _recompute(
    problem: PlacementProblem, outcome: PlanningOutcome, deadline: Deadline | None
) -> None:
    """Price the recomputing plans into `outcome` (`recompute.py`): on the schedule of
    the plan so far (a searched one, the GA's, may order the ops otherwise) at the
    first rule, chosen jointly (`joint.py`, within `JOINT_SHARE` of the time left:
    under a tight timeout the likeliest winner comes first), at the other rules, then
    on each seed schedule (`schedules.seed_orders`) by the rule that won,
    and each seed schedule's plan without recomputation (the tuned swap planner alone:
    the GA plans seeds with one window), as far as `deadline` allows; the fastest
    recomputing plan (chosen jointly too, when it is not the first) becomes the plan
    when it beats the search's, and the fastest seed plan without recomputation
    (`seeds`) when it beats both."""
    start = time.perf_counter()
    settings = settings_for("belady", problem)
    scheduled = problem.dag.scheduled(outcome.plan.order)
    first = replace(problem, dag=scheduled)
    found = plan_recomputing(first, settings, RULES[:1], deadline)
    if found is not None:  # the likeliest rule's plan chosen jointly before the others
        share = deadline.share(JOINT_SHARE) if deadline is not None else None
        found = _chosen_jointly(problem, found, share)
    refined = found
    other = plan_recomputing(first, settings, RULES[1:], deadline)
    if other is not None and (found is None or other.simulated.seconds < found.simulated.seconds):
        found = other
    alone: Tuned | None = None
    for order in seed_orders(problem.dag) if found is not None else ():
        if deadline is not None and deadline.expired():
            break
        reordered = replace(problem, dag=problem.dag.scheduled(order))
        if order != tuple(scheduled.ops):
            other = plan_recomputing(reordered, settings, (found.rule,), deadline)
            if other is not None and other.simulated.seconds < found.simulated.seconds:
                found = other
        own = order == tuple(problem.dag.ops)  # belady's plan already
        plain = None if own else _swapping_alone(reordered, settings, deadline)
        if plain is not None and (
            alone is None or plain.simulated.seconds < alone.simulated.seconds
        ):
            alone = plain
    if found is not None and found is not refined:  # another rule's or seed's won
        found = _chosen_jointly(problem, found, deadline)
    outcome.planner_seconds["recompute"] = time.perf_counter() - start
    timed_out = deadline is not None and deadline.expired()
    if found is None:
        outcome.notes.append(
            "recompute: the timeout came before a recomputing plan was priced"
            if timed_out
            else "recompute: no saved activation may be recomputed here"
        )
        return
    if timed_out:
        outcome.notes.append(
            "recompute: the timeout stopped the pricing of recomputing plans; the fastest "
            "priced by then is compared"
        )
    outcome.recomputed = found
    outcome.simulated["recompute"] = found.simulated
    if found.simulated.seconds < outcome.simulated[outcome.search].seconds:
        outcome.plan, outcome.chosen = found.plan, "recompute"
    else:
        outcome.notes.append(
            f"recompute: no recomputing plan was faster than search={outcome.search}'s "
            f"({found.simulated.seconds:.6g} s against "
            f"{outcome.simulated[outcome.search].seconds:.6g} s simulated): that one is kept"
        )
    if alone is not None:
        outcome.simulated["seeds"] = alone.simulated
        if alone.simulated.seconds < outcome.simulated[outcome.plan_name].seconds:
            outcome.plan, outcome.chosen = alone.plan, "seeds"
            outcome.notes.append(
                "recompute: a seed schedule planned by the tuned swap planner alone was "
                "the fastest plan: that one is kept"
            )


def _chosen_jointly(
    problem: PlacementProblem, found: Recomputed, deadline: Deadline | None
) -> Recomputed:
    """`found` after the joint choice of swapping and recomputing (`joint.py`) on its
    schedule, within `deadline`: the same plan when no move was faster."""
    if deadline is not None and deadline.expired():
        return found
    scheduled = replace(problem, dag=problem.dag.scheduled(found.plan.order))
    chosen = refine(scheduled, found.tuned, frozenset(recomputable(problem)), deadline)
    if chosen.tuned.simulated.seconds >= found.simulated.seconds:
        return replace(found, joint=chosen)
    tuned = chosen.tuned
    return replace(
        found,
        plan=tuned.plan,
        simulated=tuned.simulated,
        settings=tuned.settings,
        candidates=len(tuned.settings.recompute),
        joint=chosen,
    )


def _swapping_alone(
    problem: PlacementProblem, settings: SwapSettings, deadline: Deadline | None
) -> Tuned | None:
    """The tuned swap planner's plan of `problem`'s schedule without recomputation;
    None when it does not fit or the deadline passes first."""
    try:
        return tuned_plan(problem, settings, deadline, False)
    except (CapacityTooSmall, OutOfTime):
        return None


def _run_search(
    problem: PlacementProblem, search: Searching, outcome: PlanningOutcome, share: float
) -> None:
    """Run a searching planner into `outcome`, whose plan is belady's until the search
    finds a faster one (module docstring), in `share` of what is left of its deadline."""
    belady = outcome.simulated["belady"]
    outcome.seed = search.limits.seed
    deadline = search.limits.deadline.share(share)
    bar = search_progress(
        f"placement {search.name}", search.unit, search.total, deadline, search.figure, search.show
    )
    try:
        with bar as progress:
            searched = search.run(
                problem, replace(search.limits, deadline=deadline, progress=progress)
            )
    except NoPlanFound as err:
        outcome.notes.append(f"search={search.name}: {err}; belady's plan is kept")
        return
    outcome.searched = searched
    outcome.planner_seconds[search.name] = searched.seconds
    run = problem.simulate(searched.best)
    if run.seconds <= belady.seconds:
        outcome.plan, outcome.simulated[search.name] = searched.best, run
    else:
        outcome.notes.append(
            f"search={search.name} found nothing faster than belady's plan "
            f"({run.seconds:.6g} s against {belady.seconds:.6g} s simulated): belady's is kept"
        )
    searched.cost_before = belady.seconds
    searched.cost_after = outcome.simulated[search.name].seconds


def _series(name: str, run: PlacedSimulation) -> MemorySeries:
    """Device bytes after every allocation and free of `run`, and its swaps' starts."""
    events: list[tuple[float, int, int]] = []  # (time, 0 free / 1 alloc, signed bytes)
    outs, ins = [], []
    graph = run.graph
    for task_id in graph.ids():
        task = graph[task_id]
        start, end = run.timeline.start[task_id], run.timeline.end[task_id]
        events += [(start, 1, n) for _, n in task.alloc if n]
        events += [(end, 0, -n) for _, n in task.free if n]
        if task.resource == SWAP_OUT:
            outs.append(start)
        elif task.resource == SWAP_IN:
            ins.append(start)
    times, held, level = [0.0], [0], 0
    for when, _, delta in sorted(events):
        level += delta
        times.append(when)
        held.append(level)
    return MemorySeries(
        name, run.seconds, tuple(times), tuple(held), tuple(sorted(outs)), tuple(sorted(ins))
    )
