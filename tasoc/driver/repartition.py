"""`tasoc run --steps N --repartition-every K`: ROC's partitioner learning as the model trains.

`soap-shard{search=roc}` partitions a GNN step's graph with ROC's learned cost model
(Jia thesis §4.4) and writes the laid-out step (`passes/soap/vertex_layout.py`). In
the thesis the partitioner keeps learning during training: each iteration's measured
per-partition times are new points of the cost model, and the partition follows the
model. This module does that between training steps: every K steps it

1. measures each device's block of the current layout on this machine, layer by
   layer (`MEASURE`: the timing the pass's own loop uses, `learned.machine_measure`
   on the `cpu` device, which `cost/gnn.py` times with JAX here; tests inject theirs);
2. adds those times to the cost model as points and refits it, then balances the
   model's per-vertex costs into new ranges (`learned.OnlineBalancer`), kept only
   when the refitted model predicts their slowest block faster than the current
   partition's (a tie would cost a compile for nothing);
3. if the ranges changed, lays the program out anew (`vertex_layout.relay_out`:
   vertices renumbered into new blocks, edge blocks rebuilt, the loss's masks moved),
   re-shards it as `search=roc` does (`soap-shard{search=data-parallel}` on the
   laid-out step), moves the vertex-row arguments (features, labels) to their new
   rows, and recompiles; the params and optimizer state carry over as they are.

What the run reads from the written program: the edge blocks and `block_rows` of its
GNN ops, and `graph.vertex_blocks` (`vertex_layout.BLOCKS_ATTR`), the real rows of
each block, which the pass records. Those give the graph (`blocked_graph`, its
vertices numbered in row order) and the un-padded rows; the original vertex numbering
is not needed (a range partition of the row order is a partition of the graph, and
the pass's `roc` partitions are ranges of the original order, so the two agree), nor
the program before its layout (`relay_out` lays out the laid-out one). With
`partitioner=roc` the pass also records its cost model's points
(`vertex_layout.POINTS_ATTR`), and the run's model starts from them when they were
measured as the run measures (the plan's machine timed here, not simulated on a GPU
preset); otherwise it starts from its first measurement.

Params and optimizer state carry over because none has a vertex dimension: the layout
pads only arguments that are neither `graph.param` nor `graph.state` (the features and
labels), so a weight or an Adam moment shaped by the vertex count would not survive
the first layout (its shape inference fails, `LayoutError`); the run checks that every
param and state argument keeps its type across a re-layout.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
from xdsl.dialects.builtin import ArrayAttr, DenseArrayBase, ModuleOp, i64

from tasoc.cost.gnn import layer_timer
from tasoc.driver.errors import DriverError
from tasoc.driver.training_run import JaxSteps, TrainingRun, loop
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Node
from tasoc.ir.graph_data import Csr
from tasoc.ir.parallel import machine_of, meshes, unsharded
from tasoc.ir.training import STATE_ATTR, TrainingSignature
from tasoc.passes.soap.roc.cost_model import CostModelError, LayerCostModel
from tasoc.passes.soap.roc.learned import Measure, OnlineBalancer, machine_measure
from tasoc.passes.soap.roc.partition import PartitionRequest, VertexPartition, ranges
from tasoc.passes.soap.vertex_layout import (
    BLOCKS_ATTR,
    POINTS_ATTR,
    LayoutError,
    blocked_graph,
    layer_widths,
    layout_of,
    permute_rows,
    relay_out,
    vertex_rows,
)

MEASURE: Measure = machine_measure
"""How a re-partitioning run times each block's layers: (request, partition) ->
(layers, parts) seconds. Tests replace it to force what the model learns."""

MEASURED_ON = "cpu"
"""The machine the blocks are timed on: this one (a run measures where it runs), not
the preset the program was planned for."""

Check = Callable[[int, Sequence[np.ndarray], Sequence[np.ndarray]], None]
"""`--check` of step `n` (1-based): the arguments of the program as written (its
features and labels, the step's params and state) and the step's results; raises
DriverError when they differ from that program's one-device reference."""


@dataclass(frozen=True)
class Repartitioning:
    """One re-partition: after `step` steps, the blocks' measured (layers, parts)
    seconds, the refitted model's seconds for the partition it chose, and how that
    partition differs from the one before."""

    step: int
    measured: np.ndarray
    predicted: np.ndarray
    moved: int
    rows_before: int
    rows_after: int
    vertices: tuple[int, ...]
    seconds: float
    """Wall-clock seconds of the re-partition: timing the blocks, refitting, and (when
    the partition changed) laying out and re-sharding; the new layout's compile falls
    in its first step."""

    @property
    def changed(self) -> bool:
        return self.moved > 0

    def line(self) -> str:
        """What the run prints: block times are the layers' summed per device."""
        measured, predicted = self.measured.sum(axis=0), self.predicted.sum(axis=0)
        moved = (
            f"{self.moved} vertices moved, blocks of {self.rows_before} -> {self.rows_after} rows"
            if self.changed
            else f"partition unchanged (blocks of {self.rows_before} rows)"
        )
        return (
            f"repartition after step {self.step}: block time measured max "
            f"{_ms(measured.max())} mean {_ms(measured.mean())}; model predicts max "
            f"{_ms(predicted.max())} mean {_ms(predicted.mean())} for the new partition; "
            f"{moved} ({self.seconds:.1f} s)"
        )

    def to_json(self) -> dict[str, Any]:
        measured, predicted = self.measured.sum(axis=0), self.predicted.sum(axis=0)
        return {
            "step": self.step,
            "measured_block_seconds": measured.tolist(),
            "predicted_block_seconds": predicted.tolist(),
            "measured_max_seconds": float(measured.max()),
            "measured_mean_seconds": float(measured.mean()),
            "predicted_max_seconds": float(predicted.max()),
            "predicted_mean_seconds": float(predicted.mean()),
            "changed": self.changed,
            "moved_vertices": self.moved,
            "block_rows_before": self.rows_before,
            "block_rows_after": self.rows_after,
            "vertices_per_device": list(self.vertices),
            "seconds": self.seconds,
        }


def _bottleneck(times: np.ndarray) -> float:
    """A step's pace from (layers, parts) seconds: its slowest block, layers summed."""
    return float(times.sum(axis=0).max())


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def recorded_blocks(module: ModuleOp, input_name: str) -> np.ndarray:
    """The real rows of each block `search=roc` recorded; DriverError in one line for a
    program that is not a `soap-shard{search=roc}` GNN step on several devices."""
    attr = module.attributes.get(BLOCKS_ATTR)
    found = list(meshes(module).values())
    if not isinstance(attr, DenseArrayBase) or len(found) != 1:
        raise DriverError(
            f"{input_name}: --repartition-every re-partitions a GNN training step laid out "
            f"by soap-shard{{search=roc}}, and the program has no {BLOCKS_ATTR} on one mesh"
        )
    blocks = np.asarray(attr.get_values(), dtype=np.int64)
    if found[0].size != len(blocks) or found[0].size < 2:
        raise DriverError(
            f"{input_name}: --repartition-every balances a partition over several devices; "
            f"{BLOCKS_ATTR} has {len(blocks)} blocks on a mesh of {found[0].size}"
        )
    return blocks


def recorded_model(module: ModuleOp, machine: str, layers: int) -> LayerCostModel:
    """The cost model of the points `search=roc` recorded (`POINTS_ATTR`), when they
    were measured where the run measures (the plan's machine is timed here, not
    simulated: `layer_timer`) and are one per layer; an empty model otherwise."""
    attr = module.attributes.get(POINTS_ATTR)
    if not isinstance(attr, ArrayAttr) or len(attr) != layers:
        return LayerCostModel()
    if not layer_timer(machine).measured:
        return LayerCostModel()  # simulated seconds of another device: not this one's
    arrays = [
        np.asarray(points.get_values(), dtype=np.float64)
        for points in attr
        if isinstance(points, DenseArrayBase)
    ]
    try:
        return LayerCostModel.from_arrays(arrays)
    except CostModelError as err:
        raise DriverError(f"{POINTS_ATTR}: {err}") from None


class Layout:
    """The current laid-out step: its sharded module, one-device dag, blocks and the
    graph over its real rows (the same graph for every layout: `relay_out` keeps the
    row order of the vertices, so `vertex_rows` numbers them alike)."""

    def __init__(self, module: ModuleOp, blocks: np.ndarray) -> None:
        self.module = module
        self.blocks = blocks
        self.one_device = unsharded(module)
        self.dag = dag_module.from_module(self.one_device)
        self.bounds = np.concatenate([[0], np.cumsum(blocks)])

    def partition(self, graph: Csr) -> VertexPartition:
        return ranges(graph, self.bounds)

    def vertex_args(self) -> list[int]:
        """The arguments with a vertex dimension (padded: features, labels): those the
        layout pads (`vertex_layout._Rewriter.arg`)."""
        rows = len(self.blocks) * int(self.blocks.max())
        return [
            i
            for i, node in enumerate(self.dag.args)
            if node.sigs[0].rank > 0 and node.sigs[0].shape[0] == rows and not _carried(node)
        ]


def _carried(node: Node) -> bool:
    """Whether an argument is a param or optimizer state: carried over as it is."""
    return bool(node.attr("is_param")) or STATE_ATTR in dict(node.attr("attributes"))


def relaid(
    current: Layout, graph: Csr, partition: VertexPartition, machine: str
) -> tuple[Layout, Callable[[np.ndarray], np.ndarray]]:
    """`current` laid out by `partition` and re-sharded on its mesh as `search=roc`
    shards a laid-out step, and how a vertex-row argument moves to it."""
    from tasoc.driver.sources import make_context, verify_module
    from tasoc.passes.report import RunReport, reporting
    from tasoc.passes.soap import SoapShardPass

    layout = layout_of(graph, partition)
    try:
        laid = relay_out(current.dag, current.blocks, layout)
    except LayoutError as err:
        raise DriverError(f"cannot re-partition: {err}") from None
    for old, new in zip(current.dag.args, laid.args, strict=True):
        if _carried(old) and old.sigs != new.sigs:
            raise DriverError(
                f"cannot re-partition: {old.attr('name')} is a param or state with a "
                "vertex dimension, which the layout does not move"
            )
    module = current.one_device.clone()
    dag_module.write_back(module, laid)
    blocks = partition.sizes()
    module.attributes[BLOCKS_ATTR] = DenseArrayBase.from_list(i64, [int(b) for b in blocks])
    (mesh,) = meshes(current.module).values()
    shape = "x".join(str(size) for _, size in mesh.axes)
    with reporting(RunReport()):
        SoapShardPass(mesh=shape, search="data-parallel", machine=machine).apply(
            make_context(), module
        )
    verify_module(module)
    vertex_of_row = vertex_rows(current.dag, current.blocks)
    return Layout(module, blocks), lambda array: permute_rows(array, layout, vertex_of_row)


def train_repartitioning(
    module: ModuleOp,
    blocks: np.ndarray,
    signature: TrainingSignature,
    inputs: Sequence[np.ndarray],
    steps: int,
    every: int,
    on_step: Callable[[int, float], None],
    check: Check | None,
) -> tuple[TrainingRun, list[Repartitioning]]:
    """Train `steps` steps of the laid-out step `module` (its blocks' real rows
    `blocks`: `recorded_blocks`) from `inputs`, re-partitioning after every `every`
    steps (the module docstring); `check` is called on the first step of every layout
    (the first included), with the arguments of the original layout (its features and
    labels, the current params and state), against whose one-device program it
    compares the step. Returns the run (its seconds are the steps', re-partitioning
    and checks left out) and every re-partition."""
    layout = Layout(module, blocks)
    graph = blocked_graph(layout.dag, layout.blocks)
    machine = machine_of(module) or f"cpu-{len(layout.blocks)}"
    request = PartitionRequest(graph, len(layout.blocks), layer_widths(layout.dag), MEASURED_ON)
    model = recorded_model(module, machine, len(request.layers))
    balancer = OnlineBalancer.of(request, model)
    print(
        f"repartition: every {every} steps; the cost model starts from "
        + (f"the pass's {model.count()} measured points" if model.count() else "no points")
    )
    stepper = JaxSteps(layout.module, signature, inputs)
    first_vertex = layout.vertex_args()
    fresh = True  # a layout not stepped yet: --check checks its first step
    losses: list[float] = []
    seconds: list[float] = []
    history: list[Repartitioning] = []

    def segment(count: int) -> TrainingRun:
        """`count` steps of the current layout; the check (of a fresh layout's first
        step) runs after the step's timing, in the loop's callback."""
        offset = len(losses)
        before = stepper.host_arguments() if fresh and check is not None else None

        def show(number: int, loss: float) -> None:
            if number == 1 and before is not None and check is not None:
                results = [np.asarray(value) for value in stepper.results]  # type: ignore[arg-type]
                reference = [inputs[i] if i in first_vertex else v for i, v in enumerate(before)]
                check(offset + 1, reference, results)
            on_step(offset + number, loss)

        return loop(stepper.step, count, show)

    while True:
        run = segment(min(every, steps - len(losses)))
        fresh = False
        losses += run.losses
        seconds += run.seconds
        if len(losses) >= steps:
            break
        start = time.perf_counter()
        current = layout.partition(graph)
        times = np.asarray(MEASURE(request, current), dtype=np.float64)
        balancer.learn(current.bounds, times)
        chosen = balancer.balance()
        if _bottleneck(balancer.predict(chosen.bounds)) >= _bottleneck(
            balancer.predict(current.bounds)
        ):
            chosen = current  # no predicted gain: a new layout would only cost a compile
        moved = int(np.count_nonzero(chosen.owner() != current.owner()))
        if moved:
            arguments = stepper.host_arguments()
            layout, move = relaid(layout, graph, chosen, machine)
            for index in layout.vertex_args():
                arguments[index] = move(arguments[index])
            stepper = JaxSteps(layout.module, signature, arguments)
            fresh = True
        done = Repartitioning(
            len(losses),
            times,
            balancer.predict(chosen.bounds),
            moved,
            int(current.sizes().max()),
            int(chosen.sizes().max()),
            tuple(int(size) for size in chosen.sizes()),
            time.perf_counter() - start,
        )
        print(done.line())
        history.append(done)
    return TrainingRun(tuple(losses), tuple(seconds)), history
