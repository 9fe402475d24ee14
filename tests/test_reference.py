"""The NumPy reference interpreter against independent computations.

The reference is the project's ground truth, so these tests never compare it with
itself: each op is checked against hand-computed values, naive loops, or an
identity the op must satisfy (I_conv and I_matmul are identities, avg pooling is a
convolution with C_pool, enlarging a kernel keeps the convolution, ...).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

import ml_dtypes
import numpy as np
import pytest
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends import NUMPY_DTYPES
from tasoc.backends.arguments import load_inputs, random_inputs
from tasoc.backends.jax import JAX_KERNELS
from tasoc.backends.numpy import KERNELS, run_reference
from tasoc.backends.numpy.interpreter import KernelTypeError
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.graph import GRAPH_OPS, OPS_BY_NAME
from tasoc.ir.shapes import ShapeError

DTYPE_NAMES = {dtype: kind.value for kind, dtype in NUMPY_DTYPES.items()}
RNG = np.random.default_rng(1234)


def single_op(name: str, inputs: Sequence[np.ndarray], **attrs: Any) -> ModuleOp:
    """A program applying op `name` to arguments typed like `inputs`."""
    g = GraphBuilder()
    args = [g.input(f"a{i}", a.shape, DTYPE_NAMES[a.dtype]) for i, a in enumerate(inputs)]
    return g.build(*g.emit(OPS_BY_NAME[name], *args, **attrs).results)


def run_op(name: str, *inputs: np.ndarray, **attrs: Any) -> list[np.ndarray]:
    return run_reference(single_op(name, inputs, **attrs), inputs)


def run1(name: str, *inputs: np.ndarray, **attrs: Any) -> np.ndarray:
    (result,) = run_op(name, *inputs, **attrs)
    return result


def f32(values: Any) -> np.ndarray:
    return np.asarray(values, np.float32)


def normal(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


def conv(x: np.ndarray, w: np.ndarray, **attrs: Any) -> np.ndarray:
    return run1("conv2d", x, w, **{**CONV, **attrs})


# ------------------------------------------------------------------ coverage


def test_every_op_has_a_reference_kernel_and_a_jax_lowering() -> None:
    names = {op.op_name() for op in GRAPH_OPS}
    assert set(KERNELS) == names
    assert set(JAX_KERNELS) == names


# -------------------------------------------------------------- element-wise


def test_add_and_mul_broadcast() -> None:
    row, column = f32([[1, 2, 3]]), f32([[10], [20]])
    np.testing.assert_array_equal(run1("add", row, column), [[11, 12, 13], [21, 22, 23]])
    np.testing.assert_array_equal(run1("mul", row, column), [[10, 20, 30], [20, 40, 60]])


def test_integer_add_stays_integer() -> None:
    result = run1("add", np.array([1, 2], np.int32), np.array([3, -5], np.int32))
    assert result.dtype == np.int32
    np.testing.assert_array_equal(result, [4, -3])


def test_scale_multiplies_by_the_scalar() -> None:
    np.testing.assert_array_equal(run1("scale", f32([1, -2]), f32(2.5)), [2.5, -5.0])


def test_relu() -> None:
    np.testing.assert_array_equal(run1("relu", f32([-1, 0, 2])), [0, 0, 2])


def test_sigmoid_and_tanh_match_their_definitions() -> None:
    x = f32([-100, -3, -0.5, 0, 0.5, 3, 100])
    expected = [1 / (1 + math.exp(-v)) for v in x.astype(np.float64)]
    np.testing.assert_allclose(run1("sigmoid", x), expected, rtol=1e-6, atol=1e-30)
    np.testing.assert_allclose(run1("tanh", x), [math.tanh(v) for v in x], rtol=1e-6)


def test_gelu_is_the_exact_erf_form() -> None:
    x = f32([-6, -2, -0.5, 0, 0.5, 2, 6])
    expected = [v * 0.5 * (1 + math.erf(v / math.sqrt(2))) for v in x.astype(np.float64)]
    np.testing.assert_allclose(run1("gelu", x), expected, rtol=1e-6, atol=1e-12)
    tanh_form = 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    assert not np.allclose(run1("gelu", x), tanh_form, rtol=1e-6, atol=0)


# -------------------------------------------------------------------- linear


def test_transpose_moves_dimension_perm_i_to_i() -> None:
    x = normal(2, 3, 4)
    result = run1("transpose", x, perm=(2, 0, 1))
    assert result.shape == (4, 2, 3)
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        assert result[k, i, j] == x[i, j, k]


def test_batched_matmul_broadcasts_batch_dimensions() -> None:
    lhs, rhs = normal(3, 2, 4), normal(4, 5)
    result = run1("matmul", lhs, rhs)
    assert result.shape == (3, 2, 5)
    for b, m, n in itertools.product(range(3), range(2), range(5)):
        expected = sum(float(lhs[b, m, k]) * float(rhs[k, n]) for k in range(4))
        assert result[b, m, n] == pytest.approx(expected, rel=1e-5, abs=1e-6)


def test_i_matmul_is_the_identity_of_matmul() -> None:
    x = normal(2, 3, 4)
    g = GraphBuilder()
    value = g.input("x", x.shape)
    (result,) = run_reference(g.build(g.matmul(value, g.i_matmul(4))), [x])
    np.testing.assert_array_equal(result, x)


def conv_loops(
    x: np.ndarray,
    w: np.ndarray,
    strides: tuple[int, int],
    pads: tuple[int, int, int, int],
    groups: int,
) -> np.ndarray:
    """A grouped convolution written as the textbook loops, in float64."""
    n, channels, h, wd = x.shape
    out_channels, group_channels, kh, kw = w.shape
    top, left, bottom, right = pads
    padded = np.zeros((n, channels, h + top + bottom, wd + left + right))
    padded[:, :, top : top + h, left : left + wd] = x
    oh = (h + top + bottom - kh) // strides[0] + 1
    ow = (wd + left + right - kw) // strides[1] + 1
    out = np.zeros((n, out_channels, oh, ow))
    per_group = out_channels // groups
    for b, o, i, j in itertools.product(range(n), range(out_channels), range(oh), range(ow)):
        first = (o // per_group) * group_channels
        for c, di, dj in itertools.product(range(group_channels), range(kh), range(kw)):
            pixel = padded[b, first + c, i * strides[0] + di, j * strides[1] + dj]
            out[b, o, i, j] += pixel * w[o, c, di, dj]
    return out


@pytest.mark.parametrize(
    ("in_hw", "kernel", "strides", "padding", "pads"),
    [
        ((5, 5), (3, 3), (1, 1), "same", (1, 1, 1, 1)),
        ((5, 5), (3, 3), (2, 2), "same", (1, 1, 1, 1)),
        # `same` with an odd total puts the extra row/column at the bottom/right.
        ((6, 5), (3, 2), (2, 1), "same", (0, 0, 1, 1)),
        ((5, 6), (3, 3), (1, 2), "valid", (0, 0, 0, 0)),
        ((4, 4), (2, 3), (1, 1), (1, 0, 2, 1), (1, 0, 2, 1)),
    ],
)
@pytest.mark.parametrize("groups", [1, 2])
def test_conv2d_matches_explicit_loops(
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    padding: str | tuple[int, ...],
    pads: tuple[int, int, int, int],
    groups: int,
) -> None:
    x, w = normal(2, 4, *in_hw), normal(6, 4 // groups, *kernel)
    result = conv(x, w, strides=strides, padding=padding, groups=groups)
    np.testing.assert_allclose(
        result, conv_loops(x, w, strides, pads, groups), rtol=1e-5, atol=1e-5
    )


def test_conv2d_fused_relu_is_relu_of_conv() -> None:
    x, w = normal(1, 3, 4, 4), normal(5, 3, 3, 3)
    plain = conv(x, w)
    assert (plain < 0).any()
    np.testing.assert_array_equal(conv(x, w, activation="relu"), np.maximum(plain, 0))


def test_i_conv_is_the_identity_of_conv2d() -> None:
    x = normal(2, 3, 5, 4)
    g = GraphBuilder()
    value = g.input("x", x.shape)
    identity = g.i_conv(3, (3, 5))
    (result,) = run_reference(g.build(g.conv2d(value, identity, padding="same")), [x])
    np.testing.assert_array_equal(result, x)


@pytest.mark.parametrize(
    ("strides", "in_hw", "keeps"),
    [
        ((1, 1), (6, 6), True),
        ((2, 2), (7, 7), True),
        # Stride 2 over 6 columns: the 1-wide kernel needs no padding but the 3-wide
        # one gets its single padding column on the right, which moves every window.
        # Rewrites that enlarge a strided `same` convolution need that precondition.
        ((2, 2), (6, 6), False),
    ],
)
def test_enlarging_a_kernel_keeps_a_same_padded_convolution(
    strides: tuple[int, int], in_hw: tuple[int, int], keeps: bool
) -> None:
    x, w = normal(1, 2, *in_hw), normal(3, 2, 3, 1)
    g = GraphBuilder()
    value, weight = g.input("x", x.shape), g.param("w", w.shape)
    small = g.conv2d(value, weight, strides=strides, padding="same")
    large = g.conv2d(value, g.enlarge(weight, (5, 3)), strides=strides, padding="same")
    small_result, large_result = run_reference(g.build(small, large), [x, w])
    assert np.allclose(large_result, small_result, rtol=1e-5, atol=1e-6) == keeps


def test_enlarge_pads_the_kernel_with_zeros_symmetrically() -> None:
    w = normal(2, 1, 1, 3)
    result = run1("enlarge", w, kernel=(3, 5))
    assert result.shape == (2, 1, 3, 5)
    np.testing.assert_array_equal(result[:, :, 1, 1:4], w[:, :, 0, :])
    assert np.count_nonzero(result) == np.count_nonzero(w)


# ------------------------------------------------------------------- pooling


def pool(x: np.ndarray, kind: str, kernel: tuple[int, int], **attrs: Any) -> np.ndarray:
    settings = {"strides": kernel, "padding": "valid", **attrs}
    return run1("pool2d", x, kind=kind, kernel=kernel, **settings)


def test_max_pool_by_hand() -> None:
    x = f32(np.arange(1, 10).reshape(1, 1, 3, 3))
    np.testing.assert_array_equal(pool(x, "max", (2, 2), strides=(1, 1)), [[[[5, 6], [8, 9]]]])


def test_max_pool_pads_with_minus_infinity() -> None:
    x = -np.abs(normal(1, 2, 3, 3)) - 1
    result = pool(x, "max", (3, 3), strides=(1, 1), padding="same")
    assert (result < 0).all()
    assert result[0, 0, 0, 0] == x[0, 0, :2, :2].max()


def test_avg_pool_counts_padded_zeros() -> None:
    x = np.ones((1, 1, 2, 2), np.float32)
    result = pool(x, "avg", (3, 3), strides=(1, 1), padding="same")
    np.testing.assert_allclose(result, np.full((1, 1, 2, 2), 4 / 9), rtol=1e-6)


@pytest.mark.parametrize(
    ("kernel", "strides", "padding"),
    [((2, 2), (2, 2), "valid"), ((3, 3), (1, 1), "same"), ((3, 2), (2, 1), (1, 0, 1, 1))],
)
def test_avg_pool_equals_depthwise_conv_with_c_pool(
    kernel: tuple[int, int], strides: tuple[int, int], padding: str | tuple[int, ...]
) -> None:
    x = normal(2, 3, 5, 6)
    g = GraphBuilder()
    value = g.input("x", x.shape)
    pooled = g.pool2d(value, "avg", kernel, strides, padding)
    convolved = g.conv2d(value, g.c_pool(3, kernel), strides, padding, groups=3)
    pooled_result, conv_result = run_reference(g.build(pooled, convolved), [x])
    np.testing.assert_allclose(conv_result, pooled_result, rtol=1e-5, atol=1e-6)


# ----------------------------------------------------------------- structure


def test_concat_then_split_gives_the_pieces_back() -> None:
    a, b = normal(2, 1, 3), normal(2, 4, 3)
    g = GraphBuilder()
    va, vb = g.input("a", a.shape), g.input("b", b.shape)
    joined = g.concat([va, vb], axis=1)
    pieces = g.split(joined, axis=-2, sizes=(1, 4))
    joined_result, first, second = run_reference(g.build(joined, *pieces), [a, b])
    np.testing.assert_array_equal(joined_result[:, :1], a)
    np.testing.assert_array_equal(joined_result[:, 1:], b)
    np.testing.assert_array_equal(first, a)
    np.testing.assert_array_equal(second, b)


def test_split_into_three() -> None:
    x = f32(np.arange(6))
    assert [p.tolist() for p in run_op("split", x, axis=0, sizes=(1, 2, 3))] == [
        [0],
        [1, 2],
        [3, 4, 5],
    ]


def test_split_pieces_may_be_empty() -> None:
    x = f32(np.arange(6).reshape(2, 3))
    whole, after, before = run_op("split", x, axis=1, sizes=(3, 0, 0))
    np.testing.assert_array_equal(whole, x)
    assert after.shape == before.shape == (2, 0)
    empty = run_op("split", np.zeros((0, 2), np.float32), axis=0, sizes=(0, 0, 0))
    assert [p.shape for p in empty] == [(0, 2)] * 3


def test_split_sizes_must_not_be_negative() -> None:
    with pytest.raises(ShapeError, match=r"sizes \[4, -1\] must not be negative"):
        single_op("split", [f32(np.arange(3))], axis=0, sizes=(4, -1))


def test_reshape_is_row_major() -> None:
    x = f32(np.arange(6).reshape(2, 3))
    np.testing.assert_array_equal(run1("reshape", x, shape=(3, 2)), [[0, 1], [2, 3], [4, 5]])


# ----------------------------------------------------------------- constants


def run_constant(build: Any) -> np.ndarray:
    g = GraphBuilder()
    (result,) = run_reference(g.build(build(g)), [])
    return result


def test_filled_constants() -> None:
    np.testing.assert_array_equal(run_constant(lambda g: g.ones((2, 3))), np.ones((2, 3)))
    zeros = run_constant(lambda g: g.zeros((4,), "f16"))
    assert zeros.dtype == np.float16
    assert not zeros.any()


def test_c_pool_is_one_over_the_window_size() -> None:
    result = run_constant(lambda g: g.c_pool(3, (2, 3)))
    assert result.shape == (3, 1, 2, 3)
    np.testing.assert_allclose(result, 1 / 6, rtol=1e-7)


def test_i_conv_has_a_one_at_the_centre_for_matching_channels() -> None:
    result = run_constant(lambda g: g.i_conv(2, (3, 1)))
    expected = np.zeros((2, 2, 3, 1))
    expected[0, 0, 1, 0] = expected[1, 1, 1, 0] = 1
    np.testing.assert_array_equal(result, expected)


def test_i_matmul_and_constant() -> None:
    np.testing.assert_array_equal(run_constant(lambda g: g.i_matmul(3)), np.eye(3))
    value = run_constant(lambda g: g.constant([[1, 2], [3, 4]], "i64"))
    assert value.dtype == np.int64
    np.testing.assert_array_equal(value, [[1, 2], [3, 4]])


# ----------------------------------------------------------------- model ops


@pytest.mark.parametrize("axis", [0, 1, -1])
def test_softmax_is_a_distribution_along_its_axis(axis: int) -> None:
    x = np.round(normal(3, 4, 5) * 640) / 64  # multiples of 1/64: x + 1000 is exact
    result = run1("softmax", x, axis=axis)
    assert (result > 0).all()
    np.testing.assert_allclose(result.sum(axis=axis), 1, rtol=1e-6)
    np.testing.assert_allclose(run1("softmax", x + 1000, axis=axis), result, rtol=1e-5)


def test_softmax_by_hand() -> None:
    e = math.e
    expected = [1 / (1 + e + e * e), e / (1 + e + e * e), e * e / (1 + e + e * e)]
    np.testing.assert_allclose(run1("softmax", f32([0, 1, 2]), axis=0), expected, rtol=1e-6)


def test_reduce_kinds_and_keepdims() -> None:
    x = f32([[1, 2, 3], [4, 5, 9]])
    np.testing.assert_array_equal(run1("reduce", x, kind="sum", axes=(1,), keepdims=False), [6, 18])
    np.testing.assert_array_equal(
        run1("reduce", x, kind="mean", axes=(0,), keepdims=True), [[2.5, 3.5, 6]]
    )
    assert run1("reduce", x, kind="max", axes=(0, -1), keepdims=False) == 9


def test_reductions_over_no_values_give_their_identity() -> None:
    """ONNX's ReduceMax/ReduceSum over an empty set: -inf (the least integer), 0."""
    x = np.zeros((2, 0, 3), np.float32)
    maximum = run1("reduce", x, kind="max", axes=(1,), keepdims=True)
    np.testing.assert_array_equal(maximum, np.full((2, 1, 3), -np.inf))
    np.testing.assert_array_equal(run1("reduce", x, kind="sum", axes=(1,), keepdims=False), 0)
    ids = np.zeros((0, 2), np.int32)
    least = run1("reduce", ids, kind="max", axes=(0,), keepdims=False)
    np.testing.assert_array_equal(least, [np.iinfo(np.int32).min] * 2)


def test_the_mean_of_no_values_is_refused() -> None:
    with pytest.raises(
        ShapeError, match=r"the mean over axes \[1\] of the empty 2x0x3 is undefined"
    ):
        single_op(
            "reduce", [np.zeros((2, 0, 3), np.float32)], kind="mean", axes=(1,), keepdims=True
        )


def test_integer_reduce_stays_integer_and_mean_rounds_toward_zero() -> None:
    x = np.array([[-3, -4], [3, 4]], np.int32)
    total = run1("reduce", x, kind="sum", axes=(1,), keepdims=False)
    assert total.dtype == np.int32
    np.testing.assert_array_equal(total, [-7, 7])
    np.testing.assert_array_equal(
        run1("reduce", x, kind="mean", axes=(1,), keepdims=False), [-3, 3]
    )


@pytest.mark.parametrize("shape", [(2, 3), (2, 3, 4, 5)])
def test_batchnorm_normalizes_each_channel(shape: tuple[int, ...]) -> None:
    x = normal(*shape)
    scale, bias, mean = normal(3), normal(3), normal(3)
    var = np.abs(normal(3)) + 0.5
    result = run1("batchnorm", x, scale, bias, mean, var, epsilon=1e-3)
    for c in range(3):
        expected = (x[:, c] - mean[c]) / math.sqrt(var[c] + 1e-3) * scale[c] + bias[c]
        np.testing.assert_allclose(result[:, c], expected, rtol=1e-5, atol=1e-6)


def test_layernorm_normalizes_trailing_dimensions() -> None:
    x = normal(2, 3, 4) * 5 + 3
    ones, zeros = np.ones((3, 4), np.float32), np.zeros((3, 4), np.float32)
    result = run1("layernorm", x, ones, zeros, axis=-2, epsilon=1e-6)
    np.testing.assert_allclose(result.mean(axis=(1, 2)), 0, atol=1e-5)
    np.testing.assert_allclose(result.var(axis=(1, 2)), 1, rtol=1e-4)
    gamma, beta = normal(3, 4), normal(3, 4)
    affine = run1("layernorm", x, gamma, beta, axis=1, epsilon=1e-6)
    np.testing.assert_allclose(affine, result * gamma + beta, rtol=1e-5, atol=1e-5)


def test_embedding_looks_up_rows() -> None:
    table = normal(5, 3)
    ids = np.array([[4, 0], [2, 2]], np.int64)
    result = run1("embedding", ids, table)
    assert result.shape == (2, 2, 3)
    np.testing.assert_array_equal(result[0, 0], table[4])
    np.testing.assert_array_equal(result[1, 1], table[2])


def test_embedding_rejects_ids_outside_the_table() -> None:
    with pytest.raises(ValueError, match="id 5 is out of range"):
        run_op("embedding", np.array([1, 5], np.int32), normal(5, 3))
    with pytest.raises(ValueError, match="id -1"):
        run_op("embedding", np.array([-1], np.int32), normal(5, 3))


# ------------------------------------------------------------- low precision


@pytest.mark.parametrize("dtype", [np.dtype(np.float16), np.dtype(ml_dtypes.bfloat16)])
def test_half_precision_computes_in_float32_and_rounds_once(dtype: np.dtype) -> None:
    x, w = normal(1, 2, 4, 4).astype(dtype), normal(3, 2, 3, 3).astype(dtype)
    result = conv(x, w)
    assert result.dtype == dtype
    wide = conv(x.astype(np.float32), w.astype(np.float32))
    np.testing.assert_array_equal(result, wide.astype(dtype))
    probabilities = run1("softmax", x, axis=-1)
    assert probabilities.dtype == dtype
    np.testing.assert_allclose(probabilities.astype(np.float32).sum(axis=-1), 1, rtol=2e-2)


# -------------------------------------------------------------------- errors


def test_run_reference_checks_its_arguments() -> None:
    module = single_op("add", [normal(2, 3), normal(2, 3)])
    with pytest.raises(ValueError, match="takes 2 arguments"):
        run_reference(module, [normal(2, 3)])
    with pytest.raises(ValueError, match=r"'a1' \(#1\) expects 2x3xf32, got 3x2xf32"):
        run_reference(module, [normal(2, 3), normal(3, 2)])
    with pytest.raises(ValueError, match=r"'a0' \(#0\) expects 2x3xf32, got 2x3xf64"):
        run_reference(module, [np.zeros((2, 3)), normal(2, 3)])


def test_a_kernel_that_breaks_the_typing_rules_is_caught(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(KERNELS, "relu", lambda attrs, inputs: [inputs[0].astype(np.float64)])
    with pytest.raises(KernelTypeError, match=r"graph\.relu kernel returned 3xf64"):
        run_op("relu", normal(3))


# -------------------------------------------------------------------- inputs


def test_random_inputs_are_deterministic_and_typed() -> None:
    g = GraphBuilder()
    x, w = g.input("x", (2, 4), "bf16"), g.param("w", (4, 3), "bf16")
    module = g.build(g.matmul(x, w))
    first, second, other = (
        random_inputs(module, 0),
        random_inputs(module, 0),
        random_inputs(module, 1),
    )
    assert [a.dtype for a in first] == [np.dtype(ml_dtypes.bfloat16)] * 2
    assert all(np.array_equal(a, b) for a, b in zip(first, second, strict=True))
    assert not np.array_equal(first[0], other[0])


def test_random_inputs_respect_batchnorm_variances_and_embedding_ids() -> None:
    g = GraphBuilder()
    x = g.input("x", (64, 4))
    stats = [g.param(name, (4,)) for name in ("scale", "bias", "mean", "var")]
    ids = g.input("ids", (50, 2), "i64")
    table = g.param("table", (3, 4))
    flat_ids = g.reshape(ids, (100,))  # the id is found through the reshape
    module = g.build(g.batchnorm(x, *stats), g.embedding(flat_ids, table))
    names = ["x", "scale", "bias", "mean", "var", "ids", "table"]
    values = dict(zip(names, random_inputs(module), strict=True))
    assert (values["var"] > 0).all()
    assert (values["mean"] < 0).any()
    assert values["ids"].min() >= 0
    assert values["ids"].max() == 2
    assert all(np.isfinite(r).all() for r in run_reference(module, list(values.values())))


def test_random_weights_keep_a_deep_network_in_range() -> None:
    g = GraphBuilder()
    h = g.input("x", (8, 64))
    for layer in range(16):
        h = g.relu(g.matmul(h, g.param(f"w{layer}", (64, 64))))
    x = g.input("image", (1, 16, 8, 8))
    for layer in range(8):
        x = g.conv2d(x, g.param(f"k{layer}", (16, 16, 3, 3)))
    module = g.build(h, x)
    for result in run_reference(module, random_inputs(module)):
        assert 1e-3 < float(np.std(result)) < 1e3


def test_load_inputs_takes_weights_by_name(tmp_path: Any) -> None:
    g = GraphBuilder()
    x, w = g.input("x", (2, 3)), g.param("w", (3, 4))
    module = g.build(g.matmul(x, w))
    weights = np.arange(12.0).reshape(3, 4)
    path = tmp_path / "params.npz"
    np.savez(path, w=weights)
    loaded = load_inputs(module, path)
    assert loaded[1].dtype == np.float32
    np.testing.assert_array_equal(loaded[1], weights)
    np.testing.assert_array_equal(loaded[0], random_inputs(module)[0])

    np.savez(path, w=weights, y=weights)
    with pytest.raises(ValueError, match="no argument of @main is named y"):
        load_inputs(module, path)
    np.savez(path, x=np.zeros((2, 3)))
    with pytest.raises(ValueError, match="missing weights w"):
        load_inputs(module, path)
    np.savez(path, w=weights.T)
    with pytest.raises(ValueError, match="'w' expects 3x4xf32, got 4x3xf64"):
        load_inputs(module, path)
    np.savez(path, w=weights.astype(np.int32))
    with pytest.raises(ValueError, match="'w' expects 3x4xf32, got 3x4xi32"):
        load_inputs(module, path)
