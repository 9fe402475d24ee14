"""ONNX's window ops and Pad as real exports use them, each form imported, run on the
reference interpreter and JAX, and compared with onnxruntime at `compare`'s tolerances
(`tasoc/backends/onnx/windows.py`, `padding.py`):

- pools in ceil mode, as PyTorch exports `MaxPool2d(ceil_mode=True)` (GoogLeNet,
  SqueezeNet): the extra windows at the end become extra end padding of `graph.pool2d`,
  and an average pool divides by the elements it counts;
- dilated convolutions (a dilated weight) and pools (gathered taps), 1-D windows, integer
  max pools, ConvTranspose as `conv2d_grad_input`, Pad in every mode, LogSoftmax;
- the forms that stay refused, in one line.
"""

from __future__ import annotations

import numpy as np
import onnx
import pytest
from conftest import examples
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from onnx import TensorProto, helper
from onnx.reference import ReferenceEvaluator
from onnx_builders import RNG, Case, imported, ints, node, ops_of, rand, refusal
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import export_onnx, import_onnx
from tasoc.backends.onnx.runtime import inference_session
from tasoc.backends.onnx.windows import ceil_mode_extra
from tasoc.ir import graph as G
from tasoc.ir.program import arg_infos, entry_function
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import graphs


def pool_model(op: str, shape: tuple[int, ...], **attrs: object) -> onnx.ModelProto:
    graph = helper.make_graph(
        [helper.make_node(op, ["x"], ["y"], **attrs)],
        "pool",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, shape)],
        # no declared shape: onnx's shape inference keeps the window that starts in
        # the end padding, which onnxruntime and onnx's reference drop
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["n", "c", "h", "w"])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize(
    ("size", "kernel", "stride", "pads"),
    [
        ((7, 7), (3, 3), (2, 2), (0, 0, 0, 0)),  # one more window each way
        ((6, 9), (3, 2), (2, 3), (0, 0, 0, 0)),
        ((5, 5), (2, 2), (2, 2), (1, 1, 1, 1)),  # the last window would start in the pad
        ((4, 4), (3, 3), (2, 2), (0, 1, 0, 1)),
        ((8, 8), (2, 2), (2, 2), (0, 0, 0, 0)),  # no change: floor = ceil
    ],
)
@pytest.mark.parametrize(
    ("op", "extra"),
    [
        ("MaxPool", {}),
        ("AveragePool", {"count_include_pad": 0}),
        ("AveragePool", {"count_include_pad": 1}),
    ],
)
def test_ceil_mode_pools_agree_with_onnxruntime(
    op: str,
    extra: dict[str, int],
    size: tuple[int, int],
    kernel: tuple[int, int],
    stride: tuple[int, int],
    pads: tuple[int, int, int, int],
) -> None:
    model = pool_model(
        op,
        (2, 3, *size),
        kernel_shape=list(kernel),
        strides=list(stride),
        pads=list(pads),
        ceil_mode=1,
        **extra,
    )
    x = np.random.default_rng(0).standard_normal((2, 3, *size)).astype(np.float32)
    (want,) = inference_session(model).run(None, {"x": x})
    module, _ = import_onnx(model)
    (got,) = run_reference(module, [x])
    assert got.shape == want.shape
    assert compare([got], [want]).ok


def test_ceil_mode_adds_the_windows_floor_mode_drops_but_none_starting_in_the_pad() -> None:
    assert ceil_mode_extra(7, 3, 2, 0, 0) == 0  # (7-3)/2 exact
    assert ceil_mode_extra(8, 3, 2, 0, 0) == 1  # a 4th window over rows 6..8
    assert ceil_mode_extra(5, 2, 2, 1, 1) == 0  # a 4th window would start at padded row 6
    assert ceil_mode_extra(112, 3, 2, 0, 0) == 1  # GoogLeNet's first pool: 56, not 55


# ------------------------------------------------------------ the wider window ops


def agree(case: Case, runtime: str = "onnxruntime") -> ModuleOp:
    """Import `case`; the reference interpreter and JAX must both give the outputs of
    onnxruntime (or of ONNX's reference evaluator) at `compare`'s tolerances."""
    module, results = imported(case)
    session = inference_session(case.model()) if runtime == "onnxruntime" else None
    evaluator = session or ReferenceEvaluator(case.model())
    expected = evaluator.run(None, case.feeds)
    report = compare(expected, results)
    assert report.ok, report.summary()
    module, params = import_onnx(case.model())
    feeds = iter(case.feeds.values())
    args = [
        params[info.name] if info.is_param else next(feeds)
        for info in arg_infos(entry_function(module))
    ]
    report = compare(expected, [np.asarray(r) for r in lower(module)(*args)])
    assert report.ok, report.summary()
    return module


X1 = rand(2, 4, 11)
X2 = rand(2, 4, 9, 8)


@pytest.mark.parametrize("known", [True, False], ids=["known-weight", "computed-weight"])
@pytest.mark.parametrize(
    ("x", "w", "attrs"),
    [
        (X2, rand(6, 2, 3, 2), {"dilations": [2, 3], "group": 2, "pads": [1, 0, 2, 1]}),
        (X2, rand(4, 4, 2, 2), {"dilations": [3, 1], "strides": [2, 1], "auto_pad": "SAME_LOWER"}),
        (X1, rand(4, 4, 3), {"dilations": [2], "pads": [2, 1], "strides": [2]}),
    ],
    ids=["2d-grouped", "2d-same-lower", "1d"],
)
def test_dilated_conv(known: bool, x: np.ndarray, w: np.ndarray, attrs: dict[str, object]) -> None:
    """A known weight becomes a dilated weight of its own; a computed one is dilated by
    concat/reshape/split."""
    inputs = ["x", "w", "b"]
    bias = {"b": rand(w.shape[0])}
    weights, feeds = (({"w": w} | bias), {"x": x}) if known else (bias, {"x": x, "w": w})
    # onnxruntime refuses dilations with SAME padding, which ONNX's reference computes.
    runtime = "reference" if "auto_pad" in attrs else "onnxruntime"
    module = agree(Case([node("Conv", inputs, **attrs)], feeds, weights=weights), runtime)
    names = {info.name for info in arg_infos(entry_function(module))}
    dh, dw = ([1] + attrs["dilations"])[-2:]  # type: ignore[operator]
    assert (f"w.dilated{dh}x{dw}" in names) == known
    assert ("concat" in ops_of(module)) != known


@pytest.mark.parametrize(
    "attrs",
    [
        {"pads": [2, 1], "strides": [3]},
        {"auto_pad": "SAME_UPPER", "strides": [2]},
        {"auto_pad": "SAME_LOWER", "strides": [2]},
        {"auto_pad": "VALID", "group": 4},
    ],
)
def test_one_dimensional_conv(attrs: dict[str, object]) -> None:
    channels = 4 // int(attrs.get("group", 1))  # type: ignore[call-overload]
    weights = {"w": rand(8, channels, 3), "b": rand(8)}
    module = agree(Case([node("Conv", ["x", "w", "b"], **attrs)], {"x": X1}, weights=weights))
    assert "conv2d" in ops_of(module)


@pytest.mark.parametrize(
    ("op", "attrs"),
    [
        ("MaxPool", {"kernel_shape": [3], "strides": [2], "pads": [1, 1]}),
        ("MaxPool", {"kernel_shape": [2], "strides": [2], "ceil_mode": 1}),
        ("MaxPool", {"kernel_shape": [3], "auto_pad": "SAME_LOWER", "strides": [2]}),
        ("AveragePool", {"kernel_shape": [3], "strides": [2], "pads": [1, 2]}),
        ("AveragePool", {"kernel_shape": [3], "pads": [1, 1], "count_include_pad": 1}),
        ("AveragePool", {"kernel_shape": [4], "strides": [3], "ceil_mode": 1}),
        ("AveragePool", {"kernel_shape": [2], "auto_pad": "SAME_UPPER"}),
        ("GlobalAveragePool", {}),
        ("GlobalMaxPool", {}),
    ],
)
def test_one_dimensional_pools(op: str, attrs: dict[str, object]) -> None:
    module = agree(Case([node(op, ["x"], **attrs)], {"x": X1}, opset=17))
    assert "pool2d" in ops_of(module)


@pytest.mark.parametrize(
    ("op", "x", "attrs"),
    [
        ("MaxPool", X2, {"kernel_shape": [2, 3], "dilations": [2, 2], "pads": [1, 0, 1, 2]}),
        ("MaxPool", X1, {"kernel_shape": [3], "dilations": [2], "strides": [2], "ceil_mode": 1}),
        ("AveragePool", X2, {"kernel_shape": [3, 2], "dilations": [3, 2], "pads": [1, 1, 2, 1]}),
        (
            "AveragePool",
            X2,
            {"kernel_shape": [2, 2], "dilations": [2, 2], "pads": [1, 1, 1, 1], "strides": [2, 1]}
            | {"count_include_pad": 1},
        ),
        ("AveragePool", X1, {"kernel_shape": [3], "dilations": [2], "auto_pad": "VALID"}),
    ],
)
def test_dilated_pools_gather_their_taps(op: str, x: np.ndarray, attrs: dict[str, object]) -> None:
    module = agree(Case([node(op, ["x"], **attrs)], {"x": x}))
    assert "gather" in ops_of(module) and "pool2d" not in ops_of(module)


@pytest.mark.parametrize("dtype", [np.uint8, np.int8])
def test_max_pool_of_integers(dtype: type) -> None:
    x = RNG.integers(-100, 100, (1, 2, 5, 5)).astype(dtype)
    agree(Case([node("MaxPool", ["x"], kernel_shape=[3, 3], pads=[1, 1, 1, 1])], {"x": x}))


# ------------------------------------------------------------------------- Pad


@pytest.mark.parametrize(
    ("pads", "axes", "fill"),
    [
        ([1, 0, 2, 0, 0, 3], None, 2.5),  # the batch axis too
        ([2, -1, 1, 0], [1, -1], 0.0),  # a negative pad crops
        ([-1, -2, 1, 3], [0, 2], -7.0),  # crop one side, pad the other
        ([0, 1, 1, 0, 0, 1, 1, 0], None, 0.0),  # 4-D, last two dims, asymmetric
    ],
)
def test_constant_pad(pads: list[int], axes: list[int] | None, fill: float) -> None:
    x = X2 if len(pads) == 8 else X1
    inputs = {"pads": ints(pads), "value": np.asarray(fill, np.float32)}
    if axes is not None:
        inputs["axes"] = ints(axes)
    module = agree(Case([node("Pad", ["x", *inputs])], {"x": x}, weights=inputs))
    assert "concat" in ops_of(module)


def test_pad_by_a_run_time_value_broadcasts_it() -> None:
    feeds = {"x": X1, "value": np.asarray(-3.0, np.float32)}
    pads = {"pads": ints([0, 1, 2, 0, 2, 1])}
    module = agree(Case([node("Pad", ["x", "pads", "value"])], feeds, weights=pads))
    assert "broadcast" in ops_of(module)


def test_symmetric_zero_padding_stays_enlarge() -> None:
    pads = {"pads": ints([0, 0, 1, 2, 0, 0, 1, 2])}
    module = agree(Case([node("Pad", ["x", "pads"])], {"x": X2}, weights=pads))
    assert ops_of(module) == ["enlarge"]


@pytest.mark.parametrize(
    ("pads", "absorbed"), [([0, 0, 1, 2, 0, 0, 0, 1], True), ([0, 0, 1, 2, 0, 0, -1, 0], False)]
)
def test_minus_infinity_padding_before_max_pool(pads: list[int], absorbed: bool) -> None:
    """The MaxPools take over a -inf padding, but not one that crops."""
    nodes = [
        node("Pad", ["x", "pads", "value"], ["p"]),
        node("MaxPool", ["p"], kernel_shape=[2, 2]),
    ]
    weights = {"pads": ints(pads), "value": np.asarray(-np.inf, np.float32)}
    module = agree(Case(nodes, {"x": X2}, weights=weights))
    assert (ops_of(module) == ["pool2d"]) == absorbed


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
@pytest.mark.parametrize(
    ("pads", "axes"),
    [([2, 3, 1, 0], [2, 3]), ([1, 0, 2, 4], [1, -1]), ([-1, 2, 1, -2], [2, 3])],
    ids=["pad", "axes", "crop"],
)
def test_indexed_pad_modes(mode: str, pads: list[int], axes: list[int]) -> None:
    weights = {"pads": ints(pads), "axes": ints(axes)}
    pad = node("Pad", ["x", "pads", "", "axes"], mode=mode)
    module = agree(Case([pad], {"x": (X2 * 9).astype(np.int32)}, weights=weights))
    assert "gather" in ops_of(module)


# --------------------------------------------------------------- ConvTranspose


@pytest.mark.parametrize(
    ("x", "w", "attrs"),
    [
        (X2, rand(4, 3, 3, 2), {}),
        (X2, rand(4, 3, 3, 3), {"strides": [3, 2], "pads": [1, 2, 0, 1], "output_padding": [2, 1]}),
        (X2, rand(4, 1, 3, 3), {"group": 2, "strides": [2, 2], "pads": [1, 1, 1, 1]}),
        (X2, rand(4, 2, 3, 3), {"strides": [3, 2], "output_shape": [29, 18]}),  # zeros at the end
        (X2, rand(4, 2, 3, 3), {"strides": [2, 2], "output_shape": [16, 14]}),  # cropped
        (X2, rand(4, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_UPPER"}),
        (X2, rand(4, 2, 3, 3), {"strides": [2, 2], "auto_pad": "SAME_LOWER"}),
        (X2, rand(4, 2, 2, 3), {"dilations": [2, 3], "strides": [2, 1]}),
        (X1, rand(4, 3, 4), {"strides": [2], "pads": [1, 2], "output_padding": [1]}),
        (X1, rand(4, 3, 2), {"dilations": [3], "auto_pad": "VALID"}),
    ],
)
@pytest.mark.parametrize("known", [True, False], ids=["known-weight", "computed-weight"])
def test_conv_transpose(
    known: bool, x: np.ndarray, w: np.ndarray, attrs: dict[str, object]
) -> None:
    bias = {"b": rand(w.shape[1] * int(attrs.get("group", 1)))}  # type: ignore[call-overload]
    weights, feeds = (({"w": w} | bias), {"x": x}) if known else (bias, {"x": x, "w": w})
    module = agree(Case([node("ConvTranspose", ["x", "w", "b"], **attrs)], feeds, weights=weights))
    assert "conv2d_grad_input" in ops_of(module)


@settings(max_examples=examples(15), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_exported_conv_input_gradients_import_back(data: st.DataObject) -> None:
    """The exporter writes `conv2d_grad_input` as ConvTranspose (output padding for rows
    no window read); importing that inverts it: the same op, strides, groups and input
    shape, and the same numbers."""
    module = data.draw(graphs(max_ops=1, ops=["conv2d_grad_input"]), label="module")
    args = [np.asarray(a) for a in random_inputs(module)]
    infos = arg_infos(entry_function(module))
    params = {i.name: a for i, a in zip(infos, args, strict=True) if i.is_param}
    back, values = import_onnx(export_onnx(module, params))
    (original,) = (op for op in module.walk() if isinstance(op, G.Conv2dGradInputOp))
    (imported_op,) = (op for op in back.walk() if isinstance(op, G.Conv2dGradInputOp))
    for attr in ("strides", "groups", "input_shape"):
        assert imported_op.py_attrs()[attr] == original.py_attrs()[attr]
    back_args = [
        values[i.name] if i.is_param else a
        for i, a in zip(arg_infos(entry_function(back)), args, strict=True)
    ]
    report = compare(run_reference(module, args), run_reference(back, back_args))
    assert report.ok, report.summary()


# ------------------------------------------------------------------ LogSoftmax


@pytest.mark.parametrize(
    ("opset", "axis", "dtype"),
    [
        (13, 0, np.float32),
        (13, -1, np.float32),
        (13, 1, np.float16),
        (11, 1, np.float32),  # all dims from 1 on as one row
        (11, -1, np.float32),
    ],
)
def test_log_softmax(opset: int, axis: int, dtype: type) -> None:
    x = (X2 * 30).astype(dtype)  # large values: only the max subtraction keeps exp finite
    module = agree(Case([node("LogSoftmax", ["x"], axis=axis)], {"x": x}, opset=opset))
    assert {"exp", "log", "reduce"} <= set(ops_of(module))


# -------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("case", "message"),
    [
        (
            Case(
                [node("Conv", ["x", "w"])],
                {"x": rand(1, 1, 3, 3, 3)},
                weights={"w": rand(1, 1, 2, 2, 2)},
            ),
            "only 1-D and 2-D windows over NCL and NCHW inputs are supported, got a rank-5 input",
        ),
        (
            Case(
                [
                    node(
                        "ConvTranspose",
                        ["x", "w"],
                        strides=[2, 2],
                        output_shape=[9, 8],
                        auto_pad="SAME_UPPER",
                    )
                ],
                {"x": rand(1, 1, 3, 3)},
                weights={"w": rand(1, 1, 3, 3)},
            ),
            "output size 9 exceeds the 7 the input gives by 2",
        ),
        (
            Case(
                [node("Pad", ["x", "pads"], mode="wrap")],
                {"x": X1},
                weights={"pads": ints([0, 0, 1, 0, 0, 1])},
                opset=18,
            ),
            "mode 'wrap' needs opset 19",
        ),
        (
            Case(
                [node("MaxPool", ["x"], kernel_shape=[2], dilations=[2], auto_pad="SAME_UPPER")],
                {"x": X1},
            ),
            "auto_pad SAME_UPPER with dilations [2] is ambiguous",
        ),
        (
            Case(
                [node("Pad", ["x", "pads"])],
                {"x": X1},
                weights={"pads": ints([0, 0, -6, 0, 0, -6])},
            ),
            "pads -6, -6 crop more than the 11 elements of axis 2",
        ),
        (
            Case(
                [node("Pad", ["x", "pads", "v"])],
                {"x": X1},
                weights={"pads": ints([0] * 6), "v": ints([1])},
            ),
            "constant_value is i64, but the data is f32",
        ),
    ],
    ids=[
        "3d-window",
        "transpose-too-long",
        "wrap-before-19",
        "dilated-same-pool",
        "crop-too-much",
        "fill-type",
    ],
)
def test_window_and_pad_refusals(case: Case, message: str) -> None:
    assert message in refusal(case)
