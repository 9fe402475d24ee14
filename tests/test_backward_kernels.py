"""The backward ops' kernels against their definitions.

Each backward op is defined as "the gradient of sum(F(...) * dy)" for a forward F,
which is what `jax.vjp(F, ...)(dy)` computes. So the numpy reference kernels are
checked against `jax.vjp` of the forward written directly in JAX (lax convolution
and reduce_window, jnp normalizations, log-softmax), in float64 on both sides, and
the JAX lowerings are checked against the reference kernels in float32.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from jax import lax

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import JAX_KERNELS, lower
from tasoc.backends.numpy import KERNELS, run_reference
from tasoc.ir.shapes import DType, window_pads
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import graphs

BACKWARD_OPS = (
    "relu_grad",
    "sigmoid_grad",
    "tanh_grad",
    "gelu_grad",
    "conv2d_grad_input",
    "conv2d_grad_weight",
    "pool2d_grad",
    "reduce_grad",
    "scatter_add",
    "layernorm_grad",
    "batchnorm_train",
    "batchnorm_grad",
    "softmax_cross_entropy",
    "softmax_cross_entropy_grad",
    "adam_update",
)


@functools.lru_cache(maxsize=32)
def _jitted(function: Callable[..., Any]) -> Callable[..., Any]:
    """`function` jitted. Run eagerly, JAX compiles every primitive of a forward and of
    its transpose anew for each shape drawn (a dozen compiles an example); jitted, one."""
    return jax.jit(function)


@functools.lru_cache(maxsize=32)
def _pullback(forward: Callable[..., jax.Array]) -> Callable[..., Any]:
    def pullback(primals: tuple[jax.Array, ...], cotangent: jax.Array) -> tuple[jax.Array, ...]:
        return jax.vjp(forward, *primals)[1](cotangent)

    return jax.jit(pullback)


def _vjp(
    forward: Callable[..., jax.Array], primals: Sequence[np.ndarray], cotangent: np.ndarray
) -> list[np.ndarray]:
    """`jax.vjp(forward, *primals)(cotangent)` computed in float64 (jitted)."""
    with jax.enable_x64(True):
        arrays = tuple(jnp.asarray(p) for p in primals)
        return [np.asarray(g) for g in _pullback(forward)(arrays, jnp.asarray(cotangent))]


def _x64(forward: Callable[..., Any], *args: np.ndarray) -> Any:
    """`forward(*args)` computed in float64 (jitted)."""
    with jax.enable_x64(True):
        return _jitted(forward)(*map(jnp.asarray, args))


def _x64_shape(forward: Callable[..., jax.Array], *args: np.ndarray) -> tuple[int, ...]:
    """The shape of `forward(*args)`, traced without running (nothing compiled)."""
    with jax.enable_x64(True):
        return jax.eval_shape(forward, *map(jnp.asarray, args)).shape


def _close(actual: Sequence[np.ndarray], expected: Sequence[np.ndarray], tol: float = 1e-9) -> None:
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.shape == e.shape
        np.testing.assert_allclose(a, e, rtol=tol, atol=tol)


def _normal(rng: np.random.Generator, shape: Sequence[int]) -> np.ndarray:
    return rng.standard_normal(tuple(shape))


seeds = st.integers(0, 2**31 - 1)
shapes = st.lists(st.integers(1, 4), min_size=1, max_size=3).map(tuple)

# ------------------------------------------------------- activation derivatives

ACTIVATIONS: dict[str, tuple[Callable[[jax.Array], jax.Array], bool]] = {
    # op: (forward, whether the op takes the forward's output (else its input))
    "relu_grad": (jax.nn.relu, True),
    "sigmoid_grad": (jax.nn.sigmoid, True),
    "tanh_grad": (jnp.tanh, True),
    "gelu_grad": (lambda x: jax.nn.gelu(x, approximate=False), False),
}


@pytest.mark.parametrize("op", sorted(ACTIVATIONS))
@settings(deadline=None, max_examples=examples(20))
@given(shape=shapes, seed=seeds)
def test_activation_grads_are_the_vjp(op: str, shape: tuple[int, ...], seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, dy = _normal(rng, shape) * 3, _normal(rng, shape)
    forward, takes_output = ACTIVATIONS[op]
    y = np.asarray(_x64(forward, x))
    _close(KERNELS[op]({}, [y if takes_output else x, dy]), _vjp(forward, [x], dy))


# ------------------------------------------------------------------ convolution


@st.composite
def windows(draw: st.DrawFn, in_hw: tuple[int, int]) -> dict[str, Any]:
    """Strides, padding (named or explicit) and a kernel that fits the padded input."""
    padding = draw(
        st.one_of(st.sampled_from(["same", "valid"]), st.tuples(*[st.integers(0, 2)] * 4))
    )
    kernel = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    strides = (draw(st.integers(1, 3)), draw(st.integers(1, 3)))
    top, left, bottom, right = window_pads(padding, in_hw, kernel, strides)
    fits = in_hw[0] + top + bottom >= kernel[0] and in_hw[1] + left + right >= kernel[1]
    if not fits:
        kernel = (1, 1)
    return {"padding": padding, "kernel": kernel, "strides": strides}


def _lax_pads(window: dict[str, Any], in_hw: tuple[int, int]) -> list[tuple[int, int]]:
    top, left, bottom, right = window_pads(
        window["padding"], in_hw, window["kernel"], window["strides"]
    )
    return [(top, bottom), (left, right)]


@st.composite
def conv_cases(draw: st.DrawFn) -> tuple[dict[str, Any], tuple[int, ...], tuple[int, ...]]:
    """(attrs, x's shape, w's shape) of a valid grouped, strided, padded conv2d."""
    groups = draw(st.integers(1, 3))
    in_hw = (draw(st.integers(1, 6)), draw(st.integers(1, 6)))
    x_shape = (draw(st.integers(1, 2)), groups * draw(st.integers(1, 2)), *in_hw)
    window = draw(windows(in_hw))
    w_shape = (groups * draw(st.integers(1, 2)), x_shape[1] // groups, *window["kernel"])
    attrs = {
        "strides": window["strides"],
        "padding": window["padding"],
        "groups": groups,
    }
    return attrs, x_shape, w_shape


def _lax_conv(attrs: dict[str, Any], x_shape: tuple[int, ...], kernel: tuple[int, int]):
    window = {**attrs, "kernel": kernel}

    def conv(x: jax.Array, w: jax.Array) -> jax.Array:
        return lax.conv_general_dilated(
            x,
            w,
            window_strides=attrs["strides"],
            padding=_lax_pads(window, x_shape[2:]),
            dimension_numbers=("NCHW", "OIHW", "NCHW"),
            feature_group_count=attrs["groups"],
            precision=lax.Precision.HIGHEST,
        )

    return conv


@settings(deadline=None, max_examples=examples(20))
@given(case=conv_cases(), seed=seeds)
def test_conv2d_grads_are_the_vjp(
    case: tuple[dict[str, Any], tuple[int, ...], tuple[int, ...]], seed: int
) -> None:
    attrs, x_shape, w_shape = case
    rng = np.random.default_rng(seed)
    x, w = _normal(rng, x_shape), _normal(rng, w_shape)
    conv = _lax_conv(attrs, x_shape, w_shape[2:])
    dy = _normal(rng, _x64_shape(conv, x, w))
    dx, dw = _vjp(conv, [x, w], dy)
    grad_input = KERNELS["conv2d_grad_input"]({**attrs, "input_shape": x_shape}, [dy, w])
    grad_weight = KERNELS["conv2d_grad_weight"]({**attrs, "kernel": w_shape[2:]}, [x, dy])
    _close(grad_input, [dx])
    _close(grad_weight, [dw])


# ---------------------------------------------------------------------- pooling


@settings(deadline=None, max_examples=examples(20))
@given(
    kind=st.sampled_from(["avg", "max"]),
    data=st.data(),
    seed=seeds,
)
def test_pool2d_grad_is_the_vjp(kind: str, data: st.DataObject, seed: int) -> None:
    in_hw = (data.draw(st.integers(1, 6)), data.draw(st.integers(1, 6)))
    x_shape = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)), *in_hw)
    window = data.draw(windows(in_hw))
    attrs = {"kind": kind, **window}
    rng = np.random.default_rng(seed)
    # Few distinct values: max windows with ties, where the tie rule matters.
    x = rng.integers(-2, 3, x_shape).astype(np.float64)
    kh, kw = window["kernel"]
    pads = [(0, 0), (0, 0), *_lax_pads(window, in_hw)]
    dims, strides = (1, 1, kh, kw), (1, 1, *window["strides"])

    def pool(x: jax.Array) -> jax.Array:
        if kind == "max":
            return lax.reduce_window(x, -jnp.inf, lax.max, dims, strides, pads)
        return lax.reduce_window(x, 0.0, lax.add, dims, strides, pads) / (kh * kw)

    dy = _normal(rng, _x64_shape(pool, x))
    _close(KERNELS["pool2d_grad"](attrs, [x, dy]), _vjp(pool, [x], dy))


def test_max_pool_grad_goes_to_the_first_maximum() -> None:
    # A 2x2 window of equal values: the whole gradient goes to the top-left one.
    attrs = {"kind": "max", "kernel": (2, 2), "strides": (2, 2), "padding": "valid"}
    (dx,) = KERNELS["pool2d_grad"](attrs, [np.ones((1, 1, 2, 2)), np.full((1, 1, 1, 1), 5.0)])
    np.testing.assert_array_equal(dx[0, 0], [[5.0, 0.0], [0.0, 0.0]])


# -------------------------------------------------------------------- reduction


@settings(deadline=None, max_examples=examples(20))
@given(
    kind=st.sampled_from(["sum", "mean", "max"]),
    shape=shapes,
    keepdims=st.booleans(),
    data=st.data(),
    seed=seeds,
)
def test_reduce_grad_is_the_vjp(
    kind: str, shape: tuple[int, ...], keepdims: bool, data: st.DataObject, seed: int
) -> None:
    rank = len(shape)
    axes = sorted(data.draw(st.sets(st.integers(0, rank - 1), min_size=1)))
    axes = [a - rank if data.draw(st.booleans()) else a for a in axes]
    rng = np.random.default_rng(seed)
    x = rng.integers(-2, 3, shape).astype(np.float64)  # ties for max
    reducer = {"sum": jnp.sum, "mean": jnp.mean, "max": jnp.max}[kind]

    def reduce(x: jax.Array) -> jax.Array:
        return reducer(x, axis=tuple(axes), keepdims=keepdims)

    dy = _normal(rng, np.sum(x, axis=tuple(axes), keepdims=keepdims).shape)
    attrs = {"kind": kind, "axes": tuple(axes), "keepdims": keepdims}
    _close(KERNELS["reduce_grad"](attrs, [x, dy]), _vjp(reduce, [x], dy))


# -------------------------------------------------------------------- embedding


@settings(deadline=None, max_examples=examples(15))
@given(ids_shape=shapes, rows=st.integers(1, 5), features=st.integers(1, 3), seed=seeds)
def test_scatter_add_is_the_embedding_vjp(
    ids_shape: tuple[int, ...], rows: int, features: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    ids = rng.integers(0, rows, ids_shape).astype(np.int32)  # repeats are likely
    updates = _normal(rng, (*ids_shape, features))
    table = _normal(rng, (rows, features))
    expected = _vjp(lambda table: table[jnp.asarray(ids)], [table], updates)
    _close(KERNELS["scatter_add"]({"rows": rows}, [ids, updates]), expected)


# ---------------------------------------------------------------- normalization


@settings(deadline=None, max_examples=examples(20))
@given(shape=shapes, data=st.data(), epsilon=st.sampled_from([1e-5, 1e-3]), seed=seeds)
def test_layernorm_grad_is_the_vjp(
    shape: tuple[int, ...], data: st.DataObject, epsilon: float, seed: int
) -> None:
    axis = data.draw(st.integers(-len(shape), len(shape) - 1))
    axes = tuple(range(axis % len(shape), len(shape)))
    rng = np.random.default_rng(seed)
    x, gamma, beta = _normal(rng, shape), _normal(rng, shape[axis:]), _normal(rng, shape[axis:])
    dy = _normal(rng, shape)

    def layernorm(x: jax.Array, gamma: jax.Array, beta: jax.Array) -> jax.Array:
        centred = x - jnp.mean(x, axis=axes, keepdims=True)
        var = jnp.mean(centred**2, axis=axes, keepdims=True)
        return centred / jnp.sqrt(var + epsilon) * gamma + beta

    attrs = {"axis": axis, "epsilon": epsilon}
    expected = _vjp(layernorm, [x, gamma, beta], dy)
    _close(KERNELS["layernorm_grad"](attrs, [x, gamma, dy]), expected, tol=1e-7)


def _batchnorm_train(epsilon: float) -> Callable[..., tuple[jax.Array, ...]]:
    def forward(x: jax.Array, scale: jax.Array, bias: jax.Array) -> tuple[jax.Array, ...]:
        axes = (0, *range(2, x.ndim))
        shape = (1, -1) + (1,) * (x.ndim - 2)
        mean = jnp.mean(x, axis=axes)
        var = jnp.var(x, axis=axes)  # biased
        y = (x - mean.reshape(shape)) / jnp.sqrt(var.reshape(shape) + epsilon)
        return y * scale.reshape(shape) + bias.reshape(shape), mean, var

    return forward


@settings(deadline=None, max_examples=examples(20))
@given(
    shape=st.lists(st.integers(1, 4), min_size=2, max_size=4).map(tuple),
    epsilon=st.sampled_from([1e-5, 1e-3]),
    seed=seeds,
)
def test_batchnorm_train_and_grad(shape: tuple[int, ...], epsilon: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    x, scale, bias = _normal(rng, shape), _normal(rng, shape[1:2]), _normal(rng, shape[1:2])
    dy = _normal(rng, shape)
    forward = _batchnorm_train(epsilon)
    expected = [np.asarray(r) for r in _x64(forward, x, scale, bias)]
    attrs = {"epsilon": epsilon}
    _close(KERNELS["batchnorm_train"](attrs, [x, scale, bias]), expected)
    grads = _vjp(lambda *a: forward(*a)[0], [x, scale, bias], dy)
    _close(KERNELS["batchnorm_grad"](attrs, [x, scale, dy]), grads, tol=1e-7)


# ------------------------------------------------------------------------- loss


def _cross_entropy(labels: np.ndarray) -> Callable[[jax.Array], jax.Array]:
    def loss(logits: jax.Array) -> jax.Array:
        picked = jnp.take_along_axis(logits, jnp.asarray(labels)[..., None], axis=-1)[..., 0]
        return jax.nn.logsumexp(logits, axis=-1) - picked

    return loss


@settings(deadline=None, max_examples=examples(20))
@given(shape=shapes, scale=st.sampled_from([1.0, 100.0]), seed=seeds)
def test_softmax_cross_entropy_and_grad(shape: tuple[int, ...], scale: float, seed: int) -> None:
    rng = np.random.default_rng(seed)
    logits = _normal(rng, shape) * scale  # large logits: the stable form matters
    labels = rng.integers(0, shape[-1], shape[:-1]).astype(np.int64)
    dloss = _normal(rng, shape[:-1])
    loss = _cross_entropy(labels)
    expected = np.asarray(_x64(loss, logits))
    _close(KERNELS["softmax_cross_entropy"]({}, [logits, labels]), [expected])
    grad = KERNELS["softmax_cross_entropy_grad"]({}, [logits, labels, dloss])
    _close(grad, _vjp(loss, [logits], dloss))


# -------------------------------------------------------------------- optimizer


def test_adam_update_by_hand() -> None:
    attrs = {"lr": 0.01, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}
    rng = np.random.default_rng(0)
    param = _normal(rng, (3, 2))
    m, v = np.zeros_like(param), np.zeros_like(param)
    expected_param, expected_m, expected_v = param.copy(), m.copy(), v.copy()
    for step in range(1, 4):
        grad = _normal(rng, param.shape)
        param, m, v = KERNELS["adam_update"](attrs, [param, grad, m, v, np.asarray(float(step))])
        expected_m = 0.9 * expected_m + 0.1 * grad
        expected_v = 0.999 * expected_v + 0.001 * grad**2
        m_hat = expected_m / (1 - 0.9**step)
        v_hat = expected_v / (1 - 0.999**step)
        expected_param = expected_param - 0.01 * m_hat / (np.sqrt(v_hat) + 1e-8)
        _close([param, m, v], [expected_param, expected_m, expected_v], tol=1e-12)
    # The first step of Adam moves each weight by about lr, against its gradient's sign.
    first = KERNELS["adam_update"](
        attrs, [np.zeros(2), np.array([3.0, -0.5]), np.zeros(2), np.zeros(2), np.asarray(1.0)]
    )[0]
    np.testing.assert_allclose(first, [-0.01, 0.01], rtol=1e-6)


# ------------------------------------------------------------- out-of-range data


@pytest.mark.parametrize(
    ("op", "inputs", "message"),
    [
        ("scatter_add", [np.array([0, 3]), np.ones((2, 1))], r"graph.scatter_add: id 3 .*\[0, 3\)"),
        ("scatter_add", [np.array([-1]), np.ones((1, 1))], "graph.scatter_add: id -1"),
        (
            "softmax_cross_entropy",
            [np.zeros((2, 4)), np.array([1, 4])],
            r"graph.softmax_cross_entropy: label 4 .*\[0, 4\)",
        ),
        (
            "softmax_cross_entropy_grad",
            [np.zeros((1, 4)), np.array([-2]), np.ones(1)],
            "graph.softmax_cross_entropy_grad: label -2",
        ),
    ],
)
def test_reference_refuses_out_of_range_indices(
    op: str, inputs: list[np.ndarray], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        KERNELS[op]({"rows": 3}, inputs)


# ------------------------------------------------------ JAX lowering = reference


def _conv_inputs(
    rng: np.random.Generator, case: tuple[dict[str, Any], tuple[int, ...], tuple[int, ...]]
) -> list[tuple[str, dict[str, Any], list[np.ndarray]]]:
    attrs, x_shape, w_shape = case
    x, w = _normal(rng, x_shape), _normal(rng, w_shape)
    (y,) = KERNELS["conv2d"]({**attrs, "activation": "none"}, [x, w])
    dy = _normal(rng, y.shape)
    return [
        ("conv2d_grad_input", {**attrs, "input_shape": x_shape}, [dy, w]),
        ("conv2d_grad_weight", {**attrs, "kernel": w_shape[2:]}, [x, dy]),
    ]


def _cases(rng: np.random.Generator) -> list[tuple[str, dict[str, Any], list[np.ndarray]]]:
    """One (op, attrs, float64 inputs) case of every backward op, from fixed draws."""
    x, dy = _normal(rng, (2, 3, 5, 4)), _normal(rng, (2, 3, 5, 4))
    ids = np.array([[0, 2, 2], [4, 0, 1]])
    labels = np.array([1, 0, 3])
    logits = _normal(rng, (3, 5)) * 10
    pool = {"kernel": (3, 2), "strides": (2, 1), "padding": (1, 0, 1, 1)}
    reduce_dy = _normal(rng, (3, 4))
    param = _normal(rng, (4, 3))
    cases = [
        ("relu_grad", {}, [np.maximum(x, 0), dy]),
        ("sigmoid_grad", {}, [1 / (1 + np.exp(-x)), dy]),
        ("tanh_grad", {}, [np.tanh(x), dy]),
        ("gelu_grad", {}, [x, dy]),
        ("pool2d_grad", {"kind": "avg", **pool}, [x, _normal(rng, (2, 3, 3, 4))]),
        ("pool2d_grad", {"kind": "max", **pool}, [np.round(x), _normal(rng, (2, 3, 3, 4))]),
        *[
            ("reduce_grad", {"kind": kind, "axes": (0, -2), "keepdims": False}, [x, reduce_dy])
            for kind in ("sum", "mean")
        ],
        (
            "reduce_grad",
            {"kind": "max", "axes": (0, 2), "keepdims": False},
            [np.round(x), reduce_dy],
        ),
        ("scatter_add", {"rows": 6}, [ids, _normal(rng, (2, 3, 4))]),
        ("layernorm_grad", {"axis": -2, "epsilon": 1e-5}, [x, _normal(rng, (5, 4)), dy]),
        ("batchnorm_train", {"epsilon": 1e-5}, [x, _normal(rng, (3,)), _normal(rng, (3,))]),
        ("batchnorm_grad", {"epsilon": 1e-3}, [x, _normal(rng, (3,)), dy]),
        ("softmax_cross_entropy", {}, [logits, labels]),
        ("softmax_cross_entropy_grad", {}, [logits, labels, _normal(rng, (3,))]),
        (
            "adam_update",
            {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8},
            [param, param * 0.5, param * 0.1, param * param, np.asarray(3.0)],
        ),
    ]
    groups = {"strides": (2, 1), "padding": "same", "groups": 3}
    cases += _conv_inputs(rng, (groups, (2, 3, 5, 4), (6, 1, 3, 2)))
    cases += _conv_inputs(
        rng, ({**groups, "padding": (0, 1, 2, 0), "groups": 1}, (1, 3, 5, 4), (2, 3, 2, 3))
    )
    return cases


def test_the_cases_cover_every_backward_op() -> None:
    assert {op for op, _, _ in _cases(np.random.default_rng(0))} == set(BACKWARD_OPS)
    assert set(BACKWARD_OPS) <= KERNELS.keys() & JAX_KERNELS.keys()


@pytest.mark.parametrize("index", range(len(_cases(np.random.default_rng(0)))))
def test_jax_lowering_matches_the_reference(index: int) -> None:
    op, attrs, inputs = _cases(np.random.default_rng(0))[index]
    f32 = [a.astype(np.float32) if a.dtype.kind == "f" else a.astype(np.int32) for a in inputs]
    expected = KERNELS[op](attrs, f32)
    actual = JAX_KERNELS[op](attrs, [jnp.asarray(a) for a in f32])
    assert len(actual) == len(expected)
    for a, e in zip(actual, expected, strict=True):
        assert a.dtype == e.dtype and a.shape == e.shape
        np.testing.assert_allclose(np.asarray(a), e, rtol=2e-5, atol=2e-5)


def test_jax_lowering_marks_bad_labels_nan_and_drops_bad_ids() -> None:
    logits = jnp.zeros((2, 3))
    labels = jnp.array([1, 3])
    (losses,) = JAX_KERNELS["softmax_cross_entropy"]({}, [logits, labels])
    (dlogits,) = JAX_KERNELS["softmax_cross_entropy_grad"]({}, [logits, labels, jnp.ones(2)])
    assert np.isfinite(losses[0]) and np.isnan(losses[1])
    assert np.isfinite(dlogits[0]).all() and np.isnan(dlogits[1]).all()
    (table,) = JAX_KERNELS["scatter_add"]({"rows": 2}, [jnp.array([0, 5]), jnp.ones((2, 1))])
    np.testing.assert_array_equal(table, [[1.0], [0.0]])


@pytest.mark.parametrize("dtype", [DType.F16, DType.BF16])
@pytest.mark.parametrize("op", BACKWARD_OPS)
@settings(max_examples=examples(5), deadline=None)
@given(data=st.data())
def test_half_precision_lowerings_match_the_reference(
    op: str, dtype: DType, data: st.DataObject
) -> None:
    """Both widen half-precision operands to float32 and round each result once."""
    module = data.draw(graphs(max_ops=1, ops=[op], dtypes=[dtype]), label="module")
    args = random_inputs(module)
    report = compare(run_reference(module, args), lower(module)(*args))
    assert report.ok, f"{report.summary()}\n{module}"
