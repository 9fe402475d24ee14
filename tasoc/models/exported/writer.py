"""A small ONNX graph writer that names things the way `torch.onnx.export` does.

PyTorch's exporter (TorchScript-based, opset 17) names a node after the module path
it came from and its op type (`/layer1/layer1.0/conv1/Conv`, a second Conv in the
same scope `/.../Conv_1`), each node output after its node (`..._output_0`), a
weight after its parameter (`layer1.0.conv1.weight`), and a tensor its constant
folding computed (a BatchNormalization folded into the Conv before it, a Linear's
transposed weight) `onnx::<Op>_<number>`. The graph is `main_graph`. Models written
through this class therefore look to an importer like the files users bring.
"""

from __future__ import annotations

import itertools
from collections import Counter
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

OPSET = 17
"""The opset `torch.onnx.export` writes when asked for `opset_version=17`."""

IR_VERSION = 8
"""The IR version PyTorch 2.x writes at opset 17 (and onnxruntime reads)."""

FLOAT = TensorProto.FLOAT
INT64 = TensorProto.INT64

Dim = int | str
"""A declared dimension: a size, or the name of a dynamic axis (`dynamic_axes`)."""


class Writer:
    """Collects the nodes, weights, inputs and outputs of one exported graph.

    `scope(...)` enters a submodule, as the exporter's scope names follow the module
    tree; weights drawn from `normal` come from one seeded generator, so a builder
    called twice with the same arguments writes the same model."""

    def __init__(self, seed: int) -> None:
        self.rng = np.random.default_rng(seed)
        self.nodes: list[onnx.NodeProto] = []
        self.initializers: list[TensorProto] = []
        self.inputs: list[onnx.ValueInfoProto] = []
        self.outputs: list[onnx.ValueInfoProto] = []
        self._path: list[str] = []
        self._names: Counter[str] = Counter()
        self._numbers = itertools.count(100)

    # ---------------------------------------------------------------- scopes
    @contextmanager
    def scope(self, *attributes: str) -> Iterator[None]:
        """Inside the submodule reached through `attributes` (`"layer1", "0", "conv1"`)."""
        self._path.extend(attributes)
        try:
            yield
        finally:
            del self._path[len(self._path) - len(attributes) :]

    def _scope_name(self) -> str:
        """The exporter's scope: a child of a Sequential (a numbered attribute) is
        named with its parent (`/layer1/layer1.0/conv1`)."""
        parts = []
        for index, attribute in enumerate(self._path):
            numbered = attribute.isdigit() and index > 0
            parts.append(f"{self._path[index - 1]}.{attribute}" if numbered else attribute)
        return "".join(f"/{part}" for part in parts)

    # ----------------------------------------------------------------- nodes
    def node(
        self, op_type: str, inputs: Sequence[str], outputs: int = 1, **attrs: Any
    ) -> list[str]:
        """Add a node of the current scope; returns the names of its `outputs`."""
        base = f"{self._scope_name()}/{op_type}"
        count = self._names[base]
        self._names[base] += 1
        name = base if count == 0 else f"{base}_{count}"
        results = [f"{name}_output_{index}" for index in range(outputs)]
        self.nodes.append(helper.make_node(op_type, list(inputs), results, name=name, **attrs))
        return results

    def op(self, op_type: str, *inputs: str, **attrs: Any) -> str:
        """Add a node with one output; returns its name."""
        return self.node(op_type, inputs, **attrs)[0]

    def constant(self, value: float | int | Sequence[float] | Sequence[int] | np.ndarray) -> str:
        """A `Constant` node of the current scope: int64 for Python ints (as the
        exporter writes sizes and axes), float32 for floats, else the array's type."""
        array = np.asarray(value)
        if array.dtype == np.float64:
            array = array.astype(np.float32)
        return self.op("Constant", value=numpy_helper.from_array(array))

    # --------------------------------------------------------------- weights
    def normal(self, shape: Sequence[int], std: float, mean: float = 0.0) -> np.ndarray:
        """float32 N(mean, std^2) values from the writer's generator."""
        return (mean + std * self.rng.standard_normal(tuple(shape))).astype(np.float32)

    def uniform(self, shape: Sequence[int], low: float, high: float) -> np.ndarray:
        return self.rng.uniform(low, high, tuple(shape)).astype(np.float32)

    def param(self, name: str, array: np.ndarray) -> str:
        """A weight named after its parameter: the attribute path, dotted."""
        full = ".".join([*self._path, name])
        self.initializers.append(numpy_helper.from_array(array, full))
        return full

    def folded(self, op_type: str, array: np.ndarray) -> str:
        """A weight the exporter's constant folding made, named `onnx::<Op>_<n>`."""
        name = f"onnx::{op_type}_{next(self._numbers)}"
        self.initializers.append(numpy_helper.from_array(array, name))
        return name

    # ------------------------------------------------------ inputs, outputs
    def input(self, name: str, elem_type: int, shape: Sequence[Dim]) -> str:
        self.inputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))
        return name

    def output(self, value: str, name: str, elem_type: int, shape: Sequence[Dim]) -> None:
        """Declare `value` a graph output called `name`: the exporter gives the
        output's name (`output_names`) to the node that computes it."""
        for node in self.nodes:
            for field in (node.input, node.output):
                for index, entry in enumerate(field):
                    if entry == value:
                        field[index] = name
        self.outputs.append(helper.make_tensor_value_info(name, elem_type, list(shape)))

    def model(self) -> onnx.ModelProto:
        graph = helper.make_graph(
            self.nodes, "main_graph", self.inputs, self.outputs, self.initializers
        )
        return helper.make_model(
            graph,
            opset_imports=[helper.make_opsetid("", OPSET)],
            ir_version=IR_VERSION,
            producer_name="pytorch",
            producer_version="2.1.0",
        )
