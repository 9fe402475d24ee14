"""The fixed-order caching DP (placement's `dp-fixed-order`; ROC's own DP, `dp`, is
tests/test_placement_roc_dp.py): the fewest bytes moved on every small random graph
(against a brute force over every keep/evict choice), never more than the swap
planner's Belady and LRU plans, a bounded form above `max_states` that says so, and
plans that verify within their capacity and compute the step."""

from __future__ import annotations

import itertools
import time

import numpy as np
import pytest
from conftest import examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag, Value
from tasoc.ir.memory import replay, tensor_bytes, unplaced
from tasoc.ir.placement_plan import SwapIn, SwapOut, positions, readers_in_order, write_placed
from tasoc.ir.program import entry_function, verify_ir
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.dp import DpPlan, plan_dp, transferred_bytes
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import capacities, graphs

MAX_CHOICES = 16
"""The most eviction gaps `brute_force` tries every subset of (2**16 plans)."""


EXACT = 1 << 20
"""`max_states` for the DP to stay exact on every graph the brute force can try: its
states are at most the subsets of the eviction gaps times the params' arrivals."""


class TooManyChoices(Exception):
    """A graph whose eviction gaps are too many to try every subset of."""


def brute_force(dag: Dag, signature: TrainingSignature | None, capacity: int) -> int | None:
    """The fewest bytes any placement of `dag`'s schedule moves within `capacity`, by
    trying every choice: where each param starts, and for every value, whether it is
    evicted between each two of its touches (made, read; only gaps with an op between
    them, since evicting across no op frees nothing). None when nothing fits."""
    n = len(dag.ops)
    where = positions(dag.ops)
    readers = readers_in_order(dag)
    replacing = dict(signature.replaces) if signature is not None else {}
    new_value = {dag.outputs[r]: a for r, a in replacing.items()}
    pinned = {v for r, v in enumerate(dag.outputs) if r not in replacing}
    persistent = [*signature.params, *signature.state] if signature is not None else []
    hostable = [a for a in persistent if dag.args[a].out not in dag.outputs]
    values: list[Value] = [arg.out for arg in dag.args]
    values += [v for node in dag.ops for v in node.results]
    best = None
    for hosted in itertools.product([False, True], repeat=len(hostable)):
        host = {a for a, on_host in zip(hostable, hosted, strict=True) if on_host}
        arriving = sum(tensor_bytes(dag.args[a].out.sig) for a in range(len(dag.args)))
        arriving -= sum(tensor_bytes(dag.args[a].out.sig) for a in host)
        if arriving > capacity:
            continue
        held = np.zeros(n, dtype=np.int64)  # bytes while each op runs with nothing evicted
        forced = 0  # bytes moved whatever is evicted
        cover, owner, copy_out = [], [], []  # per gap: bytes freed per op, value; per value
        for index, v in enumerate(values):
            size = tensor_bytes(v.sig)
            reads = [where[node] for node in readers.get(v, ())]
            made = -1 if v.node.is_arg else where[v.node]
            copied = index in host or (v in new_value and new_value[v] in host)
            kept = v in pinned or (v in new_value and new_value[v] not in host)
            if v in new_value and new_value[v] in host:
                forced += size  # its new value leaves on the host
            if v.node.is_arg and copied:
                if not reads:
                    continue
                forced += size  # swapped in for its first reader
                made = reads[0]
            elif v.node.is_arg and not reads and not kept:
                continue  # released at the start
            end = n - 1 if kept else (reads[-1] if reads else made)
            held[max(made, 0) : end + 1] += size
            touches = [made, *(r for r in reads if r > made)]
            for a, b in itertools.pairwise(touches):
                if b > a + 1 and not kept:
                    cover.append(np.zeros(n, dtype=np.int64))
                    cover[-1][a + 1 : b] = size
                    owner.append(len(copy_out))
            copy_out.append(0 if copied else size)
        if len(cover) > MAX_CHOICES:
            raise TooManyChoices
        if not cover:
            fits, costs = np.array([held.max(initial=0) <= capacity]), np.array([forced])
        else:
            chosen = (np.arange(2 ** len(cover))[:, None] >> np.arange(len(cover))) & 1
            memory = held - chosen @ np.stack(cover)
            fits = memory.max(axis=1, initial=0) <= capacity
            ins = np.stack(cover).max(axis=1)  # each gap's value bytes: its swap-in
            owners = np.zeros((len(cover), len(copy_out)), dtype=np.int64)
            owners[np.arange(len(cover)), owner] = 1
            outs = ((chosen @ owners) > 0) @ np.array(copy_out)
            costs = forced + chosen @ ins + outs
        if fits.any():
            cheapest = int(costs[fits].min())
            best = cheapest if best is None else min(best, cheapest)
    return best


# ---------------------------------------------------------------------- the tests


def weights_signature(dag: Dag) -> TrainingSignature:
    """A drawn graph's weights as params (no new values): the DP may place each on the
    host or the device."""
    params = tuple(i for i, arg in enumerate(dag.args) if arg.attr("is_param"))
    inputs = tuple(i for i, arg in enumerate(dag.args) if not arg.attr("is_param"))
    return TrainingSignature(None, inputs, (), params, (), (), ())


@st.composite
def small_steps(draw: st.DrawFn) -> tuple[ModuleOp, TrainingSignature]:
    """5 to 10 op programs: a random graph with its weights as params, or a random
    one-op forward program made a training step by `autodiff` (sgd: each weight's new
    value returned, so the DP also places new values)."""
    if draw(st.booleans()):
        module = draw(graphs(min_ops=5, max_ops=10))
        return module, weights_signature(dag_module.from_module(module))
    module = draw(graphs(max_ops=1, trainable=True))
    AutodiffPass(loss="sum", optimizer="sgd", lr=0.01).apply(Context(), module)
    signature = training_signature(entry_function(module))
    assert signature is not None
    return module, signature


def placed(module: ModuleOp, result: DpPlan) -> ModuleOp:
    """`module` placed as `result` says; verifies within the plan's capacity."""
    dag = dag_module.from_module(module, keep_order=True)
    copy = module.clone()
    write_placed(copy, dag, result.plan)
    copy.verify()
    verify_ir(copy)  # the replay within memory.capacity
    return copy


def swap_planner(
    dag: Dag, signature: TrainingSignature | None, capacity: int
) -> dict[str, int | None]:
    """Bytes moved by the Belady and LRU plans (None where they find none)."""
    moved: dict[str, int | None] = {}
    for policy in ("belady", "lru"):
        try:
            plan = plan_swaps(dag, signature, SwapSettings(capacity, policy))  # type: ignore[arg-type]
        except CapacityTooSmall:
            moved[policy] = None
        else:
            moved[policy] = transferred_bytes(plan)
    return moved


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), small_steps())
def test_dp_equals_brute_force_on_every_small_random_graph(
    data: st.DataObject, step: tuple[ModuleOp, TrainingSignature]
) -> None:
    module, signature = step
    capacity = data.draw(capacities(module, slack=1.0), label="capacity")
    dag = dag_module.from_module(module, keep_order=True)
    try:
        fewest = brute_force(dag, signature, capacity)
    except TooManyChoices:
        event("too many choices to try them all")
        return
    event(
        "nothing fits"
        if fewest is None
        else f"compared, {'no' if not fewest else 'some'} bytes moved"
    )
    if fewest is None:
        with pytest.raises(CapacityTooSmall, match=r"^op \d+ \(\w+\) needs \d+ bytes"):
            plan_dp(dag, signature, capacity, max_states=EXACT)
        return
    result = plan_dp(dag, signature, capacity, max_states=EXACT)
    assert result.method == "exact" and result.note.startswith("dp-fixed-order: exact")
    assert result.dp_bytes == fewest == result.transferred_bytes
    assert result.transferred_bytes == transferred_bytes(result.plan)
    placed(module, result)


@settings(max_examples=examples(100), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), small_steps())
def test_dp_never_moves_more_than_belady_or_lru(
    data: st.DataObject, step: tuple[ModuleOp, TrainingSignature]
) -> None:
    module, signature = step
    capacity = data.draw(capacities(module, slack=1.0), label="capacity")
    dag = dag_module.from_module(module, keep_order=True)
    baselines = [
        moved for moved in swap_planner(dag, signature, capacity).values() if moved is not None
    ]
    try:
        result = plan_dp(dag, signature, capacity)
    except CapacityTooSmall:
        assert not baselines  # where the swap planner fits, so does the DP
        return
    assert all(result.transferred_bytes <= moved for moved in baselines)


@settings(max_examples=examples(80), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), small_steps())
def test_dp_plans_verify_and_compute_the_step(
    data: st.DataObject, step: tuple[ModuleOp, TrainingSignature]
) -> None:
    module, signature = step
    capacity = data.draw(capacities(module, slack=1.0), label="capacity")
    dag = dag_module.from_module(module, keep_order=True)
    try:
        result = plan_dp(dag, signature, capacity)
    except CapacityTooSmall:
        event("nothing fits")
        return
    event(f"moves {'nothing' if result.transferred_bytes == 0 else 'bytes'}")
    copy = placed(module, result)
    assert replay(entry_function(copy)).peak_bytes <= capacity
    assert equivalent(module, unplaced(copy)).ok


def rnn_step() -> ModuleOp:
    module = get_model("rnn").build(layers=2, hidden=64, seq=6, batch=4)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    return module


def test_a_graph_too_large_for_the_exact_dp_takes_the_bounded_one_and_says_so() -> None:
    module = rnn_step()
    function = entry_function(module)
    capacity = replay(function).peak_bytes // 2
    dag = dag_module.from_module(module, keep_order=True)
    signature = training_signature(function)
    start = time.perf_counter()
    result = plan_dp(dag, signature, capacity, max_states=64)
    assert time.perf_counter() - start < 20  # bounded: no hang
    assert result.method in ("bounded", "belady", "lru")
    assert "more states than max_states=64" in result.note
    assert set(result.baselines) == {"belady", "lru"}
    found = result.dp_bytes if result.method == "bounded" else result.baselines[result.method]
    assert found is not None and result.transferred_bytes <= found
    assert result.transferred_bytes <= min(result.baselines.values())
    copy = placed(module, result)
    assert equivalent(module, unplaced(copy)).ok


def test_a_step_that_fits_moves_nothing_exactly() -> None:
    module = rnn_step()
    function = entry_function(module)
    dag = dag_module.from_module(module, keep_order=True)
    result = plan_dp(dag, training_signature(function), replay(function).peak_bytes)
    assert result.method == "exact" and result.transferred_bytes == 0
    assert not any(isinstance(move, SwapIn | SwapOut) for move in result.plan.moves())


def test_bad_input_fails_in_one_line() -> None:
    module = rnn_step()
    function = entry_function(module)
    dag = dag_module.from_module(module, keep_order=True)
    with pytest.raises(ValueError, match="max_states must be at least 1, got 0"):
        plan_dp(dag, None, 10**9, max_states=0)
    with pytest.raises(
        CapacityTooSmall,
        match=r"^op \d+ \(\w+\) needs \d+ bytes .* over the capacity of 1000 bytes$",
    ):
        plan_dp(dag, training_signature(function), 1000)
