"""soap-shard priced with placement (issue 28): at per-device memory caps under data
parallel's peak, the best sharded plan that fits without swapping, the search that prices
swapping (`place=belady`), and data parallel with swapping, simulated on TensorOpt's 16
V100s (`v100-tensoropt`).

    .venv/bin/python benchmarks/joint.py [--models resnet50,transformer,rnnlm] \
        [--ratios 1,0.5,0.25] [--budget 1000] [--timeout 3600] [--quick | --measured]

For each model's training step (zoo specs `MODELS`, `train=sgd`; FlexFlow's 64 samples
per GPU, so batch 1024 on 16 GPUs), `soap-shard{mesh=16 machine=v100-tensoropt
search=data-parallel}` gives data parallel's simulated per-device peak P. At each ratio
r the cap is r·P and a row gives, every time *simulated* on the preset:

- (a) `search=mcmc memory-cap=cap`: the fastest plan the search finds that fits
  without swapping, or "none fits" (infeasible, never a number);
- (b) `search=mcmc memory-cap=cap place=belady`: the fastest plan with swapping's stall
  priced for every strategy over the cap (`soap-shard`'s `predicted_seconds` include
  it), and whether the plan swaps;
- (c) data parallel + placement: data parallel priced by (b)'s run with Belady's swaps
  on the same simulator (its `predicted_seconds["data-parallel"]`), or "none fits";
- the speedups of (b) over (c) and over (a), only where the denominator is feasible;
- how each search stopped and after how many proposals (a time goal met by a timeout
  is not met, DESIGN.md §7), and each pass's wall time on this machine.

Every search has seed 0, `--budget` proposals and a `--timeout` meant to be large
enough that it stops on budget. `--measured` makes the table measured here instead:
the same three steps at small shapes (`MEASURED_MODELS`, titled as such) on `cpu-8`,
each (b) plan placed by `placement{search=belady}` within its cap and run op by op on
8 fake devices (`tasoc run --mode runtime --check`): the per-device peak measured
against the plan's replay, row by row. `--quick` runs a tiny transformer on `cpu-4` (4
devices) with a budget of 8 (smoke test: tests/test_bench_joint.py). Results are
recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import io
import json
import math
import os
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from parallel import versions
from soap import sharded
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.passes.placement import PlacementFailed, PlacementPass
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.search import speedup
from tasoc.passes.soap import SoapShardFailed
from tasoc.passes.soap.swap_pricing import Placer

MODELS = {
    "resnet50": "resnet50?batch=1024&train=sgd",
    "transformer": "transformer?batch=1024&train=sgd",
    "rnnlm": "rnnlm?batch=1024&train=sgd",
}
"""Zoo specs at the papers' shapes: the zoo's defaults are FlexFlow's (ResNet-50 at
224x224, its Transformer example's 12 layers of 1024 at sequence 512, RNNLM's 2 LSTM
layers of 2048 over 40 steps) with 64 samples per GPU on 16 GPUs."""
MEASURED_MODELS = {
    "resnet50": "resnet50?batch=16&image=32&width=0.125&classes=10&train=sgd",
    "transformer": "transformer?layers=2&hidden=64&heads=4&seq=16&batch=16&train=sgd",
    "rnnlm": "rnnlm?layers=1&hidden=64&embed=64&vocab=256&seq=8&batch=16&train=sgd",
}
"""The same three steps at shapes 8 fake CPU devices run in seconds, for the measured
table (`--measured`): the runtime mode's per-device peak against the plan's."""
QUICK_MODELS = {"transformer": "transformer?layers=1&hidden=32&heads=2&seq=8&batch=8&train=sgd"}
RATIOS = (1.0, 0.5, 0.25)
PLACER: Placer = "belady"
SEED = 0


@dataclass(frozen=True)
class Setup:
    """Where every pass of a run simulates (preset, mesh) and how long each search may
    go on (budget, timeout); one per run, so every row is comparable."""

    machine: str
    devices: int
    budget: int
    timeout: float

    def options(self, **more: Any) -> dict[str, Any]:
        """soap-shard's options on this setup, and `more`."""
        return {"mesh": self.devices, "machine": self.machine, "seed": SEED, **more}

    def searched(self, cap: int, **more: Any) -> dict[str, Any]:
        """soap-shard's options for `search=mcmc` under `cap` bytes per device."""
        return self.options(
            search="mcmc", budget=self.budget, timeout=self.timeout, memory_cap=cap, **more
        )

    @property
    def title(self) -> str:
        """`v100-tensoropt (16 V100s)`: the preset and the devices it simulates."""
        return f"{self.machine} ({self.devices} {machine(self.machine).device.name.upper()}s)"


SETUP = Setup("v100-tensoropt", 16, budget=1000, timeout=3600.0)
QUICK_SETUP = Setup("cpu-4", 4, budget=8, timeout=600.0)
MEASURED_SETUP = Setup("cpu-8", 8, budget=50, timeout=600.0)


@dataclass
class Cell:
    """One soap-shard search under a cap: the written plan's simulated iteration time
    (None: infeasible, `why` says how) and per-device peak without swaps (None: no
    plan), how the search stopped and after how many proposals, whether the plan
    swaps, and the pass's wall time here."""

    seconds: float | None
    peak: int | None
    stopped: str
    proposals: int
    swaps: bool
    wall_s: float
    why: str = ""

    @property
    def time_text(self) -> str:
        return "none fits" if self.seconds is None else f"{self.seconds * 1e3:.2f}"

    @property
    def stop_text(self) -> str:
        """`budget (200)`, or `-` where the pass found nothing to write (no report)."""
        return f"{self.stopped} ({self.proposals})" if self.stopped else "-"


@dataclass
class Baseline:
    """Data parallel without a cap: its simulated time and per-device peak P (the caps'
    unit), and the pass's wall time here."""

    model: str
    spec: str
    seconds: float
    peak: int
    wall_s: float


@dataclass
class Row:
    """One model at one ratio: (a) the best plan fitting without swapping, (b) the
    search pricing swapping, (c) data parallel with swapping (module docstring)."""

    model: str
    ratio: float
    cap: int
    fitting: Cell
    priced: Cell
    data_parallel: float | None
    data_parallel_swaps: bool

    @property
    def over_data_parallel(self) -> float | None:
        """(c) / (b); None where either is infeasible."""
        return speedup(_finite(self.data_parallel), _finite(self.priced.seconds))

    @property
    def over_fitting(self) -> float | None:
        """(a) / (b); None where either is infeasible."""
        return speedup(_finite(self.fitting.seconds), _finite(self.priced.seconds))


def _finite(seconds: float | None) -> float:
    """A time for `speedup`: infeasible is infinity, which it never divides by."""
    return math.inf if seconds is None else seconds


def _swaps(seconds: float | None, swaps: bool) -> str:
    """Whether a feasible plan swaps; `-` for an infeasible one."""
    return "-" if seconds is None else "yes" if swaps else "no"


def _times(ratio: float | None) -> str:
    return "-" if ratio is None else f"{ratio:.2f}x"


def baseline(name: str, spec: str, step: ModuleOp, setup: Setup) -> Baseline:
    """Data parallel's simulated time and peak per device, uncapped."""
    start = time.perf_counter()
    _, section = sharded(step, **setup.options(search="data-parallel"))
    wall = time.perf_counter() - start
    return Baseline(
        name,
        spec,
        section["predicted_seconds"]["data-parallel"],
        section["peak_memory"]["data-parallel"],
        wall,
    )


def search_cell(
    step: ModuleOp, setup: Setup, cap: int, place: Placer | None = None
) -> tuple[Cell, dict[str, Any] | None]:
    """The mcmc search under `cap` (with `place=` when given) and its report section
    (None where the pass found no strategy to write). Without `place=` a plan over the
    cap is infeasible whatever the pass says, so a regression shows as such."""
    start = time.perf_counter()
    try:
        options = setup.searched(cap) if place is None else setup.searched(cap, place=place)
        _, section = sharded(step, **options)
    except SoapShardFailed as err:
        return Cell(None, None, "", 0, False, time.perf_counter() - start, str(err)), None
    wall = time.perf_counter() - start
    seconds, peak = section["predicted_seconds"]["plan"], section["peak_memory"]["plan"]
    swaps = "plan" in section.get("place", {}).get("swaps", ())
    why = ""
    if seconds is None:
        why = "no swapping fits the cap"
    elif place is None and peak > cap:
        seconds, why = None, f"the written plan holds {peak} bytes per device"
    cell = Cell(seconds, peak, section["stopped"], section["proposals"], swaps, wall, why)
    return cell, section


def joint_row(name: str, step: ModuleOp, setup: Setup, peak: int, ratio: float) -> Row:
    """(a), (b) and (c) at `ratio` of data parallel's peak."""
    cap = int(peak * ratio)
    fitting, _ = search_cell(step, setup, cap)
    priced, section = search_cell(step, setup, cap, place=PLACER)
    data_parallel, swaps = None, False
    if section is not None:
        data_parallel = section["predicted_seconds"]["data-parallel"]
        swaps = "data-parallel" in section["place"]["swaps"]
    return Row(name, ratio, cap, fitting, priced, data_parallel, swaps)


def baseline_table(baselines: Sequence[Baseline]) -> str:
    lines = [
        "| model | zoo spec | data parallel ms | peak P GB | pass s |",
        "| --- | --- | ---: | ---: | ---: |",
    ]
    for b in baselines:
        lines.append(
            f"| {b.model} | `zoo:{b.spec}` | {b.seconds * 1e3:.2f} | {b.peak / 1e9:.4g} "
            f"| {b.wall_s:.1f} |"
        )
    return "\n".join(lines)


def joint_table(rows: Sequence[Row]) -> str:
    lines = [
        "| model | ratio | cap GB | (a) fits, no place ms | (a) stopped | "
        f"(b) place={PLACER} ms | (b) swaps | (b) stopped | (c) data parallel + {PLACER} ms "
        "| (c) swaps | (b) over (c) | (b) over (a) | (a) s | (b) s |",
        "| --- | ---: | ---: | ---: | --- | ---: | --- | --- | ---: | --- | ---: | ---: "
        "| ---: | ---: |",
    ]
    for r in rows:
        a, b = r.fitting, r.priced
        dp = "none fits" if r.data_parallel is None else f"{r.data_parallel * 1e3:.2f}"
        lines.append(
            f"| {r.model} | {r.ratio:g} | {r.cap / 1e9:.4g} | {a.time_text} | {a.stop_text} "
            f"| {b.time_text} | {_swaps(b.seconds, b.swaps)} | {b.stop_text} | {dp} "
            f"| {_swaps(r.data_parallel, r.data_parallel_swaps)} | {_times(r.over_data_parallel)} "
            f"| {_times(r.over_fitting)} | {a.wall_s:.1f} | {b.wall_s:.1f} |"
        )
    return "\n".join(lines)


def infeasible_notes(rows: Sequence[Row]) -> list[str]:
    """Why each infeasible cell is, as the pass said it."""
    return [
        f"- {r.model} x{r.ratio:g} ({label}): {cell.why}"
        for r in rows
        for label, cell in (("a", r.fitting), ("b", r.priced))
        if cell.why
    ]


@dataclass
class Measured:
    """One plan of the search with swapping priced (b) on `cpu-8`, placed by
    `placement{search=belady}` within the same cap and run op by op on 8 fake devices
    (`tasoc run --mode runtime --check`): the replay's per-device peak and the most
    any device held (None: not run, `why` says why)."""

    model: str
    ratio: float
    cap: int
    planned: int | None
    measured: int | None
    checked: bool
    why: str = ""


def measured_row(name: str, step: ModuleOp, setup: Setup, peak: int, ratio: float) -> Measured:
    """(b) at `ratio` of data parallel's peak, placed and run on `setup`'s devices."""
    from tasoc.driver.main import main as tasoc

    cap = int(peak * ratio)
    try:
        module, _ = sharded(step, **setup.searched(cap, place=PLACER))
        placed_module(module, cap)
    except (SoapShardFailed, PlacementFailed) as err:
        return Measured(name, ratio, cap, None, None, False, str(err))
    with tempfile.TemporaryDirectory() as folder:
        program, report = Path(folder, "j.mlir"), Path(folder, "r.json")
        program.write_text(str(module))
        flags = ["--devices", str(setup.devices), "--mode", "runtime", "--check"]
        with contextlib.redirect_stdout(io.StringIO()):
            code = tasoc(["run", str(program), *flags, "--report", str(report)])
        placement = json.loads(report.read_text())["placement"] if code == 0 else {}
    return Measured(
        name,
        ratio,
        cap,
        placement.get("planned_peak_bytes"),
        placement.get("measured_peak_bytes"),
        code == 0,
        "" if code == 0 else f"tasoc run exited {code}",
    )


def placed_module(module: ModuleOp, capacity: int) -> None:
    """`module` placed by Belady's planner within `capacity` bytes per device."""
    with reporting(RunReport()):
        PlacementPass(search=PLACER, capacity=capacity).apply(Context(), module)


def measured_table(rows: Sequence[Measured]) -> str:
    lines = [
        "| model | ratio | cap KiB | planned peak per device KiB (replay) "
        "| measured peak per device KiB (runtime) | equal | --check |",
        "| --- | ---: | ---: | ---: | ---: | --- | --- |",
    ]
    for r in rows:
        if r.planned is None or r.measured is None:
            lines.append(f"| {r.model} | {r.ratio:g} | {r.cap / 1024:.1f} | {r.why} | | | |")
            continue
        lines.append(
            f"| {r.model} | {r.ratio:g} | {r.cap / 1024:.1f} | {r.planned / 1024:.1f} "
            f"| {r.measured / 1024:.1f} | {'yes' if r.planned == r.measured else 'NO'} "
            f"| {'passed' if r.checked else 'failed'} |"
        )
    return "\n".join(lines)


@dataclass
class Results:
    """Every table of a run."""

    baselines: list[Baseline]
    rows: list[Row]
    measured: list[Measured]


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--ratios", default=",".join(map(str, RATIOS)), help="of P")
    parser.add_argument("--budget", type=int, default=SETUP.budget, help="mcmc proposals")
    parser.add_argument("--timeout", type=float, default=SETUP.timeout, help="s per search")
    parser.add_argument(
        "--quick", action="store_true", help="a tiny transformer on cpu-4 (smoke test)"
    )
    parser.add_argument(
        "--measured",
        action="store_true",
        help="the cpu-8 table instead: (b)'s plans placed and run op by op on 8 devices",
    )
    args = parser.parse_args(argv)
    args.models = [m for m in args.models.split(",") if m]
    unknown = [m for m in args.models if m not in MODELS]
    if unknown:
        parser.error(f"unknown model {', '.join(unknown)}; known: {', '.join(MODELS)}")
    args.ratios = [float(r) for r in args.ratios.split(",")]
    return args


def main(argv: Sequence[str] | None = None) -> Results:
    args = parse_args(argv)
    if args.quick:
        models, setup = QUICK_MODELS, QUICK_SETUP
    elif args.measured:
        models, setup = MEASURED_MODELS, MEASURED_SETUP
    else:
        models = {name: MODELS[name] for name in args.models}
        setup = Setup(SETUP.machine, SETUP.devices, args.budget, args.timeout)
    load = os.getloadavg()
    print(f"# {datetime.date.today()}, {os.cpu_count()} cores, load {load[0]:.2f}, {versions()}")
    print(
        f"# every ms below is simulated on {setup.title}; mcmc seed={SEED} "
        f"budget={setup.budget} timeout={setup.timeout:g}; pass s is wall time here\n"
    )
    results = Results([], [], [])
    for name, spec in models.items():
        step = build_zoo_model(spec)
        base = baseline(name, spec, step, setup)
        results.baselines.append(base)
        for ratio in args.ratios:
            if args.measured:
                results.measured.append(measured_row(name, step, setup, base.peak, ratio))
            else:
                results.rows.append(joint_row(name, step, setup, base.peak, ratio))
            print(f"  {name} x{ratio:g}: done", file=sys.stderr, flush=True)
    print(f"Data parallel, uncapped (P: its simulated peak per device), on {setup.title}:")
    print(baseline_table(results.baselines))
    if args.measured:
        print(
            f"\nMeasured here (small shapes, titled as such): (b) at cap = ratio x P on "
            f"{setup.title}, placed within the cap and run op by op on 8 fake devices:"
        )
        print(measured_table(results.measured))
    else:
        print(f"\nAt cap = ratio x P per device, simulated on {setup.title}:")
        print(joint_table(results.rows))
        notes = infeasible_notes(results.rows)
        if notes:
            print("\nInfeasible cells:\n" + "\n".join(notes))
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return results


if __name__ == "__main__":
    main()
