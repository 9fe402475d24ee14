"""Inception networks: `zoo:inception_v3` and `zoo:inception_v4`.

Both are written as data (`layers.Conv`, `Pool`, `Concat`): a stem of convolutions,
then inception modules, each a concat of parallel branches, then global average
pooling and a linear classifier. Every convolution is followed by an inference
batchnorm and relu (`batchnorm=false` fuses the relu instead: TASO's
`examples/inceptionv3.py` graph). Padding is `valid` where the paper marks a layer
"V" and `same` elsewhere; the 3x3 average pools of the modules keep the size and
count padded zeros (as torchvision's Inception-v3 does; TensorFlow's do not, which
changes values at the border, not shapes or costs). Neither network has its
auxiliary classifier: it only exists in training and no benchmark here uses it.
Channel counts are the papers' times `width`.

Inception-v3 (Szegedy et al., "Rethinking the Inception Architecture for Computer
Vision", CVPR 2016) as TASO and FlexFlow evaluate it: 299x299 input, modules A (x3),
B, C (x4), D, E (x2). The layout follows TASO's example module for module.

Inception-v4 (Szegedy et al., "Inception-v4, Inception-ResNet and the Impact of
Residual Connections on Learning", AAAI 2017): the stem of its Figure 3, 4 x
Inception-A, Reduction-A (k, l, m, n = 192, 224, 256, 384), 7 x Inception-B,
Reduction-B, 3 x Inception-C. SwapAdvisor trains it widened ("Inception-X": every
channel count times the wide scale X); its Table 5.1 reports Inception-4 at batch 64,
which is the default here.
"""

from __future__ import annotations

from collections.abc import Sequence

from xdsl.dialects.builtin import ModuleOp

from tasoc.models.layers import Concat, Conv, ConvNet, Pool, Step, apply, fitting, require_scale
from tasoc.models.registry import register, require_positive

MAX_DOWN = Pool("max", 3, 2, "valid")
AVG_SAME = Pool("avg", 3)


def _down(out: int) -> Conv:
    """The 3x3/2 valid convolution that halves the map in stems and reductions."""
    return Conv(out, 3, 2, "valid")


def _fork(out: int, kernels: tuple[tuple[int, int], tuple[int, int]]) -> Concat:
    """Two parallel convolutions of `out` channels from one input (1x3 and 3x1)."""
    return Concat(tuple((Conv(out, kernel),) for kernel in kernels))


ROW, COLUMN = (1, 3), (3, 1)
ROW7, COLUMN7 = (1, 7), (7, 1)

Module = Sequence[Step]

# ---------------------------------------------------------------- Inception-v3

V3_STEM: Module = (
    _down(32),
    Conv(32, 3, padding="valid"),
    Conv(64, 3),
    MAX_DOWN,
    Conv(80),
    Conv(192, 3, padding="valid"),
    MAX_DOWN,
)


def _v3_a(pool_features: int) -> Module:
    return (
        Concat(
            (
                (Conv(64),),
                (Conv(48), Conv(64, 5)),
                (Conv(64), Conv(96, 3), Conv(96, 3)),
                (AVG_SAME, Conv(pool_features)),
            )
        ),
    )


V3_B: Module = (
    Concat(((_down(384),), (Conv(64), Conv(96, 3), _down(96)), (MAX_DOWN,))),
)  # fmt: skip


def _v3_c(c7: int) -> Module:
    return (
        Concat(
            (
                (Conv(192),),
                (Conv(c7), Conv(c7, ROW7), Conv(192, COLUMN7)),
                (Conv(c7), Conv(c7, COLUMN7), Conv(c7, ROW7), Conv(c7, COLUMN7), Conv(192, ROW7)),
                (AVG_SAME, Conv(192)),
            )
        ),
    )


V3_D: Module = (
    Concat(
        (
            (Conv(192), _down(320)),
            (Conv(192), Conv(192, ROW7), Conv(192, COLUMN7), _down(192)),
            (MAX_DOWN,),
        )
    ),
)

V3_E: Module = (
    Concat(
        (
            (Conv(320),),
            (Conv(384), _fork(384, (ROW, COLUMN))),
            (Conv(448), Conv(384, 3), _fork(384, (ROW, COLUMN))),
            (AVG_SAME, Conv(192)),
        )
    ),
)

V3_MODULES: tuple[tuple[str, Module], ...] = (
    ("mixed5b", _v3_a(32)),
    ("mixed5c", _v3_a(64)),
    ("mixed5d", _v3_a(64)),
    ("mixed6a", V3_B),
    ("mixed6b", _v3_c(128)),
    ("mixed6c", _v3_c(160)),
    ("mixed6d", _v3_c(160)),
    ("mixed6e", _v3_c(192)),
    ("mixed7a", V3_D),
    ("mixed7b", V3_E),
    ("mixed7c", V3_E),
)
"""The modules after the stem, named as in the reference implementations."""

# ---------------------------------------------------------------- Inception-v4

V4_STEM: Module = (
    _down(32),
    Conv(32, 3, padding="valid"),
    Conv(64, 3),
    Concat(((MAX_DOWN,), (_down(96),))),
    Concat(
        (
            (Conv(64), Conv(96, 3, padding="valid")),
            (Conv(64), Conv(64, COLUMN7), Conv(64, ROW7), Conv(96, 3, padding="valid")),
        )
    ),
    Concat(((_down(192),), (MAX_DOWN,))),
)

V4_A: Module = (
    Concat(
        (
            (AVG_SAME, Conv(96)),
            (Conv(96),),
            (Conv(64), Conv(96, 3)),
            (Conv(64), Conv(96, 3), Conv(96, 3)),
        )
    ),
)

V4_REDUCTION_A: Module = (
    Concat(((MAX_DOWN,), (_down(384),), (Conv(192), Conv(224, 3), _down(256)))),
)  # fmt: skip

V4_B: Module = (
    Concat(
        (
            (AVG_SAME, Conv(128)),
            (Conv(384),),
            (Conv(192), Conv(224, ROW7), Conv(256, COLUMN7)),
            (Conv(192), Conv(192, ROW7), Conv(224, COLUMN7), Conv(224, ROW7), Conv(256, COLUMN7)),
        )
    ),
)

V4_REDUCTION_B: Module = (
    Concat(
        (
            (MAX_DOWN,),
            (Conv(192), _down(192)),
            (Conv(256), Conv(256, ROW7), Conv(320, COLUMN7), _down(320)),
        )
    ),
)

V4_C: Module = (
    Concat(
        (
            (AVG_SAME, Conv(256)),
            (Conv(256),),
            (Conv(384), _fork(256, (ROW, COLUMN))),
            (Conv(384), Conv(448, ROW), Conv(512, COLUMN), _fork(256, (COLUMN, ROW))),
        )
    ),
)

V4_MODULES: tuple[tuple[str, Module], ...] = (
    *((f"a{i}", V4_A) for i in range(1, 5)),
    ("reduction_a", V4_REDUCTION_A),
    *((f"b{i}", V4_B) for i in range(1, 8)),
    ("reduction_b", V4_REDUCTION_B),
    *((f"c{i}", V4_C) for i in range(1, 4)),
)


def _inception(
    stem: Module,
    modules: Sequence[tuple[str, Module]],
    *,
    batch: int,
    image: int,
    width: float,
    classes: int,
    batchnorm: bool,
) -> ModuleOp:
    require_positive(batch=batch, image=image, classes=classes)
    require_scale(width=width)
    net = ConvNet(batchnorm=batchnorm, width=width)
    x = net.image(batch, image)
    with fitting("image", image):
        x = apply(net, x, stem, "stem")
        for name, module in modules:
            x = apply(net, x, module, name)
    return net.build(net.classifier(x, classes))


@register(
    loss="softmax-cross-entropy",
    source="Szegedy et al., Rethinking the Inception Architecture (CVPR 2016); TASO's "
    "examples/inceptionv3.py at batch 1, 299x299 (also in FlexFlow's training set)",
    small={"image": 75, "width": 0.125},
)
def inception_v3(
    *,
    batch: int = 1,
    image: int = 299,
    width: float = 1.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """Inception-v3 without the auxiliary head: images -> [batch, classes] logits."""
    return _inception(
        V3_STEM,
        V3_MODULES,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )


@register(
    loss="softmax-cross-entropy",
    source="Szegedy et al., Inception-v4 (AAAI 2017); SwapAdvisor's Inception-4 "
    "(wide scale 4, batch 64, 299x299)",
    small={"batch": 1, "image": 75, "width": 0.125},
)
def inception_v4(
    *,
    batch: int = 64,
    image: int = 299,
    width: float = 4.0,
    classes: int = 1000,
    batchnorm: bool = True,
) -> ModuleOp:
    """Inception-v4 widened by `width` (SwapAdvisor's wide scale): images -> logits."""
    return _inception(
        V4_STEM,
        V4_MODULES,
        batch=batch,
        image=image,
        width=width,
        classes=classes,
        batchnorm=batchnorm,
    )
