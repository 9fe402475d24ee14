"""How long soap-shard's default search needs (issue 31, item 3): the plan
`soap-shard{timeout=SHORT}` writes against the one `soap-shard{timeout=LONG}` writes, on
FlexFlow's models at its shapes, at 64 devices by default.

    .venv/bin/python benchmarks/search_time.py [--models alexnet,rnnlm,...] \
        [--devices 64] [--machine k80-cluster] [--short 10] [--long 600 | --long 0]

Each model is `benchmarks/papers_shapes.py`'s FlexFlow workload (Jia thesis §3.7.1: 64
samples per GPU, AlexNet 256, RNNs unrolled 40 steps), its training step
(`train=sgd`), sharded by the pass with its defaults (`search=auto`, budget 2000,
seed 0, the device's memory as the cap) and two timeouts. Per row: the whole pass's
wall seconds for each (the step built beforehand; the pass's own setting up, search
and simulation of the baselines after it all counted, so a wall time over the
timeout shows), the simulated step each plan runs in (on `--machine`), their ratio,
proposals and why each search stopped, and each run's CPU seconds (what the
load does not stretch). The goal is the ratio <= 1.02 with the short run's wall <=
10 s; a short run that reaches the ratio only because the long one also stopped at
its starts says so in its proposals. Wall time depends on the load (printed before
and after). `--long 0` runs the short pass alone.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from papers_shapes import FLEXFLOW, TRAIN, rows_by_model
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.soap import SoapShardFailed, SoapShardPass

SEED = 0


@dataclass(frozen=True)
class Run:
    """One pass run: its wall seconds and the report's figures."""

    wall: float
    cpu: float
    """CPU seconds of the process meanwhile (`time.process_time`): what a loaded
    machine does not stretch."""
    step: float
    """The written plan's simulated step (seconds)."""
    proposals: int
    stopped: str


@dataclass(frozen=True)
class TimeRow:
    model: str
    ops: int
    short: Run
    long: Run | None
    """None with `--long 0`: the short run alone."""

    @property
    def ratio(self) -> float | None:
        """Short over long step; None without a long run or where neither found a plan."""
        if self.long is None or (math.isinf(self.long.step) and math.isinf(self.short.step)):
            return None
        return self.short.step / self.long.step


def pass_run(step: ModuleOp, devices: int, preset: str, timeout: float) -> Run:
    """The pass with its defaults and `timeout`; a run that finds no plan under the
    device's memory (the pass's one-line error) is a row with no step, its error on
    stderr."""
    copy = step.clone()
    started, cpu = time.perf_counter(), time.process_time()
    with reporting(RunReport()) as report:
        try:
            SoapShardPass(mesh=devices, machine=preset, timeout=timeout, seed=SEED).apply(
                Context(), copy
            )
        except SoapShardFailed as err:
            print(f"timeout={timeout:g}: {err}", file=sys.stderr)
            wall, cpu = time.perf_counter() - started, time.process_time() - cpu
            return Run(wall, cpu, math.inf, 0, "no plan fits")
    wall, cpu = time.perf_counter() - started, time.process_time() - cpu
    section: dict[str, Any] = report.sections["soap-shard"]
    return Run(
        wall,
        cpu,
        section["predicted_seconds"]["plan"],
        int(section.get("proposals") or 0),
        str(section["stopped"]),
    )


def time_row(name: str, args: argparse.Namespace) -> TimeRow:
    step = build_zoo_model(FLEXFLOW[name].spec_at(args.devices) + TRAIN)
    ops = len(dag_module.from_module(step).ops)
    short = pass_run(step, args.devices, args.machine, args.short)
    long = pass_run(step, args.devices, args.machine, args.long) if args.long else None
    return TimeRow(name, ops, short, long)


def table(rows: Sequence[TimeRow], args: argparse.Namespace) -> str:
    lines = [
        f"{args.devices} GPUs of {args.machine}, FlexFlow's shapes; simulated step ms; "
        f"soap-shard defaults with timeout={args.short:g}"
        + (f" and timeout={args.long:g}" if args.long else " (no long run)"),
        "",
        "| model | ops | short ms | long ms | short / long | short wall s | short CPU s "
        "| long wall s | long CPU s | proposals (short / long) | stopped (short / long) |",
        "| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for row in rows:
        s, g = row.short, row.long
        long_ms, long_wall, long_cpu, ratio = (
            ("-", "-", "-", "-")
            if g is None
            else (
                f"{g.step * 1e3:.1f}",
                f"{g.wall:.1f}",
                f"{g.cpu:.1f}",
                "-" if row.ratio is None else f"{row.ratio:.3f}",
            )
        )
        lines.append(
            f"| {row.model} | {row.ops} | {s.step * 1e3:.1f} | {long_ms} | {ratio} "
            f"| {s.wall:.1f} | {s.cpu:.1f} | {long_wall} | {long_cpu} "
            f"| {s.proposals} / {'-' if g is None else g.proposals} "
            f"| {s.stopped} / {'-' if g is None else g.stopped} |"
        )
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> list[TimeRow]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(FLEXFLOW))
    parser.add_argument("--devices", type=int, default=64)
    parser.add_argument("--machine", default="k80-cluster")
    parser.add_argument("--short", type=float, default=10.0)
    parser.add_argument("--long", type=float, default=600.0, help="0: the short run alone")
    args = parser.parse_args(argv)
    return rows_by_model(
        args.models, lambda name: time_row(name, args), lambda rows: table(rows, args)
    )


if __name__ == "__main__":
    main()
