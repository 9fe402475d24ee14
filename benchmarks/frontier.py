"""soap-shard's searches on TensorOpt's cost graph (`search=ft|greedy|ilp`): Frontier
Tracking on TensorOpt's models, the cost-graph searches beside MCMC on FlexFlow's,
Spartan's greedy tiling against the exact least bytes, and exact FT against brute force.

    .venv/bin/python benchmarks/frontier.py [--models rnn,wresnet,transformer,vgg16] \
        [--flexflow alexnet,...] [--machine k80-cluster] [--devices 16] [--budget 500] \
        [--timeout 30] [--ilp-timeout 60] [--ft-timeout 48] [--graphs 200] \
        [--heuristic weighted] [--max-points N] [--skip tensoropt,flexflow,greedy,exact] \
        [--quick]

Every iteration time and peak memory below is *simulated* on the named preset
(`tasoc/cost/machines.py`) or *estimated* by the cost graph's sums (TensorOpt's eq. 3,
`tasoc/passes/soap/costs.py`); none was measured on a GPU. The seconds of the searches
themselves (FT, ILP, greedy, MCMC, the cost graph's build) are wall time on this machine.

FT runs two ways in tables 1 and 2, each reported: **local**, `frontier.track` with the
local heuristic alone (`heuristic=weighted` by default: TensorOpt's algorithm, its
heuristic's score counting the neighbours' frontiers since issue 31), and
**anchored**, as `search=ft` runs it (`search_ft`'s steps, under
limits whose deadline is `--ft-timeout` s, by default the pass's default timeout
times its search share, 48 s): `cost_searches.ft_anchors` (each distinct baseline
that applies, `searches.baseline_plans`, where the cost graph expresses it, Spartan's
greedy tiling, and the ILP's fastest strategy solved within `ANCHOR_SHARE` of the
deadline), then
`frontier.track(anchors=...)` with `FT_SHARE` of the time left: one more run per anchor,
its heuristic eliminations following the anchor, the frontiers united. The anchored
seconds include computing the anchors (the ILP solve among them), not the cost graph's
build; its eliminations are summed over its runs (those before the first heuristic
elimination, which the runs share, once). Because one of its runs follows the
ILP's optimum, the anchored fastest point is at least as fast as the ILP's estimate
whenever that anchor was solved: its distance from the ILP measures the anchor, not FT.

1. **TensorOpt's models** (`TENSOROPT_MODELS`: Table 1's shapes) as training steps
   (`autodiff{loss=<the model's training loss> optimizer=sgd lr=0.01}`) on
   `v100-tensoropt` (16 V100 16 GB), a 16-device mesh. Three tables, two rows (local,
   anchored) per model in (a) and (b): (a) the search: the step's ops, the cost graph's
   nodes, edges and build seconds, FT's seconds (anchored: with the anchors' seconds
   and names), runs, frontier points, heuristic and all eliminations, exact or not, and
   the goal: FT's seconds at most a tenth of TensorOpt's FT-LDP (its Table 3: 1,292 s
   WideResNet, 0.28 s RNN, 201 s Transformer; none for VGG16); (b) each frontier's
   least-memory and fastest points (estimates), the fastest point completed and
   re-simulated against data parallel simulated (the speedup; TensorOpt's Table 4
   gives mini-time against data parallel in TensorFlow on its cluster: VGG16 0.10 vs
   0.16 s, WideResNet 1.99 vs 2.89 s, no row of these shapes for RNN and Transformer),
   and `objective=mini-time` under the V100's 16 GB as the pass runs it (`search_ft`,
   anchored, under the same deadline: the fastest point whose estimate fits, walked
   down while its simulated peak does not); (c) the distance of each FT's fastest point
   from the ILP's least time (`ilp.solve` without a cap, `--ilp-timeout` seconds; its
   status and gap), both estimates, and the ILP's strategy re-simulated.
2. **FlexFlow's models** (`SEARCH_MODELS` of `benchmarks/soap.py`: the zoo's shapes,
   CNN batches of 64, RNNs unrolled 4 steps) on `--devices` devices of `--machine`:
   for mcmc (`--budget` proposals, `--timeout` s, seed 0, from the baselines that apply
   and the greedy tiling as the pass starts it), ft-local and ft-anchored (each
   frontier's fastest point; points, heuristic eliminations, runs and exactness in the
   note), greedy, ilp (`--ilp-timeout`), each baseline: the strategy's
   simulated time and per-device peak memory, its estimate and the estimate's distance
   from the ILP's, and the search's own seconds (FT's tracking, with the anchors for
   ft-anchored, the tiling, the ILP solve, MCMC's whole search; not the cost graph's
   build, given once per model, nor the re-simulation of the chosen strategy).
3. **Spartan's greedy against the exact least bytes**: `--graphs` random cost graphs
   drawn by a seeded numpy generator (`random_graph`: up to 8 nodes of up to 4
   options, a random tree plus up to 4 more edges, bytes 1-9 per option pair, some
   pairs impossible) and the cost graphs of small real training steps (`REAL_STEPS`):
   `greedy.tile`'s communicated bytes against the least of any strategy, by brute
   force (numpy, every strategy) where the graph has at most `BRUTE_LIMIT` strategies,
   else by the ILP minimizing bytes (proven optimal, or its bounds at the timeout).
   Share optimal, median and worst ratio; without a memory budget (Spartan's §3.2
   experiment) and with `BUDGET_FACTOR` times the least memory per device
   (`tile(memory_budget=)` against the least bytes within it), since without one a
   real step's least is 0 bytes: every value replicated.
4. **Exact FT against brute force**: `frontier.track(heuristic=None)` (conditioning
   instead of heuristic elimination) against `CostGraph.brute_force_frontier` on
   `--graphs` random graphs (up to 7 nodes of up to 3 options, up to 10 edges beyond
   the tree; integer costs, so equal means equal): how many agree; and how often FT
   with `heuristic=weighted` still finds the exact frontier where it eliminated a node
   heuristically.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import datetime
import math
import os
import statistics
import sys
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from importlib.metadata import version
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

import numpy as np
from parallel import versions
from soap import SEARCH_MODELS, step_of
from soap_programs import CNN, MLP
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.cost.machines import Machine, machine
from tasoc.driver.sources import build_zoo_model, make_context
from tasoc.ir import dag as dag_module
from tasoc.ir.limits import ARGUMENT_BYTES_ENV
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.search import Deadline
from tasoc.passes.soap import costs, frontier, greedy, ilp, mcmc
from tasoc.passes.soap.cost_graph import CostEdge, CostGraph, CostNode, Floats
from tasoc.passes.soap.cost_searches import (
    ANCHOR_SHARE,
    FT_SHARE,
    ILP_MAX_VARIABLES,
    Evaluated,
    FrontierError,
    cost_model,
    evaluate,
    ft_anchors,
    greedy_plan,
    realize,
    search_ft,
)
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import PlanError, Problem
from tasoc.passes.soap.problem import Limits, SoapProblem, Tuning
from tasoc.passes.soap.profile import SEARCH_SHARE
from tasoc.passes.soap.searches import baseline_plans, distinct
from tasoc.passes.soap.soap_shard import SoapShardPass

GIB = 2**30
SEED = 0
BETA = 20.0
"""MCMC's inverse temperature: the pass's default."""


@dataclass(frozen=True)
class TensorOptModel:
    spec: str
    """The zoo spec of the forward program (TensorOpt's Table 1 shape)."""
    ft_ldp_s: float | None
    """TensorOpt's FT-LDP running time (its Table 3), seconds; None: not given."""
    table4: tuple[float, float] | None
    """TensorOpt's Table 4: (mini-time, data parallel) seconds per iteration."""
    argument_bytes: int | None = None
    """`TASOC_MAX_ARGUMENT_BYTES` the build needs (None: the default limit)."""


TENSOROPT_MODELS: dict[str, TensorOptModel] = {
    "rnn": TensorOptModel(
        "rnn?layers=6&hidden=24576&seq=10&batch=256", 0.28, None, argument_bytes=128 * GIB
    ),
    "wresnet": TensorOptModel(
        "wresnet?depth=101&widen=9&width=1.016&batch=256", 1292.0, (1.99, 2.89)
    ),
    "transformer": TensorOptModel(
        "transformer?layers=13&hidden=4096&seq=64&batch=256", 201.0, None
    ),
    "vgg16": TensorOptModel("vgg16?batch=256", None, (0.10, 0.16)),
}
"""TensorOpt's models at its Table 1 shapes (the GiB reading of the table). The RNN's
weights and inputs total about 108 GiB, over tasoc's default 64 GiB argument limit."""

TENSOROPT_MACHINE = "v100-tensoropt"
TENSOROPT_DEVICES = 16
TRAIN = "&train=sgd&lr=0.01"
QUICK_TENSOROPT = ("vgg16",)

FLEXFLOW_MACHINE = "k80-cluster"
FLEXFLOW_DEVICES = 16
BUDGET, TIMEOUT, ILP_TIMEOUT = 500, 30.0, 60.0
QUICK_FLEXFLOW = ("candle_uno",)

PASS_TIMEOUT = float(SoapShardPass.timeout)
FT_TIMEOUT = PASS_TIMEOUT * SEARCH_SHARE
"""The anchored FT's deadline (`--ft-timeout`): what `search=ft` gets of the pass's
default timeout (its search share); the anchors' ILP takes at most `ANCHOR_SHARE` of
it and FT `FT_SHARE` of the rest, as in `search_ft`."""
QUICK_FT_TIMEOUT = 10.0
QUICK_BUDGET, QUICK_TIMEOUT, QUICK_ILP_TIMEOUT = 20, 10.0, 10.0

GRAPHS, QUICK_GRAPHS = 200, 20
BRUTE_LIMIT = 1 << 25
"""The most strategies the brute force of table 3 enumerates (numpy, in chunks);
above it the exact least bytes come from the ILP."""
CHUNK = 1 << 20
BUDGET_FACTOR = 1.25
"""Table 3's memory budget: this many times the least memory per device of any
strategy (Spartan's budget bounds its duplication; without one, replicating every value
communicates nothing on a real step)."""

MATMUL = """
func.func @main(%x: tensor<16x8xf32>, %w: tensor<8x32xf32> {graph.param}) -> tensor<16x32xf32> {
  %y = graph.matmul %x, %w : tensor<16x32xf32>
  func.return %y : tensor<16x32xf32>
}
"""


REAL_STEPS: dict[str, tuple[str, str]] = {
    "matmul step": (MATMUL, "2"),
    "MLP step": (MLP, "2"),
    "CNN step": (CNN, "2"),
    "MLP step 2x2": (MLP, "2x2"),
}
"""Small programs whose training steps (`autodiff{loss=mse optimizer=sgd}`) give real
cost graphs for table 3 (priced on `cpu-N`; bytes do not depend on the machine), on
the mesh named. Only the single matmul's step is small enough for brute force."""
QUICK_REAL_STEPS = ("MLP step",)


def header() -> str:
    return (
        f"# {datetime.date.today()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
        f"{versions()}, scipy {version('scipy')}"
    )


@contextlib.contextmanager
def argument_limit(limit: int | None) -> Iterator[None]:
    """`TASOC_MAX_ARGUMENT_BYTES` raised to `limit` while building a model (read when a
    model is built, not when tasoc is imported), then as it was."""
    if limit is None:
        yield
        return
    previous = os.environ.get(ARGUMENT_BYTES_ENV)
    os.environ[ARGUMENT_BYTES_ENV] = str(max(limit, int(previous or 0)))
    try:
        yield
    finally:
        if previous is None:
            del os.environ[ARGUMENT_BYTES_ENV]
        else:
            os.environ[ARGUMENT_BYTES_ENV] = previous


def problem_of(step: ModuleOp, mesh: str | int) -> Problem:
    dag = dag_module.from_module(step)
    return Problem(dag, parse_mesh(mesh), training_signature(entry_function(step)), {})


def baselines_of(problem: Problem) -> dict[str, Any]:
    """The baselines that apply, each plan once, as the pass starts its searches."""
    return distinct(baseline_plans(problem)[0])


def searched(program: Problem, cluster: Machine, **tuning: Any) -> SoapProblem:
    """`program` as the pass poses it on `cluster`, without a memory cap."""
    return SoapProblem(program, cluster, tuning=Tuning(beta=BETA, **tuning))


def limits_for(budget: int, timeout: float) -> Limits:
    return Limits(budget, Deadline.after(timeout), SEED)


def ops_of(step: ModuleOp) -> int:
    return sum(1 for _ in entry_function(step).body.block.ops) - 1


def eliminations_text(counts: dict[str, int]) -> str:
    kinds = ("node", "edge", "branch", "heuristic", "conditioned")
    return ", ".join(f"{kind} {counts.get(kind, 0)}" for kind in kinds if kind in counts)


def thinning(args: argparse.Namespace) -> str:
    return "" if args.max_points is None else f", max-points={args.max_points}"


def gib(value: float) -> str:
    return f"{value / GIB:.2f}"


# ------------------------------------------------------------------ 1: TensorOpt's models


@dataclass
class IlpFigures:
    status: str
    """optimal, timeout, or why there is none (too large, infeasible)."""
    gap: float | None = None
    seconds: float = math.nan
    variables: int = 0
    memory: float = math.nan
    time: float = math.nan
    simulated_s: float = math.nan
    simulated_memory: float = math.nan


@dataclass
class FtFigures:
    """One way of running FT on a model's cost graph, and its fastest point."""

    label: str
    """"local" (`frontier.track` with the heuristic alone: TensorOpt's algorithm) or
    "anchored" (as `search=ft` runs it: `ft_anchors`, then `track(anchors=...)`)."""
    seconds: float
    """Wall time: FT's tracking; anchored, also computing the anchors."""
    anchors_s: float = 0.0
    """Of `seconds`, computing the anchors (the baselines' choices, the tiling, the ILP
    solve under its share of the deadline); 0 for local."""
    anchors: tuple[str, ...] = ()
    runs: int = 1
    """FT's runs: one, and one more per anchor (their eliminations are summed)."""
    points: int = 0
    eliminations: dict[str, int] = field(default_factory=dict)
    exact: bool = False
    thinned: int = 0
    least: tuple[float, float] = (math.nan, math.nan)
    """(memory, seconds) estimate of the frontier's least-memory point."""
    fastest: tuple[float, float] = (math.nan, math.nan)
    """(memory, seconds) estimate of the frontier's fastest point."""
    fastest_simulated: tuple[float, float] = (math.nan, math.nan)
    """(seconds, peak memory) of the fastest point, completed and simulated."""
    error: str = ""
    """Why there is no frontier (FT ran out of the deadline), else empty."""

    @property
    def heuristic(self) -> int:
        return self.eliminations.get("heuristic", 0)

    @property
    def exact_text(self) -> str:
        if self.error:
            return "-"
        return "yes" if self.exact else f"no (thinned {self.thinned})" if self.thinned else "no"

    def distance(self, ilp_time: float) -> float:
        """How much slower the fastest point is than the ILP's least time (estimates)."""
        return self.fastest[1] / ilp_time - 1


def run_ft(
    model: costs.CostModel,
    baselines: dict[str, Any],
    problem: SoapProblem,
    limits: Limits,
    args: argparse.Namespace,
    *,
    anchored: bool,
) -> FtFigures:
    """FT on the model's graph, local or anchored (the steps of `search_ft`: the anchors
    under the limits' deadline, the ILP's at most `ANCHOR_SHARE` of it, then FT with
    `FT_SHARE` of what is left), its fastest point completed and simulated."""
    label = "anchored" if anchored else "local"
    anchors: dict[str, Any] = {}
    started = time.perf_counter()
    try:
        if anchored:
            anchors = ft_anchors(model, baselines, problem, limits)
        anchors_s = time.perf_counter() - started if anchored else 0.0
        tracked = frontier.track(
            model.graph,
            heuristic=args.heuristic,
            max_points=args.max_points,
            deadline=limits.deadline.share(FT_SHARE) if anchored else None,
            anchors=tuple(anchors.values()),
        )
    except (frontier.FrontierTimeout, MemoryError) as err:
        why = "timeout" if isinstance(err, frontier.FrontierTimeout) else "out of memory"
        return FtFigures(
            label, time.perf_counter() - started, anchors=tuple(anchors), error=f"{why}: {err}"
        )
    figures = FtFigures(
        label,
        anchors_s + tracked.seconds,
        anchors_s,
        tuple(anchors),
        1 + len(anchors),
        len(tracked.points),
        dict(tracked.eliminations),
        tracked.exact,
        tracked.thinned,
    )
    if not tracked.points:
        figures.error = "no feasible strategy"
        return figures
    least, fastest = tracked.points[0], tracked.points[-1]
    figures.least, figures.fastest = (least.memory, least.time), (fastest.memory, fastest.time)
    try:
        simulated = realize(model, fastest.choice, problem).simulated
    except PlanError as err:
        figures.error = str(err)
        return figures
    figures.fastest_simulated = (simulated.time, simulated.memory)
    return figures


@dataclass
class TensorOptRow:
    model: str
    ops: int
    nodes: int
    edges: int
    build_s: float
    local: FtFigures
    """FT with the local heuristic alone (TensorOpt's algorithm)."""
    anchored: FtFigures
    """FT as `search=ft` runs it (anchors included)."""
    data_parallel: tuple[float, float]
    """(seconds, peak memory) of data parallel, simulated."""
    mini_time: str
    """`objective=mini-time` under the device's memory (`search_ft`): its point and
    simulation."""
    ilp: IlpFigures
    ft_ldp_s: float | None
    table4: tuple[float, float] | None

    @property
    def fts(self) -> tuple[FtFigures, FtFigures]:
        return self.local, self.anchored

    def speedup(self, ft: FtFigures) -> float:
        return self.data_parallel[0] / ft.fastest_simulated[0]

    def goal(self, ft: FtFigures) -> str:
        if self.ft_ldp_s is None:
            return "n/a (no FT-LDP time)"
        limit = self.ft_ldp_s / 10
        return f"{'met' if ft.seconds <= limit else 'missed'} (<= {limit:g} s)"


def ilp_figures(model: costs.CostModel, problem: SoapProblem, timeout: float) -> IlpFigures:
    try:
        result = ilp.solve(
            model.graph, deadline=Deadline.after(timeout), max_variables=ILP_MAX_VARIABLES
        )
    except ilp.IlpTooLarge as err:
        return IlpFigures(f"IlpTooLarge: {err}")
    except ilp.IlpInfeasible as err:
        return IlpFigures(f"infeasible: {err}")
    figures = IlpFigures(
        result.status, result.gap, result.seconds, result.variables, result.memory, result.time
    )
    if result.choice is not None:
        simulated = realize(model, result.choice, problem).simulated
        figures.simulated_s, figures.simulated_memory = simulated.time, simulated.memory
    return figures


def mini_time(baselines: dict[str, Any], problem: SoapProblem, limits: Limits) -> str:
    cap = int(problem.machine.device.memory_bytes)
    capped = dataclasses.replace(problem, objective="mini-time", memory_cap=cap)
    try:
        outcome = search_ft(capped, baselines, limits)
    except FrontierError as err:
        return f"none: {err}"
    chosen = outcome.details["chosen"]
    fits = "fits" if chosen["simulated_memory"] <= cap else "over the cap"
    return (
        f"point {outcome.details['picked']}: {chosen['simulated_seconds']:.4f} s, "
        f"{gib(chosen['simulated_memory'])} GiB simulated ({fits})"
    )


def ft_search(
    program: Problem, cluster: Machine, args: argparse.Namespace
) -> tuple[SoapProblem, Limits]:
    """The problem and limits `search=ft` gets in the pass: a deadline of `--ft-timeout`
    from now."""
    tuning = {"heuristic": args.heuristic, "max_points": args.max_points}
    return searched(program, cluster, **tuning), limits_for(1, args.ft_timeout)


def tensoropt_row(name: str, args: argparse.Namespace) -> TensorOptRow:
    entry = TENSOROPT_MODELS[name]
    with argument_limit(entry.argument_bytes):
        step = build_zoo_model(entry.spec + TRAIN)
    problem = problem_of(step, TENSOROPT_DEVICES)
    baselines = baselines_of(problem)
    cluster = machine(TENSOROPT_MACHINE)
    posed, limits = searched(problem, cluster, heuristic=args.heuristic), limits_for(1, 3600.0)
    started = time.perf_counter()
    model = cost_model(posed)
    build_s = time.perf_counter() - started
    local = run_ft(model, baselines, posed, limits, args, anchored=False)
    anchored = run_ft(model, baselines, *ft_search(problem, cluster, args), args, anchored=True)
    data_parallel = evaluate(model, baselines["data-parallel"], posed).simulated
    return TensorOptRow(
        name,
        ops_of(step),
        len(model.graph.nodes),
        len(model.graph.edges),
        build_s,
        local,
        anchored,
        (data_parallel.time, data_parallel.memory),
        mini_time(baselines, *ft_search(problem, cluster, args)),
        ilp_figures(model, posed, args.ilp_timeout),
        entry.ft_ldp_s,
        entry.table4,
    )


FT_LABELS = {
    "local": "local (heuristic alone: TensorOpt's FT)",
    "anchored": "anchored (as search=ft runs it)",
}


def anchors_text(ft: FtFigures) -> str:
    if ft.label == "local":
        return "-"
    return f"{ft.anchors_s:.2f} s ({', '.join(ft.anchors) or 'none'})"


def tensoropt_tables(rows: Sequence[TensorOptRow], args: argparse.Namespace) -> str:
    search = [
        f"(a) FT (heuristic={args.heuristic}{thinning(args)}) on {TENSOROPT_MACHINE}, "
        f"{TENSOROPT_DEVICES} "
        "devices, twice: local (the heuristic alone) and anchored (as search=ft runs it, a "
        f"{args.ft_timeout:g} s deadline; the pass's default: its {PASS_TIMEOUT:g} s timeout "
        f"times {SEARCH_SHARE:g}, {FT_TIMEOUT:g} s); FT s is wall time on this machine, "
        "anchored including the "
        "anchors (the baselines' choices, the greedy tiling, the ILP solve under "
        f"{ANCHOR_SHARE:g} of the deadline; not the cost graph's build); eliminations of "
        "the anchored FT are summed over its runs (1 + one per anchor; those before the "
        "first heuristic elimination, shared by the runs, once):",
        "| model (step ops; graph nodes/edges, build s) | FT | FT s | anchors: s, which "
        "| runs | points | heuristic elim. | eliminations | exact | TensorOpt FT-LDP s "
        "| goal: FT s <= 1/10 |",
        "| --- | --- | ---: | --- | ---: | ---: | ---: | --- | --- | ---: | --- |",
    ]
    for r in rows:
        first = f"{r.model} ({r.ops}; {r.nodes}/{r.edges}, {r.build_s:.2f} s)"
        ldp = "-" if r.ft_ldp_s is None else f"{r.ft_ldp_s:g}"
        for ft in r.fts:
            eliminations = ft.error or eliminations_text(ft.eliminations)
            search.append(
                f"| {first} | {FT_LABELS[ft.label]} | {ft.seconds:.2f} | {anchors_text(ft)} "
                f"| {ft.runs} | {ft.points} | {ft.heuristic} | {eliminations} "
                f"| {ft.exact_text} | {ldp} | {r.goal(ft)} |"
            )
            first = ldp = ""
    times = [
        f"\n(b) each frontier (estimates, eq. 3) and its fastest point *simulated* on "
        f"{TENSOROPT_MACHINE} against data parallel *simulated*; mini-time under the "
        "V100's 16 GB (search=ft, anchored, objective=mini-time), simulated:",
        "| model | FT | least memory: GiB, s (est.) | fastest: GiB, s (est.) "
        "| fastest simulated s | its peak GiB (sim.) | data parallel simulated s "
        "| its peak GiB (sim.) | speedup over DP (sim.) "
        "| TensorOpt Table 4: mini-time vs DP s | mini-time <= 16 GB |",
        "| --- | --- | --- | --- | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        table4 = "-"
        if r.table4 is not None:
            table4 = f"{r.table4[0]:g} vs {r.table4[1]:g} ({r.table4[1] / r.table4[0]:.2f}x)"
        first, dp, mini = (
            r.model,
            (f"{r.data_parallel[0]:.4f}", gib(r.data_parallel[1])),
            r.mini_time,
        )
        for ft in r.fts:
            if ft.error:
                times.append(
                    f"| {first} | {ft.label} | {ft.error} | | | | {dp[0]} | {dp[1]} | "
                    f"| {table4} | {mini} |"
                )
            else:
                times.append(
                    f"| {first} | {ft.label} | {gib(ft.least[0])}, {ft.least[1]:.4f} "
                    f"| {gib(ft.fastest[0])}, {ft.fastest[1]:.4f} "
                    f"| {ft.fastest_simulated[0]:.4f} | {gib(ft.fastest_simulated[1])} "
                    f"| {dp[0]} | {dp[1]} | {r.speedup(ft):.2f}x | {table4} | {mini} |"
                )
            first, dp, table4, mini = "", ("", ""), "", ""
    exact = [
        "\n(c) each FT's fastest point against the ILP's least time (no cap, "
        f"--ilp-timeout {args.ilp_timeout:g} s), estimates; the ILP's strategy *simulated*:",
        "| model | ILP status | gap | ILP s | variables | ILP est. s | ILP est. GiB "
        "| ILP simulated s | ILP sim. peak GiB | local FT fastest est. s | local over ILP "
        "| anchored FT fastest est. s | anchored over ILP [1] |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: "
        "| ---: |",
    ]
    for r in rows:
        i = r.ilp
        fastest = [f"{ft.fastest[1]:.4f}" for ft in r.fts]
        if not math.isfinite(i.time):
            exact.append(
                f"| {r.model} | {i.status} | | | | | | | | {fastest[0]} | | {fastest[1]} | |"
            )
            continue
        gap = "-" if i.gap is None else f"{i.gap:.2%}"
        exact.append(
            f"| {r.model} | {i.status} | {gap} | {i.seconds:.2f} | {i.variables} "
            f"| {i.time:.4f} | {gib(i.memory)} | {i.simulated_s:.4f} "
            f"| {gib(i.simulated_memory)} | {fastest[0]} | {r.local.distance(i.time):+.1%} "
            f"| {fastest[1]} | {r.anchored.distance(i.time):+.1%} |"
        )
    exact.append(
        "\n[1] The anchored FT runs once more following the ILP's fastest strategy "
        "(solved within its share of the deadline), so where that ILP anchor was found "
        "and proven optimal its frontier holds a point at least as fast and its distance "
        "is <= 0 by construction: it measures the ILP anchor, not FT. A gap from 0 there "
        "is HiGHS's tolerance, or the anchor's ILP stopping at an incumbent."
    )
    return "\n".join(search + times + exact)


# ------------------------------------------------------------------ 2: FlexFlow's models


@dataclass
class StrategyRow:
    model: str
    strategy: str
    simulated_s: float
    simulated_memory: float
    estimate: tuple[float, float] | None
    """(memory, seconds) by the cost graph; None where it cannot express the plan."""
    search_s: float | None
    """The search's own seconds; None for a named strategy."""
    note: str = ""


@dataclass
class FlexFlowModel:
    model: str
    ops: int
    nodes: int
    edges: int
    build_s: float
    rows: list[StrategyRow] = field(default_factory=list)


def strategy_row(
    name: str, strategy: str, evaluated: Evaluated, seconds: float | None, note: str = ""
) -> StrategyRow:
    simulated = evaluated.simulated
    return StrategyRow(
        name, strategy, simulated.time, simulated.memory, evaluated.estimate, seconds, note
    )


def ft_row(name: str, ft: FtFigures) -> StrategyRow:
    """FT's fastest point as a row of table 2, the search's figures in its note."""
    note = (
        f"{ft.points} points, {ft.heuristic} heuristic elim. ({ft.runs} "
        f"run{'s' if ft.runs > 1 else ''}), {'exact' if ft.exact else 'not exact'}"
    )
    if ft.label == "anchored":
        note += f"; anchors {anchors_text(ft)}"
    if ft.error:
        note = f"{ft.error}; {note}"
    estimate = None if math.isnan(ft.fastest[1]) else ft.fastest
    simulated_s, simulated_memory = ft.fastest_simulated
    return StrategyRow(
        name, f"ft-{ft.label}", simulated_s, simulated_memory, estimate, ft.seconds, note
    )


def flexflow_model(name: str, args: argparse.Namespace) -> FlexFlowModel:
    step = step_of(name, SEARCH_MODELS[name])
    problem = problem_of(step, args.devices)
    baselines = baselines_of(problem)
    cluster = machine(args.machine)
    posed, limits = searched(problem, cluster), limits_for(args.budget, args.timeout)
    started = time.perf_counter()
    model = cost_model(posed)
    found = FlexFlowModel(
        name, ops_of(step), len(model.graph.nodes), len(model.graph.edges),
        time.perf_counter() - started,
    )  # fmt: skip

    def add(strategy: str, choice: Any, seconds: float, note: str = "") -> None:
        try:
            evaluated = realize(model, choice, posed)
        except PlanError as err:
            found.rows.append(
                StrategyRow(name, strategy, math.nan, math.nan, None, seconds, str(err))
            )
            return
        found.rows.append(strategy_row(name, strategy, evaluated, seconds, note))

    # mcmc from the baselines and the greedy tiling, as the pass starts it
    starts = {**baselines, "greedy": greedy_plan(posed)[0]}
    outcome = mcmc.search(posed, starts, limits)
    stopped = f"{outcome.stopped.value}, {outcome.details.get('proposals', '?')} proposals"
    found.rows.append(
        strategy_row(name, "mcmc", evaluate(model, outcome.best, posed), outcome.seconds, stopped)
    )
    for anchored in (False, True):
        given = ft_search(problem, cluster, args) if anchored else (posed, limits)
        found.rows.append(ft_row(name, run_ft(model, baselines, *given, args, anchored=anchored)))
    tiling = greedy.tile(model.graph)
    add("greedy", tiling.choice, tiling.seconds)
    try:
        result = ilp.solve(
            model.graph, deadline=Deadline.after(args.ilp_timeout), max_variables=ILP_MAX_VARIABLES
        )
    except (ilp.IlpTooLarge, ilp.IlpInfeasible) as err:
        found.rows.append(StrategyRow(name, "ilp", math.nan, math.nan, None, None, str(err)))
    else:
        if result.choice is None:
            found.rows.append(
                StrategyRow(name, "ilp", math.nan, math.nan, None, result.seconds, "no incumbent")
            )
        else:
            gap = "" if result.gap is None else f", gap {result.gap:.2%}"
            add("ilp", result.choice, result.seconds, f"{result.status}{gap}")
    for strategy, plan in baselines.items():
        found.rows.append(strategy_row(name, strategy, evaluate(model, plan, posed), None))
    return found


def flexflow_table(models: Sequence[FlexFlowModel], args: argparse.Namespace) -> str:
    lines = [
        f"Side by side on {args.devices} devices of {args.machine}: times and peaks *simulated* "
        "there, estimates by the cost graph; search s is wall time on this machine. "
        f"ft-local is FT (heuristic={args.heuristic}{thinning(args)}) with the heuristic "
        "alone (TensorOpt's), ft-anchored FT as "
        f"search=ft runs it ({args.ft_timeout:g} s deadline; its search s includes computing "
        "the anchors); each is its frontier's fastest point. 'est. over ILP' is the "
        "estimate's distance from the ILP's (the ilp row; exact when its note says optimal):",
        "| model (ops; graph nodes/edges, build s) | strategy | simulated ms | over DP "
        "| simulated peak GiB | estimate ms | estimate GiB | est. over ILP [1] | search s "
        "| note |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for m in models:
        dp = next(r.simulated_s for r in m.rows if r.strategy == "data-parallel")
        least = next(
            (r.estimate[1] for r in m.rows if r.strategy == "ilp" and r.estimate is not None),
            math.nan,
        )
        first = f"{m.model} ({m.ops}; {m.nodes}/{m.edges}, {m.build_s:.2f} s)"
        for r in m.rows:
            estimate = ("-", "-", "-") if r.estimate is None else (
                f"{r.estimate[1] * 1e3:.2f}", gib(r.estimate[0]),
                f"{r.estimate[1] / least - 1:+.1%}" if math.isfinite(least) else "-",
            )  # fmt: skip
            seconds = "-" if r.search_s is None else f"{r.search_s:.2f}"
            over = f"{dp / r.simulated_s:.2f}x" if math.isfinite(r.simulated_s) else "-"
            lines.append(
                f"| {first} | {r.strategy} | {r.simulated_s * 1e3:.2f} | {over} "
                f"| {gib(r.simulated_memory)} | {estimate[0]} | {estimate[1]} | {estimate[2]} "
                f"| {seconds} | {r.note} |"
            )
            first = ""
    lines.append(
        "\n[1] ft-anchored follows the ILP's fastest strategy in one of its runs (when its "
        "anchor ILP finished within its share of the deadline), so its distance is <= 0 "
        "by construction there: it measures the ILP anchor, not FT."
    )
    return "\n".join(lines)


# ------------------------------------------------------------------ 3, 4: small graphs


def random_graph(
    rng: np.random.Generator,
    *,
    max_nodes: int = 8,
    max_options: int = 4,
    max_extra_edges: int = 4,
    bytes_low: int = 1,
) -> CostGraph:
    """A connected random cost graph: a random tree (each node joined to an earlier one)
    plus up to `max_extra_edges` edges between any two nodes (parallel ones included);
    node time and memory 0-9, edge time 0-9, bytes `bytes_low`-9 drawn apart from the
    time, some option pairs impossible (each edge keeps at least one possible pair),
    and half the edges holding memory 0-9 per pair. Integers, so sums are exact."""
    count = int(rng.integers(2, max_nodes + 1))
    nodes = []
    for index in range(count):
        options = int(rng.integers(1, max_options + 1))
        nodes.append(
            CostNode(
                f"n{index}",
                rng.integers(0, 10, options).astype(float),
                rng.integers(0, 10, options).astype(float),
            )
        )
    pairs = [(int(rng.integers(0, index)), index) for index in range(1, count)]
    for _ in range(int(rng.integers(0, max_extra_edges + 1))):
        a, b = (int(x) for x in rng.integers(0, count, 2))
        if a != b:
            pairs.append((a, b))
    edges = []
    for a, b in pairs:
        shape = (nodes[a].options, nodes[b].options)
        seconds = rng.integers(0, 10, shape).astype(float)
        moved = rng.integers(bytes_low, 10, shape).astype(float)
        blocked = rng.random(shape) < 0.25
        blocked.flat[int(rng.integers(0, blocked.size))] = False
        seconds[blocked] = moved[blocked] = np.inf
        held = rng.integers(0, 10, shape).astype(float) if rng.random() < 0.5 else None
        edges.append(CostEdge(a, b, seconds, moved, held))
    return CostGraph(tuple(nodes), tuple(edges))


def enumerate_costs(graph: CostGraph) -> Iterator[tuple[Floats, Floats]]:
    """Every strategy's (bytes communicated, memory per device), `CHUNK` at a time
    (numpy; impossible strategies communicate `inf`)."""
    sizes = np.array([node.options for node in graph.nodes], np.int64)
    strides = np.concatenate(([1], np.cumprod(sizes)[:-1]))
    total = int(np.prod(sizes))
    for start in range(0, total, CHUNK):
        index = np.arange(start, min(start + CHUNK, total), dtype=np.int64)
        option = [(index // strides[i]) % sizes[i] for i in range(len(sizes))]
        moved = np.zeros(len(index))
        memory = np.full(len(index), graph.fixed_memory)
        for node, picked in zip(graph.nodes, option, strict=True):
            memory += node.memory[picked]
        for edge in graph.edges:
            pair = option[edge.source], option[edge.target]
            moved += edge.bytes[pair]
            if edge.memory is not None:
                memory += edge.memory[pair]
        yield moved, memory


def brute_force(graph: CostGraph, cap: float | None = None) -> tuple[float, float]:
    """By enumerating every strategy: the least bytes of any whose memory is within
    `cap` (None: any), and the least memory of any possible one."""
    least_bytes = least_memory = math.inf
    for moved, memory in enumerate_costs(graph):
        possible = np.isfinite(moved)
        if possible.any():
            least_memory = min(least_memory, float(memory[possible].min()))
        fits = possible if cap is None else possible & (memory <= cap)
        if fits.any():
            least_bytes = min(least_bytes, float(moved[fits].min()))
    return least_bytes, least_memory


def reweighted(graph: CostGraph, *, memory: bool) -> CostGraph:
    """`graph` with its time replaced, for the ILP to minimize: by the bytes of its
    edges (node time 0), or with `memory` by its memory (nodes' and edges')."""
    nodes = tuple(
        CostNode(n.name, n.memory if memory else np.zeros(n.options), n.memory) for n in graph.nodes
    )
    edges = []
    for e in graph.edges:
        weight = e.bytes
        if memory:
            weight = np.where(np.isfinite(e.bytes), e.memory_matrix(), np.inf)
        edges.append(CostEdge(e.source, e.target, weight, e.bytes, e.memory))
    return CostGraph(nodes, tuple(edges), graph.fixed_memory, 0.0)


def by_ilp(graph: CostGraph, cap: float | None, timeout: float) -> tuple[float, float, str]:
    """As `brute_force`, by the ILP (on `reweighted` copies), and its status."""
    least_memory = ilp.solve(reweighted(graph, memory=True), deadline=Deadline.after(timeout))
    try:
        least = ilp.solve(
            reweighted(graph, memory=False), memory_cap=cap, deadline=Deadline.after(timeout)
        )
    except ilp.IlpInfeasible:
        return math.inf, least_memory.time, least_memory.status
    statuses = {least.status, least_memory.status}
    return least.time, least_memory.time, "optimal" if statuses == {"optimal"} else "timeout"


def ratio(found: float, least: float) -> float:
    if found == least:
        return 1.0
    return found / least if least > 0 else math.inf


def ratio_text(value: float) -> str:
    return "inf" if math.isinf(value) else f"{value:.3f}"


@dataclass
class Compared:
    """Greedy's bytes against the exact least, with or without a memory budget."""

    budget: float | None
    greedy_bytes: float
    greedy_memory: float
    least_bytes: float

    @property
    def ratio(self) -> float:
        return ratio(self.greedy_bytes, self.least_bytes)

    @property
    def over_budget(self) -> bool:
        return self.budget is not None and self.greedy_memory > self.budget


def compared(graph: CostGraph, budget: float | None, least_bytes: float) -> Compared:
    tiling = greedy.tile(graph, memory_budget=budget)
    return Compared(budget, tiling.bytes, graph.cost(tiling.choice)[0], least_bytes)


@dataclass
class GreedySummary:
    """Greedy against brute force on random graphs, without a budget and with one."""

    graphs: int
    free: list[Compared]
    budgeted: list[Compared]
    greedy_s: float
    brute_s: float
    """Mean seconds per graph (greedy without a budget; brute force of both)."""


def greedy_random(count: int) -> GreedySummary:
    rng = np.random.default_rng(SEED)
    free, budgeted = [], []
    greedy_s = brute_s = 0.0
    for _ in range(count):
        graph = random_graph(rng)
        started = time.perf_counter()
        least, least_memory = brute_force(graph)
        budget = BUDGET_FACTOR * least_memory
        least_budgeted, _ = brute_force(graph, budget)
        brute_s += time.perf_counter() - started
        if not math.isfinite(least):
            continue  # no strategy at all
        greedy_s += greedy.tile(graph).seconds
        free.append(compared(graph, None, least))
        budgeted.append(compared(graph, budget, least_budgeted))
    return GreedySummary(count, free, budgeted, greedy_s / count, brute_s / count)


@dataclass
class GreedyRow:
    program: str
    nodes: int
    edges: int
    strategies: int
    method: str
    least_memory: float
    free: Compared
    budgeted: Compared
    greedy_s: float
    exact_s: float


def training_step(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)  # type: ignore[arg-type]
    return module


def greedy_real(name: str, ilp_timeout: float) -> GreedyRow:
    text, mesh = REAL_STEPS[name]
    problem = problem_of(training_step(text), mesh)
    graph = costs.build(problem, machine(f"cpu-{problem.mesh.size}")).graph
    started = time.perf_counter()
    if graph.strategies <= BRUTE_LIMIT:
        method = "brute force"
        least, least_memory = brute_force(graph)
        budget = BUDGET_FACTOR * least_memory
        least_budgeted = brute_force(graph, budget)[0]
    else:
        least, least_memory, status = by_ilp(graph, None, ilp_timeout)
        budget = BUDGET_FACTOR * least_memory
        least_budgeted, _, budgeted_status = by_ilp(graph, budget, ilp_timeout)
        method = "ILP" if {status, budgeted_status} == {"optimal"} else "ILP (timeout: bounds)"
    exact_s = time.perf_counter() - started
    return GreedyRow(
        f"{name} ({mesh})", len(graph.nodes), len(graph.edges), graph.strategies, method,
        least_memory, compared(graph, None, least), compared(graph, budget, least_budgeted),
        greedy.tile(graph).seconds, exact_s,
    )  # fmt: skip


def summary_line(label: str, rows: Sequence[Compared]) -> str:
    ratios = [r.ratio for r in rows]
    optimal = sum(r == 1.0 for r in ratios)
    impossible = sum(math.isinf(r.greedy_bytes) for r in rows)
    finite = [r for r in ratios if math.isfinite(r)]
    over = sum(r.over_budget for r in rows)
    return (
        f"| {label} | {len(rows)} | {optimal} | {optimal / len(rows):.1%} "
        f"| {ratio_text(statistics.median(ratios))} | {ratio_text(max(finite, default=1.0))} "
        f"| {impossible} | {over} |"
    )


def greedy_tables(summary: GreedySummary | None, rows: Sequence[GreedyRow]) -> str:
    lines = []
    if summary is not None and summary.free:
        lines += [
            f"Spartan's greedy tiling against the exact least bytes (brute force) on "
            f"{summary.graphs} random cost graphs (seed {SEED}; those with a strategy), "
            f"without a memory budget and with {BUDGET_FACTOR:g}x the least memory (a greedy "
            "strategy over the budget may communicate less than the least within it); greedy "
            f"{summary.greedy_s * 1e3:.3f} ms/graph, brute force {summary.brute_s * 1e3:.3f} "
            "ms/graph (wall time here):",
            "| budget | graphs | greedy optimal | share optimal | median ratio "
            "| worst finite ratio | greedy impossible (inf) | greedy over budget |",
            "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            summary_line("none", summary.free),
            summary_line(f"{BUDGET_FACTOR:g}x least memory", summary.budgeted),
        ]
    if rows:
        lines += [
            "\nOn the cost graphs of small training steps (bytes per device communicated; "
            f"budget {BUDGET_FACTOR:g}x the least memory per device):",
            "| program (mesh) | nodes | edges | strategies | exact by | greedy bytes "
            "| least bytes | ratio | budget bytes | greedy bytes (memory) | least bytes "
            "| ratio | greedy s | exact s |",
            "| --- | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: | ---: "
            "| ---: | ---: | ---: |",
        ]
        for r in rows:
            free, capped = r.free, r.budgeted
            over = " over" if capped.over_budget else ""
            lines.append(
                f"| {r.program} | {r.nodes} | {r.edges} | {r.strategies:.3g} | {r.method} "
                f"| {free.greedy_bytes:g} | {free.least_bytes:g} | {ratio_text(free.ratio)} "
                f"| {capped.budget:g} | {capped.greedy_bytes:g} ({capped.greedy_memory:g}{over}) "
                f"| {capped.least_bytes:g} | {ratio_text(capped.ratio)} | {r.greedy_s:.4f} "
                f"| {r.exact_s:.2f} |"
            )
    return "\n".join(lines)


@dataclass
class ExactRow:
    graphs: int
    equal: int
    """Graphs whose exact FT frontier is brute force's (points' memory and time)."""
    feasible: int
    """Graphs with at least one strategy (the others: both frontiers empty)."""
    conditioned: int
    """Nodes conditioned on, over all graphs."""
    ft_s: float
    brute_s: float
    """Mean seconds per graph."""
    heuristic_ran: int
    """Graphs on which FT with `heuristic=weighted` eliminated a node heuristically..."""
    heuristic_equal: int
    """... and of those, how many still got the exact frontier."""


def exact_ft(count: int) -> ExactRow:
    rng = np.random.default_rng(SEED + 1)
    equal = feasible = conditioned = ran = kept = 0
    ft_s = brute_s = 0.0
    for _ in range(count):
        graph = random_graph(rng, max_nodes=7, max_options=3, max_extra_edges=10, bytes_low=0)
        tracked = frontier.track(graph, heuristic=None)
        ft_s += tracked.seconds
        started = time.perf_counter()
        truth = [(m, t) for m, t, _ in graph.brute_force_frontier()]
        brute_s += time.perf_counter() - started
        equal += [(p.memory, p.time) for p in tracked.points] == truth and tracked.exact
        feasible += bool(truth)
        conditioned += tracked.eliminations.get("conditioned", 0)
        weighted = frontier.track(graph, heuristic="weighted")
        if not weighted.exact:
            ran += 1
            kept += [(p.memory, p.time) for p in weighted.points] == truth
    return ExactRow(count, equal, feasible, conditioned, ft_s / count, brute_s / count, ran, kept)


def exact_table(row: ExactRow) -> str:
    return "\n".join(
        [
            f"Exact FT (heuristic=None: conditioning) against brute force on {row.graphs} "
            f"random cost graphs (seed {SEED + 1}, up to 7 nodes and 16 edges); seconds are "
            "wall time here. Beside it, FT with heuristic=weighted on the graphs where it "
            "eliminated heuristically:",
            "| graphs | with a strategy | exact FT equal | nodes conditioned "
            "| FT ms/graph | brute force ms/graph | weighted FT: heuristic ran | still equal |",
            "| ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
            f"| {row.graphs} | {row.feasible} | {row.equal} | {row.conditioned} "
            f"| {row.ft_s * 1e3:.3f} | {row.brute_s * 1e3:.3f} | {row.heuristic_ran} "
            f"| {row.heuristic_equal} |",
        ]
    )


# ------------------------------------------------------------------ driver


TABLES = ("tensoropt", "flexflow", "greedy", "exact")


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(TENSOROPT_MODELS), help="TensorOpt's")
    parser.add_argument("--flexflow", default=",".join(SEARCH_MODELS), help="FlexFlow's")
    parser.add_argument("--machine", default=FLEXFLOW_MACHINE, help="preset of table 2")
    parser.add_argument("--devices", type=int, default=FLEXFLOW_DEVICES, help="of table 2")
    parser.add_argument("--budget", type=int, default=BUDGET, help="mcmc proposals")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per mcmc")
    parser.add_argument("--ilp-timeout", type=float, default=ILP_TIMEOUT, help="seconds per ILP")
    parser.add_argument(
        "--ft-timeout", type=float, default=FT_TIMEOUT, help="the anchored FT's deadline, s"
    )
    parser.add_argument("--graphs", type=int, default=GRAPHS, help="random graphs of 3 and 4")
    parser.add_argument("--heuristic", default="weighted", choices=("memory", "time", "weighted"))
    parser.add_argument("--max-points", type=int, default=None, help="FT's thinning")
    parser.add_argument("--skip", default="", help=f"tables to skip: {','.join(TABLES)}")
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"vgg16, candle_uno, budget <= {QUICK_BUDGET}, {QUICK_GRAPHS} graphs (smoke test)",
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.flexflow = [m for m in args.flexflow.split(",") if m]
    for given, known in ((args.models, TENSOROPT_MODELS), (args.flexflow, SEARCH_MODELS)):
        unknown = [m for m in given if m not in known]
        if unknown:
            parser.error(f"unknown model {', '.join(unknown)}; known: {', '.join(known)}")
    args.skip = set(args.skip.split(",")) - {""}
    if args.skip - set(TABLES):
        parser.error(f"--skip takes {','.join(TABLES)}, got {','.join(sorted(args.skip))}")
    args.real = list(REAL_STEPS)
    if args.quick:
        args.models, args.flexflow = list(QUICK_TENSOROPT), list(QUICK_FLEXFLOW)
        args.budget = min(args.budget, QUICK_BUDGET)
        args.timeout = min(args.timeout, QUICK_TIMEOUT)
        args.ilp_timeout = min(args.ilp_timeout, QUICK_ILP_TIMEOUT)
        args.ft_timeout = min(args.ft_timeout, QUICK_FT_TIMEOUT)
        args.graphs = min(args.graphs, QUICK_GRAPHS)
        args.real = list(QUICK_REAL_STEPS)
    return args


@dataclass
class Results:
    tensoropt: list[TensorOptRow] = field(default_factory=list)
    flexflow: list[FlexFlowModel] = field(default_factory=list)
    greedy: GreedySummary | None = None
    real: list[GreedyRow] = field(default_factory=list)
    exact: ExactRow | None = None


def main(argv: Sequence[str] | None = None) -> Results:
    args = parse_args(argv)
    print(header())
    print("# times and peaks are simulated on the named preset or estimated by the cost graph;")
    print("# 'seconds'/'s' of searches and builds are wall time on this machine\n")
    results = Results()
    if "tensoropt" not in args.skip:
        for name in args.models:
            started = time.perf_counter()
            results.tensoropt.append(tensoropt_row(name, args))
            print(f"  {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        print(f"TensorOpt's models, training steps (sgd), {TENSOROPT_DEVICES} devices:")
        print(tensoropt_tables(results.tensoropt, args))
    if "flexflow" not in args.skip:
        for name in args.flexflow:
            started = time.perf_counter()
            results.flexflow.append(flexflow_model(name, args))
            print(f"  {name}: {time.perf_counter() - started:.1f} s", file=sys.stderr, flush=True)
        print(
            f"\nFlexFlow's models, training steps (sgd); mcmc budget={args.budget} "
            f"timeout={args.timeout:g} seed={SEED}, ilp timeout={args.ilp_timeout:g}:"
        )
        print(flexflow_table(results.flexflow, args))
    if "greedy" not in args.skip:
        results.greedy = greedy_random(args.graphs)
        results.real = [greedy_real(name, args.ilp_timeout) for name in args.real]
        print()
        print(greedy_tables(results.greedy, results.real))
    if "exact" not in args.skip:
        results.exact = exact_ft(args.graphs)
        print()
        print(exact_table(results.exact))
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return results


if __name__ == "__main__":
    main()
