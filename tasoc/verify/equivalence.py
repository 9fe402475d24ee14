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
| f64   | 1e-4 | 1e-5  | as f32: the JAX lowering computes f64 in float32 (no x64 mode) |
| integers, i1 | 0 | 0 | integer and boolean arithmetic is exact |

Outputs named in `gradients` (a training step's gradients and updated weights and
state) are compared at `GRADIENT_TOLERANCES` (f32: 1e-3 and 1e-3): a gradient is the
end of the longest chain of roundings in a program, which batch statistics and relu
kinks amplify; JAX's own `check_grads` allows 2e-3 in float32 for the same reason.
The reference computes every op in float64 (`tasoc.backends.numpy.kernels`), so
what the looser bound admits is the backend's error, not the reference's.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends import describe, numpy_dtype
from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.ir.program import arg_infos, entry_function
from tasoc.ir.shapes import DType

Backend = Literal["numpy", "jax"]

_EXACT: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(kind): (0.0, 0.0) for kind in DType if not kind.is_float
}
"""Integers and booleans compare exactly."""

DEFAULT_TOLERANCES: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(DType.F32): (1e-4, 1e-5),
    numpy_dtype(DType.F16): (1e-2, 1e-3),
    numpy_dtype(DType.BF16): (5e-2, 1e-2),
    numpy_dtype(DType.F64): (1e-4, 1e-5),
    **_EXACT,
}
"""(rtol, atol) by the expected output's dtype; see the module docstring."""

GRADIENT_TOLERANCES: Mapping[np.dtype, tuple[float, float]] = {
    numpy_dtype(DType.F32): (1e-3, 1e-3),
    numpy_dtype(DType.F16): (5e-2, 1e-2),
    numpy_dtype(DType.BF16): (1e-1, 5e-2),
    numpy_dtype(DType.F64): (1e-3, 1e-3),
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
        return OutputReport(index, *names, np.inf, np.inf, rtol, atol, False, problem)
    want = expected.astype(np.float64)
    got = actual.astype(np.float64)
    with np.errstate(invalid="ignore", divide="ignore"):
        error = np.abs(got - want)
        agree = (np.isnan(want) & np.isnan(got)) | (np.isinf(want) & (want == got))
        error = np.where(agree, 0.0, np.nan_to_num(error, nan=np.inf))
        magnitude = np.where(np.isfinite(want), np.abs(want), 0.0)
        scale = max(1.0, float(magnitude.max(initial=0.0)))
        within = error <= atol * scale + rtol * magnitude
        relative = np.where(magnitude > 0, error / magnitude, np.where(error > 0, np.inf, 0.0))
    return OutputReport(
        index,
        *names,
        max_abs_error=float(error.max(initial=0.0)),
        max_rel_error=float(relative.max(initial=0.0)),
        rtol=rtol,
        atol=atol,
        ok=bool(within.all()),
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
class OpMismatch:
    """An op whose JAX lowering and reference kernel disagree on the same inputs."""

    position: int
    name: str
    report: EquivalenceReport


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
) -> tuple[int, list[OpMismatch]]:
    """Run `@main` op by op with the JAX lowerings (eagerly) and check every op against
    its reference kernel on the very same inputs; (ops checked, mismatches).
    `progress(done, total)` hears of each op of `@main` done (a training step's
    thousands of ops take a while).

    This is the check that does not depend on how a program amplifies rounding: in a
    deep training step two correct float32 computations drift apart (a relu whose input
    is within rounding of zero passes the gradient in one and not in the other), so
    end-to-end outputs may differ where every op is right. Fed identical inputs, each
    op's lowering must agree with its kernel at the default tolerances.
    """
    # Imported here so that numpy-only users never pay for importing JAX.
    from tasoc.backends.jax.lowering import JAX_KERNELS, lower
    from tasoc.backends.numpy.kernels import KERNELS
    from tasoc.ir.graph import GraphOp

    function = entry_function(module)
    program = lower(module)
    values = dict(zip(function.body.block.args, program.device_args(args), strict=True))
    mismatches = []
    checked = 0
    ops = list(function.body.block.ops)
    for position, op in enumerate(ops):
        if progress is not None:
            progress(position, len(ops))
        if not isinstance(op, GraphOp):
            continue
        attrs = op.py_attrs()
        inputs = [values[v] for v in op.operands]
        results = JAX_KERNELS[op.op_name()](attrs, inputs)
        expected = KERNELS[op.op_name()](attrs, [np.asarray(x) for x in inputs])
        got = [_as_declared(r, e) for r, e in zip(results, expected, strict=True)]
        report = compare(expected, got)
        if not report.ok:
            mismatches.append(OpMismatch(position, op.name, report))
        values.update(zip(op.results, results, strict=True))
        checked += 1
    return checked, mismatches
