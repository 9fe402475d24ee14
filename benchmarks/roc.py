"""ROC's memory manager (issue 33, item 5): bytes moved between host and device by the
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
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.ir import dag as dag_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag
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

MACHINE = "v100-swapadvisor"
POLICIES = ("stream", "lru", "belady")


def gcn(quick: bool = False, layers: int = 2) -> ModuleOp:
    """GCN layers H' = relu(A H W) on a dense adjacency (the last without relu; the
    thesis' GCN has 2): Reddit's shape scaled to 256 vertices and 256 features (64 and
    32 when `quick`)."""
    vertices, features = (64, 32) if quick else (256, 256)
    g = GraphBuilder()
    adjacency = g.input("adjacency", (vertices, vertices))
    h = g.input("features", (vertices, features))
    widths = [features] * layers + [16]
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


def main(argv: Sequence[str] | None = None) -> tuple[list[ModelRow], list[PlacedRow]]:
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
