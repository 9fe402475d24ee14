"""The placed step's task graph (`tasoc.sim.placement`): three streams and device
memory on the one simulator, against the order-based replay of the memory dialect."""

from __future__ import annotations

from dataclasses import replace
from itertools import pairwise

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_helpers import training_step
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.cost.machines import machine
from tasoc.driver.sources import make_context
from tasoc.ir import dag as dag_module
from tasoc.ir.memory import replay, tensor_bytes
from tasoc.ir.placement_plan import (
    PlacementPlan,
    PlanError,
    Release,
    SwapIn,
    SwapOut,
    output_spaces,
    write_placed,
)
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.placement.offload import offload_all
from tasoc.sim.placement import HOST_LINK, simulate_plan
from tasoc.verify.strategies import graphs, placements

V100 = machine("v100-swapadvisor")


def offloaded(params: str = "device"):  # type: ignore[no-untyped-def]
    module = training_step("sgd")
    dag = dag_module.from_module(module, keep_order=True)
    choice = offload_all(
        dag,
        training_signature(entry_function(module)),
        params=params,  # type: ignore[arg-type]
        prefetch=1,
        min_bytes=0,
    )
    return module, dag, choice.plan


def placed_peak(module: ModuleOp, dag: dag_module.Dag, plan: PlacementPlan) -> int:
    placed = module.clone()
    write_placed(placed, dag, plan)
    return replay(entry_function(placed)).peak_bytes


def test_without_moves_the_step_is_its_ops_one_after_another() -> None:
    module = training_step("sgd")
    dag = dag_module.from_module(module, keep_order=True)
    run = simulate_plan(dag, PlacementPlan(dag.ops), V100)
    assert run.seconds == pytest.approx(run.compute_seconds)
    assert run.fraction_of_ideal == pytest.approx(1.0)
    assert run.peak_bytes == replay(entry_function(module)).peak_bytes
    assert run.swapped_in_bytes == run.swapped_out_bytes == 0


OVERWRITE = """\
func.func @main(%x: tensor<1024x1024xf32>) -> tensor<1024x1024xf32> {
  %y = graph.relu %x : tensor<1024x1024xf32>
  %z = graph.neg %y : tensor<1024x1024xf32>
  func.return %z : tensor<1024x1024xf32>
}
"""


def test_an_op_writing_over_its_operand_takes_no_bytes_and_waits_for_its_swap_out() -> None:
    """`PlacementPlan.in_place`: the neg writes its result over %y, which dies at it, so
    the step holds two 4 MiB tensors at its busiest, not three (the replay of the
    written program says the same); and since %y's swap-out is still copying when the
    relu ends, the neg starts only once that copy has ended."""
    module = Parser(make_context(), OVERWRITE).parse_module()
    dag = dag_module.from_module(module, keep_order=True)
    relu, neg = dag.ops
    schedule = (relu, SwapOut(relu.out), neg)
    apart = simulate_plan(dag, PlacementPlan(schedule), V100)
    over = simulate_plan(dag, PlacementPlan(schedule, in_place=True), V100)
    size = tensor_bytes(relu.out.sig)
    assert (apart.peak_bytes, over.peak_bytes) == (3 * size, 2 * size)
    assert placed_peak(module, dag, PlacementPlan(schedule, in_place=True)) == 2 * size
    relu_task, out_task, neg_task = over.tasks
    assert apart.timeline.start[apart.tasks[2]] == pytest.approx(apart.timeline.end[relu_task])
    assert (
        over.timeline.start[neg_task] >= over.timeline.end[out_task] > over.timeline.end[relu_task]
    )


ONE_WAY = replace(V100, host=replace(V100.host, duplex_bandwidth=None))
"""The preset with each direction of its host link at full speed whatever the other does."""


def test_swaps_run_on_their_own_streams_at_the_host_links_speed() -> None:
    module, dag, plan = offloaded()
    spaces = output_spaces(dag, plan.host_arguments)
    run = simulate_plan(dag, plan, ONE_WAY, spaces=spaces)
    assert run.swapped_out_bytes == run.swapped_in_bytes > 0
    starts, ends = run.timeline.start, run.timeline.end
    for entry, task in zip(plan.schedule, run.tasks, strict=True):
        if isinstance(entry, Release):
            assert task is None
        elif isinstance(entry, SwapIn | SwapOut):
            assert task is not None
            copy_time = V100.host.time(tensor_bytes(entry.value.sig))
            assert ends[task] - starts[task] == pytest.approx(copy_time)
    assert run.seconds >= run.compute_seconds
    assert run.peak_bytes <= placed_peak(module, dag, plan)


def test_both_directions_share_the_links_duplex_bandwidth() -> None:
    """v100-swapadvisor's PCIe: 12 GB/s one way, 20 GB/s both ways together. Every copy
    takes at least its one-way time, the shared link carries one copy at a time at
    the duplex rate, and a copy ends only when its share of the shared link has."""
    assert V100.host.duplex_bandwidth == 20e9 and V100.host.bandwidth == 12e9
    _, dag, plan = offloaded()
    run = simulate_plan(dag, plan, V100, spaces=output_spaces(dag, plan.host_arguments))
    starts, ends, graph = run.timeline.start, run.timeline.end, run.graph
    for entry, task in zip(plan.schedule, run.tasks, strict=True):
        if isinstance(entry, SwapIn | SwapOut):
            assert task is not None
            nbytes = tensor_bytes(entry.value.sig)
            began = min(starts[dep] for dep in graph[task].deps)
            assert ends[task] - began >= V100.host.time(nbytes) * (1 - 1e-12)
            shared = [d for d in graph[task].deps if graph[d].resource == HOST_LINK]
            assert [graph[d].duration for d in shared] == [pytest.approx(nbytes / 20e9)]
    on_link = sorted((starts[t], ends[t]) for t in graph.ids() if graph[t].resource == HOST_LINK)
    assert all(a[1] <= b[0] * (1 + 1e-12) for a, b in pairwise(on_link))


def test_swapping_params_in_and_out_costs_time_on_a_slow_link() -> None:
    _, dag, plan = offloaded("host")
    spaces = output_spaces(dag, plan.host_arguments)
    slow = replace(V100, host=replace(V100.host, bandwidth=1e6, duplex_bandwidth=None))
    assert simulate_plan(dag, plan, slow, spaces=spaces).fraction_of_ideal < 0.5


def test_a_capacity_holds_allocations_until_swap_outs_end() -> None:
    """With the capacity at the replay's peak the timed peak stays under it, however
    slow the swap-outs: allocations wait for the copies the replay already freed."""
    module, dag, plan = offloaded()
    peak = placed_peak(module, dag, plan)
    slow = replace(V100, host=replace(V100.host, bandwidth=1e5, duplex_bandwidth=None))
    free_run = simulate_plan(dag, plan, slow)
    capped = simulate_plan(dag, replace(plan, capacity=peak), slow)
    assert capped.peak_bytes <= peak
    assert capped.seconds >= free_run.seconds


def test_a_plan_that_cannot_run_is_refused_in_one_line() -> None:
    _, dag, _ = offloaded()
    value = dag.ops[0].results[0]
    broken = PlacementPlan((dag.ops[0], SwapIn(value), *dag.ops[1:]))
    with pytest.raises(PlanError, match=r"swaps in .* which has no host copy"):
        simulate_plan(dag, broken, V100)
    twice = PlacementPlan((dag.ops[0], SwapOut(value), SwapOut(value), *dag.ops[1:]))
    with pytest.raises(PlanError, match="again"):
        simulate_plan(dag, twice, V100)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=6))
def test_drawn_plans_keep_streams_fifo_and_memory_within_the_replay(
    data: st.DataObject, module: ModuleOp
) -> None:
    dag = dag_module.from_module(module, keep_order=True)
    plan = data.draw(placements(dag))
    peak = placed_peak(module, dag, plan)
    bandwidth = data.draw(st.sampled_from([1e3, 1e9]))
    shared = data.draw(st.sampled_from([None, 1.5 * bandwidth]))
    slow = replace(V100, host=replace(V100.host, bandwidth=bandwidth, duplex_bandwidth=shared))
    run = simulate_plan(dag, replace(plan, capacity=peak), slow)
    assert run.peak_bytes <= peak
    assert run.seconds >= run.compute_seconds * (1 - 1e-12)
    ops = [t for e, t in zip(plan.schedule, run.tasks, strict=True) if e in set(dag.ops)]
    assert all(run.timeline.end[a] <= run.timeline.start[b] for a, b in pairwise(ops))
