"""`tasoc run`: run `@main` once with JAX or the numpy reference, optionally check and time it.

The arguments are random (`random_inputs`, deterministic in `--seed`) or named values
from an `.npz` (`--params`, or the `.npz` beside a `.mlir` INPUT: `weights.py`); an
`.onnx` INPUT brings its own weights (its initializers), and only the activations are
random. Each output is printed with its type and a checksum
(mean and largest magnitude) that is enough to tell two runs apart at a glance;
`--check` compares with the reference interpreter at the tolerances of
`tasoc.verify.equivalence`, `--check-onnxruntime` compares with onnxruntime running the
ONNX model (the input model itself, or the program exported), and `--bench N` reports
the median and best of N timed runs after a warm-up (JAX compiles on the first call).

A training step (`autodiff`, `ir/training.py`) is run once like any program, or `--steps
N` times with its updates fed back (`training_run.py`); for one, the peak device memory
in program order and its split (`ir/liveness.py`: the replay's, arguments held by the
caller) is printed, and `--report R.json` writes the run's figures (losses, memory,
seconds per step). Integer arguments that index something (labels, ids) are checked
against what they index before any run (`index_ranges.py`): JAX cannot raise on data.

A sharded program (the `parallel` dialect) runs on the devices of its mesh as one
jitted shard_map (`backends/jax/sharded.py`, `run_sharded`); `--devices N` makes N
fake CPU devices first (`devices.py`), `--check` compares with the numpy reference of
the equal one-device program, and `--audit` sets the collectives XLA compiled beside
those the IR asks for (`backends/jax/audit.py`). `--processes P` runs it as P JAX
processes instead (`distributed.py`).

A memory-placed program (the `memory` dialect) runs on one device with its host values
in host memory (`backends/jax/placed.py`, `run_placed`): `--mode compiled` (the
default) as one jitted program, `--mode runtime` op by op, measuring the live device
bytes after every op against the schedule's replay; `--check` compares with the numpy
reference of the equal program without placement, which `--backend numpy` runs.

A program both sharded and placed runs the same way on its mesh
(`backends/jax/joint.py`, through `run_placed`): its memory figures are one device's,
the runtime mode measures every device of the mesh, `--check` compares with the
reference of the program without placement nor sharding, and `--audit` sets both the
collectives and the host-memory placements beside the IR's.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import statistics
import time
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.backends.arguments import describe, random_inputs
from tasoc.backends.numpy import run_float64, run_reference
from tasoc.driver import distributed
from tasoc.driver.devices import default_devices, ensure_devices, mesh_devices
from tasoc.driver.errors import (
    DriverError,
    OneLineArgumentParser,
    UsageError,
    non_negative_int,
    note,
    positive_int,
)
from tasoc.driver.index_ranges import check_index_ranges
from tasoc.driver.onnx_bridge import (
    collect_input_shapes,
    export_model,
    input_shape_arg,
    onnxruntime_outputs,
)
from tasoc.driver.outputs import Outputs
from tasoc.driver.sources import Program, load_program
from tasoc.driver.training_run import TrainingRun, loop, steppable, train
from tasoc.driver.weights import WeightsFile, find_weights, load_arguments
from tasoc.ir.limits import LimitError, format_bytes
from tasoc.ir.liveness import PeakMemory, peak_memory
from tasoc.ir.memory import Replay, is_placed, replay, unplaced
from tasoc.ir.parallel import is_sharded, meshes, unsharded
from tasoc.ir.program import (
    ArgInfo,
    arg_infos,
    entry_function,
    return_values,
    value_name,
)
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.passes.progress import progress_bar, status
from tasoc.verify.equivalence import (
    ROUNDING_FACTOR,
    OpByOp,
    OutputReport,
    arbitrate,
    compare,
    compare_ops,
)

if TYPE_CHECKING:
    import onnx

    from tasoc.backends.jax.lowering import Runnable
    from tasoc.backends.jax.placed import Measured, PlacedProgram
    from tasoc.backends.jax.sharded import ShardedProgram

BACKENDS = ("jax", "numpy")
MODES = ("compiled", "runtime")
"""How a memory-placed program runs on jax (`backends/jax/placed.Mode`; spelled here so
that `tasoc run --help` does not import JAX)."""


def _parser() -> OneLineArgumentParser:
    parser = OneLineArgumentParser(
        prog="tasoc run",
        description="Run @main of a program on random (or given) inputs and print its outputs.",
    )
    parser.add_argument(
        "input", metavar="INPUT", help="a .mlir or .onnx file, '-' or zoo:NAME?k=v&..."
    )
    parser.add_argument("--backend", choices=BACKENDS, default="jax", help="default: jax")
    parser.add_argument(
        "--check", action="store_true", help="compare the outputs with the numpy reference"
    )
    parser.add_argument(
        "--check-onnxruntime",
        action="store_true",
        help="compare the outputs with onnxruntime running the .onnx INPUT (other inputs: "
        "the program exported to ONNX with the same weights)",
    )
    parser.add_argument(
        "--bench", type=non_negative_int, default=0, metavar="N", help="time N runs after a warm-up"
    )
    parser.add_argument(
        "--params",
        metavar="P.npz",
        help="argument values by name (weights required); default: INPUT's stem .npz "
        "beside a .mlir INPUT, when it exists",
    )
    parser.add_argument(
        "--input-shape",
        action="append",
        type=input_shape_arg,
        metavar="NAME=DIMS",
        help="static shape of an .onnx input with dynamic dims, e.g. input=1x3x224x224 "
        "(repeatable)",
    )
    parser.add_argument(
        "--seed", type=non_negative_int, default=0, help="seed of the random inputs"
    )
    parser.add_argument(
        "--steps",
        type=positive_int,
        metavar="N",
        help="run a training step N times, feeding its updated params and optimizer "
        "state back, and print the loss of each step",
    )
    parser.add_argument(
        "--report",
        metavar="R.json",
        help="write a JSON run report (memory; with --steps: losses, seconds per step)",
    )
    parser.add_argument(
        "--devices",
        type=non_negative_int,
        metavar="N",
        help="make N CPU devices to run a sharded program on (default: as many as its mesh needs)",
    )
    parser.add_argument(
        "--audit",
        action="store_true",
        help="set the collectives of a sharded program's compiled HLO (and its CUDA "
        "lowering) beside those its IR asks for; for a memory-placed program, the "
        "host-memory placements of its CUDA lowering beside its swaps and host values",
    )
    parser.add_argument(
        "--mode",
        choices=MODES,
        help="how a memory-placed program runs on jax: compiled (default), one jitted "
        "program, host values in pinned host memory, the schedule's order kept with "
        "barriers; runtime, op by op, measuring the live device bytes after each op "
        "against the schedule's replay",
    )
    parser.add_argument(
        "--repartition-every",
        type=positive_int,
        metavar="K",
        help="with --steps, on a GNN step laid out by soap-shard{search=roc}: every K "
        "steps, time each device's block, teach ROC's cost model those times and lay the "
        "step out by its new balanced partition (default: never)",
    )
    distributed.add_arguments(parser)
    return parser


def _arguments(program: Program, weights: WeightsFile | None, seed: int) -> list[np.ndarray]:
    """`@main`'s arguments: an ONNX input's weights, the file's values, or random."""
    module = program.module
    if program.weights is not None:
        infos = arg_infos(entry_function(module))
        drawn = random_inputs(module, seed)
        return [
            program.weights[info.name] if info.is_param else value
            for info, value in zip(infos, drawn, strict=True)
        ]
    if weights is None:
        return random_inputs(module, seed)
    return load_arguments(module, weights, seed)


@dataclass(frozen=True)
class Executable:
    """The program made runnable on one backend: `run(args)` returns its outputs,
    `time(args, repeats)` the seconds of each of `repeats` runs after a warm-up.
    `preprocessed` counts the weight-only values `time` computes once, before its
    runs, rather than on every call (`_weights_once`)."""

    run: Callable[[Sequence[np.ndarray]], list[np.ndarray]]
    time: Callable[[Sequence[np.ndarray], int], list[float]]
    preprocessed: int = 0


def prepare(module: ModuleOp, backend: str) -> Executable:
    if backend == "numpy":
        return Executable(
            run=lambda args: run_reference(module, args),
            time=lambda args, repeats: _time_calls(lambda: run_reference(module, args), repeats),
        )
    # Imported here: JAX takes over a second to import, and `--backend numpy` never needs it.
    from tasoc.backends.jax import lower

    try:
        program = lower(module)
    except ValueError as err:  # an op without a JAX lowering
        raise DriverError(f"cannot run on jax: {err}") from None
    time_runs, preprocessed = _weights_once(module, program)
    return Executable(run=lambda args: program(*args), time=time_runs, preprocessed=preprocessed)


def _weights_once(
    module: ModuleOp, program: Runnable
) -> tuple[Callable[[Sequence[np.ndarray], int], list[float]], int]:
    """How `--bench` times an inference program on JAX, and how many values it
    computes once: the values computed from weights and constants alone (a laid-out
    convolution weight, a folded batch norm scale) are computed before the timed
    runs, as an inference engine does when it loads its weights (TASO's weight
    preprocessing, thesis §2.9.3; `cost.measured.weight_preprocessing`), and each run
    times the step that reads them. The step is what equality-rewrite's measured
    prices and benchmarks time, so `--bench` shows the gain they report. A program
    with no such value is timed as `program`, lowered already."""
    from tasoc.backends.jax import bench, lower
    from tasoc.cost.measured import weight_preprocessing
    from tasoc.ir.dag import from_module, to_module

    step, weights = weight_preprocessing(from_module(module))
    if weights is None:
        return (lambda args, repeats: bench(program, args, repeats)), 0

    def time_step(args: Sequence[np.ndarray], repeats: int) -> list[float]:
        computed = lower(to_module(weights))(*args)
        return bench(lower(to_module(step)), [*args, *computed], repeats)

    return time_step, len(weights.outputs)


def _time_calls(call: Callable[[], object], repeats: int) -> list[float]:
    call()  # a warm-up, as `bench` does for JAX, so both backends are timed alike
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def checksum(array: np.ndarray) -> str:
    """Mean and largest magnitude: cheap, and different for almost any wrong result
    (`nan` when an inf meets a -inf, without NumPy's warning)."""
    values = np.asarray(array, dtype=np.float64)
    if values.size == 0:
        return "empty"
    with np.errstate(invalid="ignore"):
        return f"mean {values.mean():.6g}  abs-max {np.abs(values).max():.6g}"


def _milliseconds(seconds: float) -> str:
    return f"{seconds * 1e3:.3f} ms"


def _onnx_model(
    spec: str, program: Program, infos: Sequence[ArgInfo], inputs: Sequence[np.ndarray], seed: int
) -> onnx.ModelProto | str:
    """The ONNX model onnxruntime runs for `--check-onnxruntime`: an ONNX INPUT as the
    user's runtime would run it (its file), else the program exported with the run's own
    weights."""
    if program.weights is not None:
        return spec
    weights = {info.name: value for info, value in zip(infos, inputs, strict=True) if info.is_param}
    return export_model(program.module, weights, seed)


def _gradient_outputs(signature: TrainingSignature | None) -> set[int]:
    """The results of a training program compared at gradient tolerances: its
    gradients and the weights and state the step updates with them."""
    if signature is None:
        return set()
    return {result for result, _ in (*signature.replaces, *signature.gradients)}


@dataclass(frozen=True)
class Witnesses:
    """What `--check` asks when a JAX run and what it is compared with differ beyond
    tolerance: the program computed in float64 (`run_float64`), and every op's lowering
    against its reference kernel on the same inputs (`compare_ops`). Both are thunks:
    they cost a run each, and a check within tolerance needs neither."""

    float64: Callable[[], Sequence[np.ndarray]]
    op_by_op: Callable[[], OpByOp]


def _witnesses(module: ModuleOp, inputs: Sequence[np.ndarray], backend: str) -> Witnesses | None:
    """The witnesses of a program run on JAX (None for the reference itself, which is
    what they would be judged by)."""
    if backend != "jax":
        return None

    def op_by_op() -> OpByOp:
        with progress_bar("checking op by op", "op", delay=PROGRESS_DELAY) as update:
            return compare_ops(module, inputs, lambda done, total: update(done, total))

    return Witnesses(float64=lambda: run_float64(module, inputs), op_by_op=op_by_op)


PROGRESS_DELAY = 2.0
"""Seconds a run's op-by-op work (the check, the runtime mode) runs before its bar
appears on a terminal (`progress.progress_bar`)."""


SHOWN_OUTPUTS = 12
"""Outputs `--check` describes one per line; a program with more (a training step's
weights and state) gets its failing ones, up to this many, and one line for the rest."""


def _print_checked(outputs: Sequence[OutputReport]) -> None:
    shown = list(outputs) if len(outputs) <= SHOWN_OUTPUTS else [o for o in outputs if not o.ok]
    for output in shown[:SHOWN_OUTPUTS]:
        print(f"  check {output.describe()}")
    rest = len(outputs) - min(len(shown), SHOWN_OUTPUTS)
    if rest:
        worst = max(outputs, key=lambda o: o.max_abs_error)
        which = f"{rest} more outputs" if shown else f"all {rest} outputs within tolerance"
        print(f"  check: {which}; the largest error: {worst.describe()}")


def _check_against(
    expected_from: str,
    expected: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    backend: str,
    gradients: set[int],
    witnesses: Witnesses | None = None,
    reference: str = "numpy",
) -> None:
    """Print each output's errors against `expected` (`reference`'s outputs); fail
    unless all are within tolerance (`gradients`: the outputs compared as gradients,
    `compare`), or the witnesses say the difference is rounding.

    Two correct computations in one precision may differ beyond the tolerances: rounding
    grows through a deep program (a 12-layer BERT), and a training step's relu kinks
    pass a gradient in one run and not in the other. Which of the two is right cannot
    be told by comparing them; with `witnesses`, the program computed in float64 tells:
    each output past the tolerances passes when the backend's and the reference's
    distances from float64 are within `ROUNDING_FACTOR` of each other (both rounding,
    neither wrong), one line per output saying so (`arbitrate`). Then every op must
    also agree with its reference kernel on the same inputs (`compare_ops`), the line
    naming the op that drifts most:
    a wrong op the float64 run happened not to expose is caught there.
    """
    result = compare(expected, outputs, gradients=gradients)
    _print_checked(result.outputs)
    if result.ok:
        print(f"check: equivalent to {expected_from}")
        return
    failing = [o.index for o in result.outputs if not o.ok]
    differ = f"{backend} results differ from {expected_from}"
    if witnesses is None or result.problem or any(result.outputs[i].problem for i in failing):
        raise DriverError(f"{differ}: {result.summary()}")
    arbitrations = arbitrate(expected, outputs, witnesses.float64(), failing)
    for arbitration in arbitrations[:SHOWN_OUTPUTS]:
        print(f"  check {arbitration.describe(backend, reference)}")
    wrong = [a for a in arbitrations if not a.ok]
    if wrong:
        more = f" (and {len(wrong) - 1} more outputs)" if len(wrong) > 1 else ""
        raise DriverError(f"{differ}: {wrong[0].describe(backend, reference)}{more}")
    ops = witnesses.op_by_op()
    drift = ops.most_drift
    mismatches = ops.mismatches
    if mismatches:
        worst = max(mismatches, key=lambda op: op.tolerance_used)
        raise DriverError(
            f"{differ}: {len(mismatches)} of {len(ops.ops)} ops disagree with their "
            f"reference kernels on the same inputs, the most {worst.describe()}"
        )
    most = f"; the most drift: {drift.describe()}" if drift is not None else ""
    print(
        f"check: {len(failing)} output(s) differ from {expected_from} beyond tolerance, "
        f"each as far from float64 as rounding puts {reference} (within "
        f"{ROUNDING_FACTOR:g}x); all {len(ops.ops)} ops agree with their reference "
        f"kernels on the same inputs{most}; so the program is equivalent"
    )


def _check_equal_program(
    kind: str,
    reference: ModuleOp,
    inputs: Sequence[np.ndarray],
    outputs: Sequence[np.ndarray],
    signature: TrainingSignature | None,
) -> None:
    """`--check` of a sharded or placed program's JAX outputs against the numpy
    reference of the plain program it equals (`kind`: "unsharded", "unplaced")."""
    _check_against(
        f"the numpy reference of the {kind} program",
        run_reference(reference, inputs),
        outputs,
        "jax",
        _gradient_outputs(signature),
        _witnesses(reference, inputs, "jax"),
    )


def _refuse_combinations(args: argparse.Namespace) -> None:
    """UsageError for options that mean nothing together, before any work."""
    if args.steps is not None and args.bench:
        raise UsageError("--bench cannot be combined with --steps; --report gives seconds per step")
    if args.audit and args.backend != "jax":
        raise UsageError("--audit reads the HLO that JAX compiles: it needs --backend jax")
    if args.steps is not None and args.check_onnxruntime:
        raise UsageError(
            "--check-onnxruntime cannot be combined with --steps; --check compares the "
            "first step with the numpy reference"
        )
    if args.mode is not None and args.backend != "jax":
        raise UsageError(
            "--mode says how a memory-placed program runs on jax: it needs --backend jax "
            "(the numpy reference ignores memory spaces)"
        )
    if args.repartition_every is not None:
        _refuse_repartition_combinations(args)
    if args.mode == "runtime" and args.bench:
        raise UsageError(
            "--bench times the compiled mode; --mode runtime runs op by op from Python "
            "to measure memory, which says nothing of the program's speed"
        )


def _refuse_repartition_combinations(args: argparse.Namespace) -> None:
    """UsageError for `--repartition-every` where re-partitioning means nothing."""
    if args.steps is None:
        raise UsageError("--repartition-every re-partitions between training steps: give --steps N")
    if args.backend != "jax":
        raise UsageError(
            "--repartition-every balances the blocks a sharded step runs on its devices: it "
            "needs --backend jax (the numpy reference runs the one-device program)"
        )
    if args.processes is not None:
        raise UsageError("--repartition-every runs on this process's devices, not --processes")
    if args.devices is not None and args.devices < 2:
        raise UsageError(
            f"--repartition-every balances a partition over several devices; --devices "
            f"{args.devices} makes {args.devices}"
        )


def run_command(argv: Sequence[str]) -> int:
    """`tasoc run ARGS...`; returns the exit status (errors propagate to `main`)."""
    args = _parser().parse_args(argv)
    _refuse_combinations(args)
    launched = distributed.start(argv, args)  # --processes: workers run, or this joins them
    if launched is not None:
        return launched
    weights = find_weights(args.input, args.params)
    read = (path for path in (args.input, weights.path if weights else None) if path)
    with Outputs(read) as outputs:
        report_output = outputs.declare(args.report, "--report")
        report = _run(args, weights)
        if report_output is not None:
            with report_output.open() as stream:
                json.dump(report, stream, indent=2, sort_keys=True)
    return 0


def _run(args: argparse.Namespace, found: WeightsFile | None) -> dict[str, object]:
    """The run itself; returns what `--report` writes."""
    if args.devices is not None:
        ensure_devices(args.devices)
    program = load_program(args.input, collect_input_shapes(args.input_shape))
    module = program.module
    sharded = is_sharded(module)
    placed = is_placed(module)
    if args.mode is not None and not placed:
        raise UsageError(
            f"--mode says how a memory-placed program runs; {args.input} is not one "
            "(it has no memory spaces, swaps or memory attributes)"
        )
    if sharded and args.devices is None and args.backend == "jax":
        needed = mesh_devices(meshes(module).values())
        if args.processes is None:
            names = ", ".join(f"@{name}" for name in meshes(module))
            raise UsageError(
                f"{args.input} is sharded over {needed} devices ({names}): give --devices "
                f"{needed} (or --backend numpy for the equal one-device program)"
            )
        default_devices(needed)  # each process makes its share of the mesh's devices
    if sharded and args.backend == "numpy":
        module = unsharded(module)  # the reference runs the equal one-device program
    if placed and args.backend == "numpy":
        also = " and shardings (one device)" if sharded else ""
        note(
            f"--backend numpy ignores memory spaces{also}: it runs the equal program "
            "without placement (swaps and frees dropped, every value in one memory)"
        )
        module = unplaced(module)
        placed = False
    if args.backend == "numpy":
        sharded = False
    if args.audit and not (sharded or placed):
        raise UsageError(
            f"--audit reads a sharded program's collectives (or a memory-placed program's "
            f"host-memory placements); {args.input} is neither"
        )
    weights = found if program.weights is None else None
    if program.weights is not None and args.params is not None:
        raise UsageError("--params gives weights, and an .onnx INPUT carries its own")
    try:
        function = entry_function(module)
        returned = return_values(function)
        infos = arg_infos(function)
        signature = training_signature(function)
        # A placed program's figure is its step's without placement: the one its
        # placement beats, as for any program (its own peak is the planned one).
        memory = peak_memory(entry_function(unplaced(module)) if placed else function)
        inputs = _arguments(program, weights, args.seed)
        check_index_ranges(function, inputs)
    except (ValueError, LimitError) as err:  # ProgramError, an index out of range
        raise DriverError(f"{args.input}: {err}") from None
    if sharded and args.check_onnxruntime:
        raise UsageError("--check-onnxruntime on a sharded program is not supported yet")
    if placed and args.check_onnxruntime:
        raise UsageError(
            "--check-onnxruntime on a memory-placed program is not supported yet; --check "
            "compares it with the numpy reference"
        )
    training = steppable(signature, args.input) if args.steps is not None else None
    if args.repartition_every is not None:
        if placed:
            raise UsageError(
                "--repartition-every re-lays out a sharded GNN step; a memory-placed "
                "program's schedule would not follow"
            )
        # Imported when asked for: it brings the soap-shard pass, which a run never needs.
        from tasoc.driver.repartition import recorded_blocks

        blocks = recorded_blocks(module, args.input)

    values_from = f", values from {weights.path}" if weights is not None else ""
    report: dict[str, object] = {
        "input": args.input,
        "backend": args.backend,
        "seed": args.seed,
        "memory": memory.to_json(),
    }
    if placed:
        provenance = f" (seed {args.seed}{values_from})"
        return report | run_placed(args, module, inputs, provenance, training, memory)
    if training is not None:
        steps = f"{args.steps} training step{'s' if args.steps > 1 else ''}"
        print(f"{args.input}: {steps} on {args.backend} (seed {args.seed}{values_from})")
        _print_memory(memory)
        if args.repartition_every is not None:
            return report | _train_repartitioning(module, blocks, training, inputs, args)
        if args.check:
            first = _first_step(module, inputs, args.backend, sharded)
            reference = unsharded(module) if sharded else module
            _check_first_step(reference, training, inputs, first, args.backend)
        run = _train(module, training, inputs, args)
        report |= run_report(run)
        return report
    if sharded:
        execute = _on_local_devices if args.processes is None else distributed.run_global
        provenance = f" (seed {args.seed}{values_from})"
        return report | run_sharded(args, module, inputs, provenance, execute)

    executable = prepare(module, args.backend)
    outputs = executable.run(inputs)
    print(f"{args.input} on {args.backend} (seed {args.seed}{values_from}):")
    _print_outputs(returned, outputs)
    if signature is not None:
        _print_memory(memory)

    if args.check:
        _check_against(
            "the numpy reference",
            run_reference(module, inputs),
            outputs,
            args.backend,
            _gradient_outputs(signature),
            _witnesses(module, inputs, args.backend),
        )
    if args.check_onnxruntime:
        model = _onnx_model(args.input, program, infos, inputs, args.seed)
        activations = [arg for info, arg in zip(infos, inputs, strict=True) if not info.is_param]
        expected = onnxruntime_outputs(model, activations)
        _check_against(
            "onnxruntime",
            expected,
            outputs,
            args.backend,
            set(),
            _witnesses(module, inputs, args.backend),
            reference="onnxruntime",
        )

    if args.bench:
        report["bench_seconds"] = _bench(executable, inputs, args.bench, args.backend)
    return report


def _print_outputs(returned: Sequence[SSAValue], outputs: Sequence[np.ndarray]) -> None:
    """One line per output, then one note naming those that hold NaN or inf (NaN
    weights, an overflow): the backends compute them silently, as IEEE arithmetic does."""
    not_finite = []
    for index, (value, array) in enumerate(zip(returned, outputs, strict=True)):
        name = value_name(value, f"output #{index}")
        print(f"  {name}: {describe(array)}  {checksum(array)}")
        if not np.isfinite(np.asarray(array, dtype=np.float64)).all():
            not_finite.append(name)
    if not_finite:
        named = ", ".join(not_finite[:3]) + (
            f" and {len(not_finite) - 3} more" * (len(not_finite) > 3)
        )
        verb = "holds" if len(not_finite) == 1 else "hold"
        note(f"{named} {verb} values that are not finite (NaN or inf)")


def _bench(
    executable: Executable, inputs: Sequence[np.ndarray], runs: int, where: str
) -> list[float]:
    times = executable.time(inputs, runs)
    once = executable.preprocessed
    print(
        f"bench: {runs} runs on {where}, median "
        f"{_milliseconds(statistics.median(times))}, min {_milliseconds(min(times))}"
        + (f" ({once} weight-only value{'s' if once > 1 else ''} computed once)" if once else "")
    )
    return times


Execute = Callable[["ShardedProgram", Sequence[np.ndarray]], list[np.ndarray]]
"""Runs a lowered sharded program on global arguments and returns its global results."""


def _on_local_devices(program: ShardedProgram, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return program(*inputs)


def run_sharded(
    args: argparse.Namespace,
    module: ModuleOp,
    inputs: Sequence[np.ndarray],
    provenance: str,
    execute: Execute = _on_local_devices,
) -> dict[str, object]:
    """Run a sharded program once (`execute`: on this process's devices by default),
    print its outputs, and with `args.check` compare them with the numpy reference of
    the equal one-device program (`parallel.unsharded`), a training step's gradients
    at gradient tolerances; `args.audit` prints the HLO audit, `args.bench` times it.
    Returns what `--report` adds (devices, audit, bench seconds)."""
    from tasoc.backends.jax import bench
    from tasoc.backends.jax.sharded import lower_sharded

    try:
        program = lower_sharded(module)
    except ValueError as err:  # too few devices, partial sums returned, no lowering
        raise DriverError(f"cannot run on jax: {err}") from None
    devices = program.device_count
    with status(_compiling(devices, "compiled")):  # the first call compiles
        outputs = execute(program, inputs)
    print(f"{args.input} on jax, {devices} devices{provenance}:")
    function = entry_function(module)
    signature = training_signature(function)
    _print_outputs(return_values(function), outputs)
    if signature is not None:
        _print_memory(peak_memory(function))
    report: dict[str, object] = {"devices": devices}
    if args.check:
        reference = unsharded(module)
        _check_equal_program("unsharded", reference, inputs, outputs, signature)
    if args.audit:
        report["audit"] = _audit_collectives(args.input, module, program)
    if args.bench:
        executable = Executable(
            run=lambda args: program(*args),
            time=lambda args, repeats: bench(program, args, repeats),
        )
        report["bench_seconds"] = _bench(executable, inputs, args.bench, f"jax, {devices} devices")
    return report


def _audit_collectives(input: str, module: ModuleOp, program: ShardedProgram) -> dict[str, object]:
    """`--audit` of a sharded program: print the collectives of its compiled HLO (and
    its CUDA lowering) beside those its IR asks for; return the report's section."""
    from tasoc.backends.jax.audit import audit

    try:
        found = audit(module, program)
    except ValueError as err:  # a program on several meshes
        raise DriverError(f"cannot audit {input}: {err}") from None
    print("audit: collectives the IR asks for, the compiled HLO runs (CPU), CUDA lowers:")
    for line in found.table():
        print(f"  {line}")
    print(f"audit: {found.summary()}")
    return found.to_json()


def run_placed(
    args: argparse.Namespace,
    module: ModuleOp,
    inputs: Sequence[np.ndarray],
    provenance: str,
    training: TrainingSignature | None,
    without: PeakMemory,
) -> dict[str, object]:
    """Run a memory-placed program on jax in `args.mode` (compiled by default), once or
    `args.steps` times as a training step; print its outputs (or losses) and its device
    memory: the schedule's replay, in runtime mode the bytes measured beside it, and
    `without`, the peak of the program without placement (the run's `memory`).
    With `args.check`, compare with the numpy reference of the equal program without
    placement (`memory.unplaced`), and in runtime mode fail unless the measurement is
    the replay, op by op. A program sharded too runs on its mesh (`joint.lower_joint`),
    its memory one device's (the replay's and the measurement's are per device), and is
    compared with the reference of the program without placement nor sharding
    (`parallel.unsharded(memory.unplaced(module))`); its `--audit` has the collectives
    beside the placements. Returns what `--report` adds (`placement`, `audit`)."""
    from tasoc.backends.jax import bench

    mode = args.mode or "compiled"
    function = entry_function(module)
    signature = training_signature(function)
    planned = replay(function)
    sharded = is_sharded(module)
    reference = unsharded(unplaced(module)) if sharded else unplaced(module)
    # A training loop's compiled step updates what it replaces in place, as unplaced.
    donate = [a for _, a in training.replaces] if training and mode == "compiled" else []
    lower = _placed_lowering(module)
    devices = sum(len(mesh.device_ids) for mesh in meshes(module).values()) or 1
    try:
        with status(_compiling(devices, mode)):
            program = lower(module, mode, donate)
    except ValueError as err:  # an op without a JAX lowering, several meshes, partial sums
        raise DriverError(f"cannot run on jax: {err}") from None
    where = f"{devices} devices, {mode} mode" if sharded else f"{mode} mode"
    kind = "unsharded and unplaced" if sharded else "unplaced"
    if training is not None:
        steps = f"{args.steps} training step{'s' if args.steps > 1 else ''}"
        print(f"{args.input}: {steps} on jax, {where}{provenance}")
        if args.check:
            first, _ = _placed_call(program, inputs)
            _check_first_step(reference, training, inputs, first, "jax")
        run, measured = _train_placed(program, training, inputs, args.steps)
        print(_timing_line(run))
        report = run_report(run)
    else:
        outputs, measured = _placed_call(program, inputs)
        print(f"{args.input} on jax, {where}{provenance}:")
        _print_outputs(return_values(function), outputs)
        report = {}
        if args.check:
            _check_equal_program(kind, reference, inputs, outputs, signature)
    if args.audit:
        report["audit"] = _audit_placed(args.input, module, program, lower)
    report["placement"] = _placement_memory(
        mode, devices, planned, without.peak_bytes, measured, args.check
    )
    if args.bench:
        executable = Executable(
            run=lambda args: program(*args),
            time=lambda args, repeats: bench(program, args, repeats),
        )
        report["bench_seconds"] = _bench(executable, inputs, args.bench, f"jax, {where}")
    return report


def _compiling(devices: int, mode: str) -> str:
    """The status line shown while XLA compiles a sharded or placed program, whose
    compile can take a minute: the whole program (compiled mode), each distinct op
    (runtime mode)."""
    what = "each op" if mode == "runtime" else "the program"
    on = f" for {devices} devices" if devices > 1 else ""
    return f"compiling {what}{on}"


PlacedLowering = Callable[[ModuleOp, str, Sequence[int]], "PlacedProgram | ShardedProgram"]
"""Lowers a placed program in a mode, donating some arguments (`lower_placed`,
`lower_joint`)."""


def _placed_lowering(module: ModuleOp) -> PlacedLowering:
    """The lowering of a placed `module`: on one device, or on its mesh when sharded too."""
    if is_sharded(module):
        from tasoc.backends.jax.joint import lower_joint

        return lower_joint  # type: ignore[return-value]
    from tasoc.backends.jax.placed import lower_placed

    return lower_placed  # type: ignore[return-value]


def _audit_placed(
    input: str, module: ModuleOp, program: PlacedProgram | ShardedProgram, lower: PlacedLowering
) -> dict[str, object]:
    """`--audit` of a placed program: the copies and host values the IR asks for beside
    those of the compiled mode cross-lowered for CUDA (`placed.cuda_placements`; the CPU
    lowering elides copies within a program, a GPU's keeps them). A program sharded too
    also has its collectives audited (`_audit_collectives`), the report's section then
    holding both (`collectives`, `placements`)."""
    from tasoc.backends.jax.placed import RuntimeProgram, cuda_placements, planned_placements

    compiled = lower(module, "compiled", ()) if isinstance(program, RuntimeProgram) else program
    section: dict[str, object] = {}
    if is_sharded(module):
        section["collectives"] = _audit_collectives(input, module, compiled)  # type: ignore[arg-type]
    planned = planned_placements(module)
    cuda, _ = cuda_placements(compiled)
    print("audit: host-memory placements the IR asks for, the CUDA lowering has:")
    rows = (
        ("copies to host (swap-outs, host results)", "to_host"),
        ("copies to device (swap-ins, device results)", "to_device"),
        ("host arguments", "host_arguments"),
        ("host results", "host_results"),
    )
    width = max(len(label) for label, _ in rows)
    print(f"  {'':<{width}}  {'IR':>6}  {'CUDA':>6}")
    for label, key in rows:
        print(f"  {label:<{width}}  {getattr(planned, key):>6}  {getattr(cuda, key):>6}")
    same = planned == cuda
    print(
        "audit: the CUDA lowering places every value where the IR says"
        if same
        else "audit: the CUDA lowering differs from the IR (above)"
    )
    placements = {"planned": planned.to_json(), "cuda": cuda.to_json(), "equal": same}
    if not section:
        return placements
    return section | {"placements": placements}


def _placed_call(
    program: PlacedProgram, inputs: Sequence[np.ndarray]
) -> tuple[list[np.ndarray], Measured | None]:
    """One run of a placed program on `inputs`: its outputs as NumPy arrays, and in
    runtime mode the device memory it measured."""
    from tasoc.backends.jax.lowering import host_results
    from tasoc.backends.jax.placed import RuntimeProgram

    if isinstance(program, RuntimeProgram):
        with progress_bar("runtime mode", "op", delay=PROGRESS_DELAY) as update:
            results, measured = program.measure(
                *program.device_args(inputs), progress=lambda done, total: update(done, total)
            )
        return host_results(results, program.result_sigs), measured
    with _donation_quiet():
        return program(*inputs), None


@contextlib.contextmanager
def _donation_quiet() -> Iterator[None]:
    """As in `training_run`: a backend that cannot reuse a donated buffer says so on
    every call of a step that donates; the step is still right, only not in place."""
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="Some donated buffers were not usable")
        yield


def _placement_memory(
    mode: str,
    devices: int,
    planned: Replay,
    unplaced_peak: int,
    measured: Measured | None,
    check: bool,
) -> dict[str, object]:
    """Print the placed program's device memory, planned (the schedule's replay, no
    pool: bytes, as measured), measured (runtime mode), and the peak of the program
    without placement (`liveness.peak_memory`); with `check`, fail unless the
    measurement is the replay op by op (on every device). Returns the report's
    `placement` section. The figures of a program on several `devices` (sharded) are
    one device's."""
    section: dict[str, object] = {
        "mode": mode,
        "devices": devices,
        "planned_peak_bytes": planned.peak_bytes,
        "planned_bytes": [planned.start, *planned.live],
        "unplaced_peak_bytes": unplaced_peak,
    }
    without = f"; {format_bytes(unplaced_peak)} without placement"
    each = f" per device ({devices} devices)" if devices > 1 else ""
    if measured is None:
        print(
            f"memory: planned peak device memory{each} {format_bytes(planned.peak_bytes)} "
            f"(replay){without}"
        )
        return section
    print(
        f"memory: peak live device memory{each} measured {format_bytes(measured.peak_bytes)}, "
        f"planned {format_bytes(planned.peak_bytes)} (replay){without}"
    )
    section["measured_peak_bytes"] = measured.peak_bytes
    section["measured_bytes"] = [measured.start, *measured.live]
    if check:
        where = _first_difference(planned, measured)
        if where is not None:
            raise DriverError(f"runtime mode measured what the replay does not plan: {where}")
        every = " on every device" if devices > 1 else ""
        print(f"check: the measured device bytes are the replay's, op by op{every}")
    return section


def _first_difference(planned: Replay, measured: Measured) -> str | None:
    """Where the runtime's device bytes first differ from the replay's, or the devices'
    bytes from each other's, None if nowhere."""
    names = ["placing the arguments", *(f"op {i} ({op.name})" for i, op in enumerate(planned.ops))]
    wanted = (planned.start, *planned.live)
    got = (measured.start, *measured.live)
    for name, want, held, apart in zip(names, wanted, got, measured.spread, strict=True):
        if apart:
            return f"the devices hold different bytes after {name}: one {held}, one {held - apart}"
        if want != held:
            if name == names[0]:
                return f"{held} bytes of arguments, planned {want}"
            return f"{held} bytes after {name}, planned {want}"
    return None


def _train_placed(
    program: PlacedProgram, signature: TrainingSignature, inputs: Sequence[np.ndarray], steps: int
) -> tuple[TrainingRun, Measured | None]:
    """`--steps` of a placed training step: `training_run.train`'s loop on a placed
    program. Each new param or state value comes back in its argument's space (a
    replacing result has its argument's type, space included: `training_signature`), so
    it is fed back as it is; an argument the runtime mode frees (deletes) is placed anew
    before each step, and the runtime's measurement with the highest peak over the steps
    is returned. In compiled mode the replaced arguments are donated (`run_placed`), as
    on an unplaced step."""
    import jax

    from tasoc.backends.jax.lowering import host_argument
    from tasoc.backends.jax.placed import RuntimeProgram

    replaced = {argument for _, argument in signature.replaces}
    consumed = program.consumed if isinstance(program, RuntimeProgram) else ()
    renewed = [i for i in consumed if i not in replaced]
    current = list(program.device_args(inputs))
    width = len(str(steps))
    highest: list[Measured] = []

    def step() -> float:
        for i in renewed:
            info = program.arg_infos[i]
            current[i] = jax.device_put(host_argument(info, inputs[i]), program.in_shardings[i])
        if isinstance(program, RuntimeProgram):
            results, measured = program.measure(*current)
            if not highest or measured.peak_bytes > highest[0].peak_bytes:
                highest[:] = [measured]
        else:
            with _donation_quiet():
                results = program.fn(*current)
        for result, argument in signature.replaces:
            current[argument] = results[result]
        return float(results[signature.loss])  # type: ignore[index]

    def show(number: int, loss: float) -> None:
        print(f"step {number:>{width}}/{steps}  loss {loss:.7g}")

    run = loop(step, steps, show)
    return run, highest[0] if highest else None


def _print_memory(memory: PeakMemory) -> None:
    print(f"memory: {memory.describe()}")


def _first_step(
    module: ModuleOp, inputs: Sequence[np.ndarray], backend: str, sharded: bool
) -> list[np.ndarray]:
    """One step's results for `--check`: a sharded step on its mesh (compared with the
    reference of the equal one-device program), any other on `backend`."""
    if not sharded:
        return prepare(module, backend).run(inputs)
    from tasoc.backends.jax.sharded import lower_sharded

    try:
        program = lower_sharded(module)
    except ValueError as err:  # too few devices, partial sums returned, no lowering
        raise DriverError(f"cannot run on jax: {err}") from None
    with status(_compiling(program.device_count, "compiled")):
        return _on_local_devices(program, inputs)


def _check_first_step(
    module: ModuleOp,
    signature: TrainingSignature,
    inputs: Sequence[np.ndarray],
    first: Sequence[np.ndarray],
    backend: str,
) -> None:
    """`--check` with `--steps`: the first step's results against the reference's."""
    expected = run_reference(module, inputs)
    _check_against(
        "the numpy reference (first step)",
        expected,
        first,
        backend,
        _gradient_outputs(signature),
        _witnesses(module, inputs, backend),
    )


def _train(
    module: ModuleOp,
    signature: TrainingSignature,
    inputs: list[np.ndarray],
    args: argparse.Namespace,
) -> TrainingRun:
    width = len(str(args.steps))

    def show(step: int, loss: float) -> None:
        print(f"step {step:>{width}}/{args.steps}  loss {loss:.7g}")

    run = train(module, signature, inputs, args.steps, args.backend, show)
    print(_timing_line(run))
    return run


def _train_repartitioning(
    module: ModuleOp,
    blocks: np.ndarray,
    signature: TrainingSignature,
    inputs: list[np.ndarray],
    args: argparse.Namespace,
) -> dict[str, object]:
    """`--steps` with `--repartition-every` (`repartition.py`); with `--check`, the first
    step of every layout against the numpy reference of the program as written (its
    one-device equal) on the same params and state. Returns the report's training
    figures and `repartitions`."""
    from tasoc.driver.repartition import train_repartitioning

    width = len(str(args.steps))
    reference = unsharded(module)

    def show(step: int, loss: float) -> None:
        print(f"step {step:>{width}}/{args.steps}  loss {loss:.7g}")

    def check(step: int, arguments: Sequence[np.ndarray], results: Sequence[np.ndarray]) -> None:
        _check_against(
            f"the numpy reference (step {step})",
            run_reference(reference, arguments),
            results,
            "jax",
            _gradient_outputs(signature),
            _witnesses(reference, arguments, "jax"),
        )

    run, history = train_repartitioning(
        module,
        blocks,
        signature,
        inputs,
        args.steps,
        args.repartition_every,
        show,
        check if args.check else None,
    )
    print(_timing_line(run))
    return run_report(run) | {"repartitions": [done.to_json() for done in history]}


def _timing_line(run: TrainingRun) -> str:
    """The first step compiles on JAX: it is shown apart from the others' median."""
    first, rest = run.seconds[0], run.seconds[1:]
    then = f", then {_milliseconds(statistics.median(rest))} per step (median)" if rest else ""
    return f"time: first step {_milliseconds(first)}{then}"


def run_report(run: TrainingRun) -> dict[str, object]:
    """What `--report` says of a training run, beside the input, backend, seed and memory."""
    return {
        "steps": len(run.losses),
        "losses": list(run.losses),
        "seconds_per_step": list(run.seconds),
    }
