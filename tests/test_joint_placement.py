"""placement on sharded training steps (one device's view, written back in place) and
soap-shard pricing strategies over the capacity by swapping (`place=`): DESIGN.md §8."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from autodiff_helpers import training
from conftest import Result, examples
from hypothesis import HealthCheck, given, reject, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.driver.sources import SourceMap, build_zoo_model, parse_mlir, register_dialects
from tasoc.ir import dag as dag_module
from tasoc.ir.graph import sig_of
from tasoc.ir.liveness import peak_memory
from tasoc.ir.memory import SpaceAttr, SwapInOp, SwapOutOp, is_placed, replay, unplaced
from tasoc.ir.opdef import op_defs
from tasoc.ir.parallel import is_sharded, sharding_of, unsharded
from tasoc.ir.program import entry_function, verify_ir
from tasoc.ir.shard_plan import write_sharded
from tasoc.ir.training import training_signature
from tasoc.passes.autodiff.autodiff import AutodiffFailed
from tasoc.passes.placement import PlacementPass
from tasoc.passes.placement.device_view import device_view, plan_view
from tasoc.passes.placement.placement import PlacementFailed
from tasoc.passes.soap import SoapShardFailed, SoapShardPass
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.strategies import STRATEGIES
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import EMITTERS, graphs

Tasoc = Callable[..., Result]

STEP = "zoo:transformer?layers=1&hidden=32&heads=2&seq=8&batch=8&train=sgd"


def _step() -> ModuleOp:
    return build_zoo_model(STEP)


def _sharded(search: str = "data-parallel", mesh: int = 4) -> ModuleOp:
    module = _step()
    SoapShardPass(mesh=mesh, search=search).apply(Context(), module)  # type: ignore[arg-type]
    return module


def _read(path: Path) -> ModuleOp:
    context = Context()
    register_dialects(context)
    return parse_mlir(context, path.read_bytes(), str(path), SourceMap(), 0, implicit_module=True)


def _unplaced_peak(module: ModuleOp) -> int:
    return peak_memory(entry_function(module)).peak_bytes


def _agrees_with_the_reference(before: ModuleOp, after: ModuleOp) -> None:
    verify_ir(after)
    result = equivalent(unsharded(before), unsharded(unplaced(after)))
    assert result.ok, result.summary()


@pytest.mark.parametrize("search", ["belady", "lru", "offload-all"])
def test_a_sharded_step_is_placed_per_device_within_half_its_peak(search: str) -> None:
    before = _sharded()
    capacity = _unplaced_peak(before) // 2
    after = before.clone()
    options = {} if search == "offload-all" else {"capacity": capacity}
    PlacementPass(search=search, **options).apply(Context(), after)  # type: ignore[arg-type]
    assert is_sharded(after) and is_placed(after)
    function = entry_function(after)
    moves = [op for op in function.walk() if isinstance(op, SwapOutOp | SwapInOp)]
    assert moves
    for op in moves:  # a move keeps the sharding and changes the space
        assert sharding_of(sig_of(op.input.type)) == sharding_of(sig_of(op.output.type))
    hosted = [op.output.type for op in moves if isinstance(op, SwapOutOp)]
    assert all(isinstance(t.encoding, SpaceAttr) and t.encoding.inner for t in hosted)
    if search != "offload-all":
        assert replay(function).peak_bytes <= capacity
    _agrees_with_the_reference(before, after)


def test_the_device_view_counts_one_devices_blocks() -> None:
    module = _sharded()
    view = device_view(module, machine("cpu-4"))
    whole = dag_module.from_module(_step())
    # every block is a quarter of the batch: the view's activations are smaller
    assert sum(a.out.sig.size for a in view.dag.args) < sum(a.out.sig.size for a in whole.args)
    collectives = [n for n in view.dag.ops if n.op.startswith("parallel.")]
    assert collectives and all(view.seconds[n] > 0 for n in collectives)


@pytest.mark.parametrize("strategy", ["data-parallel", "expert"])
def test_a_plans_view_is_the_view_of_the_program_it_writes(strategy: str) -> None:
    """soap-shard prices a candidate on `plan_view` without writing it: the same ops,
    blocks and times as `device_view` of the written program."""
    module = _step()
    dag = dag_module.from_module(module)
    mesh = parse_mesh(4)
    problem = Problem(dag, mesh, training_signature(entry_function(module)), {})
    plan = complete(problem, STRATEGIES[strategy](problem))
    cluster = machine("cpu-4")
    priced = plan_view(dag, plan, mesh, cluster)
    write_sharded(module, dag, plan, mesh)
    written = device_view(module, cluster)
    assert [(n.op, n.sigs) for n in priced.dag.ops] == [(n.op, n.sigs) for n in written.dag.ops]
    assert [priced.seconds[n] for n in priced.dag.ops] == pytest.approx(
        [written.seconds[n] for n in written.dag.ops]
    )


def test_a_capacity_below_one_devices_op_is_one_line_naming_it() -> None:
    module = _sharded()
    with pytest.raises(PlacementFailed, match=r"placement: op \d+ \(graph\.\w+\) needs \d+ bytes"):
        PlacementPass(search="belady", capacity=64).apply(Context(), module)


def test_buffer_reuse_on_a_sharded_step_is_refused() -> None:
    module = _sharded()
    with pytest.raises(PlacementFailed, match="in-place=on plans one device's step"):
        PlacementPass(search="belady", capacity=10**6, in_place="on").apply(Context(), module)


def test_a_machine_smaller_than_the_mesh_is_refused() -> None:
    module = _sharded(mesh=4)
    with pytest.raises(PlacementFailed, match="machine cpu-2 has 2"):
        PlacementPass(search="belady", capacity=10**6, machine="cpu-2").apply(Context(), module)


def test_soap_shard_prices_a_strategy_over_the_capacity_by_swapping() -> None:
    """Under half of data parallel's peak nothing fits without swapping: the search
    without place= finds nothing, with place= it writes the fastest strategy with its
    swaps priced, and the report says which strategies needed them."""
    module = _step()
    cap = _unplaced_peak(_sharded(mesh=4)) // 2
    without = SoapShardPass(mesh=4, search="mcmc", budget=20, seed=0, memory_cap=cap)
    with pytest.raises(SoapShardFailed, match="no strategy fits under memory-cap"):
        without.apply(Context(), module.clone())
    with_swaps = SoapShardPass(
        mesh=4, search="mcmc", budget=20, seed=0, memory_cap=cap, place="belady"
    )
    from tasoc.passes.report import RunReport, reporting

    report = RunReport(input="step", pipeline="soap-shard", seed=0)
    with reporting(report):
        report.begin_pass("soap-shard")
        with_swaps.apply(Context(), module)
    section = report.sections["soap-shard"]
    assert section["place"]["placer"] == "belady" and section["place"]["swaps"]
    assert section["predicted_seconds"]["plan"] is not None
    assert math.isfinite(section["predicted_seconds"]["plan"])
    assert is_sharded(module)


def test_place_needs_a_simulating_search() -> None:
    with pytest.raises(ValueError, match="place= prices strategies by simulating"):
        SoapShardPass(mesh=4, search="ilp", place="belady")


SHARDABLE = sorted(op_defs().keys() & EMITTERS.keys())


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.data(),
    graphs(ops=SHARDABLE, max_ops=4, trainable=True),
    st.sampled_from([2, 4]),
    st.sampled_from(["data-parallel", "expert", "mcmc"]),
    st.sampled_from(["belady", "lru"]),
)
def test_random_sharded_steps_placed_at_random_capacities_compute_the_step(
    data: st.DataObject, forward: ModuleOp, devices: int, strategy: str, search: str
) -> None:
    try:
        step = training(forward, loss="sum", optimizer="sgd")
    except AutodiffFailed:  # an op with no gradient (pow, gather): not a training step
        reject()
    sharded = step.clone()
    seed = data.draw(st.integers(0, 3))
    SoapShardPass(mesh=devices, search=strategy, budget=10, seed=seed).apply(Context(), sharded)  # type: ignore[arg-type]
    peak = replay(entry_function(sharded)).peak_bytes
    capacity = data.draw(st.integers(max(peak // 2, 1), peak))
    placed = sharded.clone()
    try:
        PlacementPass(search=search, capacity=capacity).apply(Context(), placed)  # type: ignore[arg-type]
    except PlacementFailed as err:  # an op's own blocks over the capacity: one line naming it
        assert "needs" in str(err) and "\n" not in str(err)
        return
    assert replay(entry_function(placed)).peak_bytes <= capacity
    _agrees_with_the_reference(sharded, placed)


def test_the_readme_pipeline_runs_per_device_as_planned(tasoc: Tasoc, tmp_path: Path) -> None:
    """equality-rewrite, autodiff, soap-shard and placement on one model (the README's
    demo, with a smaller search), run op by op on 8 devices: equal to the reference,
    each device holding what the plan says, within half the sharded step's peak."""
    sharded, placed = tmp_path / "s.mlir", tmp_path / "j.mlir"
    front = "equality-rewrite{timeout=2},autodiff{loss=mse}"
    shard = "soap-shard{mesh=8 machine=cpu-8 search=mcmc budget=20 seed=0}"
    model = "zoo:transformer?layers=1&hidden=32&heads=2&seq=8&batch=8"
    assert tasoc("opt", model, "-p", f"{front},{shard}", "-o", sharded).code == 0
    capacity = _unplaced_peak(_read(sharded)) // 2
    pipeline = f"{front},{shard},placement{{search=belady capacity={capacity}}}"
    assert tasoc("opt", model, "-p", pipeline, "-o", placed).code == 0
    result = tasoc("run", placed, "--devices", "8", "--mode", "runtime", "--check")
    assert result.code == 0, result.err
    assert "the measured device bytes are the replay's, op by op on every device" in result.out
