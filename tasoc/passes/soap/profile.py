"""`soap-shard`'s planning: the strategy on each mesh tried (one, or one per device
count for `objective=profile` and `mini-parallelism`), with its baselines, all
simulated; the mesh written; the compared searches' plans beside it."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag
from tasoc.ir.limits import bytes_and_size
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Mesh
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.search import Deadline, SearchOutcome, resolve_seed, search_progress
from tasoc.passes.soap.cost_searches import (
    Evaluated,
    FrontierError,
    cost_model,
    evaluate,
    frontier_points,
)
from tasoc.passes.soap.meshes import (
    devices_text,
    hints,
    machine_for,
    module_mesh,
    profile_meshes,
)
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.problem import Limits, MemoryCapError, SoapProblem, Tuning
from tasoc.passes.soap.searches import SEARCHES, baseline_plans, run_search
from tasoc.passes.soap.simulated import Priced, SimulatedStrategy
from tasoc.passes.soap.strategies import prescribe
from tasoc.passes.soap.swap_pricing import SwapPricing

if TYPE_CHECKING:
    from tasoc.passes.soap.soap_shard import SoapShardPass

FT_MAX_POINTS = 64
"""FT's default bound on any frontier's points. Exact frontiers of training steps grow
to 10^5 points once re-scheduled copies hold memory (a 13-layer transformer step), and
node elimination multiplies two frontiers per option triple, which ran a 2,000-op
inception_v3 step out of 22 GB; 64 points draw the trade-off and keep FT to seconds."""

ONE_DEVICE = "a mesh of one device: every op runs whole on it, there is nothing to split"
"""The note of a plan on one device (every search's space is then one strategy)."""

SEARCH_SHARE = 0.8
"""The part of `timeout` a search takes; the pass simulates the plans it reports after."""

COMPARE_SHARE = 0.5
"""The part of the time left that the compared searches share, after the pass's own."""


@dataclass
class Planned:
    """One mesh's strategy: the problem, baselines, the search's outcome, and the
    plan and baselines simulated."""

    problem: SoapProblem
    baselines: dict[str, Plan]
    """The plans of the baselines that apply (one object for equal prescriptions)."""
    not_applying: dict[str, str]
    """The baselines that do not apply, and why."""
    outcome: SearchOutcome[Plan] | None
    plan: Plan
    state: SimulatedStrategy
    """The plan simulated (its task graph and timeline: the report's pictures)."""
    simulated: dict[str, Priced]
    """The figures of the plan and of each baseline, by name."""

    @property
    def mesh(self) -> Mesh:
        return self.problem.program.mesh

    @property
    def machine(self) -> Machine:
        return self.problem.machine

    def fits(self, cap: int | None) -> bool:
        return cap is None or self.state.memory <= cap

    @property
    def frontier(self) -> list[tuple[int, float]]:
        """FT's frontier (estimates), empty for other searches."""
        return [] if self.outcome is None else frontier_points(self.outcome)

    @property
    def simulated_frontier(self) -> list[tuple[int, float]]:
        """The frontier points FT re-simulated, as (memory, seconds)."""
        if self.outcome is None:
            return []
        return [
            (memory, seconds)
            for _, memory, seconds in self.outcome.details.get("frontier_simulated", ())
        ]


def plan_meshes(
    options: SoapShardPass, module: ModuleOp, dag: Dag, deadline: Deadline
) -> dict[int, Planned]:
    """The strategy on each mesh tried (one, or one per device count), by device
    count; `mini-parallelism` stops at the first count that fits."""
    objective = options.objective
    if objective in ("mini-parallelism", "profile"):
        tried_meshes = profile_meshes(
            module, objective, options.mesh, options.devices, options.machine
        )
    else:
        tried_meshes = [module_mesh(module, options.mesh, options.machine)]
    signature = training_signature(entry_function(module))
    tried: dict[int, Planned] = {}
    for index, mesh in enumerate(tried_meshes):
        share = deadline.share(1 / (len(tried_meshes) - index))
        try:
            planned = plan_on(options, dag, mesh, signature, share)
        except (FrontierError, MemoryCapError):
            if objective != "mini-parallelism":
                raise
            continue  # the cap is under this count's least memory
        tried[mesh.size] = planned
        if objective == "mini-parallelism" and planned.fits(options.cap()):
            break
    return tried


def soap_problem(
    options: SoapShardPass, program: Problem, machine: Machine, signature: TrainingSignature | None
) -> SoapProblem:
    """The problem the pass's options pose on `program`: priced on `machine` under the
    capacity (`memory-cap`, else the device's memory), swapping with `place=`."""
    capacity = options.capacity(machine)
    place = (
        None if options.place is None else SwapPricing(options.place, capacity, machine, signature)
    )
    exact = options.heuristic == "exact"
    max_points = options.max_points
    return SoapProblem(
        program,
        machine,
        capacity,
        objective=options.objective,
        pick=None if options.pick is None else str(options.pick),
        place=place,
        tuning=Tuning(
            beta=options.beta,
            heuristic=None if exact else options.heuristic,
            max_points=max_points if max_points is not None or exact else FT_MAX_POINTS,
        ),
    )


def plan_on(
    options: SoapShardPass,
    dag: Dag,
    mesh: Mesh,
    signature: TrainingSignature | None,
    deadline: Deadline,
) -> Planned:
    """The strategy of `options.search` on `mesh`, with its baselines, all simulated."""
    program = Problem(dag, mesh, signature, hints(dag, mesh))
    problem = soap_problem(options, program, machine_for(options.machine, mesh), signature)
    baselines, not_applying = baseline_plans(program)
    outcome: SearchOutcome[Plan] | None = None
    entry = SEARCHES.get(options.search)
    if entry is not None:
        # the rest of the time is the report's: its simulations of the plans
        limits = Limits(options.budget, deadline.share(SEARCH_SHARE), resolve_seed(options.seed))
        unit, _ = entry.unit or ("step", None)
        with search_progress(options.name, unit, options.budget, limits.deadline) as progress:
            limits = dataclasses.replace(limits, progress=progress)
            outcome = run_search(options.search, problem, baselines, limits)
        plan = outcome.best
    else:
        named = baselines.get(options.search)
        plan = named if named is not None else complete(program, prescribe(program, options.search))
    state = problem.state_of(plan)
    simulated = {"plan": state.priced()} | {
        name: problem.price(candidate) for name, candidate in baselines.items()
    }
    if mesh.size == 1:
        plan = dataclasses.replace(plan, notes=[*plan.notes, ONE_DEVICE])
    return Planned(problem, baselines, not_applying, outcome, plan, state, simulated)


def choose(options: SoapShardPass, tried: dict[int, Planned]) -> Planned:
    """The plan written: the fastest of the meshes tried, or under `mini-parallelism`
    the fewest devices that fit (FrontierError when none does)."""
    cap = options.cap()
    if not tried:
        raise FrontierError(
            f"no device count of devices={devices_text(options.devices)} fits "
            f"memory-cap={bytes_and_size(cap)} per device"
        )
    if options.objective != "mini-parallelism":
        return min(tried.values(), key=lambda planned: planned.state.cost)
    fitting = [planned for planned in tried.values() if planned.fits(cap)]
    if not fitting:
        least = min(tried.values(), key=lambda p: p.state.memory)
        raise FrontierError(
            f"no device count of {', '.join(map(str, tried))} fits "
            f"memory-cap={bytes_and_size(cap)} per device: the least simulated is "
            f"{bytes_and_size(int(least.state.memory))} at "
            f"{least.mesh.size} devices"
        )
    return min(fitting, key=lambda planned: planned.mesh.size)


def compare(
    options: SoapShardPass, chosen: Planned, deadline: Deadline
) -> tuple[dict[str, Evaluated], list[str]]:
    """The compared searches' strategies and the baselines, each with its estimate
    and simulation (empty when nothing is compared), and why a compared search
    has none."""
    names = options.compared()
    notes: list[str] = []
    if not names and not (chosen.outcome and "frontier" in chosen.outcome.details):
        return {}, notes
    problem = chosen.problem
    budget = deadline.share(COMPARE_SHARE)
    model = cost_model(problem)
    seed = resolve_seed(options.seed)
    found: dict[str, Evaluated] = {}
    for index, name in enumerate(names):
        limits = Limits(options.budget, budget.share(1 / (len(names) - index)), seed)
        try:
            outcome = run_search(name, problem, chosen.baselines, limits)
        except ValueError as err:
            notes.append(f"search={name}: {err}")
            continue
        found[name] = evaluate(model, outcome.best, problem)
    for name, plan in chosen.baselines.items():
        found[name] = evaluate(model, plan, problem)
    found[options.search] = evaluate(model, chosen.plan, problem)
    return found, notes
