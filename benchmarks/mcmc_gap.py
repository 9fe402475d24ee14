"""MCMC against the ILP at FlexFlow's shapes (issue 31, item 1): how far `search=mcmc`
alone ends from the ILP's plan, and what `search=auto` (MCMC from the ILP's plan too)
writes, on the same step and machine.

    .venv/bin/python benchmarks/mcmc_gap.py [--models alexnet,rnnlm,...] [--devices 16] \
        [--machine p100-cluster] [--budget 2000] [--timeout 60] [--ilp-timeout 60] [--seed 0]

Each model is `benchmarks/papers_shapes.py`'s FlexFlow workload (Jia thesis §3.7.1: 64
samples per GPU, AlexNet 256, RNNs unrolled 40 steps), its training step
(`train=sgd`) posed as soap-shard poses it (the device's memory as the cap). Three
searches, each with the pass's limits (`--budget` proposals, `--timeout` x 0.8 s, as
`soap-shard{timeout=T}` gives its search): the ILP (`search=ilp`, `--ilp-timeout`),
MCMC from the baselines and Spartan's tiling (`search=mcmc`) and `search=auto`. Every
time is *simulated* on `--machine`; the search seconds are wall time here (state the
load). Per row: the simulated step of each, MCMC's gap to the ILP ((mcmc - ilp) / ilp),
proposals made (of them grouped and guided, `mcmc.py`), how MCMC stopped, which start
its plan came from, and the CPU seconds of each search (`time.process_time`: what the
proposals cost, less dependent on the machine's load than its wall seconds).
"""

from __future__ import annotations

import argparse
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

from papers_shapes import FLEXFLOW, TRAIN, rows_by_model

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.passes.search import Deadline, SearchOutcome
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.problem import Limits, SoapProblem
from tasoc.passes.soap.profile import SEARCH_SHARE
from tasoc.passes.soap.searches import baseline_plans, run_search

SEED = 0
"""The searches' seed unless `--seed` says otherwise."""


@dataclass(frozen=True)
class GapRow:
    model: str
    ops: int
    ilp_s: float
    """The ILP plan's simulated step."""
    mcmc: SearchOutcome
    auto: SearchOutcome
    seconds: tuple[float, ...]
    """Wall seconds of the ILP, MCMC and auto."""
    cpu: tuple[float, ...]
    """CPU seconds of the ILP, MCMC and auto (this process)."""

    @property
    def gap(self) -> float:
        return self.mcmc.cost_after / self.ilp_s - 1


def gap_row(name: str, devices: int, preset: str, args: argparse.Namespace) -> GapRow:
    step = build_zoo_model(FLEXFLOW[name].spec_at(devices) + TRAIN)
    dag = dag_module.from_module(step)
    program = Problem(dag, parse_mesh(str(devices)), training_signature(entry_function(step)), {})
    cluster = machine(preset)
    problem = SoapProblem(program, cluster, int(cluster.device.memory_bytes))
    baselines, _ = baseline_plans(program)
    seconds, cpu = [], []
    outcomes = []
    for search, budget, timeout in (
        ("ilp", 1, args.ilp_timeout),
        ("mcmc", args.budget, args.timeout * SEARCH_SHARE),
        ("auto", args.budget, args.timeout * SEARCH_SHARE),
    ):
        started, processed = time.perf_counter(), time.process_time()
        outcomes.append(
            run_search(
                search, problem, baselines, Limits(budget, Deadline.after(timeout), args.seed)
            )
        )
        seconds.append(time.perf_counter() - started)
        cpu.append(time.process_time() - processed)
    ilp, mcmc, auto = outcomes
    return GapRow(name, len(dag.ops), ilp.cost_after, mcmc, auto, tuple(seconds), tuple(cpu))


def table(rows: Sequence[GapRow], args: argparse.Namespace) -> str:
    lines = [
        f"{args.devices} GPUs of {args.machine}, FlexFlow's shapes; simulated ms; search "
        f"budget {args.budget} proposals, timeout {args.timeout} s x {SEARCH_SHARE}, "
        f"seed {args.seed}",
        "",
        "| model | ops | ilp ms | mcmc ms | gap | proposals (grouped / guided) | stopped "
        "| found by | auto ms | auto found by | s (ilp / mcmc / auto) | CPU s |",
        "| --- | ---: | ---: | ---: | ---: | ---: | --- | --- | ---: | --- | --- | --- |",
    ]
    for row in rows:
        mcmc, auto = row.mcmc, row.auto
        lines.append(
            f"| {row.model} | {row.ops} | {row.ilp_s * 1e3:.1f} | {mcmc.cost_after * 1e3:.1f} "
            f"| {row.gap:+.1%} | {mcmc.details['proposals']} ({mcmc.details['grouped_proposals']}"
            f" / {mcmc.details['guided_proposals']}) | {mcmc.stopped} "
            f"| {mcmc.details['found_by']} | {auto.cost_after * 1e3:.1f} "
            f"| {auto.details['found_by']} | {' / '.join(f'{s:.0f}' for s in row.seconds)} "
            f"| {' / '.join(f'{s:.0f}' for s in row.cpu)} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[GapRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(FLEXFLOW))
    parser.add_argument("--devices", type=int, default=16)
    parser.add_argument("--machine", default="p100-cluster")
    parser.add_argument("--budget", type=int, default=2000)
    parser.add_argument("--timeout", type=float, default=60.0)
    parser.add_argument("--ilp-timeout", type=float, default=60.0)
    parser.add_argument("--seed", type=int, default=SEED)
    args = parser.parse_args(argv)
    return rows_by_model(
        args.models,
        lambda name: gap_row(name, args.devices, args.machine, args),
        lambda rows: table(rows, args),
    )


if __name__ == "__main__":
    main()
