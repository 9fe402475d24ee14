"""Finding the erf-form GELU, x * 0.5 * (1 + erf(x / sqrt 2)), in an ONNX graph.

ONNX before opset 20 has no Gelu, so exporters spell it in five nodes; the dialect has
no erf, so the importer must see the whole chain as one `graph.gelu`.
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import ml_dtypes
import numpy as np
import onnx

from tasoc.backends.onnx.conventions import GELU_SQRT2
from tasoc.backends.onnx.errors import OnnxImportError
from tasoc.backends.onnx.known_values import Known, Value, is_float
from tasoc.backends.onnx.tensors import tensor_array

_GELU_MATCH_ULPS = 4
"""How many units in the last place of its own type a GELU constant may be off sqrt 2,
1/sqrt 2, 1 or 0.5 (exporters round and compute these differently)."""


def find_gelus(graph: onnx.GraphProto, env: Mapping[str, Value]) -> tuple[set[int], dict[int, str]]:
    """Erf-form GELUs, x * 0.5 * (1 + erf(x / sqrt 2)), as PyTorch exports them.

    Returns the indices of the nodes the GELUs absorb and, for the last node of
    each, the name of x. A chain matches only when its intermediate values have no
    other use, so nothing the rest of the graph reads disappears.
    """
    nodes = list(graph.node)
    producer = {name: i for i, node in enumerate(nodes) for name in node.output}
    consumers: dict[str, list[int]] = {}
    for i, node in enumerate(nodes):
        for name in set(node.input):
            consumers.setdefault(name, []).append(i)
    outputs = {info.name for info in graph.output}
    literals = {
        node.output[0]: node.attribute[0].t
        for node in nodes
        if node.op_type == "Constant" and node.attribute and node.attribute[0].name == "value"
    }

    def scalar_is(name: str, target: float) -> bool:
        value = env.get(name)
        array = value.array if isinstance(value, Known) else _scalar(literals.get(name))
        return (
            array is not None
            and array.size == 1
            and is_float(array)
            and abs(float(array.flat[0]) - target)
            <= _GELU_MATCH_ULPS * float(ml_dtypes.finfo(array.dtype).eps) * target
        )

    def only_user(name: str) -> int | None:
        users = consumers.get(name, [])
        return users[0] if len(users) == 1 and name not in outputs else None

    def partner(index: int | None, op_type: str, operand: str) -> str | None:
        """The other operand of binary node `index` of `op_type` that reads `operand`."""
        if index is None or nodes[index].op_type != op_type or len(nodes[index].input) != 2:
            return None
        a, b = nodes[index].input
        return b if a == operand else a if b == operand else None

    def scaled_input(index: int) -> str | None:
        """x when node `index` computes x / sqrt 2 (or x * (1 / sqrt 2))."""
        node = nodes[index]
        if node.op_type == "Div" and scalar_is(node.input[1], GELU_SQRT2):
            return node.input[0]
        if node.op_type == "Mul":
            for a, b in (node.input, reversed(node.input)):
                if scalar_is(b, 1 / GELU_SQRT2):
                    return a
        return None

    absorbed: set[int] = set()
    last_nodes: dict[int, str] = {}
    for erf, node in enumerate(nodes):
        if node.op_type != "Erf" or only_user(node.input[0]) != erf:
            continue
        scaled = producer.get(node.input[0])
        if scaled is None:
            continue
        x = scaled_input(scaled)
        plus_one = only_user(node.output[0])
        one = partner(plus_one, "Add", node.output[0])
        if x is None or plus_one is None or one is None or not scalar_is(one, 1.0):
            continue
        times = only_user(nodes[plus_one].output[0])
        other = partner(times, "Mul", nodes[plus_one].output[0])
        if times is None or other is None:
            continue
        if other == x:  # (x * (1 + erf)) * 0.5
            half = only_user(nodes[times].output[0])
            half_of = nodes[times].output[0]
        else:  # (x * 0.5) * (1 + erf)
            half = producer.get(other) if only_user(other) == times else None
            half_of = x
        constant = partner(half, "Mul", half_of)
        if half is None or constant is None or not scalar_is(constant, 0.5):
            continue
        chain = (scaled, erf, plus_one, times, half)
        absorbed.update(chain)
        last_nodes[max(chain)] = x
    return absorbed, last_nodes


def _scalar(tensor: onnx.TensorProto | None) -> np.ndarray | None:
    """A `Constant`'s one-element value, or None: for any other tensor, including one
    that cannot be read (its node's import reports that)."""
    if tensor is None or math.prod(tensor.dims) != 1:
        return None
    try:
        return tensor_array(tensor, "value")
    except OnnxImportError:
        return None
