"""Prefetch distances from the simulated timeline: how far ahead of its reader each
swap-in may start, chosen per tensor by what the simulator says stalled.

SwapAdvisor's planner starts every swap-in as early as memory allows within a fixed
window of ops (`SwapSettings.lookback`). One window does not suit every tensor: too
short, and a large copy is still running when its reader starts (the compute stream
stalls); too long for all, and early copies hold memory that later prefetches needed,
so those start late instead (on WResNet, 256 ops beats 64 at twice oversubscription
and loses at four times). So the window is tuned per tensor on the one simulator:

1. plan with the first of `WINDOWS` and simulate, then with each longer one while it
   is faster; then the same with
   evictions keeping `HEADROOMS` of the capacity free for prefetches, kept when faster;
2. find the swap-ins whose reader waited for them (the copy ended when the reader
   started, or later) and double those tensors' own windows (`SwapSettings.lookbacks`);
3. plan and simulate again; keep the result when faster, and stop when a round is not
   (at most `ROUNDS`).

Every plan it returns is one the swap planner made, so it fits the capacity; the
simulator is the judge, so the result is never slower than SwapAdvisor's window.
Cost: `len(WINDOWS) + len(HEADROOMS) + ROUNDS` scans and simulations at most; a
deadline cuts them short (the fastest plan so far is returned).
"""

from __future__ import annotations

from dataclasses import dataclass, replace

from tasoc.ir.dag import Node, Value
from tasoc.ir.placement_plan import PlacementPlan, SwapIn
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.swap_planner import OutOfTime, SwapSettings, plan_swaps
from tasoc.passes.search import Deadline
from tasoc.sim.placement import PlacedSimulation

WINDOWS = (64, 256, 1024)
"""The common windows tried first: SwapAdvisor-like, then four times the last while
that is faster (brnn at 4x on the reversed depth-first schedule: 63.1, 65.2, 68.6 % of
ideal; its 134 MB weights' swap-ins need more than 256 ops to find room)."""
ROUNDS = 3
"""Rounds of per-tensor widening after the common window."""
HEADROOMS = (0.01,)
"""The parts of the capacity evictions may keep free for prefetches
(`SwapSettings.headroom`), tried on the best window: evicting on demand fills memory
to the capacity, so a swap-in waits for its reader's eviction; a little kept free lets
it start earlier (nasnet at 4x, recomputing: 84.2 -> 85.5 % of ideal at 1 %; 2 % or
more evicts more than it hides)."""


@dataclass(frozen=True)
class Tuned:
    """A plan with tuned prefetch distances, its simulation and its settings."""

    plan: PlacementPlan
    simulated: PlacedSimulation
    settings: SwapSettings


def tuned_plan(
    problem: PlacementProblem,
    settings: SwapSettings,
    deadline: Deadline | None = None,
    required: bool = True,
) -> Tuned:
    """The swap planner's plan under `settings` with prefetch windows tuned on the
    simulator (module docstring), the tuning stopped where `deadline` passes;
    CapacityTooSmall as the planner raises it. The first plan is made whatever the
    deadline when `required` (a baseline the pass cannot do without), else OutOfTime
    when the deadline passes before it is done."""
    first = replace(settings, lookback=WINDOWS[0])
    plan = plan_swaps(problem.dag, problem.signature, first, None if required else deadline)
    best = Tuned(plan, problem.simulate(plan), first)
    for window in WINDOWS[1:]:  # longer while longer is faster
        found = faster(problem, best, replace(settings, lookback=window), deadline)
        if found is None:
            break
        best = found
    for headroom in HEADROOMS:
        best = faster(problem, best, replace(best.settings, headroom=headroom), deadline) or best
    return widened(problem, best, deadline)


def faster(
    problem: PlacementProblem, best: Tuned, tried: SwapSettings, deadline: Deadline | None
) -> Tuned | None:
    """The swap planner's plan under `tried` when the simulator says it is faster than
    `best`'s; None when it is not, or `deadline` passes first."""
    if deadline is not None and deadline.expired():
        return None
    try:
        plan = plan_swaps(problem.dag, problem.signature, tried, deadline)
    except OutOfTime:
        return None
    if plan == best.plan:  # the same plan simulates the same: not faster, and not priced
        return None
    run = problem.simulate(plan)
    return Tuned(plan, run, tried) if run.seconds < best.simulated.seconds else None


def widened(problem: PlacementProblem, best: Tuned, deadline: Deadline | None) -> Tuned:
    """`best` with the windows of the tensors whose reader waited doubled, round after
    round while the simulator says it is faster (module docstring, steps 2-3)."""
    for _ in range(ROUNDS):
        late = stalled(best.plan, best.simulated)
        if not late:
            break
        own = dict(best.settings.lookbacks)
        for value in late:
            own[value] = 2 * own.get(value, best.settings.lookback)
        found = faster(problem, best, replace(best.settings, lookbacks=own), deadline)
        if found is None:
            break
        best = found
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
