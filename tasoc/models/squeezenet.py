"""`zoo:squeezenet`: SqueezeNet 1.1 (default) or 1.0, optionally with bypasses.

Iandola et al., "SqueezeNet: AlexNet-level accuracy with 50x fewer parameters and
<0.5MB model size" (2016). A fire module squeezes its input with a 1x1 convolution
and expands it with parallel 1x1 and 3x3 convolutions whose outputs are concatenated
(every convolution relu-fused; the network has no batchnorm). The classifier is a
1x1 convolution to the classes with relu, then global average pooling.

Version 1.1 is the default because TASO optimizes `squeezenet1.1.onnx` (the model of
the ONNX model zoo, loaded in its `examples/test_onnx.py`): a 3x3/2 stem of 64
channels and the max pools after fire modules 3 and 5, which needs 2.4x less
computation than 1.0 for the same accuracy. Version 1.0 has the paper's 7x7/2 stem of
96 channels and pools after fire modules 4 and 8. The stem is unpadded and the 3x3/2
max pools round up (an extra bottom/right row where needed), as in the reference
implementations: 224x224 gives a 13x13 map at the classifier in both versions.

`bypass` adds the paper's residual connections around fire modules: `simple` around
the modules whose input and output widths agree (3, 5, 7, 9), `complex` around all
of them, through a 1x1 convolution where the widths differ. MetaFlow's SqueezeNet
benchmark is version 1.0 with complex bypass.
"""

from __future__ import annotations

from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import shape_of
from tasoc.models.layers import Concat, Conv, ConvNet, apply, fitting, require_choice, require_scale
from tasoc.models.registry import register, require_positive

Fire = tuple[int, int]
"""A fire module: (squeeze channels, channels of each of the two expand convolutions)."""

FIRES: tuple[Fire, ...] = (
    (16, 64), (16, 64), (32, 128), (32, 128), (48, 192), (48, 192), (64, 256), (64, 256)
)  # fmt: skip
"""Fire modules 2 to 9, the same in both versions."""


@dataclass(frozen=True, slots=True)
class Version:
    stem_channels: int
    stem_kernel: int
    pools_after: tuple[int, ...]
    """Fire modules (numbered 2-9 as in the paper) followed by a max pool."""


VERSIONS: dict[str, Version] = {
    "1.0": Version(stem_channels=96, stem_kernel=7, pools_after=(4, 8)),
    "1.1": Version(stem_channels=64, stem_kernel=3, pools_after=(3, 5)),
}

BYPASSES = ("none", "simple", "complex")


def _fire(net: ConvNet, x: SSAValue, fire: Fire, bypass: str, name: str) -> SSAValue:
    squeeze, expand = fire
    module = (Conv(squeeze), Concat(((Conv(expand),), (Conv(expand, 3),))))
    y = apply(net, x, module, name)
    if bypass == "none":
        return y
    if shape_of(x)[1] == shape_of(y)[1]:
        return net.g.add(y, x)
    if bypass == "complex":
        return net.g.add(y, net.conv(x, shape_of(y)[1], 1, name=f"{name}_bypass", relu=False))
    return y


def _max_pool_ceil(net: ConvNet, x: SSAValue) -> SSAValue:
    """3x3/2 max pool with the output size rounded up, as the reference models pool."""
    extra = (shape_of(x)[2] - 3) % 2
    return net.pool(x, "max", 3, strides=2, padding=(0, 0, extra, extra))


@register(
    loss="softmax-cross-entropy",
    source="Iandola et al., SqueezeNet (2016), version 1.1 as in TASO's ONNX example; "
    "batch 1, 224x224",
    small={"image": 32, "width": 0.25},
)
def squeezenet(
    *,
    batch: int = 1,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    version: str = "1.1",
    bypass: str = "none",
) -> ModuleOp:
    """SqueezeNet: 8 fire modules, images -> [batch, classes] (relu'd, pooled) scores."""
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)
    require_choice("version", version, tuple(VERSIONS))
    require_choice("bypass", bypass, BYPASSES)
    layout = VERSIONS[version]
    net = ConvNet(batchnorm=False, width=width)
    x = net.image(batch, image)
    with fitting("image", image):
        stem = net.channels(layout.stem_channels)
        x = net.conv(x, stem, layout.stem_kernel, name="conv1", strides=2, padding="valid")
        x = _max_pool_ceil(net, x)
        for number, fire in enumerate(FIRES, start=2):
            x = _fire(net, x, fire, bypass, f"fire{number}")
            if number in layout.pools_after:
                x = _max_pool_ceil(net, x)
    scores = net.conv(x, classes, 1, name="conv10")
    return net.build(net.global_pool(scores))
