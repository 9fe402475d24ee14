"""The classic image models as `torch.onnx.export` (opset 17, eval mode) writes them.

Each builder follows the torchvision module tree (or, for AlexNet and ZFNet, the
Caffe networks the ONNX model zoo carries: LRN and grouped convolutions), so node
and weight names, attributes and the order of nodes are those of a real export:
Conv with its bias; a BatchNormalization right after a Conv folded into it by the
exporter (weights `onnx::Conv_<n>`) unless `fold_batchnorm=False`, as an export in
training mode keeps it; MaxPool/AveragePool with every attribute spelled out;
`AdaptiveAvgPool2d` as GlobalAveragePool (or an AveragePool of kernel = stride when
the sizes divide, as the exporter does); `torch.flatten(x, 1)` as Flatten and
`x.view(x.size(0), -1)` as Shape -> Gather -> Unsqueeze -> Concat -> Reshape; Linear
as Gemm with transB=1; channel shuffle as Reshape/Transpose/Reshape with
shapes computed from `x.size()`.

Size parameters (`batch`, `image`, `width`, depths) make small versions for tests;
weights are seeded He-normal draws, so that activations keep their scale through
the network and outputs are neither NaN nor saturated.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

from tasoc.models.exported.writer import FLOAT, Writer

Pair = int | tuple[int, int]

RESIDUAL_GAIN = 0.5
"""Scale of the last layer of each residual branch (and of the weights that fold
into it), so that the sum of many blocks grows slowly, like a trained network's."""


def _pair(value: Pair) -> tuple[int, int]:
    return (value, value) if isinstance(value, int) else value


def scaled(channels: int, width: float, multiple: int = 1) -> int:
    """`channels * width` rounded to a positive multiple of `multiple` (groups)."""
    return max(multiple, round(channels * width / multiple) * multiple)


def _window_out(size: int, kernel: int, stride: int, low: int, high: int, ceil: bool) -> int:
    """A window's output size as PyTorch computes it (ceil mode drops a last window
    that would start in the padding)."""
    span = size + low + high - kernel
    out = (-(-span // stride) if ceil else span // stride) + 1
    if ceil and (out - 1) * stride >= size + low:
        out -= 1
    return out


class ImageWriter(Writer):
    """A `Writer` with the layers of image models, tracking each value's shape."""

    def __init__(self, seed: int) -> None:
        super().__init__(seed)
        self.shapes: dict[str, tuple[int, ...]] = {}

    def image(self, batch: int, image: int) -> str:
        name = self.input("input", FLOAT, [batch, 3, image, image])
        self.shapes[name] = (batch, 3, image, image)
        return name

    def channels(self, x: str) -> int:
        return self.shapes[x][1]

    def _same_shape(self, y: str, x: str) -> str:
        self.shapes[y] = self.shapes[x]
        return y

    # ------------------------------------------------------------ windows
    def conv(
        self,
        x: str,
        out: int,
        kernel: Pair,
        stride: int = 1,
        padding: Pair = 0,
        groups: int = 1,
        bias: bool = True,
        folded: bool = False,
        gain: float = 1.0,
    ) -> str:
        """Conv in the current scope: weights named after the module's parameters, or
        `onnx::Conv_<n>` when `folded` (a BatchNormalization folded in: always a bias).
        He-normal weights times `gain`."""
        n, cin, h, w = self.shapes[x]
        (kh, kw), (ph, pw) = _pair(kernel), _pair(padding)
        std = gain * math.sqrt(2.0 / (cin // groups * kh * kw))
        weight = self.normal((out, cin // groups, kh, kw), std)
        if folded:
            inputs = [x, self.folded("Conv", weight), self.folded("Conv", self.normal((out,), 0.1))]
        else:
            inputs = [x, self.param("weight", weight)]
            if bias:
                inputs.append(self.param("bias", self.normal((out,), 0.1)))
        y = self.op(
            "Conv",
            *inputs,
            dilations=[1, 1],
            group=groups,
            kernel_shape=[kh, kw],
            pads=[ph, pw, ph, pw],
            strides=[stride, stride],
        )
        self.shapes[y] = (
            n,
            out,
            _window_out(h, kh, stride, ph, ph, False),
            _window_out(w, kw, stride, pw, pw, False),
        )
        return y

    def batchnorm(self, x: str, epsilon: float = 1e-5, gain: float = 1.0) -> str:
        """BatchNormalization (inference) with trained-looking statistics."""
        c = self.channels(x)
        inputs = [
            self.param("weight", gain * self.uniform((c,), 0.8, 1.2)),
            self.param("bias", self.normal((c,), 0.1)),
            self.param("running_mean", self.normal((c,), 0.1)),
            self.param("running_var", self.uniform((c,), 0.5, 1.5)),
        ]
        y = self.op("BatchNormalization", x, *inputs, epsilon=epsilon, momentum=0.9)
        return self._same_shape(y, x)

    def conv_bn(
        self,
        x: str,
        scopes: tuple[str, ...],
        out: int,
        kernel: Pair,
        stride: int = 1,
        padding: Pair = 0,
        groups: int = 1,
        fold: bool = True,
        gain: float = 1.0,
        epsilon: float = 1e-5,
    ) -> str:
        """A bias-free Conv and the BatchNormalization after it, the modules at paths
        `scopes[:-1]` and `scopes[:-2] + scopes[-1:]` (`("conv1", "bn1")`, or
        `("branch2", "0", "1")` in a Sequential); folded into one Conv when `fold`."""
        *parent, conv_name, bn_name = scopes
        with self.scope(*parent):
            with self.scope(conv_name):
                if fold:
                    return self.conv(
                        x, out, kernel, stride, padding, groups, folded=True, gain=gain
                    )
                y = self.conv(x, out, kernel, stride, padding, groups, bias=False)
            with self.scope(bn_name):
                return self.batchnorm(y, epsilon, gain)

    def relu(self, x: str) -> str:
        return self._same_shape(self.op("Relu", x), x)

    def _pool(
        self, op_type: str, x: str, kernel: int, stride: int, padding: int, ceil: bool, **extra: int
    ) -> str:
        n, c, h, w = self.shapes[x]
        y = self.op(
            op_type,
            x,
            ceil_mode=int(ceil),
            kernel_shape=[kernel, kernel],
            pads=[padding] * 4,
            strides=[stride, stride],
            **extra,
        )
        size = [_window_out(d, kernel, stride, padding, padding, ceil) for d in (h, w)]
        self.shapes[y] = (n, c, *size)
        return y

    def max_pool(
        self, x: str, kernel: int, stride: int, padding: int = 0, ceil: bool = False
    ) -> str:
        return self._pool("MaxPool", x, kernel, stride, padding, ceil)

    def avg_pool(
        self, x: str, kernel: int, stride: int, padding: int = 0, ceil: bool = False
    ) -> str:
        """`nn.AvgPool2d`, whose padding counts in the average (count_include_pad)."""
        return self._pool("AveragePool", x, kernel, stride, padding, ceil, count_include_pad=1)

    def adaptive_avg_pool(self, x: str, size: int) -> str:
        """`AdaptiveAvgPool2d(size)` as the exporter writes it: GlobalAveragePool for 1,
        an AveragePool of kernel = stride when the input divides, else no export."""
        n, c, h, w = self.shapes[x]
        if size == 1:
            y = self.op("GlobalAveragePool", x)
            self.shapes[y] = (n, c, 1, 1)
            return y
        if h % size or w % size:
            raise ValueError(
                f"adaptive average pooling of {h}x{w} to {size}x{size} does not export: "
                "the sizes do not divide (pick another image size or pool size)"
            )
        if h != w:
            raise ValueError(f"adaptive pooling here takes square inputs, got {h}x{w}")
        return self._pool("AveragePool", x, h // size, h // size, 0, False, count_include_pad=1)

    def global_avg_pool(self, x: str) -> str:
        return self.adaptive_avg_pool(x, 1)

    def lrn(self, x: str, size: int = 5) -> str:
        """Local response normalization as in AlexNet (alpha 1e-4, beta 0.75, k 1)."""
        y = self.op("LRN", x, alpha=1e-4, beta=0.75, bias=1.0, size=size)
        return self._same_shape(y, x)

    # ------------------------------------------------------------ others
    def concat(self, xs: Sequence[str]) -> str:
        y = self.op("Concat", *xs, axis=1)
        n, _, h, w = self.shapes[xs[0]]
        self.shapes[y] = (n, sum(self.channels(x) for x in xs), h, w)
        return y

    def add(self, a: str, b: str) -> str:
        return self._same_shape(self.op("Add", a, b), a)

    def flatten(self, x: str) -> str:
        """`torch.flatten(x, 1)`."""
        y = self.op("Flatten", x, axis=1)
        self.shapes[y] = (self.shapes[x][0], math.prod(self.shapes[x][1:]))
        return y

    def view_flatten(self, x: str) -> str:
        """`x.view(x.size(0), -1)`: the batch read from the shape at run time."""
        batch = self.op("Gather", self.op("Shape", x), self.constant(0), axis=0)
        batch = self.op("Unsqueeze", batch, self.constant([0]))
        target = self.op("Concat", batch, self.constant([-1]), axis=0)
        y = self.op("Reshape", x, target, allowzero=0)
        self.shapes[y] = (self.shapes[x][0], math.prod(self.shapes[x][1:]))
        return y

    def dropout(self, x: str) -> str:
        """A Dropout node as exports that keep it write it (ratio given, not training:
        it passes its input through)."""
        return self._same_shape(self.op("Dropout", x, self.constant(0.5)), x)

    def linear(self, x: str, out: int, gain: float = 2.0) -> str:
        """`nn.Linear` on a matrix: Gemm with the weight as stored, (out, in), transB=1.
        Weights N(0, gain / in)."""
        n, fan_in = self.shapes[x]
        weight = self.param("weight", self.normal((out, fan_in), math.sqrt(gain / fan_in)))
        bias = self.param("bias", self.normal((out,), 0.1))
        y = self.op("Gemm", x, weight, bias, alpha=1.0, beta=1.0, transB=1)
        self.shapes[y] = (n, out)
        return y

    def finish(self, logits: str) -> onnx.ModelProto:
        """The model, `logits` its output named `output`."""
        self.output(logits, "output", FLOAT, list(self.shapes[logits]))
        return self.model()


# --------------------------------------------------------------------- AlexNet, ZFNet


def alexnet(
    batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000, seed: int = 0
) -> onnx.ModelProto:
    """Krizhevsky's AlexNet as the ONNX model zoo's bvlc_alexnet has it: LRN after the
    first two convolutions, convolutions 2, 4 and 5 in two groups, dropout in the
    classifier; torchvision's padding (224x224 in, 6x6 after the features)."""
    w = ImageWriter(seed)
    x = w.image(batch, image)
    layers = [  # (channels, kernel, stride, padding, groups, lrn, pool)
        (96, 11, 4, 2, 1, True, True),
        (256, 5, 1, 2, 2, True, True),
        (384, 3, 1, 1, 1, False, False),
        (384, 3, 1, 1, 2, False, False),
        (256, 3, 1, 1, 2, False, True),
    ]
    index = 0
    with w.scope("features"):
        for channels, kernel, stride, padding, groups, lrn, pool in layers:
            with w.scope(str(index)):
                x = w.conv(x, scaled(channels, width, 2), kernel, stride, padding, groups)
            with w.scope(str(index + 1)):
                x = w.relu(x)
            index += 2
            if lrn:
                with w.scope(str(index)):
                    x = w.lrn(x)
                index += 1
            if pool:
                with w.scope(str(index)):
                    x = w.max_pool(x, 3, 2)
                index += 1
    x = w.flatten(x)
    return w.finish(_classifier(w, x, scaled(4096, width), classes))


def _classifier(w: ImageWriter, x: str, hidden: int, classes: int) -> str:
    """AlexNet's and VGG's classifier: (Dropout, Linear, ReLU) twice, Linear."""
    with w.scope("classifier"):
        for block in range(2):
            with w.scope(str(3 * block)):
                x = w.dropout(x)
            with w.scope(str(3 * block + 1)):
                x = w.linear(x, hidden)
            with w.scope(str(3 * block + 2)):
                x = w.relu(x)
        with w.scope("6"):
            return w.linear(x, classes, gain=1.0)


def zfnet(
    batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000, seed: int = 0
) -> onnx.ModelProto:
    """Zeiler and Fergus's network (the model zoo's zfnet512 family): 7x7/2 first
    convolution, LRN after the first two, the features flattened with
    `x.view(x.size(0), -1)`."""
    w = ImageWriter(seed)
    x = w.image(batch, image)
    layers = [  # (name, channels, kernel, stride, padding, lrn, pool padding or None)
        ("conv1", 96, 7, 2, 1, True, 1),
        ("conv2", 256, 5, 2, 0, True, 1),
        ("conv3", 384, 3, 1, 1, False, None),
        ("conv4", 384, 3, 1, 1, False, None),
        ("conv5", 256, 3, 1, 1, False, 0),
    ]
    for number, (name, channels, kernel, stride, padding, lrn, pool) in enumerate(layers, 1):
        with w.scope(name):
            x = w.conv(x, scaled(channels, width), kernel, stride, padding)
        with w.scope(f"relu{number}"):
            x = w.relu(x)
        if lrn:
            with w.scope(f"norm{number}"):
                x = w.lrn(x)
        if pool is not None:
            with w.scope(f"pool{number}"):
                x = w.max_pool(x, 3, 2, pool)
    x = w.view_flatten(x)
    for number, out in ((6, scaled(4096, width)), (7, scaled(4096, width))):
        with w.scope(f"fc{number}"):
            x = w.linear(x, out)
        with w.scope(f"relu{number}"):
            x = w.relu(x)
        with w.scope(f"drop{number}"):
            x = w.dropout(x)
    with w.scope("fc8"):
        return w.finish(w.linear(x, classes, gain=1.0))


# ------------------------------------------------------------------------------- VGG

VGG_LAYERS: dict[int, tuple[int | str, ...]] = {
    11: (64, "M", 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    13: (64, 64, "M", 128, 128, "M", 256, 256, "M", 512, 512, "M", 512, 512, "M"),
    16: (64, 64, "M", 128, 128, "M", 256, 256, 256, "M", 512, 512, 512, "M", 512, 512, 512, "M"),
}
"""torchvision's VGG configurations: channels of a 3x3 convolution, or "M", a 2x2/2
max pool."""


def vgg(
    depth: int = 16,
    batch: int = 1,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    pool: int = 7,
    batch_norm: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's VGG-`depth` (`batch_norm`: vgg16_bn, exported in training mode so
    that the BatchNormalization nodes stay); `pool` is the adaptive pool's size (7;
    1 for small images)."""
    w = ImageWriter(seed)
    x = w.image(batch, image)
    index = 0
    with w.scope("features"):
        for layer in VGG_LAYERS[depth]:
            if layer == "M":
                with w.scope(str(index)):
                    x = w.max_pool(x, 2, 2)
                index += 1
                continue
            with w.scope(str(index)):
                x = w.conv(x, scaled(int(layer), width), 3, 1, 1)
            if batch_norm:
                index += 1
                with w.scope(str(index)):
                    x = w.batchnorm(x)
            with w.scope(str(index + 1)):
                x = w.relu(x)
            index += 2
    with w.scope("avgpool"):
        x = w.adaptive_avg_pool(x, pool)
    x = w.flatten(x)
    return w.finish(_classifier(w, x, scaled(4096, width), classes))


# ---------------------------------------------------------------------------- ResNet

RESNET_BLOCKS: dict[int, tuple[tuple[int, int, int, int], bool]] = {
    18: ((2, 2, 2, 2), False),
    34: ((3, 4, 6, 3), False),
    50: ((3, 4, 6, 3), True),
    101: ((3, 4, 23, 3), True),
}
"""Blocks per stage, and whether they are bottlenecks, of torchvision's ResNets."""


def resnet(
    depth: int = 50,
    batch: int = 1,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    fold_batchnorm: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's ResNet-`depth` (v1.5: a bottleneck strides in its 3x3)."""
    blocks, bottleneck = RESNET_BLOCKS[depth]
    w = ImageWriter(seed)
    x = w.image(batch, image)
    x = w.conv_bn(x, ("conv1", "bn1"), scaled(64, width), 7, 2, 3, fold=fold_batchnorm)
    with w.scope("relu"):
        x = w.relu(x)
    with w.scope("maxpool"):
        x = w.max_pool(x, 3, 2, 1)
    for stage, count in enumerate(blocks):
        inner = scaled(64 * 2**stage, width)
        for block in range(count):
            stride = 2 if stage > 0 and block == 0 else 1
            with w.scope(f"layer{stage + 1}", str(block)):
                x = _residual_block(w, x, inner, stride, bottleneck, fold_batchnorm)
    with w.scope("avgpool"):
        x = w.global_avg_pool(x)
    x = w.flatten(x)
    with w.scope("fc"):
        return w.finish(w.linear(x, classes, gain=1.0))


def _residual_block(
    w: ImageWriter, x: str, inner: int, stride: int, bottleneck: bool, fold: bool
) -> str:
    """BasicBlock (two 3x3) or Bottleneck (1x1, 3x3, 1x1 to 4x `inner`), the 1x1
    downsample when the shape changes, the sum and its ReLU."""
    out = 4 * inner if bottleneck else inner
    shortcut = x
    if bottleneck:
        convs = [(inner, 1, 1, 0), (inner, 3, stride, 1), (out, 1, 1, 0)]
    else:
        convs = [(inner, 3, stride, 1), (out, 3, 1, 1)]
    for number, (channels, kernel, conv_stride, padding) in enumerate(convs, 1):
        last = number == len(convs)
        gain = RESIDUAL_GAIN if last else 1.0
        names = (f"conv{number}", f"bn{number}")
        y = w.conv_bn(x, names, channels, kernel, conv_stride, padding, fold=fold, gain=gain)
        if not last:
            with w.scope("relu"):
                y = w.relu(y)
        x = y
    if stride != 1 or w.channels(shortcut) != out:
        shortcut = w.conv_bn(shortcut, ("downsample", "0", "1"), out, 1, stride, fold=fold)
    with w.scope("relu"):
        return w.relu(w.add(x, shortcut))


# ------------------------------------------------------------------------ SqueezeNet


def squeezenet(
    batch: int = 1, image: int = 224, width: float = 1.0, classes: int = 1000, seed: int = 0
) -> onnx.ModelProto:
    """torchvision's SqueezeNet 1.1: Fire modules (1x1 squeeze, 1x1 and 3x3 expands
    concatenated), ceil-mode max pools, a 1x1 convolution classifier."""
    fires = {3: (16, 64), 4: (16, 64), 6: (32, 128), 7: (32, 128)}
    fires |= {9: (48, 192), 10: (48, 192), 11: (64, 256), 12: (64, 256)}
    w = ImageWriter(seed)
    x = w.image(batch, image)
    with w.scope("features"):
        with w.scope("0"):
            x = w.conv(x, scaled(64, width), 3, 2)
        with w.scope("1"):
            x = w.relu(x)
        for index in range(2, 13):
            with w.scope(str(index)):
                if index in fires:
                    squeeze, expand = fires[index]
                    x = _fire(w, x, scaled(squeeze, width), scaled(expand, width))
                else:
                    x = w.max_pool(x, 3, 2, ceil=True)
    with w.scope("classifier"):
        with w.scope("0"):
            x = w.dropout(x)
        with w.scope("1"):
            x = w.conv(x, classes, 1)
        with w.scope("2"):
            x = w.relu(x)
        with w.scope("3"):
            x = w.global_avg_pool(x)
    return w.finish(w.flatten(x))


def _fire(w: ImageWriter, x: str, squeeze: int, expand: int) -> str:
    with w.scope("squeeze"):
        x = w.conv(x, squeeze, 1)
    with w.scope("squeeze_activation"):
        x = w.relu(x)
    branches = []
    for kernel, padding in ((1, 0), (3, 1)):
        with w.scope(f"expand{kernel}x{kernel}"):
            y = w.conv(x, expand, kernel, 1, padding)
        with w.scope(f"expand{kernel}x{kernel}_activation"):
            branches.append(w.relu(y))
    return w.concat(branches)


# ------------------------------------------------------------------------- GoogLeNet

GOOGLENET_CELLS: dict[str, tuple[int, int, int, int, int, int]] = {
    "inception3a": (64, 96, 128, 16, 32, 32),
    "inception3b": (128, 128, 192, 32, 96, 64),
    "inception4a": (192, 96, 208, 16, 48, 64),
    "inception4b": (160, 112, 224, 24, 64, 64),
    "inception4c": (128, 128, 256, 24, 64, 64),
    "inception4d": (112, 144, 288, 32, 64, 64),
    "inception4e": (256, 160, 320, 32, 128, 128),
    "inception5a": (256, 160, 320, 32, 128, 128),
    "inception5b": (384, 192, 384, 48, 128, 128),
}
"""torchvision's Inception cells: 1x1; 1x1 -> 3x3; 1x1 -> 3x3; pool -> 1x1 channels."""

GOOGLENET_POOLS = {"inception3b": (3, 2), "inception4e": (2, 2)}
"""The ceil-mode max pools (kernel, stride) after these cells."""

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def googlenet(
    batch: int = 1,
    image: int = 224,
    width: float = 1.0,
    classes: int = 1000,
    transform_input: bool = True,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's GoogLeNet (Inception v1) in eval mode (no auxiliary heads), with
    `transform_input` (as the pretrained model has it): each input channel taken out
    with `x[:, c]` (a Gather on axis 1), rescaled, and concatenated again."""
    w = ImageWriter(seed)
    x = w.image(batch, image)
    if transform_input:
        x = _transform_input(w, x)
    x = _basic_conv(w, x, "conv1", scaled(64, width), 7, 2, 3)
    with w.scope("maxpool1"):
        x = w.max_pool(x, 3, 2, ceil=True)
    x = _basic_conv(w, x, "conv2", scaled(64, width), 1)
    x = _basic_conv(w, x, "conv3", scaled(192, width), 3, 1, 1)
    with w.scope("maxpool2"):
        x = w.max_pool(x, 3, 2, ceil=True)
    pools = 3
    for name, cell in GOOGLENET_CELLS.items():
        with w.scope(name):
            x = _inception(w, x, [scaled(c, width) for c in cell])
        if name in GOOGLENET_POOLS:
            with w.scope(f"maxpool{pools}"):
                x = w.max_pool(x, *GOOGLENET_POOLS[name], ceil=True)
            pools += 1
    with w.scope("avgpool"):
        x = w.global_avg_pool(x)
    x = w.flatten(x)
    with w.scope("dropout"):
        x = w.dropout(x)
    with w.scope("fc"):
        return w.finish(w.linear(x, classes, gain=1.0))


def _transform_input(w: ImageWriter, x: str) -> str:
    channels = []
    for c, (mean, std) in enumerate(zip(IMAGENET_MEAN, IMAGENET_STD, strict=True)):
        picked = w.op("Gather", x, w.constant(c), axis=1)
        picked = w.op("Unsqueeze", picked, w.constant([1]))
        picked = w.op("Mul", picked, w.constant(np.float32(std / 0.5)))
        channels.append(w.op("Add", picked, w.constant(np.float32((mean - 0.5) / 0.5))))
        w.shapes[channels[-1]] = (*w.shapes[x][:1], 1, *w.shapes[x][2:])
    return w.concat(channels)


def _basic_conv(
    w: ImageWriter, x: str, name: str, out: int, kernel: int, stride: int = 1, padding: int = 0
) -> str:
    """torchvision's BasicConv2d (conv, batchnorm eps 1e-3, ReLU), the batchnorm folded."""
    with w.scope(name):
        x = w.conv_bn(x, ("conv", "bn"), out, kernel, stride, padding, epsilon=1e-3)
        return w.relu(x)


def _inception(w: ImageWriter, x: str, cell: Sequence[int]) -> str:
    one, reduce3, three, reduce5, five, pool = cell
    branches = [_basic_conv(w, x, "branch1", one, 1)]
    for branch, (reduce, out) in (("branch2", (reduce3, three)), ("branch3", (reduce5, five))):
        with w.scope(branch):
            y = _basic_conv(w, x, "0", reduce, 1)
            # torchvision's "5x5" branch is a 3x3 convolution too.
            branches.append(_basic_conv(w, y, "1", out, 3, 1, 1))
    with w.scope("branch4"):
        with w.scope("0"):
            y = w.max_pool(x, 3, 1, 1, ceil=True)
        branches.append(_basic_conv(w, y, "1", pool, 1))
    return w.concat(branches)


# -------------------------------------------------------------------------- DenseNet


def densenet(
    batch: int = 1,
    image: int = 224,
    blocks: Sequence[int] = (6, 12, 24, 16),
    growth: int = 32,
    init_features: int = 64,
    bn_size: int = 4,
    classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's DenseNet (121 by default): each dense layer concatenates every
    earlier feature map (one Concat per layer) and runs batchnorm-ReLU-conv twice;
    the exporter folds the second batchnorm into the 1x1 convolution before it, and
    the first (after a Concat) stays a BatchNormalization."""
    w = ImageWriter(seed)
    x = w.image(batch, image)
    with w.scope("features"):
        x = w.conv_bn(x, ("conv0", "norm0"), init_features, 7, 2, 3)
        with w.scope("relu0"):
            x = w.relu(x)
        with w.scope("pool0"):
            x = w.max_pool(x, 3, 2, 1)
        for number, count in enumerate(blocks, 1):
            with w.scope(f"denseblock{number}"):
                x = _dense_block(w, x, count, growth, bn_size)
            if number < len(blocks):
                with w.scope(f"transition{number}"):
                    x = _transition(w, x)
        with w.scope("norm5"):
            x = w.batchnorm(x)
    x = w.relu(x)
    x = w.global_avg_pool(x)
    x = w.flatten(x)
    with w.scope("classifier"):
        return w.finish(w.linear(x, classes, gain=1.0))


def _dense_block(w: ImageWriter, x: str, count: int, growth: int, bn_size: int) -> str:
    features = [x]
    for layer in range(1, count + 1):
        with w.scope(f"denselayer{layer}"):
            y = w.concat(features) if len(features) > 1 else features[0]
            with w.scope("norm1"):
                y = w.batchnorm(y)
            with w.scope("relu1"):
                y = w.relu(y)
            y = w.conv_bn(y, ("conv1", "norm2"), bn_size * growth, 1)
            with w.scope("relu2"):
                y = w.relu(y)
            with w.scope("conv2"):
                features.append(w.conv(y, growth, 3, 1, 1, bias=False))
    return w.concat(features)


def _transition(w: ImageWriter, x: str) -> str:
    with w.scope("norm"):
        x = w.batchnorm(x)
    with w.scope("relu"):
        x = w.relu(x)
    with w.scope("conv"):
        x = w.conv(x, w.channels(x) // 2, 1, bias=False)
    with w.scope("pool"):
        return w.avg_pool(x, 2, 2)


# ----------------------------------------------------------------------- ShuffleNet


def shufflenet_v2(
    batch: int = 1,
    image: int = 224,
    channels: Sequence[int] = (24, 116, 232, 464, 1024),
    repeats: Sequence[int] = (4, 8, 4),
    classes: int = 1000,
    seed: int = 0,
) -> onnx.ModelProto:
    """torchvision's ShuffleNet v2 (x1.0 by default): units that split the channels in
    two (`chunk`, a Split), run one half through 1x1 / depthwise 3x3 / 1x1, concatenate
    and shuffle the channels (`view`, `transpose`, `view` with sizes from `x.size()`);
    the head averages with `x.mean([2, 3])`."""
    if any(c % 2 for c in channels[1:4]):
        raise ValueError(f"stage channels must be even (they are split in two), got {channels}")
    w = ImageWriter(seed)
    x = w.image(batch, image)
    x = w.conv_bn(x, ("conv1", "0", "1"), channels[0], 3, 2, 1)
    with w.scope("conv1", "2"):
        x = w.relu(x)
    with w.scope("maxpool"):
        x = w.max_pool(x, 3, 2, 1)
    for stage, (out, count) in enumerate(zip(channels[1:4], repeats, strict=True), 2):
        for unit in range(count):
            with w.scope(f"stage{stage}", str(unit)):
                x = _shuffle_unit(w, x, out, 2 if unit == 0 else 1)
    x = w.conv_bn(x, ("conv5", "0", "1"), channels[4], 1)
    with w.scope("conv5", "2"):
        x = w.relu(x)
    pooled = w.op("ReduceMean", x, axes=[2, 3], keepdims=0)
    w.shapes[pooled] = w.shapes[x][:2]
    with w.scope("fc"):
        return w.finish(w.linear(pooled, classes, gain=1.0))


def _shuffle_unit(w: ImageWriter, x: str, out: int, stride: int) -> str:
    half = out // 2
    if stride == 1:
        halves = w.node("Split", [x, w.constant([half, half])], outputs=2, axis=1)
        for part in halves:
            w.shapes[part] = (w.shapes[x][0], half, *w.shapes[x][2:])
        left, right = halves[0], _branch(w, "branch2", halves[1], half, 1)
    else:
        with w.scope("branch1"):
            inp = w.channels(x)
            left = w.conv_bn(x, ("0", "1"), inp, 3, stride, 1, groups=inp)
            left = w.conv_bn(left, ("2", "3"), half, 1)
            with w.scope("4"):
                left = w.relu(left)
        right = _branch(w, "branch2", x, half, stride)
    return _channel_shuffle(w, w.concat([left, right]), 2)


def _branch(w: ImageWriter, name: str, x: str, out: int, stride: int) -> str:
    """1x1 conv-BN-ReLU, depthwise 3x3 conv-BN, 1x1 conv-BN-ReLU."""
    with w.scope(name):
        x = w.conv_bn(x, ("0", "1"), out, 1)
        with w.scope("2"):
            x = w.relu(x)
        x = w.conv_bn(x, ("3", "4"), out, 3, stride, 1, groups=out)
        x = w.conv_bn(x, ("5", "6"), out, 1)
        with w.scope("7"):
            return w.relu(x)


def _channel_shuffle(w: ImageWriter, x: str, groups: int) -> str:
    """torchvision's `channel_shuffle`, its sizes read from `x.size()` at run time."""
    shape = w.op("Shape", x)
    batch, channels, height, width = (
        w.op("Gather", shape, w.constant(i), axis=0) for i in range(4)
    )
    per_group = w.op("Div", channels, w.constant(groups))

    def dims(*sizes: str) -> list[str]:
        return [w.op("Unsqueeze", size, w.constant([0])) for size in sizes]

    n, c, h, wd = dims(batch, per_group, height, width)
    split = w.op("Concat", n, w.constant([groups]), c, h, wd, axis=0)
    grouped = w.op("Reshape", x, split, allowzero=0)
    swapped = w.op("Transpose", grouped, perm=[0, 2, 1, 3, 4])
    merged = w.op("Concat", *dims(batch, channels, height, width), axis=0)
    y = w.op("Reshape", swapped, merged, allowzero=0)
    w.shapes[y] = w.shapes[x]
    return y
