"""Planning swaps within a capacity: the planner's plan, its baselines, their prices.

`plan_within` runs what `placement{search=belady|lru}` asks for on the step's own
schedule and prices it beside the baselines a user would otherwise run — *ideal*
(infinite memory: the ops alone), *lru* (SwapAdvisor's on-demand ODSwap) and *belady*
(the swap planner with prefetching) — all on the one placed-step simulator
(`tasoc.sim.placement`), and says how the plan's device memory moves over the
simulated iteration (`memory_figure`). A capacity the step fits in needs no swapping:
the plan moves nothing and a note says so. One below the largest single op's working
set cannot run at all: `CapacityTooSmall`, naming the op.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag
from tasoc.ir.limits import format_bytes
from tasoc.ir.placement_plan import PlacementPlan, output_spaces
from tasoc.ir.training import TrainingSignature
from tasoc.passes.figures import MemoryFigure, MemorySeries
from tasoc.passes.placement.swap_planner import (
    CapacityTooSmall,
    Policy,
    SwapSettings,
    plan_swaps,
    working_set,
)
from tasoc.sim.placement import SWAP_IN, SWAP_OUT, PlacedSimulation, op_seconds, simulate_plan


def settings_for(policy: Policy, capacity: int) -> SwapSettings:
    """The swap planner as each name runs it: `belady` prefetches, `lru` swaps in on
    demand (right before the op that reads)."""
    return SwapSettings(capacity, policy, prefetch=policy == "belady")


@dataclass
class PlanningOutcome:
    """The chosen plan and what the simulator says of it and of the baselines."""

    search: Policy
    plan: PlacementPlan
    simulated: dict[str, PlacedSimulation]
    """ideal, lru, belady (one of them the plan), by name."""
    planner_seconds: dict[str, float]
    machine: Machine
    notes: list[str] = field(default_factory=list)

    def report(self) -> dict[str, Any]:
        """The report section's keys (docs/placement.md)."""
        plan, ideal = self.simulated[self.search], self.simulated["ideal"]
        return {
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
            "notes": self.notes,
        }

    def memory_figure(self) -> MemoryFigure:
        """Device memory over the simulated iteration, swaps marked: the plan above its
        on-demand LRU baseline (the same picture for search=lru)."""
        shown = [self.search] + [name for name in ("lru",) if name != self.search]
        return MemoryFigure(
            title=f"placement: device memory over one simulated iteration ({self.machine.name})",
            capacity=self.plan.capacity,
            series=tuple(_series(name, self.simulated[name]) for name in shown),
        )


def plan_within(
    dag: Dag,
    signature: TrainingSignature,
    capacity: int,
    unplaced_peak: int,
    search: Policy,
    machine: Machine,
) -> PlanningOutcome:
    """Plan `dag` (ops in schedule order) within `capacity` with `search`, and price it
    beside the baselines (module docstring)."""
    op, needed = working_set(dag)
    if capacity < needed:
        raise CapacityTooSmall(op, dag.ops.index(op), needed, capacity)
    seconds = op_seconds(dag, machine.device)
    ideal = PlacementPlan(dag.ops, capacity=capacity)
    plans: dict[str, PlacementPlan] = {}
    spent: dict[str, float] = {}
    notes = []
    if capacity >= unplaced_peak:
        notes.append(
            f"the step fits the capacity ({format_bytes(unplaced_peak)} at its peak): "
            "nothing is moved"
        )
        plans = {"lru": ideal, "belady": ideal}
        spent = {"lru": 0.0, "belady": 0.0}
    else:
        for policy in ("lru", "belady"):
            start = time.perf_counter()
            plans[policy] = plan_swaps(dag, signature, settings_for(policy, capacity))
            spent[policy] = time.perf_counter() - start
    simulated = {"ideal": simulate_plan(dag, ideal, machine, seconds)}
    for name, plan in plans.items():
        spaces = output_spaces(dag, plan.host_arguments)
        simulated[name] = simulate_plan(dag, plan, machine, seconds, spaces)
    return PlanningOutcome(search, plans[search], simulated, spent, machine, notes)


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
    return MemorySeries(name, tuple(times), tuple(held), tuple(sorted(outs)), tuple(sorted(ins)))
