"""`search=ft`, `search=greedy` and `search=ilp`: the searches on TensorOpt's cost
graph (`costs.py`), with the contract `search=mcmc` keeps (`SEARCHES` in
`searches.py`): a problem, its starts and the limits in, a `SearchOutcome` whose best
plan the pass writes out.

* `ft` tracks the whole time/memory frontier (`frontier.py`, TensorOpt §3) and
  chooses one point by `SoapProblem.objective`: the fastest (`time`), the fastest whose
  memory fits `memory-cap` (`mini-time`), or the one `pick=` names (`frontier`:
  `fastest`, `smallest` or its number, 1 the least memory);
* `greedy` is Spartan's maximum-connectivity-first tiling (`greedy.py`), fewest
  bytes communicated, `memory-cap` as its budget;
* `ilp` is one configuration per op solved exactly by HiGHS (`ilp.py`), under
  `memory-cap`; a model too large for it falls back to `greedy`, with a note.

Each chosen strategy is completed (`plan.complete`: its configurations and argument
layouts kept) and re-simulated with the full simulator, and its cost-graph
estimate is reported beside the simulated figures: the two disagree where eq. 3's
sums do (no overlap, memory as the forward's activations).
Under `mini-time` a point whose estimate fits but whose simulated peak does not
gives way to the next point down the frontier (up to `FIT_TRIES` of them).
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from tasoc.ir.limits import bytes_and_size
from tasoc.ir.shard_plan import Plan
from tasoc.passes.search import SearchOutcome, StopReason
from tasoc.passes.soap import costs, frontier, greedy, ilp
from tasoc.passes.soap.cost_graph import Choice
from tasoc.passes.soap.costs import CostModel
from tasoc.passes.soap.plan import PlanError, complete
from tasoc.passes.soap.problem import Limits, SoapProblem, starting_cost
from tasoc.passes.soap.simulated import SimulatedStrategy

SIMULATED_POINTS = 8
"""Frontier points `search=ft` re-simulates for the report and the picture."""

FIT_TRIES = 8
"""Frontier points re-simulated under `mini-time` before the estimate's choice is
kept with a note that its simulated peak exceeds the cap."""

ILP_MAX_VARIABLES = 200_000
"""The largest ILP `search=ilp` builds (variables); above it, the greedy tiling with a
note, rather than a solver that cannot finish."""

ANCHOR_SHARE = 0.3
"""The part of `search=ft`'s time the ILP anchor may take (`ft_anchors`)."""

FT_SHARE = 0.8
"""The part of the search's time FT may take; re-simulating its choice takes the rest."""


class FrontierError(ValueError):
    """An objective the frontier cannot meet (a cap under its least memory, a `pick=`
    naming no point); one line."""


@dataclass(frozen=True)
class Evaluated:
    """A strategy's cost-graph estimate beside its full simulation."""

    plan: Plan
    estimate: tuple[float, float] | None
    """(memory per device, seconds) by eq. 3; None when the graph cannot express it."""
    simulated: SimulatedStrategy

    def figures(self) -> dict[str, Any]:
        memory, seconds = self.estimate or (math.nan, math.nan)
        return {
            "estimated_memory": None if self.estimate is None else int(memory),
            "estimated_seconds": None if self.estimate is None else seconds,
            "simulated_memory": self.simulated.memory,
            "simulated_seconds": self.simulated.time,
        }


def evaluate(model: CostModel, plan: Plan, problem: SoapProblem) -> Evaluated:
    """`plan` simulated on the problem's machine (memory traced), with its estimate:
    the problem's `state_of` (a state it made of an equal plan and never edited where
    there is one, and kept among its states: `search=auto` starts a chain from the
    ILP's plan simulated here). Under `place=` without swapping's pricing, as every
    cost-graph search reports its plan."""
    choice = model.choice_of(plan)
    estimate = None if choice is None else model.graph.cost(choice)
    simulated = (
        problem.state_of(plan)
        if problem.place is None
        else SimulatedStrategy.of(model.problem, plan, problem.machine, problem.memory_cap)
    )
    return Evaluated(plan, estimate, simulated)


def realize(model: CostModel, choice: Choice, problem: SoapProblem) -> Evaluated:
    """A strategy of the graph as a completed plan, simulated."""
    try:
        plan = complete(model.problem, model.prescription(choice))
    except PlanError as err:
        raise PlanError(f"a strategy of the cost graph cannot be completed: {err}") from None
    return evaluate(model, plan, problem)


_models: dict[tuple[int, str], CostModel] = {}


def cost_model(problem: SoapProblem) -> CostModel:
    """The cost graph of `problem`'s program on its machine, built once per pass run
    (the searches of one pass and its comparisons share it)."""
    program = problem.program
    key = (id(program), problem.machine.name)
    if key not in _models or _models[key].problem is not program:
        _models.clear()
        _models[key] = costs.build(program, problem.machine)
    return _models[key]


def timed_model(problem: SoapProblem) -> tuple[CostModel, float]:
    """The problem's cost model and the seconds building it took (0 when built before)."""
    started = time.perf_counter()
    return cost_model(problem), time.perf_counter() - started


def _outcome(
    best: Evaluated,
    problem: SoapProblem,
    starts: Mapping[str, Plan],
    limits: Limits,
    stopped: StopReason,
    details: dict[str, Any],
) -> SearchOutcome[Plan]:
    return SearchOutcome(
        best=best.plan,
        cost_before=starting_cost(problem, starts),
        cost_after=best.simulated.cost,
        seconds=limits.deadline.elapsed(),
        stopped=stopped,
        details={**details, "chosen": best.figures()},
    )


def _graph_figures(model: CostModel, seconds: float) -> dict[str, Any]:
    graph = model.graph
    return {
        "cost_graph": {
            "nodes": len(graph.nodes),
            "edges": len(graph.edges),
            "strategies_log10": round(sum(math.log10(node.options) for node in graph.nodes), 1),
            "seconds": round(seconds, 3),
        }
    }


# ------------------------------------------------------------------ ft


def pick_point(
    points: list[frontier.FrontierPoint], problem: SoapProblem
) -> list[frontier.FrontierPoint]:
    """The frontier points the objective accepts, the preferred first."""
    cap = problem.memory_cap
    if problem.objective == "mini-time" or (cap is not None and problem.pick is None):
        assert cap is not None
        fitting = [p for p in points if p.memory <= cap]
        if not fitting:
            raise FrontierError(
                f"memory-cap={bytes_and_size(cap)} is under the frontier's least memory per "
                f"device, {bytes_and_size(int(points[0].memory))} (FT's estimate)"
            )
        return fitting[::-1]
    pick = problem.pick or "fastest"
    if pick == "fastest":
        return [points[-1]]
    if pick == "smallest":
        return [points[0]]
    number = int(pick)
    if not 1 <= number <= len(points):
        raise FrontierError(
            f"pick={pick} names no frontier point: the frontier has {len(points)} "
            f"(pick=1 to {len(points)}, fastest or smallest)"
        )
    return [points[number - 1]]


def search_ft(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    """TensorOpt's FT, then the point the objective asks for (module docstring)."""
    model, built = timed_model(problem)
    tuning = problem.tuning
    anchors = ft_anchors(model, starts, problem, limits) if tuning.heuristic is not None else {}
    try:
        tracked = frontier.track(
            model.graph,
            heuristic=tuning.heuristic,
            max_points=tuning.max_points,
            deadline=limits.deadline.share(FT_SHARE),
            anchors=tuple(anchors.values()),
        )
    except frontier.FrontierTimeout as err:
        raise FrontierError(
            f"search=ft ran out of time ({err}): raise timeout or max-points"
        ) from None
    if not tracked.points:
        raise FrontierError("no strategy of the cost graph is feasible")
    wanted = pick_point(tracked.points, problem)
    picked, chosen = wanted[0], realize(model, wanted[0].choice, problem)
    notes = []
    cap = problem.memory_cap
    if cap is not None and problem.pick is None:
        for point in wanted[1:FIT_TRIES]:
            if chosen.simulated.memory <= cap or limits.deadline.expired():
                break
            picked, chosen = point, realize(model, point.choice, problem)
        if chosen.simulated.memory > cap:
            peak = bytes_and_size(int(chosen.simulated.memory))
            notes.append(
                f"the chosen point's simulated peak, {peak}, exceeds "
                f"memory-cap={bytes_and_size(cap)} (its estimate fits)"
            )
    details = {
        **_graph_figures(model, built),
        "eliminations": dict(sorted(tracked.eliminations.items())),
        "heuristic_eliminations": tracked.eliminations.get("heuristic", 0),
        "anchors": list(anchors),
        "chain": tracked.chain,
        "exact": tracked.exact,
        "thinned": tracked.thinned,
        "ft_seconds": round(tracked.seconds, 3),
        "frontier": [[int(p.memory), p.time] for p in tracked.points],
        "picked": tracked.points.index(picked) + 1,
        "frontier_simulated": _simulated_sample(model, tracked.points, problem, limits),
        "frontier_notes": notes,
    }
    return _outcome(chosen, problem, starts, limits, StopReason.EXHAUSTED, details)


def _simulated_sample(
    model: CostModel, points: list[frontier.FrontierPoint], problem: SoapProblem, limits: Limits
) -> list[list[float]]:
    """Up to `SIMULATED_POINTS` frontier points spread evenly (both ends first)
    re-simulated, as [number, simulated memory, simulated seconds]: how the
    frontier looks to the simulator, for the report and the picture. Stops at the
    deadline."""
    count = min(len(points), SIMULATED_POINTS)
    spread = [round(i * (len(points) - 1) / max(count - 1, 1)) for i in range(count)]
    order = list(dict.fromkeys([spread[0], spread[-1], *spread]))
    sample = []
    for index in order:
        if limits.deadline.expired():
            break
        try:
            simulated = realize(model, points[index].choice, problem).simulated
        except PlanError:
            continue
        sample.append([index + 1, simulated.memory, simulated.time])
    return sorted(sample)


def ft_anchors(
    model: CostModel, starts: Mapping[str, Plan], problem: SoapProblem, limits: Limits
) -> dict[str, Choice]:
    """The strategies FT's heuristic elimination also follows (`frontier.track`): the
    baselines the graph can express, Spartan's tiling, and the ILP's fastest when it
    is proven within `ANCHOR_SHARE` of the time (an incumbent is fine too)."""
    found = {
        name: choice
        for name, plan in starts.items()
        if (choice := model.choice_of(plan)) is not None
    }
    found["greedy"] = greedy.tile(model.graph, memory_budget=problem.memory_cap).choice
    try:
        result = _solve_ilp(model, problem, limits.share(ANCHOR_SHARE))
    except (ilp.IlpTooLarge, ilp.IlpInfeasible):
        return found
    if result.choice is not None:
        found["ilp"] = result.choice
    return found


def frontier_points(outcome: SearchOutcome[Plan]) -> list[tuple[int, float]]:
    """The (memory, seconds) estimates of the frontier `search_ft` reported."""
    return [(memory, seconds) for memory, seconds in outcome.details.get("frontier", ())]


# ------------------------------------------------------------------ greedy


def greedy_plan(problem: SoapProblem) -> tuple[Plan, greedy.Tiling]:
    """Spartan's tiling of `problem`, completed (also MCMC's "greedy" start)."""
    model = cost_model(problem)
    tiling = greedy.tile(model.graph, memory_budget=problem.memory_cap)
    return complete(problem.program, model.prescription(tiling.choice)), tiling


def search_greedy(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    model, built = timed_model(problem)
    plan, tiling = greedy_plan(problem)
    details = {
        **_graph_figures(model, built),
        "communicated_bytes": tiling.bytes,
        "tiling_seconds": round(tiling.seconds, 3),
    }
    return _outcome(
        evaluate(model, plan, problem), problem, starts, limits, StopReason.EXHAUSTED, details
    )


# ------------------------------------------------------------------ ilp


def _solve_ilp(model: CostModel, problem: SoapProblem, limits: Limits) -> ilp.IlpResult:
    """The ILP under the problem's cap, by the limits' deadline."""
    return ilp.solve(
        model.graph,
        memory_cap=problem.memory_cap,
        deadline=limits.deadline,
        max_variables=ILP_MAX_VARIABLES,
    )


@dataclass(frozen=True)
class IlpSolved:
    """`search=ilp` solved on its cost graph, its plan not yet made (`solve_ilp`)."""

    model: CostModel
    built: float
    """Seconds building the cost graph took (0 when built before)."""
    result: ilp.IlpResult | ilp.IlpTooLarge | ilp.IlpInfeasible
    """HiGHS's answer, or why the ILP has none."""


def solve_ilp(
    problem: SoapProblem, limits: Limits, model: tuple[CostModel, float] | None = None
) -> IlpSolved:
    """`search=ilp`'s solving alone, on `model` (`timed_model`'s; built here by
    default): the part `search=auto` runs in a thread of its own while it prices its
    starts. It reads the cost graph and writes nothing shared, and HiGHS releases the
    GIL while it solves (scipy's `Highs.run` binding drops it: docs/benchmarks.md,
    issue 31 round 8)."""
    graph, built = model or timed_model(problem)
    try:
        result: ilp.IlpResult | ilp.IlpTooLarge | ilp.IlpInfeasible = _solve_ilp(
            graph, problem, limits.share(FT_SHARE)
        )
    except (ilp.IlpTooLarge, ilp.IlpInfeasible) as err:
        result = err
    return IlpSolved(graph, built, result)


def ilp_outcome(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits, solved: IlpSolved
) -> SearchOutcome[Plan]:
    """`search=ilp`'s outcome from its solving (`solve_ilp`): the plan completed and
    simulated; a model too large, the greedy tiling instead, with a note."""
    model, result = solved.model, solved.result
    if isinstance(result, ilp.IlpTooLarge):
        outcome = search_greedy(problem, starts, limits)
        outcome.details["ilp_notes"] = [f"{result}: search=greedy's tiling instead"]
        return outcome
    if isinstance(result, ilp.IlpInfeasible):
        raise FrontierError(str(result)) from None
    if result.choice is None:
        raise FrontierError(
            f"search=ilp found no strategy within its time ({result.seconds:.1f} s): raise timeout"
        )
    details = {
        **_graph_figures(model, solved.built),
        "ilp": {
            "status": result.status,
            "gap": result.gap,
            "bound": result.bound,
            "variables": result.variables,
            "constraints": result.constraints,
            "seconds": round(result.seconds, 3),
        },
    }
    stopped = StopReason.TIMEOUT if result.status == "timeout" else StopReason.EXHAUSTED
    return _outcome(
        realize(model, result.choice, problem), problem, starts, limits, stopped, details
    )


def search_ilp(
    problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits
) -> SearchOutcome[Plan]:
    return ilp_outcome(problem, starts, limits, solve_ilp(problem, limits))
