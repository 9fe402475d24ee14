"""soap-shard's search (issue 16): simulated speedups on FlexFlow's clusters, delta vs
full simulation, MCMC against the exhaustive optimum, and the simulator against this
machine.

    .venv/bin/python benchmarks/soap.py [--models a,b] [--machines k80-cluster,p100-cluster] \
        [--devices 4,8,16] [--budget 100] [--timeout 15] [--reality a,b] [--pairs 8] [--quick]

Four tables, every time but the measured ones *simulated* on the named preset
(`tasoc/cost/machines.py`):

1. **Search, at shrunk shapes.** Each model's training step (`autodiff{optimizer=sgd}`)
   sharded by `soap-shard{machine=M mesh=D search=mcmc budget=B timeout=T seed=0}`:
   the simulated iteration time of data parallel, expert and the search's plan, the
   plan's speedup over each, the pass's seconds and why the search stopped. Shapes are
   the zoo's defaults (the thesis' models) except a fixed global batch of 64 (4 per
   device at 16 devices) and RNNs unrolled 4 steps (`SEARCH_MODELS`), not the
   thesis' 64 per GPU and 40 steps: at 4 per device data parallel drowns in
   communication. `benchmarks/papers_shapes.py` runs the papers' own shapes.
2. **Delta vs full** on one proposal sequence (`--proposals` of a chain from data
   parallel, seed 0): each strategy it simulated, priced by delta simulation (editing
   the task graph, `ShardedStep.set_config`, then `DeltaSimulator.update`) and again
   in full as the thesis defines it (§3.4.2: build the task graph, then simulate), side
   by side; and the simulators alone (an update against `simulate` of the built graph).
3. **Optimality**: a LeNet-like CNN and a 2-step RNNLM (forward programs: a training
   step has far more strategies than `search=exhaustive` enumerates) on `cpu-4`, 4
   devices: MCMC's plan against `search=exhaustive`'s optimum.
4. **Simulator vs reality** on this machine: each model of `--reality` (the reduced
   shapes of `benchmarks/autodiff.py`) in >= 5 strategies (data parallel, expert, every
   op replicated, a random plan, MCMC's plan) on 8 fake CPU devices and the `cpu-8`
   preset: the Spearman rank correlation of simulated against measured step time
   (interleaved samples, median), the collectives the simulated step prices (per kind,
   from its task graph) against the compiled HLO's (`audit()`), the
   IR's bytes against the HLO's, and the simulated per-device peak memory against
   XLA's `compiled.memory_analysis()` (arguments + outputs - aliased + temporaries) of
   the plan compiled with its replaced weights donated (`sim_memory.py`; the timed
   program donates nothing, so its arguments can be passed again).
   Goals (issue 16): same collectives on every plan, bytes within 2 %, memory within 5 %.
"""

from __future__ import annotations

import argparse
import datetime
import math
import os
import random
import statistics
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax

DEVICES = 8
jax.config.update("jax_num_cpu_devices", DEVICES)

from autodiff import MODELS  # noqa: E402
from scipy.stats import spearmanr  # noqa: E402
from shard_checks import hlo_collectives, predicted_collectives, step_of  # noqa: E402
from sim_memory import donated_memory_analysis  # noqa: E402
from timing import interleaved, sampler, versions  # noqa: E402
from xdsl.context import Context  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402
from xdsl.parser import Parser  # noqa: E402

from tasoc.backends.arguments import random_inputs  # noqa: E402
from tasoc.backends.jax.audit import audit  # noqa: E402
from tasoc.backends.jax.sharded import lower_sharded  # noqa: E402
from tasoc.cost.machines import machine  # noqa: E402
from tasoc.driver.sources import make_context  # noqa: E402
from tasoc.ir import dag as dag_module  # noqa: E402
from tasoc.ir.program import entry_function  # noqa: E402
from tasoc.ir.shard_plan import Plan, write_sharded  # noqa: E402
from tasoc.ir.training import training_signature  # noqa: E402
from tasoc.models.registry import OptionValue, get_model  # noqa: E402
from tasoc.passes.report import RunReport, reporting  # noqa: E402
from tasoc.passes.search import Deadline  # noqa: E402
from tasoc.passes.soap import SoapShardFailed, SoapShardPass, mcmc  # noqa: E402
from tasoc.passes.soap.meshes import parse_mesh  # noqa: E402
from tasoc.passes.soap.plan import Problem, complete  # noqa: E402
from tasoc.passes.soap.problem import (  # noqa: E402
    Limits,
    SoapProblem,
    configurations,
)
from tasoc.passes.soap.searches import BASELINES  # noqa: E402
from tasoc.passes.soap.simulated import SimulatedStrategy, copy_plan  # noqa: E402
from tasoc.passes.soap.strategies import STRATEGIES  # noqa: E402
from tasoc.sim.core import paused_gc, simulate  # noqa: E402
from tasoc.sim.parallel import ShardedStep  # noqa: E402

SEARCH_MODELS: dict[str, dict[str, OptionValue]] = {
    "alexnet": {},
    "inception_v3": {"batch": 64},
    "resnet50": {"batch": 64},
    "rnntc": {"seq": 4},
    "rnnlm": {"seq": 4},
    "nmt": {"seq": 4},
    "dlrm": {},
    "candle_uno": {},
}
"""Model -> options over the zoo's defaults (the thesis' shapes): a batch of 64 for the
CNNs whose default is 1 (nothing to split across devices), RNNs unrolled 4 steps."""

MACHINES = ("k80-cluster", "p100-cluster")
DEVICE_COUNTS = (4, 8, 16)
BUDGET, TIMEOUT = 100, 15.0
SEED = 0
REALITY_MODELS = ("dlrm", "candle_uno", "transformer")
PAIRS, QUICK_PAIRS = 8, 2
QUICK_BUDGET = 20
PROPOSALS, QUICK_PROPOSALS = 30, 5
"""Proposals of the chain whose simulations the delta vs full table replays."""
SAMPLE_S = 0.03
"""A timed sample repeats a step until it takes this long."""
OPTIMALITY_MESH = 4
OPTIMALITY_BUDGET = 400

LENET = """
func.func @main(%x: tensor<8x1x28x28xf32>, %c1: tensor<6x1x5x5xf32> {graph.param},
                %c2: tensor<16x6x5x5xf32> {graph.param}, %f1: tensor<256x120xf32> {graph.param},
                %f2: tensor<120x10xf32> {graph.param}) -> tensor<8x10xf32> {
  %a = graph.conv2d %x, %c1 {strides = array<i64: 1, 1>, padding = "valid",
                             activation = "relu", groups = 1 : i64} : tensor<8x6x24x24xf32>
  %b = graph.pool2d %a {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>,
                        padding = "valid"} : tensor<8x6x12x12xf32>
  %c = graph.conv2d %b, %c2 {strides = array<i64: 1, 1>, padding = "valid",
                             activation = "relu", groups = 1 : i64} : tensor<8x16x8x8xf32>
  %d = graph.pool2d %c {kind = "max", kernel = array<i64: 2, 2>, strides = array<i64: 2, 2>,
                        padding = "valid"} : tensor<8x16x4x4xf32>
  %e = graph.reshape %d {shape = array<i64: 8, 256>} : tensor<8x256xf32>
  %f = graph.matmul %e, %f1 : tensor<8x120xf32>
  %g = graph.relu %f : tensor<8x120xf32>
  %y = graph.matmul %g, %f2 : tensor<8x10xf32>
  func.return %y : tensor<8x10xf32>
}
"""
"""LeCun et al.'s LeNet-5 shape (two 5x5 convolutions, two fully connected layers), batch 8."""

RNNLM_2STEP: dict[str, OptionValue] = {
    "layers": 1,
    "hidden": 256,
    "embed": 128,
    "vocab": 2000,
    "seq": 2,
    "batch": 8,
}


def sharded(module: ModuleOp, **options: Any) -> tuple[ModuleOp, dict[str, Any]]:
    """A sharded copy of `module` and the pass's report section."""
    copy = module.clone()
    with reporting(RunReport()) as report:
        SoapShardPass(**options).apply(Context(), copy)
    return copy, report.sections["soap-shard"]


# ------------------------------------------------------------------ 1, 2: the search


@dataclass
class SearchRow:
    model: str
    machine: str
    devices: int
    predicted: dict[str, float | None]
    """Simulated seconds of `plan`, `data-parallel`, `expert`; None for one over each
    device's memory (the preset's): infeasible, never a denominator."""
    seconds: float
    stopped: str
    proposals: int

    @property
    def over_data_parallel(self) -> float | None:
        return self._over("data-parallel")

    @property
    def over_expert(self) -> float | None:
        return self._over("expert")

    def _over(self, baseline: str) -> float | None:
        other, plan = self.predicted[baseline], self.predicted["plan"]
        return None if other is None or plan is None else other / plan


def _ms(seconds: float | None) -> str:
    return "infeasible" if seconds is None else f"{seconds * 1e3:.2f}"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def search_row(
    name: str, step: ModuleOp, preset: str, devices: int, budget: int, timeout: float
) -> SearchRow:
    _, section = sharded(
        step,
        mesh=devices,
        machine=preset,
        search="mcmc",
        budget=budget,
        timeout=timeout,
        seed=SEED,
    )
    return SearchRow(
        name,
        preset,
        devices,
        section["predicted_seconds"],
        section["seconds"],
        section["stopped"],
        section["proposals"],
    )


def search_table(rows: Sequence[SearchRow]) -> str:
    lines = [
        "| model | machine | devices | data parallel ms | expert ms | mcmc ms "
        "| over DP | over expert | search s | stopped (proposals) |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for r in rows:
        p = r.predicted
        lines.append(
            f"| {r.model} | {r.machine} | {r.devices} | {_ms(p['data-parallel'])} "
            f"| {_ms(p['expert'])} | {_ms(p['plan'])} | {_times(r.over_data_parallel)} "
            f"| {_times(r.over_expert)} | {r.seconds:.1f} | {r.stopped} ({r.proposals}) |"
        )
    return "\n".join(lines)


@dataclass
class DeltaRow:
    """One proposal sequence simulated both ways: seconds per simulation, means."""

    model: str
    machine: str
    devices: int
    simulations: int
    delta_s: float
    """Editing the task graph (`set_config`) and the delta update."""
    full_s: float
    """Building the task graph afresh and simulating it (the thesis' full simulation)."""
    update_s: float
    """The delta update alone..."""
    simulate_s: float
    """... and the full simulation of the built graph alone."""


def delta_row(name: str, step: ModuleOp, preset: str, devices: int, proposals: int) -> DeltaRow:
    """A chain of `proposals` from data parallel (seed 0, half of them propagating)
    priced by delta simulation, then every strategy it simulated (proposals and
    reverts alike) simulated again in full, from a task graph built afresh."""
    func = entry_function(step)
    dag = dag_module.from_module(step)
    problem = Problem(dag, parse_mesh(str(devices)), training_signature(func), {})
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    cluster = machine(preset)
    state = SimulatedStrategy.of(problem, plan, cluster, None, memory=False)
    state.normalize()
    choices = {
        node: options
        for node, rule in problem.rules.items()
        if len(options := configurations(rule, problem.mesh)) > 1
    }
    simulated: list[Plan] = []
    spent: list[tuple[float, float]] = [(0.0, 0.0)]
    resimulate = state.resimulate

    def recorded() -> None:  # outside the timed edit and update: copies the plan
        resimulate()
        simulated.append(copy_plan(state.plan))
        spent.append((state.edit_seconds + state.update_seconds, state.update_seconds))

    state.resimulate = recorded  # type: ignore[method-assign]
    full = simulate_only = 0.0
    with paused_gc():  # as the search runs both: a collection is neither's cost
        mcmc.Chain(state, choices, random.Random(SEED), 20.0).run(proposals, Deadline.after(600))
        for edited in simulated:
            start = time.perf_counter()
            fresh = ShardedStep(dag, edited, cluster, mesh=problem.mesh)
            built = time.perf_counter()
            simulate(fresh.graph, memory=False)
            done = time.perf_counter()
            full, simulate_only = full + done - start, simulate_only + done - built
    count = len(simulated)
    return DeltaRow(
        name,
        preset,
        devices,
        count,
        spent[-1][0] / count,
        full / count,
        spent[-1][1] / count,
        simulate_only / count,
    )


def delta_table(rows: Sequence[DeltaRow]) -> str:
    lines = [
        "| model | machine | devices | simulations | delta sims/s | full sims/s | delta vs full "
        "| updates/s | simulations/s | update vs simulation |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        lines.append(
            f"| {r.model} | {r.machine} | {r.devices} | {r.simulations} | {1 / r.delta_s:.1f} "
            f"| {1 / r.full_s:.1f} | {r.full_s / r.delta_s:.2f}x | {1 / r.update_s:.1f} "
            f"| {1 / r.simulate_s:.1f} | {r.simulate_s / r.update_s:.2f}x |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------ 3: optimality


def optimality_rows() -> list[str]:
    """MCMC's simulated time against the exhaustive optimum, one line per program."""
    programs = {
        "LeNet-5 (batch 8)": Parser(make_context(), LENET).parse_module(),
        "RNNLM, 2 steps": get_model("rnnlm").build(**RNNLM_2STEP),
    }
    lines = [
        "| program | strategies | exhaustive ms | exhaustive s | mcmc ms | mcmc s | reached |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- |",
    ]
    for name, program in programs.items():
        options = {"mesh": OPTIMALITY_MESH, "timeout": 600, "seed": SEED}
        try:
            _, exact = sharded(program, search="exhaustive", budget=10**6, **options)
        except SoapShardFailed as err:
            lines.append(f"| {name} | {err} | | | | | |")
            continue
        _, found = sharded(program, search="mcmc", budget=OPTIMALITY_BUDGET, **options)
        best, reached = exact["cost_after"], found["cost_after"]
        lines.append(
            f"| {name} | {exact['strategies']} | {best * 1e3:.4f} | {exact['seconds']:.2f} "
            f"| {reached * 1e3:.4f} | {found['seconds']:.2f} "
            f"| {'yes' if reached <= best * (1 + 1e-9) else 'NO'} |"
        )
    return lines


# ------------------------------------------------------------------ 4: simulator vs reality


@dataclass
class RealityRow:
    model: str
    strategy: str
    simulated_s: float
    measured_s: float
    predicted_counts: dict[str, int]
    """Distinct collectives per kind in the simulated step's task graph."""
    hlo_counts: dict[str, int]
    ir_bytes: int
    hlo_bytes: int
    simulated_memory: int
    """The largest per-device peak of the simulation."""
    xla_memory: int

    @property
    def same_collectives(self) -> bool:
        return self.predicted_counts == self.hlo_counts

    @property
    def bytes_error(self) -> float:
        return abs(self.hlo_bytes - self.ir_bytes) / max(self.ir_bytes, 1)

    @property
    def memory_error(self) -> float:
        return abs(self.simulated_memory - self.xla_memory) / max(self.xla_memory, 1)


def plan_of(problem: Problem, strategy: str, budget: int) -> Plan | None:
    """The plan `strategy` makes on `problem` (deterministic for `SEED`)."""
    if strategy in BASELINES:
        return complete(problem, STRATEGIES[strategy](problem))
    if strategy == "replicated":
        return mcmc.uniform_plan(problem, lambda rule, mesh: {})
    if strategy == "random":
        rng = random.Random(SEED)
        return mcmc.uniform_plan(problem, lambda rule, mesh: rng.choice(configurations(rule, mesh)))
    baselines = {name: complete(problem, STRATEGIES[name](problem)) for name in BASELINES}
    searched = SoapProblem(problem, machine(f"cpu-{DEVICES}"))
    return mcmc.search(searched, baselines, Limits(budget, Deadline.after(120), SEED)).best


def reality_rows(name: str, strategies: Sequence[str], pairs: int, budget: int) -> list[RealityRow]:
    step = step_of(name, MODELS[name][0])
    args = random_inputs(step, SEED)
    cpu = machine(f"cpu-{DEVICES}")
    mesh = parse_mesh(DEVICES)
    rows, samplers = [], []
    for strategy in strategies:
        module = step.clone()
        dag = dag_module.from_module(module)
        problem = Problem(dag, mesh, training_signature(entry_function(module)), {})
        plan = plan_of(problem, strategy, budget)
        if plan is None:
            print(f"  {name} {strategy}: no such plan", file=sys.stderr)
            continue
        simulated = SimulatedStrategy.of(problem, plan, cpu, None)
        write_sharded(module, dag, plan, mesh)
        program = lower_sharded(module)
        found = audit(module, program)
        analysis = donated_memory_analysis(module)
        xla_memory = (
            analysis.argument_size_in_bytes
            + analysis.output_size_in_bytes
            - analysis.alias_size_in_bytes
            + analysis.temp_size_in_bytes
        )
        device_args = program.device_args(args)
        samplers.append(sampler(lambda program=program, a=device_args: program.fn(*a), SAMPLE_S))
        rows.append(
            RealityRow(
                name,
                strategy,
                simulated.time,
                math.nan,
                predicted_collectives(simulated),
                hlo_collectives(found),
                sum(r.asked_bytes for r in found.rows),
                sum(r.found_bytes for r in found.rows),
                simulated.memory,
                xla_memory,
            )
        )
        print(f"  {name} {strategy}: compiled", file=sys.stderr, flush=True)
    for row, samples in zip(rows, interleaved(samplers, pairs), strict=True):
        row.measured_s = statistics.median(samples)
    return rows


def rank_correlation(rows: Sequence[RealityRow]) -> float:
    """Spearman's rho of simulated against measured step time."""
    return float(spearmanr([r.simulated_s for r in rows], [r.measured_s for r in rows])[0])


def reality_table(rows: Sequence[RealityRow]) -> str:
    lines = [
        "| model | strategy | simulated ms | measured ms | collectives: simulated (HLO) "
        "| same | IR bytes (HLO) | bytes err | peak memory: simulated (XLA) | mem err |",
        "| --- | --- | ---: | ---: | --- | --- | ---: | ---: | ---: | ---: |",
    ]
    for r in rows:
        kinds = sorted({*r.predicted_counts, *r.hlo_counts})
        counts = "; ".join(
            f"{k} {r.predicted_counts.get(k, 0)} ({r.hlo_counts.get(k, 0)})" for k in kinds
        )
        lines.append(
            f"| {r.model} | {r.strategy} | {r.simulated_s * 1e3:.3f} | {r.measured_s * 1e3:.3f} "
            f"| {counts or 'none'} | {'yes' if r.same_collectives else 'NO'} "
            f"| {r.ir_bytes} ({r.hlo_bytes}) | {r.bytes_error:.1%} "
            f"| {r.simulated_memory} ({r.xla_memory}) | {r.memory_error:.1%} |"
        )
    return "\n".join(lines)


# ------------------------------------------------------------------ driver


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(SEARCH_MODELS), help="comma-separated")
    parser.add_argument("--machines", default=",".join(MACHINES), help="comma-separated presets")
    parser.add_argument("--devices", default=",".join(map(str, DEVICE_COUNTS)))
    parser.add_argument("--budget", type=int, default=BUDGET, help="mcmc proposals")
    parser.add_argument("--timeout", type=float, default=TIMEOUT, help="seconds per search")
    parser.add_argument("--reality", default=",".join(REALITY_MODELS), help="cpu-8 models")
    parser.add_argument("--pairs", type=int, default=None, help=f"timed rounds ({PAIRS})")
    parser.add_argument("--proposals", type=int, default=PROPOSALS, help="delta vs full")
    parser.add_argument(
        "--skip", default="", help="tables to skip: search,delta,optimality,reality"
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help=f"{QUICK_PAIRS} rounds, budget <= {QUICK_BUDGET} (smoke test)",
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    args.reality = [m for m in args.reality.split(",") if m]
    unknown = [m for m in {*args.models, *args.reality} if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {', '.join(sorted(unknown))}; known: {', '.join(MODELS)}")
    try:
        args.devices = [int(d) for d in args.devices.split(",")]
    except ValueError:
        parser.error(f"--devices must be comma-separated integers, got {args.devices!r}")
    args.machines = args.machines.split(",")
    args.skip = set(args.skip.split(",")) - {""}
    return args


@dataclass
class Results:
    search: list[SearchRow]
    delta: list[DeltaRow]
    optimality: list[str]
    reality: list[RealityRow]
    correlation: dict[str, float]


def main(argv: Sequence[str] | None = None) -> Results:
    args = parse_args(argv)
    pairs = args.pairs or (QUICK_PAIRS if args.quick else PAIRS)
    budget = min(args.budget, QUICK_BUDGET) if args.quick else args.budget
    reality_strategies = ("data-parallel", "expert", "replicated", "random", "mcmc")
    load = os.getloadavg()
    print(f"# {datetime.date.today()}, {os.cpu_count()} cores, load {load[0]:.2f}, {versions()}")
    print("# every ms below but 'measured' is simulated on the named preset\n")
    results = Results([], [], [], [], {})
    if "search" not in args.skip:
        for name in args.models:
            step = step_of(name, SEARCH_MODELS.get(name, MODELS[name][0]))
            for preset in args.machines:
                for devices in args.devices:
                    row = search_row(name, step, preset, devices, budget, args.timeout)
                    results.search.append(row)
                    print(f"  {name} {preset} {devices}: {row.seconds:.1f} s", file=sys.stderr)
        print(
            f"MCMC (budget={budget} timeout={args.timeout:g} seed={SEED}), simulated, "
            "shrunk shapes (global batch 64, RNNs 4 steps):"
        )
        print(search_table(results.search))
    if "delta" not in args.skip:
        proposals = min(args.proposals, QUICK_PROPOSALS) if args.quick else args.proposals
        for name in args.models:
            step = step_of(name, SEARCH_MODELS.get(name, MODELS[name][0]))
            for preset in args.machines:
                for devices in args.devices:
                    results.delta.append(delta_row(name, step, preset, devices, proposals))
                    print(f"  {name} {preset} {devices}: delta vs full", file=sys.stderr)
        print(
            f"\nDelta vs full simulation, {proposals} proposals from data parallel (seed {SEED}):"
        )
        print(delta_table(results.delta))
    if "optimality" not in args.skip:
        results.optimality = optimality_rows()
        print(f"\nOptimality on cpu-{OPTIMALITY_MESH}, {OPTIMALITY_MESH} devices, simulated:")
        print("\n".join(results.optimality))
    if "reality" not in args.skip:
        for name in args.reality:
            rows = reality_rows(name, reality_strategies, pairs, budget)
            results.reality += rows
            results.correlation[name] = rank_correlation(rows)
        print(f"\nSimulator (cpu-{DEVICES}) vs {DEVICES} fake CPU devices ({pairs} rounds):")
        print(reality_table(results.reality))
        for name, rho in results.correlation.items():
            print(f"  {name}: Spearman rho {rho:.2f}")
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return results


if __name__ == "__main__":
    main()
