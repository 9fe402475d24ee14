"""The joint choice of swapping and recomputing (`placement/joint.py`): from a rule's
plan, ops run again whose copies fit the link's idle time are swapped instead, and
stalled swaps whose ops may run again are recomputed instead, each move kept only when
the simulator says it is faster; every plan it returns runs, fits and computes the
step, and the link's idle time is claimed once."""

from __future__ import annotations

from dataclasses import replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from test_placement_recompute import (
    BN_CNN,
    assert_placed_fits_and_computes,
    assert_placed_runs,
    drawn_order,
    peak,
    problem_of,
    step,
)
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.placement_plan import check_plan, output_spaces
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.joint import LinkIdle, refine
from tasoc.passes.placement.prefetch import tuned_plan
from tasoc.passes.placement.recompute import Rule, candidates, recomputable
from tasoc.passes.placement.swap_planner import CapacityTooSmall, NoCopyLeft, SwapSettings
from tasoc.passes.search import Deadline
from tasoc.sim.placement import SWAP_IN, SWAP_OUT
from tasoc.verify.strategies import capacities, graphs


def test_ops_run_again_where_a_swap_would_hide_are_swapped_instead() -> None:
    """At twice oversubscription a rule that lets every convolution run again (ratio 1)
    spends compute while the link idles: the joint choice swaps some of them instead,
    and the plan is faster, runs fewer ops again, fits and computes the step."""
    module = step(BN_CNN)
    capacity = peak(module) // 2
    problem = problem_of(module, capacity)
    chosen = candidates(problem, Rule(1.0, several=True))
    start = tuned_plan(problem, SwapSettings(capacity, recompute=chosen))
    assert start.plan.recomputed()
    joint = refine(problem, start, frozenset(recomputable(problem)))
    assert joint.to_swap > 0 and joint.evaluations > 0
    assert joint.tuned.simulated.seconds < start.simulated.seconds
    assert len(joint.tuned.plan.recomputed()) < len(start.plan.recomputed())
    assert joint.tuned.settings.recompute < chosen
    assert_placed_fits_and_computes(module, problem, joint.tuned.plan, capacity)


def test_stalled_swaps_whose_ops_may_run_again_are_recomputed_instead() -> None:
    """At four times, swapping alone stalls on a saved activation: the joint choice
    lets it (and the forward values it is rebuilt from) run again, and is faster."""
    module = step(BN_CNN)
    capacity = peak(module) // 4
    problem = problem_of(module, capacity)
    start = tuned_plan(problem, SwapSettings(capacity))
    assert not start.plan.recomputed()
    joint = refine(problem, start, frozenset(recomputable(problem)))
    assert joint.to_recompute > 0
    assert joint.tuned.simulated.seconds < start.simulated.seconds
    assert joint.tuned.plan.recomputed()
    assert_placed_fits_and_computes(module, problem, joint.tuned.plan, capacity)


def test_past_its_deadline_the_joint_choice_keeps_the_plan_it_started_from() -> None:
    module = step(BN_CNN)
    capacity = peak(module) // 2
    problem = problem_of(module, capacity)
    chosen = candidates(problem, Rule(1.0, several=True))
    start = tuned_plan(problem, SwapSettings(capacity, recompute=chosen))
    joint = refine(problem, start, frozenset(recomputable(problem)), Deadline.after(0))
    assert joint.evaluations == 0 and joint.to_swap == joint.to_recompute == 0
    assert joint.tuned.plan is start.plan


def test_the_links_idle_time_is_claimed_once() -> None:
    """Copies claiming the same ops get what is idle there and no more: claims succeed
    until the idle time is spent, a claim that does not fit takes nothing, and what is
    claimed never exceeds what was idle."""
    module = step(BN_CNN)
    capacity = peak(module) // 2
    problem = problem_of(module, capacity)
    tuned = tuned_plan(problem, SwapSettings(capacity))
    idle = LinkIdle(tuned, problem)
    ops = range(len(idle.edges) - 1)
    for stream in (SWAP_IN, SWAP_OUT):
        before = sum(max(free, 0.0) for free in idle.free[stream])
        nbytes = 1 << 16
        claims = 0
        while idle.claim(stream, nbytes, reversed(ops)) is not None:
            claims += 1
        left = list(idle.free[stream])
        assert idle.claim(stream, nbytes, reversed(ops)) is None
        assert idle.free[stream] == left  # a claim that does not fit takes nothing
        spent = claims * problem.machine.host.time(nbytes)
        assert claims > 0 and spent <= before * (1 + 1e-9)


@settings(max_examples=10, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=8, trainable=True))
def test_every_jointly_chosen_plan_runs_fits_and_is_never_slower(
    data: st.DataObject, module: ModuleOp
) -> None:
    """Random training steps in random schedules, capacities and rules: the joint
    choice's plan passes the simulator's check, verifies within the capacity, computes
    the step, and is never slower than the plan it started from."""
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    capacity = data.draw(capacities(module, slack=1.0))
    problem = problem_of(module, capacity)
    problem = replace(problem, dag=problem.dag.scheduled(drawn_order(data, problem.dag)))
    rule = data.draw(st.builds(Rule, st.sampled_from([0.0, 0.1, 100.0]), st.booleans()))
    try:
        start = tuned_plan(problem, SwapSettings(capacity, recompute=candidates(problem, rule)))
    except (CapacityTooSmall, NoCopyLeft):
        return
    joint = refine(problem, start, frozenset(recomputable(problem)))
    plan = joint.tuned.plan
    assert joint.tuned.simulated.seconds <= start.simulated.seconds
    check_plan(problem.dag, plan, output_spaces(problem.dag, plan.host_arguments))
    assert_placed_runs(module, problem.dag, plan, capacity)
