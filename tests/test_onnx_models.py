"""Real models as users export them (`tasoc.models.exported`: the classic image models,
BERT and GPT-2 written in the style of `torch.onnx.export`, opset 17), at small sizes:
valid, deterministic ONNX that onnxruntime runs to sensible numbers; imported with
`import_onnx` and run on the reference interpreter against onnxruntime; through the
driver, `tasoc run --check --check-onnxruntime` (JAX, the driver's default backend,
against the reference and against onnxruntime: JAX is checked here, once per model,
as its compile is the slow part) and `tasoc opt -p equality-rewrite --verify-each -o
out.onnx`, whose output onnxruntime runs like the input model.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import onnx
import pytest
from conftest import Result

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import import_onnx
from tasoc.backends.onnx.runtime import inference_session
from tasoc.ir.program import arg_infos, entry_function
from tasoc.models.exported import EXPORTED_MODELS
from tasoc.verify.equivalence import compare

SEQUENCE = (2, 8)
"""(batch, sequence) of the transformers; the dynamic ones get it by `input_shapes`."""

TEXT = {"seq": SEQUENCE[1], "batch": SEQUENCE[0], "hidden": 16, "layers": 2, "heads": 2}
TEXT |= {"vocab": 50, "max_positions": 16}


@dataclass(frozen=True)
class Case:
    """A model of `EXPORTED_MODELS` at a small size."""

    id: str
    model: str
    sizes: tuple[tuple[str, Any], ...]

    def build(self) -> onnx.ModelProto:
        return _built(self.model, self.sizes)

    @property
    def input_shapes(self) -> dict[str, tuple[int, ...]]:
        """Static shapes for the inputs declared with dynamic axes."""
        model = self.build()
        return {
            info.name: SEQUENCE
            for info in model.graph.input
            if any(d.dim_param for d in info.type.tensor_type.shape.dim)
        }

    def shape_options(self) -> list[str]:
        return [
            f"--input-shape={name}={'x'.join(map(str, dims))}"
            for name, dims in self.input_shapes.items()
        ]


@functools.cache
def _built(model: str, sizes: tuple[tuple[str, Any], ...]) -> onnx.ModelProto:
    return EXPORTED_MODELS[model](**dict(sizes))


def case(case_id: str, model: str, **sizes: Any) -> Case:
    return Case(case_id, model, tuple(sorted(sizes.items())))


CASES = [
    case("alexnet", "alexnet", batch=2, image=64, width=1 / 16, classes=10),
    case(
        "zfnet",
        "zfnet",
        batch=2,
        image=64,
        width=1 / 16,
        classes=10,
    ),
    case("vgg11", "vgg11", batch=2, image=32, width=1 / 16, classes=10, pool=1),
    case("vgg16", "vgg16", batch=1, image=64, width=1 / 16, classes=10, pool=2),
    case("resnet18", "resnet18", batch=2, image=32, width=1 / 8, classes=10),
    case(
        "resnet50-batchnorm",
        "resnet50",
        batch=1,
        image=32,
        width=1 / 16,
        classes=10,
        fold_batchnorm=False,
    ),
    case("squeezenet1_1", "squeezenet1_1", batch=2, image=32, width=1 / 8, classes=10),
    # at 32x32 GoogLeNet's ceil-mode pools round up: a window more than floor mode
    case("googlenet", "googlenet", batch=1, image=32, width=1 / 16, classes=10),
    case(
        "densenet121",
        "densenet121",
        batch=1,
        image=32,
        blocks=(2, 3, 2, 2),
        growth=4,
        init_features=8,
        bn_size=2,
        classes=10,
    ),
    case(
        "shufflenet_v2",
        "shufflenet_v2",
        batch=2,
        image=32,
        channels=(8, 16, 32, 64, 64),
        repeats=(2, 2, 2),
        classes=10,
    ),
    case(
        "bert-dynamic",
        "bert",
        intermediate=32,
        dynamic=True,
        **TEXT,
    ),
    case(
        "bert-decomposed-layernorm",
        "bert",
        intermediate=32,
        layernorm="decomposed",
        **TEXT,
    ),
    case(
        "gpt2-dynamic",
        "gpt2",
        dynamic=True,
        **TEXT,
    ),
    case(
        "gpt2-sdpa",
        "gpt2",
        attention="sdpa",
        **TEXT,
    ),
]


def onnxruntime_feeds(c: Case) -> dict[str, np.ndarray]:
    """The activations `random_inputs` draws for the imported model (ids in range),
    by ONNX input name (which the IR keeps for these models)."""
    module, _ = import_onnx(c.build(), c.input_shapes)
    infos = arg_infos(entry_function(module))
    drawn = random_inputs(module, 0)
    return {
        info.name: np.asarray(a) for info, a in zip(infos, drawn, strict=True) if not info.is_param
    }


# ----------------------------------------------------------------------- the models


@pytest.mark.parametrize("c", CASES, ids=[c.id for c in CASES])
def test_models_are_valid_deterministic_onnx_that_onnxruntime_runs(c: Case) -> None:
    model = c.build()
    onnx.checker.check_model(model, full_check=True)
    assert EXPORTED_MODELS[c.model](**dict(c.sizes)).SerializeToString() == (
        model.SerializeToString()
    )
    rng = np.random.default_rng(0)
    feeds = {}
    for info in model.graph.input:
        dims = c.input_shapes.get(info.name) or [
            d.dim_value for d in info.type.tensor_type.shape.dim
        ]
        integers = info.type.tensor_type.elem_type == onnx.TensorProto.INT64
        feeds[info.name] = (
            rng.integers(0, 2, dims) if integers else rng.standard_normal(dims).astype(np.float32)
        )
    for output in inference_session(model).run(None, feeds):
        # neither NaN nor saturated nor vanished: the weights keep activations O(1)
        assert np.all(np.isfinite(output)) and 0.05 < np.std(output) < 50


def test_the_variants_of_a_model_compute_the_same() -> None:
    """Decomposed and fused layer norm, eager and SDPA attention, static and dynamic
    axes: different exports of one network, equal under onnxruntime."""
    ids = np.random.default_rng(0).integers(0, TEXT["vocab"], SEQUENCE)
    bert_feeds = {"input_ids": ids, "attention_mask": ids % 2, "token_type_ids": ids % 2}
    variants: dict[str, list[dict[str, Any]]] = {
        "bert": [{}, {"layernorm": "decomposed"}, {"dynamic": True}],
        "gpt2": [{}, {"attention": "sdpa"}, {"layernorm": "decomposed", "dynamic": True}],
    }
    for name, options in variants.items():
        feeds = bert_feeds if name == "bert" else {"input_ids": ids}
        results = [
            inference_session(EXPORTED_MODELS[name](**TEXT, **option)).run(None, feeds)
            for option in options
        ]
        for result in results[1:]:
            report = compare(results[0], result)
            assert report.ok, (name, report.summary())


def test_the_exports_are_written_as_pytorch_writes_them() -> None:
    """Names as the exporter gives them, and the ops real exports hold."""
    resnet18 = next(c for c in CASES if c.id == "resnet18").build()
    resnet50 = next(c for c in CASES if c.id == "resnet50-batchnorm").build()
    bert = next(c for c in CASES if c.id == "bert-dynamic").build()
    assert {n.op_type for n in resnet18.graph.node}.isdisjoint({"BatchNormalization"})
    assert all(t.name.startswith("onnx::Conv_") for t in resnet18.graph.initializer[:2])
    assert "/layer1/layer1.0/bn1/BatchNormalization" in {n.name for n in resnet50.graph.node}
    assert "layer1.0.downsample.1.running_var" in {t.name for t in resnet50.graph.initializer}
    assert "/encoder/layer.1/attention/self/query/MatMul" in {n.name for n in bert.graph.node}
    assert any(t.name.startswith("onnx::MatMul_") for t in bert.graph.initializer)
    assert [i.name for i in bert.graph.input] == ["input_ids", "attention_mask", "token_type_ids"]
    written = {node.op_type for c in CASES for node in c.build().graph.node}
    exported = {
        *("Conv", "BatchNormalization", "Relu", "MaxPool", "AveragePool", "LRN", "Dropout"),
        *("GlobalAveragePool", "Flatten", "Gemm", "Concat", "Split", "ReduceMean", "Add"),
        *("Shape", "Gather", "Unsqueeze", "Slice", "Reshape", "Transpose", "Range", "Div"),
        *("Cast", "Sub", "Mul", "MatMul", "Softmax", "Sqrt", "Pow", "Erf", "Tanh"),
        *("LayerNormalization", "Trilu", "Expand", "Equal", "Where", "Constant"),
    }
    assert exported <= written, exported - written


# ------------------------------------------------------------------------ importing


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_imported_models_run_like_onnxruntime(c: Case) -> None:
    module, params = import_onnx(c.build(), c.input_shapes)
    infos = arg_infos(entry_function(module))
    drawn = random_inputs(module, 0)
    args = [
        params[i.name] if i.is_param else np.asarray(a) for i, a in zip(infos, drawn, strict=True)
    ]
    feeds = {i.name: a for i, a in zip(infos, args, strict=True) if not i.is_param}
    report = compare(inference_session(c.build()).run(None, feeds), run_reference(module, args))
    assert report.ok, report.summary()


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_the_driver_runs_them_checked_on_jax(
    c: Case, tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    path = tmp_path / f"{c.id}.onnx"
    onnx.save(c.build(), path)
    result = tasoc("run", path, *c.shape_options(), "--check", "--check-onnxruntime")
    assert result.code == 0, result
    assert "check: equivalent to the numpy reference" in result.out
    assert "check: equivalent to onnxruntime" in result.out


@pytest.mark.parametrize("c", CASES, ids=lambda c: c.id)
def test_equality_rewrite_keeps_what_they_compute(
    c: Case, tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    path, out = tmp_path / f"{c.id}.onnx", tmp_path / "out.onnx"
    onnx.save(c.build(), path)
    pipeline = "equality-rewrite{timeout=2 retime=0}"
    result = tasoc("opt", path, *c.shape_options(), "-p", pipeline, "--verify-each", "-o", out)
    assert result.code == 0, result
    optimized = onnx.load(out)
    onnx.checker.check_model(optimized, full_check=True)
    feeds = onnxruntime_feeds(c)
    expected = inference_session(c.build()).run(None, feeds)
    report = compare(expected, inference_session(optimized).run(None, feeds))
    assert report.ok, report.summary()
