"""The `memory` dialect's Python side: the schedule's replay, `unplaced`, the placement
plan's writer, `placement{search=offload-all}`, and the placed-program strategies (the
text form and every verifier message are lit tests, tests/filecheck/memory)."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from memory_helpers import SWAPS, SWAPS_IN_PLACE, parse, training_step
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64

from tasoc.backends.arguments import random_inputs
from tasoc.driver.sources import make_context
from tasoc.ir import dag as dag_module
from tasoc.ir.liveness import peak_memory
from tasoc.ir.memory import (
    CAPACITY_ATTR,
    PLAN_ATTR,
    POOL_ATTR,
    Pool,
    SwapInOp,
    SwapOutOp,
    is_placed,
    moved_bytes,
    replay,
    unplaced,
)
from tasoc.ir.program import IRRuleError, entry_function, verify_ir
from tasoc.passes.placement import PlacementFailed, PlacementPass
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import capacities, graphs, placed_programs

KIB16 = 64 * 64 * 4


def test_replay_holds_each_value_from_its_op_to_its_last_reader() -> None:
    run = replay(entry_function(parse(SWAPS)))
    # %x is held from the start (the caller's) until its free; %w is on the host.
    assert run.start == KIB16
    # swap_in %w: x, wd | matmul: x, wd, y | swap_out: x, y (wd died at the matmul)
    # relu: x, y, z | free %x: x, z (y died at the relu) | swap_in: z, yd | add: z, yd, o
    assert run.live == tuple(n * KIB16 for n in (2, 3, 2, 3, 2, 2, 3))
    assert run.peak_bytes == 3 * KIB16 and run.peak_op == 1


def test_replay_rounds_to_the_pool_and_counts_its_objects() -> None:
    function = entry_function(parse(SWAPS))
    pool = Pool((20000, 40000), (3, 1))
    assert replay(function, pool).peak_bytes == 3 * 20000
    with pytest.raises(IRRuleError, match=r"'graph.matmul' .* all 2 of that size class are in use"):
        replay(function, Pool((20000,), (2,)))


def test_an_op_marked_in_place_holds_its_result_in_its_operands_bytes() -> None:
    """`memory.in_place` (SWAPS_IN_PLACE): one tensor fewer while the relu and the add
    run, each result in its operand's bytes."""
    run = replay(entry_function(parse(SWAPS_IN_PLACE)))
    assert run.live == tuple(n * KIB16 for n in (2, 3, 2, 2, 2, 2, 2))
    assert str(unplaced(parse(SWAPS_IN_PLACE))) == str(unplaced(parse(SWAPS)))  # mark dropped


@pytest.mark.parametrize(
    ("old", "new", "message"),
    [
        (
            "graph.matmul %x, %wd :",
            "graph.matmul %x, %wd {memory.in_place = 0 : i64} :",
            "element-wise",
        ),
        (
            "graph.add %z, %yd :",
            "graph.add %z, %yd {memory.in_place = 2 : i64} :",
            "one of its operands",
        ),
        ("graph.relu %y :", "graph.relu %x {memory.in_place = 0 : i64} :", "does not die at it"),
    ],
    ids=["not-element-wise", "no-such-operand", "operand-lives-on"],
)
def test_a_mark_in_place_the_op_may_not_carry_is_refused(old: str, new: str, message: str) -> None:
    with pytest.raises(IRRuleError, match=message):
        verify_ir(parse(SWAPS.replace(old, new)))


def test_the_verifier_checks_the_capacity_the_module_states() -> None:
    module = parse(SWAPS)
    del module.attributes[POOL_ATTR]
    module.attributes[CAPACITY_ATTR] = IntegerAttr(3 * KIB16, i64)
    verify_ir(module)
    module.attributes[CAPACITY_ATTR] = IntegerAttr(3 * KIB16 - 1, i64)
    with pytest.raises(IRRuleError, match=r"'graph.matmul' holds 49152 bytes .* over the capacity"):
        verify_ir(module)


def test_unplaced_drops_moves_and_spaces_and_computes_the_same() -> None:
    module = parse(SWAPS)
    plain = unplaced(module)
    assert is_placed(module) and not is_placed(plain)
    text = str(plain)
    assert "memory." not in text and "graph.add %z, %y " in text + " "
    assert equivalent(plain, unplaced(plain)).ok


def test_moved_bytes_sum_the_swaps() -> None:
    assert moved_bytes(entry_function(parse(SWAPS))) == {"swap_out": KIB16, "swap_in": 2 * KIB16}


def test_offload_all_swaps_every_saved_activation_across_the_step() -> None:
    """With SGD the peak is in the backward pass, where the offloaded activations are
    not all back yet: offloading lowers it (with Adam the update's state is the peak)."""
    module = training_step("sgd")
    before = replay(entry_function(module))
    PlacementPass().apply(make_context(), module)
    module.verify()
    verify_ir(module)
    function = entry_function(module)
    outs = [op for op in function.walk() if isinstance(op, SwapOutOp)]
    ins = [op for op in function.walk() if isinstance(op, SwapInOp)]
    # the input, the hidden relu and the error term go out and come back once each
    assert len(outs) == len(ins) == 3
    assert all(op.prefetch_target is not None for op in ins)
    assert replay(function).peak_bytes < before.peak_bytes
    assert equivalent(training_step("sgd"), unplaced(module)).ok


def test_params_on_the_host_leave_and_come_back_in_host_memory() -> None:
    module = training_step()
    PlacementPass(params="host", prefetch=0).apply(make_context(), module)
    verify_ir(module)
    function = entry_function(module)
    kinds = function.function_type
    hosted = [str(t) for t in kinds.inputs.data if "memory.space" in str(t)]
    # two weights and Adam's two moments of each (the step counter is a scalar state)
    assert len(hosted) >= 6
    for result, argument in (
        (i, a) for i, a in enumerate(kinds.outputs.data) if "memory.space" in str(a)
    ):
        assert result > 0 and "host" in str(argument)
    assert equivalent(training_step(), unplaced(module)).ok


def test_a_capacity_below_the_plan_fails_the_pass_in_one_line() -> None:
    module = training_step()
    with pytest.raises(
        PlacementFailed, match=r"^placement: .* over the capacity of 1024 bytes \(1 KiB\)$"
    ):
        PlacementPass(capacity="1KiB").apply(make_context(), module)


def test_a_placed_program_is_not_placed_again() -> None:
    with pytest.raises(PlacementFailed, match="placed already"):
        PlacementPass().apply(make_context(), parse(SWAPS))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"capacity": "16XB"}, "unknown unit 'XB'"),
        ({"capacity": -3}, "must not be negative"),
        ({"capacity": 0}, "at least one byte"),
        ({"prefetch": -1}, "prefetch"),
        ({"min_bytes": "lots"}, "min-bytes"),
        ({"in_place": "on"}, "in-place=on needs a swapping planner"),
    ],
)
def test_bad_options_fail_when_the_pass_is_built(options: dict, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        PlacementPass(**options)


def test_capacities_parse_in_every_form_users_write() -> None:
    assert PlacementPass(capacity="16GiB").capacity == "16GiB"
    assert PlacementPass(capacity=1.5e9).capacity == 1.5e9


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=6))
def test_every_drawn_placement_verifies_and_computes_what_the_program_does(
    data: st.DataObject, module: ModuleOp
) -> None:
    placed = data.draw(placed_programs(module))
    placed.verify()
    verify_ir(placed)
    assert equivalent(module, unplaced(placed)).ok


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=6))
def test_the_verifier_refuses_exactly_the_capacities_below_the_replayed_peak(
    data: st.DataObject, module: ModuleOp
) -> None:
    placed = data.draw(placed_programs(module))
    capacity = data.draw(capacities(placed))
    placed.attributes[CAPACITY_ATTR] = IntegerAttr(capacity, i64)
    peak = replay(entry_function(placed)).peak_bytes
    if capacity >= peak:
        verify_ir(placed)
    else:
        with pytest.raises(IRRuleError, match="over the capacity"):
            verify_ir(placed)


def test_the_unplaced_replay_is_the_peak_without_placement() -> None:
    """One figure: `liveness.peak_memory` is the replay of the step without placement,
    its split by kind, and `placement` reports it as `unplaced_peak_bytes`."""
    module = training_step()
    function = entry_function(module)
    run, memory = replay(function), peak_memory(function)
    assert (memory.peak_bytes, memory.op) == (run.peak_bytes, run.peak_op)
    PlacementPass(search="offload-all").apply(make_context(), module)
    plan = module.attributes[PLAN_ATTR]
    assert plan.data["unplaced_peak_bytes"].value.data == memory.peak_bytes


def test_the_light_graph_keeps_the_block_order_when_asked() -> None:
    module = training_step()
    block_order = [op.name.removeprefix("graph.") for op in entry_function(module).walk()]
    kept = dag_module.from_module(module, keep_order=True)
    assert [node.op for node in kept.ops] == block_order[1:-1]  # func.func, func.return


def test_inputs_are_drawn_for_what_a_swapped_in_value_feeds() -> None:
    """Adam's second moment kept on the host is still non-negative: `random_inputs`
    looks through the swap to the update that reads it, as for the unplaced step."""
    module = training_step()
    PlacementPass(params="host").apply(make_context(), module)
    placed, plain = random_inputs(module, 0), random_inputs(unplaced(module), 0)
    assert all((a == b).all() for a, b in zip(placed, plain, strict=True))
