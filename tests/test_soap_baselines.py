"""The practitioners' baselines of `soap-shard` (`strategies.py`): owt, dlrm-hybrid,
layer-wise and zero each run as the unsharded reference and prescribe what their papers
do; the report compares with every baseline that applies, says why the others do not,
and picks the fastest feasible one; a named strategy that does not apply writes data
parallel with a warning."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result
from soap_helpers import argument_shardings, collectives, parse, shard, sharding, step
from soap_programs import CNN, MLP
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax.sharded import lower_sharded
from tasoc.backends.numpy import run_reference
from tasoc.driver.sources import build_zoo_model
from tasoc.ir.dag import from_module
from tasoc.ir.parallel import unsharded
from tasoc.ir.program import entry_block, entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.searches import BASELINES, baseline_plans
from tasoc.verify.equivalence import compare

DLRM = "dlrm?tables=3&rows=16&embed=4&dense=5&bottom_width=8&top_width=8&top_layers=2&batch=4"
"""A DLRM small enough to run in a test, its 3 tables of 4 columns split by 2 devices."""

CONVOLUTIONS = """
func.func @main(%x: tensor<4x3x8x8xf32>, %w: tensor<4x3x3x3xf32> {graph.param},
                %v: tensor<8x4x3x3xf32> {graph.param}) -> tensor<4x8x8x8xf32> {
  %c = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same",
                            activation = "relu", groups = 1 : i64} : tensor<4x4x8x8xf32>
  %d = graph.conv2d %c, %v {strides = array<i64: 1, 1>, padding = "same",
                            activation = "none", groups = 1 : i64} : tensor<4x8x8x8xf32>
  func.return %d : tensor<4x8x8x8xf32>
}
"""
"""Two convolutions: no dense layer, so of the baselines only data parallel and zero apply."""


def assert_matches_the_reference(module: ModuleOp) -> None:
    """The sharded program, run on this process's fake JAX devices, equals the numpy
    reference of its unsharded equal on the same random inputs."""
    inputs = random_inputs(module, 0)
    result = compare(run_reference(unsharded(module), inputs), lower_sharded(module)(*inputs))
    assert result.ok, result.summary()


@pytest.mark.parametrize(
    ("search", "model", "mesh"),
    [
        ("owt", "alexnet?batch=4&image=63&width=0.125&train=momentum", 2),
        ("dlrm-hybrid", f"{DLRM}&train=adam", 2),
        ("layer-wise", "rnn?layers=2&hidden=8&seq=3&batch=4&train=sgd", 4),
        ("zero", "transformer?layers=1&hidden=16&seq=4&batch=4&train=adam", 4),
    ],
)
def test_each_baseline_runs_as_the_unsharded_reference(search: str, model: str, mesh: int) -> None:
    after, section = shard(build_zoo_model(model), mesh=mesh, search=search)
    assert search in section["baselines"] and not section["notes"]
    assert_matches_the_reference(after)


def test_owt_splits_convolutions_by_batch_and_dense_layers_by_features() -> None:
    """One weird trick: the convolution and pooling split the batch (their sample factor
    `n`), the dense layer its output features (its parameter factor `n`): the input
    arrives split by samples, the convolution's weight whole, the dense layer's weight
    split by columns."""
    _, section = shard(step(parse(CNN), loss="mse", optimizer="sgd", lr=0.1), mesh=2, search="owt")
    configs = section["op_configs"]
    assert configs["graph.conv2d #0"] == configs["graph.pool2d #1"] == "n=[d]"
    assert configs["graph.matmul #3"] == "n=[d]"
    after, _ = shard(parse(CNN), mesh=2, search="owt")
    x, w, v = argument_shardings(after)
    assert x == sharding(("d",), (), (), ()) and w == sharding((), (), (), ())
    assert v == sharding((), ("d",))


def test_zero_splits_optimizer_state_and_updates_and_keeps_weights_replicated() -> None:
    """ZeRO stages 1-2: Adam's moments lie split along the weight's rows, each update
    reads its gradient by a reduce-scatter and a free slice of the weight, and the new
    weight is all-gathered; the weights themselves stay replicated."""
    before = step(parse(MLP), loss="mse", optimizer="adam", lr=0.1)
    after, section = shard(before, mesh=4, search="zero")
    layouts = argument_shardings(after)
    # x, labels, w1, w2, w1.m, w1.v, w2.m, w2.v, adam.step
    assert layouts[2:4] == [sharding((), ())] * 2
    assert layouts[4:8] == [sharding(("d",), ())] * 4
    assert layouts[8] == sharding()  # Adam's step counter: a scalar
    assert set(section["op_configs"][k] for k in section["op_configs"] if "adam" in k) == {"d0=[d]"}
    kinds = Counter(op.KIND for op in collectives(after))
    assert kinds["reduce_scatter"] == 2 and kinds["all_gather"] == 2
    assert section["peak_memory"]["zero"] < section["peak_memory"]["data-parallel"]


def test_dlrm_hybrid_splits_tables_by_columns_with_an_all_to_all_each_way() -> None:
    """Each table lies split by its columns; each lookup's result goes to the batch-split
    interaction by an all-to-all, and its gradient comes back to the table's columns by
    one, so the scatter-add of the gradient (and the update) stays on the columns."""
    after, section = shard(build_zoo_model(f"{DLRM}&train=sgd"), mesh=2, search="dlrm-hybrid")
    names = [arg.name_hint for arg in entry_block(entry_function(after)).args]
    layouts = dict(zip(names, argument_shardings(after), strict=True))
    assert [layouts[f"emb{i}"] for i in range(3)] == [sharding((), ("d",))] * 3
    assert layouts["bot_w0"] == sharding((), ())  # the MLPs are data parallel
    kinds = Counter(op.KIND for op in collectives(after))
    assert kinds["all_to_all"] == 6
    assert "reduce_scatter" not in kinds  # no table's gradient is reduced whole
    configs = section["configs"]
    assert configs["embedding"] == {"f=[d]": 3} and configs["scatter_add"] == {"f=[d]": 3}


def test_the_report_compares_with_every_baseline_that_applies_and_picks_the_fastest() -> None:
    """On a DLRM step every baseline but layer-wise applies (no recurrent layers): each
    is simulated with its speedup, layer-wise is listed with why, and the best feasible
    baseline is the fastest of them; a search starts from each distinct one."""
    model = build_zoo_model(f"{DLRM}&train=sgd")
    _, section = shard(model, mesh=2, search="mcmc", budget=12, seed=0)
    applying = [name for name in BASELINES if name != "layer-wise"]
    assert section["baselines"] == applying
    assert set(section["not_applying"]) == {"layer-wise"}
    assert "recurrent layers" in section["not_applying"]["layer-wise"]
    assert set(section["speedup_over"]) == set(applying)
    times = section["predicted_seconds"]
    fastest = min(applying, key=times.__getitem__)
    assert section["best_feasible_baseline"] == fastest
    assert section["speedup_over_best_feasible"] == pytest.approx(times[fastest] / times["plan"])
    # expert shares owt's plan (no recurrent layers): one chain for both
    assert set(section["chains"]) >= set(applying) - {"expert"}


def test_where_memory_binds_zero_is_the_baseline_that_fits() -> None:
    """Two convolutions trained with Adam on 2 devices: capped between zero's peak and
    data parallel's, data parallel is infeasible and zero, its state halved, is the
    best feasible baseline."""
    before = step(parse(CONVOLUTIONS), loss="mse", optimizer="adam", lr=0.1)
    _, free = shard(before, mesh=2, search="data-parallel")
    assert free["baselines"] == ["data-parallel", "zero"]
    peaks = free["peak_memory"]
    assert peaks["zero"] < peaks["data-parallel"]
    cap = (peaks["zero"] + peaks["data-parallel"]) // 2
    _, capped = shard(before, mesh=2, search="data-parallel", memory_cap=cap)
    assert capped["feasible"] == {"plan": False, "data-parallel": False, "zero": True}
    assert capped["best_feasible_baseline"] == "zero"
    assert capped["speedup_over"]["data-parallel"] is None


@pytest.mark.parametrize(
    ("search", "why"),
    [
        ("dlrm-hybrid", "no embedding lookup"),
        ("layer-wise", "0 recurrent layers"),
        ("zero", "no optimizer update"),
        ("megatron", "no pair of dense layers"),
    ],
)
def test_a_named_strategy_that_does_not_apply_writes_data_parallel_with_a_warning(
    tasoc: Callable[..., Result], tmp_path: Path, search: str, why: str
) -> None:
    """A forward CNN has no lookup, no recurrent layer, no optimizer and no dense pair:
    each of those recipes gives it data parallel, which the pass writes, and says so."""
    source = tmp_path / "cnn.mlir"
    source.write_text(CNN)
    pipeline = f"soap-shard{{mesh=2 search={search}}}"
    result = tasoc("opt", source, "-p", pipeline, "-o", tmp_path / "s.mlir")
    assert result.code == 0, result
    warning = f"tasoc: warning: soap-shard: search={search} does not apply ({why}"
    assert warning in result.err and "the plan written is data parallel's" in result.err
    _, named = shard(parse(CNN), mesh=2, search=search)
    _, reference = shard(parse(CNN), mesh=2, search="data-parallel")
    assert named["op_configs"] == reference["op_configs"]
    assert named["not_applying"][search].startswith(why)


def problem_of(module: ModuleOp, mesh: int) -> Problem:
    dag = from_module(module)
    return Problem(dag, parse_mesh(mesh), training_signature(entry_function(module)), {})


def test_expert_shares_owts_plan_without_recurrent_layers_and_adds_layer_groups_with() -> None:
    """expert = owt + layer-wise: on a CNN the two prescribe alike and the pass keeps one
    plan for both (simulated once, one chain); on two LSTM layers expert places them on
    two device groups, and layer-wise needs a mesh that makes two (3 devices do not)."""
    cnn, _ = baseline_plans(problem_of(step(parse(CNN), loss="mse"), 2))
    assert cnn["expert"] is cnn["owt"]
    rnn = build_zoo_model("rnn?layers=2&hidden=8&seq=3&batch=4&train=sgd")
    plans, not_applying = baseline_plans(problem_of(rnn, 4))
    assert plans["expert"] is not plans["owt"] and len(plans["expert"].meshes) == 2
    assert "layer-wise" in plans and "layer-wise" not in not_applying
    _, on_three = baseline_plans(problem_of(rnn, 3))
    assert "makes no two groups" in on_three["layer-wise"]
