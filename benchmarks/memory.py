"""Memory-placed training steps (issue 17): `placement{search=offload-all}` against the
unplaced step, in both lowering modes, on this machine's CPU.

    .venv/bin/python benchmarks/memory.py [--models resnet50,transformer,rnn] [--pairs 8] [--quick]

For each model (small shapes, `MODELS`) the training step (`autodiff`, Adam) is placed
twice — saved activations offloaded (`offload-all`), and the same with params and
optimizer state on the host (`params=host`) — and each row gives:

- the device bytes the schedule holds at its peak, predicted by the verifier's replay
  (`memory.replay`) for the unplaced and the placed step, and *measured* in the
  runtime mode (`RuntimeProgram.measure`: live device arrays after every op), with
  the difference between measured and predicted (goal: within 5 %);
- the compile time of the compiled mode (trace, lower, compile; one run);
- CPU step time of each mode over the unplaced step (`lower`, jitted): medians of
  per-pair ratios of interleaved samples with their IQR (`paired.PairedRatio`).
  Labelled CPU: moves between a CPU's "device" and "pinned_host" memory kinds are
  copies within one RAM, not a GPU's PCIe transfers, so the ratios say what the
  lowering costs here, not what offloading costs on a GPU.

The results are recorded in docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
from autodiff import MODELS as AUTODIFF_MODELS
from paired import PairedRatio
from parallel import versions
from timing import interleaved
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.jax.placed import lower_placed
from tasoc.ir.memory import replay, unplaced
from tasoc.ir.program import entry_function
from tasoc.models.registry import OptionValue, get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement import PlacementPass

MODELS: dict[str, tuple[dict[str, OptionValue], str]] = {
    "resnet50": AUTODIFF_MODELS["resnet50"],
    "transformer": AUTODIFF_MODELS["transformer"],
    "rnn": ({"layers": 2, "hidden": 128, "seq": 16, "batch": 8}, "mse"),
}
PLACEMENTS = {"offload-all": {}, "offload-all params=host": {"params": "host"}}
PAIRS = 8
SAMPLE_S = 0.05
SEED = 0


@dataclass
class Row:
    model: str
    placement: str
    ops: int
    unplaced_peak: int
    predicted_peak: int
    measured_peak: int
    compile_s: float
    compiled_ratio: PairedRatio
    runtime_ratio: PairedRatio

    @property
    def error(self) -> float:
        return abs(self.measured_peak - self.predicted_peak) / self.predicted_peak

    def markdown(self) -> str:
        mb = 1e6
        return (
            f"| {self.model} | {self.placement} | {self.ops} | {self.unplaced_peak / mb:.2f} | "
            f"{self.predicted_peak / mb:.2f} | {self.measured_peak / mb:.2f} | "
            f"{100 * self.error:.2f}% | {self.compile_s:.2f} | {self.compiled_ratio} | "
            f"{self.runtime_ratio} |"
        )


HEADER = (
    "| model | placement | step ops | unplaced peak MB (replay) | placed peak MB (replay) "
    "| placed peak MB (measured, runtime) | error | compile s | compiled / unplaced (CPU) "
    "| runtime / unplaced (CPU) |\n| --- | --- | ---: | ---: | ---: | ---: | ---: | ---: "
    "| --- | --- |"
)


def training_step(name: str) -> ModuleOp:
    options, loss = MODELS[name]
    module = get_model(name).build(**options)
    AutodiffPass(loss=loss, optimizer="adam", lr=0.001).apply(Context(), module)  # type: ignore[arg-type]
    return module


def sampler(call: Callable[[], object]) -> Callable[[], float]:
    """Seconds per `call()` (blocked until ready), averaged over enough calls to take
    `SAMPLE_S`."""

    def one() -> float:
        start = time.perf_counter()
        jax.block_until_ready(call())
        return time.perf_counter() - start

    count = max(1, min(50, round(SAMPLE_S / max(one(), 1e-9))))
    return lambda: statistics.fmean(one() for _ in range(count))


def measure(name: str, placement: str, pairs: int) -> Row:
    step = training_step(name)
    inputs = random_inputs(step, SEED)
    placed = step.clone()
    PlacementPass(**PLACEMENTS[placement]).apply(Context(), placed)  # type: ignore[arg-type]
    function = entry_function(placed)

    start = time.perf_counter()
    compiled = lower_placed(placed, "compiled")
    compiled.lowered().compile()
    compile_s = time.perf_counter() - start
    runtime = lower_placed(placed, "runtime")
    _, measured = runtime.measure(*runtime.device_args(inputs))

    baseline = lower(unplaced(placed))
    baseline_args = baseline.device_args(inputs)
    compiled_args = compiled.device_args(inputs)

    def runtime_call() -> object:
        return runtime.fn(*runtime.device_args(inputs))

    times = interleaved(
        [
            sampler(lambda: baseline.fn(*baseline_args)),
            sampler(lambda: compiled.fn(*compiled_args)),
            sampler(runtime_call),
        ],
        pairs,
    )
    return Row(
        model=name,
        placement=placement,
        ops=sum(1 for _ in function.body.block.ops) - 1,
        unplaced_peak=replay(entry_function(step)).peak_bytes,
        predicted_peak=replay(function).peak_bytes,
        measured_peak=measured.peak_bytes,
        compile_s=compile_s,
        compiled_ratio=PairedRatio.of([c / b for b, c in zip(times[0], times[1], strict=True)]),
        runtime_ratio=PairedRatio.of([r / b for b, r in zip(times[0], times[2], strict=True)]),
    )


def main(argv: Sequence[str] | None = None) -> list[Row]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(MODELS), help="comma-separated")
    parser.add_argument("--pairs", type=int, default=PAIRS, help="timed rounds")
    parser.add_argument("--quick", action="store_true", help="2 rounds (smoke test)")
    args = parser.parse_args(argv)
    pairs = 2 if args.quick else args.pairs
    print(
        f"# {datetime.date.today()}, {os.cpu_count()} cores, load "
        f"{os.getloadavg()[0]:.2f}, {versions()}"
    )
    print("# peaks: replay = predicted, runtime = measured; ratios are CPU step times")
    rows = []
    for name in args.models.split(","):
        for placement in PLACEMENTS:
            rows.append(measure(name, placement, pairs))
            print(f"  {name} {placement}: done", flush=True)
    print(HEADER)
    for row in rows:
        print(row.markdown())
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return rows


if __name__ == "__main__":
    main()
