"""The `graph` ops that imported models need beyond TASO's set (neg, exp, log, sqrt,
reciprocal, erf, abs, sub, div, pow, max, min, compare, not, and, or, xor, where, cast,
broadcast, gather, reduce min/prod) and the element types f64, i8, i16, ui8 and i1.

The reference kernels are checked against hand-computed values (integer division
truncates, NaN propagates through max and min, casts truncate and saturate, empty
reductions give their identity), the JAX lowering against the reference for every op
on every element type it takes, the typing rules by their one-line messages, the
export by onnxruntime, and the passes by running them on a program of the new ops.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path
from typing import Any

import jax
import numpy as np
import onnxruntime as ort
import pytest
from conftest import Result
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.backends import NUMPY_DTYPES
from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import export_onnx
from tasoc.driver.index_ranges import check_index_ranges
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import entry_function
from tasoc.ir.shapes import DType, ShapeError
from tasoc.passes.autodiff.autodiff import AutodiffFailed, AutodiffPass
from tasoc.verify.equivalence import compare

ort.set_default_logger_severity(3)

Build = Callable[[GraphBuilder, str], SSAValue]
"""Builds one op's program on arguments of the given element type."""

FLOATS = ("f32", "f16", "bf16", "f64")
INTEGERS = ("i32", "i64", "i8", "i16", "ui8")
NUMBERS = FLOATS + INTEGERS
EVERY = (*NUMBERS, "i1")


def program(build: Build, dtype: str) -> ModuleOp:
    g = GraphBuilder()
    return g.build(build(g, dtype))


def one(op: Callable[..., SSAValue], *inputs: np.ndarray, **attrs: Any) -> np.ndarray:
    """The reference's result of the builder method `op` on arguments holding `inputs`."""
    g = GraphBuilder()
    names = {dtype: kind.value for kind, dtype in NUMPY_DTYPES.items()}
    args = [g.input(f"a{i}", a.shape, names[a.dtype]) for i, a in enumerate(inputs)]
    module = g.build(op(g, *args, **attrs))
    (result,) = run_reference(module, list(inputs))
    return result


def i32(values: Any) -> np.ndarray:
    return np.asarray(values, np.int32)


def f32(values: Any) -> np.ndarray:
    return np.asarray(values, np.float32)


# ------------------------------------------------------------------ reference values


def test_integer_division_truncates_toward_zero() -> None:
    quotient = one(GraphBuilder.div, i32([7, -7, 7, -7, 0]), i32([2, 2, -2, -2, 5]))
    np.testing.assert_array_equal(quotient, [3, -3, -3, 3, 0])
    assert quotient.dtype == np.int32


def test_integer_division_by_zero_is_an_error_and_float_division_is_ieee() -> None:
    with pytest.raises(ValueError, match=r"graph\.div: integer division by zero"):
        one(GraphBuilder.div, i32([1, 2]), i32([1, 0]))
    np.testing.assert_array_equal(
        one(GraphBuilder.div, f32([1, -1, 0]), f32([0, 0, 0])), [np.inf, -np.inf, np.nan]
    )


def test_max_and_min_propagate_nan() -> None:
    a, b = f32([np.nan, 1, 3]), f32([0, np.nan, 2])
    np.testing.assert_array_equal(one(GraphBuilder.max, a, b), [np.nan, np.nan, 3])
    np.testing.assert_array_equal(one(GraphBuilder.min, a, b), [np.nan, np.nan, 2])


def test_unary_math_matches_its_definitions() -> None:
    x = f32([-2, -0.5, 0, 0.5, 3])
    np.testing.assert_array_equal(one(GraphBuilder.neg, x), -x)
    np.testing.assert_array_equal(one(GraphBuilder.abs, x), np.abs(x))
    np.testing.assert_allclose(one(GraphBuilder.exp, x), np.exp(x.astype(np.float64)), rtol=1e-7)
    erf = [math.erf(v) for v in x.astype(np.float64)]
    np.testing.assert_allclose(one(GraphBuilder.erf, x), erf, rtol=1e-7, atol=1e-30)
    np.testing.assert_array_equal(one(GraphBuilder.log, f32([0, 1, -1])), [-np.inf, 0, np.nan])
    np.testing.assert_array_equal(one(GraphBuilder.sqrt, f32([4, 0, -1])), [2, 0, np.nan])
    np.testing.assert_array_equal(
        one(GraphBuilder.reciprocal, f32([4, -0.5, 0])), [0.25, -2, np.inf]
    )


def test_integer_negation_and_absolute_value_wrap() -> None:
    low = np.asarray([-128, -3, 5], np.int8)
    np.testing.assert_array_equal(one(GraphBuilder.neg, low), np.asarray([-128, 3, -5], np.int8))
    np.testing.assert_array_equal(one(GraphBuilder.abs, low), np.asarray([-128, 3, 5], np.int8))
    np.testing.assert_array_equal(one(GraphBuilder.neg, np.asarray([3], np.uint8)), [253])


def test_pow_on_floats_and_integers() -> None:
    np.testing.assert_allclose(
        one(GraphBuilder.pow, f32([4, 2, 0.5]), f32([0.5, -1, 2])), [2, 0.5, 0.25]
    )
    np.testing.assert_array_equal(
        one(GraphBuilder.pow, i32([3, -2, 5]), i32([2, 3, 0])), [9, -8, 1]
    )
    with pytest.raises(
        ValueError, match=r"graph\.pow: an integer raised to the negative integer -1"
    ):
        one(GraphBuilder.pow, i32([2]), i32([-1]))


@pytest.mark.parametrize(
    ("predicate", "expected"),
    [
        ("eq", [False, True, False, False]),
        ("ne", [True, False, True, True]),
        ("lt", [True, False, False, False]),
        ("le", [True, True, False, False]),
        ("gt", [False, False, True, False]),
        ("ge", [False, True, True, False]),
    ],
)
def test_compare_is_false_for_nan_except_ne(predicate: str, expected: list[bool]) -> None:
    result = one(
        GraphBuilder.compare, f32([1, 2, 3, np.nan]), f32([2, 2, 2, np.nan]), predicate=predicate
    )
    assert result.dtype == np.bool_
    np.testing.assert_array_equal(result, expected)


def test_logic_truth_tables() -> None:
    a, b = np.array([False, False, True, True]), np.array([False, True, False, True])
    np.testing.assert_array_equal(one(GraphBuilder.and_, a, b), [False, False, False, True])
    np.testing.assert_array_equal(one(GraphBuilder.or_, a, b), [False, True, True, True])
    np.testing.assert_array_equal(one(GraphBuilder.xor, a, b), [False, True, True, False])
    np.testing.assert_array_equal(one(GraphBuilder.not_, a), [True, True, False, False])


def test_where_broadcasts_all_three_operands() -> None:
    condition = np.array([True, False, True])
    a, b = f32([[1], [2]]), f32(-1)
    np.testing.assert_array_equal(
        one(GraphBuilder.where, condition, a, b), [[1, -1, 1], [2, -1, 2]]
    )


def test_casts_truncate_saturate_and_test_against_zero() -> None:
    x = f32([-300.7, -1.7, -0.5, 0.5, 1.7, 300.2, np.nan, np.inf])
    np.testing.assert_array_equal(
        one(GraphBuilder.cast, x, to="i8"), [-128, -1, 0, 0, 1, 127, 0, 127]
    )
    np.testing.assert_array_equal(one(GraphBuilder.cast, x, to="ui8"), [0, 0, 0, 0, 1, 255, 0, 255])
    big = one(GraphBuilder.cast, f32([1e30, -1e30]), to="i64")
    np.testing.assert_array_equal(big, [np.iinfo(np.int64).max, np.iinfo(np.int64).min])
    flags = one(GraphBuilder.cast, f32([0, -0.0, 2, np.nan]), to="i1")
    np.testing.assert_array_equal(flags, [False, False, True, True])
    np.testing.assert_array_equal(one(GraphBuilder.cast, np.array([True, False]), to="f16"), [1, 0])
    np.testing.assert_array_equal(one(GraphBuilder.cast, i32([300, -129]), to="i8"), [44, 127])
    # float16 rounds to nearest even: 1 + 2^-11 lies halfway between 1 and 1 + 2^-10.
    np.testing.assert_array_equal(one(GraphBuilder.cast, f32([1 + 2**-11]), to="f16"), [1.0])


def test_broadcast_is_numpys_broadcast_to() -> None:
    x = f32([[1], [2]])
    np.testing.assert_array_equal(
        one(GraphBuilder.broadcast, x, shape=(3, 2, 2)), np.broadcast_to(x, (3, 2, 2))
    )


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
def test_gather_takes_along_any_axis_with_negative_indices(axis: int) -> None:
    data = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    indices = np.asarray([[0, -1], [1, -2]], np.int64)
    result = one(GraphBuilder.gather, data, indices, axis=axis)
    np.testing.assert_array_equal(result, np.take(data, indices, axis=axis))


def test_gather_refuses_indices_outside_the_axis() -> None:
    with pytest.raises(ValueError, match=r"graph.gather: index -4 is out of range \[-3, 3\)"):
        one(GraphBuilder.gather, f32([1, 2, 3]), i32([0, -4]))


def test_a_run_checks_gather_indices_counting_from_the_end() -> None:
    """JAX cannot raise on data, so `tasoc run` checks indices before running."""
    g = GraphBuilder()
    module = g.build(g.gather(g.input("x", (2, 3)), g.input("i", (2,), "i64"), axis=1))
    function = entry_function(module)
    check_index_ranges(function, [np.zeros((2, 3), np.float32), np.asarray([-3, 2])])
    with pytest.raises(ValueError) as caught:
        check_index_ranges(function, [np.zeros((2, 3), np.float32), np.asarray([0, -4])])
    assert str(caught.value) == (
        "argument 'i' holds -4 at [1], outside [-3, 3): it is the indices of graph.gather, "
        "which has 3 entries along the gathered axis"
    )


def test_reduce_min_and_prod() -> None:
    x = f32([[3, -1, 2], [0.5, 4, np.nan]])
    np.testing.assert_array_equal(one(GraphBuilder.reduce, x, kind="min", axes=(1,)), [-1, np.nan])
    np.testing.assert_array_equal(
        one(GraphBuilder.reduce, x, kind="prod", axes=(0,)), [1.5, -4, np.nan]
    )
    wrapped = one(GraphBuilder.reduce, np.asarray([16, 16], np.int8), kind="prod", axes=(0,))
    assert wrapped.dtype == np.int8 and wrapped == 0  # 256 wraps in 8 bits


@pytest.mark.parametrize(
    ("dtype", "least"), [("f32", np.inf), ("i32", np.iinfo(np.int32).max), ("ui8", 255)]
)
def test_empty_reductions_give_the_identity(dtype: str, least: float) -> None:
    g = GraphBuilder()
    x = g.input("x", (2, 0), dtype)
    module = g.build(g.reduce(x, "min", (1,)), g.reduce(x, "prod", (1,), keepdims=True))
    args = random_inputs(module)
    for run in (run_reference, lambda m, a: lower(m)(*a)):
        smallest, product = run(module, args)
        np.testing.assert_array_equal(smallest, [least, least])
        np.testing.assert_array_equal(product, [[1], [1]])


# ------------------------------------------------------------------------ typing


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (
            lambda g: g.exp(g.input("x", (2,), "i32")),
            "graph.exp: operand must have a float element type, got i32",
        ),
        (
            lambda g: g.add(*[g.input(n, (2,), "i1") for n in "ab"]),
            "graph.add: operands must be a number (float or integer), got i1",
        ),
        (
            lambda g: g.neg(g.input("x", (2,), "i1")),
            "graph.neg: operand must be a number (float or integer), got i1",
        ),
        (
            lambda g: g.compare(g.input("a", (2,)), g.input("b", (2,), "f16"), "eq"),
            "graph.compare: element types differ: f16, f32",
        ),
        (
            lambda g: g.where(g.input("c", (2,), "i32"), g.input("a", (2,)), g.input("b", (2,))),
            "graph.where: condition must be i1 (boolean), got i32",
        ),
        (
            lambda g: g.where(g.input("c", (3,), "i1"), g.input("a", (2,)), g.input("b", (2,))),
            "graph.where: shapes 3 and 2 are not broadcastable",
        ),
        (lambda g: g.not_(g.input("x", (2,))), "graph.not: operand must be i1 (boolean), got f32"),
        (
            lambda g: g.broadcast(g.input("x", (2, 3)), (3,)),
            "graph.broadcast: cannot broadcast 2x3 to 3",
        ),
        (
            lambda g: g.gather(g.input("x", (2, 3)), g.input("i", (2,), "i8")),
            "graph.gather: indices must be i32 or i64, got i8",
        ),
        (
            lambda g: g.gather(g.input("x", (2, 3)), g.input("i", (2,), "i32"), -3),
            "graph.gather: axis -3 out of range for rank 2",
        ),
        (
            lambda g: g.reduce(g.input("x", (2,), "i1"), "max", (0,)),
            "graph.reduce: operand must be a number (float or integer), got i1",
        ),
    ],
)
def test_typing_errors_are_one_line(
    build: Callable[[GraphBuilder], SSAValue], message: str
) -> None:
    with pytest.raises(ShapeError) as caught:
        build(GraphBuilder())
    assert str(caught.value) == message


def test_element_types_have_their_sizes_and_unknown_names_are_refused() -> None:
    g = GraphBuilder()
    with pytest.raises(ValueError, match="'f128' is not a valid DType"):
        g.cast(g.input("x", (2,)), "f128")
    assert [DType(name).itemsize for name in EVERY] == [4, 2, 2, 8, 4, 8, 1, 2, 1, 1]


# ------------------------------------------------------------- JAX vs reference

UNARY_FLOAT: dict[str, Build] = {
    name: (lambda g, dt, name=name: getattr(g, name)(g.input("x", (2, 3), dt)))
    for name in ("exp", "log", "sqrt", "reciprocal", "erf")
}
SIGNED: dict[str, Build] = {
    name: (lambda g, dt, name=name: getattr(g, name)(g.input("x", (2, 3), dt)))
    for name in ("neg", "abs")
}
BINARY: dict[str, Build] = {
    name: (
        lambda g, dt, name=name: getattr(g, name)(g.input("x", (2, 3), dt), g.input("y", (3,), dt))
    )
    for name in ("sub", "div", "pow", "max", "min")
}
COMPARE: dict[str, Build] = {
    f"compare_{p}": (
        lambda g, dt, p=p: g.compare(g.input("x", (2, 3), dt), g.input("y", (3,), dt), p)
    )
    for p in ("eq", "ne", "lt", "le", "gt", "ge")
}
LOGIC: dict[str, Build] = {
    "not": lambda g, dt: g.not_(g.input("x", (2, 3), dt)),
    **{
        name: (
            lambda g, dt, method=method: method(g, g.input("x", (2, 3), dt), g.input("y", (3,), dt))
        )
        for name, method in (
            ("and", GraphBuilder.and_),
            ("or", GraphBuilder.or_),
            ("xor", GraphBuilder.xor),
        )
    },
}
ANY_TYPE: dict[str, Build] = {
    "where": lambda g, dt: g.where(
        g.input("c", (3,), "i1"), g.input("x", (2, 3), dt), g.input("y", (2, 1), dt)
    ),
    "broadcast": lambda g, dt: g.broadcast(g.input("x", (2, 1), dt), (3, 2, 4)),
    "gather": lambda g, dt: g.gather(g.input("x", (2, 3), dt), g.input("i", (2, 2), "i64"), axis=1),
    **{
        f"cast_to_{to}": (lambda g, dt, to=to: g.cast(g.input("x", (2, 3), dt), to)) for to in EVERY
    },
}
REDUCE: dict[str, Build] = {
    f"reduce_{kind}": (lambda g, dt, kind=kind: g.reduce(g.input("x", (2, 3, 2), dt), kind, (0, 2)))
    for kind in ("sum", "mean", "max", "min", "prod")
}
CASES: list[tuple[str, Build, str]] = [
    *((name, build, dt) for name, build in UNARY_FLOAT.items() for dt in FLOATS),
    *((name, build, dt) for name, build in SIGNED.items() for dt in NUMBERS),
    *((name, build, dt) for name, build in {**BINARY, **REDUCE}.items() for dt in NUMBERS),
    *((name, build, dt) for name, build in COMPARE.items() for dt in EVERY),
    *((name, build, "i1") for name, build in LOGIC.items()),
    *((name, build, dt) for name, build in ANY_TYPE.items() for dt in EVERY),
]
"""Every new op (and every reduce kind) on every element type it takes."""


def float_to_integer(name: str, dtype: str) -> bool:
    """A cast of random floats to an integer type: checked on values away from integers
    below, since the two backends may round such a value's last bit differently."""
    return name.startswith("cast_to_") and dtype in FLOATS and DType(name[8:]).is_integer


def well_defined(module: ModuleOp, name: str) -> list[np.ndarray]:
    """Random arguments, with integer exponents non-negative (a negative one is an error
    of the reference and XLA's value in JAX)."""
    args = random_inputs(module)
    if name == "pow" and np.issubdtype(args[1].dtype, np.integer):
        args[1] = np.abs(args[1]) % 4
    return args


@pytest.mark.parametrize(("name", "build", "dtype"), CASES, ids=[f"{n}-{d}" for n, _, d in CASES])
def test_jax_matches_the_reference(name: str, build: Build, dtype: str) -> None:
    module = program(build, dtype)
    args = well_defined(module, name)
    if float_to_integer(name, dtype):
        args[0] = np.asarray([[-300.5, -2.5, -0.5], [0.5, 7.5, 6e4]]).astype(args[0].dtype)
    report = compare(run_reference(module, args), lower(module)(*args))
    assert report.ok, report.summary()


def test_f64_runs_in_float64_on_jax_and_leaves_float32_programs_as_they_are() -> None:
    """A program with an f64 tensor runs with JAX's x64 scoped to it: 1e300 + 1e300 and
    1 + 1e-12 come out exactly as the reference has them, and the process's setting and
    a float32 program's precision are untouched."""
    g = GraphBuilder()
    module = g.build(g.add(g.input("a", (3,), "f64"), g.input("b", (3,), "f64")))
    args = [np.asarray([1e300, 1.0, 0.1]), np.asarray([1e300, 1e-12, 0.2])]
    program = lower(module)
    (result,) = program(*args)
    assert program.x64 and result.dtype == np.float64
    np.testing.assert_array_equal(result, [2e300, 1 + 1e-12, 0.1 + 0.2])
    np.testing.assert_array_equal(run_reference(module, args)[0], result)
    assert not jax.config.jax_enable_x64
    g = GraphBuilder()
    narrow = lower(g.build(g.add(g.input("a", (2,), "f32"), g.input("b", (2,), "f32"))))
    (sum32,) = narrow(np.ones(2, np.float32), np.full(2, 1e-12, np.float32))
    assert not narrow.x64 and sum32.dtype == np.float32
    np.testing.assert_array_equal(sum32, [1.0, 1.0])


def test_jax_integer_division_truncates_like_the_reference() -> None:
    g = GraphBuilder()
    module = g.build(g.div(g.input("a", (4,), "i64"), g.input("b", (4,), "i64")))
    args = [np.asarray([7, -7, 7, -7]), np.asarray([2, 2, -2, -2])]
    np.testing.assert_array_equal(lower(module)(*args)[0], run_reference(module, args)[0])


# ------------------------------------------------------------------- ONNX export


def ort_gaps(name: str, dtype: str) -> bool:
    """Programs onnxruntime has no CPU kernel for (the ONNX is valid: onnx.checker passes
    on it): bfloat16 arithmetic (and it cannot return bfloat16 values), double Erf."""
    return dtype == "bf16" or name.startswith("cast_to_bf16") or (name == "erf" and dtype == "f64")


@pytest.mark.parametrize(("name", "build", "dtype"), CASES, ids=[f"{n}-{d}" for n, _, d in CASES])
def test_export_runs_in_onnxruntime_like_the_reference(name: str, build: Build, dtype: str) -> None:
    module = program(build, dtype)
    model = export_onnx(module, {})
    if ort_gaps(name, dtype):
        return
    args = well_defined(module, name)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    feeds = {info.name: arg for info, arg in zip(session.get_inputs(), args, strict=True)}
    report = compare(run_reference(module, args), session.run(None, feeds))
    assert report.ok, report.summary()


# ------------------------------------------------------------------------ passes

NEW_OPS_PROGRAM = """\
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {graph.param}, %i: tensor<3xi64>,
                %flag: tensor<8xi1>) -> (tensor<4x8xf32>, tensor<4x3xf32>, tensor<4xf32>) {
  %0 = graph.matmul %x, %w : tensor<4x8xf32>
  %1 = graph.matmul %0, %w : tensor<4x8xf32>
  %2 = graph.sub %1, %x : tensor<4x8xf32>
  %3 = graph.exp %2 : tensor<4x8xf32>
  %4 = graph.compare %3, %x {predicate = "gt"} : tensor<4x8xi1>
  %5 = graph.and %4, %flag : tensor<4x8xi1>
  %6 = graph.where %5, %3, %x : tensor<4x8xf32>
  %7 = graph.relu %6 : tensor<4x8xf32>
  %8 = graph.gather %7, %i {axis = 1 : i64} : tensor<4x3xf32>
  %9 = graph.reduce %7 {kind = "min", axes = array<i64: 1>, keepdims = false} : tensor<4xf32>
  %10 = graph.cast %9 {to = f16} : tensor<4xf16>
  %11 = graph.cast %10 {to = f32} : tensor<4xf32>
  func.return %7, %8, %11 : tensor<4x8xf32>, tensor<4x3xf32>, tensor<4xf32>
}
"""


@pytest.mark.parametrize("pipeline", ["equality-rewrite{timeout=5}", "soap-shard{mesh=2}"])
def test_the_search_passes_take_a_program_of_the_new_ops(
    tasoc: Callable[..., Result], tmp_path: Path, pipeline: str
) -> None:
    path = tmp_path / "new_ops.mlir"
    path.write_text(NEW_OPS_PROGRAM)
    result = tasoc("opt", path, "-p", pipeline, "--verify-each")
    assert result.code == 0, result
    assert "graph.gather" in result.out and "graph.where" in result.out


def test_autodiff_refuses_an_op_without_a_gradient_in_one_line(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    g = GraphBuilder()
    x, w = g.input("x", (2, 3)), g.param("w", (3,))
    path = tmp_path / "gather.mlir"
    path.write_text(
        str(g.build(g.reduce(g.gather(g.mul(x, w), g.input("i", (2,), "i32"), 1), "sum", (0, 1))))
    )
    result = tasoc("opt", path, "-p", "autodiff")
    assert result.code == 1 and result.err.strip() == (
        "tasoc: error: autodiff: no gradient is defined for graph.gather, which the loss depends on"
    )


def test_autodiff_of_the_new_ops_is_checked_against_jax_grad() -> None:
    from test_autodiff import assert_matches_jax_grad

    g = GraphBuilder()
    x, w = g.input("x", (2, 3)), g.param("w", (3,))
    positive = g.add(g.exp(g.mul(x, w)), g.ones((2, 3)))
    chosen = g.where(g.compare(x, w, "gt"), g.sqrt(positive), g.neg(g.log(positive)))
    y = g.sub(g.div(chosen, g.reciprocal(positive)), g.erf(g.max(g.abs(x), g.min(w, x))))
    wide = g.broadcast(g.cast(g.cast(y, "f64"), "f32"), (4, 2, 3))
    assert_matches_jax_grad(g.build(g.reduce(wide, "sum", (0, 1, 2))), loss="sum")


def test_autodiff_refuses_min_and_prod_reductions() -> None:
    g = GraphBuilder()
    w = g.param("w", (3,))
    module = g.build(g.reduce(w, "prod", (0,)))
    with pytest.raises(
        AutodiffFailed, match=r"no gradient is defined for graph\.reduce of kind 'prod'"
    ):
        AutodiffPass().apply(Context(), module)
