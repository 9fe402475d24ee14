"""`soap-shard`: the named strategies, completion, the sharded program it writes, the
report, and its one-line errors."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from conftest import Result, assert_one_line_error
from soap_helpers import (
    argument_shardings,
    assert_runs_as_the_reference,
    collectives,
    parse,
    shard,
    sharding,
    step,
)
from soap_programs import CNN, MLP
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.jax.audit import audit
from tasoc.backends.jax.sharded import lower_sharded
from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model, make_context, verify_module
from tasoc.ir import dag as dag_module
from tasoc.ir.graph import sig_of
from tasoc.ir.parallel import MeshOp, sharding_of, unsharded
from tasoc.ir.program import entry_block, entry_function
from tasoc.ir.shard_plan import write_sharded
from tasoc.ir.soap import Mesh, Sharding
from tasoc.ir.training import training_signature
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.soap import SoapShardFailed, SoapShardPass
from tasoc.passes.soap.layers import recurrent_layers
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Prescription, Problem, complete, largest_split
from tasoc.sim.parallel import ShardedStep
from tasoc.verify.equivalence import equivalent

CONV = """
func.func @main(%x: tensor<6x3x8x8xf32>, %w: tensor<4x3x3x3xf32> {graph.param})
    -> tensor<6x4x8x8xf32> {
  %y = graph.conv2d %x, %w {strides = array<i64: 1, 1>, padding = "same",
                            activation = "none", groups = 1 : i64} : tensor<6x4x8x8xf32>
  %r = graph.relu %y : tensor<6x4x8x8xf32>
  func.return %r : tensor<6x4x8x8xf32>
}
"""


def result_shardings(module: ModuleOp) -> list[Sharding | None]:
    return [sharding_of(sig_of(t)) for t in entry_function(module).function_type.outputs.data]


def with_hint(program: str, hint: str) -> str:
    """`program` with argument %w1 laid out by hand as `hint`."""
    weight = "%w1: tensor<8x32xf32> {graph.param"
    return program.replace(weight, f"{weight}, parallel.sharding = {hint}")


def check_program(before: ModuleOp, after: ModuleOp) -> None:
    """Print -> parse gives the same text, and the program's one-device equal computes
    what the input did (numpy reference)."""
    text = str(after)
    assert str(parse(text)) == text
    report = equivalent(unsharded(before), unsharded(after))
    assert report.ok, report.summary()


# ------------------------------------------------------------------ strategies


def test_data_parallel_splits_the_batch_of_every_layer() -> None:
    before = parse(MLP)
    after, section = shard(before, mesh=4, search="data-parallel")
    batch, replicated = sharding(("d",), ()), sharding((), ())
    assert argument_shardings(after) == [batch, replicated, replicated]
    assert result_shardings(after) == [batch]
    assert collectives(after) == []
    assert section["configs"] == {"matmul": {"m=[d]": 2}, "relu": {"d0=[d]": 1}}
    assert section["mesh"] == {"d": 4} and section["search"] == "data-parallel"
    assert section["notes"] == []
    (mesh_op,) = [op for op in after.ops if isinstance(op, MeshOp)]
    assert mesh_op.mesh == Mesh("mesh", (("d", 4),))
    check_program(before, after)


def test_expert_splits_dense_layers_by_output_features() -> None:
    before = parse(MLP)
    after, section = shard(before, mesh=4, search="expert")
    columns = sharding((), ("d",))
    assert argument_shardings(after)[1:] == [columns, columns]
    assert section["configs"]["matmul"] == {"n=[d]": 2}
    # The second layer reads the whole hidden activation: one all_gather of it.
    assert [op.KIND for op in collectives(after)] == ["all_gather"]
    assert section["collectives"] == {"all_gather": {"count": 1, "bytes": 16 * 8 * 4}}
    check_program(before, after)


def test_data_parallel_training_step_all_reduces_each_weight_gradient() -> None:
    before = step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)
    after, section = shard(before, mesh=4, search="data-parallel")
    replicated = sharding((), ())
    # loss (completed from partial sums), then the two new weights, laid out as their
    # arguments are, so the next step reads them as this one did.
    assert result_shardings(after) == [Sharding("mesh", ()), replicated, replicated]
    reduced = [op for op in collectives(after) if op.KIND == "all_reduce"]
    assert len(reduced) == 3 and len(collectives(after)) == 3
    reduced_shapes = sorted(sig_of(op.output.type).shape for op in reduced)
    assert reduced_shapes == [(), (8, 32), (32, 4)]
    assert section["collectives"]["all_reduce"]["count"] == 3
    check_program(before, after)


def test_a_batch_the_mesh_does_not_divide_is_replicated_with_a_note() -> None:
    before = parse(CONV)
    after, section = shard(before, mesh=4, search="data-parallel")
    assert argument_shardings(after)[0] == sharding((), (), (), ())
    assert section["configs"]["conv2d"] == {"replicated": 1}
    # one note for every op that falls short the same way, naming them
    assert section["notes"] == [
        "batch 6 splits over no axis of the mesh; replicated: graph.conv2d #0, graph.relu #1"
    ]
    check_program(before, after)


def test_fewer_axes_split_a_batch_all_axes_do_not() -> None:
    assert largest_split(4, Mesh("m", (("x", 2), ("y", 4)))) == ("y",)
    assert largest_split(16, Mesh("m", (("x", 2), ("y", 4)))) == ("x", "y")
    assert largest_split(3, Mesh("m", (("x", 2), ("y", 4)))) == ()
    module = parse(MLP.replace("16x", "4x"))
    after, section = shard(module, mesh="2x4", search="data-parallel")
    assert argument_shardings(after)[0] == sharding(("y",), ())
    assert section["notes"] == [
        "batch 4 splits over y only: graph.matmul #0, graph.relu #1, graph.matmul #2"
    ]
    check_program(module, after)


def test_a_hand_written_argument_sharding_is_kept() -> None:
    hinted = with_hint(MLP, '#parallel.sharding<@m, [[], ["y"]]>')
    before = parse('parallel.mesh @m ["x" = 2, "y" = 2]\n' + hinted)
    after, _ = shard(before, mesh="2x2", search="data-parallel")
    shardings = argument_shardings(after)
    assert shardings[1] == Sharding("m", ((), ("y",)))
    assert shardings[0] == Sharding("m", (("x", "y"), ()))
    assert len([op for op in after.ops if isinstance(op, MeshOp)]) == 1
    check_program(before, after)


@pytest.mark.parametrize("search", ["data-parallel", "expert"])
def test_alexnet_training_step(search: str) -> None:
    before = step(
        build_zoo_model("alexnet?batch=16&image=64"),
        loss="softmax-cross-entropy",
        optimizer="sgd",
        lr=0.01,
    )
    after, section = shard(before, mesh=8, search=search)
    assert section["notes"] == []
    image, labels, *weights = argument_shardings(after)
    assert image == sharding(("d",), (), (), ()) and labels == sharding(("d",))
    configs = section["configs"]
    assert configs["conv2d"] == {"n=[d]": 5} and configs["pool2d"] == {"n=[d]": 3}
    kinds = Counter(op.KIND for op in collectives(after))
    if search == "data-parallel":
        # one all_reduce per weight gradient and one of the loss, nothing else
        assert kinds == Counter(all_reduce=9)
        assert all(w == Sharding("mesh", ((),) * len(w.dims)) for w in weights)
        assert all(s == Sharding("mesh", ((),) * len(s.dims)) for s in result_shardings(after))
    else:
        # the dense layers' weights are split by output features, and stay so
        dense = weights[5:]
        assert dense == [sharding((), ("d",))] * 3
        assert result_shardings(after)[6:] == dense
    bytes_by_kind = {k: v["bytes"] for k, v in section["collectives"].items()}
    assert bytes_by_kind.keys() == kinds.keys()
    check_program(before, after)


@pytest.mark.parametrize("options", [{}, {"place": "belady", "memory_cap": "40MiB"}])
def test_the_default_search_starts_from_the_ilp_and_is_never_slower_than_a_start(
    options: dict[str, Any],
) -> None:
    """`search=auto`: MCMC's chains start from the ILP's plan and the baselines, and it
    writes the best it simulated, so no start is faster than the plan written; with
    `place=` the ILP is solved without the cap, which swapping answers."""
    before = step(
        build_zoo_model("alexnet?batch=16&image=64"),
        loss="softmax-cross-entropy",
        optimizer="sgd",
        lr=0.01,
    )
    after, section = shard(before, mesh=8, budget=60, seed=0, **options)
    assert section["search"] == "auto"
    exact = section["ilp"]
    assert exact["started_from"] and exact["solver"]["status"] == "optimal"
    # one chain per distinct baseline plan: expert's is owt's (alexnet has no RNN layers)
    assert set(section["chains"]) >= {"ilp", "greedy", "data-parallel", "owt", "zero"}
    assert "expert" in section["baselines"] and "expert" not in section["chains"]
    written = section["predicted_seconds"]["plan"]
    starts = [exact["simulated_seconds"], *(c["start"] for c in section["chains"].values())]
    assert all(written <= start * (1 + 1e-9) for start in starts)
    check_program(before, after)


@pytest.mark.parametrize("search", ["data-parallel", "expert"])
def test_a_sharded_momentum_step_runs_on_four_devices(search: str, tmp_path: Path) -> None:
    """The written program runs on 4 JAX devices (`tasoc run --devices`) and matches the
    numpy reference of the unsharded step; momentum lies as its weight does."""
    before = step(parse(CNN), loss="softmax-cross-entropy", optimizer="momentum", lr=0.1)
    after, _ = shard(before, mesh="2x2", search=search)
    x, labels, w, v, w_velocity, v_velocity = argument_shardings(after)
    assert x == sharding(("x", "y"), (), (), ()) and labels == sharding(("x", "y"))
    assert (w_velocity, v_velocity) == (w, v)
    assert v == (sharding((), ("x", "y")) if search == "expert" else sharding((), ()))
    assert_runs_as_the_reference(after, tmp_path, devices=4)


# ------------------------------------------------------------------ RNNs: device groups


def rnn_step(layers: int, batch: int = 4) -> ModuleOp:
    """A small stacked-LSTM training step (sgd)."""
    model = build_zoo_model(f"rnn?layers={layers}&hidden=4&seq=3&batch={batch}")
    return step(model, loss="mse", optimizer="sgd", lr=0.1)


def mesh_ops(module: ModuleOp) -> list[Mesh]:
    return [op.mesh for op in module.ops if isinstance(op, MeshOp)]


def weights_by_mesh(module: ModuleOp) -> dict[str, list[str]]:
    """Each mesh's weight arguments, by name."""
    found: dict[str, list[str]] = {}
    for arg in entry_block(entry_function(module)).args:
        sharding_ = sharding_of(sig_of(arg.type))
        if re.fullmatch(r"l\d_\w+", arg.name_hint or "") and sharding_ is not None:
            found.setdefault(sharding_.mesh, []).append(arg.name_hint)
    return found


def test_expert_places_each_recurrent_layer_on_its_own_device_group(tmp_path: Path) -> None:
    """FlexFlow's layer-wise model parallelism: 4 LSTM layers on 8 devices, one group
    of 2 devices per layer, data parallel inside it; the step runs on 8 JAX devices and
    matches the numpy reference."""
    before = rnn_step(layers=4)
    after, section = shard(before, mesh=8, search="expert")
    assert mesh_ops(after) == [Mesh(f"g{i}", (("d", 2),), (2 * i, 2 * i + 1)) for i in range(4)]
    layer = ["l{}_wx", "l{}_wh", "l{}_b"]
    expected = {f"g{i}": [name.format(i) for name in layer] for i in range(4)}
    assert weights_by_mesh(after) == expected
    assert {g: v["weights"] for g, v in section["groups"].items()} == expected
    assert section["groups"]["g3"]["devices"] == [6, 7]
    # The input is split by batch on the first layer's group, new weights leave as
    # their arguments came.
    arguments = argument_shardings(after)
    assert arguments[0] == Sharding("g0", (("d",), (), ()))
    assert result_shardings(after)[1:] == arguments[2:]
    copies = [op for op in collectives(after) if op.KIND == "replicate"]
    assert copies and section["collectives"]["replicate"]["count"] == len(copies)
    for copy in copies:
        source, target = sharding_of(sig_of(copy.input.type)), sharding_of(sig_of(copy.output.type))
        assert source is not None and target is not None
        assert source.mesh != target.mesh and not source.unreduced
    # every other collective stays on one group
    for op in collectives(after):
        if op.KIND != "replicate":
            assert (
                sharding_of(sig_of(op.input.type)).mesh == sharding_of(sig_of(op.output.type)).mesh
            )  # type: ignore[union-attr]
    assert section["notes"] == []
    check_program(before, after)
    assert_runs_as_the_reference(after, tmp_path, devices=8)


def test_consecutive_layers_share_a_group_when_there_are_more_layers_than_groups() -> None:
    """3 layers on 4 devices: 2 groups (the most that divide the mesh), layers 0 and 1
    on the first."""
    after, section = shard(rnn_step(layers=3), mesh=4, search="expert")
    assert mesh_ops(after) == [Mesh("g0", (("d", 2),), (0, 1)), Mesh("g1", (("d", 2),), (2, 3))]
    assert section["groups"]["g0"]["weights"] == [
        "l0_wx",
        "l0_wh",
        "l0_b",
        "l1_wx",
        "l1_wh",
        "l1_b",
    ]
    assert section["groups"]["g1"]["weights"] == ["l2_wx", "l2_wh", "l2_b"]


def problem_of(module: ModuleOp, mesh: int | str = 8) -> Problem:
    function = entry_function(module)
    return Problem(
        dag_module.from_module(module), parse_mesh(mesh), training_signature(function), {}
    )


def layer_weights(module: ModuleOp) -> list[set[str]]:
    dag = dag_module.from_module(module)
    layers = recurrent_layers(problem_of(module))
    return [{dag.args[w].attr("name") for w in layer.weights} for layer in layers]


def test_recurrent_layers_are_found_from_the_graph() -> None:
    """Layers come from weights read at every time step, whatever the model: an NMT's
    encoder and decoder layers (encoder first: the decoder starts from its state),
    NASRNN's one searched cell; none in a CNN or an MLP."""
    nmt = build_zoo_model("nmt?layers=2&hidden=8&embed=8&vocab=20&seq=3&batch=8")
    lstm = ["{}_wx", "{}_wh", "{}_b"]
    assert layer_weights(nmt) == [
        {name.format(layer) for name in lstm} for layer in ("enc0", "enc1", "dec0", "dec1")
    ]
    nasrnn = build_zoo_model("nasrnn?hidden=8&length=3")
    assert layer_weights(nasrnn) == [{f"w{kind}{i}" for kind in "xh" for i in range(8)}]
    assert layer_weights(parse(MLP)) == []
    assert layer_weights(build_zoo_model("alexnet?batch=16&image=64")) == []


def test_one_recurrent_layer_or_hand_written_shardings_keep_one_mesh() -> None:
    """One layer (NASRNN) is the plain expert strategy on the whole mesh; shardings a
    user wrote name the whole mesh, so the layers stay there, with a note."""
    nasrnn = step(build_zoo_model("nasrnn?hidden=8&length=3&batch=4"), loss="mse", optimizer="sgd")
    after, section = shard(nasrnn, mesh=4, search="expert")
    assert [m.name for m in mesh_ops(after)] == ["mesh"] and section["groups"] == {}
    by_hand = '{parallel.sharding = #parallel.sharding<@mesh, [["d"], [], []]>}'
    x = "%x: tensor<4x3x4xf32>"
    hinted = parse(str(rnn_step(layers=2)).replace(x, f"{x} {by_hand}"))
    body = hinted.body.block
    body.insert_op_before(MeshOp.of(Mesh("mesh", (("d", 4),))), body.first_op)  # type: ignore[arg-type]
    after, section = shard(hinted, search="expert")
    assert [m.name for m in mesh_ops(after)] == ["mesh"]
    note = "2 recurrent layers stay on @mesh: arguments laid out by hand name it"
    assert section["notes"] == [note]
    assert argument_shardings(after)[0] == Sharding("mesh", (("d",), (), ()))


# ------------------------------------------------------------------ the collectives written


SEED_GRADIENT = """
func.func @main(%x: tensor<4x2xf32>, %w: tensor<2x2xf32> {graph.param})
    -> (tensor<f32>, tensor<4x2xf32>) {
  %y = graph.matmul %x, %w : tensor<4x2xf32>
  %l = graph.reduce %y {kind = "mean", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
  %one = graph.ones {shape = array<i64>, dtype = f32} : tensor<f32>
  %g = graph.reduce_grad %y, %one {kind = "mean", axes = array<i64: 0, 1>,
                                   keepdims = false} : tensor<4x2xf32>
  %d = graph.mul %g, %y : tensor<4x2xf32>
  func.return %l, %d : tensor<f32>, tensor<4x2xf32>
}
"""
"""A mean loss and the seed of its gradient, as autodiff writes them: the gradient
reads y for its shape alone, and depends on no argument (it is 1/8 everywhere)."""


def test_the_writer_moves_only_values_an_op_reads_and_a_device_alone_knows() -> None:
    # soap.py's random plans of dlrm and the transformer (issue 16): y lies split by
    # rows, the gradient reads it split by columns (an all-to-all JAX drops as dead:
    # only y's shape reaches a result) and the mul reads the gradient whole (an
    # all-gather of a broadcast constant, which XLA folds). Neither may be written.
    module = parse(SEED_GRADIENT)
    dag = dag_module.from_module(module)
    problem = Problem(dag, parse_mesh(2), None, {})
    ops = {node.op: node for node in dag.ops}
    configs = {
        ops["matmul"]: {"m": ("d",)},
        ops["reduce"]: {},
        ops["reduce_grad"]: {"d1": ("d",)},
        ops["mul"]: {},
    }
    plan = complete(problem, Prescription(configs))
    sharded = module.clone()
    written = write_sharded(sharded, dag, plan, problem.mesh)
    verify_module(sharded)
    assert [c.kind for c in written] == ["all_gather"]  # y, whole for the loss and the mul
    found = audit(sharded, lower_sharded(sharded))
    assert found.ok, found.table()
    step = ShardedStep(dag, plan, machine("cpu-2"), mesh=problem.mesh, collapse=False)
    assert [step.graph[i].name for i in step.graph.ids() if step.graph[i].resource[0] == "net"] == [
        "all_gather of matmul #0"
    ] * 2
    check_program(module, sharded)


# ------------------------------------------------------------------ errors


def test_verify_each_compares_the_unsharded_program(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(MLP)
    result = tasoc("opt", source, "-p", "soap-shard{mesh=2x2 search=expert}", "--verify-each")
    assert result.code == 0, result
    assert "parallel.mesh @mesh" in result.out


@pytest.mark.parametrize(
    ("options", "fragment"),
    [
        ("mesh=0", "mesh must be a device count"),
        ("mesh=2x2x2x2", "mesh must be a device count"),
        ("mesh=ax2", "mesh must be a device count"),
        ("search=annealing", "search"),
        ("", "give mesh=N"),
        ("mesh=4 search=mcmc budget=0", "budget must be at least 1, got 0"),
        ("mesh=4 search=mcmc timeout=0", "timeout must be positive"),
        ("mesh=4 search=mcmc beta=-1", "beta must be positive"),
        ("mesh=4 search=mcmc memory-cap=lots", "memory-cap"),
        ("mesh=4 machine=no-such-machine", "no-such-machine"),
        ("mesh=16 machine=cpu-8 search=mcmc", "16 devices, more than machine cpu-8's 8"),
    ],
)
def test_bad_options_are_one_line_errors(
    tasoc: Callable[..., Result], tmp_path: Path, options: str, fragment: str
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(MLP)
    assert_one_line_error(tasoc("opt", source, "-p", f"soap-shard{{{options}}}"), fragment)


def test_a_machine_file_with_an_efficiency_outside_zero_to_one_is_one_line(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(MLP)
    machine_file = tmp_path / "m.toml"
    machine_file.write_text(
        'devices_per_node = 4\ndevice = "v100"\n'
        '[links.intra]\nkind = "nvlink"\nbandwidth_gbps = 800\nlatency_us = 0.5\n'
        '[links.host]\nkind = "pcie"\nbandwidth_gbps = 128\nlatency_us = 1\n'
    )
    pipeline = f'soap-shard{{mesh=4 machine="{machine_file}" search=expert}}'
    assert tasoc("opt", source, "-p", pipeline).code == 0
    machine_file.write_text(
        machine_file.read_text().replace('device = "v100"\n', "")
        + "[device]\npeak_flops = 1e12\nmem_bandwidth = 1e11\nmemory_bytes = 8e9\n"
        "launch_overhead_s = 1e-6\n[device.efficiency]\ngemm = 1.5\n"
    )
    assert_one_line_error(
        tasoc("opt", source, "-p", pipeline), "device.efficiency.gemm must be in (0, 1], got 1.5"
    )


def test_a_mesh_option_must_agree_with_the_modules_mesh() -> None:
    module = parse('parallel.mesh @m ["d" = 4]\n' + MLP)
    with pytest.raises(SoapShardFailed, match=r'mesh=8 disagrees .*@m \["d" = 4\]'):
        SoapShardPass(mesh=8).apply(make_context(), module)
    _, section = shard(module, mesh=4)
    assert section["mesh"] == {"d": 4}


def test_an_already_sharded_program_or_a_bad_hint_is_refused() -> None:
    sharded, _ = shard(parse(MLP), mesh=4)
    with pytest.raises(SoapShardFailed, match="already sharded"):
        SoapShardPass().apply(make_context(), sharded)
    bad = with_hint(MLP, '#parallel.sharding<@m, [["d"], []]>')
    with pytest.raises(SoapShardFailed, match=r"argument #1 \(%w1\).*does not split into 16"):
        SoapShardPass().apply(make_context(), parse('parallel.mesh @m ["d" = 16]\n' + bad))


def test_a_baseline_over_each_devices_memory_is_infeasible_and_never_a_denominator() -> None:
    """Capped under data parallel's peak (its replicated weights), data parallel cannot
    run: the report marks it, quotes no speedup over it, and compares with the best
    baseline that fits."""
    before = step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)
    _, free = shard(before, mesh=4, search="data-parallel")
    assert free["feasible"] == dict.fromkeys(("plan", *free["baselines"]), True)
    assert free["capacity_from"] == "machine cpu-4"
    cap = free["peak_memory"]["data-parallel"] - 1
    _, capped = shard(before, mesh=4, budget=30, seed=0, memory_cap=cap)
    assert capped["feasible"]["data-parallel"] is False and capped["feasible"]["plan"]
    assert capped["predicted_seconds"]["data-parallel"] is None
    assert capped["simulated_seconds"]["data-parallel"] > 0
    assert capped["speedup_over"]["data-parallel"] is None
    times = capped["predicted_seconds"]
    fitting = [name for name in capped["baselines"] if capped["feasible"][name]]
    expected = min(fitting, key=times.__getitem__, default=None)
    assert capped["best_feasible_baseline"] == expected
    if expected is not None:
        speedup = times[expected] / times["plan"]
        assert capped["speedup_over_best_feasible"] == pytest.approx(speedup)


def test_a_named_strategy_over_each_devices_memory_is_written_with_a_warning(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(MLP)
    pipeline = (
        "autodiff{loss=mse optimizer=sgd lr=0.1},"
        "soap-shard{mesh=4 search=data-parallel memory-cap=1KB}"
    )
    result = tasoc("opt", source, "-p", pipeline)
    assert result.code == 0, result
    assert "data-parallel on mesh d=4 (cpu-4): infeasible: " in result.err
    assert "tasoc: warning: soap-shard: the written plan needs " in result.err
    assert "it cannot run there" in result.err


def test_the_timeline_says_whether_the_plan_fits_each_device() -> None:
    before = step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)
    for cap, verdict in (("1KB", "OVER its 1000 bytes"), (None, "within its 22.3 GiB")):
        with reporting(RunReport()) as report:
            SoapShardPass(mesh=4, search="data-parallel", memory_cap=cap).apply(
                make_context(), before.clone()
            )
        title = report.figures["soap-shard-timeline"].title
        assert f"per device, {verdict})" in title, title


def test_a_memory_cap_above_the_devices_memory_is_a_warning(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(MLP)
    pipeline = "soap-shard{mesh=4 machine=k80-cluster search=expert memory-cap=1TB}"
    result = tasoc("opt", source, "-p", pipeline, "-o", tmp_path / "s.mlir")
    assert result.code == 0, result
    warning = "memory-cap=931.3 GiB is above a device's memory on machine k80-cluster (11.1 GiB)"
    assert f"tasoc: warning: soap-shard: {warning}" in result.err


def test_megatron_splits_dense_layers_in_column_then_row_pairs() -> None:
    """The first layer splits its output features, the second its input features: the
    ReLU between needs nothing from other devices, and one all-reduce of the second's
    partial sums completes the pair (Shoeybi et al., 2019, §3)."""
    before = parse(MLP)
    after, section = shard(before, mesh=4, search="megatron")
    assert section["op_configs"] == {
        "graph.matmul #0": "n=[d]",
        "graph.relu #1": "d1=[d]",
        "graph.matmul #2": "k=[d]",
    }
    assert [op.KIND for op in collectives(after)] == ["all_reduce"]
    check_program(before, after)


def test_megatron_splits_attention_by_heads_and_runs_as_the_reference(tmp_path: Path) -> None:
    before = step(build_zoo_model("transformer?layers=1&hidden=32&seq=4&batch=2"), loss="mse")
    after, section = shard(before, mesh=2, search="megatron")
    configs = section["op_configs"].items()
    matmuls = Counter(config for op, config in configs if op.startswith("graph.matmul"))
    assert matmuls["n=[d]"] >= 4 and matmuls["k=[d]"] >= 2  # Q, K, V, MLP in; out, MLP out
    assert matmuls["b1=[d]"] >= 2  # attention's scores and weighted values, by heads
    assert_runs_as_the_reference(after, tmp_path, devices=2)
