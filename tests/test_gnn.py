"""Graph neural networks: the GNN ops (values, gradients, isolated vertices, bad
indices), the zoo's GCN, GraphSAGE and GIN, and `soap-shard{search=roc}` (the vertex
layout equals the unpartitioned step, trains on several devices, and a balanced
partition simulates faster)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import Result, assert_one_line_error
from soap_helpers import shard, step
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.jax.lowering import JAX_KERNELS
from tasoc.backends.numpy import run_reference
from tasoc.backends.numpy.kernels import KERNELS
from tasoc.ir import dag as dag_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.graph_data import small
from tasoc.ir.program import arg_infos, entry_function
from tasoc.ir.shapes import DType, ShapeError, TensorSig, infer
from tasoc.models import build_model
from tasoc.passes.soap.roc import partition as roc_partition
from tasoc.passes.soap.soap_shard import SoapShardPass
from tasoc.passes.soap.vertex_layout import (
    LayoutError,
    graph_of,
    lay_out,
    layout_of,
    permute_rows,
)
from tasoc.passes.summary import format_seconds

RNG = np.random.default_rng(0)

# A graph of 5 vertices in 2 blocks of 3 rows (row 5 is padding): edges as
# (block, source, target within the block); vertex 2 has no in-edges.
EDGES = [(0, 1, 0), (0, 3, 0), (0, 4, 1), (0, 0, 1), (1, 0, 0), (1, 2, 0), (1, 1, 1)]


def _edge_arrays(width: int = 5) -> tuple[np.ndarray, np.ndarray]:
    src = np.zeros((2, width), np.int32)
    dst = np.full((2, width), -1, np.int32)
    slots = [0, 0]
    for block, source, target in EDGES:
        src[block, slots[block]], dst[block, slots[block]] = source, target
        slots[block] += 1
    return src, dst


def _dense(weight: np.ndarray | None) -> np.ndarray:
    """The [6, 5] matrix A with out = A @ x for a sum aggregation."""
    src, dst = _edge_arrays()
    a = np.zeros((6, 5))
    for block in range(2):
        for e in range(src.shape[1]):
            if dst[block, e] >= 0:
                w = 1.0 if weight is None else weight[block, e]
                a[block * 3 + dst[block, e], src[block, e]] += w
    return a


def _run(kernels: dict[str, Any], op: str, attrs: dict[str, Any], inputs: Sequence[Any]) -> Any:
    return np.asarray(kernels[op](attrs, list(inputs))[0])


@pytest.mark.parametrize("weighted", [False, True])
def test_sum_and_mean_aggregation_are_the_adjacency_matrix_products(weighted: bool) -> None:
    src, dst = _edge_arrays()
    x = RNG.standard_normal((5, 3))
    weight = RNG.uniform(0.5, 2, src.shape) if weighted else None
    inputs = [x, src, dst, *([weight] if weighted else [])]
    a = _dense(weight)
    counts = (_dense(None) > 0).sum(axis=1, keepdims=True)
    sum_attrs = {"reduce": "sum", "block_rows": 3}
    np.testing.assert_allclose(_run(KERNELS, "aggregate", sum_attrs, inputs), a @ x, atol=1e-12)
    mean = _run(KERNELS, "aggregate", {**sum_attrs, "reduce": "mean"}, inputs)
    np.testing.assert_allclose(mean, (a @ x) / np.maximum(counts, 1), atol=1e-12)


def test_max_aggregation_and_isolated_rows_are_zero_not_inf() -> None:
    src, dst = _edge_arrays()
    # Every message negative, so a 0 is no max of them.
    x = (RNG.standard_normal((5, 3)) - 10).astype(np.float32)
    for reduce in ("sum", "mean", "max"):
        for kernels in (KERNELS, JAX_KERNELS):
            out = _run(kernels, "aggregate", {"reduce": reduce, "block_rows": 3}, [x, src, dst])
            assert np.isfinite(out).all()
            # Row 2 (block 0 has no target 2) and row 5 (padding) receive nothing.
            np.testing.assert_array_equal(out[[2, 5]], 0)
    out = _run(KERNELS, "aggregate", {"reduce": "max", "block_rows": 3}, [x, src, dst])
    np.testing.assert_allclose(out[0], np.maximum(x[1], x[3]))
    np.testing.assert_allclose(out[3], np.maximum(x[0], x[2]))


def _jax_function(
    op: str, attrs: dict[str, Any], inputs: list[Any], wrt: int
) -> Callable[..., Any]:
    kernel = JAX_KERNELS[op]

    def f(value: Any, dy: Any) -> Any:
        args = [*inputs]
        args[wrt] = value
        return jnp.sum(kernel(attrs, args)[0] * dy)

    return f


@pytest.mark.parametrize("reduce", ["sum", "mean", "max"])
@pytest.mark.parametrize("weighted", [False, True])
def test_aggregation_gradients_match_jax_grad(reduce: str, weighted: bool) -> None:
    src, dst = _edge_arrays()
    x = RNG.standard_normal((5, 3)).astype(np.float32)
    weight = RNG.uniform(0.5, 2, src.shape).astype(np.float32)
    inputs = [x, src, dst, *([weight] if weighted else [])]
    attrs = {"reduce": reduce, "block_rows": 3}
    dy = RNG.standard_normal((6, 3)).astype(np.float32)
    f = _jax_function("aggregate", attrs, inputs, 0)
    expected = jax.grad(f)(jnp.asarray(x), jnp.asarray(dy))
    for kernels in (KERNELS, JAX_KERNELS):
        got = _run(kernels, "aggregate_grad", attrs, [*inputs, dy])
        np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-5)
    if weighted and reduce != "max":
        g = _jax_function("aggregate", attrs, inputs, 3)
        expected_w = np.array(jax.grad(g)(jnp.asarray(weight), jnp.asarray(dy)))
        expected_w[dst < 0] = 0
        got_w = _run(KERNELS, "aggregate_weight_grad", attrs, [x, src, dst, dy])
        np.testing.assert_allclose(got_w, expected_w, rtol=1e-5, atol=1e-5)


def test_edge_softmax_normalises_over_each_targets_in_edges_and_its_gradient() -> None:
    _, dst = _edge_arrays()
    scores = RNG.standard_normal(dst.shape)
    attrs = {"block_rows": 3}
    y = _run(KERNELS, "edge_softmax", attrs, [scores, dst])
    segments = np.where(dst >= 0, dst + 3 * np.arange(2)[:, None], -1)
    for segment in np.unique(segments[segments >= 0]):
        np.testing.assert_allclose(y[segments == segment].sum(), 1.0)
    np.testing.assert_array_equal(y[dst < 0], 0)
    dy = RNG.standard_normal(dst.shape)
    step = 1e-6
    numeric = np.zeros_like(scores)
    for index in np.ndindex(scores.shape):
        bumped = scores.copy()
        bumped[index] += step
        up = (_run(KERNELS, "edge_softmax", attrs, [bumped, dst]) * dy).sum()
        numeric[index] = (up - (y * dy).sum()) / step
    got = _run(KERNELS, "edge_softmax_grad", attrs, [y, dst, dy])
    np.testing.assert_allclose(got, numeric, atol=1e-4)
    single = [y.astype(np.float32), dst, dy.astype(np.float32)]
    np.testing.assert_allclose(
        _run(JAX_KERNELS, "edge_softmax_grad", attrs, single), got, atol=1e-5
    )


def test_edge_scores_gradients_from_autodiff_match_jax_grad() -> None:
    """autodiff composes edge_scores' gradients from aggregations; SGD with lr 1 makes
    the new weights `w - grad`, set against jax.grad of the op's own kernel."""
    src, dst = _edge_arrays()
    a0 = RNG.standard_normal((5, 1)).astype(np.float32)
    b0 = RNG.standard_normal((6, 1)).astype(np.float32)
    c = RNG.standard_normal(src.shape).astype(np.float32)
    g = GraphBuilder()
    a, b = g.param("a", (5, 1)), g.param("b", (6, 1))
    edges = [g.constant(x, "i32") for x in (src, dst)]
    scores = g.edge_scores(a, b, *edges, block_rows=3)
    module = g.build(g.mul(scores, g.constant(c)))
    trained = step(module, loss="sum", optimizer="sgd", lr=1.0)
    _, new_a, new_b = run_reference(trained, [a0, b0])

    def loss(a: Any, b: Any) -> Any:
        attrs = {"block_rows": 3}
        return jnp.sum(JAX_KERNELS["edge_scores"](attrs, [a, b, src, dst])[0] * c)

    grad_a, grad_b = jax.grad(loss, argnums=(0, 1))(jnp.asarray(a0), jnp.asarray(b0))
    np.testing.assert_allclose(a0 - new_a, grad_a, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(b0 - new_b, grad_b, rtol=1e-5, atol=1e-6)


def test_the_reference_refuses_indices_out_of_range() -> None:
    src, dst = _edge_arrays()
    x = RNG.standard_normal((5, 3))
    attrs = {"reduce": "sum", "block_rows": 3}
    bad = src.copy()
    bad[0, 0] = 5
    with pytest.raises(ValueError, match="source 5 is out of range"):
        KERNELS["aggregate"](attrs, [x, bad, dst])
    bad = dst.copy()
    bad[1, 0] = 3
    with pytest.raises(ValueError, match="target 3 is out of range"):
        KERNELS["aggregate"](attrs, [x, src, bad])


def test_shape_rule_names_the_mismatch() -> None:
    x, edges = TensorSig((5, 3), DType.F32), TensorSig((2, 5), DType.I32)
    assert infer("aggregate", [x, edges, edges], {"reduce": "sum", "block_rows": 3}) == [
        TensorSig((6, 3), DType.F32)
    ]
    with pytest.raises(ShapeError, match="reduce must be"):
        infer("aggregate", [x, edges, edges], {"reduce": "min", "block_rows": 3})
    with pytest.raises(ShapeError, match="src and dst must be"):
        infer(
            "aggregate",
            [x, edges, TensorSig((2, 4), DType.I32)],
            {"reduce": "sum", "block_rows": 3},
        )
    with pytest.raises(ShapeError, match="src must be i32 or i64"):
        infer("aggregate", [x, x, edges], {"reduce": "sum", "block_rows": 3})


# ------------------------------------------------------------------ models


@pytest.mark.parametrize(
    "spec", ["gcn", "gcn?layers=4", "sage", "sage?aggregator=max", "gin", "gat"]
)
def test_zoo_gnns_train_equally_on_jax_and_the_reference(
    spec: str, tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    step = tmp_path / "step.mlir"
    pipeline = "autodiff{loss=softmax-cross-entropy optimizer=adam lr=0.05}"
    assert (
        tasoc(
            "opt",
            f"zoo:{spec}{'&' if '?' in spec else '?'}graph=karate_club",
            "-p",
            pipeline,
            "-o",
            step,
        ).code
        == 0
    )
    result = tasoc("run", step, "--steps", "4", "--check")
    assert result.code == 0, result
    assert "check: equivalent" in result.out
    losses = [
        float(line.split()[-1]) for line in result.out.splitlines() if line.startswith("step ")
    ]
    assert losses[-1] < losses[0]


def test_gcn_graph_is_constants_with_self_loops_and_normalised_weights() -> None:
    module = build_model("gcn?graph=karate_club")
    dag = dag_module.from_module(module)
    (aggregate, *_) = [n for n in dag.ops if n.op == "aggregate"]
    src, dst, weight = (np.asarray(v.node.attr("value").values) for v in aggregate.inputs[1:])
    graph = small("karate_club")
    assert len(src) == graph.edges + graph.vertices
    degree = graph.degrees() + 1
    np.testing.assert_allclose(weight, 1 / np.sqrt(degree[src] * degree[dst]), rtol=1e-6)
    (features,) = [info for info in arg_infos(entry_function(module)) if not info.is_param]
    assert features.sig.shape == (34, 16)


def _edge_list(tmp_path: Path, sources: list[int], targets: list[int], vertices: int) -> Path:
    path = tmp_path / "edges.npz"
    np.savez(path, sources=np.array(sources), targets=np.array(targets), vertices=vertices)
    return path


@pytest.mark.parametrize(
    ("sources", "targets", "message"),
    [([0, 1], [1, 7], "outside the 3 vertices"), ([0, 1], [1, 1], "self loop")],
)
def test_bad_edge_lists_are_one_line(
    sources: list[int],
    targets: list[int],
    message: str,
    tasoc: Callable[..., Result],
    tmp_path: Path,
) -> None:
    path = _edge_list(tmp_path, sources, targets, 3)
    assert_one_line_error(tasoc("opt", f"zoo:gcn?graph={path}"), message)


def test_unknown_graph_is_one_line(tasoc: Callable[..., Result]) -> None:
    assert_one_line_error(tasoc("opt", "zoo:gcn?graph=cora"), "unknown graph 'cora'")


# ------------------------------------------------------------------ search=roc

PIPELINE = "autodiff{loss=softmax-cross-entropy optimizer=adam lr=0.05}"


def _trained(spec: str) -> ModuleOp:
    return step(build_model(spec), loss="softmax-cross-entropy", optimizer="adam", lr=0.05)


def _step(spec: str) -> dag_module.Dag:
    return dag_module.from_module(_trained(spec))


def _uneven(graph: Any, parts: int) -> roc_partition.VertexPartition:
    """A partition that renumbers (reversed order) with uneven blocks."""
    order = np.arange(graph.vertices)[::-1].copy()
    bounds = np.linspace(0, graph.vertices, parts + 1).round().astype(np.int64)
    bounds[1] -= 3
    return roc_partition.VertexPartition(order, bounds)


@pytest.mark.parametrize("model", ["gcn", "sage", "gin", "gat"])
def test_the_laid_out_step_equals_the_original_on_the_same_data(model: str) -> None:
    step = _step(f"{model}?graph=karate_club")
    graph = small("karate_club")
    layout = layout_of(graph, _uneven(graph, 3))
    laid = lay_out(step, layout)
    original = dag_module.to_module(step)
    inputs = [RNG.standard_normal(a.sigs[0].shape).astype(np.float32) for a in step.args]
    labels = next(i for i, a in enumerate(step.args) if a.attr("name") == "labels")
    inputs[labels] = RNG.integers(0, 4, 34).astype(np.int32)
    inputs[-1] = np.zeros((), np.float32)  # the Adam step count
    vertex = [
        i for i, (a, b) in enumerate(zip(step.args, laid.args, strict=True)) if a.sigs != b.sigs
    ]
    assert len(vertex) == 2  # features and labels
    laid_inputs = [permute_rows(x, layout) if i in vertex else x for i, x in enumerate(inputs)]
    expected = run_reference(original, inputs)
    got = run_reference(dag_module.to_module(laid), laid_inputs)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)


def test_roc_trains_on_four_devices_equal_to_the_unsharded_step(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    out = tmp_path / "g.mlir"
    pipeline = f"{PIPELINE},soap-shard{{mesh=4 search=roc}}"
    # --verify-each: the sharded step against the input laid out by the same partition.
    spec = "zoo:gcn?graph=karate_club&layers=2"
    made = tasoc("opt", spec, "-p", pipeline, "--verify-each", "-o", out)
    assert made.code == 0, made
    summary = made.out + made.err
    assert "partition (roc): 34 vertices, 156 edges over 4 devices" in summary
    block = int(summary.split("padded blocks of ")[1].split()[0])
    assert block >= 9  # 34 vertices over 4 devices: no block is under ceil(34 / 4)
    text = out.read_text()
    assert "parallel.all_gather" in text and f"block_rows = {block} : i64" in text
    result = tasoc("run", out, "--devices", "4", "--steps", "4", "--check")
    assert result.code == 0, result
    assert "check: equivalent to the numpy reference (first step)" in result.out
    losses = [
        float(line.split()[-1]) for line in result.out.splitlines() if line.startswith("step ")
    ]
    assert losses[-1] < losses[0]


def _dense_program() -> ModuleOp:
    g = GraphBuilder()
    return g.build(g.matmul(g.input("x", (4, 3)), g.param("w", (3, 2))))


def test_roc_refuses_more_devices_than_vertices_and_programs_without_a_graph(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    dense = tmp_path / "dense.mlir"
    dense.write_text(str(_dense_program()))
    pipeline = f"{PIPELINE},soap-shard{{mesh=64 search=roc}}"
    assert_one_line_error(
        tasoc("opt", "zoo:gcn?graph=karate_club", "-p", pipeline),
        "cannot split 34 vertices into 64 parts",
    )
    assert_one_line_error(
        tasoc("opt", dense, "-p", f"{PIPELINE},soap-shard{{mesh=2 search=roc}}"),
        "no graph.aggregate",
    )
    assert_one_line_error(
        tasoc(
            "opt",
            "zoo:gcn?graph=karate_club",
            "-p",
            f"{PIPELINE},soap-shard{{mesh=2 search=roc partitioner=nope}}",
        ),
        "partitioner",
    )


def test_a_balanced_partition_simulates_faster(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every device's work is its padded block, so the step runs at the pace of the
    largest: a skewed partition (one device with 70% of the vertices) simulates slower
    than equal vertex ranges on the same graph."""

    def skewed(request: roc_partition.PartitionRequest) -> roc_partition.VertexPartition:
        shares = np.array([0.0, 0.7, 0.8, 0.9, 1.0])
        return roc_partition.ranges(request.graph, np.round(shares * request.graph.vertices))

    monkeypatch.setitem(roc_partition.PARTITIONERS, "test-skewed", skewed)
    module = _trained("gcn?graph=pubmed&scale=0.1&hidden=16")
    found = {}
    for name in ("equal-vertex", "test-skewed"):
        _, section = shard(module, mesh=4, search="roc", partitioner=name)
        found[name] = (section["roc"]["block_rows"], section["predicted_seconds"]["plan"])
    assert found["equal-vertex"][0] < found["test-skewed"][0]
    assert found["equal-vertex"][1] < found["test-skewed"][1]


def test_the_summary_measures_a_partition_against_equal_vertex_ranges(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The baselines run on the laid-out step, so the headline compares the partition
    with equal vertex ranges laid out alike, and warns when it is slower."""

    def skewed(request: roc_partition.PartitionRequest) -> roc_partition.VertexPartition:
        shares = np.array([0.0, 0.7, 0.8, 0.9, 1.0])
        return roc_partition.ranges(request.graph, np.round(shares * request.graph.vertices))

    monkeypatch.setitem(roc_partition.PARTITIONERS, "test-skewed", skewed)
    module = _trained("gcn?graph=pubmed&scale=0.1&hidden=16")
    _, section = shard(module, mesh=4, search="roc", partitioner="test-skewed")
    even, plan = section["roc"]["equal_vertex_seconds"], section["predicted_seconds"]["plan"]
    assert even < plan
    summary = SoapShardPass(mesh="4", search="roc", partitioner="test-skewed").summary(section)
    assert f"x over equal vertex ranges ({format_seconds(even)})" in summary.headline
    assert "over data parallel" not in summary.headline
    assert any("simulates slower than equal vertex ranges" in w for w in summary.warnings)
    _, even_section = shard(module, mesh=4, search="roc", partitioner="equal-vertex")
    assert "equal_vertex_seconds" not in even_section["roc"]


def test_layout_refuses_a_program_without_a_graph() -> None:
    with pytest.raises(LayoutError, match=r"no graph\.aggregate"):
        graph_of(dag_module.from_module(_dense_program()))
