"""The ONNX operators beyond TASO's set (issue 20): each imported from a one-node model
built with `onnx.helper`, in several attribute combinations, run on the reference
interpreter and compared with onnxruntime at `tasoc.verify.equivalence.compare`'s
tolerances; where onnxruntime refuses a form the spec allows (batch-major recurrent
layers, LRN over an even window or an input that is not 4-D), against an equivalent
model onnxruntime runs or the spec's formula. Every refusal is a one-line
`OnnxImportError` naming the node, the op and the opset.
"""

from __future__ import annotations

import numpy as np
import pytest
from onnx import TensorProto
from onnx_builders import Case, check, imported, ints, node, ops_of, rand, refusal

from tasoc.backends.onnx import export_onnx, import_onnx
from tasoc.backends.onnx.runtime import inference_session
from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder
from tasoc.verify.equivalence import compare

X = rand(2, 3, 4)
Y = rand(3, 4)
POSITIVE = np.abs(X) + 0.1


# ------------------------------------------------------------- arithmetic and math


@pytest.mark.parametrize(
    ("op_type", "x"),
    [
        ("Sqrt", POSITIVE),
        ("Exp", X),
        ("Log", POSITIVE),
        ("Neg", X),
        ("Reciprocal", POSITIVE),
        ("Abs", X),
        ("Erf", X),
        ("Neg", (X * 9).astype(np.int32)),
        ("Abs", (X * 9).astype(np.int64)),
        ("Exp", X.astype(np.float64)),
        ("Sqrt", POSITIVE.astype(np.float16)),
    ],
)
def test_unary_math(op_type: str, x: np.ndarray) -> None:
    module = check(Case([node(op_type, ["x"])], {"x": x}))
    assert ops_of(module) == [op_type.lower()]


def test_a_lone_erf_is_graph_erf_and_the_gelu_pattern_is_still_gelu() -> None:
    nodes = [
        node("Erf", ["x"], ["lone"]),
        node("Div", ["x", "sqrt2"], ["scaled"]),
        node("Erf", ["scaled"], ["erf"]),
        node("Add", ["erf", "one"], ["plus"]),
        node("Mul", ["x", "plus"], ["times"]),
        node("Mul", ["times", "half"], ["gelu"]),
    ]
    weights = {
        "sqrt2": np.float32(np.sqrt(2)),
        "one": np.float32(1),
        "half": np.float32(0.5),
    }
    module = check(Case(nodes, {"x": X}, ["lone", "gelu"], weights))
    assert sorted(ops_of(module)) == ["erf", "gelu"]


@pytest.mark.parametrize(
    ("op_type", "feeds", "weights", "ops"),
    [
        ("Sub", {"a": X, "b": Y}, {}, ["sub"]),
        ("Sub", {"a": X}, {"b": Y}, ["sub"]),
        ("Div", {"a": X, "b": Y}, {}, ["div"]),
        ("Div", {"a": X}, {"b": Y + 3}, ["mul"]),  # by the weight b.reciprocal
        ("Div", {"a": ints([7, -7, 9, -9]), "b": ints([2, 2, -4, -4])}, {}, ["div"]),
        (
            "Div",
            {"a": ints([7, -7, 9, -9], np.int32)},
            {"b": ints([2, 2, -4, -4], np.int32)},
            ["div"],
        ),
        ("Pow", {"a": POSITIVE, "b": Y}, {}, ["pow"]),
        ("Pow", {"a": X}, {"b": ints([2, 3, 1, 0])}, ["cast", "cast", "pow", "cast"]),
        ("Pow", {"a": ints([1, 2, 3, 4])}, {"b": np.float32([2, 3, 0.5, 1])}, None),
        ("Pow", {"a": ints([1, 2, 3, 4], np.int32)}, {"b": ints([2, 3, 0, 1])}, ["cast", "pow"]),
        ("Pow", {"a": POSITIVE}, {"b": np.float64(1.5)}, None),
    ],
)
def test_binary_arithmetic(
    op_type: str,
    feeds: dict[str, np.ndarray],
    weights: dict[str, np.ndarray],
    ops: list[str] | None,
) -> None:
    module = check(Case([node(op_type, ["a", "b"])], feeds, weights=weights))
    if ops is not None:
        assert ops_of(module) == ops


@pytest.mark.parametrize("op_type", ["Min", "Max", "Sum", "Mean"])
@pytest.mark.parametrize("count", [1, 3])
def test_variadic(op_type: str, count: int) -> None:
    feeds = dict(list({"a": X, "b": Y, "c": rand(4)}.items())[:count])
    check(Case([node(op_type, list(feeds))], feeds))


def test_max_and_min_of_integers() -> None:
    feeds = {"a": (X * 9).astype(np.int64), "b": (Y * 9).astype(np.int64)}
    check(
        Case(
            [node("Max", ["a", "b"], ["hi"]), node("Min", ["a", "b"], ["lo"])], feeds, ["hi", "lo"]
        )
    )


# ---------------------------------------------------- comparisons, logic, Where


@pytest.mark.parametrize("op_type", ["Equal", "Less", "Greater", "LessOrEqual", "GreaterOrEqual"])
@pytest.mark.parametrize("dtype", [np.float32, np.int64, np.int8])
def test_comparisons(op_type: str, dtype: type) -> None:
    feeds = {"a": np.round(X * 2).astype(dtype), "b": np.round(Y * 2).astype(dtype)}
    module = check(Case([node(op_type, ["a", "b"])], feeds))
    assert ops_of(module) == ["compare"]


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor", "Not"])
def test_logic(op_type: str) -> None:
    feeds = {"a": X > 0, "b": Y > 0}
    inputs = ["a"] if op_type == "Not" else ["a", "b"]
    check(Case([node(op_type, inputs)], {name: feeds[name] for name in inputs}))


def test_where_on_computed_and_known_values() -> None:
    nodes = [
        node("Greater", ["x", "zero"], ["positive"]),
        node("Where", ["positive", "x", "fill"], ["y"]),
        node("Where", ["mask", "x", "fill"], ["z"]),
    ]
    weights = {"zero": np.float32(0), "fill": rand(4)}
    module = check(Case(nodes, {"x": X, "mask": Y > 0}, ["y", "z"], weights))
    assert ops_of(module).count("where") == 2


# -------------------------------------------------------------------------- casts

CAST_TARGETS = [
    TensorProto.FLOAT16,
    TensorProto.DOUBLE,
    TensorProto.INT32,
    TensorProto.INT64,
    TensorProto.INT8,
    TensorProto.INT16,
    TensorProto.UINT8,
    TensorProto.BOOL,
]


@pytest.mark.parametrize("to", CAST_TARGETS, ids=TensorProto.DataType.Name)
def test_cast_from_float(to: int) -> None:
    # Within every target's range: out of range, onnxruntime's result is undefined.
    check(Case([node("Cast", ["x"], to=to)], {"x": POSITIVE * 40}))


@pytest.mark.parametrize(
    "dtype", [np.int64, np.int32, np.int16, np.int8, np.uint8, np.bool_, np.float16, np.float64]
)
def test_cast_to_float(dtype: type) -> None:
    check(Case([node("Cast", ["x"], to=TensorProto.FLOAT)], {"x": (X * 5).astype(dtype)}))


def test_cast_to_the_same_type_is_no_op_and_cast_like_takes_the_other_type() -> None:
    nodes = [
        node("Cast", ["x"], ["same"], to=TensorProto.FLOAT),
        node("CastLike", ["x", "like"], ["half"]),
    ]
    module = check(Case(nodes, {"x": X, "like": np.zeros(2, np.float16)}, ["same", "half"]))
    assert ops_of(module) == ["cast"]


# -------------------------------------------------------------------- activations


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [
        ("LeakyRelu", {}),
        ("LeakyRelu", {"alpha": 0.3}),
        ("Elu", {}),
        ("Elu", {"alpha": 0.3}),
        ("Selu", {}),
        ("Selu", {"alpha": 1.3, "gamma": 2.0}),
        ("HardSigmoid", {}),
        ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
        ("HardSwish", {}),
        ("Softplus", {}),
        ("Softsign", {}),
    ],
)
def test_activations(op_type: str, attrs: dict[str, float]) -> None:
    check(Case([node(op_type, ["x"], **attrs)], {"x": X * 4}))


def test_softplus_does_not_overflow() -> None:
    check(Case([node("Softplus", ["x"])], {"x": X * 100}))


@pytest.mark.parametrize("slope", [rand(4), rand(3, 1, 1), rand(1)], ids=["last", "channel", "one"])
def test_prelu(slope: np.ndarray) -> None:
    check(Case([node("PRelu", ["x", "slope"])], {"x": rand(2, 3, 4, 4)}, weights={"slope": slope}))


@pytest.mark.parametrize(
    ("inputs", "weights"),
    [
        (["x", "lo", "hi"], {"lo": np.float32(-0.5), "hi": np.float32(0.7)}),
        (["x", "lo"], {"lo": np.float32(-0.5)}),
        (["x", "", "hi"], {"hi": np.float32(0.5)}),
        (["x"], {}),
        (["x", "lo", "hi"], {"lo": np.float32(0.5), "hi": np.float32(-0.5)}),  # min > max
    ],
    ids=["both", "min", "max", "none", "crossed"],
)
def test_clip(inputs: list[str], weights: dict[str, np.ndarray]) -> None:
    check(Case([node("Clip", inputs)], {"x": X}, weights=weights))


def test_clip_of_integers_by_run_time_bounds() -> None:
    feeds = {"x": (X * 10).astype(np.int32), "lo": ints(-3, np.int32), "hi": ints(4, np.int32)}
    check(Case([node("Clip", ["x", "lo", "hi"])], feeds))


# ----------------------------------------------------------------------- indexing

DATA = rand(5, 4, 3)
INDICES = ints([[0, -1], [2, 1]])


@pytest.mark.parametrize("axis", [0, 1, 2, -1])
@pytest.mark.parametrize("known", [True, False], ids=["known", "run-time"])
def test_gather_on_any_axis(axis: int, known: bool) -> None:
    indices = {"i": INDICES}
    feeds, weights = ({"d": DATA}, indices) if known else ({"d": DATA, **indices}, {})
    module = check(Case([node("Gather", ["d", "i"], axis=axis)], feeds, weights=weights))
    assert ops_of(module)[-1] == "gather"


def test_gather_keeps_the_embedding_and_scalar_index_forms() -> None:
    nodes = [
        node("Gather", ["table", "ids"], ["rows"]),
        node("Gather", ["table", "wrapped"], ["known_rows"]),
        node("Gather", ["data", "last"], ["one"], axis=1),
    ]
    feeds = {"table": rand(5, 3), "ids": ints([[0, 4], [2, 1]], np.int32), "data": DATA}
    weights = {"wrapped": INDICES, "last": ints(-1)}
    module = check(Case(nodes, feeds, ["rows", "known_rows", "one"], weights))
    assert ops_of(module).count("embedding") == 2 and "gather" not in ops_of(module)


@pytest.mark.parametrize(
    ("x", "shape"),
    [(rand(3, 1), [2, 1, 4]), (rand(3, 4), [1]), (rand(1, 4), [3, 1]), (rand(4), [2, 3, 4])],
)
def test_expand(x: np.ndarray, shape: list[int]) -> None:
    check(Case([node("Expand", ["x", "shape"])], {"x": x}, weights={"shape": ints(shape)}))


@pytest.mark.parametrize("repeats", [[2, 3], [1, 1], [1, 0], [3, 1]])
def test_tile(repeats: list[int]) -> None:
    check(
        Case(
            [node("Tile", ["x", "repeats"])], {"x": rand(2, 3)}, weights={"repeats": ints(repeats)}
        )
    )


@pytest.mark.parametrize("upper", [0, 1])
@pytest.mark.parametrize("k", [None, -1, 0, 2, -10, 10])
def test_trilu(upper: int, k: int | None) -> None:
    inputs, weights = (["x"], {}) if k is None else (["x", "k"], {"k": ints(k)})
    module = check(
        Case([node("Trilu", inputs, upper=upper)], {"x": rand(2, 4, 5)}, weights=weights)
    )
    assert ops_of(module)[-2:] == ["constant", "where"]


# --------------------------------------------------------------------- reductions

REDUCTIONS = [
    "ReduceMin",
    "ReduceProd",
    "ReduceL1",
    "ReduceL2",
    "ReduceSumSquare",
    "ReduceLogSum",
    "ReduceLogSumExp",
]


@pytest.mark.parametrize("op_type", REDUCTIONS)
@pytest.mark.parametrize(
    ("axes", "attrs"),
    [
        ([1, -1], {}),
        ([0], {"keepdims": 0}),
        (None, {"keepdims": 0}),
        (None, {"noop_with_empty_axes": 1}),
    ],
    ids=["axes", "no-keepdims", "all", "noop"],
)
def test_reductions(op_type: str, axes: list[int] | None, attrs: dict[str, int]) -> None:
    x = POSITIVE if op_type == "ReduceLogSum" else X
    inputs, weights = (["x"], {}) if axes is None else (["x", "axes"], {"axes": ints(axes)})
    check(Case([node(op_type, inputs, **attrs)], {"x": x}, weights=weights, opset=18))


@pytest.mark.parametrize("op_type", REDUCTIONS)
def test_reductions_with_axes_attribute(op_type: str) -> None:
    x = POSITIVE if op_type == "ReduceLogSum" else X
    check(Case([node(op_type, ["x"], axes=[1])], {"x": x}, opset=13))


def test_log_sum_exp_of_large_values_and_integer_minimum() -> None:
    nodes = [
        node("ReduceLogSumExp", ["x"], ["lse"], axes=[1]),
        node("ReduceMin", ["i"], ["least"], axes=[1]),
    ]
    check(Case(nodes, {"x": X * 100, "i": (X * 9).astype(np.int64)}, ["lse", "least"], opset=13))


@pytest.mark.parametrize("op_type", ["ReduceMax", "ReduceMin"])
def test_max_and_min_of_booleans_are_any_and_all(op_type: str) -> None:
    reduce = node(op_type, ["x", "axes"], keepdims=0)
    check(Case([reduce], {"x": X > 0}, weights={"axes": ints([1])}, opset=20))


# ---------------------------------------------------- half precision, rounded once


@pytest.mark.parametrize(
    ("op_type", "attrs"),
    [
        ("Elu", {}),
        ("Selu", {}),
        ("Softplus", {}),
        ("HardSwish", {}),
        ("Gelu", {"approximate": "tanh"}),
        ("ReduceLogSumExp", {"keepdims": 0}),
        ("ReduceL2", {"keepdims": 0}),
        ("LRN", {"size": 3}),
    ],
)
def test_half_precision_compositions_round_once(op_type: str, attrs: dict[str, object]) -> None:
    """A function spelled in several ops computes float16 in float32 and rounds once:
    within one float16 rounding of onnxruntime's float32 result. Rounding each step
    (Elu's e^x, then - 1) would miss by several."""
    x = rand(2, 3, 4, 5)
    case = Case([node(op_type, ["x"], **attrs)], {"x": x.astype(np.float16)}, opset=20)
    module, (result,) = imported(case)
    wide = Case(case.nodes, {"x": x.astype(np.float16).astype(np.float32)}, opset=20)
    (expected,) = inference_session(wide.model()).run(None, wide.feeds)
    ops = ops_of(module)
    assert ops[0] == ops[-1] == "cast"
    np.testing.assert_allclose(result.astype(np.float32), expected, rtol=2**-10, atol=1e-7)


# ------------------------------------------------------------------ normalization


@pytest.mark.parametrize("shape", [(2, 3, 4, 5), (2, 3, 7)])
def test_instance_normalization(shape: tuple[int, ...]) -> None:
    weights = {"scale": rand(3), "bias": rand(3)}
    case = Case(
        [node("InstanceNormalization", ["x", "scale", "bias"], epsilon=1e-3)],
        {"x": rand(*shape)},
        weights=weights,
    )
    assert "layernorm" in ops_of(check(case))


@pytest.mark.parametrize("size", [1, 3, 5])
def test_lrn(size: int) -> None:
    lrn = node("LRN", ["x"], size=size, alpha=0.01, beta=0.6, bias=2.0)
    check(Case([lrn], {"x": rand(2, 7, 4, 5)}))


def lrn(x: np.ndarray, size: int, alpha: float, beta: float, bias: float) -> np.ndarray:
    """LRN as the ONNX spec writes it, in float64: each channel divided by (bias +
    alpha / size * the sum of squares over its window of channels) ** beta."""
    wide, channels = x.astype(np.float64), x.shape[1]
    sums = np.zeros_like(wide)
    for c in range(channels):
        low, high = max(0, c - (size - 1) // 2), min(channels, c + size // 2 + 1)
        sums[:, c] = np.sum(wide[:, low:high] ** 2, axis=1)
    return (wide / (bias + alpha / size * sums) ** beta).astype(x.dtype)


@pytest.mark.parametrize(
    ("size", "shape"), [(2, (2, 7, 4, 5)), (4, (2, 7, 4)), (3, (1, 5, 2, 2, 2)), (9, (1, 3, 2))]
)
def test_lrn_forms_onnxruntime_refuses(size: int, shape: tuple[int, ...]) -> None:
    """onnxruntime takes odd windows over 4-D inputs only (and ONNX's reference
    evaluator sums over the wrong axis), so the spec's formula is the oracle here."""
    x = rand(*shape)
    _, results = imported(Case([node("LRN", ["x"], size=size, beta=0.6)], {"x": x}))
    report = compare([lrn(x, size, 1e-4, 0.6, 1.0)], results)
    assert report.ok, report.summary()


@pytest.mark.parametrize("axis", [-1, 1, 0, 2])
def test_layer_normalization_with_mean_and_inverse_deviation(axis: int) -> None:
    normalized = (2, 3, 4)[axis:]
    ln = node("LayerNormalization", ["x", "g", "b"], ["y", "mean", "inv"], axis=axis)
    case = Case(
        [ln],
        {"x": rand(2, 3, 4)},
        ["y", "mean", "inv"],
        {"g": rand(*normalized), "b": rand(*normalized)},
        opset=17,
    )
    assert "layernorm" in ops_of(check(case))


def test_layer_normalization_statistics_in_the_stash_type() -> None:
    ln = node("LayerNormalization", ["x", "g"], ["y", "mean"])
    x, g = rand(2, 3, 4).astype(np.float16), rand(4).astype(np.float16)
    check(Case([ln], {"x": x}, ["y", "mean"], {"g": g}, opset=17))


def test_unread_statistics_cost_nothing() -> None:
    ln = node("LayerNormalization", ["x", "g"], ["y", "mean", "inv"])
    model = Case([ln], {"x": X}, ["y"], {"g": rand(4)}, opset=17)
    assert ops_of(check(model)) == ["zeros", "layernorm"]


# -------------------------------------------------------------------- recurrent

STEPS, BATCH, SIZE, H = 4, 2, 3, 5
GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}


def recurrent(
    op_type: str,
    directions: int = 1,
    initial: bool = True,
    bias: bool = True,
    peepholes: bool = False,
    layout: int = 0,
    **attrs: object,
) -> Case:
    """A recurrent layer over [STEPS, BATCH, SIZE] (batch first in layout 1), hidden size
    H, with all its outputs."""
    gates, state = GATES[op_type], (BATCH, directions, H) if layout else (directions, BATCH, H)
    feeds = {
        "X": rand(BATCH, STEPS, SIZE, scale=0.5) if layout else rand(STEPS, BATCH, SIZE, scale=0.5)
    }
    weights = {
        "W": rand(directions, gates * H, SIZE, scale=0.5),
        "R": rand(directions, gates * H, H, scale=0.5),
    }
    inputs = ["X", "W", "R", "", "", "", "", ""]
    if bias:
        inputs[3], weights["B"] = "B", rand(directions, 2 * gates * H, scale=0.5)
    if initial:
        inputs[5], feeds["h0"] = "h0", rand(*state, scale=0.5)
        if op_type == "LSTM":
            inputs[6], feeds["c0"] = "c0", rand(*state, scale=0.5)
    if peepholes:
        inputs[7], weights["P"] = "P", rand(directions, 3 * H, scale=0.5)
    outputs = ["Y", "Y_h", "Y_c"][: 3 if op_type == "LSTM" else 2]
    while inputs[-1] == "":
        inputs.pop()
    layer = node(op_type, inputs, outputs, **{"hidden_size": H, "layout": layout, **attrs})
    return Case([layer], feeds, outputs, weights, opset=22)


BIDIRECTIONAL = {"direction": "bidirectional"}


@pytest.mark.parametrize(
    "case",
    [
        recurrent("RNN"),
        recurrent("RNN", 2, **BIDIRECTIONAL),
        recurrent("RNN", initial=False, direction="reverse", activations=["Relu"]),
        recurrent("RNN", clip=0.2),
        recurrent("GRU"),
        recurrent("GRU", linear_before_reset=1),
        recurrent("GRU", 2, linear_before_reset=1, **BIDIRECTIONAL),
        recurrent("GRU", 2, linear_before_reset=0, **BIDIRECTIONAL),
        recurrent("GRU", initial=False, bias=False, linear_before_reset=1),
        recurrent("GRU", clip=0.2, activations=["Relu", "Sigmoid"]),
        recurrent("LSTM", 2, peepholes=True, **BIDIRECTIONAL),
        recurrent("LSTM", initial=False),
        recurrent("LSTM", direction="reverse", peepholes=True),
        recurrent("LSTM", input_forget=1, peepholes=True),
        recurrent("LSTM", clip=0.3, peepholes=True),
        recurrent("LSTM", 2, activations=["Relu", "Sigmoid", "Tanh"] * 2, **BIDIRECTIONAL),
    ],
    ids=lambda case: f"{case.nodes[0].op_type}-{len(case.nodes[0].attribute)}",
)
def test_recurrent_layers(case: Case) -> None:
    module = check(case)
    assert {"matmul", "sigmoid" if case.nodes[0].op_type != "RNN" else "add"} <= set(ops_of(module))


@pytest.mark.parametrize("op_type", ["RNN", "GRU", "LSTM"])
def test_batch_major_layout_is_the_transposed_sequence_major_one(op_type: str) -> None:
    """onnxruntime refuses layout 1; the same layer in layout 0 on the transposed input
    gives the transposed outputs."""
    batch_major = recurrent(op_type, 2, peepholes=op_type == "LSTM", layout=1, **BIDIRECTIONAL)
    _, results = imported(batch_major)
    sequence_major = recurrent(op_type, 2, peepholes=op_type == "LSTM", **BIDIRECTIONAL)
    sequence_major.weights = batch_major.weights
    feeds = {name: np.swapaxes(value, 0, 1) for name, value in batch_major.feeds.items()}
    y, *states = inference_session(sequence_major.model()).run(None, feeds)
    expected = [y.transpose(2, 0, 1, 3), *(np.swapaxes(s, 0, 1) for s in states)]
    report = compare(expected, results)
    assert report.ok, report.summary()


def test_only_the_outputs_read_are_built() -> None:
    case = recurrent("LSTM", initial=False)
    case.nodes[0].output[:] = ["", "Y_h"]
    case.outputs = ["Y_h"]
    assert "concat" not in ops_of(check(case))


# ------------------------------------------------------------------------- einsum


@pytest.mark.parametrize(
    ("equation", "shapes"),
    [
        ("bij,bjk->bik", [(2, 3, 4), (2, 4, 5)]),
        ("ij->ji", [(3, 4)]),
        ("bhqd,bhkd->bhqk", [(2, 3, 4, 5), (2, 3, 6, 5)]),
        ("i,i->", [(5,), (5,)]),
        ("ij->i", [(3, 4)]),
        ("ij,jk", [(3, 4), (4, 5)]),
        ("...ij,...jk->...ik", [(2, 1, 3, 4), (1, 3, 4, 5)]),
        ("i,j->ij", [(3,), (4,)]),
        ("ij->", [(3, 4)]),
        ("abc,cd->abd", [(2, 3, 4), (4, 5)]),
        ("ijk,jil->kl", [(2, 3, 4), (3, 2, 5)]),
        ("i->i", [(4,)]),
        ("ij,ij->ij", [(3, 4), (3, 4)]),
        ("Bij,Bjk->iBk", [(2, 3, 4), (2, 4, 5)]),
        ("...j,...j->...", [(2, 3, 4), (2, 3, 4)]),
        ("i...->...", [(2, 3, 4)]),
        ("ij,kj->", [(2, 3), (4, 3)]),
    ],
)
def test_einsum(equation: str, shapes: list[tuple[int, ...]]) -> None:
    feeds = {f"x{i}": rand(*shape) for i, shape in enumerate(shapes)}
    check(Case([node("Einsum", list(feeds), equation=equation)], feeds, opset=12))


def test_einsum_batch_matmul_is_one_matmul() -> None:
    feeds = {"a": rand(2, 3, 4, 5), "b": rand(2, 3, 6, 5)}
    module = check(Case([node("Einsum", ["a", "b"], equation="bhqd,bhkd->bhqk")], feeds, opset=12))
    assert ops_of(module).count("matmul") == 1


# ------------------------------------------------------------------------- resize

IMAGE = rand(2, 3, 4, 5)
TRANSFORMS = [
    "half_pixel",
    "asymmetric",
    "align_corners",
    "pytorch_half_pixel",
    "half_pixel_symmetric",
]
NEAREST_MODES = ["round_prefer_floor", "round_prefer_ceil", "floor", "ceil"]


@pytest.mark.parametrize("transform", TRANSFORMS)
@pytest.mark.parametrize(
    ("mode", "nearest_mode"),
    [("linear", "round_prefer_floor")] + [("nearest", m) for m in NEAREST_MODES],
)
@pytest.mark.parametrize(
    ("inputs", "weights"),
    [
        (["x", "", "scales"], {"scales": np.float32([1, 1, 2, 3])}),
        (["x", "", "", "sizes"], {"sizes": ints([2, 3, 8, 10])}),
    ],
    ids=["scales", "sizes"],
)
def test_resize(
    transform: str, mode: str, nearest_mode: str, inputs: list[str], weights: dict[str, np.ndarray]
) -> None:
    attrs = {
        "mode": mode,
        "coordinate_transformation_mode": transform,
        "nearest_mode": nearest_mode,
    }
    module = check(Case([node("Resize", inputs, **attrs)], {"x": IMAGE}, weights=weights))
    assert "gather" in ops_of(module) and "matmul" not in ops_of(module)


@pytest.mark.parametrize(
    ("inputs", "weights", "attrs", "opset"),
    [
        (["x", "", "", "sizes"], {"sizes": ints([8, 6])}, {"axes": [3, 2]}, 19),
        (
            ["x", "", "", "sizes"],
            {"sizes": ints([8, 8])},
            {"axes": [2, 3], "keep_aspect_ratio_policy": "not_larger"},
            19,
        ),
        (
            ["x", "", "", "sizes"],
            {"sizes": ints([8, 8])},
            {"axes": [2, 3], "keep_aspect_ratio_policy": "not_smaller"},
            19,
        ),
        (
            ["x", "roi", "scales"],
            {"roi": np.zeros(0, np.float32), "scales": np.float32([1, 1, 2, 2])},
            {},
            11,
        ),
        (["x", "", "scales"], {"scales": np.float32([1, 1, 0.5, 0.5])}, {}, 19),
        (["x", "", "scales"], {"scales": np.float32([1, 1, 1, 1])}, {}, 19),
    ],
    ids=["axes", "not-larger", "not-smaller", "opset-11", "down", "identity"],
)
@pytest.mark.parametrize("mode", ["nearest", "linear"])
def test_resize_options(
    inputs: list[str],
    weights: dict[str, np.ndarray],
    attrs: dict[str, object],
    opset: int,
    mode: str,
) -> None:
    check(
        Case(
            [node("Resize", inputs, mode=mode, **attrs)], {"x": IMAGE}, weights=weights, opset=opset
        )
    )


def test_nearest_resize_of_integers_and_infinities() -> None:
    """Nearest is a gather: any element type, and inf and NaN stay where they were."""
    image = IMAGE.copy()
    image[0, 0, 0, 0], image[1, 2, 3, 4] = np.inf, np.nan
    nodes = [
        node("Resize", ["x", "", "scales"], ["y"]),
        node("Resize", ["i", "", "scales"], ["z"]),
    ]
    feeds = {"x": image, "i": (IMAGE * 9).astype(np.int8)}
    check(Case(nodes, feeds, ["y", "z"], {"scales": np.float32([1, 1, 2, 3])}))


# ----------------------------------------------------------------------- refusals


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            Case([node("Cast", ["x"], to=TensorProto.UINT16)], {"x": X}),
            "a cast to UINT16 is not supported",
        ),
        (
            Case([node("Cast", ["x"], to=TensorProto.FLOAT8E4M3FN)], {"x": X}),
            "a cast to FLOAT8E4M3FN is not supported",
        ),
        (
            Case([node("Einsum", ["x"], equation="ii->i")], {"x": rand(3, 3)}, opset=12),
            "term 'ii' repeats a letter (diagonals are not supported)",
        ),
        (
            Case(
                [node("Einsum", ["a", "b", "c"], equation="i,i,i->")],
                {n: rand(3) for n in "abc"},
                opset=12,
            ),
            "3 operands are not supported (only 1 or 2)",
        ),
        (
            Case(
                [node("Resize", ["x", "", "scales"], mode="cubic")],
                {"x": IMAGE},
                weights={"scales": np.float32([1, 1, 2, 2])},
            ),
            "mode 'cubic' is not supported (only nearest, linear)",
        ),
        (
            Case(
                [node("Resize", ["x", "", "scales"], mode="linear", antialias=1)],
                {"x": IMAGE},
                weights={"scales": np.float32([1, 1, 0.5, 0.5])},
            ),
            "antialias=1 is not supported",
        ),
        (
            Case(
                [node("Resize", ["x", "", "scales"], exclude_outside=1)],
                {"x": IMAGE},
                weights={"scales": np.float32([1, 1, 2, 2])},
            ),
            "exclude_outside=1 is not supported",
        ),
        (
            Case(
                [
                    node(
                        "Resize",
                        ["x", "roi", "scales"],
                        coordinate_transformation_mode="tf_crop_and_resize",
                    )
                ],
                {"x": IMAGE},
                weights={
                    "roi": np.float32([0, 0, 0, 0, 1, 1, 1, 1]),
                    "scales": np.float32([1, 1, 2, 2]),
                },
            ),
            "coordinate_transformation_mode 'tf_crop_and_resize' is not supported",
        ),
        (
            Case(
                [node("Resize", ["x", "", "scales"], mode="linear")],
                {"x": (IMAGE * 9).astype(np.int8)},
                weights={"scales": np.float32([1, 1, 2, 2])},
            ),
            "linear interpolation of i8 values is not supported",
        ),
        (
            Case([node("Trilu", ["x"])], {"x": rand(4)}),
            "input must have rank >= 2, got shape [4]",
        ),
        (
            Case([node("Tile", ["x", "r"])], {"x": Y}, weights={"r": ints([2])}),
            "repeats [2] must hold one count >= 0 for each of the 2 dims",
        ),
        (
            Case([node("Expand", ["x", "s"])], {"x": Y}, weights={"s": ints([5, 4])}),
            "shape [5, 4] does not broadcast with the input's [3, 4]",
        ),
        (
            Case([node("Gather", ["x", "i"])], {"x": Y}, weights={"i": ints([3])}),
            "indices must lie in [-3, 2] for axis 0 of size 3, got 3 to 3",
        ),
        (
            Case([node("PRelu", ["x", "s"])], {"x": rand(4)}, weights={"s": rand(3, 4)}),
            "slope of shape [3, 4] does not broadcast to X's shape [4]",
        ),
        (
            Case([node("Clip", ["x", "lo"])], {"x": X}, weights={"lo": rand(2)}),
            "min must be a scalar, got shape [2]",
        ),
        (
            Case(
                [node("LayerNormalization", ["x", "g"], ["y", "m"], stash_type=TensorProto.INT32)],
                {"x": X},
                ["y", "m"],
                {"g": rand(4)},
                opset=17,
            ),
            "stash_type 6 is not a float type the dialect has",
        ),
    ],
    ids=[
        "cast-uint16",
        "cast-float8",
        "einsum-diagonal",
        "einsum-three",
        "resize-cubic",
        "resize-antialias",
        "resize-exclude-outside",
        "resize-crop",
        "resize-linear-integers",
        "trilu-rank",
        "tile-repeats",
        "expand-shape",
        "gather-range",
        "prelu-slope",
        "clip-bound",
        "layernorm-stash",
    ],
)
def test_refusals_are_one_line_naming_node_op_and_opset(case: Case, expected: str) -> None:
    message = refusal(case)
    op_type = case.nodes[0].op_type
    assert message.startswith(f"{op_type} node '#0' (opset {case.opset}): "), message
    assert expected in message, message


@pytest.mark.parametrize(
    ("case", "expected"),
    [
        (
            recurrent("LSTM", activations=["HardSigmoid", "Tanh", "Tanh"]),
            "activations ['HardSigmoid'] are not supported (only Sigmoid, Tanh, Relu)",
        ),
        (recurrent("GRU", activations=["Sigmoid"]), "must name 2 functions for each of 1"),
        (recurrent("RNN", direction="sideways"), "direction 'sideways' is not forward"),
        (recurrent("RNN", layout=2), "layout 2 is not 0 or 1"),
        (recurrent("GRU", hidden_size=4), "hidden_size 4 does not match W's 5"),
        (recurrent("RNN", clip=-1.0), "clip -1.0 must be positive"),
    ],
    ids=["activation", "activation-count", "direction", "layout", "hidden-size", "clip"],
)
def test_recurrent_refusals(case: Case, expected: str) -> None:
    assert expected in refusal(case)


def test_partial_sequence_lengths_are_refused_and_full_ones_ignored() -> None:
    full = recurrent("LSTM")
    full.nodes[0].input[4] = "lengths"
    full.weights["lengths"] = ints([STEPS, STEPS], np.int32)
    check(full)
    partial = recurrent("LSTM")
    partial.nodes[0].input[4] = "lengths"
    partial.weights["lengths"] = ints([STEPS, 2], np.int32)
    assert "sequence_lens [4, 2] must give all 2 sequences the full length 4" in refusal(partial)


# --------------------------------------------------------------------- round trip


def test_the_new_ops_come_back_from_export() -> None:
    """What the exporter writes for the new ops imports as the same ops: compare{ne} as
    Not(Equal) and a gather along axis 0 as Gather are recorded in the metadata."""
    g = GraphBuilder()
    x, y, ids = g.input("x", (3, 4)), g.input("y", (3, 4)), g.input("ids", (2,), "i64")
    unequal = g.where(g.compare(x, y, "ne"), x, y)
    rows = g.gather(g.div(g.sub(unequal, y), x), ids, 0)
    spread = g.broadcast(g.neg(x), (2, 3, 4))
    module = g.build(g.cast(rows, "f16"), spread, g.erf(g.max(x, y)))
    back, _ = import_onnx(export_onnx(module))
    assert ops_of(back) == ops_of(module)
    compare_op = next(op for op in back.walk() if isinstance(op, G.CompareOp))
    assert compare_op.py_attrs()["predicate"] == "ne"
