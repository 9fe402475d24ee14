"""Pricing a strategy that fits each device's memory only by swapping:
`soap-shard{place=belady|lru|offload-all}` (DESIGN.md §8; docs/soap-shard.md "Memory").

FlexFlow's search takes a strategy over device memory as infeasible, SwapAdvisor's
planner places one device's step and never changes its parallelization; neither prices
both. With `place=`, a candidate whose simulated per-device peak is over the capacity
is not thrown away: the placement planner plans its swaps, on one device's view of the
program the candidate would write (`placement.device_view.plan_view`: local blocks,
collectives on their own stream, the same program `write_sharded` writes), and the
candidate costs its simulated step time plus the time swapping adds on that view
(`stall`: the placed schedule's simulated time over the same view without swaps). So a
strategy that fits only by swapping competes with one that fits without, on the same
simulator, and one that no swapping fits (an op's own blocks over the capacity) stays
infeasible.

Prices are kept per strategy (its configurations): a chain revisits strategies.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Literal

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag, Node
from tasoc.ir.placement_plan import PlacementPlan
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Mesh
from tasoc.ir.training import TrainingSignature
from tasoc.passes.placement.device_view import plan_view
from tasoc.passes.placement.offload import offload_all
from tasoc.passes.placement.planning import settings_for
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.swap_planner import CapacityTooSmall, plan_swaps, working_set

Placer = Literal["belady", "lru", "offload-all"]


@dataclass
class SwapPricing:
    """What swapping adds to a strategy's time on `machine` within `capacity` bytes per
    device, planned by `placer` (module docstring)."""

    placer: Placer
    capacity: int
    machine: Machine
    signature: TrainingSignature | None
    priced: dict[frozenset[tuple[Node, frozenset[tuple[str, tuple[str, ...]]]]], float] = field(
        default_factory=dict
    )
    """Seconds swapping adds, by strategy; infinity where no plan fits."""

    @property
    def plans(self) -> int:
        """Strategies priced so far."""
        return len(self.priced)

    def stall(self, dag: Dag, plan: Plan, mesh: Mesh) -> float:
        """Seconds swapping adds to `plan` (infinity: nothing fits the capacity)."""
        key = frozenset((node, frozenset(config.items())) for node, config in plan.configs.items())
        if key not in self.priced:
            self.priced[key] = self._stall(dag, plan, mesh)
        return self.priced[key]

    def _stall(self, dag: Dag, plan: Plan, mesh: Mesh) -> float:
        if plan.meshes or self.signature is None or self.signature.loss is None:
            return math.inf  # no one schedule, or no step to place
        view = plan_view(dag, plan, mesh, self.machine)
        _, needed = working_set(view.dag)
        if needed > self.capacity:
            return math.inf
        problem = PlacementProblem.of(
            view.dag, self.signature, self.capacity, self.machine, view.seconds
        )
        try:
            placed = self._placed(problem)
        except CapacityTooSmall:
            return math.inf
        run = problem.simulate(placed)
        if run.peak_bytes > self.capacity:
            return math.inf
        ideal = problem.simulate(PlacementPlan(view.dag.ops, capacity=self.capacity))
        return max(run.seconds - ideal.seconds, 0.0)

    def _placed(self, problem: PlacementProblem) -> PlacementPlan:
        assert problem.signature is not None
        if self.placer == "offload-all":
            return offload_all(
                problem.dag,
                problem.signature,
                params="device",
                prefetch=1,
                min_bytes=0,
                capacity=self.capacity,
            ).plan
        return plan_swaps(problem.dag, problem.signature, settings_for(self.placer, problem))
