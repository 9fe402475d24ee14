"""soap-shard at the papers' own shapes (issue 30, item 5): FlexFlow's six DNNs on its
two clusters, TensorOpt's Table 4 models on its V100 cluster. One command per paper:

    .venv/bin/python benchmarks/papers_shapes.py flexflow [--models alexnet,...] \
        [--machines p100-cluster:4,8,16 k80-cluster:4,16,64,4x16] [--budget 50] \
        [--proposals 10] [--search mcmc|auto]
    .venv/bin/python benchmarks/papers_shapes.py tensoropt [--models vgg16,...] [--budget 50]

Every time below is *simulated* on the named preset (`tasoc/cost/machines.py`, GPU
kernels at the cited per-class fraction of peak, `tasoc/cost/devices.py`); only the
search's own seconds are wall time on this machine. `benchmarks/soap.py` keeps its
shrunk-shape tables (global batch 64, RNNs unrolled 4 steps); here the shapes are the
papers':

* **FlexFlow** (Jia thesis §3.7.1): AlexNet at 256 samples per GPU, Inception-v3,
  ResNet-101, RNNTC, RNNLM and NMT at 64 per GPU, the RNNs unrolled 40 steps (the zoo's
  defaults are the thesis' layer counts and widths), so the global batch grows with
  the devices; on `p100-cluster` (4-16 GPUs) and `k80-cluster` (4-64 GPUs). A count is
  the pass's `mesh=N`, one axis of N devices; `AxB` (`k80-cluster:4x16`) plans the same
  A*B devices on a mesh of two axes, where an op may split one dim over B devices and
  another over A (a 16-device plan on each of 4 groups, data parallel across them),
  which one axis of 64 cannot express (docs/benchmarks.md, "The RNNs on 32 and 64
  K80s, traced").
* **TensorOpt** (its §5.3, Table 4): VGG16, WideResNet and Transformer-S on 16 GPUs of
  `v100-tensoropt`, at Table 1's global batch of 256. Transformer-S is Table 1's
  Transformer with 6 layers instead of 13: "4.8GB parameter" against Table 1's 9.7 GB
  (the layer count is inferred from the parameter size; the paper gives no other).

Each row: the training step (`train=sgd`, the model's own loss) sharded by
`soap-shard{search=S budget=B seed=0}` (`--search`: `mcmc`, or `auto`, the pass's
default: the ILP's plan, then MCMC from it and the baselines) with a timeout far above
what the budget needs, so the search stops on its budget, not on the clock (a row
that stopped on the clock says so);
the data-parallel plan's compute and collective seconds on its critical device (the
device whose last task ends the step: the sum of its compute tasks against the sum of
its collective tasks, from the simulated task graph); every strategy in the report
(the plan and each baseline the pass compares, read from the report, so baselines
added to the pass appear here unchanged) with its simulated time or "infeasible" (over
the device's memory); the speedup over the best feasible baseline; proposals, how
the search stopped, its seconds and acceptance rate.

For FlexFlow a second table sets each row beside the thesis (`FLEXFLOW_REPORTED`): the
best feasible baseline and its time, the plan's time and which search found it (the
start it came from, as it was or moved by MCMC's chain), the speedup over the best
feasible baseline, the speedup over the best feasible of FlexFlow's own baselines
(data parallel and its expert-designed strategy, `FLEXFLOW_BASELINES`), what the
thesis reports for the model, and a verdict: met where the latter speedup is at or
above the low end of the thesis' figure. An infeasible baseline is never a
denominator (the report's `speedup_over` is None for it). The delta table replays
`--proposals` proposals of a chain from data parallel (`benchmarks/soap.py`'s
`delta_row`): the delta update against simulating the already built graph.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from soap import DeltaRow, delta_row, delta_table, sharded
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.limits import TENSOR_BYTES_ENV
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.soap import SoapShardFailed
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem, complete
from tasoc.passes.soap.simulated import SimulatedStrategy
from tasoc.passes.soap.strategies import STRATEGIES

TENSOR_LIMIT = 64 * 2**30
"""`TASOC_MAX_TENSOR_BYTES` for these builds unless set: at 64 GPUs x 64 samples one
of Inception-v3's or ResNet-101's global activations is 21 GiB, over the 16 GiB
default. Nothing is allocated: the simulator prices each device's shard."""
os.environ.setdefault(TENSOR_BYTES_ENV, str(TENSOR_LIMIT))

TRAIN = "&train=sgd&lr=0.01"
SEED = 0
BUDGET = 50
PROPOSALS = 10
SAFETY_TIMEOUT = 3600.0
"""The pass's timeout: far above what `--budget` proposals take, so a search stops on
its budget; one that stops on this clock is reported as such, its goal not met."""


@dataclass(frozen=True)
class Workload:
    """A paper's model: the zoo spec at one device count and what the paper reports."""

    name: str
    spec: str
    """Zoo spec without the batch; `batch` is added per device count."""
    per_device: int | None
    """Samples per device (the global batch grows with the mesh); None: `batch` fixed."""
    batch: int = 0
    """The global batch where `per_device` is None."""
    paper: str = ""
    """What the paper reports for this model, for the results page."""

    def spec_at(self, devices: int) -> str:
        batch = self.batch if self.per_device is None else self.per_device * devices
        return f"{self.spec}{'&' if '?' in self.spec else '?'}batch={batch}"


FLEXFLOW: dict[str, Workload] = {
    "alexnet": Workload("alexnet", "alexnet", 256),
    "inception_v3": Workload("inception_v3", "inception_v3", 64),
    "resnet101": Workload("resnet101", "resnet101", 64),
    "rnntc": Workload("rnntc", "rnntc?seq=40", 64),
    "rnnlm": Workload("rnnlm", "rnnlm?seq=40", 64),
    "nmt": Workload("nmt", "nmt?seq=40", 64),
}
"""Jia thesis §3.7.1: 64 samples per GPU, AlexNet 256; RNNs unrolled 40 steps."""

FLEXFLOW_MACHINES = {"p100-cluster": (4, 8, 16), "k80-cluster": (4, 16, 64)}


@dataclass(frozen=True)
class Reported:
    """A speedup a paper reports for a model over its baselines, as a range."""

    low: float
    high: float
    source: str
    """Where the paper says it, short enough for a table cell."""

    def text(self) -> str:
        figure = f"{self.low:g}x" if self.low == self.high else f"{self.low:g}-{self.high:g}x"
        return f"{figure} ({self.source})"


FLEXFLOW_BASELINES = ("data-parallel", "expert")
"""The thesis' baselines (§3.7.2): data parallelism and the expert-designed strategies
(OWT for CNNs, layer-wise model parallelism within a node for RNNs), which the pass
names alike (docs/soap-shard.md, "Baselines")."""

FLEXFLOW_RANGE = Reported(1.3, 3.3, "Fig. 3.6 p. 45, §3.7.2's range for 5 DNNs")
"""§3.7.2: "For other DNN benchmarks [than ResNet-101], FlexFlow ... achieves 1.3-3.3x
speedup" over the better of its baselines: one range for AlexNet, Inception-v3, RNNTC,
RNNLM and NMT at every GPU count; each count's own figure is a bar of Fig. 3.6 (p. 45),
which the seed's text does not carry, so the range's low end is the bar a row meets."""

FLEXFLOW_REPORTED: dict[str, Reported] = {
    "alexnet": FLEXFLOW_RANGE,
    "inception_v3": FLEXFLOW_RANGE,
    "resnet101": Reported(1.0, 1.0, "Fig. 3.6 p. 45: 'similar to data parallelism'"),
    "rnntc": FLEXFLOW_RANGE,
    "rnnlm": FLEXFLOW_RANGE,
    "nmt": FLEXFLOW_RANGE,
}
"""What the Jia thesis reports per model (§3.7.2, Fig. 3.6) over `FLEXFLOW_BASELINES`."""

FLEXFLOW_REPORTED_AT: dict[tuple[str, str, int], Reported] = {
    ("nmt", "k80-cluster", 64): Reported(1.7, 2.4, "Fig. 3.7a p. 46"),
}
"""Where the thesis gives a figure for one model, cluster and GPU count: Fig. 3.7's
caption, NMT on 64 K80s, "reduces per-iteration execution time by 1.7-2.4x ...
compared to other approaches"."""


def flexflow_reported(model: str, preset: str, devices: int) -> Reported:
    """What the thesis reports for `model` on `devices` GPUs of `preset`."""
    return FLEXFLOW_REPORTED_AT.get((model, preset, devices), FLEXFLOW_REPORTED[model])


TENSOROPT: dict[str, Workload] = {
    "vgg16": Workload("vgg16", "vgg16", None, 256, "0.10 s mini-time, 0.16 s data parallel"),
    "wresnet": Workload(
        "wresnet", "wresnet?depth=101&widen=9&width=1.016", None, 256, "1.99 s vs 2.89 s"
    ),
    "transformer_s": Workload(
        "transformer_s",
        "transformer?layers=6&hidden=4096&seq=64",
        None,
        256,
        "1.16 s vs 1.18 s",
    ),
}
"""TensorOpt's Table 4 models at Table 1's shapes (`benchmarks/frontier.py`'s specs);
Transformer-S with 6 of the 13 layers (4.8 of 9.7 GB of parameters)."""

TENSOROPT_MACHINES = {"v100-tensoropt": (16,)}


@dataclass
class Row:
    model: str
    machine: str
    devices: int
    batch: int
    ops: int
    compute_s: float
    """The data-parallel plan's compute busy seconds on its critical device."""
    collective_s: float
    """... and its collective seconds there."""
    section: dict[str, Any]
    """soap-shard's report section (empty where the pass failed)."""
    failed: str = ""
    """Why soap-shard found no plan (e.g. none fits the device's memory)."""
    mesh: str = ""
    """The pass's `mesh` where it has two axes or more (`4x16`); empty: one axis of
    `devices`."""

    @property
    def gpus(self) -> str:
        """The GPUs column: the count, and the mesh's shape where it has two axes."""
        return f"{self.devices} ({self.mesh})" if self.mesh else str(self.devices)


def rows_by_model[R](
    models: str, make: Callable[[str], R], table: Callable[[Sequence[R]], str]
) -> list[R]:
    """One row per model of `models` (comma-separated), each row's table line on stderr
    as it is made (a long run shows its progress), the load before and after; the whole
    table on stdout."""
    print(f"load before: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    rows: list[R] = []
    for name in models.split(","):
        rows.append(make(name))
        print(table(rows[-1:]).splitlines()[-1], file=sys.stderr, flush=True)
    print(f"load after: {os.getloadavg()[0]:.2f}", file=sys.stderr)
    print(table(rows))
    return rows


def global_batch(spec: str) -> int:
    return int(spec.rsplit("batch=", 1)[1])


def data_parallel_split(step: ModuleOp, preset: str, mesh: str) -> tuple[float, float]:
    """(compute, collective) seconds of the data-parallel plan on `mesh` (`64`, `4x16`)
    on its critical device: the device whose compute or collective task ends last, from
    the simulated graph."""
    dag = dag_module.from_module(step)
    problem = Problem(dag, parse_mesh(mesh), training_signature(entry_function(step)), {})
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    state = SimulatedStrategy.of(problem, plan, machine(preset), None, memory=False)
    graph, timeline = state.step.graph, state.simulator.timeline
    busy: dict[tuple[str, int], float] = {}
    last: dict[int, float] = {}
    for task_id in graph.ids():
        resource = graph[task_id].resource
        if isinstance(resource, tuple) and resource[0] in ("device", "net"):
            busy[resource] = busy.get(resource, 0.0) + graph[task_id].duration
            last[resource[1]] = max(last.get(resource[1], 0.0), timeline.end[task_id])
    critical = max(sorted(last), key=last.__getitem__)
    return busy.get(("device", critical), 0.0), busy.get(("net", critical), 0.0)


def run_row(
    work: Workload, preset: str, mesh: str, budget: int, search: str = "mcmc"
) -> tuple[Row, ModuleOp]:
    """The row of `work` on `mesh` (`64`, or `4x16` for two axes) of `preset`."""
    devices = parse_mesh(mesh).size
    spec = work.spec_at(devices)
    step = build_zoo_model(spec + TRAIN)
    compute, collective = data_parallel_split(step, preset, mesh)
    ops = len(dag_module.from_module(step).ops)
    shape = mesh if "x" in mesh else ""
    batch = global_batch(spec)
    row = Row(work.name, preset, devices, batch, ops, compute, collective, {}, mesh=shape)
    try:
        _, row.section = sharded(
            step,
            mesh=mesh,
            machine=preset,
            search=search,
            budget=budget,
            timeout=SAFETY_TIMEOUT,
            seed=SEED,
        )
    except SoapShardFailed as err:
        row.failed = str(err)
    return row, step


def _ms(seconds: float | None) -> str:
    return "infeasible" if seconds is None else f"{seconds * 1e3:.1f}"


def _strategies(section: dict[str, Any]) -> str:
    """Each strategy of the report, its simulated ms or infeasible."""
    times = section["predicted_seconds"]
    return "; ".join(f"{name} {_ms(times[name])}" for name in times)


HEADER = (
    "| model | machine | GPUs | global batch | ops | DP compute ms | DP collective ms "
    "| compute/comm | strategies, simulated ms | best feasible baseline | speedup "
    "| proposals | stopped | search s | acceptance |\n"
    "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: "
    "| --- | ---: | ---: |"
)


def table_row(r: Row) -> str:
    """One line of the search table; search statistics only where there were proposals."""
    s = r.section
    ratio = r.compute_s / r.collective_s if r.collective_s > 0 else float("inf")
    head = (
        f"| {r.model} | {r.machine} | {r.gpus} | {r.batch} | {r.ops} "
        f"| {r.compute_s * 1e3:.1f} | {r.collective_s * 1e3:.1f} | {ratio:.2f} "
    )
    if r.failed:
        return head + f"| {r.failed} | none | - | - | failed | - | - |"
    proposals = s.get("proposals", 0)
    statistics = f"{s['seconds']:.1f} | {s['acceptance_rate']:.2f}" if proposals > 0 else "- | -"
    return (
        head + f"| {_strategies(s)} | {s['best_feasible_baseline'] or 'none'} "
        f"| {_times(s['speedup_over_best_feasible'])} "
        f"| {proposals} | {s['stopped']} | {statistics} |"
    )


def found_by(section: dict[str, Any]) -> str:
    """Which search wrote the plan: the start its best came from (a baseline, Spartan's
    tiling `greedy`, the ILP's plan `ilp`, ...), "as it was" where no chain improved on
    it, "MCMC from" it where its chain did; a search without chains is itself."""
    origin = section.get("found_by")
    if origin is None:
        return section["search"]
    chain = section["chains"][origin]
    how = f"MCMC from {origin}" if chain["best"] < chain["start"] else f"{origin} as it was"
    return f"{section['search']}: {how}"


def speedup_over(section: dict[str, Any], names: Sequence[str]) -> float | None:
    """The plan's speedup over the fastest feasible baseline of `names` (None where none
    applies and fits: an infeasible baseline is never a denominator)."""
    ratios = section["speedup_over"]
    return min((ratios[n] for n in names if ratios.get(n) is not None), default=None)


def verdict(row: Row) -> str:
    """Met where the plan's speedup over FlexFlow's own baselines is at or above the low
    end of what the thesis reports for the row, else missed, with both figures."""
    if row.failed:
        return "missed: no plan fits"
    over = speedup_over(row.section, FLEXFLOW_BASELINES)
    if over is None:
        return "-: none of FlexFlow's baselines fits"
    low = flexflow_reported(row.model, row.machine, row.devices).low
    return "met" if over >= low * (1 - 1e-9) else f"missed: {over:.2f}x < {low:g}x"


BESIDE_HEADER = (
    "| model | machine | GPUs | best feasible baseline, simulated ms | plan, simulated ms "
    "| found by | speedup | over DP / expert | DP step / its compute "
    "| FlexFlow reports (Jia thesis) | best of FlexFlow's kind | verdict |\n"
    "| --- | --- | ---: | --- | ---: | --- | ---: | ---: | ---: | --- | --- | --- |"
)
"""*DP step / its compute*: data parallel's simulated step over its compute on its
critical device, what a plan with data parallel's compute per device could gain over
it at most by hiding or saving all communication (1.00: none exposed)."""


def beside_row(r: Row) -> str:
    """One line of the table against the thesis: the plan against the best feasible
    baseline and against FlexFlow's own baselines, what the thesis reports, the verdict."""
    reported = flexflow_reported(r.model, r.machine, r.devices).text()
    head = f"| {r.model} | {r.machine} | {r.gpus} "
    if r.failed:
        return head + f"| - | no plan fits | - | - | - | - | {reported} | - | {verdict(r)} |"
    s = r.section
    best, times = s["best_feasible_baseline"], s["predicted_seconds"]
    baseline = "none fits" if best is None else f"{best} {_ms(times[best])}"
    speedup, over = s["speedup_over_best_feasible"], speedup_over(s, FLEXFLOW_BASELINES)
    exposed = s["simulated_seconds"]["data-parallel"] / r.compute_s if r.compute_s > 0 else None
    return head + (
        f"| {baseline} | {_ms(times['plan'])} | {found_by(s)} | {_times(speedup)} "
        f"| {_times(over)} | {_times(exposed)} | {reported} "
        f"| {'yes' if best in FLEXFLOW_BASELINES else 'no'} | {verdict(r)} |"
    )


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def parse_machines(values: Sequence[str], default: dict[str, tuple[int, ...]]) -> dict:
    """`PRESET:4,8,16,4x16` arguments (default: the paper's clusters and counts), each
    preset's meshes as the pass's `mesh` option takes them (a count: one axis; `AxB`:
    two); ValueError for a mesh the pass refuses."""
    if not values:
        return {preset: tuple(map(str, counts)) for preset, counts in default.items()}
    chosen = {}
    for value in values:
        preset, _, meshes = value.partition(":")
        chosen[preset] = tuple(meshes.split(",")) if meshes else ("16",)
        for mesh in chosen[preset]:
            parse_mesh(mesh)
    return chosen


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("paper", choices=("flexflow", "tensoropt"))
    parser.add_argument("--models", default="", help="comma-separated (default: all)")
    parser.add_argument("--machines", nargs="*", default=[], help="PRESET:4,8,16,4x16 ...")
    parser.add_argument("--budget", type=int, default=BUDGET, help="mcmc proposals")
    parser.add_argument("--search", choices=("mcmc", "auto"), default="mcmc")
    parser.add_argument("--proposals", type=int, default=PROPOSALS, help="delta table")
    parser.add_argument("--skip", default="", help="tables to skip: search,delta")
    args = parser.parse_args(argv)
    workloads = FLEXFLOW if args.paper == "flexflow" else TENSOROPT
    names = [m for m in args.models.split(",") if m] or list(workloads)
    unknown = [m for m in names if m not in workloads]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; known: {', '.join(workloads)}")
    args.workloads = [workloads[m] for m in names]
    defaults = FLEXFLOW_MACHINES if args.paper == "flexflow" else TENSOROPT_MACHINES
    try:
        args.machines = parse_machines(args.machines, defaults)
    except ValueError:
        parser.error(f"--machines takes PRESET:4,8,16,4x16, got {args.machines!r}")
    args.skip = set(args.skip.split(",")) - {""}
    return args


def main(argv: Sequence[str] | None = None) -> tuple[list[Row], list[DeltaRow]]:
    args = parse_args(argv)
    print(f"# {datetime.date.today()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}")
    print(f"# {args.paper}: every ms simulated on the named preset; search s is wall time\n")
    rows: list[Row] = []
    deltas: list[DeltaRow] = []
    if "search" not in args.skip:
        print(f"{args.search} (budget={args.budget} seed={SEED}), simulated:", flush=True)
        print(HEADER, flush=True)
    for work in args.workloads:
        for preset, meshes in args.machines.items():
            largest = max(meshes, key=lambda mesh: parse_mesh(mesh).size)  # the delta's
            for mesh in meshes:
                devices = parse_mesh(mesh).size
                if "search" in args.skip:
                    step = build_zoo_model(work.spec_at(devices) + TRAIN)
                else:
                    row, step = run_row(work, preset, mesh, args.budget, args.search)
                    rows.append(row)
                    print(table_row(row), flush=True)
                if "delta" not in args.skip and mesh == largest:
                    deltas.append(delta_row(work.name, step, preset, devices, args.proposals))
    if rows and args.paper == "flexflow":
        print(f"\nBeside the Jia thesis (§3.7.2), simulated:\n{BESIDE_HEADER}")
        print("\n".join(beside_row(row) for row in rows))
    if deltas:
        print(f"\nDelta vs full simulation, {args.proposals} proposals from data parallel:")
        print(delta_table(deltas))
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return rows, deltas


if __name__ == "__main__":
    main()
