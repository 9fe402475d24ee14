"""placement's planners (issue 18) on SwapAdvisor's models: fraction of ideal at memory
ratios, simulated on the V100-16GB preset with 12 GB/s PCIe each way, 20 GB/s both ways
together (`v100-swapadvisor`).

    .venv/bin/python benchmarks/placement.py [--models rnn,brnn,...] [--ratios 1.25,1.5,2,4]
        [--searches belady,lru] [--timeout 60] [--quick]
    .venv/bin/python benchmarks/placement.py --papers [--models ...] [--searches belady,lru]

For each model's training step (`autodiff{optimizer=sgd}`; SwapAdvisor's shapes as far
as 2 cores allow, `MODELS`) and each memory ratio r (the step's peak without placement
÷ the capacity), `placement{search=S capacity=peak/r}` plans it and the row gives,
*simulated* on the preset, the iteration time of ideal (infinite memory: the ops
alone), and the fraction of ideal (ideal's time ÷ the plan's) of each search and of
the baselines the pass prices beside it, the bytes swapped in, and the wall time on
this machine of each pass asked for with `--searches` (the whole pass: the search, the
baselines it prices beside its plan, the simulations; "-" for a baseline priced inside
another search's pass), and the best possible fraction under the capacity (the pass's
lower bound on any plan's time, issue 32: no plan's fraction is above it). The goals
(issue 18): at least SwapAdvisor's 53-99 % of ideal on every model (Fig. 5.1), and
beyond it >= 95 % at 2x and >= 85 % at 4x for the CNNs, never below LRU. Results are
recorded in docs/benchmarks.md.

`recompute` among `--searches` is `placement{search=ga recompute=on}` (issue 32): the
GA, then Belady's swap planner recomputing saved activations on the GA's schedule; its
column is the plan the pass keeps (the fastest of recomputing and swapping alone), and
the same pass gives the `ga` column (the GA's plan before recomputation).

With `--in-place` every pass runs with `in-place=on` (issue 32's sixth round: an
element-wise op writes its result over an operand dying at it, as XLA's buffer
assignment does), and the memory ratio's numerator is the step's peak without
placement with that reuse (`reused_peak`: what a runtime reusing buffers holds without
placement, lower than the earlier rounds' peak, so the capacities are lower than
theirs at the same ratio); each model's line gives both peaks.

With `--papers` each row also gives SwapAdvisor's own figure for the model (Fig. 5.1,
`SWAPADVISOR`), and `--ratios` (e.g. `--papers --scaled --ratios 2,4`, issue 32's
table; `sa` is the model's own ratio in SwapAdvisor's Table 5.1, `SWAPADVISOR_RATIOS`)
sets the ratios instead of the real 16 GB; `--scaled` takes `MODELS`, the shapes
2 cores plan in minutes, instead of Table 5.1's. With `--papers` alone the models are
SwapAdvisor's own (`PAPER_MODELS`: Table 5.1's RNN-8-8K at batch 256, BRNN-4-8K at
128, WResNet-152-10, Inception-4 and NasNet-25 at 64, the zoo's defaults) on the
preset's real 16 GB, one row per model: its memory ratio is then the step's own
peak ÷ 16 GB, to set beside Table 5.1's MemUsage ÷ 16 GB (RNN 118 GB: 7.4, BRNN 99:
6.2, WResNet 180: 11.3, Inception 71: 4.4, NasNet 193: 12.1).
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from parallel import versions
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.ir.dag import from_module
from tasoc.ir.memory import replay
from tasoc.ir.placement_plan import PlacementPlan, write_placed
from tasoc.ir.program import entry_function
from tasoc.models.registry import OptionValue, get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement import PlacementFailed, PlacementPass
from tasoc.passes.report import RunReport, reporting

MODELS: dict[str, tuple[dict[str, OptionValue], str]] = {
    "rnn": ({"layers": 4, "hidden": 2048, "seq": 20, "batch": 64}, "mse"),
    "brnn": ({"layers": 2, "hidden": 2048, "seq": 20, "batch": 64}, "mse"),
    "wresnet": ({"depth": 50, "widen": 4, "batch": 32, "image": 224}, "softmax-cross-entropy"),
    "inception_v4": ({"batch": 32, "image": 299, "width": 2.0}, "softmax-cross-entropy"),
    "nasnet": ({"repeat": 6, "filters": 168, "batch": 32, "image": 224}, "softmax-cross-entropy"),
    "transformer": ({"layers": 6, "hidden": 1024, "heads": 16, "seq": 512, "batch": 8}, "mse"),
}
"""SwapAdvisor's models (Table 5.1: RNN-8-8K, BRNN-4-8K, WResNet-152-10, Inception-4,
NasNet-25) scaled down in depth or width so that autodiff, planning and simulation of
every row fit minutes on 2 cores; the simulator needs shapes, not memory, so the
scaling changes the graphs' sizes, not what a plan is judged on (the ratio)."""
PAPER_MODELS: dict[str, tuple[dict[str, OptionValue], str]] = {
    name: ({}, loss) for name, (_, loss) in MODELS.items()
}
"""SwapAdvisor's models at Table 5.1's shapes and batches: the zoo's defaults."""
RECOMPUTING = {"recompute": "ga"}
"""The `--searches` names of `recompute=on` runs, and the search each runs with: the
GA, whose pass then prices lru, belady and the GA's own plan too (their columns)."""
SWAPADVISOR: dict[str, float] = {
    "rnn": 70.0,
    "brnn": 70.0,
    "wresnet": 95.0,
    "inception_v4": 65.0,
    "nasnet": 53.0,
}
"""SwapAdvisor's % of ideal per model (Huang thesis Fig. 5.1, at the largest batch and
its own memory ratio: RNN and BRNN 70-80, WResNet 95, Inception-4 at most 65, NasNet
53): the lower end where it gives a range. It has no transformer ("-")."""
SWAPADVISOR_RATIOS: dict[str, float] = {
    "rnn": 7.4,
    "brnn": 6.2,
    "wresnet": 11.3,
    "inception_v4": 4.4,
    "nasnet": 12.1,
}
"""SwapAdvisor's own memory ratio per model (Table 5.1's MemUsage ÷ 16 GB): `sa` among
`--ratios` is the model's."""
QUICK_MODELS = {"rnn": ({"layers": 2, "hidden": 64, "seq": 6, "batch": 4}, "mse")}
RATIOS = (1.25, 1.5, 2.0, 4.0)
SEARCHES = ("belady", "lru")
MACHINE = "v100-swapadvisor"
GA_BUDGET = int(PlacementPass.budget)
"""`search=ga`'s budget (`--budget`): the pass's default unless given."""


@dataclass
class Row:
    model: str
    ops: int
    ratio: float
    capacity: int
    ideal_ms: float
    fractions: dict[str, float]
    swapped_in: dict[str, int]
    planner_s: dict[str, float]
    failed: str = ""
    bound: float | None = None
    """The best possible fraction of ideal under the capacity (the pass's lower bound,
    `placement/bound.py`): no plan's fraction is above it."""

    def markdown(self, searches: Sequence[str], papers: bool = False) -> str:
        if self.failed:
            return f"| {self.model} | {self.ops} | {self.ratio:g} | {self.failed} |"
        cells = [f"{100 * self.fractions.get(s, float('nan')):.1f}%" for s in searches]
        if papers:
            figure = SWAPADVISOR.get(self.model)
            cells.append("-" if figure is None else f"{figure:g}%")
        cells.append("-" if self.bound is None else f"{100 * self.bound:.1f}%")
        moved = [f"{self.swapped_in.get(s, 0) / 1e9:.2f}" for s in searches]
        spent = [f"{self.planner_s[s]:.2f}" if s in self.planner_s else "-" for s in searches]
        return (
            f"| {self.model} | {self.ops} | {self.ratio:.3g} | {self.capacity / 1e9:.3f} | "
            f"{self.ideal_ms:.2f} | " + " | ".join(cells + moved + spent) + " |"
        )


def header(searches: Sequence[str], papers: bool = False) -> str:
    names = [f"{s} % of ideal" for s in searches]
    names += ["SwapAdvisor % (Fig. 5.1)"] if papers else []
    names += ["bound: best possible %"]
    names += [f"{s} GB in" for s in searches] + [f"{s} planner s" for s in searches]
    return (
        "| model | step ops | ratio | capacity GB | ideal ms | "
        + " | ".join(names)
        + " |\n"
        + "| --- | ---: | ---: | ---: | ---: | "
        + " | ".join(["---:"] * len(names))
        + " |"
    )


def training_step(name: str, models: dict[str, tuple[dict[str, OptionValue], str]]) -> ModuleOp:
    options, loss = models[name]
    module = get_model(name).build(**options)
    AutodiffPass(loss=loss, optimizer="sgd", lr=0.01).apply(Context(), module)  # type: ignore[arg-type]
    return module


def step_peak(step: ModuleOp) -> int:
    """The step's peak bytes without placement (the memory ratio's numerator)."""
    return replay(entry_function(step)).peak_bytes


def reused_peak(step: ModuleOp) -> int:
    """The step's peak bytes without placement when element-wise ops write their
    results over operands dying at them (`PlacementPlan.in_place`): the replay of the
    step's own schedule, nothing moved, so marked."""
    copy = step.clone()
    dag = from_module(copy, keep_order=True)
    write_placed(copy, dag, PlacementPlan(dag.ops, in_place=True))
    return replay(entry_function(copy)).peak_bytes


def measure(
    name: str,
    step: ModuleOp,
    ratio: float,
    capacity: int,
    searches: Sequence[str],
    timeout: float,
    budget: int = GA_BUDGET,
    in_place: bool = False,
) -> Row:
    """`step` planned by each of `searches` under `capacity` (its peak ÷ `ratio`)."""
    ops = sum(1 for _ in entry_function(step).body.block.ops) - 1
    fractions: dict[str, float] = {}
    swapped: dict[str, int] = {}
    spent: dict[str, float] = {}
    ideal_ms = 0.0
    bound = None
    for search in searches:
        options = {"search": search, "capacity": capacity, "machine": MACHINE}
        if in_place:
            options["in_place"] = "on"
        if search in RECOMPUTING:
            options |= {"search": RECOMPUTING[search], "recompute": "on"}
        if options["search"] == "ga":
            options |= {"timeout": timeout, "budget": budget}
        copy = step.clone()
        start, cpu = time.perf_counter(), time.process_time()
        try:
            with reporting(RunReport()) as report:
                PlacementPass(**options).apply(Context(), copy)  # type: ignore[arg-type]
        except PlacementFailed as err:
            return Row(name, ops, ratio, capacity, 0.0, {}, {}, {}, failed=str(err))
        section = report.section("placement")
        spent[search] = time.perf_counter() - start
        print(  # CPU time: what the pass costs whatever the load (the speed goals)
            f"  {name} {search}: the pass took {time.process_time() - cpu:.2f} s of CPU here "
            "(a GA's worker processes not counted), "
            f"{spent[search]:.2f} s wall (load {os.getloadavg()[0]:.2f})",
            file=sys.stderr,
        )
        if "stopped" in section:
            print(
                f"  {name} {search}: stopped ({section['stopped']}) after "
                f"{section.get('evaluations')} evaluations in {section.get('search_seconds')} s",
                file=sys.stderr,
            )
        for note in section["notes"]:  # how the pass ended: a timeout says so in a note
            if "timeout" in note:
                print(f"  {name} {search}: {note}", file=sys.stderr)
        if search in RECOMPUTING:
            print(f"  {name} {search}: the plan kept is {section['plan']}'s", file=sys.stderr)
        if "joint" in section.get("recompute", {}):
            print(f"  {name} {search}: joint {section['recompute']['joint']}", file=sys.stderr)
        for planner, fraction in section["fraction_of_ideal"].items():
            fractions.setdefault(planner, fraction)
        for planner, moved in section["swapped_bytes"].items():
            swapped.setdefault(planner, moved["in"])
        if search in RECOMPUTING:  # the plan the pass kept, recomputing or not
            fractions[search] = section["fraction_of_ideal"][section["plan"]]
            swapped[search] = section["swapped_bytes"][section["plan"]]["in"]
        ideal_ms = section["simulated_seconds"]["ideal_seconds"] * 1e3
        bound = section["lower_bound"]["best_possible_fraction"]
    return Row(name, ops, ratio, capacity, ideal_ms, fractions, swapped, spent, bound=bound)


def model_ratios(name: str, asked: Sequence[str]) -> list[float]:
    """The ratios `--ratios` asks for on model `name`: numbers, and `sa` for SwapAdvisor's
    own ratio of the model (`SWAPADVISOR_RATIOS`; none for a model it did not run)."""
    return [
        SWAPADVISOR_RATIOS[name] if r == "sa" else float(r)
        for r in asked
        if r != "sa" or name in SWAPADVISOR_RATIOS
    ]


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--ratios", default=",".join(map(str, RATIOS)))
    parser.add_argument("--searches", default=",".join(SEARCHES))
    parser.add_argument(
        "--timeout",
        type=float,
        default=60.0,
        help="seconds per pass: the GA, then the recomputation pricing",
    )
    parser.add_argument("--budget", type=int, default=GA_BUDGET, help="GA: most plans simulated")
    parser.add_argument("--quick", action="store_true", help="a tiny RNN, ratio 2 (smoke test)")
    parser.add_argument(
        "--in-place", action="store_true", help="in-place=on: buffers of dying operands reused"
    )
    parser.add_argument(
        "--papers", action="store_true", help="Table 5.1's shapes on the real 16 GB"
    )
    parser.add_argument("--scaled", action="store_true", help="--papers on MODELS' shapes")
    args = parser.parse_args(argv)
    ratios_given = any(arg.startswith("--ratios") for arg in argv or sys.argv[1:])
    paper_shapes = args.papers and not args.scaled
    models = QUICK_MODELS if args.quick else PAPER_MODELS if paper_shapes else MODELS
    names = list(QUICK_MODELS) if args.quick else args.models.split(",")
    asked = ["2"] if args.quick else args.ratios.split(",")
    device_memory = int(machine(MACHINE).device.memory_bytes)
    searches = args.searches.split(",")
    also = ("lru", "belady", *(("ga",) if set(searches) & set(RECOMPUTING) else ()))
    shown = [*searches, *(s for s in also if s not in searches)]
    print(
        f"# {datetime.date.today()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.2f}, "
        f"{versions()}"
    )
    print(f"# every time and fraction is simulated on {MACHINE}; planner s is wall time here")
    rows = []
    for name in names:
        step = training_step(name, models)
        peak = step_peak(step)
        if args.in_place:
            reused = reused_peak(step)
            print(f"# {name}: peak without placement {peak}, with buffer reuse {reused}")
            peak = reused
        at_16gb = args.papers and not ratios_given
        ratios = [peak / device_memory] if at_16gb else model_ratios(name, asked)
        for ratio in ratios:
            capacity = device_memory if at_16gb else int(peak / ratio)
            rows.append(
                measure(
                    name, step, ratio, capacity, searches, args.timeout, args.budget, args.in_place
                )
            )
            print(f"  {name} x{ratio:.3g}: done", flush=True)
    print(header(shown, args.papers))
    for row in rows:
        print(row.markdown(shown, args.papers))
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return rows


if __name__ == "__main__":
    main()
