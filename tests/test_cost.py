"""The cost models (`tasoc.cost`): op counts by hand, the fusion and memory models,
caching, the measured model's disk cache, and end-to-end timing."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.traits import ConstantLike

from tasoc.cost import (
    CPU,
    DEVICES,
    H100,
    AnalyticCost,
    CostError,
    CostModel,
    Device,
    MeasuredCost,
    OpStats,
    make_cost_model,
    node_stats,
    peak_bytes,
    plan_fusion,
    time_end_to_end,
    weight_bytes,
)
from tasoc.cost import measured as measured_module
from tasoc.cost.analytic import op_class, roofline, roofline_work
from tasoc.cost.devices import OP_CLASSES, V100, Efficiency
from tasoc.cost.fusion import relayout
from tasoc.cost.measured import LAID_OUT_KEY, cache_dir, one_op_dag, op_key, weight_preprocessing
from tasoc.ir.dag import ATTR_NAMES, Dag, Node, from_module
from tasoc.ir.op_sets import ops_with
from tasoc.ir.shapes import ConstData, DType, TensorSig
from tasoc.passes.rewrite.weight_layout import lay_out_conv_weights
from tasoc.verify.strategies import graphs

CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


def sig(*shape: int, dtype: str = "f32") -> TensorSig:
    return TensorSig(tuple(shape), DType(dtype))


def arg(index: int, *shape: int, param: bool = False) -> Node:
    return Node.arg(index, "w" if param else "x", sig(*shape), is_param=param)


def conv_relu(activation_op: bool = True) -> Dag:
    """relu(conv2d(x, w)): as two ops, or as one conv with `activation=relu`."""
    x, w = arg(0, 1, 16, 32, 32), arg(1, 16, 16, 3, 3, param=True)
    if activation_op:
        out = Node("relu", [Node("conv2d", [x.out, w.out], **CONV).out]).out
    else:
        out = Node("conv2d", [x.out, w.out], **{**CONV, "activation": "relu"}).out
    return Dag([x, w], [out])


def two_matmuls(m: int, k: int, n: int, merged: bool) -> Dag:
    """x @ w1 and x @ w2, or TASO's rewrite: split(x @ concat(w1, w2))."""
    x, w1, w2 = arg(0, m, k), arg(1, k, n, param=True), arg(2, k, n, param=True)
    if not merged:
        outputs = [Node("matmul", [x.out, w.out]).out for w in (w1, w2)]
    else:
        both = Node("concat", [w1.out, w2.out], axis=1)
        product = Node("matmul", [x.out, both.out])
        outputs = list(Node("split", [product.out], axis=1, sizes=(n, n)).results)
    return Dag([x, w1, w2], outputs)


def chain(length: int) -> Dag:
    """relu(x @ w_i) repeated: 2 * length ops over `length` weights."""
    x = arg(0, 4, 32)
    value, args = x.out, [x]
    for i in range(length):
        w = Node.arg(i + 1, "w", sig(32, 32), is_param=True)
        args.append(w)
        value = Node("relu", [Node("matmul", [value, w.out]).out]).out
    return Dag(args, [value])


# ------------------------------------------------------------------- op stats


def test_batched_matmul_flops_and_bytes() -> None:
    a, b = arg(0, 2, 3, 4, 5), arg(1, 5, 6)
    stats = node_stats(Node("matmul", [a.out, b.out]))
    assert stats.flops == 2 * (2 * 3) * 4 * 6 * 5
    assert stats.bytes_read == 4 * (2 * 3 * 4 * 5 + 5 * 6)
    assert stats.bytes_written == 4 * 2 * 3 * 4 * 6


@pytest.mark.parametrize(
    ("groups", "strides", "padding", "activation", "flops"),
    [
        (1, (1, 1), "same", "none", 2 * (16 * 10 * 10) * 8 * 9),
        (4, (1, 1), "same", "none", 2 * (16 * 10 * 10) * 2 * 9),
        (8, (1, 1), "same", "none", 2 * (16 * 10 * 10) * 1 * 9),
        (1, (2, 2), "valid", "none", 2 * (16 * 4 * 4) * 8 * 9),
        (1, (1, 1), "same", "relu", 2 * (16 * 10 * 10) * 8 * 9 + 16 * 10 * 10),
    ],
)
def test_conv2d_flops(
    groups: int, strides: tuple[int, int], padding: str, activation: str, flops: int
) -> None:
    x, w = arg(0, 1, 8, 10, 10), arg(1, 16, 8 // groups, 3, 3)
    conv = Node(
        "conv2d", [x.out, w.out], strides=strides, padding=padding, activation=activation,
        groups=groups,
    )  # fmt: skip
    stats = node_stats(conv)
    assert stats.flops == flops
    assert stats.bytes_written == 4 * conv.sigs[0].size
    assert stats.bytes_read == 4 * (8 * 10 * 10 + 16 * (8 // groups) * 9)


def test_constants_are_free_and_layout_ops_only_move_data() -> None:
    value = ConstData((2,), DType.F32, (1.0, 2.0))
    for constant in (
        Node("constant", value=value),
        Node("i_matmul", size=4, dtype="f32"),
        Node("zeros", shape=(3, 3), dtype="f32"),
    ):
        assert node_stats(constant).flops == node_stats(constant).bytes == 0
    x = arg(0, 2, 3, 4)
    for op, attrs in (("transpose", {"perm": (2, 0, 1)}), ("reshape", {"shape": (6, 4)})):
        stats = node_stats(Node(op, [x.out], **attrs))
        assert (stats.flops, stats.bytes_read, stats.bytes_written) == (0, 96, 96)


@pytest.mark.parametrize("op", sorted(ops_with(ConstantLike)))
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_every_constant_like_op_is_free_and_never_runs(op: str, data: st.DataObject) -> None:
    dag = from_module(data.draw(graphs(max_ops=2, ops=[op])))
    constants = [node for node in dag.ops if node.op == op]
    assert constants
    for node in constants:
        assert node_stats(node) == OpStats(0, 0, 0)
    assert not set(constants) & set(plan_fusion(dag, fold_weights=False).ops)


@pytest.mark.parametrize("op", sorted(ATTR_NAMES))
@settings(max_examples=3, deadline=None)
@given(data=st.data())
def test_every_op_has_a_finite_cost(op: str, data: st.DataObject) -> None:
    dag = from_module(data.draw(graphs(max_ops=2, ops=[op], dtypes=("f32", "bf16"))))
    for node in dag.ops:
        stats = node_stats(node)
        assert min(stats.flops, stats.bytes_read, stats.bytes_written) >= 0
    for device in DEVICES.values():
        assert 0 <= AnalyticCost(device, fold_weights=False).cost(dag) < 1


# ----------------------------------------------------- per-class efficiency


def test_a_large_gemm_on_v100_runs_at_deepbenchs_fraction_of_peak() -> None:
    # DeepBench's P100 FP32 GEMM, 8.21 of 10.6 TFLOP/s, is the GEMM fraction cited for V100
    x, w = arg(0, 4096, 4096), arg(1, 4096, 4096)
    gemm = Node("matmul", [x.out, w.out])
    compute, memory = roofline_work(gemm, -1, False, V100)
    assert V100.efficiency.gemm == pytest.approx(0.7745, abs=1e-4)
    assert compute == pytest.approx(2 * 4096**3 / (15.7e12 * 8.21 / 10.6))
    assert memory < compute
    assert roofline(gemm, -1, False, V100) == pytest.approx(compute)


def test_an_elementwise_op_on_v100_streams_at_the_measured_bandwidth() -> None:
    # GPUInspector.jl's V100 SXM2 SAXPY: 810 GB/s of the 900 GB/s datasheet
    x, y = arg(0, 1 << 20), arg(1, 1 << 20)
    add = Node("add", [x.out, y.out])
    assert roofline(add, -1, False, V100) == pytest.approx(3 * 4 * (1 << 20) / 810.02e9)


def test_the_cpu_prices_at_its_measured_rates() -> None:
    x, w = arg(0, 256, 256), arg(1, 256, 256)
    gemm = Node("matmul", [x.out, w.out])
    assert roofline_work(gemm, -1, False, CPU)[0] == pytest.approx(2 * 256**3 / CPU.peak_flops)


@pytest.mark.parametrize(
    ("op", "kind"),
    [
        ("matmul", "gemm"),
        ("conv2d", "conv"),
        ("conv2d_grad_weight", "conv"),
        ("relu", "elementwise"),
        ("batchnorm", "elementwise"),
        ("transpose", "data_movement"),
        ("embedding", "data_movement"),
        ("reduce", "reduction"),
        ("softmax", "reduction"),
        ("adam_update", "reduction"),
    ],
)
def test_op_classes_come_from_the_traits(op: str, kind: str) -> None:
    assert op_class(op) == kind


@pytest.mark.parametrize("name", [name for name in DEVICES if name != "cpu"])
def test_every_gpu_preset_runs_below_its_datasheet(name: str) -> None:
    fractions = DEVICES[name].efficiency.as_dict()
    assert set(fractions) == set(OP_CLASSES)
    assert all(0 < value < 1 for value in fractions.values())


@pytest.mark.parametrize("value", [0, -0.1, 1.01, math.nan, math.inf, True, "0.5"])
def test_an_efficiency_outside_zero_to_one_is_refused(value: object) -> None:
    with pytest.raises(ValueError, match=r"efficiency.conv must be a fraction in \(0, 1\]"):
        Efficiency(conv=value)  # type: ignore[arg-type]


# --------------------------------------------------------------------- fusion


def test_fusion_saves_the_intermediate_and_the_launch() -> None:
    dag = conv_relu()
    fused, unfused = AnalyticCost(CPU).cost(dag), AnalyticCost(CPU, fusion=False).cost(dag)
    conv, relu = node_stats(dag.ops[0]), node_stats(dag.ops[1])
    peak, bandwidth, launch = CPU.peak_flops, CPU.mem_bandwidth, CPU.launch_overhead_s
    # XLA:CPU relays out the OIHW weight argument: a kernel of its own, either way
    weight = launch + roofline(relayout(dag.ops[0].inputs[1]), -1, False, CPU)
    # one kernel: the intermediate is neither written nor read back
    moved = conv.bytes_read + relu.bytes_written
    assert fused - weight == pytest.approx(
        launch + max((conv.flops + relu.flops) / peak, moved / bandwidth)
    )
    alone = launch + max(conv.flops / peak, conv.bytes / bandwidth)
    assert unfused - weight == pytest.approx(
        alone + launch + max(relu.flops / peak, relu.bytes / bandwidth)
    )
    assert fused < unfused
    # conv with its built-in activation costs what conv -> relu costs once fused
    assert AnalyticCost(CPU).cost(conv_relu(activation_op=False)) == pytest.approx(fused)


def test_fusion_chains_and_stops_at_shared_or_returned_values() -> None:
    x, w = arg(0, 1, 4, 8, 8), arg(1, 4, 4, 1, 1, param=True)
    stats = [arg(2 + i, 4, param=True).out for i in range(4)]
    conv = Node("conv2d", [x.out, w.out], **CONV)
    norm = Node("batchnorm", [conv.out, *stats], epsilon=1e-5)
    relu = Node("relu", [norm.out])
    plan = plan_fusion(Dag([x, w, *(s.node for s in stats)], [relu.out]))
    assert plan.fused == (-1, 0, 0)
    assert plan.internal == (True, True, False)

    shared = Node("add", [relu.out, norm.out])  # norm now feeds two ops
    plan = plan_fusion(Dag([x, w, *(s.node for s in stats)], [shared.out]))
    assert dict(zip(plan.ops, plan.fused, strict=True))[relu] == -1
    assert dict(zip(plan.ops, plan.internal, strict=True))[norm] is False

    plan = plan_fusion(Dag([x, w, *(s.node for s in stats)], [relu.out, conv.out]))
    assert dict(zip(plan.ops, plan.fused, strict=True))[norm] == -1


@pytest.mark.parametrize("device", [CPU, H100])
def test_merging_small_matmuls_through_concat_is_predicted_cheaper(device: Device) -> None:
    model = AnalyticCost(device)
    separate, merged = two_matmuls(8, 64, 64, False), two_matmuls(8, 64, 64, True)
    # one kernel instead of two; the concatenation of weights is preprocessed
    assert model.cost(merged) < model.cost(separate)
    assert len(plan_fusion(merged).ops) == 2 and plan_fusion(merged).fused[-1] == 0
    # charged at every run, the concatenation costs more than the launch it saves
    unfolded = AnalyticCost(device, fold_weights=False)
    assert unfolded.cost(merged) > unfolded.cost(separate)


def test_merging_large_matmuls_gains_little() -> None:
    model = AnalyticCost(CPU)
    separate, merged = two_matmuls(1024, 1024, 1024, False), two_matmuls(1024, 1024, 1024, True)
    assert model.cost(merged) == pytest.approx(model.cost(separate), rel=0.01)


@settings(max_examples=25, deadline=None)
@given(graphs(max_ops=6, dtypes=("f32", "f16")))
def test_fusion_never_raises_the_cost(module: ModuleOp) -> None:
    dag = from_module(module)
    for fold in (True, False):
        fused = AnalyticCost(H100, fold_weights=fold).cost(dag)
        assert fused <= AnalyticCost(H100, fusion=False, fold_weights=fold).cost(dag) * (1 + 1e-12)


# --------------------------------------------------------------------- memory


def tanh_chain() -> Dag:
    """sigmoid(tanh(relu(x + b))): every activation is 1 KiB, the weight 1 KiB."""
    x, b = arg(0, 256), arg(1, 256, param=True)
    value = Node("add", [x.out, b.out]).out
    for op in ("relu", "tanh", "sigmoid"):
        value = Node(op, [value]).out
    return Dag([x, b], [value])


def test_peak_memory_follows_the_op_order() -> None:
    dag = tanh_chain()
    # weight + input + two live activations at each step
    assert weight_bytes(dag) == 1024
    assert peak_bytes(dag) == 1024 + 1024 + 2 * 1024


def test_memory_limit_gives_infinite_cost() -> None:
    dag = tanh_chain()
    peak = peak_bytes(dag)
    assert math.isfinite(AnalyticCost(memory_limit=peak).cost(dag))
    assert AnalyticCost(memory_limit=peak - 1).cost(dag) == math.inf
    with pytest.raises(
        CostError, match=r"impossible memory limit: 1000 bytes < weights 1024 bytes \(1 KiB\)"
    ):
        AnalyticCost(memory_limit=1000).cost(dag)
    with pytest.raises(ValueError, match="positive"):
        AnalyticCost(memory_limit=0)


def test_preprocessed_weights_replace_the_raw_ones_in_memory() -> None:
    merged = two_matmuls(8, 64, 64, True)
    weights, x, product = 2 * 64 * 64 * 4, 8 * 64 * 4, 8 * 128 * 4
    assert weight_bytes(merged) == weights
    # resident: the concatenated weight; live: x, the product and the two halves
    assert peak_bytes(merged) == weights + x + product + product
    # computed at run time, the concatenation is live next to the raw weights
    assert peak_bytes(merged, fold_weights=False) == weights + x + weights + product


# -------------------------------------------------------------------- caching


def test_costs_are_cached_per_node() -> None:
    dag = chain(500)
    model = AnalyticCost()
    first = model.cost(dag)
    assert model.misses == dag.num_ops
    assert model.cost(dag) == first
    assert model.misses == dag.num_ops
    last = dag.ops[-1]
    variant = dag.replace({last.out: Node("tanh", list(last.inputs)).out})
    model.cost(variant)
    assert model.misses == dag.num_ops + 1


def test_costs_are_deterministic_and_independent_of_history() -> None:
    dag, other = chain(20), two_matmuls(8, 64, 64, True)
    warm = AnalyticCost(H100, memory_limit=1e9)
    warm.cost(other)
    for model in (CostModel, AnalyticCost):
        assert isinstance(AnalyticCost(), model)
    assert warm.cost(dag) == AnalyticCost(H100, memory_limit=1e9).cost(dag)


def test_make_cost_model() -> None:
    assert make_cost_model("analytic").device is CPU  # type: ignore[attr-defined]
    assert make_cost_model("analytic-h200", 1e9).describe().startswith("analytic roofline on h200")
    with pytest.raises(ValueError, match="unknown cost model 'fast'") as info:
        make_cost_model("fast")
    assert "\n" not in str(info.value)


# ------------------------------------------------------------------- measured


def tiny() -> Dag:
    x, b = arg(0, 4, 8), arg(1, 8, param=True)
    return Dag([x, b], [Node("relu", [Node("add", [x.out, b.out]).out]).out])


def count_timings(
    monkeypatch: pytest.MonkeyPatch, fake: Callable[[Node], float] | None = None
) -> list[str]:
    """Record every op `time_op` measures; `fake` replaces the measurement."""
    timed: list[str] = []
    real = measured_module.time_op

    def counting(node: Node, repeats: int = 10, weight_laid_out: bool = False) -> float:
        timed.append(op_key(node) + (LAID_OUT_KEY if weight_laid_out else ""))
        return real(node, 2, weight_laid_out) if fake is None else fake(node)

    monkeypatch.setattr(measured_module, "time_op", counting)
    return timed


def test_measured_cost_times_once_and_reads_the_cache_back(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    timed = count_timings(monkeypatch)
    first = MeasuredCost(tmp_path)
    cost = first.cost(tiny())
    assert math.isfinite(cost) and cost > 0
    assert len(timed) == 3  # add, relu and the dispatch floor
    stored = json.loads(first.path.read_text())
    assert set(stored["seconds"]) == set(timed)
    assert first.cost(tiny()) == cost and len(timed) == 3

    second = MeasuredCost(tmp_path)
    assert second.cost(tiny()) == cost
    assert len(timed) == 3


def test_measured_cache_location_and_version(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path))
    assert cache_dir() == tmp_path
    timed = count_timings(monkeypatch, lambda node: 1e-3)
    model = MeasuredCost()
    assert model.path.parent == tmp_path and model.path.name.startswith("costs-cpu-")
    assert model.device is CPU
    model.cost(tiny())
    data = json.loads(model.path.read_text())
    data["jax"] = "0.0"
    model.path.write_text(json.dumps(data))
    MeasuredCost().cost(tiny())  # a cache from another JAX version is not trusted
    assert len(timed) == 6


def test_an_unwritable_cache_only_warns(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    count_timings(monkeypatch, lambda node: 1e-3)
    blocked = tmp_path / "file"
    blocked.write_text("")
    with pytest.warns(UserWarning, match="cannot write the cost cache"):
        assert MeasuredCost(blocked).cost(tiny()) > 0


def fake_times(node: Node) -> float:
    """1 ms for the dispatch floor and add, 2 ms for a real relu."""
    return 2e-3 if node.op == "relu" and node.sigs[0].size > 1 else 1e-3


def test_measured_cost_prices_fusion_from_the_measurement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    count_timings(monkeypatch, fake_times)
    model = MeasuredCost(tmp_path, device=CPU)
    add, relu = tiny().ops
    # the kernel is what a one-op program takes beyond the dispatch floor
    assert model.op_work(add, -1, False) == (0.0, 0.0)
    compute, memory = model.op_work(relu, -1, False)
    assert max(compute, memory) == pytest.approx(1e-3)
    # fused, the memory-bound relu no longer reads its operand: half its traffic
    assert model.op_work(relu, 0, False)[1] == pytest.approx(0.5e-3)
    assert model.cost(tiny()) == pytest.approx(CPU.launch_overhead_s + 0.5e-3)


def test_measured_cost_times_a_convolution_laid_out_and_its_weights_relayout_apart(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """On a device that relays out OIHW weights per call, a convolution is timed
    reading its weight through a view of an HWIO argument, and the relayout an OIHW
    weight argument costs is the measured transpose XLA runs: a graph with its
    weights laid out once costs exactly that kernel less. Elsewhere neither."""
    times = {"transpose": 3e-3, "conv2d": 5e-3}  # the floor (a relu) 1 ms
    timed = count_timings(monkeypatch, lambda node: times.get(node.op, 1e-3))
    dag = conv_relu()
    conv = dag.ops[0]
    laid_out, _ = lay_out_conv_weights(dag)
    model = MeasuredCost(tmp_path, device=CPU)
    saved = model.cost(dag) - model.cost(laid_out)
    weight = relayout(conv.inputs[1])
    assert op_key(conv) + LAID_OUT_KEY in timed and op_key(conv) not in timed
    assert op_key(weight) in timed
    assert max(model.op_work(weight, -1, False)) == pytest.approx(2e-3)
    assert saved == pytest.approx(CPU.launch_overhead_s + 2e-3)
    gpu = MeasuredCost(tmp_path / "gpu", device=H100)
    assert gpu.cost(dag) == pytest.approx(gpu.cost(laid_out))
    assert op_key(conv) in timed
    # the program timed: the convolution's weight an HWIO argument, viewed as OIHW
    program = one_op_dag(conv, weight_laid_out=True)
    assert program.args[1].sigs[0].shape == (3, 3, 16, 16)
    assert [node.op for node in program.ops] == ["transpose", "conv2d"]


def test_time_end_to_end_runs_preprocessed_weights() -> None:
    separate, merged = two_matmuls(8, 16, 16, False), two_matmuls(8, 16, 16, True)
    runtime, weights = weight_preprocessing(merged)
    assert weights is not None and [n.op for n in runtime.ops] == ["matmul", "split"]
    assert len(runtime.args) == 4 and runtime.output_sigs == merged.output_sigs
    times = time_end_to_end([separate, merged], repeats=2)
    assert len(times) == 2 and all(0 < t < 1 for t in times)
