"""The convolutional zoo models: structure, sizes against the published networks, numerics.

Parameter counts are checked exactly against the counts published for the reference
implementations. Our graphs differ from those in two bookkeeping ways only, both
exact: they have no biases (the published counts include them), and the running mean
and variance of each batchnorm are weights of the graph (torchvision and timm count
them as buffers, not parameters; Keras counts them).
"""

from __future__ import annotations

import itertools
from collections import Counter

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.backends import arguments
from tasoc.backends.numpy import interpreter
from tasoc.ir.graph import Graph, GraphOp, sig_of
from tasoc.ir.program import arg_infos, entry_function, return_values
from tasoc.models import ZooError, build_model, get_model, model_stats
from tasoc.models.layers import ConvNet
from tasoc.models.nasnet import _Cells

CNN_MODELS = [
    "alexnet",
    "inception_v3",
    "inception_v4",
    "nasnet",
    "nasnet_a",
    "resnet101",
    "resnet50",
    "resnext50",
    "squeezenet",
    "vgg16",
    "vgg19",
    "wresnet",
]


def _ops(module: ModuleOp) -> list[GraphOp]:
    return [op for op in entry_function(module).body.block.ops if isinstance(op, GraphOp)]


def _op_counts(module: ModuleOp) -> Counter[str]:
    return Counter(op.name.removeprefix("graph.") for op in _ops(module))


def _weights(module: ModuleOp) -> dict[str, tuple[int, ...]]:
    return {a.name: a.sig.shape for a in arg_infos(entry_function(module)) if a.is_param}


def _output_shapes(module: ModuleOp) -> list[tuple[int, ...]]:
    return [sig_of(value.type).shape for value in return_values(entry_function(module))]


def _batchnorm_channels(module: ModuleOp) -> int:
    return sum(
        sig_of(op.operands[0].type).shape[1] for op in _ops(module) if op.name.endswith("batchnorm")
    )


def _parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


# ---------------------------------------------------------------- small variants


def test_cnn_models_are_registered_with_small_variants() -> None:
    for name in CNN_MODELS:
        model = get_model(name)
        assert model.small and model.source and model.summary


@pytest.mark.parametrize("name", CNN_MODELS)
def test_small_variant_round_trips_and_runs_with_a_batch_of_two(name: str) -> None:
    model = get_model(name)
    module = model.build(**{**model.small, "batch": 2})
    module.verify()
    text = str(module)
    assert str(_parse(text)) == text
    (expected,) = _output_shapes(module)
    assert expected[0] == 2
    if name != "nasnet_a":
        assert expected == (2, model.defaults["classes"])
    args = arguments.random_inputs(module, seed=0)
    (output,) = interpreter.run_reference(module, args)
    assert output.shape == expected
    assert np.isfinite(output).all()
    assert np.abs(output).max() > 0, "a dead network hides wiring mistakes"
    assert not np.allclose(output[0], output[1])
    # the second image alone, with the same weights, gives the second output: no layer
    # mixes the images of a batch (a flatten or pooling over the wrong axes would)
    single = model.build(**{**model.small, "batch": 1})
    (alone,) = interpreter.run_reference(single, [args[0][1:], *args[1:]])
    np.testing.assert_allclose(alone[0], output[1], rtol=1e-4, atol=1e-6 * np.abs(output).max())


# ------------------------------------------------------------- published sizes

TORCHVISION_BIAS = 1000
"""The only bias of the torchvision/timm ResNets and Inceptions: the classifier's."""

VGG16_BIASES = (2 * 64 + 2 * 128 + 3 * 256 + 6 * 512) + (4096 + 4096 + 1000)
"""13,416: so tasoc's VGG-16 has 138,357,544 - 13,416 = 138,344,128 weights."""
VGG19_BIASES = (2 * 64 + 2 * 128 + 4 * 256 + 8 * 512) + (4096 + 4096 + 1000)
ALEXNET_BIASES = (64 + 192 + 384 + 256 + 256) + (4096 + 4096 + 1000)
FIRE_BIASES = sum(
    2 * (squeeze + 2 * expand) for squeeze, expand in ((16, 64), (32, 128), (48, 192), (64, 256))
)


@pytest.mark.parametrize(
    ("spec", "published", "biases", "running_stats_counted"),
    [
        # torchvision resnet50 / resnet101 / resnext50_32x4d / wide_resnet{50,101}_2
        ("resnet50", 25_557_032, TORCHVISION_BIAS, False),
        ("resnet101?batch=1", 44_549_160, TORCHVISION_BIAS, False),
        ("resnext50", 25_028_904, TORCHVISION_BIAS, False),
        ("wresnet?depth=50&widen=2&batch=1", 68_883_240, TORCHVISION_BIAS, False),
        ("wresnet?depth=101&widen=2&batch=1", 126_886_696, TORCHVISION_BIAS, False),
        # torchvision vgg16 (the paper's 138 M of configuration D), vgg19, alexnet,
        # squeezenet1_1 / 1_0
        ("vgg16", 138_357_544, VGG16_BIASES, False),
        ("vgg19", 143_667_240, VGG19_BIASES, False),
        ("alexnet?batch=1", 61_100_840, ALEXNET_BIASES, False),
        ("squeezenet", 1_235_496, 64 + FIRE_BIASES + 1000, False),
        ("squeezenet?version=1.0", 1_248_424, 96 + FIRE_BIASES + 1000, False),
        # torchvision inception_v3 (27,161,264) less its auxiliary classifier
        # (768->128 1x1 + bn, 128->768 5x5 + bn, fc 768->1000 + bias = 3,326,696)
        ("inception_v3", 27_161_264 - 3_326_696, TORCHVISION_BIAS, False),
        # timm / Cadene's inception_v4 with 1000 classes
        ("inception_v4?width=1&batch=1", 42_679_816, TORCHVISION_BIAS, False),
        # Keras NASNetLarge (6 @ 4032, 331x331) and NASNetMobile (4 @ 1056): total params
        ("nasnet?repeat=6&filters=168&stem_filters=96&image=331&batch=1", 88_949_818, 1000, True),
        ("nasnet?repeat=4&filters=44&stem_filters=32&batch=1", 5_326_716, 1000, True),
    ],
)
def test_parameter_counts_match_the_published_networks(
    spec: str, published: int, biases: int, running_stats_counted: bool
) -> None:
    module = build_model(spec)
    running_stats = 0 if running_stats_counted else 2 * _batchnorm_channels(module)
    assert model_stats(module).params == published - biases + running_stats


def test_folding_batchnorm_keeps_the_convolutions_and_drops_four_weights_per_channel() -> None:
    for name in ("resnet50", "inception_v3"):
        normed, folded = build_model(name), build_model(f"{name}?batchnorm=false")
        counts, folded_counts = _op_counts(normed), _op_counts(folded)
        assert "batchnorm" not in folded_counts
        assert folded_counts["conv2d"] == counts["conv2d"] == counts["batchnorm"]
        # each relu after a batchnorm is fused into its convolution
        fused = sum(
            op.py_attrs()["activation"] == "relu"
            for op in _ops(folded)
            if op.name.endswith("conv2d")
        )
        assert fused == counts["relu"] - folded_counts["relu"]
        params = model_stats(normed).params - model_stats(folded).params
        assert params == 4 * _batchnorm_channels(normed)


# ------------------------------------------------------------ default structure

HEAD = {"reduce": 1, "matmul": 1}
"""Global average pooling and the linear classifier."""


@pytest.mark.parametrize(
    ("name", "counts"),
    [
        # stem conv + 16 blocks x 3 + 4 projections; relu after stem, a, b and each add
        ("resnet50", {**HEAD, "conv2d": 53, "batchnorm": 53, "relu": 49, "add": 16, "pool2d": 1}),
        (
            "resnet101",
            {**HEAD, "conv2d": 104, "batchnorm": 104, "relu": 100, "add": 33, "pool2d": 1},
        ),
        ("resnext50", {**HEAD, "conv2d": 53, "batchnorm": 53, "relu": 49, "add": 16, "pool2d": 1}),
        ("wresnet", {**HEAD, "conv2d": 155, "batchnorm": 155, "relu": 151, "add": 50, "pool2d": 1}),
        ("vgg16", {"conv2d": 13, "pool2d": 5, "reshape": 1, "matmul": 3, "relu": 2}),
        ("vgg19", {"conv2d": 16, "pool2d": 5, "reshape": 1, "matmul": 3, "relu": 2}),
        ("alexnet", {"conv2d": 5, "pool2d": 3, "reshape": 1, "matmul": 3, "relu": 2}),
        ("squeezenet", {"conv2d": 26, "pool2d": 3, "concat": 8, "reduce": 1}),
        # torchvision's 94 BasicConv2d without the auxiliary head; 13 pools, 11 modules
        (
            "inception_v3",
            {**HEAD, "conv2d": 94, "batchnorm": 94, "relu": 94, "pool2d": 13, "concat": 11},
        ),
        # stem 11 + 4 x 7 + 4 + 7 x 10 + 6 + 3 x 10 convolutions
        (
            "inception_v4",
            {**HEAD, "conv2d": 149, "batchnorm": 149, "relu": 149, "pool2d": 18, "concat": 19},
        ),
        # per stage 5 normal cells (12 convs, 3 pools, 5 adds) + 1 reduction (12, 4, 5)
        ("nasnet_a", {"conv2d": 216, "pool2d": 57, "add": 90, "concat": 18}),
    ],
)
def test_default_op_counts(name: str, counts: dict[str, int]) -> None:
    module = get_model(name).build()
    op_counts = _op_counts(module)
    assert op_counts == Counter(counts)


def test_default_shapes_are_the_benchmarks() -> None:
    expected_inputs = {
        "resnet50": (1, 3, 224, 224),
        "resnext50": (1, 3, 224, 224),
        "vgg16": (1, 3, 224, 224),
        "vgg19": (1, 3, 224, 224),
        "squeezenet": (1, 3, 224, 224),
        "inception_v3": (1, 3, 299, 299),
        "nasnet_a": (1, 128, 56, 56),
        "alexnet": (256, 3, 224, 224),
        "resnet101": (64, 3, 224, 224),
        "wresnet": (64, 3, 224, 224),
        "inception_v4": (64, 3, 299, 299),
    }
    for name, shape in expected_inputs.items():
        module = get_model(name).build()
        (image,) = [a.sig.shape for a in arg_infos(entry_function(module)) if not a.is_param]
        assert image == shape, name
    assert _output_shapes(build_model("nasnet_a")) == [(1, 5 * 1024, 7, 7)]


def test_resnext_groups_and_wide_resnet_widths() -> None:
    resnext = build_model("resnext50")
    grouped = [
        op for op in _ops(resnext) if op.name.endswith("conv2d") and op.py_attrs()["groups"] > 1
    ]
    assert len(grouped) == 16 and {op.py_attrs()["groups"] for op in grouped} == {32}
    weights = _weights(resnext)
    assert weights["s1b1_b_w"] == (128, 4, 3, 3) and weights["s4b3_b_w"] == (1024, 32, 3, 3)

    wide = _weights(build_model("wresnet?batch=1"))
    # only the inner width is widened: 64 * 10 in stage 1, outer stays 256
    assert wide["s1b1_a_w"] == (640, 64, 1, 1) and wide["s1b1_c_w"] == (256, 640, 1, 1)
    assert wide["s4b3_b_w"] == (5120, 5120, 3, 3)
    assert sum(1 for name in wide if name.endswith("_b_w")) == 50  # 3 + 8 + 36 + 3 blocks


@pytest.mark.parametrize(
    ("name", "convs"), [("vgg16", (2, 2, 3, 3, 3)), ("vgg19", (2, 2, 4, 4, 4))]
)
def test_vgg_configurations_differ_only_in_convolutions_per_stage(
    name: str, convs: tuple[int, ...]
) -> None:
    """Configurations D and E share one builder: the small variants (what the tests
    run) have the same layers as the full networks, 13 or 16 convolutions named by
    stage and the same three dense layers, at an eighth of the channels."""
    model = get_model(name)
    module = model.build(**model.small)
    module.verify()
    counts = _op_counts(module)
    assert counts["conv2d"] == sum(convs) and counts["matmul"] == 3
    weights = _weights(module)
    expected = {
        f"conv{stage}_{index}_w"
        for stage, count in enumerate(convs, start=1)
        for index in range(1, count + 1)
    }
    assert {w for w in weights if w.startswith("conv")} == expected
    assert weights["conv5_1_w"] == (64, 64, 3, 3)  # 512 / 8 channels
    assert weights["fc1_w"] == (64, 512) and weights["fc3_w"] == (512, 1000)  # 1x1 map left


def test_squeezenet_versions_and_bypasses() -> None:
    weights = _weights(build_model("squeezenet?version=1.0"))
    assert weights["conv1_w"] == (96, 3, 7, 7)
    assert _weights(build_model("squeezenet"))["conv1_w"] == (64, 3, 3, 3)
    adds = {
        bypass: _op_counts(build_model(f"squeezenet?bypass={bypass}"))["add"]
        for bypass in ("simple", "complex")
    }
    assert adds == {"simple": 4, "complex": 8}
    complex_weights = _weights(build_model("squeezenet?bypass=complex"))
    assert complex_weights["fire2_bypass_w"] == (128, 64, 1, 1)
    assert "fire3_bypass_w" not in complex_weights


def test_inception_v4_width_scales_every_channel() -> None:
    narrow, wide = (
        _weights(build_model("inception_v4?width=1&batch=1")),
        _weights(build_model("inception_v4?batch=1")),
    )
    assert narrow.keys() == wide.keys()
    assert wide["stem_0_w"] == (128, 3, 3, 3) and narrow["stem_0_w"] == (32, 3, 3, 3)
    assert wide["fc_w"] == (4 * 1536, 1000)


def test_nasnet_grows_by_three_normal_cells_per_repeat() -> None:
    """Past R = 1 each cell's inputs are full cells, so every added repeat adds the same
    three normal cells (at F, 2F and 4F filters)."""
    filters = 8
    sizes = [
        model_stats(
            build_model(f"nasnet?repeat={r}&filters={filters}&stem_filters=8&batch=1&image=32")
        )
        for r in (2, 3, 4)
    ]
    op_steps = {b.ops - a.ops for a, b in itertools.pairwise(sizes)}
    # per normal cell: 2 x (relu, 1x1, bn) input squeezes, 5 separable stacks of
    # 2 x (relu, depthwise, pointwise, bn), 3 average pools, 5 adds, 1 concat
    assert op_steps == {3 * (6 + 40 + 3 + 5 + 1)}
    # a normal cell at f filters: two 6f -> f squeezes (6f^2 + 4f each), two 5x5 and
    # three 3x3 separable stacks of two layers (k^2 f + f^2 + 4f each)
    per_filters = [22 * f * f + 202 * f for f in (filters, 2 * filters, 4 * filters)]
    assert {b.params - a.params for a, b in itertools.pairwise(sizes)} == {sum(per_filters)}


def test_nasnet_factorized_reduction_samples_even_and_shifted_pixels() -> None:
    """The reduction's second path must see the pixels at odd rows and columns (and
    zeros past the edge), so that together the two halves drop no pixel."""
    net = ConvNet(batchnorm=True)
    x = net.g.input("x", (1, 2, 5, 5))
    module = net.build(_Cells(net)._factorized_reduction(x, 2, "f"))
    image = np.random.default_rng(0).standard_normal((1, 2, 5, 5)).astype(np.float32)
    pick_first_channel = np.array([[[[1.0]], [[0.0]]]], np.float32)
    values = {
        "x": image,
        "f_even_w": pick_first_channel,
        "f_odd_w": pick_first_channel,
        "f_gamma": np.ones(2, np.float32),
        "f_beta": np.zeros(2, np.float32),
        "f_mean": np.zeros(2, np.float32),
        "f_var": np.ones(2, np.float32),
    }
    names = [a.name for a in arg_infos(entry_function(module))]
    (output,) = interpreter.run_reference(module, [values[name] for name in names])
    relu = np.maximum(image[0, 0], 0) / np.sqrt(1 + 1e-5)
    odd = np.zeros((3, 3), np.float32)
    odd[:2, :2] = relu[1::2, 1::2]
    np.testing.assert_allclose(output[0, 0], relu[::2, ::2], rtol=1e-5)
    np.testing.assert_allclose(output[0, 1], odd, rtol=1e-5)


# ------------------------------------------------------------------------ errors


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (
            "wresnet?depth=42",
            r"zoo:wresnet: option 'depth' must be one of 50, 101, 152, 200, got 42",
        ),
        ("resnet50?width=0", r"option 'width' must be greater than 0, got 0.0"),
        ("inception_v4?width=-2", r"option 'width' must be greater than 0, got -2.0"),
        ("resnext50?groups=0", r"option 'groups' must be positive, got 0"),
        ("squeezenet?version=1.2", r"option 'version' must be one of 1.0, 1.1, got 1.2"),
        ("squeezenet?bypass=yes", r"option 'bypass' must be one of none, simple, complex, got yes"),
        ("nasnet?filters=3", r"option 'filters' must be at least 4, got 3"),
        ("nasnet_a?cells=0", r"option 'cells' must be positive, got 0"),
        ("vgg16?image=31", r"zoo:vgg16: option 'image' \(31\) is too small for this model: "),
        ("vgg19?image=31", r"zoo:vgg19: option 'image' \(31\) is too small for this model: "),
        ("alexnet?image=62", r"option 'image' \(62\) is too small"),
        ("squeezenet?image=16", r"option 'image' \(16\) is too small"),
        ("inception_v3?image=74", r"option 'image' \(74\) is too small"),
        ("inception_v4?image=74&batch=1", r"option 'image' \(74\) is too small"),
        ("nasnet?image=2", r"option 'image' \(2\) is too small"),
        ("resnet101?batch=0", r"option 'batch' must be positive"),
    ],
)
def test_option_errors_are_one_line(spec: str, message: str) -> None:
    with pytest.raises(ZooError, match=message) as info:
        build_model(spec)
    assert "\n" not in str(info.value)


def test_smallest_images_build() -> None:
    for spec in (
        "vgg16?image=32",
        "vgg19?image=32",
        "alexnet?image=63&batch=1",
        "squeezenet?image=17",
        "inception_v3?image=75",
        "nasnet?image=3&repeat=1&batch=1",
    ):
        build_model(f"{spec}&width=0.125" if "nasnet" not in spec else spec).verify()
