"""What every placement planner is given, and how every plan is priced.

A `PlacementProblem` is a training step on the light graph (its ops in the step's own
schedule), the device capacity, and the machine and op times the placed-step
simulator prices plans with. `simulate` is the one way a plan is priced, by the
baselines (`planning.py`) and by the searches (`ga.py`) alike, so that every figure of
the report is the same simulation. A `Searcher` (`PlacementPass.searching`) takes a
problem and its `SearchLimits` and returns a `SearchOutcome` whose best is a plan.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag, Node
from tasoc.ir.placement_plan import PlacementPlan, output_spaces
from tasoc.ir.training import TrainingSignature
from tasoc.passes.search import Deadline, Progress, SearchOutcome
from tasoc.sim.placement import PlacedSimulation, op_seconds, simulate_plan


@dataclass(frozen=True)
class PlacementProblem:
    """A step to place within `capacity` bytes of device memory, priced on `machine`."""

    dag: Dag
    """The step, its ops in the step's own schedule (what `search=belady` plans)."""
    signature: TrainingSignature | None
    capacity: int
    machine: Machine
    seconds: Mapping[Node, float]
    """Each op's time on one device of the machine (`op_seconds`)."""
    in_place: bool = False
    """Plans may write an element-wise op's result over an operand dying at it
    (`SwapSettings.in_place`, placement's `in-place=on`)."""

    @classmethod
    def of(
        cls,
        dag: Dag,
        signature: TrainingSignature | None,
        capacity: int,
        machine: Machine,
        seconds: Mapping[Node, float] | None = None,
        in_place: bool = False,
    ) -> PlacementProblem:
        """The problem of `dag`, its ops priced by `seconds` (a sharded step's device
        view knows its own), else as the machine prices them (`op_seconds`)."""
        times = seconds if seconds is not None else op_seconds(dag, machine)
        return cls(dag, signature, capacity, machine, times, in_place)

    def simulate(self, plan: PlacementPlan) -> PlacedSimulation:
        """One simulated iteration of `plan` (in any schedule of the step's ops), each
        output leaving where the plan keeps it (a new param of a host argument: host)."""
        spaces = output_spaces(self.dag, plan.host_arguments)
        return simulate_plan(self.dag, plan, self.machine, self.seconds, spaces)


class NoPlanFound(ValueError):
    """A search saw no plan that fits (one line): the caller keeps its baseline's."""


@dataclass(frozen=True)
class SearchLimits:
    """A searching planner's limits (DESIGN.md §3): simulated plans, time, seed."""

    budget: int
    deadline: Deadline
    seed: int
    progress: Progress | None = None
    """Hears of the search's steps done and its best figure so far (`search_progress`)."""


Searcher = Callable[[PlacementProblem, SearchLimits], SearchOutcome[PlacementPlan]]
"""A planner that searches: its best plan and how it got there (report `details`)."""
