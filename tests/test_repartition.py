"""`tasoc run --repartition-every K`: a `soap-shard{search=roc}` GNN step re-laid out
while it trains (`tasoc/driver/repartition.py`, `vertex_layout.relay_out`).

The block times are injected (`repartition.MEASURE`) so that what the cost model
learns, and so whether the partition moves, does not depend on this machine."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from conftest import Result, assert_one_line_error
from soap_helpers import step

from tasoc.backends.numpy import run_reference
from tasoc.driver import repartition
from tasoc.driver.sources import load_program
from tasoc.ir import dag as dag_module
from tasoc.ir.graph_data import small
from tasoc.models import build_model
from tasoc.passes.soap.roc.cost_model import LayerCostModel
from tasoc.passes.soap.roc.partition import PartitionRequest, VertexPartition, ranges
from tasoc.passes.soap.vertex_layout import (
    blocked_graph,
    lay_out,
    layout_of,
    permute_rows,
    relay_out,
    vertex_rows,
)

RNG = np.random.default_rng(1)
PIPELINE = "autodiff{loss=softmax-cross-entropy optimizer=adam lr=0.05}"
SPEC = "zoo:gcn?graph=karate_club&layers=2"


def _inputs(dag: dag_module.Dag) -> list[np.ndarray]:
    """Random features and weights, labels in 0..3, Adam's step count 0."""
    inputs = [RNG.standard_normal(a.sigs[0].shape).astype(np.float32) for a in dag.args]
    labels = next(i for i, a in enumerate(dag.args) if a.attr("name") == "labels")
    inputs[labels] = RNG.integers(0, 4, dag.args[labels].sigs[0].shape).astype(np.int32)
    inputs[-1] = np.zeros((), np.float32)
    return inputs


@pytest.mark.parametrize("model", ["gcn", "gat"])
def test_a_laid_out_step_laid_out_anew_equals_it_on_moved_data(model: str) -> None:
    """`relay_out` from an uneven layout that renumbers (reversed vertex order) to new
    ranges of its rows: the same step on the same data moved to the new rows, and the
    graph read back from the blocks is the input graph renumbered by the order."""
    original = dag_module.from_module(
        step(
            build_model(f"{model}?graph=karate_club"),
            loss="softmax-cross-entropy",
            optimizer="adam",
        )
    )
    graph = small("karate_club")
    order = np.arange(graph.vertices)[::-1].copy()
    first = VertexPartition(order, np.array([0, 6, 20, 34]))
    laid = lay_out(original, layout_of(graph, first))
    blocks = first.sizes()
    read = blocked_graph(laid, blocks)
    renumbered = {(int(s), int(t)) for t, s in _edges(read)}
    position = np.argsort(order)
    assert renumbered == {(int(position[s]), int(position[t])) for t, s in _edges(graph)}
    layout = layout_of(read, ranges(read, np.array([0, 15, 25, 34])))
    relaid = relay_out(laid, blocks, layout)
    assert relaid.args[0].sigs[0].shape[0] == 3 * 15
    inputs = _inputs(laid)
    vertex_of_row = vertex_rows(laid, blocks)
    moved = [
        permute_rows(x, layout, vertex_of_row) if a.sigs != b.sigs else x
        for x, a, b in zip(inputs, laid.args, relaid.args, strict=True)
    ]
    expected = run_reference(dag_module.to_module(laid), inputs)
    got = run_reference(dag_module.to_module(relaid), moved)
    for e, g in zip(expected, got, strict=True):
        np.testing.assert_allclose(g, e, rtol=1e-4, atol=1e-6)


def _edges(graph: object) -> list[tuple[int, int]]:
    """(target, source) of every in-edge of a `Csr`."""
    return list(zip(graph.targets().tolist(), graph.indices.tolist(), strict=True))  # type: ignore[attr-defined]


@pytest.fixture(scope="module")
def laid_out(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Karate club's GCN step laid out on 4 devices in equal vertex ranges (its hub
    vertices 0, 32 and 33 make the edges uneven)."""
    from tasoc.driver.main import main

    out = tmp_path_factory.mktemp("repartition") / "g.mlir"
    pipeline = f"{PIPELINE},soap-shard{{mesh=4 search=roc partitioner=equal-vertex}}"
    assert main(["opt", SPEC, "-p", pipeline, "-o", str(out), "--quiet"]) == 0
    return out


def _edge_times(request: PartitionRequest, partition: VertexPartition) -> np.ndarray:
    """Each part's in-edges in microseconds, the same for both layers: a model of
    aggregation-bound layers, which the cost model fits exactly (x2)."""
    degrees = request.graph.degrees()[partition.order]
    edges = np.add.reduceat(degrees, partition.bounds[:-1]) * 1e-6
    return np.stack([edges] * len(request.layers))


def _vertex_times(request: PartitionRequest, partition: VertexPartition) -> np.ndarray:
    """Each part's vertex count in microseconds: equal ranges are balanced already."""
    return np.stack([partition.sizes() * 1e-6] * len(request.layers))


def _losses(result: Result) -> list[float]:
    return [float(line.split()[-1]) for line in result.out.splitlines() if line.startswith("step ")]


def test_measured_edge_bound_blocks_move_the_partition_and_training_goes_on(
    tasoc: Callable[..., Result],
    laid_out: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blocks timed by their edges: the model learns that, moves vertices off the
    hubs' devices, the new layout's first step equals the reference of the program as
    written (--check), and the losses are those of the run that never re-partitions
    (params and Adam's moments carried over, not reset)."""
    monkeypatch.setattr(repartition, "MEASURE", _edge_times)
    plain = tasoc("run", laid_out, "--devices", "4", "--steps", "6")
    assert plain.code == 0, plain
    report = tmp_path / "r.json"
    run = tasoc(
        "run", laid_out, "--devices", "4", "--steps", "6", "--repartition-every", "3",
        "--check", "--report", report,
    )  # fmt: skip
    assert run.code == 0, run
    assert "check: equivalent to the numpy reference (step 1)" in run.out
    assert "check: equivalent to the numpy reference (step 4)" in run.out
    (done,) = json.loads(report.read_text())["repartitions"]
    assert done["step"] == 3 and done["changed"] and done["moved_vertices"] > 0
    line = next(x for x in run.out.splitlines() if x.startswith("repartition after step 3"))
    assert f"{done['moved_vertices']} vertices moved" in line
    graph = small("karate_club")
    bounds = np.concatenate([[0], np.cumsum(done["vertices_per_device"])])
    before = _edge_times(PartitionRequest(graph, 4, ((1, 1),)), ranges(graph, [0, 8, 17, 26, 34]))
    after = _edge_times(PartitionRequest(graph, 4, ((1, 1),)), ranges(graph, bounds))
    assert after.max() < before.max()
    assert done["predicted_max_seconds"] == pytest.approx(2 * after.max())
    np.testing.assert_allclose(_losses(run), _losses(plain), rtol=1e-4)
    assert _losses(run)[-1] < _losses(run)[0]


def test_balanced_blocks_keep_the_partition(
    tasoc: Callable[..., Result],
    laid_out: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Blocks timed by their vertex counts: equal ranges are what the model balances
    to, so nothing moves and nothing is recompiled (no second check)."""
    monkeypatch.setattr(repartition, "MEASURE", _vertex_times)
    report = tmp_path / "r.json"
    run = tasoc(
        "run", laid_out, "--devices", "4", "--steps", "5", "--repartition-every", "2",
        "--check", "--report", report,
    )  # fmt: skip
    assert run.code == 0, run
    history = json.loads(report.read_text())["repartitions"]
    assert [done["step"] for done in history] == [2, 4]
    assert not any(done["changed"] for done in history)
    assert run.out.count("partition unchanged (blocks of 9 rows)") == 2
    assert "(step 3)" not in run.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--repartition-every", "0", "--steps", "2"], "--repartition-every"),
        (["--repartition-every", "2"], "give --steps N"),
        (["--repartition-every", "2", "--steps", "2", "--backend", "numpy"], "--backend jax"),
        (["--repartition-every", "2", "--steps", "2", "--devices", "1"], "--devices 1"),
    ],
)
def test_bad_repartition_options_are_one_line(
    tasoc: Callable[..., Result], laid_out: Path, extra: list[str], message: str
) -> None:
    assert_one_line_error(tasoc("run", laid_out, *extra), message)


def test_repartitioning_a_program_not_laid_out_by_search_roc_is_one_line(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    for name, pipeline in (
        ("step", PIPELINE),
        ("data-parallel", f"{PIPELINE},soap-shard{{mesh=2 search=data-parallel}}"),
    ):
        out = tmp_path / f"{name}.mlir"
        assert tasoc("opt", SPEC, "-p", pipeline, "-o", out, "--quiet").code == 0
        run = tasoc("run", out, "--devices", "2", "--steps", "2", "--repartition-every", "1")
        assert_one_line_error(run, "soap-shard{search=roc}", "graph.vertex_blocks")


def test_the_pass_records_its_cost_model_and_a_run_starts_from_it(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    """`partitioner=roc` records its learned points (4 iterations x 2 layers x 2
    devices); a run whose blocks are timed as the pass timed them (the plan's machine
    is `cpu-2`, measured here) refits the same model from them, and one planned on a
    simulated preset starts empty."""
    out = tmp_path / "g.mlir"
    pipeline = f"{PIPELINE},soap-shard{{mesh=2 search=roc}}"
    assert tasoc("opt", SPEC, "-p", pipeline, "-o", out, "--quiet").code == 0
    module = load_program(str(out), {}).module
    model = repartition.recorded_model(module, "cpu-2", 2)
    assert model.count() == 4 * 2 * 2 and set(model.weights) == {0, 1}
    again = LayerCostModel.from_arrays(model.to_arrays())
    for layer in (0, 1):
        np.testing.assert_array_equal(again.weights[layer], model.weights[layer])
    assert repartition.recorded_model(module, "v100", 2).count() == 0
    assert repartition.recorded_model(module, "cpu-2", 3).count() == 0  # not its layers
