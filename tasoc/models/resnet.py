"""Residual networks: `zoo:resnet50`, `zoo:resnet101`, `zoo:resnext50`, `zoo:wresnet`.

All four are the bottleneck ResNet of He et al. ("Deep Residual Learning for Image
Recognition", CVPR 2016) and differ only in the widths and groups of the bottleneck:

| model | inner width of stage s (s = 0..3) | groups | outer width |
| --- | --- | --- | --- |
| ResNet | 64 * 2^s | 1 | 256 * 2^s |
| ResNeXt (Xie et al., CVPR 2017), 32x4d | 32 * 4 * 2^s | 32 | 256 * 2^s |
| Wide ResNet (Zagoruyko & Komodakis, BMVC 2016), widen k | 64 * k * 2^s | 1 | 256 * 2^s |

The network: a 7x7/2 convolution to 64 channels, a 3x3/2 max pool, four stages of
bottleneck blocks (the first block of stages 1-3 strides by 2), global average
pooling and a linear classifier. Every convolution is followed by an inference
batchnorm (`batchnorm=false` folds it away: the convolutions then carry their relu
fused, which is the graph TASO's `examples/resnet50.py` and `resnext50.py` build).
`width` scales every channel count, for small variants.

Wide ResNet widens only the inner (3x3) width of the bottleneck: that is how the
Wide ResNet paper defines its bottleneck networks (WRN-50-2 has 2048-1024-2048
channels in its last block), and it is the network SwapAdvisor cites for
WResNet-152-X. SwapAdvisor's own sentence ("the channel size of convolution
operators are multiplied by a wide scale") is less specific; `width` multiplies all
channels if that reading is wanted.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.models.layers import ConvNet, bottleneck, require_choice, require_scale, scaled
from tasoc.models.registry import register, require_positive

STAGE_BLOCKS: dict[int, tuple[int, int, int, int]] = {
    50: (3, 4, 6, 3),
    101: (3, 4, 23, 3),
    152: (3, 8, 36, 3),
    200: (3, 24, 36, 3),
}
"""Bottleneck blocks per stage of the ResNet depths of He et al. (200 from their
"Identity Mappings" follow-up): depth = 3 * blocks + 2."""

STEM = 64
"""Channels of the stem convolution and the inner width of ResNet's first stage."""

EXPANSION = 4
"""Outer width of a bottleneck relative to ResNet's inner width."""


def _resnet(
    *,
    depth: int,
    inner: tuple[int, ...],
    groups: int,
    batch: int,
    image: int,
    width: float,
    classes: int,
    batchnorm: bool,
) -> ModuleOp:
    """Stem, four stages of bottlenecks with `inner` widths, global pool, classifier."""
    net = ConvNet(batchnorm=batchnorm, width=width)
    x = net.image(batch, image)
    x = net.conv(x, net.channels(STEM), 7, name="stem", strides=2)
    x = net.pool(x, "max", 3, strides=2)
    for stage, blocks in enumerate(STAGE_BLOCKS[depth]):
        out = net.channels(STEM * EXPANSION << stage)
        for block in range(blocks):
            x = bottleneck(
                net,
                x,
                inner=inner[stage],
                out=out,
                strides=2 if stage and not block else 1,
                groups=groups,
                name=f"s{stage + 1}b{block + 1}",
            )
    return net.build(net.classifier(x, classes))


def _check(*, batch: int, image: int, classes: int, width: float) -> None:
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)


def _resnet_inner(width: float) -> tuple[int, ...]:
    return tuple(scaled(STEM << stage, width) for stage in range(4))


_SMALL = {"image": 32, "width": 0.125}


@register(
    loss="softmax-cross-entropy",
    source="He et al., Deep Residual Learning (CVPR 2016); TASO's inference benchmark "
    "(examples/resnet50.py), batch 1, 224x224",
    small=_SMALL,
)
def resnet50(
    *,
    batch: int = 1,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """ResNet-50: 16 bottleneck blocks, [batch, 3, image, image] -> [batch, classes] logits."""
    _check(batch=batch, image=image, classes=classes, width=width)
    return _resnet(
        depth=50,
        inner=_resnet_inner(width),
        groups=1,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )


@register(
    loss="softmax-cross-entropy",
    source="He et al., Deep Residual Learning (CVPR 2016); FlexFlow's training benchmark "
    "(per-GPU batch 64, 224x224), forward graph",
    small={**_SMALL, "batch": 1},
)
def resnet101(
    *,
    batch: int = 64,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """ResNet-101: 33 bottleneck blocks, [batch, 3, image, image] -> [batch, classes] logits."""
    _check(batch=batch, image=image, classes=classes, width=width)
    return _resnet(
        depth=101,
        inner=_resnet_inner(width),
        groups=1,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )


@register(
    loss="softmax-cross-entropy",
    source="Xie et al., Aggregated Residual Transformations (CVPR 2017), 32x4d; TASO's "
    "inference benchmark (examples/resnext50.py), batch 1, 224x224",
    small={**_SMALL, "groups": 4, "group_width": 8},
)
def resnext50(
    *,
    batch: int = 1,
    image: int = 224,
    groups: int = 32,
    group_width: int = 4,
    width: float = 1.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """ResNeXt-50 (32x4d): ResNet-50 with grouped 3x3 convolutions of `groups` groups."""
    _check(batch=batch, image=image, classes=classes, width=width)
    require_positive(groups=groups, group_width=group_width)
    inner = tuple(groups * scaled(group_width << stage, width) for stage in range(4))
    return _resnet(
        depth=50,
        inner=inner,
        groups=groups,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )


@register(
    loss="softmax-cross-entropy",
    source="Zagoruyko & Komodakis, Wide Residual Networks (BMVC 2016); SwapAdvisor's "
    "WResNet-152-10, batch 64, 224x224",
    small={"depth": 50, "widen": 2, **_SMALL, "batch": 1},
)
def wresnet(
    *,
    depth: int = 152,
    widen: int = 10,
    batch: int = 64,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """Wide ResNet-`depth`-`widen`: bottleneck inner widths multiplied by `widen`."""
    _check(batch=batch, image=image, classes=classes, width=width)
    require_positive(widen=widen)
    require_choice("depth", depth, tuple(STAGE_BLOCKS))
    inner = tuple(scaled((STEM * widen) << stage, width) for stage in range(4))
    return _resnet(
        depth=depth,
        inner=inner,
        groups=1,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )
