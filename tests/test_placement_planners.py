"""placement's swap planner (SwapAdvisor §4.3.2), its LRU baseline and
`placement{search=belady|lru}`: plans fit their capacity by the verifier's replay and
by the simulator, compute what the step computes, and are priced beside the baselines."""

from __future__ import annotations

import io

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_helpers import training_step
from placement_helpers import V100, placed, rnn_step
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64

from tasoc.cost.machines import machine
from tasoc.driver.plots import render
from tasoc.ir import dag as dag_module
from tasoc.ir.liveness import peak_memory
from tasoc.ir.memory import (
    CAPACITY_ATTR,
    IN_PLACE_ATTR,
    SwapInOp,
    SwapOutOp,
    capacity_of,
    replay,
    unplaced,
)
from tasoc.ir.placement_plan import PlacementPlan, SwapIn, output_spaces, write_placed
from tasoc.ir.program import entry_block, entry_function, verify_ir
from tasoc.ir.training import training_signature
from tasoc.passes.figures import MemoryFigure
from tasoc.passes.placement import PlacementFailed, PlacementPass
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.passes.report import RunReport, reporting
from tasoc.sim.placement import simulate_plan
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import capacities, graphs


@pytest.mark.parametrize("policy", ["belady", "lru"])
@pytest.mark.parametrize("ratio", [1.25, 2.0])
def test_plans_fit_the_capacity_and_compute_the_step(policy: str, ratio: float) -> None:
    module = rnn_step()
    capacity = int(replay(entry_function(module)).peak_bytes / ratio)
    dag = dag_module.from_module(module, keep_order=True)
    plan = plan_swaps(
        dag,
        training_signature(entry_function(module)),
        SwapSettings(capacity, policy, prefetch=policy == "belady"),  # type: ignore[arg-type]
    )
    copy = module.clone()
    write_placed(copy, dag, plan)
    copy.verify()
    verify_ir(copy)  # the replay within memory.capacity
    assert replay(entry_function(copy)).peak_bytes <= capacity
    spaces = output_spaces(dag, plan.host_arguments)
    run = simulate_plan(dag, plan, V100, spaces=spaces)
    assert run.peak_bytes <= capacity and run.swapped_in_bytes > 0
    assert equivalent(module, unplaced(copy)).ok


def test_belady_beats_on_demand_lru_on_an_rnn() -> None:
    """An RNN reads its weights in a cycle, LRU's worst case: it evicts the weight the
    next step reads. Belady keeps it and prefetches the rest."""
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    _, section = placed(module, search="belady", capacity=capacity)
    assert section["speedup_over_lru"] > 1.0
    fractions = section["fraction_of_ideal"]
    assert fractions["ideal"] == 1.0 and 0 < fractions["lru"] < fractions["belady"] <= 1.0
    assert set(section["planner_seconds"]) == {"belady", "lru"}


def test_params_that_fit_stay_on_the_device_across_steps() -> None:
    """The double pass: with room for the weights but not for every activation, the
    weights start and end on the device (no host arguments), activations move."""
    module = rnn_step()
    peak = replay(entry_function(module)).peak_bytes
    copy, section = placed(module, search="belady", capacity=int(peak * 0.9))
    assert section["host_arguments"] == 0 and section["swapped_out_bytes"] > 0
    assert verify_ir(copy) is None


def test_the_memory_figure_draws_the_peak_without_placement() -> None:
    """The figure's line without placement is the step's one peak (`peak_memory`, as
    the report's `unplaced_peak_bytes`), above the capacity the plans fit in."""
    module = rnn_step()
    peak = peak_memory(entry_function(module)).peak_bytes
    with reporting(RunReport()) as report:
        PlacementPass(search="belady", capacity=peak // 2).apply(Context(), module.clone())
    figure = report.figures["placement-memory"]
    assert isinstance(figure, MemoryFigure)
    assert figure.unplaced_peak == report.section("placement")["unplaced_peak_bytes"] == peak
    # beside each plan, the ideal step: infinite memory, so it reaches the peak
    ideal = figure.ideal
    assert ideal is not None and max(ideal.held) == peak
    assert ideal.seconds == report.section("placement")["simulated_seconds"]["ideal_seconds"]
    stream = io.BytesIO()
    render(figure, stream)
    assert stream.getvalue().startswith(b"\x89PNG")


def test_a_step_that_fits_moves_nothing_and_says_so() -> None:
    module = rnn_step()
    copy, section = placed(module, search="belady", capacity="1GiB")
    assert section["swapped_in_bytes"] == section["swapped_out_bytes"] == 0
    assert "nothing is moved" in section["notes"][0]
    assert not [op for op in copy.walk() if isinstance(op, SwapInOp | SwapOutOp)]


def test_without_a_capacity_the_planner_takes_the_machines_device_memory() -> None:
    module, section = placed(rnn_step(), search="belady", machine="cpu-1")
    assert section["capacity"] == int(machine("cpu-1").device.memory_bytes)
    assert section["capacity_from"] == "machine cpu-1"
    assert capacity_of(module) == section["capacity"]


def test_a_capacity_below_one_ops_working_set_names_the_op() -> None:
    with pytest.raises(PlacementFailed, match=r"^placement: op \d+ \(\w+\) needs \d+ bytes"):
        placed(rnn_step(), search="belady", capacity=1024)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"search": "lru", "capacity": "1MiB", "machine": "tpu-v9"}, "unknown machine 'tpu-v9'"),
    ],
)
def test_bad_planner_options_fail_in_one_line(options: dict, message: str) -> None:
    with pytest.raises(PlacementFailed, match=message):
        placed(rnn_step(), **options)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=6))
def test_every_capacity_gets_a_plan_within_it_or_a_reason(
    data: st.DataObject, module: ModuleOp
) -> None:
    capacity = data.draw(capacities(module))
    dag = dag_module.from_module(module, keep_order=True)
    policy = data.draw(st.sampled_from(["belady", "lru"]))
    in_place = data.draw(st.booleans())
    try:
        plan = plan_swaps(dag, None, SwapSettings(capacity, policy, in_place=in_place))  # type: ignore[arg-type]
    except CapacityTooSmall:
        return  # the arguments or one op's operands and results alone are over it
    copy = module.clone()
    write_placed(copy, dag, plan)
    copy.attributes[CAPACITY_ATTR] = IntegerAttr(capacity, i64)
    verify_ir(copy)
    assert equivalent(module, unplaced(copy)).ok
    assert simulate_plan(dag, plan, V100).peak_bytes <= capacity


def test_plans_reusing_buffers_hold_less_and_verify() -> None:
    """`in-place=on`: the element-wise ops whose operand dies at them (the SGD updates,
    the gradients' sums over time steps, the activation gradients) write their results
    over it — marked `memory.in_place`, replayed within the capacity, computing the
    step — and the planner, with that room, swaps fewer bytes in than without."""
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 3
    options = {"search": "belady", "capacity": capacity}
    _, without = placed(module, **options)
    copy, section = placed(module, in_place="on", **options)
    verify_ir(copy)
    marked = [op for op in entry_block(entry_function(copy)).ops if IN_PLACE_ATTR in op.attributes]
    assert {op.name for op in marked} >= {"graph.scale", "graph.add"}
    assert equivalent(module, unplaced(copy)).ok
    assert section["swapped_in_bytes"] < without["swapped_in_bytes"]


def test_offload_all_still_plans_by_rule() -> None:
    _, section = placed(training_step("sgd"))
    assert section["search"] == "offload-all" and section["offloaded_values"] == 3


def test_search_dp_fixed_order_plans_the_fewest_bytes_and_says_how() -> None:
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    copy, section = placed(module, search="dp-fixed-order", capacity=capacity, max_states=64)
    verify_ir(copy)
    assert section["method"] in ("exact", "bounded", "belady", "lru")
    assert section["transferred_bytes"] <= min(section["compared_bytes"].values(), default=10**18)
    assert "dp-fixed-order" in section["fraction_of_ideal"]
    assert section["dp_note"].startswith("dp-fixed-order: ")
    assert equivalent(module, unplaced(copy)).ok


def _reads_after(plan: PlacementPlan) -> list[int]:
    """Per swap-in of `plan`, the schedule entries until the first op reading it."""
    schedule = plan.schedule
    leads = []
    for k, entry in enumerate(schedule):
        if isinstance(entry, SwapIn):
            readers = (
                j
                for j in range(k + 1, len(schedule))
                if isinstance(schedule[j], dag_module.Node) and entry.value in schedule[j].inputs  # type: ignore[union-attr]
            )
            leads.append(next(readers) - k)
    return leads


def test_headroom_lets_swap_ins_start_earlier_within_the_capacity() -> None:
    """Evictions that keep 5 % of the capacity free (`SwapSettings.headroom`) leave room
    for prefetches: on the RNN step at half its peak the swap-ins start further ahead
    of their readers, the plan is no slower, and it still verifies within the capacity
    and computes the step."""
    module = rnn_step()
    capacity = peak_memory(entry_function(module)).peak_bytes // 2
    dag = dag_module.from_module(module, keep_order=True)
    signature = training_signature(entry_function(module))
    plans = [plan_swaps(dag, signature, SwapSettings(capacity, headroom=h)) for h in (0.0, 0.05)]
    (before, after) = (_reads_after(plan) for plan in plans)
    assert sum(after) / len(after) > sum(before) / len(before)
    seconds = [simulate_plan(dag, plan, V100).seconds for plan in plans]
    assert seconds[1] <= seconds[0]
    placed_module = module.clone()
    write_placed(placed_module, dag, plans[1])
    verify_ir(placed_module)  # the replay within memory.capacity
    assert replay(entry_function(placed_module)).peak_bytes <= capacity
    assert equivalent(module, unplaced(placed_module)).ok
