"""The runtime mode's measured peak against the plan's, on a CPU version of each of
SwapAdvisor's models (issue 32's Performance: "the runtime mode's measured peak equals
the plan's on a cpu version of each model").

    .venv/bin/python benchmarks/placement_runtime.py [--models rnn,brnn,...] [--ratios 2,4]
        [--machine v100-swapadvisor] [--keep FOLDER]

For each model of `benchmarks/placement.py` (SwapAdvisor's wresnet, inception_v4,
nasnet, rnn, brnn, and the transformer) at its CPU version (`CPU_MODELS`: the zoo's
architecture, every op kind and the structure of the model, at shapes whose runtime
run takes about a minute on 2 cores) and each memory ratio r: the training step
(`autodiff{optimizer=sgd}`, as placement.py builds it), planned by
`placement{search=belady recompute=on in-place=on capacity=C}` with C the step's peak
without placement but with buffer reuse (`placement.reused_peak`) ÷ r, written to a
file, and run by `tasoc run FILE --mode runtime --check` in its own process. That run
executes the schedule op by op on JAX's CPU device and fails unless (a) its values are
the numpy reference's of the program without placement and (b) the device bytes it
measures after every op are the verifier's replay of the plan
(`backends/jax/placed.py`: "measured" is the bytes of the arrays in JAX's `device`
memory kind among `jax.live_arrays()` after each op, host values lying in
`pinned_host`; the report's `measured_bytes`).

`--machine` is what the pass prices plans on: placement.py's `v100-swapadvisor` by
default; `cpu-1` (this machine, whose runtime runs the plans) makes the pass keep
recomputing plans on these steps, which the V100's link swaps faster than they run
again. `--ratios sa` is SwapAdvisor's own ratio of each model (placement.py's
`SWAPADVISOR_RATIOS`); `--keep` keeps the placed programs and the runs' reports.

A row gives the model, the step's ops, the ratio, the capacity, the plan's peak (the
replay), the measured peak (the run's report), whether the check passed, the ops the
plan runs again (`memory.recompute`), the ops that write over a dying operand
(`memory.in_place`), the bytes swapped in, and the seconds of the run (wall, and the
CPU its process used, which the machine's load does not inflate); the planning's own
seconds are on stderr. Results are recorded in docs/benchmarks.md (issue 32's
seventh round).
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))  # ROOT, below
sys.path.insert(0, str(Path(__file__).resolve().parent))

from placement import MACHINE, model_ratios, reused_peak, training_step
from timing import versions
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.memory import IN_PLACE_ATTR, RECOMPUTE_ATTR, replay
from tasoc.ir.program import entry_function
from tasoc.models.registry import OptionValue
from tasoc.passes.placement import PlacementFailed, PlacementPass
from tasoc.passes.report import RunReport, reporting

CPU_MODELS: dict[str, tuple[dict[str, OptionValue], str]] = {
    "rnn": ({"layers": 2, "hidden": 256, "seq": 8, "batch": 16}, "mse"),
    "brnn": ({"layers": 2, "hidden": 256, "seq": 8, "batch": 16}, "mse"),
    "wresnet": (
        {"depth": 50, "widen": 2, "batch": 2, "image": 32, "width": 0.25},
        "softmax-cross-entropy",
    ),
    "inception_v4": ({"batch": 1, "image": 75, "width": 0.125}, "softmax-cross-entropy"),
    "nasnet": (
        {"repeat": 1, "filters": 16, "stem_filters": 8, "batch": 2, "image": 32, "classes": 10},
        "softmax-cross-entropy",
    ),
    "transformer": ({"layers": 2, "hidden": 64, "heads": 4, "seq": 16, "batch": 2}, "mse"),
}
"""The CPU versions: each model's zoo architecture (the same op kinds and structure as
SwapAdvisor's Table 5.1 model and placement.py's `MODELS`) with fewer layers, cells or
steps and small batches, images and hidden sizes, so that the runtime mode (one
compiled call per distinct op, then the schedule op by op from Python) runs each row
in about a minute on 2 cores. docs/benchmarks.md sets them beside Table 5.1's."""
RATIOS = (2.0, 4.0)
ROOT = Path(__file__).resolve().parent.parent
"""The repository whose tasoc the runs import, as this script does."""


@dataclass
class Row:
    """One model at one ratio: the plan, and what its runtime run measured."""

    model: str
    ops: int
    ratio: float
    capacity: int
    planned_peak: int
    measured_peak: int | None
    equal: bool
    recomputed: int
    in_place: int
    swapped_in: int
    run_seconds: float
    run_cpu_seconds: float
    failure: str = ""
    """Why the run's check failed (the run's last line), or the pass's refusal."""
    refused: bool = False
    """No plan: the pass refused the capacity (below one op's working set), nothing ran."""

    def markdown(self) -> str:
        measured = "-" if self.measured_peak is None else str(self.measured_peak)
        planned = "-" if self.refused else str(self.planned_peak)
        equal = "yes" if self.equal else f"**no**: {self.failure}"
        if self.refused:
            equal = f"- (no plan: {self.failure})"
        return (
            f"| {self.model} | {self.ops} | {self.ratio:g} | {self.capacity} | "
            f"{planned} | {measured} | {equal} | {self.recomputed} | "
            f"{self.in_place} | {self.swapped_in} | {self.run_seconds:.1f} | "
            f"{self.run_cpu_seconds:.1f} |"
        )


HEADER = (
    "| model | step ops | ratio | capacity B | plan's peak B (replay) | measured peak B | "
    "equal | ops recomputed | ops in place | bytes swapped in | run wall s | run CPU s |\n"
    "| --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |"
)


def placed(step: ModuleOp, capacity: int, machine: str) -> tuple[ModuleOp, dict[str, Any]]:
    """`step` planned by the pass under `capacity` for `machine`: the placed program,
    and the pass's report section."""
    copy = step.clone()
    with reporting(RunReport()) as report:
        PlacementPass(  # type: ignore[call-arg]
            search="belady", recompute="on", in_place="on", capacity=capacity, machine=machine
        ).apply(Context(), copy)
    return copy, report.section("placement")


def marked(module: ModuleOp, attribute: str) -> int:
    """How many ops of `@main` carry `attribute`."""
    return sum(attribute in op.attributes for op in entry_function(module).body.block.ops)


def run_checked(path: Path) -> tuple[dict[str, object] | None, str, float, float]:
    """`tasoc run PATH --mode runtime --check` in its own process: its report's
    `placement` section (None if the run failed), the failure's last line, the run's
    wall and CPU seconds."""
    report = path.with_suffix(".json")
    command = [sys.executable, "-m", "tasoc.driver.main", "run", str(path), "--mode", "runtime"]
    command += ["--check", "--report", str(report)]
    path_now = os.environ.get("PYTHONPATH")
    env = os.environ | {"PYTHONPATH": os.pathsep.join([str(ROOT), *filter(None, [path_now])])}
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, check=False, env=env)
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        return None, lines[-1] if lines else f"exit {done.returncode}", wall, cpu
    return json.loads(report.read_text())["placement"], "", wall, cpu


def measure(name: str, step: ModuleOp, ratio: float, peak: int, machine: str, folder: Path) -> Row:
    """`step` at `ratio` (capacity `peak / ratio`) planned for `machine`, written, run
    and checked."""
    capacity = int(peak / ratio)
    ops = sum(1 for _ in entry_function(step).body.block.ops) - 1
    start, cpu = time.perf_counter(), time.process_time()
    try:
        program, section = placed(step, capacity, machine)
    except PlacementFailed as err:
        return Row(name, ops, ratio, capacity, 0, None, False, 0, 0, 0, 0.0, 0.0, str(err), True)
    print(
        f"  {name} x{ratio:g}: planned in {time.process_time() - cpu:.1f} s of CPU, "
        f"{time.perf_counter() - start:.1f} s wall; the plan kept is {section['plan']}'s",
        file=sys.stderr,
    )
    path = folder / f"{name}-x{ratio:g}-{machine}.mlir"
    path.write_text(str(program))
    planned = replay(entry_function(program))
    memory, failure, wall, run_cpu = run_checked(path)
    measured = None if memory is None else int(memory["measured_peak_bytes"])  # type: ignore[call-overload]
    # The run's --check compared every op's bytes; its report's lists are compared again
    # here with this process's replay of the plan, so that a row says yes only on both.
    equal = memory is not None and memory["measured_bytes"] == [planned.start, *planned.live]
    if memory is not None and not equal:
        failure = "the report's measured bytes are not this replay's"
    return Row(
        model=name,
        ops=ops,
        ratio=ratio,
        capacity=capacity,
        planned_peak=planned.peak_bytes,
        measured_peak=measured,
        equal=equal,
        recomputed=marked(program, RECOMPUTE_ATTR),
        in_place=marked(program, IN_PLACE_ATTR),
        swapped_in=int(section["swapped_in_bytes"]),
        run_seconds=wall,
        run_cpu_seconds=run_cpu,
        failure=failure,
    )


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(CPU_MODELS), help="comma-separated")
    parser.add_argument(
        "--ratios", default=",".join(map(str, RATIOS)), help="numbers; sa: SwapAdvisor's own"
    )
    parser.add_argument("--machine", default=MACHINE, help="what the pass prices plans on")
    parser.add_argument("--keep", type=Path, help="a folder to keep the placed programs in")
    args = parser.parse_args(argv)
    print(
        f"# {datetime.datetime.now(datetime.UTC):%Y-%m-%d %H:%M} UTC, {os.cpu_count()} cores, "
        f"load {os.getloadavg()[0]:.2f}, {versions()}; plans priced on {args.machine}"
    )
    rows = []
    with tempfile.TemporaryDirectory() as scratch:
        folder = args.keep or Path(scratch)
        folder.mkdir(parents=True, exist_ok=True)
        for name in args.models.split(","):
            step = training_step(name, CPU_MODELS)
            peak = reused_peak(step)
            print(f"# {name}: peak without placement, with buffer reuse, {peak} B")
            for ratio in model_ratios(name, args.ratios.split(",")):
                rows.append(measure(name, step, ratio, peak, args.machine, folder))
                print(rows[-1].markdown(), flush=True)
    print(HEADER)
    for row in rows:
        print(row.markdown())
    print(f"# {datetime.datetime.now(datetime.UTC):%H:%M} UTC, load {os.getloadavg()[0]:.2f}")
    return rows


if __name__ == "__main__":
    main()
