"""ROC (issue 33): training while the learned partitioner re-partitions, measured.

    .venv/bin/python benchmarks/roc_repartition.py [--graph pubmed] [--devices 8]
        [--steps 20] [--every 5] [--pairs 3]

Writes the issue's program once (`zoo:gcn?graph=GRAPH&layers=2`, `autodiff{adam}`,
`soap-shard{mesh=DEVICES search=roc}`), then runs it in pairs, each run a fresh
`tasoc run --devices DEVICES --steps STEPS --report` process: A without
re-partitioning, B with `--repartition-every EVERY` (`tasoc/driver/repartition.py`),
in alternating order (A B, B A, ...). From each run's report it takes the seconds of
every step but the first of each EVERY-step segment (the first step of a new layout
compiles; A's are left out alike, so both are medians over the same step numbers),
and prints per pair: A's median, B's median before its first re-partition and after
it, and B's re-partitions (vertices moved, padded block rows); then the median and
quartiles over pairs of B-after over A (`paired.PairedRatio`: < 1, re-partitioning
made the steps faster). Measured on fake CPU devices that share this machine's
cores: the load, printed before and after, moves every number.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import PairedRatio
from timing import versions

PIPELINE = (
    "autodiff{{loss=softmax-cross-entropy optimizer=adam lr=0.01}},"
    "soap-shard{{mesh={devices} search=roc}}"
)


def _tasoc(*args: str) -> None:
    command = [sys.executable, "-m", "tasoc.driver.main", *args]
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


def steady_steps(seconds: Sequence[float], every: int) -> list[float]:
    """The steps' seconds without the first of each `every`-step segment (a new
    layout's first step compiles)."""
    return [s for number, s in enumerate(seconds) if number % every]


@dataclass
class Pair:
    """One A/B pair: A's steady median, B's before and after its first re-partition,
    and B's re-partitions (the report's `repartitions`)."""

    plain: float
    before: float
    after: float
    after_plain: float
    repartitions: list[dict[str, Any]]

    @property
    def ratio(self) -> float:
        """B after its first re-partition over A on the same steps."""
        return self.after / self.after_plain


def pair_of(plain: dict[str, Any], repartitioned: dict[str, Any], every: int) -> Pair:
    """A pair's figures from the two runs' reports."""
    a = plain["seconds_per_step"]
    b = repartitioned["seconds_per_step"]
    return Pair(
        plain=statistics.median(steady_steps(a, every)),
        before=statistics.median(steady_steps(b[:every], every)),
        after=statistics.median(steady_steps(b[every:], every)),
        after_plain=statistics.median(steady_steps(a[every:], every)),
        repartitions=repartitioned["repartitions"],
    )


def _ms(seconds: float) -> str:
    return f"{seconds * 1e3:.1f}"


def table(pairs: Sequence[Pair]) -> list[str]:
    """The markdown table of the pairs and the paired ratio line."""
    lines = [
        "| pair | A: no re-partitioning, ms/step | B before (steps 2-EVERY) | B after | "
        "A on B's after-steps | B's re-partitions (moved vertices, block rows) |",
        "| --- | --- | --- | --- | --- | --- |",
    ]
    for number, pair in enumerate(pairs, 1):
        moves = "; ".join(
            f"step {r['step']}: {r['moved_vertices']}, "
            f"{r['block_rows_before']}->{r['block_rows_after']}"
            for r in pair.repartitions
        )
        lines.append(
            f"| {number} | {_ms(pair.plain)} | {_ms(pair.before)} | {_ms(pair.after)} | "
            f"{_ms(pair.after_plain)} | {moves} |"
        )
    ratio = PairedRatio.of([pair.ratio for pair in pairs])
    lines.append("")
    lines.append(f"B after its first re-partition over A, same steps: {ratio}")
    return lines


def main(argv: Sequence[str] | None = None) -> list[Pair]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--graph", default="pubmed")
    parser.add_argument("--devices", type=int, default=8)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--every", type=int, default=5)
    parser.add_argument("--pairs", type=int, default=3)
    args = parser.parse_args(argv)
    print(f"load average before: {os.getloadavg()}; {versions()}")
    pairs = []
    with tempfile.TemporaryDirectory() as folder:
        program = Path(folder) / "g.mlir"
        spec = f"zoo:gcn?graph={args.graph}&layers=2"
        _tasoc("opt", spec, "-p", PIPELINE.format(devices=args.devices), "-o", str(program))
        common = ["run", str(program), "--devices", str(args.devices), "--steps", str(args.steps)]
        for number in range(args.pairs):
            reports = {}
            order = ("plain", "repartitioned") if number % 2 == 0 else ("repartitioned", "plain")
            for kind in order:
                report = Path(folder) / f"{kind}.json"
                extra = ["--repartition-every", str(args.every)] if kind == "repartitioned" else []
                _tasoc(*common, *extra, "--report", str(report))
                reports[kind] = json.loads(report.read_text())
            pairs.append(pair_of(reports["plain"], reports["repartitioned"], args.every))
    for line in table(pairs):
        print(line)
    print(f"load average after: {os.getloadavg()}")
    return pairs


if __name__ == "__main__":
    main()
