"""Shared helpers of the autodiff tests: gradients three ways.

- `step_gradients`: the `autodiff{emit=gradients}` program run on the numpy reference
  (the ground truth of what the program computes; its JAX lowering is checked against
  the reference elsewhere, and not compiling it halves these tests' time).
- `jax_gradients`: `jax.value_and_grad` of the JAX lowering of the forward program plus
  the same loss (`forward_with_loss`), the baseline the issue names.
- `evaluate64`: any light graph run with the reference kernels on float64 arrays, for
  central finite differences that are not limited by float32.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import jax
import numpy as np
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_float64, run_reference
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.program import arg_infos, entry_function
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.autodiff.step import forward_with_loss


def training(module: ModuleOp, **options: Any) -> ModuleOp:
    """A copy of `module` made a training step by `autodiff{options}`."""
    step = module.clone()
    AutodiffPass(**options).apply(Context(), step)
    return step


def step_gradients(
    module: ModuleOp, seed: int = 0, **options: Any
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """(the step's arguments, its outputs: loss then one gradient per weight) on the
    numpy reference."""
    step = training(module, emit="gradients", **options)
    args = random_inputs(step, seed)
    return args, run_reference(step, args)


def jax_gradients(
    module: ModuleOp, args: Sequence[np.ndarray], **options: Any
) -> tuple[float, list[np.ndarray]]:
    """`jax.value_and_grad` of forward + loss by every weight, on the step's arguments
    (the gradients program takes exactly forward_with_loss's arguments)."""
    reference = dag_module.to_module(
        forward_with_loss(dag_module.from_module(module), AutodiffPass(**options))
    )
    program = lower(reference)
    device = program.device_args(args)
    weights = [i for i, info in enumerate(arg_infos(entry_function(reference))) if info.is_param]

    def loss(values: tuple[jax.Array, ...], every: tuple[jax.Array, ...]) -> jax.Array:
        given = list(every)
        for index, value in zip(weights, values, strict=True):
            given[index] = value
        return program.fn(*given)[0]

    # One jit around the whole: jax.grad of the jitted program outside a jit runs its
    # backward pass op by op, compiling each (10 s of a 20 s test on nasnet).
    value, grads = jax.jit(jax.value_and_grad(loss))(tuple(device[i] for i in weights), device)
    return float(value), [np.asarray(g) for g in grads]


GRADIENT_FLOOR = 1e-3
"""The smallest gradient scale `scaled_error` divides by: a gradient that is zero in
exact arithmetic (the sum of a softmax) comes out as float32 rounding noise, which
is no scale to judge an error by."""


def scaled_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """max |actual - expected| over the largest finite |expected| (at least
    `GRADIENT_FLOOR`); equal infinities and two NaNs agree (a max pool over a window
    of padding only is -inf, and so is its sum's gradient by a scale)."""
    want = np.asarray(expected, np.float64)
    got = np.asarray(actual, np.float64)
    agree = (want == got) | (np.isnan(want) & np.isnan(got))
    with np.errstate(invalid="ignore"):
        error = np.where(agree, 0.0, np.abs(got - want))
    finite = np.abs(want[np.isfinite(want)])
    scale = max(float(finite.max(initial=0.0)), GRADIENT_FLOOR)
    return float(np.nan_to_num(error, nan=np.inf).max(initial=0.0)) / scale


def evaluate64(dag: Dag, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """`dag`'s outputs computed with the reference kernels on float64 copies of the
    float arguments and constants (`run_float64`: nothing is rounded to float32 in
    between)."""
    return run_float64(dag_module.to_module(dag), args)
