"""ROC's memory manager (`placement{search=dp}`, Jia thesis §4.5, Algorithm 3): on every
small random graph the DP loads exactly what a brute force over every execution order
and every caching choice finds least, its plan replays within the capacity, and it never
loads more than LRU, Belady or streaming on the graph's own order; on tasoc steps its
placed programs verify, compute the step (on JAX too) and move no more than the swap
planner; a state space over `max-states` fails in one line."""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import pytest
from conftest import examples, load_benchmark
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from placement_helpers import placed, rnn_step
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.driver.main import main
from tasoc.ir import dag as dag_module
from tasoc.ir.memory import replay, unplaced
from tasoc.ir.placement_plan import write_placed
from tasoc.ir.program import entry_function, verify_ir
from tasoc.ir.training import training_signature
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.dp import plan_dp, transferred_bytes
from tasoc.passes.placement.roc_dp import (
    CoarseGraph,
    NoOrderFits,
    RocSolution,
    StateSpaceTooLarge,
    cache_loads,
    coarsen,
    roc_plan,
    solve,
)
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import capacities, graphs

BRUTE_LIMIT = 200_000
"""The most caching choices `brute_force` tries before giving up on a graph."""


class TooManyChoices(Exception):
    """A graph with too many (order, caching) choices to try them all."""


@st.composite
def coarse_graphs(draw: st.DrawFn) -> tuple[CoarseGraph, int]:
    """1 to 5 ops over 1 to 3 host inputs, each op reading one to three tensors made
    before it and making one or two, with sizes and work of a few bytes; and a
    capacity from below the largest op's need (nothing fits) to everything at once."""
    inputs = draw(st.integers(1, 3))
    sizes = [draw(st.integers(1, 8)) for _ in range(inputs)]
    ins, outs, work = [], [], []
    for _ in range(draw(st.integers(1, 5))):
        made = len(sizes)
        read = draw(st.sets(st.integers(0, made - 1), min_size=1, max_size=min(3, made)))
        ins.append(sum(1 << t for t in read))
        count = draw(st.integers(1, 2))
        sizes += [draw(st.integers(1, 8)) for _ in range(count)]
        outs.append(sum(1 << t for t in range(made, made + count)))
        work.append(draw(st.integers(0, 3)))
    graph = CoarseGraph(tuple(sizes), tuple(ins), tuple(outs), tuple(work))
    need = max(graph.size(i | o) + w for i, o, w in zip(ins, outs, work, strict=True))
    capacity = draw(st.integers(need - 2, sum(sizes) + max(work)), label="capacity")
    return graph, capacity


def topological_orders(graph: CoarseGraph) -> Iterator[tuple[int, ...]]:
    for order in itertools.permutations(range(graph.num_ops)):
        done = 0
        for o in order:
            if graph.preds[o] & ~done:
                break
            done |= 1 << o
        else:
            yield order


def subsets(mask: int) -> Iterator[int]:
    sub = mask
    while True:
        yield sub
        if sub == 0:
            return
        sub = (sub - 1) & mask


def brute_force(graph: CoarseGraph, capacity: int) -> int | None:
    """The fewest bytes loaded over every topological order and, before each op, every
    subset of the cache kept (the rest dropped): the model of `roc_dp`'s docstring,
    without memoisation. None when no choice fits."""
    best: int | None = None
    tried = 0

    def run(order: tuple[int, ...], i: int, state: int, cached: int, loaded: int) -> None:
        nonlocal best, tried
        if i == len(order):
            best = loaded if best is None else min(best, loaded)
            return
        o = order[i]
        for kept in subsets(cached):
            tried += 1
            if tried > BRUTE_LIMIT:
                raise TooManyChoices
            touched = kept | graph.ins[o] | graph.outs[o]
            if graph.size(touched) + graph.work[o] > capacity:
                continue
            after = state | 1 << o
            cost = loaded + graph.size(graph.ins[o] & ~kept)
            run(order, i + 1, after, touched & graph.live(after), cost)

    for order in topological_orders(graph):
        run(order, 0, 0, 0, 0)
    return best


def replayed(graph: CoarseGraph, solution: RocSolution, capacity: int) -> int:
    """What the solution's steps load, checked step by step against the model: a
    topological order, each op's cache a subset of what the op before kept, every op
    within the capacity, what it keeps live and touched."""
    state, kept, loaded = 0, 0, 0
    for step in solution.steps:
        o = step.op
        assert graph.preds[o] & ~state == 0 and not state >> o & 1
        assert step.cached & ~kept == 0
        touched = step.cached | graph.ins[o] | graph.outs[o]
        assert graph.size(touched) + graph.work[o] <= capacity
        loaded += graph.size(graph.ins[o] & ~step.cached)
        state |= 1 << o
        assert step.kept & ~(touched & graph.live(state)) == 0
        kept = step.kept
    assert state == (1 << graph.num_ops) - 1
    return loaded


@settings(max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coarse_graphs())
def test_the_dp_loads_the_brute_force_optimum_on_every_small_graph(
    drawn: tuple[CoarseGraph, int],
) -> None:
    graph, capacity = drawn
    try:
        fewest = brute_force(graph, capacity)
    except TooManyChoices:
        event("too many choices to try them all")
        return
    if fewest is None:
        event("nothing fits")
        with pytest.raises(NoOrderFits, match=r"^no order of the \d+ ops runs within"):
            solve(graph, capacity)
        return
    event(f"compared, {'nothing' if not fewest else 'some bytes'} loaded")
    solution = solve(graph, capacity)
    assert solution.loaded == fewest == replayed(graph, solution, capacity)


@settings(max_examples=examples(200), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(coarse_graphs())
def test_the_dp_never_loads_more_than_lru_belady_or_streaming(
    drawn: tuple[CoarseGraph, int],
) -> None:
    graph, capacity = drawn
    own = tuple(range(graph.num_ops))  # the order the graph lists its ops in
    baselines = {p: cache_loads(graph, own, capacity, p) for p in ("stream", "lru", "belady")}
    try:
        solution = solve(graph, capacity)
    except NoOrderFits:
        assert all(loads is None for loads in baselines.values())
        return
    for policy, loads in baselines.items():
        assert loads is None or solution.loaded <= loads, policy


def test_the_dp_reorders_to_keep_a_large_tensor_cached() -> None:
    """Two consumers of a large input, one of them behind a chain: run in the listed
    order, the large tensor is evicted while the chain runs and loaded twice; the DP
    runs both consumers first, loading it once."""
    # tensors: big=0, x=1, a=2, b=3, c=4, d=5; ops: (big, x) -> a -> b -> c; big -> d
    graph = CoarseGraph(
        sizes=(10, 1, 1, 4, 4, 1),
        ins=(0b11, 0b100, 0b1000, 0b1),
        outs=(0b100, 0b1000, 0b10000, 0b100000),
    )
    capacity = 14
    listed = {p: cache_loads(graph, (0, 1, 2, 3), capacity, p) for p in ("lru", "belady")}
    solution = solve(graph, capacity)
    assert solution.loaded == 11 and listed == {"lru": 21, "belady": 21}
    assert solution.order.index(3) < solution.order.index(1)


def test_a_state_space_over_the_bound_fails_naming_the_bound_and_the_count() -> None:
    independent = CoarseGraph(sizes=(1,) * 8, ins=(0b1,) * 4, outs=(0b10, 0b100, 0b1000, 0b10000))
    with pytest.raises(
        StateSpaceTooLarge,
        match=r"^search=dp: ROC's DP has at least \d+ \(execution state, cached tensor set\) "
        r"pairs on 4 ops, over max-states=10$",
    ):
        solve(independent, 100, max_states=10)
    assert solve(independent, 100).execution_states == 16


# ------------------------------------------------------------------ tasoc steps


@st.composite
def small_steps(draw: st.DrawFn) -> ModuleOp:
    """A random one- or two-op forward program made a training step by `autodiff`."""
    module = draw(graphs(max_ops=2, trainable=True))
    AutodiffPass(loss="sum", optimizer="sgd", lr=0.01).apply(Context(), module)
    return module


@settings(max_examples=examples(40), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), small_steps())
def test_search_dp_plans_verify_compute_the_step_and_move_no_more_than_the_swap_planner(
    data: st.DataObject, module: ModuleOp
) -> None:
    capacity = data.draw(capacities(module, slack=1.0), label="capacity")
    dag = dag_module.from_module(module, keep_order=True)
    signature = training_signature(entry_function(module))
    try:
        found = roc_plan(dag, signature, capacity)
    except CapacityTooSmall:
        event("nothing fits")
        return
    event(f"the {found.order_from}'s order, {found.coarse.graph.num_ops} coarse ops")
    moved = transferred_bytes(found.plan)
    assert moved == found.dp_plan.transferred_bytes
    assert moved <= plan_dp(dag, signature, capacity).transferred_bytes
    for policy in ("belady", "lru"):
        try:
            plan = plan_swaps(dag, signature, SwapSettings(capacity, policy))
        except CapacityTooSmall:
            continue
        assert moved <= transferred_bytes(plan)
    copy = module.clone()
    write_placed(copy, dag, found.plan)
    verify_ir(copy)
    assert replay(entry_function(copy)).peak_bytes <= capacity
    assert equivalent(module, unplaced(copy)).ok


def test_coarsening_keeps_the_step_acyclic_and_counts_every_crossing_value_once() -> None:
    module = rnn_step()
    dag = dag_module.from_module(module, keep_order=True)
    for groups in (1, 4, 16):
        coarse = coarsen(dag, groups)
        assert len(coarse.runs) == groups
        assert [node for run in coarse.runs for node in run] == list(dag.ops)
        values = [v for tensor in coarse.tensors for v in tensor]
        assert len(values) == len(set(values))
        assert coarse.order(range(groups)) == tuple(dag.ops)


def test_search_dp_on_a_gcn_step_reorders_it_and_moves_less_than_the_fixed_order() -> None:
    """The benchmark's GCN stand-in at 3/4 of its peak: ROC's order, planned op by op,
    moves fewer bytes than the fixed-order DP on the step's own schedule."""
    module = load_benchmark("roc").gcn(quick=True)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    capacity = replay(entry_function(module)).peak_bytes * 3 // 4
    copy, section = placed(module, search="dp", capacity=capacity)
    verify_ir(copy)
    fine = len(dag_module.from_module(module).ops)
    assert 1 < section["coarse_ops"] <= fine and section["order_from"] == "dp"
    assert section["execution_states"] <= section["dp_pairs"] <= section["max_states"] == 65536
    assert section["dp_note"].startswith("dp: ROC's DP over ")
    assert "dp" in section["fraction_of_ideal"]
    dag = dag_module.from_module(module, keep_order=True)
    fixed = plan_dp(dag, training_signature(entry_function(module)), capacity)
    assert section["transferred_bytes"] < fixed.transferred_bytes
    assert equivalent(module, unplaced(copy)).ok


def test_a_step_whose_coarse_ops_fit_no_order_keeps_its_own_and_says_so() -> None:
    """The RNN step's coarse ops (each holding all its inputs and results at once) need
    more than half its peak: the step's own order is planned, and the note says why."""
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    copy, section = placed(module, search="dp", capacity=capacity)
    verify_ir(copy)
    assert section["order_from"] == "schedule" and section["dp_pairs"] is None
    assert section["dp_note"].startswith("dp: no order of the coarse ops fits ROC's model")
    assert equivalent(module, unplaced(copy)).ok


MLP = """\
func.func @main(%x: tensor<64x32xf32>, %w1: tensor<32x64xf32> {graph.param},
                %w2: tensor<64x16xf32> {graph.param}) -> tensor<64x16xf32> {
  %h = graph.matmul %x, %w1 : tensor<64x64xf32>
  %r = graph.relu %h : tensor<64x64xf32>
  %y = graph.matmul %r, %w2 : tensor<64x16xf32>
  func.return %y : tensor<64x16xf32>
}
"""


def test_a_search_dp_program_runs_on_jax_as_the_unplaced_reference(
    tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    source, out = tmp_path / "mlp.mlir", tmp_path / "placed.mlir"  # type: ignore[operator]
    source.write_text(MLP)
    pipeline = "autodiff{loss=mse optimizer=sgd lr=0.1},placement{search=dp capacity=60000}"
    assert main(["opt", str(source), "-p", pipeline, "-o", str(out)]) == 0
    assert "memory.swap_in" in out.read_text()
    assert main(["run", str(out), "--mode", "runtime", "--check"]) == 0
    printed = capsys.readouterr().out
    assert "check: equivalent to the numpy reference of the unplaced program" in printed


def test_a_state_space_over_max_states_fails_the_pass_in_one_line(
    tmp_path: pytest.TempPathFactory, capsys: pytest.CaptureFixture[str]
) -> None:
    source = tmp_path / "mlp.mlir"  # type: ignore[operator]
    source.write_text(MLP)
    pipeline = "autodiff{loss=mse},placement{search=dp capacity=60000 max-states=1}"
    assert main(["opt", str(source), "-p", pipeline]) == 1
    lines = capsys.readouterr().err.strip().splitlines()
    assert lines == [
        "tasoc: error: placement: search=dp: ROC's DP has at least 2 (execution state, "
        "cached tensor set) pairs even with the step as one op, over max-states=1"
    ]
