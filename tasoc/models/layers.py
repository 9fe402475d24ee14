"""Building blocks shared by the convolutional zoo models.

The CNNs of the zoo differ in how they wire their layers, not in what a layer is, so
the layers live here once:

- `ConvNet` wraps a `GraphBuilder` with the conventions every CNN model follows:
  weights are named after the layer that owns them (and a name used twice is a bug,
  caught here), channel counts are scaled by the model's `width` option, and one
  switch decides whether a convolution is followed by an inference batchnorm
  (`conv -> batchnorm -> relu`, the published networks) or carries its relu fused
  (`conv2d{activation=relu}`, the batchnorm-folded form of TASO's inference graphs).
- `Conv`, `Pool` and `Concat` describe the branchy modules of Inception and
  SqueezeNet as data; `apply` emits them. A branch that ends in a `Concat` hands
  its pieces to the enclosing concat, so Inception-v3's module E is one
  six-way concat as in TASO's graph, not a concat of concats.
- `bottleneck` is the residual block of ResNet, ResNeXt and Wide ResNet.
- `fitting` turns a window that does not fit into the input (an image too small
  for a model's valid-padded convolutions and pools) into the one-line `ZooError`
  the driver prints, naming the option the user can change.

No layer has a bias: a bias is an add of a broadcast weight that a following
batchnorm makes redundant, and TASO's graphs have none. Parameter counts of these
models are therefore the published counts minus the biases (and plus the running
means and variances of the batchnorms, which are weights of the graph).
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder, Padding, shape_of
from tasoc.ir.shapes import ShapeError, SizeLimitError
from tasoc.models.registry import ZooError

Kernel = int | tuple[int, int]

IMAGE_CHANNELS = 3
"""RGB: every image model reads [batch, 3, image, image]."""


def scaled(channels: int, width: float) -> int:
    """`channels` times `width`, rounded half up, and never below one channel."""
    return max(1, int(channels * width + 0.5))


def require_scale(**scales: float) -> None:
    """Raise ZooError naming the first of `scales` (option=value) that is not above zero.

    `registry.require_positive` asks for at least 1, which is right for counts but
    would reject the width 0.125 of a small variant.
    """
    for option, value in scales.items():
        if not value > 0:
            raise ZooError(f"option '{option}' must be greater than 0, got {value}")


def require_choice(option: str, value: object, choices: Sequence[object]) -> None:
    """Raise ZooError unless `value` is one of `choices`, listing them."""
    if value not in choices:
        listed = ", ".join(str(choice) for choice in choices)
        raise ZooError(f"option '{option}' must be one of {listed}, got {value}")


@contextmanager
def fitting(option: str, value: int) -> Iterator[None]:
    """Report a shape error raised inside as `option` being too small.

    Valid-padded convolutions and pools shrink the image by a fixed amount, so each
    model has a smallest image it accepts. Rather than keep that number by hand per
    model (and per version of a model), the builder tries and this translates the
    failing window into the option the user controls.
    """
    try:
        yield
    except SizeLimitError:
        raise  # too large, not too small: `ZooModel.build` says which limit
    except ShapeError as err:
        raise ZooError(f"option '{option}' ({value}) is too small for this model: {err}") from None


def _pair(kernel: Kernel) -> tuple[int, int]:
    return (kernel, kernel) if isinstance(kernel, int) else kernel


class ConvNet:
    """A `GraphBuilder` plus the naming, width and batchnorm conventions of the CNNs."""

    def __init__(self, *, batchnorm: bool, width: float = 1.0) -> None:
        self.g = GraphBuilder()
        self.batchnorm = batchnorm
        self.width = width
        self._names: set[str] = set()

    def channels(self, paper: int) -> int:
        """The channel count of a layer the paper gives `paper` channels, at this width."""
        return scaled(paper, self.width)

    def image(self, batch: int, size: int) -> SSAValue:
        """The model's input: a batch of square RGB images, NCHW."""
        return self.g.input("image", (batch, IMAGE_CHANNELS, size, size))

    def weight(self, name: str, shape: Sequence[int]) -> SSAValue:
        """A weight argument; a name given twice means two layers share a name (a bug)."""
        if name in self._names:
            raise ValueError(f"weight '{name}' is defined twice")
        self._names.add(name)
        return self.g.param(name, shape)

    # ------------------------------------------------------------------ layers
    def conv(
        self,
        x: SSAValue,
        out: int,
        kernel: Kernel,
        *,
        name: str,
        strides: int = 1,
        padding: Padding = "same",
        groups: int = 1,
        relu: bool = True,
        norm: bool = True,
    ) -> SSAValue:
        """Convolution to `out` channels with weight `{name}_w` [out, in/groups, kh, kw].

        With batchnorm on and `norm` set it is followed by `batchnorm` (weights
        `{name}_gamma`, `_beta`, `_mean`, `_var`) and then `relu`; otherwise the relu
        is fused into the convolution. `norm=False` marks convolutions the paper
        does not normalize on their own (a depthwise step, a half of a concat).
        """
        kh, kw = _pair(kernel)
        w = self.weight(f"{name}_w", (out, shape_of(x)[1] // groups, kh, kw))
        stride_pair = (strides, strides)
        if not (self.batchnorm and norm):
            activation = "relu" if relu else "none"
            return self.g.conv2d(x, w, stride_pair, padding, activation, groups)
        y = self.norm(self.g.conv2d(x, w, stride_pair, padding, "none", groups), name)
        return self.g.relu(y) if relu else y

    def norm(self, x: SSAValue, name: str) -> SSAValue:
        """Inference batchnorm over the channels of `x`, weights named `{name}_...`."""
        channels = shape_of(x)[1]
        gamma, beta, mean, var = (
            self.weight(f"{name}_{part}", (channels,)) for part in ("gamma", "beta", "mean", "var")
        )
        return self.g.batchnorm(x, gamma, beta, mean, var)

    def separable(
        self,
        x: SSAValue,
        out: int,
        kernel: Kernel,
        *,
        name: str,
        strides: int = 1,
        relu: bool = False,
    ) -> SSAValue:
        """Depthwise-separable convolution: a depthwise `kernel` convolution (one filter
        per input channel, `{name}_dw`) then a 1x1 convolution to `out` (`{name}_pw`).

        Only the pointwise step is normalized, as in NASNet and MobileNet.
        """
        depth = shape_of(x)[1]
        spread = self.conv(
            x,
            depth,
            kernel,
            name=f"{name}_dw",
            strides=strides,
            groups=depth,
            relu=False,
            norm=False,
        )
        return self.conv(spread, out, 1, name=f"{name}_pw", relu=relu)

    def pool(
        self,
        x: SSAValue,
        kind: str,
        kernel: int,
        *,
        strides: int = 1,
        padding: Padding = "same",
    ) -> SSAValue:
        """Square max or average pooling (average counts padded zeros)."""
        return self.g.pool2d(x, kind, (kernel, kernel), (strides, strides), padding)

    def dense(self, x: SSAValue, out: int, *, name: str, relu: bool) -> SSAValue:
        """`x @ {name}_w` for `x` of shape [batch, features], optionally through relu."""
        y = self.g.matmul(x, self.weight(f"{name}_w", (shape_of(x)[-1], out)))
        return self.g.relu(y) if relu else y

    def global_pool(self, x: SSAValue) -> SSAValue:
        """Global average pooling: the mean over H and W, [N, C, H, W] -> [N, C]."""
        return self.g.reduce(x, "mean", (2, 3))

    def classifier(self, x: SSAValue, classes: int) -> SSAValue:
        """The head of the modern CNNs: global average pooling, then one linear layer."""
        return self.dense(self.global_pool(x), classes, name="fc", relu=False)

    def mlp_classifier(self, x: SSAValue, hidden: int, classes: int) -> SSAValue:
        """The head of AlexNet and VGG: flatten the feature map, two relu layers of
        `hidden` units, one linear layer to `classes` (dropout is training-only)."""
        batch, *features = shape_of(x)
        flat = self.g.reshape(x, (batch, math.prod(features)))
        for index in (1, 2):
            flat = self.dense(flat, hidden, name=f"fc{index}", relu=True)
        return self.dense(flat, classes, name="fc3", relu=False)

    def build(self, *outputs: SSAValue) -> ModuleOp:
        return self.g.build(*outputs)


# ------------------------------------------------------------ modules as data


@dataclass(frozen=True, slots=True)
class Conv:
    """A convolution step; `out` is the paper's channel count, scaled by the net's width."""

    out: int
    kernel: Kernel = 1
    strides: int = 1
    padding: str = "same"


@dataclass(frozen=True, slots=True)
class Pool:
    """A pooling step."""

    kind: str
    kernel: int = 3
    strides: int = 1
    padding: str = "same"


@dataclass(frozen=True, slots=True)
class Concat:
    """Parallel branches from one input, concatenated over channels."""

    branches: tuple[tuple[Step, ...], ...]


Step = Conv | Pool | Concat


def apply(net: ConvNet, x: SSAValue, steps: Sequence[Step], name: str) -> SSAValue:
    """Emit `steps` in order from `x`; weights are named `{name}_...` by position."""
    pieces = _pieces(net, x, steps, name)
    return pieces[0] if len(pieces) == 1 else net.g.concat(pieces, axis=1)


def _pieces(net: ConvNet, x: SSAValue, steps: Sequence[Step], name: str) -> list[SSAValue]:
    """Like `apply`, but a final `Concat` returns its pieces for the caller to join."""
    for index, step in enumerate(steps):
        label = f"{name}_{index}"
        match step:
            case Conv(out, kernel, strides, padding):
                x = net.conv(
                    x, net.channels(out), kernel, name=label, strides=strides, padding=padding
                )
            case Pool(kind, kernel, strides, padding):
                x = net.pool(x, kind, kernel, strides=strides, padding=padding)
            case Concat(branches):
                pieces = [
                    piece
                    for number, branch in enumerate(branches)
                    for piece in _pieces(net, x, branch, f"{label}b{number}")
                ]
                if index == len(steps) - 1:
                    return pieces
                x = net.g.concat(pieces, axis=1)
    return [x]


# ------------------------------------------------------------------ residual


def bottleneck(
    net: ConvNet,
    x: SSAValue,
    *,
    inner: int,
    out: int,
    strides: int,
    groups: int,
    name: str,
) -> SSAValue:
    """The ResNet bottleneck: 1x1 to `inner`, 3x3 (`groups`, `strides`), 1x1 to `out`,
    plus the shortcut, then relu.

    The stride sits on the 3x3 convolution (as in TASO's graphs and torchvision's
    "ResNet v1.5"). The shortcut is the identity when the shape is kept, otherwise a
    strided 1x1 projection without relu (TASO's script fuses a relu into it, which
    the paper does not have).
    """
    t = net.conv(x, inner, 1, name=f"{name}_a")
    t = net.conv(t, inner, 3, name=f"{name}_b", strides=strides, groups=groups)
    t = net.conv(t, out, 1, name=f"{name}_c", relu=False)
    shortcut = x
    if strides != 1 or shape_of(x)[1] != out:
        shortcut = net.conv(x, out, 1, name=f"{name}_proj", strides=strides, relu=False)
    return net.g.relu(net.g.add(t, shortcut))
