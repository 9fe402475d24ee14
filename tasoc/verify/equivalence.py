"""Numeric equivalence: do two programs, or two backends, compute the same thing?

`equivalent(a, b)` runs both programs on the same random inputs (DESIGN.md §4) and
`compare` judges their outputs element by element. An element passes when

    |actual - expected| <= atol * max(1, max|expected|) + rtol * |expected|

The absolute term is scaled by the output's largest magnitude because float sums
are only accurate relative to the size of what they add up: an element near zero
that came out of a cancellation in a long dot product carries an error of the
order of eps times its operands, not of itself. NaNs match NaNs and infinities
match infinities of the same sign.

Default tolerances by the expected output's element type (an explicit `rtol` or
`atol` overrides them for every output):

| dtype | rtol | atol  | why |
| ----- | ---- | ----- | --- |
| f32   | 1e-4 | 1e-5  | eps is 1.2e-7; backends differ in summation order and fusion |
| f16   | 1e-2 | 1e-3  | eps is 9.8e-4: one or two roundings apart, plus accumulation |
| bf16  | 5e-2 | 1e-2  | eps is 7.8e-3: same reasoning with 8 mantissa bits |
| f64   | 1e-12 | 1e-13 | eps is 2.2e-16; JAX runs a program with f64 in x64 mode |
| integers, i1 | 0 | 0 | integer and boolean arithmetic is exact |

Outputs named in `gradients` (a training step's gradients and updated weights and
state) are compared at `GRADIENT_TOLERANCES` (f32: 1e-3 and 1e-3, f64: 1e-10 and
1e-10): a gradient is the
end of the longest chain of roundings in a program, which batch statistics and relu
kinks amplify; JAX's own `check_grads` allows 2e-3 in float32 for the same reason.
The reference computes every op in float64 (`tasoc.backends.numpy.kernels`), so
what the looser bound admits is the backend's error, not the reference's.

Two witnesses speak when outputs still differ (`tasoc run --check` asks them):
`arbitrate` measures both computations' distance from the program computed in float64
(`run_float64`), and `compare_ops` feeds every op of the JAX lowering and its reference
kernel the same inputs.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import ml_dtypes
import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends import describe, numpy_dtype
from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.ir.program import arg_infos, entry_function
from tasoc.ir.shapes import DType

Backend = Literal["numpy", "jax"]

_ROUNDED: frozenset[np.dtype] = frozenset(numpy_dtype(kind) for kind in DType if kind.is_float)
"""The dtypes that round (bfloat16 is not a NumPy float: `ml_dtypes`)."""

_EXACT: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(kind): (0.0, 0.0) for kind in DType if not kind.is_float
}
"""Integers and booleans compare exactly."""

DEFAULT_TOLERANCES: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(DType.F32): (1e-4, 1e-5),
    numpy_dtype(DType.F16): (1e-2, 1e-3),
    numpy_dtype(DType.BF16): (5e-2, 1e-2),
    numpy_dtype(DType.F64): (1e-12, 1e-13),
    **_EXACT,
}
"""(rtol, atol) by the expected output's dtype; see the module docstring."""

GRADIENT_TOLERANCES: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(DType.F32): (1e-3, 1e-3),
    numpy_dtype(DType.F16): (5e-2, 1e-2),
    numpy_dtype(DType.BF16): (1e-1, 5e-2),
    numpy_dtype(DType.F64): (1e-10, 1e-10),
    **_EXACT,
}
"""(rtol, atol) of gradient outputs by dtype (module docstring)."""


@dataclass(frozen=True, slots=True)
class OutputReport:
    """How one output compares: its largest errors and whether it is within tolerance."""

    index: int
    expected: str
    actual: str
    max_abs_error: float
    max_rel_error: float
    rtol: float
    atol: float
    ok: bool
    tolerance_used: float = np.inf
    """The largest error as a fraction of what its element is allowed (over 1: not
    within tolerance): how near to failing an output is, across dtypes and scales."""
    problem: str | None = None
    """Why the output could not be compared element-wise (shape or dtype differ)."""

    def describe(self) -> str:
        if self.problem:
            return f"output #{self.index}: {self.problem}"
        return (
            f"output #{self.index} ({self.expected}): max abs error {self.max_abs_error:.3g}, "
            f"max rel error {self.max_rel_error:.3g} (rtol {self.rtol:g}, atol {self.atol:g})"
        )


@dataclass(frozen=True, slots=True)
class EquivalenceReport:
    """The comparison of every output; true (and `.ok`) when all are within tolerance."""

    outputs: tuple[OutputReport, ...]
    problem: str | None = None
    """Why the outputs could not be paired (their numbers differ)."""

    @property
    def ok(self) -> bool:
        return self.problem is None and all(o.ok for o in self.outputs)

    def __bool__(self) -> bool:
        return self.ok

    def summary(self, most: int = 3) -> str:
        """One line: the verdict and the worst output, or the first `most` failing ones
        and how many more fail (a training step has hundreds of outputs)."""
        if self.problem:
            return f"NOT equivalent: {self.problem}"
        failing = [o for o in self.outputs if not o.ok]
        if failing:
            shown = "; ".join(o.describe() for o in failing[:most])
            more = f"; and {len(failing) - most} more outputs" if len(failing) > most else ""
            return f"NOT equivalent: {shown}{more}"
        if not self.outputs:
            return "equivalent: no outputs"
        worst = max(self.outputs, key=lambda o: o.max_abs_error)
        return f"equivalent ({len(self.outputs)} outputs); worst {worst.describe()}"


def _compare_one(
    index: int,
    expected: np.ndarray,
    actual: np.ndarray,
    rtol: float | None,
    atol: float | None,
    defaults: Mapping[np.dtype, tuple[float, float]],
) -> OutputReport:
    default_rtol, default_atol = defaults.get(expected.dtype, (1e-4, 1e-5))
    rtol = default_rtol if rtol is None else rtol
    atol = default_atol if atol is None else atol
    names = describe(expected), describe(actual)
    if expected.shape != actual.shape or expected.dtype != actual.dtype:
        what = "shape" if expected.shape != actual.shape else "dtype"
        problem = f"{what} differs: expected {names[0]}, got {names[1]}"
        return OutputReport(index, *names, np.inf, np.inf, rtol, atol, False, np.inf, problem)
    want = expected.astype(np.float64)
    got = actual.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        error = np.abs(got - want)
        agree = (np.isnan(want) & np.isnan(got)) | (np.isinf(want) & (want == got))
        error = np.where(agree, 0.0, np.nan_to_num(error, nan=np.inf))
        magnitude = np.where(np.isfinite(want), np.abs(want), 0.0)
        scale = max(1.0, float(magnitude.max(initial=0.0)))
        allowed = atol * scale + rtol * magnitude
        within = error <= allowed
        relative = np.where(magnitude > 0, error / magnitude, np.where(error > 0, np.inf, 0.0))
        used = np.where(allowed > 0, error / allowed, np.where(error > 0, np.inf, 0.0))
    return OutputReport(
        index,
        *names,
        max_abs_error=float(error.max(initial=0.0)),
        max_rel_error=float(relative.max(initial=0.0)),
        rtol=rtol,
        atol=atol,
        ok=bool(within.all()),
        tolerance_used=float(used.max(initial=0.0)),
    )


def compare(
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    rtol: float | None = None,
    atol: float | None = None,
    gradients: Collection[int] = (),
) -> EquivalenceReport:
    """Compare outputs pairwise; tolerances default by dtype, and by role for the
    outputs whose indices are in `gradients` (module docstring)."""
    if len(expected) != len(actual):
        return EquivalenceReport((), f"expected {len(expected)} outputs, got {len(actual)}")
    return EquivalenceReport(
        tuple(
            _compare_one(
                i,
                np.asarray(e),
                np.asarray(a),
                rtol,
                atol,
                GRADIENT_TOLERANCES if i in gradients else DEFAULT_TOLERANCES,
            )
            for i, (e, a) in enumerate(zip(expected, actual, strict=True))
        )
    )


def run(module: ModuleOp, args: Sequence[np.ndarray], backend: Backend) -> list[np.ndarray]:
    """Run `@main` on `args` with the reference interpreter or the JAX backend."""
    if backend == "numpy":
        return run_reference(module, args)
    if backend == "jax":
        # Imported here so that numpy-only users never pay for importing JAX.
        from tasoc.backends.jax import lower

        return lower(module)(*args)
    raise ValueError(f"unknown backend '{backend}' (expected 'numpy' or 'jax')")


def equivalent(
    module_a: ModuleOp,
    module_b: ModuleOp,
    seed: int = 0,
    backend: Backend = "numpy",
    rtol: float | None = None,
    atol: float | None = None,
) -> EquivalenceReport:
    """Run both programs on the same random inputs and compare b's outputs to a's.

    The inputs are `random_inputs(module_a, seed)`: `a` is taken to be the original
    program, whose uses of its arguments (batchnorm variances, embedding ids)
    decide what valid inputs are. Raises ValueError when the argument types differ.
    """
    sigs_a = [info.sig for info in arg_infos(entry_function(module_a))]
    sigs_b = [info.sig for info in arg_infos(entry_function(module_b))]
    if sigs_a != sigs_b:
        raise ValueError(
            "programs take different arguments: "
            f"({', '.join(map(str, sigs_a))}) vs ({', '.join(map(str, sigs_b))})"
        )
    args = random_inputs(module_a, seed)
    return compare(run(module_a, args, backend), run(module_b, args, backend), rtol, atol)


@dataclass(frozen=True, slots=True)
class OpReport:
    """How one op's JAX lowering compares with its reference kernel on the same inputs."""

    position: int
    name: str
    report: EquivalenceReport

    @property
    def tolerance_used(self) -> float:
        """The op's largest error as a fraction of its tolerance (`OutputReport`)."""
        return max((o.tolerance_used for o in self.report.outputs), default=0.0)

    def describe(self) -> str:
        """`op 12 (graph.matmul)` and its worst result's errors, in one line."""
        if self.report.problem or not self.report.outputs:
            return f"op {self.position} ({self.name}): {self.report.summary()}"
        worst = max(self.report.outputs, key=lambda o: o.tolerance_used)
        return f"op {self.position} ({self.name}) result {worst.describe().removeprefix('output ')}"


@dataclass(frozen=True, slots=True)
class OpByOp:
    """Every op of a program compared with its kernel on the same inputs (`compare_ops`)."""

    ops: tuple[OpReport, ...]

    @property
    def mismatches(self) -> list[OpReport]:
        return [op for op in self.ops if not op.report.ok]

    @property
    def most_drift(self) -> OpReport | None:
        """The op nearest to (or furthest past) its tolerance, None for no op."""
        return max(self.ops, key=lambda op: op.tolerance_used, default=None)


def _as_declared(result: Any, expected: np.ndarray) -> np.ndarray:
    """A JAX result in the reference's dtype where JAX holds that dtype narrower (i64 as
    int32 and f64 as float32 without x64 mode), as `JaxProgram` returns its outputs."""
    import jax  # here: numpy-only users never pay for importing JAX

    got = np.asarray(jax.device_get(result))
    if got.dtype != expected.dtype and jax.dtypes.canonicalize_dtype(expected.dtype) == got.dtype:
        return got.astype(expected.dtype)
    return got


def compare_ops(
    module: ModuleOp,
    args: Sequence[np.ndarray],
    progress: Callable[[int, int], None] | None = None,
) -> OpByOp:
    """Run `@main` op by op with the JAX lowerings (eagerly) and compare every op with
    its reference kernel on the very same inputs. `progress(done, total)` hears of each
    op of `@main` done (a training step's thousands of ops take a while).

    This is the check that does not depend on how a program amplifies rounding: in a
    deep training step two correct float32 computations drift apart (a relu whose input
    is within rounding of zero passes the gradient in one and not in the other), so
    end-to-end outputs may differ where every op is right. Fed identical inputs, each
    op's lowering must agree with its kernel at the default tolerances. A 64-bit
    program runs in its own precision (`JaxProgram.precision`), as it does jitted.
    """
    # Imported here so that numpy-only users never pay for importing JAX.
    from tasoc.backends.jax.lowering import JAX_KERNELS, lower
    from tasoc.backends.numpy.kernels import KERNELS
    from tasoc.ir.graph import GraphOp

    function = entry_function(module)
    program = lower(module)
    reports = []
    with program.precision():
        values = dict(zip(function.body.block.args, program.device_args(args), strict=True))
        ops = list(function.body.block.ops)
        for position, op in enumerate(ops):
            if progress is not None:
                progress(position, len(ops))
            if not isinstance(op, GraphOp):
                continue
            attrs = op.py_attrs()
            inputs = [values[v] for v in op.operands]
            results = JAX_KERNELS[op.op_name()](attrs, inputs)
            with np.errstate(all="ignore"):  # IEEE results, as `run_reference` computes them
                expected = KERNELS[op.op_name()](attrs, [np.asarray(x) for x in inputs])
            got = [_as_declared(r, e) for r, e in zip(results, expected, strict=True)]
            reports.append(OpReport(position, op.name, compare(expected, got)))
            values.update(zip(op.results, results, strict=True))
    return OpByOp(tuple(reports))


ROUNDING_FACTOR = 32.0
"""How much further from the float64 evaluation than the reference a backend's output
may be and still count as rounding (`arbitrate`). The reference rounds each op once
(its kernels compute in float64); JAX's float32 kernels round more often within an op
(a matmul accumulates its k products in float32), and the program amplifies both
alike. Measured on tanh MLPs 10-40 layers deep whose outputs differ beyond the
tolerances: JAX is 3-9x further than the reference at width 64-256 and 18-19x at
width 1024. A wrong op or a whole-program lowering fault puts it orders of magnitude
further, and the op-by-op witness (`compare_ops`) holds each op to the tolerances."""


def distance(actual: np.ndarray, exact: np.ndarray) -> float:
    """How far `actual` is from `exact`: the largest difference over the largest finite
    magnitude of `exact` (1 where that is 0), so a few elements near zero do not make
    it large as relative errors do. Equal infinities and two NaNs are 0 apart."""
    want = np.asarray(exact, np.float64)
    got = np.asarray(actual, np.float64)
    with np.errstate(invalid="ignore"):
        agree = (want == got) | (np.isnan(want) & np.isnan(got))
        error = np.where(agree, 0.0, np.nan_to_num(np.abs(got - want), nan=np.inf))
    scale = float(np.abs(want[np.isfinite(want)]).max(initial=0.0)) or 1.0
    return float(error.max(initial=0.0)) / scale


@dataclass(frozen=True, slots=True)
class Arbitration:
    """One output's distances from its float64 evaluation (`arbitrate`)."""

    index: int
    dtype: str
    actual: float
    """The distance of the checked backend's output."""
    reference: float
    """The distance of the output it was compared with."""
    eps: float
    """One rounding of the output's dtype (0 for integers, which do not round)."""

    @property
    def ok(self) -> bool:
        """Each within `ROUNDING_FACTOR` of the other's distance, each taken to be at
        least one rounding (a run exact by chance promises no more): both round as
        float32 does. One much further than the other is wrong, whichever it is — a
        backend off, or the output compared with (`--check-onnxruntime`'s) off."""
        actual, reference = max(self.actual, self.eps), max(self.reference, self.eps)
        return actual <= ROUNDING_FACTOR * reference and reference <= ROUNDING_FACTOR * actual

    def describe(self, actual: str, reference: str) -> str:
        """`output #3: jax 3.1e-4, numpy 2.9e-4 from float64: ...`, the verdict last."""
        if self.ok:
            verdict = f"equivalent within {self.dtype} rounding"
        elif self.actual > self.reference:
            verdict = f"{actual} is more than {ROUNDING_FACTOR:g}x further than {reference}"
        else:
            verdict = f"{reference} is more than {ROUNDING_FACTOR:g}x further than {actual}"
        return (
            f"output #{self.index}: {actual} {self.actual:.2g}, {reference} "
            f"{self.reference:.2g} from float64: {verdict}"
        )


def arbitrate(
    expected: Sequence[np.ndarray],
    actual: Sequence[np.ndarray],
    wide: Sequence[np.ndarray],
    indices: Iterable[int],
) -> list[Arbitration]:
    """For the outputs at `indices`, where `actual` and `expected` (two computations of
    one program in the outputs' precision) differ beyond tolerance: how far each is
    from `wide`, the program computed in float64 (`run_float64`). The one nearer the
    truth cannot be told by comparing the two; against float64 it can, and a backend no
    further than `ROUNDING_FACTOR` times the reference rounds as the reference does."""
    arbitrations = []
    for i in indices:
        dtype = np.asarray(expected[i]).dtype
        eps = float(ml_dtypes.finfo(dtype).eps) if dtype in _ROUNDED else 0.0
        reference, backend = distance(expected[i], wide[i]), distance(actual[i], wide[i])
        arbitrations.append(Arbitration(i, dtype.name, backend, reference, eps))
    return arbitrations
