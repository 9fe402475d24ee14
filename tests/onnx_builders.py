"""ONNX models built in tests: one-node cases (`Case`) run against onnxruntime, the
hostile models' builders and their one-line refusal through the command line, and
which backward ops ONNX export writes (`EXPORTED`) or refuses (`REFUSED`)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_one_line_error
from onnx import TensorProto, helper, numpy_helper
from strict_cli import StrictRun, TimedResult
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import OnnxImportError, import_onnx
from tasoc.backends.onnx.runtime import inference_session
from tasoc.ir import graph as G
from tasoc.ir.program import arg_infos, entry_function
from tasoc.verify.equivalence import compare

# ------------------------------------------------------------------ one-node cases

RNG = np.random.default_rng(20)


def rand(*shape: int, scale: float = 1.0) -> np.ndarray:
    return (RNG.standard_normal(shape) * scale).astype(np.float32)


def ints(values: Sequence[int], dtype: type = np.int64) -> np.ndarray:
    return np.asarray(values, dtype)


@dataclass
class Case:
    """A model of `nodes` with run-time inputs `feeds` (name -> value), weights
    `weights`, and outputs `outputs` (their types found by ONNX shape inference)."""

    nodes: list[onnx.NodeProto]
    feeds: dict[str, np.ndarray]
    outputs: list[str] = field(default_factory=lambda: ["y"])
    weights: dict[str, np.ndarray] = field(default_factory=dict)
    opset: int = 19

    def model(self, infer: bool = True) -> onnx.ModelProto:
        """The model; with `infer`, its outputs typed by ONNX's (strict) shape inference,
        which a model the importer must refuse may not pass (else they are declared
        float scalars: the refusal comes before outputs are checked)."""
        graph = helper.make_graph(
            self.nodes,
            "case",
            [
                helper.make_tensor_value_info(
                    name, helper.np_dtype_to_tensor_dtype(value.dtype), value.shape
                )
                for name, value in self.feeds.items()
            ],
            [
                helper.make_empty_tensor_value_info(name)
                if infer
                else helper.make_tensor_value_info(name, TensorProto.FLOAT, [])
                for name in self.outputs
            ],
            [numpy_helper.from_array(np.asarray(v), name) for name, v in self.weights.items()],
        )
        opset = helper.make_opsetid("", self.opset)
        model = helper.make_model(
            graph, opset_imports=[opset], ir_version=helper.find_min_ir_version_for([opset])
        )
        return onnx.shape_inference.infer_shapes(model, strict_mode=True) if infer else model


def node(op_type: str, inputs: Sequence[str], outputs: Sequence[str] = ("y",), **attrs: object):
    return helper.make_node(op_type, list(inputs), list(outputs), **attrs)


def imported(case: Case) -> tuple[ModuleOp, list[np.ndarray]]:
    """The case's model imported, and its outputs on the reference interpreter."""
    module, params = import_onnx(case.model())
    feeds = iter(case.feeds.values())
    infos = arg_infos(entry_function(module))
    args = [params[info.name] if info.is_param else next(feeds) for info in infos]
    return module, run_reference(module, args)


def check(case: Case) -> ModuleOp:
    """Import the case, run it on the reference and on onnxruntime, compare."""
    module, results = imported(case)
    expected = inference_session(case.model()).run(None, case.feeds)
    report = compare(expected, results)
    assert report.ok, report.summary()
    return module


def ops_of(module: ModuleOp) -> list[str]:
    return [op.op_name() for op in module.walk() if isinstance(op, G.GraphOp)]


def refusal(case: Case) -> str:
    with pytest.raises(OnnxImportError) as caught:
        import_onnx(case.model(infer=False))
    message = str(caught.value)
    assert message and "\n" not in message
    return message


# ------------------------------------------------------------------ hostile models

F = TensorProto.FLOAT
I64 = TensorProto.INT64

FAST_SECONDS = 5.0
"""A refusal of a huge size must come before any allocation, so it is quick."""


def graph_model(
    nodes: Sequence[onnx.NodeProto],
    outputs: dict[str, int],
    inputs: dict[str, tuple[int, Sequence[int]]] | None = None,
    initializers: Sequence[TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of `nodes` (no shape inference): `outputs` by name with their rank (any
    element type, unknown dims), `inputs` by name as (element type, shape)."""
    graph = helper.make_graph(
        list(nodes),
        "hostile",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in (inputs or {}).items()],
        [helper.make_tensor_value_info(n, 0, [None] * rank) for n, rank in outputs.items()],
        list(initializers),
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def refused(tasoc: StrictRun, path: Path, model: onnx.ModelProto, *fragments: str) -> TimedResult:
    """`tasoc opt` of `model` saved at `path`: one error line holding `fragments`, fast."""
    onnx.save(model, path)
    result = tasoc("opt", path)
    assert_one_line_error(result, *fragments)
    assert result.out == ""
    assert result.seconds < FAST_SECONDS, result.seconds
    return result


def raw_tensor(name: str, data_type: int, dims: Sequence[int], raw: bytes) -> TensorProto:
    return TensorProto(name=name, data_type=data_type, dims=list(dims), raw_data=raw)


def relu_of(tensor: TensorProto, rank: int = 1) -> onnx.ModelProto:
    return graph_model(
        [helper.make_node("Relu", [tensor.name], ["y"])], {"y": rank}, None, [tensor]
    )


def external_model(
    directory: Path, entries: dict[str, str], dims: Sequence[int] = (4,), data: bytes = b"\0" * 16
) -> Path:
    """`m.onnx` in `directory` whose initializer `w` (float32 of `dims`) lies in
    `w.bin` (holding `data`) as `entries` (location, offset, length, ...) say."""
    tensor = TensorProto(name="w", data_type=F, dims=list(dims))
    tensor.data_location = TensorProto.EXTERNAL
    for key, value in {"location": "w.bin", **entries}.items():
        tensor.external_data.add(key=key, value=value)
    (directory / "w.bin").write_bytes(data)
    path = directory / "m.onnx"
    onnx.save(relu_of(tensor, len(dims)), path)
    return path


# ------------------------------------------------------ backward ops and GNN ops

EXPORTED = (
    "relu_grad",
    "sigmoid_grad",
    "tanh_grad",
    "gelu_grad",
    "conv2d_grad_input",
    "scatter_add",
    "softmax_cross_entropy",
)
REFUSED = (
    "conv2d_grad_weight",
    "pool2d_grad",
    "reduce_grad",
    "layernorm_grad",
    "batchnorm_train",
    "batchnorm_grad",
    "softmax_cross_entropy_grad",
    "adam_update",
    "aggregate",
    "aggregate_grad",
    "aggregate_weight_grad",
    "edge_softmax",
    "edge_softmax_grad",
    "edge_scores",
)
