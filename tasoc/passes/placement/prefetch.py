"""Prefetch distances from the simulated timeline: how far ahead of its reader each
swap-in may start, chosen per tensor by what the simulator says stalled.

SwapAdvisor's planner starts every swap-in as early as memory allows within a fixed
window of ops (`SwapSettings.lookback`). One window does not suit every tensor: too
short, and a large copy is still running when its reader starts (the compute stream
stalls); too long for all, and early copies hold memory that later prefetches needed,
so those start late instead (on WResNet, 256 ops beats 64 at twice oversubscription
and loses at four times). So the window is tuned per tensor on the one simulator:

1. plan with each of `WINDOWS` and simulate; keep the fastest;
2. find the swap-ins whose reader waited for them (the copy ended when the reader
   started, or later) and double those tensors' own windows (`SwapSettings.lookbacks`);
3. plan and simulate again; keep the result when faster, and stop when a round is not
   (at most `ROUNDS`).

Every plan it returns is one the swap planner made, so it fits the capacity; the
simulator is the judge, so the result is never slower than SwapAdvisor's window.
Cost: `len(WINDOWS) + ROUNDS` scans and simulations at most.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tasoc.ir.dag import Node, Value
from tasoc.ir.placement_plan import PlacementPlan, SwapIn
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.swap_planner import SwapSettings, plan_swaps
from tasoc.sim.placement import PlacedSimulation

WINDOWS = (64, 256)
"""The common windows tried first: SwapAdvisor-like, and four times it."""
ROUNDS = 3
"""Rounds of per-tensor widening after the common window."""


@dataclass(frozen=True)
class Tuned:
    """A plan with tuned prefetch distances, its simulation and its settings."""

    plan: PlacementPlan
    simulated: PlacedSimulation
    settings: SwapSettings


def tuned_plan(problem: PlacementProblem, settings: SwapSettings) -> Tuned:
    """The swap planner's plan under `settings` with prefetch windows tuned on the
    simulator (module docstring); CapacityTooSmall as the planner raises it."""
    best: Tuned | None = None
    for window in WINDOWS:
        tried = replace(settings, lookback=window)
        plan = plan_swaps(problem.dag, problem.signature, tried)
        run = problem.simulate(plan)
        if best is None or run.seconds < best.simulated.seconds:
            best = Tuned(plan, run, tried)
    assert best is not None
    for _ in range(ROUNDS):
        late = stalled(best.plan, best.simulated)
        if not late:
            break
        own = dict(best.settings.lookbacks)
        for value in late:
            own[value] = 2 * own.get(value, best.settings.lookback)
        tried = replace(best.settings, lookbacks=own)
        plan = plan_swaps(problem.dag, problem.signature, tried)
        run = problem.simulate(plan)
        if run.seconds >= best.simulated.seconds:
            break
        best = Tuned(plan, run, tried)
    return best


def stalled(plan: PlacementPlan, run: PlacedSimulation) -> set[Value]:
    """The tensors of `plan` one of whose swap-ins ended no earlier than the op that
    first reads it started: that op waited for the copy."""
    start, end = run.timeline.start, run.timeline.end
    waiting: dict[Value, int] = {}  # value -> the task of its swap-in not yet read
    late: set[Value] = set()
    for entry, task in zip(plan.schedule, run.tasks, strict=True):
        if isinstance(entry, SwapIn) and task is not None:
            waiting[entry.value] = task
        elif isinstance(entry, Node) and task is not None:
            for value in dict.fromkeys(entry.inputs):
                copy = waiting.pop(value, None)
                if copy is not None and end[copy] >= start[task]:
                    late.add(value)
    return late
