"""ROC (issue 33): the memory manager and the graph partitioner.

**Memory** (item 5, the default): bytes moved between host and device by the
DP (`placement{search=dp}`, `tasoc/passes/placement/roc_dp.py`) against streaming, LRU
and Belady, and the DP's run time and state count (Jia thesis §4.7.7, Fig. 4.10).

    .venv/bin/python benchmarks/roc.py [--models gcn,rnn] [--factors 1,1.25,1.5]
        [--fractions 0.9,0.75] [--max-states 65536] [--quick]

Two tables per run. **ROC's model** (Fig. 4.10's measure): each model's training step
(`autodiff{loss=mse optimizer=sgd}`) coarsened as `search=dp` coarsens it (the finest
cut of its schedule the DP solves within `--max-states`), at capacities of
`--factors` times the least any order of its coarse ops needs; the bytes loaded to
the device by streaming (NeuGraph: nothing cached), LRU and Belady on the step's own
order and by the DP over every order (the finest cut the DP solves within the bound
at every factor), with the DP's execution states, (S, T) pairs and
wall time here. **The placed program** (tasoc's accounting: every swap-out and
swap-in): at `--fractions` of the step's peak without placement, the bytes moved by
the swap planner's LRU and Belady plans, the fixed-order DP's and `search=dp`'s plans,
and the simulated seconds of Belady's and `dp`'s plans on the `v100-swapadvisor`
preset. Wall times depend on the machine's load, printed before and after.

Models are pluggable: `MODELS` maps a name to a function of `quick` that returns an
unplaced forward program. `gcn` is a stand-in for GCN on Reddit (the thesis' Fig.
4.10) until the zoo has GNNs: dense-adjacency GCN layers (H' = relu(A H W)) with a
large adjacency input, at shapes two shared cores plan in seconds; `rnn` is the zoo's
LSTM at small shapes (its coarse ops, 4 runs of about 80 ops within the bound, need
more than its peak: ROC's model does not suit it; its rows say so). The thesis' goal:
1.4-5x less transfer than the baselines.

**Partitioning** (item 4, `--partitioning`; Jia thesis §4.7.6, Fig. 4.8): the
per-epoch time of a 2-layer GCN (d_in = the dataset's features, `--hidden`, the
dataset's classes) under equal-vertex, equal-edge, METIS and ROC's learned
partitioner (`tasoc/passes/soap/roc/`), on the four datasets' synthetic stand-ins
(`tasoc.ir.graph_data.stand_in`) at `--devices`:

    .venv/bin/python benchmarks/roc.py --partitioning [--where simulated,measured]
        [--devices 4,8,16] [--datasets pubmed,ppi,reddit,amazon] [--hidden 128]
        [--iterations 4] [--quick]

An epoch here is the forward layers: each layer waits for its slowest partition, and
the layers' slowest times are summed. *Simulated* rows price every partition's layer
on `SIM_MACHINE`'s device (`tasoc.cost.gnn.simulated_layer_seconds`: the preset's
roofline and per-class efficiencies, memory accesses in warps of 32 floats) at
`SIM_SCALES`; the "+ halo" columns add, per layer, each device's receipt of the
`d_in` activations of every remote in-neighbour, one transfer per sending device
priced by the preset's links (`Machine.transfer_time`: NVLink within a node,
InfiniBand across), serialised at the receiver. *Measured* rows time each partition's
layer alone on this machine at `MEASURED_SCALES` (fake CPU devices share the 2
cores) and take the slowest: jitted JAX, the least of `MEASURE_REPEATS` runs. Every
method's final partition is re-measured after ROC has learned, the least of
`FINAL_ROUNDS` rounds, so ROC's choice of its best iteration does not flatter it.
The thesis' goal: ROC at least every baseline, and up to 1.4x over equal-vertex
(Fig. 4.8, Reddit).
"""

from __future__ import annotations

import argparse
import functools
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import Machine, machine
from tasoc.ir import dag as dag_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag
from tasoc.ir.graph_data import DATASETS, Csr, from_edges, stand_in
from tasoc.ir.memory import replay
from tasoc.ir.program import entry_function
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.dp import plan_dp, transferred_bytes
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.roc_dp import (
    DEFAULT_MAX_STATES,
    CoarseGraph,
    StateSpaceTooLarge,
    cache_loads,
    coarsenings,
    roc_plan,
    solve,
)
from tasoc.passes.placement.swap_planner import (
    CapacityTooSmall,
    SwapSettings,
    plan_swaps,
)
from tasoc.passes.soap.roc.learned import epoch_seconds, machine_measure, roc_partition
from tasoc.passes.soap.roc.partition import PARTITIONERS, PartitionRequest, VertexPartition

MACHINE = "v100-swapadvisor"
POLICIES = ("stream", "lru", "belady")


def gcn(quick: bool = False, layers: int = 2) -> ModuleOp:
    """GCN layers H' = relu(A H W) on a dense adjacency (the last without relu; the
    thesis' GCN has 2): Reddit's shape scaled to 256 vertices and 256 features (64 and
    32 when `quick`)."""
    vertices, features = (64, 32) if quick else (256, 256)
    return dense_gcn(vertices, [features] * layers + [16])


def gcn_reddit(quick: bool = False) -> ModuleOp:
    """The 2-layer GCN on the Reddit stand-in at Reddit's widths (602 features, hidden
    128, 41 classes) and 512 vertices (64 and 32 features when `quick`). A stand-in
    scaled to 512 vertices keeps Reddit's average degree (492), so its adjacency is
    about 96 % dense: a dense `A` is a fair stand-in for it."""
    if quick:
        return dense_gcn(64, [32, 16, 8])
    stats = DATASETS["reddit"]
    return dense_gcn(512, [stats.features, 128, stats.labels])


def dense_gcn(vertices: int, widths: Sequence[int]) -> ModuleOp:
    """GCN layers H' = relu(A H W) mapping `widths[l]` to `widths[l + 1]` features over
    a dense `vertices x vertices` adjacency (the last layer without relu)."""
    g = GraphBuilder()
    adjacency = g.input("adjacency", (vertices, vertices))
    h = g.input("features", (vertices, widths[0]))
    layers = len(widths) - 1
    for layer in range(layers):
        w = g.param(f"w{layer}", (widths[layer], widths[layer + 1]))
        h = g.matmul(g.matmul(adjacency, h), w)
        if layer < layers - 1:
            h = g.relu(h)
    return g.build(h)


def rnn(quick: bool = False) -> ModuleOp:
    """The zoo's LSTM at small shapes."""
    if quick:
        return get_model("rnn").build(layers=1, hidden=16, seq=2, batch=2)
    return get_model("rnn").build(layers=2, hidden=64, seq=4, batch=4)


MODELS: dict[str, Callable[[bool], ModuleOp]] = {
    "gcn": gcn,
    "gcn-3": lambda quick: gcn(quick, layers=3),
    "gcn-reddit": gcn_reddit,
    "rnn": rnn,
}


def training_step(forward: ModuleOp) -> tuple[Dag, TrainingSignature, int]:
    """The step of `forward` (mse, sgd), its signature and its peak without placement."""
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), forward)
    function = entry_function(forward)
    signature = training_signature(function)
    assert signature is not None
    dag = dag_module.from_module(forward, keep_order=True)
    return dag, signature, replay(function).peak_bytes


def least_capacity(graph: CoarseGraph) -> int:
    """The least capacity some order of `graph` runs in: its largest op's need."""
    return max(
        graph.size(i | o) + w for i, o, w in zip(graph.ins, graph.outs, graph.work, strict=True)
    )


@dataclass(frozen=True)
class ModelRow:
    """One row of ROC's-model table."""

    model: str
    fine_ops: int
    coarse_ops: int
    coarse_tensors: int
    factor: float
    capacity: int
    loaded: dict[str, int | None]
    states: int
    pairs: int
    seconds: float

    def markdown(self) -> str:
        cells = [self.loaded[p] for p in (*POLICIES, "dp")]
        dp = self.loaded["dp"]
        gains = " / ".join(
            "-" if not dp or self.loaded[p] is None else f"{self.loaded[p] / dp:.2f}x"
            for p in POLICIES
        )
        return (
            f"| {self.model} | {self.fine_ops} / {self.coarse_ops} / {self.coarse_tensors} "
            f"| {self.factor:g} ({self.capacity}) | "
            + " | ".join("-" if c is None else str(c) for c in cells)
            + f" | {gains} | {self.states} | {self.pairs} | {self.seconds:.3f} |"
        )


MODEL_HEADER = (
    "| model | ops / coarse ops / tensors | capacity x least (bytes) | stream | lru | belady "
    "| dp | stream / lru / belady over dp | states | (S, T) pairs | DP s |\n"
    "|---|---|---|---|---|---|---|---|---|---|---|"
)


def model_rows(name: str, dag: Dag, factors: Sequence[float], max_states: int) -> list[ModelRow]:
    """ROC's model on the step's finest coarsening (`coarsenings`) the DP solves within
    `max_states` at every factor."""
    for coarse in coarsenings(dag):
        graph = coarse.graph
        try:
            rows = [model_row(name, len(dag.ops), graph, factor, max_states) for factor in factors]
        except StateSpaceTooLarge:
            continue
        return rows
    raise StateSpaceTooLarge(max_states + 1, max_states, "even with the step as one op")


def model_row(
    name: str, fine_ops: int, graph: CoarseGraph, factor: float, max_states: int
) -> ModelRow:
    """The baselines and the DP at `factor` times the least capacity of `graph`."""
    capacity = int(least_capacity(graph) * factor)
    own = tuple(range(graph.num_ops))
    loaded: dict[str, int | None] = {p: cache_loads(graph, own, capacity, p) for p in POLICIES}
    solution = solve(graph, capacity, max_states)
    loaded["dp"] = solution.loaded
    return ModelRow(
        name,
        fine_ops,
        graph.num_ops,
        len(graph.sizes),
        factor,
        capacity,
        loaded,
        solution.execution_states,
        solution.pairs,
        solution.seconds,
    )


@dataclass(frozen=True)
class PlacedRow:
    """One row of the placed-program table."""

    model: str
    fraction: float
    capacity: int
    moved: dict[str, int | None]
    order_from: str
    seconds: dict[str, float]
    planner_seconds: float

    def markdown(self) -> str:
        moved = " | ".join(
            "-" if self.moved[p] is None else str(self.moved[p])
            for p in ("lru", "belady", "dp-fixed-order", "dp")
        )
        return (
            f"| {self.model} | {self.fraction:g} ({self.capacity}) | {moved} | {self.order_from} "
            f"| {self.seconds['belady'] * 1e3:.3f} | {self.seconds['dp'] * 1e3:.3f} "
            f"| {self.planner_seconds:.2f} |"
        )


PLACED_HEADER = (
    f"| model | capacity x peak (bytes) | lru | belady | dp-fixed-order | dp | dp's order "
    f"| belady ms (simulated, {MACHINE}) | dp ms (simulated) | dp planner s |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)


def placed_rows(
    name: str,
    dag: Dag,
    signature: TrainingSignature,
    peak: int,
    fractions: Sequence[float],
    max_states: int,
) -> list[PlacedRow]:
    """The placed programs' bytes at each fraction of the peak (rows where the step's
    largest op does not fit are left out)."""
    preset = machine(MACHINE)
    rows = []
    for fraction in fractions:
        capacity = int(peak * fraction)
        moved: dict[str, int | None] = {}
        try:
            start = time.perf_counter()
            found = roc_plan(dag, signature, capacity, max_states=max_states)
            spent = time.perf_counter() - start
        except CapacityTooSmall:
            continue
        moved["dp"] = transferred_bytes(found.plan)
        moved["dp-fixed-order"] = plan_dp(dag, signature, capacity).transferred_bytes
        problem = PlacementProblem.of(dag, signature, capacity, preset)
        plans = {
            p: plan_swaps(dag, signature, SwapSettings(capacity, p)) for p in ("lru", "belady")
        }
        moved.update({policy: transferred_bytes(plan) for policy, plan in plans.items()})
        seconds = {
            "belady": problem.simulate(plans["belady"]).seconds,
            "dp": problem.simulate(found.plan).seconds,
        }
        rows.append(PlacedRow(name, fraction, capacity, moved, found.order_from, seconds, spent))
    return rows


# ------------------------------------------------------------------ partitioning

SIM_MACHINE = "p100-cluster"
"""ROC's cluster (thesis §4.7.1): 4 nodes of 4 P100s, NVLink within, EDR InfiniBand across."""
SIM_SCALES = {"pubmed": 1.0, "ppi": 0.25, "reddit": 0.02, "amazon": 0.02}
MEASURED_SCALES = {"pubmed": 0.25, "ppi": 0.05, "reddit": 0.002, "amazon": 0.002}
QUICK_SCALES = {"pubmed": 0.02, "ppi": 0.002, "reddit": 0.0002, "amazon": 0.0002}
MEASURE_REPEATS = 20
"""Runs of each measured partition layer (the least is kept: 2 cores shared by others)."""
FINAL_ROUNDS = 3
"""Rounds of the final measurement of every method's partition, the least kept."""
METHODS = ("equal-vertex", "equal-edge", "metis", "roc")


@functools.lru_cache(maxsize=2)
def cached_stand_in(dataset: str, scale: float, numbering: str = "random") -> Csr:
    """The stand-in, built once for every device count (Reddit's takes ~20 s here).
    `numbering="degree"` renumbers its vertices by descending degree (ties by
    number), the extreme of a crawl order that clusters hubs: a sensitivity check of
    how much the vertex order matters, not one of ROC's datasets."""
    graph = stand_in(dataset, scale=scale)
    if numbering == "random":
        return graph
    rank = np.empty(graph.vertices, dtype=np.int64)
    rank[np.argsort(-graph.degrees(), kind="stable")] = np.arange(graph.vertices)
    return from_edges(rank[graph.indices], rank[graph.targets()], graph.vertices)


def gcn_layers(dataset: str, hidden: int) -> tuple[tuple[int, int], ...]:
    """A 2-layer GCN's (d_in, d_out) on `dataset`: features -> hidden -> classes."""
    stats = DATASETS[dataset]
    return ((stats.features, hidden), (hidden, stats.labels))


def halo_seconds(
    request: PartitionRequest, partition: VertexPartition, preset: Machine
) -> np.ndarray:
    """(layers, parts): each device's receipt, per layer, of the `d_in` activations of
    its remote in-neighbours, one transfer per sending device, serialised."""
    graph = request.graph
    owner = partition.owner()
    receiver = owner[graph.targets()]
    sender = owner[graph.indices]
    remote = receiver != sender
    # each (receiver, source vertex) pair once: a row is sent once however many use it
    pairs = np.unique(receiver[remote].astype(np.int64) * graph.vertices + graph.indices[remote])
    to, source = np.divmod(pairs, graph.vertices)
    rows = np.zeros((partition.parts, partition.parts), dtype=np.int64)
    np.add.at(rows, (to, owner[source]), 1)
    seconds = np.zeros((len(request.layers), partition.parts))
    for layer, (d_in, _) in enumerate(request.layers):
        for d in range(partition.parts):
            seconds[layer, d] = sum(
                preset.transfer_time(int(rows[d, s]) * d_in * 4, s, d)
                for s in range(partition.parts)
                if rows[d, s]
            )
    return seconds


@dataclass(frozen=True)
class PartitionRow:
    """One (dataset, devices, where) row: each method's epoch seconds (and with halo
    for simulated rows), ROC's learning history."""

    dataset: str
    scale: float
    vertices: int
    edges: int
    devices: int
    where: str
    epochs: dict[str, float]
    with_halo: dict[str, float] | None
    roc_history: tuple[float, ...]
    seconds: float

    def gains(self) -> tuple[float, float]:
        """ROC's speedup over the best baseline and over equal-vertex."""
        baselines = [self.epochs[m] for m in METHODS if m != "roc"]
        return min(baselines) / self.epochs["roc"], self.epochs["equal-vertex"] / self.epochs["roc"]

    def markdown(self) -> str:
        unit = 1e3 if self.where == "measured" else 1e6
        cells = " | ".join(f"{self.epochs[m] * unit:.1f}" for m in METHODS)
        halo = (
            " / ".join(f"{self.with_halo[m] * unit:.0f}" for m in METHODS)
            if self.with_halo
            else "-"
        )
        best, equal = self.gains()
        history = ", ".join(f"{t * unit:.1f}" for t in self.roc_history)
        return (
            f"| {self.dataset} ({self.scale:g}: {self.vertices:,} V, {self.edges:,} E) "
            f"| {self.devices} | {cells} | {best:.2f}x | {equal:.2f}x | {halo} | {history} "
            f"| {self.seconds:.0f} |"
        )


def partition_header(where: str) -> str:
    unit = "ms" if where == "measured" else "us"
    label = f"simulated on {SIM_MACHINE}" if where == "simulated" else "measured here"
    return (
        f"| dataset (scale: vertices, edges) | devices | equal-vertex {unit} ({label}) "
        f"| equal-edge {unit} | metis {unit} | roc {unit} | roc vs best baseline "
        f"| roc vs equal-vertex | + halo: ev / ee / metis / roc {unit} "
        f"| roc's iterations {unit} | wall s |\n" + "|---" * 11 + "|"
    )


def partition_row(
    dataset: str,
    scale: float,
    devices: int,
    where: str,
    hidden: int,
    iterations: int,
    numbering: str = "random",
) -> PartitionRow:
    """Every method on one stand-in at one device count."""
    start = time.perf_counter()
    graph = cached_stand_in(dataset, scale, numbering)
    spec = SIM_MACHINE if where == "simulated" else "cpu"
    request = PartitionRequest(graph, devices, gcn_layers(dataset, hidden), machine=spec)
    measure = functools.partial(machine_measure, repeats=MEASURE_REPEATS)
    learned = roc_partition(request, iterations=iterations, measure=measure)
    partitions = {m: PARTITIONERS[m](request) for m in METHODS if m != "roc"}
    partitions["roc"] = learned.partition
    times = {m: measure(request, p) for m, p in partitions.items()}
    for _ in range(FINAL_ROUNDS - 1 if where == "measured" else 0):
        # the least of rounds apart: a stall of the shared cores hits one round
        times = {m: np.minimum(t, measure(request, partitions[m])) for m, t in times.items()}
    epochs = {m: epoch_seconds(t) for m, t in times.items()}
    with_halo = None
    if where == "simulated":
        preset = machine(SIM_MACHINE)
        with_halo = {
            m: epoch_seconds(times[m] + halo_seconds(request, p, preset))
            for m, p in partitions.items()
        }
    return PartitionRow(
        dataset,
        scale,
        graph.vertices,
        graph.edges,
        devices,
        where,
        epochs,
        with_halo,
        tuple(step.epoch for step in learned.history),
        time.perf_counter() - start,
    )


def partitioning_main(argv: Sequence[str]) -> list[PartitionRow]:
    """The partitioning tables (see the module docstring)."""
    parser = argparse.ArgumentParser(description="ROC's graph partitioner (Fig. 4.8)")
    parser.add_argument("--where", default="simulated,measured")
    parser.add_argument("--devices", default="4,8,16")
    parser.add_argument("--datasets", default=",".join(SIM_SCALES))
    parser.add_argument("--hidden", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=4)
    parser.add_argument("--quick", action="store_true", help="tiny stand-ins (smoke test)")
    parser.add_argument(
        "--numbering",
        choices=("random", "degree"),
        default="random",
        help="the stand-ins' own vertex order, or renumbered by descending degree",
    )
    args = parser.parse_args(argv)
    print(f"# {os.cpu_count()} cores, load average before {os.getloadavg()[0]:.2f}")
    rows = []
    for where in args.where.split(","):
        scales = (
            QUICK_SCALES if args.quick else SIM_SCALES if where == "simulated" else MEASURED_SCALES
        )
        print(f"\n{where}\n\n{partition_header(where)}")
        for dataset in args.datasets.split(","):
            for devices in (int(d) for d in args.devices.split(",")):
                row = partition_row(
                    dataset,
                    scales[dataset],
                    devices,
                    where,
                    args.hidden,
                    args.iterations,
                    args.numbering,
                )
                print(row.markdown(), flush=True)
                rows.append(row)
    print(f"\n# load average after {os.getloadavg()[0]:.2f}")
    return rows


def main(
    argv: Sequence[str] | None = None,
) -> tuple[list[ModelRow], list[PlacedRow]] | list[PartitionRow]:
    argv = sys.argv[1:] if argv is None else list(argv)
    if "--partitioning" in argv:
        return partitioning_main([a for a in argv if a != "--partitioning"])
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--factors", default="1,1.25,1.5", help="x the least capacity")
    parser.add_argument("--fractions", default="0.9,0.75", help="x the step's peak")
    parser.add_argument("--max-states", type=int, default=DEFAULT_MAX_STATES)
    parser.add_argument("--quick", action="store_true", help="tiny shapes (smoke test)")
    args = parser.parse_args(argv)
    factors = [float(f) for f in args.factors.split(",")]
    fractions = [float(f) for f in args.fractions.split(",")]
    print(f"# {os.cpu_count()} cores, load average before {os.getloadavg()[0]:.2f}")
    modelled, placed = [], []
    for name in args.models.split(","):
        dag, signature, peak = training_step(MODELS[name](args.quick))
        modelled += model_rows(name, dag, factors, args.max_states)
        placed += placed_rows(name, dag, signature, peak, fractions, args.max_states)
    print("\nROC's model: bytes loaded to the device (not simulated: counted)\n")
    print(MODEL_HEADER)
    for row in modelled:
        print(row.markdown())
    print(f"\nThe placed program: bytes swapped out and in; times simulated on {MACHINE}\n")
    print(PLACED_HEADER)
    for row in placed:
        print(row.markdown())
    print(f"\n# load average after {os.getloadavg()[0]:.2f}")
    return modelled, placed


if __name__ == "__main__":
    main()
