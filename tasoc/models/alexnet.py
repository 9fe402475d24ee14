"""`zoo:alexnet`: AlexNet as FlexFlow trains it.

Krizhevsky et al., "ImageNet Classification with Deep Convolutional Neural Networks"
(NeurIPS 2012), in its one-tower form with 64/192/384/256/256 channels (Krizhevsky,
"One weird trick for parallelizing convolutional neural networks", 2014), which is
the network FlexFlow's `examples/cpp/AlexNet` builds: an 11x11/4 convolution padded
by 2, a 5x5 and three 3x3 convolutions (relu fused, padding keeping the size), a
3x3/2 max pool after the first, second and fifth, then two relu layers of 4096 units
and a linear layer to the classes. No batchnorm, no local response normalization
(neither FlexFlow nor the one-tower form has it).

The defaults are FlexFlow's training shapes: a per-GPU batch of 256 (FlexFlow uses 64
for its other CNNs and 256 for AlexNet) and ImageNet's 224x224 (FlexFlow's script
reads 229x229; both leave a 6x6 map for the classifier). FlexFlow's script ends in
10 classes for CIFAR-10 data; the paper's 1000 are the default here.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.models.layers import ConvNet, fitting, require_scale
from tasoc.models.registry import register, require_positive

FIRST_PADDING = (2, 2, 2, 2)
"""The 11x11/4 convolution is padded by 2 on every side, as in FlexFlow and torchvision."""

CONVS: tuple[tuple[int, int], ...] = ((192, 5), (384, 3), (256, 3), (256, 3))
"""(channels, kernel) of the convolutions after the first."""

FIRST_CHANNELS = 64
HIDDEN = 4096


@register(
    loss="softmax-cross-entropy",
    source="Krizhevsky et al., ImageNet Classification with Deep CNNs (NeurIPS 2012), "
    "one-tower form; FlexFlow's training benchmark (per-GPU batch 256), forward graph",
    small={"batch": 1, "image": 63, "width": 0.125},
)
def alexnet(
    *, batch: int = 256, image: int = 224, width: float = 1.0, classes: int = 1000
) -> ModuleOp:
    """AlexNet: 5 convolutions and 3 dense layers, images -> [batch, classes] logits."""
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)
    net = ConvNet(batchnorm=False, width=width)
    x = net.image(batch, image)
    with fitting("image", image):
        x = net.conv(
            x, net.channels(FIRST_CHANNELS), 11, name="conv1", strides=4, padding=FIRST_PADDING
        )
        x = net.pool(x, "max", 3, strides=2, padding="valid")
        for index, (channels, kernel) in enumerate(CONVS, start=2):
            x = net.conv(x, net.channels(channels), kernel, name=f"conv{index}")
            if index in (2, len(CONVS) + 1):
                x = net.pool(x, "max", 3, strides=2, padding="valid")
    return net.build(net.mlp_classifier(x, net.channels(HIDDEN), classes))
