"""`zoo:vgg16` and `zoo:vgg19`: the VGG networks, one builder over a table of stages.

Simonyan & Zisserman, "Very Deep Convolutional Networks for Large-Scale Image
Recognition" (ICLR 2015), configurations D (VGG-16) and E (VGG-19): five stages of 3x3
convolutions (D: 2, 2, 3, 3, 3 of them; E: 2, 2, 4, 4, 4; 64 to 512 channels, relu
fused), each stage closed by a 2x2/2 max pool, then two relu layers of 4096 units and
a linear layer to the classes. The networks have no batchnorm. Input batch 1, 224x224
as TASO evaluates its CNNs (VGG-19); TensorOpt's Table 1 trains VGG-16 at batch 256,
which is `vgg16?batch=256`.

The two configurations differ only in how many convolutions each stage has, so both
models are `_vgg` called with their stage table: a fix to one cannot miss the other.

`width` scales every channel count and the 4096 hidden units. The classifier
flattens whatever feature map is left (7x7 at 224x224; 1x1 at 32x32, the smallest
image the five pools accept).
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.models.layers import ConvNet, fitting, require_scale
from tasoc.models.registry import register, require_positive

Stages = tuple[tuple[int, int], ...]
"""(channels, 3x3 convolutions) of each stage, input side first."""

STAGES_D: Stages = ((64, 2), (128, 2), (256, 3), (512, 3), (512, 3))
"""Configuration D: VGG-16's 13 convolutions."""

STAGES_E: Stages = ((64, 2), (128, 2), (256, 4), (512, 4), (512, 4))
"""Configuration E: VGG-19's 16 convolutions."""

HIDDEN = 4096
"""Units of each of the two hidden classifier layers."""

SMALL = {"image": 32, "width": 0.125}
"""Both small variants: the smallest image the five pools accept, an eighth of the
channels."""


def _vgg(stages: Stages, *, batch: int, image: int, width: float, classes: int) -> ModuleOp:
    """A VGG network with the convolution stages `stages`, then the 3-layer classifier."""
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)
    net = ConvNet(batchnorm=False, width=width)
    x = net.image(batch, image)
    with fitting("image", image):
        for stage, (channels, convs) in enumerate(stages, start=1):
            for index in range(1, convs + 1):
                x = net.conv(x, net.channels(channels), 3, name=f"conv{stage}_{index}")
            x = net.pool(x, "max", 2, strides=2, padding="valid")
    return net.build(net.mlp_classifier(x, net.channels(HIDDEN), classes))


@register(
    loss="softmax-cross-entropy",
    source="Simonyan & Zisserman, Very Deep Convolutional Networks (ICLR 2015), "
    "configuration D; batch 1, 224x224 like vgg19 (TensorOpt evaluates VGG16 at "
    "batch 256: vgg16?batch=256)",
    small=SMALL,
)
def vgg16(*, batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000) -> ModuleOp:
    """VGG-16: 13 3x3 convolutions and 3 dense layers, images -> [batch, classes] logits."""
    return _vgg(STAGES_D, batch=batch, image=image, width=width, classes=classes)


@register(
    loss="softmax-cross-entropy",
    source="Simonyan & Zisserman, Very Deep Convolutional Networks (ICLR 2015), "
    "configuration E; batch 1, 224x224 as in TASO's evaluation",
    small=SMALL,
)
def vgg19(*, batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000) -> ModuleOp:
    """VGG-19: 16 3x3 convolutions and 3 dense layers, images -> [batch, classes] logits."""
    return _vgg(STAGES_E, batch=batch, image=image, width=width, classes=classes)
