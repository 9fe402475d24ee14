"""Import time of ONNX exports of 10,000 nodes and more (issue 20: under 5 s on 2 cores).

    .venv/bin/python benchmarks/onnx_import.py [--models bert,gpt2,shufflenet_v2] [--nodes 10000] \
        [--repeat 7] [--profile] [--top 15] [--quick]

Each model is one of `tasoc.models.exported` (written as `torch.onnx.export` writes
it: Constant nodes, Shape -> Gather -> Concat chains folded at import, weights named
`onnx::MatMul_<n>`), made deep enough to hold `--nodes` nodes: BERT and GPT-2 get
more layers, ShuffleNet v2 more units per stage. Tensors are tiny (hidden 32, 32x32
images), so this measures the importer, not the size of the weights. The model is
saved to a file, and `import_onnx(path)` (reading, checking, folding, building and
verifying the module) is timed `--repeat` times after one untimed warm-up, the
collector on as a user has it; the table gives the median with the interquartile
range and the nodes imported per second. A model that does not import is listed
with its one-line error. The load average is printed before and after: on a shared
2-core machine the times scale with it. `--profile` adds, per model, one import
under cProfile with the collector off: the functions with the most self time and
tasoc's functions with the most time including their callees.

Results are recorded in docs/benchmarks.md; this script only measures.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import math
import os
import platform
import pstats
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path

import onnx

from tasoc.backends.onnx import OnnxImportError, import_onnx
from tasoc.models.exported import EXPORTED_MODELS

TEXT = {"batch": 1, "seq": 16, "hidden": 32, "heads": 2, "vocab": 100, "max_positions": 32}

MODELS: dict[str, tuple[str, Callable[[int], onnx.ModelProto]]] = {
    "bert": (
        "layers",
        lambda depth: EXPORTED_MODELS["bert"](**TEXT, layers=depth, intermediate=64),
    ),
    "gpt2": ("layers", lambda depth: EXPORTED_MODELS["gpt2"](**TEXT, layers=depth)),
    "shufflenet_v2": (
        "units per stage",
        lambda depth: EXPORTED_MODELS["shufflenet_v2"](
            image=32, channels=(8, 16, 16, 16, 32), repeats=(depth,) * 3, classes=10
        ),
    ),
}
"""Benchmark models by name: what their depth counts, and the model of a depth."""

GOAL_S = 5.0
REPEAT = 7


def deep_enough(name: str, nodes: int) -> tuple[int, onnx.ModelProto]:
    """The shallowest version of model `name` with at least `nodes` nodes (nodes grow
    linearly with depth), and its depth."""
    build = MODELS[name][1]
    one, two = (len(build(depth).graph.node) for depth in (1, 2))
    depth = max(1, 1 + math.ceil((nodes - one) / (two - one)))
    return depth, build(depth)


@dataclass
class Row:
    """One model's import times."""

    model: str
    depth: int
    nodes: int
    initializers: int
    megabytes: float
    runs: tuple[float, ...] = ()
    error: str | None = None

    def markdown(self) -> str:
        what = f"{self.model} ({self.depth} {MODELS[self.model][0]})"
        sizes = f"{self.nodes:,} | {self.initializers:,} | {self.megabytes:.1f}"
        if self.error is not None:
            return f"| {what} | {sizes} | does not import: {self.error} | - | - |"
        q1, median, q3 = statistics.quantiles(self.runs, n=4, method="inclusive")
        goal = "met" if median < GOAL_S else "missed"
        return (
            f"| {what} | {sizes} | {median:.2f} [{q1:.2f}-{q3:.2f}] | "
            f"{self.nodes / median:,.0f} | {goal} |"
        )


HEADER = (
    "| model | nodes | initializers | file MB | import s, median [IQR] | nodes/s | < 5 s |\n"
    "| --- | ---: | ---: | ---: | --- | ---: | --- |"
)


def measure(name: str, nodes: int, repeat: int, folder: Path) -> Row:
    depth, model = deep_enough(name, nodes)
    path = folder / f"{name}.onnx"
    onnx.save(model, path)
    row = Row(
        name,
        depth,
        len(model.graph.node),
        len(model.graph.initializer),
        path.stat().st_size / 1e6,
    )
    try:
        import_onnx(path)  # warm-up: caches of op schemas, lazy imports
    except OnnxImportError as err:
        row.error = str(err)
        return row
    runs = []
    for _ in range(repeat):
        gc.collect()
        start = time.perf_counter()
        import_onnx(path)
        runs.append(time.perf_counter() - start)
    row.runs = tuple(runs)
    return row


def profile(path: Path, top: int) -> str:
    """One import under cProfile, the collector off so that its pauses are not charged
    to whichever function was running."""
    gc.collect()
    gc.disable()
    try:
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(import_onnx, path)
        total = time.perf_counter() - start
    finally:
        gc.enable()
    entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def where(filename: str, line: int, function: str) -> str:
        short = filename.split(f"site-packages{os.sep}")[-1].split(
            f"{Path(__file__).resolve().parents[1]}{os.sep}"
        )[-1]
        return f"{short}:{line}({function})"

    by_self = sorted(entries.items(), key=lambda kv: -kv[1][2])[:top]
    ours = sorted(
        (
            (stats[3], key)
            for key, stats in entries.items()
            if f"{os.sep}tasoc{os.sep}" in key[0] and stats[3] < 0.9 * total
        ),
        reverse=True,
    )[:top]
    lines = [f"{total:.2f} s under the profiler; most self time:"]
    lines += [
        f"    {stats[2]:6.3f} s self {stats[3]:6.3f} s cum {stats[1]:7d} calls  {where(*key)}"
        for key, stats in by_self
    ]
    lines.append("tasoc functions with their callees:")
    lines += [
        f"    {cumtime:6.3f} s ({cumtime / total:.0%})  {where(*key)}" for cumtime, key in ours
    ]
    return "\n".join(lines)


def load_average() -> str:
    return ", ".join(f"{load:.2f}" for load in os.getloadavg())


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    for line in (
        Path("/proc/cpuinfo").read_text().splitlines() if Path("/proc/cpuinfo").exists() else []
    ):
        if line.startswith("model name"):
            cpu = line.split(":", 1)[1].strip()
            break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    packages = ", ".join(f"{p} {version(p)}" for p in ("onnx", "xdsl", "numpy"))
    return (
        f"{datetime.date.today()}: {cpu}, {cores} cores usable, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, {packages}"
    )


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--nodes", type=int, default=10_000, help="nodes at least, per model")
    parser.add_argument("--repeat", type=int, default=REPEAT, help="timed imports per model")
    parser.add_argument("--profile", action="store_true", help="also profile one import each")
    parser.add_argument("--top", type=int, default=15, help="functions listed per profile")
    parser.add_argument("--quick", action="store_true", help="300 nodes, 2 runs (smoke test)")
    args = parser.parse_args(argv)
    nodes, repeat = (300, 2) if args.quick else (args.nodes, args.repeat)
    names = args.models.split(",")
    unknown = [name for name in names if name not in MODELS]
    if unknown:
        parser.error(f"unknown models {', '.join(unknown)} (known: {', '.join(MODELS)})")
    print(f"# {machine()}")
    print(f"# load average (1, 5, 15 min) before: {load_average()}")
    rows = []
    with tempfile.TemporaryDirectory(prefix="tasoc-bench-onnx-") as folder:
        for name in names:
            rows.append(measure(name, nodes, repeat, Path(folder)))
            print(f"  {name}: done", file=sys.stderr, flush=True)
        print(f"# load average after: {load_average()}")
        print(HEADER)
        for row in rows:
            print(row.markdown())
        if args.profile:
            for row in rows:
                if row.error is None:
                    print(f"\n### {row.model}, {row.nodes:,} nodes")
                    print(profile(Path(folder) / f"{row.model}.onnx", args.top))
    return rows


if __name__ == "__main__":
    main()
