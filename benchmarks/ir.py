"""How fast is the IR itself? Build, verify, print, parse, `dag` conversion and
`tasoc opt` end to end, on synthetic graphs of 1k and 10k ops.

    .venv/bin/python benchmarks/ir.py [--sizes 1000 10000] [--repeat 5] [--profile 10000]
    .venv/bin/python benchmarks/ir.py --compare 10000 [--base /tmp/base] [--rounds 7]

Every in-process phase is timed `--repeat` times after a full collection, with
Python's cyclic garbage collector on (what a user gets) and off (what the code
itself costs: the difference is collector passes over the large heap a module is);
the table shows the median and the min-max range. `tasoc opt FILE -o OUT` runs as a
subprocess, so its time includes interpreter start-up and imports (shown on its own
by running it on a one-op file). `--profile N` adds, for an N-op graph, where each
phase spends its time: self time by origin (our `tasoc` code, xDSL, the rest) and
the functions with the most self time.

`--compare N` measures side by side instead, in rounds that alternate the sides so
that a busy machine slows both alike: the `graph` ops' text in the short form (result
types only) against the older functional-type form, in-process parse and `tasoc opt
FILE -o OUT`; with `--base CHECKOUT` (another checkout of tasoc, e.g. a `git worktree`
of the previous commit, run with this interpreter and `PYTHONPATH=CHECKOUT`) every
phase of the table as well, there against here. Cells are medians with the
interquartile range; the load average before and after is printed. Results and their
analysis are recorded in docs/benchmarks.md; this script only measures.
"""

from __future__ import annotations

import argparse
import cProfile
import datetime
import gc
import io
import json
import os
import platform
import pstats
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import version
from pathlib import Path
from unittest import mock

from synthetic import synthetic_graph
from xdsl.context import Context
from xdsl.dialects.builtin import Builtin, ModuleOp
from xdsl.dialects.func import Func
from xdsl.irdl.declarative_assembly_format import FormatProgram
from xdsl.parser import Parser
from xdsl.printer import Printer

from tasoc.ir import graph as G
from tasoc.ir.dag import from_module, to_module

SEED = 0
BIN = Path(sys.executable).parent


@dataclass(frozen=True)
class Timing:
    """Seconds of several runs of one phase."""

    runs: tuple[float, ...]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    def cell(self) -> str:
        return f"{self.median:.3f} ({min(self.runs):.3f}-{max(self.runs):.3f})"


def time_runs(fn: Callable[[], object], repeat: int, collector: bool) -> Timing:
    runs = []
    for _ in range(repeat):
        gc.collect()
        if not collector:
            gc.disable()
        try:
            start = time.perf_counter()
            fn()
            runs.append(time.perf_counter() - start)
        finally:
            gc.enable()
    return Timing(tuple(runs))


def make_context() -> Context:
    ctx = Context()
    for dialect in (Builtin, Func, G.Graph):
        ctx.load_dialect(dialect)
    return ctx


def print_module(module: ModuleOp, generic: bool) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=generic).print_op(module)
    return stream.getvalue()


def parse_module(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


def driver_command(path: Path, output: Path) -> tuple[str, list[str]]:
    """`tasoc opt`, or xDSL's `xdsl-opt` (which loads the graph dialect through the
    entry point) as a clearly labelled stand-in where the driver is not installed."""
    tasoc = BIN / "tasoc"
    if tasoc.exists():
        return "tasoc opt", [str(tasoc), "opt", str(path), "-o", str(output)]
    return "xdsl-opt (stand-in: no tasoc driver)", [
        str(BIN / "xdsl-opt"),
        str(path),
        "-o",
        str(output),
    ]


def run_command(command: list[str]) -> None:
    subprocess.run(command, check=True, stdout=subprocess.DEVNULL)


# ------------------------------------------------------------------- phases


@dataclass
class Workload:
    """One synthetic graph and what the phases need of it, made once."""

    num_ops: int
    module: ModuleOp
    text: str
    generic_text: str
    file: Path

    @classmethod
    def make(cls, num_ops: int, folder: Path) -> Workload:
        module = synthetic_graph(num_ops, SEED)
        text = print_module(module, generic=False)
        file = folder / f"synthetic-{num_ops}.mlir"
        file.write_text(text)
        return cls(num_ops, module, text, print_module(module, generic=True), file)

    def phases(self) -> dict[str, Callable[[], object]]:
        dag = from_module(self.module)
        return {
            "build (GraphBuilder)": lambda: synthetic_graph(self.num_ops, SEED),
            "verify": self.module.verify,
            "print (custom form)": lambda: print_module(self.module, generic=False),
            "print (generic form)": lambda: print_module(self.module, generic=True),
            "parse (custom form)": lambda: parse_module(self.text),
            "parse (generic form)": lambda: parse_module(self.generic_text),
            "dag.from_module": lambda: from_module(self.module),
            "dag.to_module": lambda: to_module(dag),
        }


def measure(sizes: list[int], repeat: int, folder: Path) -> str:
    workloads = [Workload.make(n, folder) for n in sizes]
    rows: dict[str, list[str]] = {}
    for work in workloads:
        for name, phase in work.phases().items():
            on = time_runs(phase, repeat, collector=True)
            off = time_runs(phase, repeat, collector=False)
            rows.setdefault(name, []).extend([on.cell(), off.cell()])
            print(f"  {work.num_ops} ops, {name}: {on.median:.3f} s", file=sys.stderr)
    tiny = folder / "tiny.mlir"
    tiny.write_text(print_module(synthetic_graph(1, SEED), generic=False))
    label, command = driver_command(tiny, folder / "out.mlir")
    startup = time_runs(lambda: run_command(command), repeat, collector=True)
    for work in workloads:
        label, command = driver_command(work.file, folder / "out.mlir")
        timing = time_runs(lambda command=command: run_command(command), repeat, collector=True)
        rows.setdefault(f"`{label} FILE -o OUT` (subprocess)", []).extend([timing.cell(), "-"])
        print(f"  {work.num_ops} ops, {label}: {timing.median:.3f} s", file=sys.stderr)
    rows[f"`{label}` of a 1-op file (start-up)"] = [startup.cell(), "-"] * len(sizes)

    header = ["phase"]
    for n in sizes:
        header += [f"{n:,} ops, GC on", f"{n:,} ops, GC off"]
    lines = [
        "| " + " | ".join(header) + " |",
        "|" + "---|" * len(header),
        *("| " + " | ".join([name, *cells]) + " |" for name, cells in rows.items()),
    ]
    return "\n".join(lines)


def machine() -> str:
    cpu = platform.processor() or "unknown CPU"
    cpuinfo = Path("/proc/cpuinfo")
    if cpuinfo.exists():
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return (
        f"{datetime.date.today()}: {cpu}, {cores} cores usable, {platform.system()} "
        f"{platform.release()}; Python {platform.python_version()}, xDSL {version('xdsl')}"
    )


# ------------------------------------------------------------------ compare

OLDER_FORMAT = "operands attr-dict `:` functional-type(operands, results)"
"""The `graph` ops' text before the short form (constants always wrote only their
result type, `attr-dict : type($result)`)."""
CONSTANT_FORMAT = "attr-dict `:` type($result)"
REPO = Path(__file__).resolve().parent.parent


def print_older_form(module: ModuleOp) -> str:
    """`module` as tasoc printed it before the short form, through xDSL's declarative
    format: the file an older checkout writes and a user may still have."""
    programs: dict[type[G.GraphOp], FormatProgram] = {}

    def print_op(op: G.GraphOp, printer: Printer) -> None:
        if type(op) not in programs:
            definition = op.get_irdl_definition()
            form = OLDER_FORMAT if definition.operands else CONSTANT_FORMAT
            programs[type(op)] = FormatProgram.from_str(form, definition)
        programs[type(op)].print(printer, op)

    with mock.patch.object(G.GraphOp, "print", print_op):
        return print_module(module, generic=False)


def time_once(fn: Callable[[], object]) -> float:
    gc.collect()
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def worker(num_ops: int, older_file: Path) -> None:
    """One round of the in-process phases in this process, whichever checkout
    `PYTHONPATH` gives it, collector on; prints the seconds as JSON."""
    module = synthetic_graph(num_ops, SEED)
    text = print_module(module, generic=False)
    generic_text = print_module(module, generic=True)
    older_text = older_file.read_text()
    dag = from_module(module)
    phases: dict[str, Callable[[], object]] = {
        "build (GraphBuilder)": lambda: synthetic_graph(num_ops, SEED),
        "verify": module.verify,
        "print (the checkout's form)": lambda: print_module(module, generic=False),
        "print (generic form)": lambda: print_module(module, generic=True),
        "parse (the checkout's form)": lambda: parse_module(text),
        "parse (older functional-type form)": lambda: parse_module(older_text),
        "parse (generic form)": lambda: parse_module(generic_text),
        "dag.from_module": lambda: from_module(module),
        "dag.to_module": lambda: to_module(dag),
    }
    print(json.dumps({name: time_once(phase) for name, phase in phases.items()}))


@dataclass(frozen=True)
class Side:
    """A checkout of tasoc to time: its name and the `PYTHONPATH` that selects it."""

    name: str
    path: Path

    def env(self) -> dict[str, str]:
        return {**os.environ, "PYTHONPATH": str(self.path)}

    def opt(self, file: Path, output: Path) -> float:
        """Seconds of `tasoc opt FILE -o OUT` in a fresh interpreter, start-up included."""
        command = [sys.executable, "-m", "tasoc.driver.main", "opt", str(file), "-o", str(output)]
        start = time.perf_counter()
        subprocess.run(command, check=True, stdout=subprocess.DEVNULL, env=self.env())
        return time.perf_counter() - start

    def phases(self, num_ops: int, older_file: Path) -> dict[str, float]:
        command = [sys.executable, __file__, "--worker", str(num_ops), str(older_file)]
        output = subprocess.run(
            command, check=True, capture_output=True, text=True, env=self.env()
        ).stdout
        return json.loads(output)


def spread(runs: list[float]) -> str:
    """Median and interquartile range."""
    low, _, high = statistics.quantiles(runs, n=4, method="inclusive")
    return f"{statistics.median(runs):.3f} [{low:.3f}-{high:.3f}]"


def compare(num_ops: int, rounds: int, base: Path | None, folder: Path) -> str:
    """Every phase (the short and the older form side by side) here, and with `base`
    there too, the sides alternating within each round; a markdown table."""
    module = synthetic_graph(num_ops, SEED)
    short_file, older_file = folder / "short.mlir", folder / "older.mlir"
    short_file.write_text(print_module(module, generic=False))
    older_file.write_text(print_older_form(module))
    tiny = folder / "tiny.mlir"
    tiny.write_text(print_older_form(synthetic_graph(1, SEED)))
    output = folder / "out.mlir"
    here = Side("here", REPO)
    sides = [here] if base is None else [Side("base", base.resolve()), here]
    runs: dict[tuple[str, str], list[float]] = {}

    def record(row: str, side: Side, seconds: float) -> None:
        runs.setdefault((row, side.name), []).append(seconds)

    for round_index in range(rounds):
        print(f"  round {round_index + 1}/{rounds}", file=sys.stderr)
        for side in sides:
            for row, seconds in side.phases(num_ops, older_file).items():
                record(row, side, seconds)
            # An older checkout cannot read the short form; here reads both.
            if side is here:
                record("`tasoc opt FILE -o OUT`, short form", side, side.opt(short_file, output))
            record("`tasoc opt FILE -o OUT`, older form", side, side.opt(older_file, output))
            record("`tasoc opt` of a 1-op file (start-up)", side, side.opt(tiny, output))

    names = [side.name for side in sides]
    rows = list(dict.fromkeys(row for row, name in runs if name == here.name))
    header = ["phase", *(f"{name} (s)" for name in names)]
    if base is not None:
        header.append("here / base")
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for row in rows:
        cells = [spread(runs[row, name]) if (row, name) in runs else "-" for name in names]
        if base is not None:
            if (row, "base") in runs:
                ratio = statistics.median(runs[row, "here"]) / statistics.median(runs[row, "base"])
                cells.append(f"{ratio:.2f}")
            else:
                cells.append("-")
        lines.append("| " + " | ".join([row, *cells]) + " |")
    return "\n".join(lines)


def load_average() -> str:
    return ", ".join(f"{load:.1f}" for load in os.getloadavg())


# ------------------------------------------------------------------ profile


def origin(filename: str) -> str:
    for package in ("tasoc", "xdsl", "benchmarks"):
        if f"{os.sep}{package}{os.sep}" in filename:
            return package
    return "python/builtins"


STEPS = {"parse_module": "parse", "verify": "verify", "print_op": "print"}
"""Functions whose cumulative time splits `tasoc opt` into its steps."""


def profile_call(name: str, fn: Callable[[], object], top: int, steps: bool = False) -> str:
    """Profile one call with the collector off, so that collector pauses (measured in
    the timing table) are not charged to whichever function triggered them.

    Lists self time by origin, the tasoc functions with the most time including their
    callees (leaving out wrappers of nearly the whole call), with `steps` the split
    of `tasoc opt` into parse, verify and print, and the functions with most self time.
    """
    gc.collect()
    gc.disable()
    try:
        profiler = cProfile.Profile()
        start = time.perf_counter()
        profiler.runcall(fn)
        total = time.perf_counter() - start
    finally:
        gc.enable()
    entries = pstats.Stats(profiler).stats  # type: ignore[attr-defined]

    def share(seconds: float) -> str:
        return f"{seconds / total:.0%}"

    by_origin: dict[str, float] = {}
    for (filename, _, _), (_, _, tottime, _, _) in entries.items():
        by_origin[origin(filename)] = by_origin.get(origin(filename), 0.0) + tottime
    ours = sorted(
        (
            (cumtime, function)
            for (filename, _, function), (_, _, _, cumtime, _) in entries.items()
            if origin(filename) == "tasoc" and cumtime < 0.9 * total
        ),
        reverse=True,
    )[:top]
    lines = [
        f"### {name}: {total:.2f} s under the profiler",
        "self time by origin: "
        + ", ".join(f"{k} {share(v)}" for k, v in sorted(by_origin.items(), key=lambda kv: -kv[1])),
        "tasoc functions with their callees: "
        + (", ".join(f"{function} {share(cumtime)}" for cumtime, function in ours) or "none"),
    ]
    if steps:
        split = {
            label: max((v[3] for k, v in entries.items() if k[2] == function), default=0.0)
            for function, label in STEPS.items()
        }
        lines.append("steps: " + ", ".join(f"{k} {share(v)}" for k, v in split.items()))
    for (filename, line, function), (_, calls, tottime, cumtime, _) in sorted(
        entries.items(), key=lambda kv: -kv[1][2]
    )[:top]:
        where = filename.split(f"site-packages{os.sep}")[-1].split(f"main{os.sep}")[-1]
        lines.append(
            f"    {tottime:6.3f} s self {cumtime:6.3f} s cum {calls:8d} calls  "
            f"{where}:{line}({function})"
        )
    return "\n".join(lines)


def profile(num_ops: int, folder: Path, top: int) -> str:
    """Where each in-process phase, and `tasoc opt` run in this process, spends its time."""
    work = Workload.make(num_ops, folder)
    sections = [profile_call(name, phase, top) for name, phase in work.phases().items()]
    try:
        from tasoc.driver.main import main as tasoc_main
    except ImportError:
        sections.append("### tasoc opt: not profiled, the driver is not installed")
    else:
        command = ["opt", str(work.file), "-o", str(folder / "out.mlir")]
        sections.append(
            profile_call("tasoc opt (in process)", lambda: tasoc_main(command), top, steps=True)
        )
    return "\n\n".join(sections)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[1000, 10000])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--profile", type=int, metavar="N", help="also profile an N-op graph")
    parser.add_argument("--top", type=int, default=8, help="functions listed per profile")
    parser.add_argument(
        "--compare", type=int, metavar="N", help="only compare, side by side, on an N-op graph"
    )
    parser.add_argument("--base", type=Path, help="with --compare: a checkout to compare with")
    parser.add_argument("--rounds", type=int, default=7, help="with --compare: alternations")
    parser.add_argument("--worker", nargs=2, metavar=("N", "OLDER_FILE"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker:
        worker(int(args.worker[0]), Path(args.worker[1]))
        return
    print(machine())
    with tempfile.TemporaryDirectory() as folder:
        if args.compare:
            print(f"load average before: {load_average()}")
            print(compare(args.compare, args.rounds, args.base, Path(folder)))
            print(f"load average after: {load_average()}")
            return
        print(measure(args.sizes, args.repeat, Path(folder)))
        if args.profile:
            print()
            print(profile(args.profile, Path(folder), args.top))


if __name__ == "__main__":
    main()
