"""Real models as users export them: ONNX graphs written node by node in the style of
`torch.onnx.export` (opset 17), for checking the ONNX importer against what it will
meet. They depend on `onnx` and NumPy only (no PyTorch).

`EXPORTED_MODELS[name](**sizes)` returns an `onnx.ModelProto`; every builder takes
size parameters (`batch`, `image` or `seq`, widths and depths) so that tests can
build small versions, and a `seed` for its weights. `writer` names nodes and weights
as the exporter does; `cnn` holds the image models, `transformer` BERT and GPT-2.
"""

from collections.abc import Callable
from functools import partial

import onnx

from tasoc.models.exported.cnn import (
    alexnet,
    densenet,
    googlenet,
    resnet,
    shufflenet_v2,
    squeezenet,
    vgg,
    zfnet,
)
from tasoc.models.exported.transformer import bert, gpt2

EXPORTED_MODELS: dict[str, Callable[..., onnx.ModelProto]] = {
    "alexnet": alexnet,
    "zfnet": zfnet,
    "vgg11": partial(vgg, depth=11),
    "vgg16": partial(vgg, depth=16),
    "resnet18": partial(resnet, depth=18),
    "resnet50": partial(resnet, depth=50),
    "squeezenet1_1": squeezenet,
    "googlenet": googlenet,
    "densenet121": densenet,
    "shufflenet_v2": shufflenet_v2,
    "bert": bert,
    "gpt2": gpt2,
}
"""Builders by model name; each returns the full-size model when called without
arguments (about as large as the real one: resnet50 writes 100 MB of weights)."""

__all__ = ["EXPORTED_MODELS"]
