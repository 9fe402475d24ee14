"""Shared helpers of the autodiff tests: gradients three ways.

- `step_gradients`: the `autodiff{emit=gradients}` program run on the numpy reference
  (the ground truth of what the program computes; its JAX lowering is checked against
  the reference elsewhere, and not compiling it halves these tests' time).
- `jax_gradients`: `jax.value_and_grad` of the JAX lowering of the forward program plus
  the same loss (`forward_with_loss`), the baseline the issue names.
- `evaluate64`: any light graph run with the reference kernels on float64 arrays, for
  central finite differences that are not limited by float32.

And `convnet`, a small forward program with most CNN ops, which the autodiff and the
training `--check` tests both differentiate.
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
from tasoc.ir.builder import GraphBuilder
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


def convnet() -> ModuleOp:
    """conv (strides, padding, groups, fused relu), batchnorm, both pools, enlarge,
    split with an unused piece, concat, transpose, reshape, softmax, reduce max."""
    g = GraphBuilder()
    x = g.input("x", (2, 4, 7, 7))
    w = g.param("w", (6, 2, 3, 3))
    small = g.param("small", (6, 6, 1, 1))
    gamma, beta = g.param("gamma", (6,)), g.param("beta", (6,))
    mean, var = g.param("mean", (6,)), g.param("var", (6,))
    y = g.conv2d(x, w, strides=(2, 2), padding="same", activation="relu", groups=2)
    y = g.batchnorm(y, gamma, beta, mean, var)
    y = g.conv2d(y, g.enlarge(small, (3, 3)), padding="same")
    a = g.pool2d(y, "max", (2, 2), (1, 1), "same")
    b = g.pool2d(y, "avg", (3, 3), (1, 1), "same")
    first, _, third = g.split(g.concat([a, b], axis=1), axis=1, sizes=(4, 2, 6))
    z = g.add(g.reduce(first, "max", (1,), keepdims=True), third)
    z = g.transpose(g.reshape(z, (2, 6, 16)), (0, 2, 1))
    return g.build(g.reshape(g.softmax(z, axis=1), (2, 96)))
