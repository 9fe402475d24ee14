"""Sharded training steps on fake CPU devices (issue 15): lowering, compile time, the
HLO audit, exactness, the CPU step time of data parallelism, and the IR's own cost.

    .venv/bin/python benchmarks/parallel.py [--models a,b] [--devices 8] [--pairs 10] \
        [--ir-ops 10000] [--quick]

For each model (the training step `autodiff{optimizer=sgd}` of the reduced shapes of
`benchmarks/autodiff.py`'s `MODELS`) and each strategy (`soap-shard{mesh=D
search=data-parallel|expert}`), a row gives:

- the pass's time, and the lowering (`lower_sharded` + trace + lower to StableHLO) and
  XLA compile times of the sharded step;
- the audit (`backends/jax/audit.py`): per collective kind, the IR's count and bytes
  beside the compiled HLO's. The goal: equal kinds and counts, bytes within 5 %
  (`goal` column: yes/NO);
- the largest absolute difference of the sharded step's outputs from the numpy
  reference of the unsharded step on the same inputs, and whether `tasoc run --check`'s
  tolerances (gradient tolerances for new weights) hold.

Then the CPU step time of data parallelism on D fake devices against the unsharded
step on one device: alternating pairs in one process, median ratio with its quartiles
(one device's time / D devices' time; > 1 means D devices ran faster). These fake
devices share this machine's 2 cores: the figure says what the CPU runtime costs, it is
not a speed claim for real devices.

Last, the IR itself: verifying (`verify_module`) and printing a synthetic program of
`--ir-ops` ops sharded by `soap-shard{mesh=4 search=expert}`, against the same program
unsharded, in alternating pairs (goal: under 2x). Results go to docs/benchmarks.md.
"""

from __future__ import annotations

import argparse
import datetime
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax

DEVICES = 8
jax.config.update("jax_num_cpu_devices", DEVICES)

import numpy as np  # noqa: E402
from autodiff import MODELS, applied, pass_options, spec_of  # noqa: E402
from paired import PairedRatio  # noqa: E402
from synthetic import synthetic_graph  # noqa: E402
from timing import versions  # noqa: E402
from xdsl.context import Context  # noqa: E402
from xdsl.dialects.builtin import ModuleOp  # noqa: E402
from xdsl.printer import Printer  # noqa: E402

from tasoc.backends.arguments import random_inputs  # noqa: E402
from tasoc.backends.jax import lower  # noqa: E402
from tasoc.backends.jax.audit import audit  # noqa: E402
from tasoc.backends.jax.sharded import lower_sharded  # noqa: E402
from tasoc.backends.numpy.interpreter import run_reference  # noqa: E402
from tasoc.driver.sources import verify_module  # noqa: E402
from tasoc.ir.program import entry_function  # noqa: E402
from tasoc.ir.training import training_signature  # noqa: E402
from tasoc.models.registry import get_model  # noqa: E402
from tasoc.passes.soap import SoapShardPass  # noqa: E402
from tasoc.verify.equivalence import compare  # noqa: E402

BENCH_MODELS = ("alexnet", "resnet50", "transformer", "dlrm", "candle_uno")
STRATEGIES = ("data-parallel", "expert")
SEED = 0
PAIRS, QUICK_PAIRS = 10, 2
IR_OPS = 10_000
IR_MESH = 4
SAMPLE_S = 0.05
"""A timed sample repeats a call until it takes this long."""


@dataclass
class Row:
    model: str
    strategy: str
    pass_s: float
    lower_s: float
    compile_s: float
    audit: list[tuple[str, int, int, int, int]]
    """(kind, IR count, IR bytes, HLO count, HLO bytes) per kind."""
    goal: bool
    max_error: float
    within_tolerance: bool


def sharded(step: ModuleOp, strategy: str, devices: int) -> tuple[ModuleOp, float]:
    module = step.clone()
    start = time.perf_counter()
    SoapShardPass(mesh=str(devices), search=strategy).apply(Context(), module)
    return module, time.perf_counter() - start


def gradient_results(step: ModuleOp) -> set[int]:
    signature = training_signature(entry_function(step))
    return set() if signature is None else {result for result, _ in signature.replaces}


def measure(
    name: str, strategy: str, step: ModuleOp, args: Sequence[np.ndarray], expected: list[np.ndarray]
) -> tuple[Row, Callable[[], object]]:
    module, pass_s = sharded(step, strategy, DEVICES)
    start = time.perf_counter()
    program = lower_sharded(module)
    lowered = program.lowered()
    lower_s = time.perf_counter() - start
    start = time.perf_counter()
    lowered.compile()
    compile_s = time.perf_counter() - start
    result = audit(module, program)
    rows = [(r.kind, r.asked, r.asked_bytes, r.found, r.found_bytes) for r in result.rows]
    goal = all(
        asked == found and abs(found_bytes - asked_bytes) <= 0.05 * max(asked_bytes, 1)
        for _, asked, asked_bytes, found, found_bytes in rows
    )
    outputs = program(*args)
    error = max(
        float(np.max(np.abs(np.asarray(a, np.float64) - np.asarray(e, np.float64)), initial=0.0))
        for a, e in zip(outputs, expected, strict=True)
    )
    checked = compare(expected, outputs, gradients=gradient_results(step))
    device_args = program.device_args(args)

    def call() -> object:
        return jax.block_until_ready(program.fn(*device_args))

    row = Row(name, strategy, pass_s, lower_s, compile_s, rows, goal, error, checked.ok)
    return row, call


def sampler(call: Callable[[], object]) -> Callable[[], float]:
    """Seconds per call, averaged over enough calls to take `SAMPLE_S`."""
    call()

    def sample() -> float:
        count, start = 0, time.perf_counter()
        while (elapsed := time.perf_counter() - start) < SAMPLE_S or count == 0:
            call()
            count += 1
        return elapsed / count

    return sample


def paired(first: Callable[[], float], second: Callable[[], float], pairs: int) -> PairedRatio:
    """Median of first/second over alternating pairs (which goes first alternates)."""
    ratios = []
    for i in range(pairs):
        if i % 2:
            b, a = second(), first()
        else:
            a, b = first(), second()
        ratios.append(a / b)
    return PairedRatio.of(ratios)


def model_rows(name: str, pairs: int) -> tuple[list[Row], PairedRatio]:
    options, loss = MODELS[name]
    step = applied(pass_options(loss, "sgd"), get_model(name).build(**options))
    args = random_inputs(step, SEED)
    expected = run_reference(step, args)
    rows, calls = [], {}
    for strategy in STRATEGIES:
        row, calls[strategy] = measure(name, strategy, step, args, expected)
        rows.append(row)
        print(f"  {name} {strategy}: done", file=sys.stderr, flush=True)
    one = lower(step)
    one_args = one.device_args(args)
    single = sampler(lambda: jax.block_until_ready(one.fn(*one_args)))
    return rows, paired(single, sampler(calls["data-parallel"]), pairs)


def ir_ratio(num_ops: int, pairs: int) -> tuple[PairedRatio, PairedRatio, int]:
    """Verify and print times of a sharded synthetic program over its unsharded one."""
    plain = synthetic_graph(num_ops, SEED)
    sharded_module, _ = sharded(plain, "expert", IR_MESH)
    collectives = sum(1 for op in sharded_module.walk() if op.name.startswith("parallel."))

    def timer(fn: Callable[[], object]) -> Callable[[], float]:
        def sample() -> float:
            start = time.perf_counter()
            fn()
            return time.perf_counter() - start

        return sample

    def printed(module: ModuleOp) -> Callable[[], object]:
        return lambda: Printer(stream=_Sink()).print_op(module)

    verify = paired(
        timer(lambda: verify_module(sharded_module)), timer(lambda: verify_module(plain)), pairs
    )
    text = paired(timer(printed(sharded_module)), timer(printed(plain)), pairs)
    return verify, text, collectives


class _Sink:
    """A stream that keeps nothing: printing is timed, not writing."""

    def write(self, text: str) -> int:
        return len(text)


def table(rows: Sequence[Row]) -> str:
    lines = [
        "| model | strategy | pass s | lower s | compile s "
        "| collectives: IR (HLO) count/bytes | goal | max abs error | --check |",
        "| --- | --- | ---: | ---: | ---: | --- | --- | ---: | --- |",
    ]
    for r in rows:
        kinds = "; ".join(
            f"{kind} {asked}/{asked_bytes} ({found}/{found_bytes})"
            for kind, asked, asked_bytes, found, found_bytes in r.audit
        )
        lines.append(
            f"| {r.model} | {r.strategy} | {r.pass_s:.2f} | {r.lower_s:.2f} | {r.compile_s:.2f} "
            f"| {kinds or 'none'} | {'yes' if r.goal else 'NO'} | {r.max_error:.2e} "
            f"| {'ok' if r.within_tolerance else 'FAILS'} |"
        )
    return "\n".join(lines)


def parse_args(argv: Sequence[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--models", default=",".join(BENCH_MODELS), help="comma-separated")
    parser.add_argument("--pairs", type=int, default=None, help=f"timed pairs (default {PAIRS})")
    parser.add_argument("--ir-ops", type=int, default=IR_OPS, help="ops of the IR program")
    parser.add_argument("--quick", action="store_true", help="few pairs (smoke test)")
    return parser.parse_args(argv)


def main(argv: Sequence[str] | None = None) -> list[Row]:
    args = parse_args(argv)
    pairs = args.pairs or (QUICK_PAIRS if args.quick else PAIRS)
    load = os.getloadavg()
    print(f"# {datetime.date.today()}, {os.cpu_count()} cores, load {load[0]:.2f}, {versions()}")
    print(f"# {DEVICES} fake CPU devices (jax_num_cpu_devices)\n")
    rows, ratios = [], {}
    for name in args.models.split(","):
        model_rows_, ratios[name] = model_rows(name, pairs)
        rows += model_rows_
    print(table(rows))
    print(f"\nCPU step time, 1 device / {DEVICES}-device data parallel (median (IQR, pairs)):")
    for name, ratio in ratios.items():
        print(f"  {name} ({spec_of(name, MODELS[name][0])}): {ratio}")
    verify, text, collectives = ir_ratio(args.ir_ops, pairs)
    print(
        f"\nIR of {args.ir_ops} ops sharded by soap-shard{{mesh={IR_MESH} search=expert}} "
        f"({collectives} parallel ops) over unsharded: verify {verify}, print {text}"
    )
    print(f"# load at the end {os.getloadavg()[0]:.2f}")
    return rows


if __name__ == "__main__":
    main()
