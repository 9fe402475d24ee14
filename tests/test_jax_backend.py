"""The JAX lowering against the reference interpreter, op by op and on whole graphs.

Every op gets a property test over random shapes and attributes: `graphs(ops=[op])`
draws programs made of that op (with whatever weights and inputs it needs), and the
jitted JAX function must agree with the reference within `compare`'s tolerances.
JAX compiles once per program, so example counts stay small.
"""

from __future__ import annotations

import os

import ml_dtypes
import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects import arith
from xdsl.dialects.builtin import ModuleOp, i64
from xdsl.ir import OpResult, SSAValue

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import JaxProgram, bench, lower
from tasoc.backends.jax.xla_flags import with_correctness_flags
from tasoc.backends.numpy import run_reference
from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import entry_function, return_values
from tasoc.ir.shapes import ConstData, DType
from tasoc.ir.traits import Training
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import graphs

ALL_OPS = sorted(G.OPS_BY_NAME)
NUMERIC_OPS = [
    *("batchnorm", "conv2d", "gelu", "layernorm", "matmul", "pool2d", "reduce", "softmax"),
    *("div", "erf", "exp", "log", "pow", "reciprocal", "sqrt"),
]


def assert_jax_matches_reference(module: ModuleOp) -> None:
    """Outputs of backward ops (the `Training` trait), or computed from them, are
    gradients and compared at gradient tolerances, as `tasoc run --check` compares a
    step's gradients: two batchnorm gradients chained on a batch of 24 amplify float32
    rounding past the default 1e-5 (found by hypothesis)."""
    args = random_inputs(module)
    returned = return_values(entry_function(module))
    gradients = {i for i, value in enumerate(returned) if _after_a_backward_op(value)}
    report = compare(run_reference(module, args), lower(module)(*args), gradients=gradients)
    assert report.ok, f"{report.summary()}\n{module}"


def _after_a_backward_op(value: SSAValue) -> bool:
    stack, seen = [value], set()
    while stack:
        top = stack.pop()
        if isinstance(top, OpResult) and top.op not in seen:
            seen.add(top.op)
            if top.op.has_trait(Training):
                return True
            stack.extend(top.op.operands)
    return False


def op_names(module: ModuleOp) -> set[str]:
    return {op.op_name() for op in module.walk() if isinstance(op, G.GraphOp)}


@pytest.mark.parametrize("op", ALL_OPS)
@settings(max_examples=examples(6), deadline=None)
@given(data=st.data())
def test_each_op_matches_the_reference(op: str, data: st.DataObject) -> None:
    module = data.draw(graphs(max_ops=2, ops=[op]), label="module")
    assert op in op_names(module)
    assert_jax_matches_reference(module)


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
@pytest.mark.parametrize("op", NUMERIC_OPS)
@settings(max_examples=examples(3), deadline=None)
@given(data=st.data())
def test_half_precision_ops_match_the_reference(op: str, dtype: DType, data: st.DataObject) -> None:
    module = data.draw(graphs(max_ops=1, ops=[op], dtypes=[dtype]), label="module")
    assert_jax_matches_reference(module)


@settings(max_examples=30, deadline=None)
@given(module=graphs(max_ops=8))
def test_whole_graphs_match_the_reference(module: ModuleOp) -> None:
    assert_jax_matches_reference(module)


@settings(max_examples=10, deadline=None)
@given(module=graphs(max_ops=6, dtypes=[DType.F16, DType.BF16]))
def test_whole_half_precision_graphs_match_the_reference(module: ModuleOp) -> None:
    assert_jax_matches_reference(module)


@pytest.mark.parametrize("magnitude", [1.0, 1e10, 1e30, 1e36])
def test_softmax_after_an_average_pool_of_huge_equal_values_is_uniform(magnitude: float) -> None:
    """SqueezeNet's head with ONNX's constant test weights: equal logits near 1e30.

    XLA fused the pool's `sum * (1/169)` into softmax's `x - max x` as a fused
    multiply-add, so `x` there was not the value the maximum was taken of, every
    exponent underflowed, and every output was 0/0 = NaN.
    """
    g = GraphBuilder()
    x = g.input("x", (1, 1000, 13, 13))
    pooled = g.pool2d(x, "avg", (13, 13), (1, 1), "valid")
    module = g.build(g.softmax(g.reshape(pooled, (1, 1000))))
    logits = np.full((1, 1000, 13, 13), magnitude, np.float32)
    (result,) = lower(module)(logits)
    np.testing.assert_allclose(result, 1 / 1000, rtol=1e-6)
    np.testing.assert_array_equal(result, run_reference(module, [logits])[0])


def test_no_reduction_is_fused_into_ynnpack() -> None:
    """A 1x1 convolution, its bias, ReLU and the average pool after it (SqueezeNet's
    head): jaxlib's YNNPACK fused them into one reduction that gave NaN in ~2 % of runs
    of a long-lived process (`xla_flags` docstring). The convolution still goes to
    YNNPACK alone; the pool is XLA's own."""
    g = GraphBuilder()
    x = g.input("x", (1, 512, 13, 13))
    conv = g.conv2d(x, g.param("w", (1000, 512, 1, 1)), (1, 1), "valid")
    activation = g.relu(g.add(conv, g.param("b", (1, 1000, 1, 1))))
    module = g.build(g.pool2d(activation, "avg", (13, 13), (1, 1), "valid"))
    program = lower(module)
    compiled = program.fn.lower(*program.device_args(random_inputs(module, seed=0))).compile()
    fusions = [line for line in compiled.as_text().splitlines() if "__ynn_fusion" in line]
    assert fusions and not any("reduce" in line for line in fusions)
    assert "xla_cpu_experimental_ynn_fusion_type" in os.environ["XLA_FLAGS"]


def test_a_users_own_xla_flag_is_kept() -> None:
    mine = "--xla_cpu_experimental_ynn_fusion_type=individual_dot --xla_cpu_use_xnnpack=false"
    assert with_correctness_flags(mine) == mine
    assert with_correctness_flags("") == (
        "--xla_cpu_experimental_ynn_fusion_type=individual_dot,individual_convolution"
    )


def test_empty_reductions_and_splits_match_the_reference() -> None:
    g = GraphBuilder()
    x = g.input("x", (2, 0, 3))
    y = g.input("y", (2, 8))
    module = g.build(
        g.reduce(x, "max", (1,), keepdims=True),
        g.reduce(x, "sum", (1,)),
        *g.split(y, 1, (8, 0)),
        *g.split(x, 1, (0, 0)),
    )
    assert_jax_matches_reference(module)
    maximum = lower(module)(*random_inputs(module))[0]
    np.testing.assert_array_equal(maximum, np.full((2, 1, 3), -np.inf))


# ---------------------------------------------------------------- i64 handling


def i64_program() -> ModuleOp:
    g = GraphBuilder()
    ids = g.input("ids", (2, 3), "i64")
    table = g.param("table", (5, 4), "bf16")
    return g.build(g.embedding(ids, table), g.add(ids, ids))


def test_i64_runs_as_int32_inside_and_comes_back_as_int64() -> None:
    program = lower(i64_program())
    ids = np.array([[0, 4, 2], [1, 1, 3]], np.int64)
    table = np.arange(20, dtype=np.float32).reshape(5, 4).astype(ml_dtypes.bfloat16)
    rows, doubled = program(ids, table)
    assert rows.dtype == np.dtype(ml_dtypes.bfloat16)
    np.testing.assert_array_equal(rows, table[ids])
    assert doubled.dtype == np.int64
    np.testing.assert_array_equal(doubled, 2 * ids)


def test_i64_values_that_do_not_fit_in_int32_are_refused() -> None:
    program = lower(i64_program())
    ids = np.array([[0, 2**31, 0], [0, 0, 0]], np.int64)
    table = np.zeros((5, 4), ml_dtypes.bfloat16)
    with pytest.raises(ValueError, match="'ids' holds values outside int32"):
        program(ids, table)


# ------------------------------------------------------------- the program API


def scaled_program() -> tuple[ModuleOp, G.ConstantOp]:
    g = GraphBuilder()
    x = g.input("x", (3,))
    y = g.scale(x, 2.0)
    module = g.build(y)
    constant = next(op for op in module.walk() if isinstance(op, G.ConstantOp))
    return module, constant


def test_a_lowered_program_does_not_see_later_changes_to_the_module() -> None:
    module, constant = scaled_program()
    program = lower(module)
    constant.properties["value"] = G.to_attr(ConstData((), DType.F32, (5.0,)))
    x = np.array([1, 2, 3], np.float32)
    np.testing.assert_array_equal(program(x)[0], 2 * x)
    np.testing.assert_array_equal(lower(module)(x)[0], 5 * x)


def test_program_checks_arguments_like_the_reference() -> None:
    program = lower(scaled_program()[0])
    with pytest.raises(ValueError, match=r"'x' \(#0\) expects 3xf32, got 4xf32"):
        program(np.zeros(4, np.float32))


def test_bench_times_each_call_after_a_warm_up() -> None:
    program: JaxProgram = lower(scaled_program()[0])
    times = bench(program, [np.ones(3, np.float32)], repeats=4)
    assert len(times) == 4
    assert all(0 < t < 1 for t in times)


def test_ops_outside_the_graph_dialect_are_refused() -> None:
    module, constant = scaled_program()
    constant.parent_block().insert_op_before(arith.ConstantOp.from_int_and_width(1, i64), constant)
    with pytest.raises(ValueError, match=r"no JAX lowering for op 'arith\.constant'"):
        lower(module)
