"""The lower bound on any plan's step time (`tasoc/passes/placement/bound.py`): never
above a plan the planners find — on the step's own schedule and the seed schedules,
swapping and recomputing — equal to ideal when the step fits, above ideal where the
link must carry more than compute hides, and in the pass's report."""

from __future__ import annotations

from dataclasses import replace

import pytest
from placement_helpers import placed, rnn_step
from test_placement_recompute import BN_CNN, CNN, peak, problem_of, step
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.placement_plan import PlacementPlan
from tasoc.passes.placement.bound import _Cuts, link_seconds_per_byte, lower_bound
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.recompute import RULES, plan_recomputing
from tasoc.passes.placement.schedules import seed_orders
from tasoc.passes.placement.swap_planner import (
    CapacityTooSmall,
    SwapSettings,
    ideal_plan,
    plan_swaps,
    working_set,
)

_N = 6
_T = "tensor<256x256xf32>"
STREAM = (
    f"func.func @main(%x: {_T}, "
    + ", ".join(f"%w{k}: {_T} {{graph.param}}" for k in range(_N))
    + f") -> {_T} {{\n"
    + "".join(
        f"  %m{k} = graph.mul %t{k - 1}, %w{k} : {_T}\n  %t{k} = graph.tanh %m{k} : {_T}\n"
        for k in range(_N)
    ).replace("%t-1", "%x")
    + f"  func.return %t{_N - 1} : {_T}\n}}\n"
)
"""Element-wise layers with a 256 KiB weight each: microseconds of compute against
tens of microseconds of copies, so under a small capacity the link, not compute,
sets the floor."""


def plans_found(problem: PlacementProblem) -> list[float]:
    """Simulated seconds of the plans the swap planner finds for `problem`: LRU and
    belady on each seed schedule, and the recomputing plans of every rule on the step's
    own schedule."""
    found = []
    for order in seed_orders(problem.dag):
        reordered = replace(problem, dag=problem.dag.scheduled(order))
        for policy in ("lru", "belady"):
            settings = SwapSettings(
                problem.capacity, policy, prefetch=policy == "belady", in_place=problem.in_place
            )
            plan = plan_swaps(reordered.dag, problem.signature, settings)
            found.append(reordered.simulate(plan).seconds)
    for rule in RULES:
        settings = SwapSettings(problem.capacity, in_place=problem.in_place)
        recomputed = plan_recomputing(problem, settings, (rule,))
        if recomputed is not None:
            found.append(recomputed.simulated.seconds)
    return found


@pytest.mark.parametrize("name", ["rnn", "cnn", "bn_cnn", "stream"])
@pytest.mark.parametrize("ratio", [1.5, 2.0, 3.0, 4.0])
def test_the_bound_never_exceeds_a_plan_found(name: str, ratio: float) -> None:
    module = {"rnn": rnn_step, "cnn": lambda: step(CNN), "bn_cnn": lambda: step(BN_CNN)}.get(
        name, lambda: step(STREAM)
    )()
    capacity = int(peak(module) / ratio)
    problem = problem_of(module, capacity)
    if capacity < working_set(problem.dag)[1]:
        pytest.skip("no plan fits: the op's working set is over the capacity")
    bound = lower_bound(problem)
    try:
        found = plans_found(problem)
    except CapacityTooSmall:
        pytest.skip("the planner finds no plan at this capacity")
    assert bound.compute_seconds == pytest.approx(problem.simulate(_ideal(problem)).seconds)
    assert bound.seconds >= bound.compute_seconds
    assert all(bound.seconds <= seconds * (1 + 1e-9) for seconds in found), (bound, found)


@pytest.mark.parametrize("module", [rnn_step, lambda: step(BN_CNN), lambda: step(STREAM)])
def test_the_bound_is_ideal_when_the_step_fits(module: object) -> None:
    built: ModuleOp = module()  # type: ignore[operator]
    problem = problem_of(built, peak(built))
    bound = lower_bound(problem)
    assert bound.seconds == pytest.approx(problem.simulate(_ideal(problem)).seconds)
    assert bound.binds == "compute"
    assert bound.cut_op is None and bound.chain_cuts == 0
    # no schedule holds less at its peak than the floor of the least peak
    assert 0 < bound.least_peak_bytes <= peak(built)
    for order in seed_orders(problem.dag):
        ideal = PlacementPlan(order)
        assert bound.least_peak_bytes <= problem.simulate(ideal).peak_bytes


def test_the_bound_rises_above_ideal_where_the_link_binds() -> None:
    """At a third of the peak the element-wise step must move weights every layer: the
    floor is above ideal (the chain of cuts binds), and still below the plans found."""
    module = step(STREAM)
    problem = problem_of(module, peak(module) // 3)
    bound = lower_bound(problem)
    ideal = problem.simulate(_ideal(problem)).seconds
    assert bound.seconds > 1.05 * ideal
    assert bound.binds in {"cut", "chain"}
    assert bound.seconds <= min(plans_found(problem))
    # more capacity never raises the floor
    assert lower_bound(replace(problem, capacity=peak(module) // 2)).seconds <= bound.seconds


@pytest.mark.parametrize("module", [rnn_step, lambda: step(BN_CNN)])
def test_every_cut_at_once_is_each_cut_in_turn(module: object) -> None:
    """The excess of every op's cut summed from the values' bit sets (what the bound
    ranks cuts by) is the excess each cut gives on its own."""
    built: ModuleOp = module()  # type: ignore[operator]
    problem = problem_of(built, peak(built) // 3)
    cuts = _Cuts(problem, link_seconds_per_byte(problem), 0.0)
    at_once = cuts.excesses()
    assert (at_once > 0).any()
    for o in range(len(problem.dag.ops)):
        assert at_once[o] == pytest.approx(cuts.alive(o)[1])


@pytest.mark.parametrize("name", ["rnn", "stream"])
def test_with_buffer_reuse_the_bound_stays_below_the_plans_found(name: str) -> None:
    """`in_place`: an op that may write over a dying operand counts its result in the
    operand's bytes in its own cut, so the floor stays below plans that reuse (and the
    cuts summed at once are still each cut's own)."""
    module = rnn_step() if name == "rnn" else step(STREAM)
    problem = replace(problem_of(module, peak(module) // 3), in_place=True)
    bound = lower_bound(problem)
    assert all(bound.seconds <= seconds * (1 + 1e-9) for seconds in plans_found(problem))
    cuts = _Cuts(problem, link_seconds_per_byte(problem), 0.0)
    assert cuts.reused.any()
    at_once = cuts.excesses()
    for o in range(len(problem.dag.ops)):
        assert at_once[o] == pytest.approx(cuts.alive(o)[1])


def test_the_report_gives_the_best_possible_fraction() -> None:
    """Every plan the pass prices — the GA's searched schedules and the recomputing
    plans among them — is at or below the best possible fraction it reports."""
    module = step(STREAM)
    options = {"search": "ga", "recompute": "on", "budget": 30, "seed": 0, "timeout": 60}
    _, section = placed(module, capacity=peak(module) // 3, **options)
    bound = section["lower_bound"]
    assert 0 < bound["best_possible_fraction"] < 1
    assert set(section["fraction_of_ideal"]) >= {"lru", "belady", "ga"}
    for name, fraction in section["fraction_of_ideal"].items():
        if name != "ideal":  # infinite memory: not a plan within the capacity
            assert fraction <= bound["best_possible_fraction"] * (1 + 1e-9), name


def _ideal(problem: PlacementProblem) -> PlacementPlan:
    """The step's own schedule with nothing moved."""
    return ideal_plan(problem.dag)
