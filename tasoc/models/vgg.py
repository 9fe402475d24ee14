"""`zoo:vgg19`: VGG-19 at the shape of TASO's inference benchmarks.

Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (ICLR 2015), configuration E: five stages of 3x3 convolutions (2, 2, 4,
4, 4 of them, 64 to 512 channels, relu fused), each stage closed by a 2x2/2 max
pool, then two relu layers of 4096 units and a linear layer to the classes. The
network has no batchnorm. Input batch 1, 224x224 as TASO evaluates its CNNs.

`width` scales every channel count and the 4096 hidden units. The classifier
flattens whatever feature map is left (7x7 at 224x224; 1x1 at 32x32, the smallest
image the five pools accept).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.models.layers import ConvNet, fitting, require_scale
from tasoc.models.registry import register, require_positive

STAGES: tuple[tuple[int, int], ...] = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
"""(channels, 3x3 convolutions) of each stage of configuration E."""

HIDDEN = 4096
"""Units of each of the two hidden classifier layers."""


@register(
    loss="softmax-cross-entropy",
    source="Simonyan & Zisserman, Very Deep Convolutional Networks (ICLR 2015), "
    "configuration E; batch 1, 224x224 as in TASO's evaluation",
    small={"image": 32, "width": 0.125},
)
def vgg19(*, batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000) -> ModuleOp:
    """VGG-19: 16 3x3 convolutions and 3 dense layers, images -> [batch, classes] logits."""
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)
    net = ConvNet(batchnorm=False, width=width)
    x = net.image(batch, image)
    with fitting("image", image):
        for stage, (channels, convs) in enumerate(STAGES, start=1):
            for index in range(1, convs + 1):
                x = net.conv(x, net.channels(channels), 3, name=f"conv{stage}_{index}")
            x = net.pool(x, "max", 2, strides=2, padding="valid")
    return net.build(net.mlp_classifier(x, net.channels(HIDDEN), classes))
