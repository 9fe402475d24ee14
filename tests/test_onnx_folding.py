"""Constant folding at import, and the errors of what cannot be known.

Every folded op is checked the same way: a model whose one node (or chain) reads only
values known at import time imports to constant ops alone, and its values equal
onnxruntime's on the same model. Float inputs are computed from integer Constants
(`Q`), since float Constants and weights are program data, whose ops stay ops (also
checked here, with the late folding of their results where a reader needs them). The
errors go through the `tasoc` command line as the error contract says: one
`tasoc: error:` line naming the node, the input and where its value comes from.
"""

from __future__ import annotations

import itertools
import re
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import onnx
import onnxruntime as ort
import pytest
from conftest import assert_one_line_error
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import external_model, refused
from strict_cli import StrictRun, strict_runner

from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import export_onnx, import_onnx
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import arg_infos, entry_function

ort.set_default_logger_severity(3)

F, F16, F64 = TensorProto.FLOAT, TensorProto.FLOAT16, TensorProto.DOUBLE
I32, I64, BOOL = TensorProto.INT32, TensorProto.INT64, TensorProto.BOOL

CONSTANT_OPS = {"constant", "ones", "zeros", "broadcast"}
"""The ops a folded value may leave: what makes it (a broadcast of its base)."""


@pytest.fixture
def tasoc(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    return strict_runner(capfd)


# ----------------------------------------------------------------------------- helpers


@dataclass(frozen=True)
class Q:
    """A float input computed at import time from integer Constants (values / 4, exact
    in every float type), so that it is no program data."""

    values: object
    to: int = F


def operand_nodes(name: str, value: object) -> list[onnx.NodeProto]:
    """Nodes making `name`: a Constant for an array, `Cast(n) / Cast(4)` for a `Q`."""
    if not isinstance(value, Q):
        tensor = numpy_helper.from_array(np.asarray(value), name)
        return [helper.make_node("Constant", [], [name], value=tensor)]
    numerator = np.round(np.asarray(value.values, np.float64) * 4).astype(np.int64)
    return [
        *operand_nodes(f"{name}.n", numerator),
        *operand_nodes(f"{name}.d", np.int64(4)),
        helper.make_node("Cast", [f"{name}.n"], [f"{name}.nf"], to=value.to),
        helper.make_node("Cast", [f"{name}.d"], [f"{name}.df"], to=value.to),
        helper.make_node("Div", [f"{name}.nf", f"{name}.df"], [name]),
    ]


def model_of(
    nodes: Sequence[onnx.NodeProto],
    outputs: Sequence[str] | dict[str, tuple[int, int]] = ("y",),
    inputs: dict[str, tuple[int, Sequence[int]]] | None = None,
    initializers: Sequence[TensorProto] = (),
    opset: int = 17,
) -> onnx.ModelProto:
    """A model of `nodes`. Outputs given by name get the types and shapes ONNX shape
    inference states (onnxruntime wants them); given as (element type, rank), those
    with unknown dims (for a model that inference, like tasoc, refuses)."""
    declared = outputs if isinstance(outputs, dict) else dict.fromkeys(outputs, (0, 0))
    graph = helper.make_graph(
        list(nodes),
        "folding",
        [helper.make_tensor_value_info(n, t, s) for n, (t, s) in (inputs or {}).items()],
        [helper.make_tensor_value_info(n, t, [None] * r) for n, (t, r) in declared.items()],
        list(initializers),
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    if isinstance(outputs, dict):
        return model
    for output in model.graph.output:
        output.type.tensor_type.ClearField("shape")
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def one_op(
    op_type: str,
    operands: Sequence[object],
    opset: int = 17,
    rank: int | None = None,
    **attrs: object,
) -> onnx.ModelProto:
    """A model whose one `op_type` node reads `operands` (each made by `operand_nodes`;
    None for an absent optional input); its output `y` of `rank` when given (and then
    not inferred)."""
    names = ["" if value is None else f"in{i}" for i, value in enumerate(operands)]
    nodes = [
        node
        for name, value in zip(names, operands, strict=True)
        if value is not None
        for node in operand_nodes(name, value)
    ]
    outputs = ("y",) if rank is None else {"y": (0, rank)}
    node = helper.make_node(op_type, names, ["y"], **attrs)
    return model_of([*nodes, node], outputs, opset=opset)


def ops_of(module: object) -> list[str]:
    block = entry_function(module).body.block
    return [op.name.removeprefix("graph.") for op in block.ops if op.name != "func.return"]


def feeds_of(model: onnx.ModelProto) -> dict[str, np.ndarray]:
    """Random activations for the model's inputs (floats; folding reads only shapes)."""
    rng = np.random.default_rng(0)
    feeds = {}
    for info in model.graph.input:
        dims = [d.dim_value for d in info.type.tensor_type.shape.dim]
        dtype = onnx.helper.tensor_dtype_to_np_dtype(info.type.tensor_type.elem_type)
        feeds[info.name] = rng.standard_normal(dims).astype(dtype)
    return feeds


def agrees_with_onnxruntime(model: onnx.ModelProto, module: object, weights: dict) -> None:
    """`module` (imported from `model`) computes what onnxruntime computes on `model`:
    bit for bit for integers and bools, to float rounding otherwise."""
    feeds = feeds_of(model)
    infos = arg_infos(entry_function(module))
    args = [weights[i.name] if i.is_param else feeds[i.name] for i in infos]
    ours = run_reference(module, args)
    theirs = ort.InferenceSession(model.SerializeToString()).run(None, feeds)
    for got, expected in zip(ours, theirs, strict=True):
        got = np.asarray(got)
        assert got.shape == expected.shape and got.dtype == expected.dtype, (got, expected)
        if np.issubdtype(expected.dtype, np.floating):
            rtol = 1e-3 if expected.dtype == np.float16 else 1e-5
            np.testing.assert_allclose(got, expected, rtol=rtol, atol=0)
        else:
            np.testing.assert_array_equal(got, expected)


def folds_to_constants(model: onnx.ModelProto) -> None:
    """Import `model`: nothing but constant ops is left, and the values are
    onnxruntime's."""
    module, weights = import_onnx(model)
    assert set(ops_of(module)) <= CONSTANT_OPS, ops_of(module)
    agrees_with_onnxruntime(model, module, weights)


# ------------------------------------------------------------------ every folded op

INTS = np.array([[7, -7, 3], [-2, 0, 5]], np.int64)
POSITIVE = np.array([[3, 2, 5], [4, 1, 6]], np.int64)
QUARTERS = Q([[1.25, -2.5, 0.75], [3.0, -0.25, 2.0]])
BOOLS = np.array([[True, False, True], [False, False, True]])

FOLDED = {
    "Add": one_op("Add", [INTS, np.int64(3)]),
    "Sub float": one_op("Sub", [QUARTERS, Q(0.5)]),
    "Mul int32": one_op("Mul", [INTS.astype(np.int32), np.int32(-2)]),
    "Div truncates": one_op("Div", [INTS, np.array([2, -2, 2], np.int64)]),
    "Div float": one_op("Div", [QUARTERS, Q([2.0, -0.5, 4.0])]),
    "Div float by zero": one_op("Div", [Q([1.0, -1.0]), Q(0.0)]),
    "Mod": one_op("Mod", [INTS, np.array([3, -3, 2], np.int64)]),
    "Mod fmod": one_op("Mod", [QUARTERS, Q(0.75)], fmod=1),
    "Neg": one_op("Neg", [QUARTERS]),
    "Abs": one_op("Abs", [INTS]),
    "Floor": one_op("Floor", [QUARTERS]),
    "Ceil": one_op("Ceil", [QUARTERS]),
    "Sqrt": one_op("Sqrt", [Q([[4.0, 2.25, 0.25]])]),
    "Pow": one_op("Pow", [QUARTERS, Q(2.0)]),
    "Pow int": one_op("Pow", [POSITIVE, np.int64(3)]),
    "Reciprocal": one_op("Reciprocal", [Q([[4.0, -0.5, 0.0]])]),
    "Max": one_op("Max", [INTS, np.int64(1), np.array([[0], [4]], np.int64)]),
    "Min": one_op("Min", [QUARTERS, Q(0.5)]),
    "Sum": one_op("Sum", [QUARTERS, Q([1.0, 2.0, 3.0]), Q(0.25)]),
    "Equal": one_op("Equal", [INTS, np.int64(0)]),
    "Less": one_op("Less", [QUARTERS, Q(1.0)]),
    "Greater": one_op("Greater", [INTS, np.array([0, 0, 4], np.int64)]),
    "LessOrEqual": one_op("LessOrEqual", [INTS, np.int64(3)]),
    "GreaterOrEqual": one_op("GreaterOrEqual", [QUARTERS, Q(0.75)]),
    "Not": one_op("Not", [BOOLS]),
    "And": one_op("And", [BOOLS, np.array([True, True, False])]),
    "Or": one_op("Or", [BOOLS, np.array([[False], [True]])]),
    "Xor": one_op("Xor", [BOOLS, np.bool_(True)]),
    "Where": one_op("Where", [BOOLS, QUARTERS, Q(-1.0)]),
    "Cast to float": one_op("Cast", [INTS], to=F),
    "Cast to int": one_op("Cast", [QUARTERS], to=I64),
    "Cast to bool": one_op("Cast", [QUARTERS], to=BOOL),
    "Cast bool to float16": one_op("Cast", [BOOLS], to=F16),
    "Cast to double": one_op("Cast", [INTS], to=F64),
    "ReduceProd": one_op("ReduceProd", [POSITIVE], axes=[1], keepdims=0),
    "ReduceProd 18": one_op("ReduceProd", [POSITIVE, np.array([0], np.int64)], opset=18),
    "ReduceSum": one_op("ReduceSum", [QUARTERS, np.array([-1], np.int64)], opset=13),
    "ReduceMax": one_op("ReduceMax", [INTS], keepdims=0),
    "ReduceMin 20": one_op("ReduceMin", [QUARTERS, np.array([0], np.int64)], opset=20),
    "ReduceMean": one_op("ReduceMean", [QUARTERS], axes=[0]),
    "ReduceSum noop": one_op(
        "ReduceSum", [INTS, np.zeros(0, np.int64)], opset=13, noop_with_empty_axes=1
    ),
    "Range": one_op("Range", [np.int64(10), np.int64(2), np.int64(-3)]),
    "Range float": one_op("Range", [Q(0.5), Q(3.0), Q(0.75)]),
    "Range float16": one_op("Range", [Q(1.0, F16), Q(9.0, F16), Q(2.5, F16)], opset=27),
    "ConstantOfShape": one_op(
        "ConstantOfShape",
        [np.array([2, 3], np.int64)],
        value=numpy_helper.from_array(np.array([7], np.int32)),
    ),
    "Expand": one_op("Expand", [Q([[1.5], [2.5]]), np.array([2, 2, 3], np.int64)]),
    "Tile": one_op("Tile", [QUARTERS, np.array([2, 1], np.int64)]),
    "Trilu": one_op("Trilu", [QUARTERS, np.int64(1)], upper=0),
    "Trilu upper": one_op("Trilu", [INTS, None]),
    "Squeeze": one_op("Squeeze", [Q([[1.0, 2.0]]), np.array([0], np.int64)]),
    "Unsqueeze": one_op("Unsqueeze", [QUARTERS, np.array([1], np.int64)]),
    "Concat": one_op("Concat", [QUARTERS, Q([[9.0, 8.0, 7.0]])], axis=0),
    "Gather": one_op("Gather", [QUARTERS, np.array([2, 0], np.int64)], axis=1),
    "Slice": one_op(
        "Slice",
        [QUARTERS, np.array([2], np.int64), np.array([-9], np.int64), None, np.array([-1])],
    ),
    "Transpose": one_op("Transpose", [QUARTERS], perm=[1, 0]),
    "Reshape": one_op("Reshape", [QUARTERS, np.array([3, -1], np.int64)]),
    "Flatten": one_op("Flatten", [Q([[[1.0], [2.0]]])], axis=2),
    "Identity": one_op("Identity", [QUARTERS]),
}


@pytest.mark.parametrize("case", list(FOLDED))
def test_each_folded_op_leaves_a_constant_equal_to_onnxruntimes(case: str) -> None:
    folds_to_constants(FOLDED[case])


def test_size_and_shape_of_a_run_time_input_fold() -> None:
    nodes = [
        helper.make_node("Size", ["x"], ["n"]),
        helper.make_node("Shape", ["x"], ["s"], start=-2),
        helper.make_node("ReduceProd", ["s"], ["p"], keepdims=0),
        helper.make_node("Sub", ["n", "p"], ["y"]),
    ]
    folds_to_constants(model_of(nodes, inputs={"x": (F, [2, 3, 4])}))


# --------------------------------------------------------------- chains real exports write


def test_the_attention_scale_from_a_shape_is_a_division_by_a_known_scalar() -> None:
    """Div(q, Sqrt(Cast(Gather(Shape(q), 3), FLOAT))), as PyTorch writes 1/sqrt(d)."""
    nodes = [
        helper.make_node("Shape", ["q"], ["shape"]),
        *operand_nodes("three", np.int64(3)),
        helper.make_node("Gather", ["shape", "three"], ["d"]),
        helper.make_node("Cast", ["d"], ["df"], to=F),
        helper.make_node("Sqrt", ["df"], ["root"]),
        helper.make_node("Div", ["q", "root"], ["y"]),
    ]
    model = model_of(nodes, inputs={"q": (F, [1, 2, 3, 16])})
    module, weights = import_onnx(model)
    assert ops_of(module) == ["constant", "scale"]
    assert "2.500000e-01" in str(module)
    agrees_with_onnxruntime(model, module, weights)


def test_a_causal_mask_from_range_and_shapes_folds_to_one_value() -> None:
    """The mask of a decoder, from the sequence length: Range, Unsqueeze, Less, Where,
    Expand (large, so a broadcast of its base rather than 8192 stored elements)."""
    nodes = [
        helper.make_node("Shape", ["scores"], ["shape"]),
        *operand_nodes("last", np.int64(-1)),
        helper.make_node("Gather", ["shape", "last"], ["t"]),
        *operand_nodes("zero", np.int64(0)),
        *operand_nodes("one", np.int64(1)),
        helper.make_node("Range", ["zero", "t", "one"], ["positions"]),
        *operand_nodes("axis0", np.array([0], np.int64)),
        *operand_nodes("axis1", np.array([1], np.int64)),
        helper.make_node("Unsqueeze", ["positions", "axis0"], ["row"]),
        helper.make_node("Unsqueeze", ["positions", "axis1"], ["column"]),
        helper.make_node("Less", ["row", "column"], ["future"]),
        helper.make_node("Not", ["future"], ["allowed"]),
        *operand_nodes("masked", Q(-1e4)),
        *operand_nodes("kept", Q(0.0)),
        helper.make_node("Where", ["allowed", "kept", "masked"], ["mask"]),
        helper.make_node("Expand", ["mask", "shape"], ["full"]),
        helper.make_node("Add", ["scores", "full"], ["y"]),
    ]
    model = model_of(nodes, inputs={"scores": (F, [2, 4, 32, 32])})
    module, weights = import_onnx(model)
    assert sorted(ops_of(module)) == ["add", "broadcast", "constant"]
    assert not weights
    agrees_with_onnxruntime(model, module, weights)


def test_configuring_inputs_computed_from_constants_are_known_to_every_handler() -> None:
    """Reshape's target, Unsqueeze's axes, Slice's ends, ReduceSum's axes, Split's sizes,
    Tile's repeats and Expand's shape, each computed from shapes and constants."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Size", ["x"], ["size"]),
        *operand_nodes("two", np.int64(2)),
        *operand_nodes("one", np.int64(1)),
        *operand_nodes("first", np.array([0], np.int64)),
        helper.make_node("Gather", ["shape", "first"], ["batch"]),
        helper.make_node("Div", ["size", "batch"], ["rest"]),  # [12]
        helper.make_node("Concat", ["batch", "rest"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["flat"]),  # [2, 12]
        helper.make_node("Range", ["one", "two", "one"], ["axes"]),  # [1]
        helper.make_node("Unsqueeze", ["flat", "axes"], ["flat3"]),  # [2, 1, 12]
        helper.make_node("Sub", ["rest", "two"], ["ends"]),  # [10]
        *operand_nodes("starts", np.array([2], np.int64)),
        *operand_nodes("minus1", np.array([-1], np.int64)),
        helper.make_node("Slice", ["flat3", "starts", "ends", "minus1"], ["cut"]),  # [2,1,8]
        helper.make_node("Mul", ["axes", "two"], ["sum_axes"]),  # [2]
        helper.make_node("ReduceSum", ["cut", "sum_axes"], ["summed"]),  # [2, 1, 1]
        helper.make_node("Concat", ["batch", "batch"], ["sizes"], axis=0),  # [2, 2]
        helper.make_node("Tile", ["flat3", "shape"], ["tiled"]),  # [4, 3, 48]
        helper.make_node("Split", ["tiled", "sizes"], ["a", "b"], axis=0),
        helper.make_node("Expand", ["summed", "shape"], ["y"]),  # [2, 3, 4]
    ]
    outputs = {"y": (F, 3), "a": (F, 3), "b": (F, 3)}
    model = model_of(nodes, outputs, inputs={"x": (F, [2, 3, 4])}, opset=13)
    module, weights = import_onnx(model)
    assert "reshape" in ops_of(module) and "split" in ops_of(module)
    agrees_with_onnxruntime(model, module, weights)


# ------------------------------------------------------------------ program data


def test_ops_on_weights_and_float_constants_stay_ops() -> None:
    """A weight stays the weight (the transpose of it an op), and float constants stay
    constant ops computed on: folding them would turn parameters into new values."""
    w = numpy_helper.from_array(np.arange(6, dtype=np.float32).reshape(2, 3), "w")
    nodes = [
        helper.make_node("Transpose", ["w"], ["wt"]),
        helper.make_node("MatMul", ["x", "wt"], ["h"]),
        *operand_nodes("c", np.array([1.5, 2.0], np.float32)),
        *operand_nodes("d", np.array([0.5, 0.5], np.float32)),
        helper.make_node("Add", ["c", "d"], ["cd"]),
        helper.make_node("Mul", ["h", "cd"], ["y"]),
    ]
    model = model_of(nodes, inputs={"x": (F, [4, 3])}, initializers=[w])
    module, weights = import_onnx(model)
    assert list(weights) == ["w"]
    assert {"transpose", "matmul", "add", "mul"} <= set(ops_of(module))
    agrees_with_onnxruntime(model, module, weights)


def test_results_of_ops_on_float_constants_are_folded_where_a_reader_needs_them() -> None:
    """Reshape's target from Cast(Add(float constant, float constant)): the add and the
    cast are computed at import for the reshape, and their ops, read by nothing, go."""
    nodes = [
        *operand_nodes("a", np.array([2.0, 3.0], np.float32)),
        *operand_nodes("b", np.array([1.0, 1.0], np.float32)),
        helper.make_node("Add", ["a", "b"], ["sum"]),
        helper.make_node("Cast", ["sum"], ["target"], to=I64),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = model_of(nodes, inputs={"x": (F, [12])})
    module, weights = import_onnx(model)
    assert ops_of(module) == ["reshape"]
    agrees_with_onnxruntime(model, module, weights)


def test_a_long_chain_on_float_constants_is_folded_late_without_recursion() -> None:
    """A reader needing the end of 3000 ops on a float constant gets it (a recursive
    evaluation would overflow Python's stack), and the 3000 ops go."""
    chain = [f"v{i}" for i in range(3001)]
    nodes = [
        *operand_nodes(chain[0], np.array([2.0, 3.0], np.float32)),
        *(helper.make_node("Neg", [a], [b]) for a, b in itertools.pairwise(chain)),
        helper.make_node("Abs", [chain[-1]], ["positive"]),
        helper.make_node("Cast", ["positive"], ["target"], to=I64),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    model = model_of(nodes, {"y": (F, 2)}, inputs={"x": (F, [6])})
    module, _ = import_onnx(model)
    assert ops_of(module) == ["reshape"]


def test_a_program_with_constant_only_ops_round_trips() -> None:
    """What tasoc exported comes back op for op: ops on constants and on weights are
    not folded away."""
    g = GraphBuilder()
    x, w = g.input("x", (2, 3)), g.param("w", (3, 2))
    summed = g.add(g.ones((2, 3), "f32"), g.zeros((2, 3), "f32"))
    y = g.matmul(g.add(x, summed), g.transpose(g.transpose(w, (1, 0)), (1, 0)))
    module = g.build(y)
    weights = {"w": np.ones((3, 2), np.float32)}
    back, values = import_onnx(export_onnx(module, weights))
    assert ops_of(back) == ops_of(module)
    assert list(values) == ["w"]


# ------------------------------------------------------------------------ bad input


def test_a_configuring_input_computed_from_a_graph_input_names_it(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    nodes = [
        helper.make_node("Abs", ["s"], ["positive"], name="abs"),
        helper.make_node("Reshape", ["x", "positive"], ["y"], name="r"),
    ]
    model = model_of(nodes, inputs={"x": (F, [2, 3]), "s": (I64, [2])})
    refused(
        tasoc,
        tmp_path / "m.onnx",
        model,
        "Reshape node 'r' (opset 17): shape ('positive') must be known at import time",
        "from the values of graph input 's' (through Abs node 'abs')",
    )


def test_a_configuring_input_from_an_op_tasoc_does_not_fold_names_the_op(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Split", ["shape"], ["a", "b"], name="sp", axis=0, num_outputs=2),
        helper.make_node("Concat", ["b", "a"], ["target"], name="cat", axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"], name="r"),
    ]
    model = model_of(nodes, inputs={"x": (F, [2, 3])}, opset=18)
    refused(
        tasoc,
        tmp_path / "m.onnx",
        model,
        "Reshape node 'r' (opset 18): shape ('target') must be known at import time, but "
        "it is computed at run time by Split node 'sp' (through Concat node 'cat'), an op "
        "tasoc does not fold (Split)",
    )


@pytest.mark.parametrize(
    ("declared", "fix"),
    [(["batch", 3], "x=1x3"), ([-1, 3], "x=1x3"), ([2, "n", None], "x=2x1x1")],
    ids=["named", "negative", "unnamed"],
)
def test_a_dynamic_input_error_spells_the_input_shape_that_fixes_it(
    tasoc: StrictRun, tmp_path: Path, declared: list, fix: str
) -> None:
    path = tmp_path / "m.onnx"
    relu = helper.make_node("Relu", ["x"], ["y"])
    graph = helper.make_graph(
        [relu],
        "g",
        [helper.make_tensor_value_info("x", F, declared)],
        [helper.make_tensor_value_info("y", F, [None] * len(declared))],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_one_line_error(tasoc("opt", path), "input 'x' has", f"e.g. --input-shape {fix} (")
    result = tasoc("opt", path, "--input-shape", fix)
    assert result.code == 0 and result.err == "", result


def test_a_dynamic_input_with_an_awkward_name_is_spelled_for_the_shell(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    path = tmp_path / "m.onnx"
    relu = helper.make_node("Relu", ["input ids"], ["y"])
    graph = helper.make_graph(
        [relu],
        "g",
        [helper.make_tensor_value_info("input ids", F, ["batch"])],
        [helper.make_tensor_value_info("y", F, [None])],
    )
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_one_line_error(tasoc("opt", path), "--input-shape 'input ids=1'")
    assert tasoc("opt", path, "--input-shape", "input ids=1").code == 0


UNSUPPORTED = {
    "unsupported op": (
        helper.make_node("Det", ["x"], ["y"], name="n"),
        "unsupported ONNX op 'Det'",
    ),
    "other domain": (
        helper.make_node("Relu", ["x"], ["y"], name="n", domain="com.microsoft"),
        "unsupported ONNX op 'Relu' from domain 'com.microsoft'",
    ),
    "handler attribute": (
        helper.make_node("Softmax", ["x"], ["y"], name="n", axis=5),
        "axis 5 is out of range",
    ),
}


@pytest.mark.parametrize("case", list(UNSUPPORTED))
def test_an_unsupported_op_or_attribute_names_node_op_and_opset(
    tasoc: StrictRun, tmp_path: Path, case: str
) -> None:
    node, fragment = UNSUPPORTED[case]
    graph = helper.make_graph(
        [node],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", F, [None, None])],
    )
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("com.microsoft", 1)]
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=opsets), path)
    line = assert_one_line_error(tasoc("opt", path), fragment)
    assert re.search(rf"{node.op_type} node 'n' \(opset 17\): ", line), line


FOLDING_ERRORS = {
    "mod by zero": (one_op("Mod", [INTS, np.int64(0)]), "integer modulo by zero"),
    "mod fmod": (one_op("Mod", [INTS, np.int64(2)], fmod=2), "fmod must be 0 or 1"),
    "mod float fmod 0": (one_op("Mod", [QUARTERS, Q(1.0)]), "fmod must be 1 for floats"),
    "pow negative": (one_op("Pow", [INTS, np.int64(-1)]), "negative integer power -1"),
    "sqrt of an int": (one_op("Sqrt", [INTS]), "X ('in0') must be floats, got int64"),
    "sqrt of -1": (one_op("Sqrt", [Q(-1.0)]), "invalid value encountered in sqrt"),
    "and of ints": (one_op("And", [INTS, INTS]), "A ('in0') must be bool, got int64"),
    "max types": (
        one_op("Max", [INTS, np.int32(1)]),
        "the inputs 'in0' and 'in1' must have one element type (T), got int64 and int32",
    ),
    "tile repeats": (one_op("Tile", [INTS, np.array([1], np.int64)], rank=2), "one count >= 0"),
    "tile negative": (
        one_op("Tile", [INTS, np.array([1, -1], np.int64)], rank=2),
        "one count >= 0",
    ),
    "trilu rank 1": (one_op("Trilu", [np.arange(3)], rank=1), "rank >= 2"),
    "transpose perm": (one_op("Transpose", [INTS], rank=2, perm=[0, 0]), "not a permutation"),
    "reduce axes twice": (
        one_op("ReduceSum", [INTS, np.array([1, -1], np.int64)], opset=13),
        "name an axis twice",
    ),
    "reduce mean empty": (
        one_op("ReduceMean", [np.zeros((2, 0)), np.array([1], np.int64)], opset=18),
        "the mean over an empty axis",
    ),
    "range infinite": (one_op("Range", [Q(0.0), Q(1.0), Q(0.0)]), "delta is 0"),
    "cast nan to int": (
        model_of(
            [
                *operand_nodes("zero", Q(0.0)),
                helper.make_node("Div", ["zero", "zero"], ["nan"]),
                helper.make_node("Cast", ["nan"], ["y"], to=I64),
            ]
        ),
        "invalid value encountered",
    ),
}


@pytest.mark.parametrize("case", list(FOLDING_ERRORS))
def test_a_folded_op_the_spec_leaves_undefined_is_one_error_line(
    tasoc: StrictRun, tmp_path: Path, case: str
) -> None:
    model, fragment = FOLDING_ERRORS[case]
    refused(tasoc, tmp_path / "m.onnx", model, " node ", fragment)


def test_a_tile_to_a_huge_size_is_refused_before_it_is_made(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    model = one_op("Tile", [INTS, np.array([2**20, 2**20], np.int64)])
    refused(tasoc, tmp_path / "m.onnx", model, "Tile node", "over the limit")


def symlinked_model(directory: Path, target: str, link: str, location: str) -> Path:
    """`external_model` in `directory/models`, its data at `location`, where `link`
    (in the model's folder) is a symbolic link to `target` (relative to `directory`)."""
    folder = directory / "models"
    folder.mkdir()
    (directory / "outside").mkdir()
    (directory / "outside" / "w.bin").write_bytes(b"\0" * 16)
    (folder / link).symlink_to(directory / target)
    return external_model(folder, {"location": location})


@pytest.mark.parametrize(
    ("location", "fragment"),
    [
        ("../w.bin", "a path through '..'"),
        ("sub/../../w.bin", "a path through '..'"),
        ("/etc/passwd", "an absolute path"),
        ("linked.bin", "which a symbolic link takes out of the model's folder"),
        ("linked/w.bin", "which a symbolic link takes out of the model's folder"),
    ],
    ids=["parent", "nested-parent", "absolute", "file-link", "folder-link"],
)
def test_external_data_outside_the_models_folder_is_refused_before_reading(
    tasoc: StrictRun, tmp_path: Path, location: str, fragment: str
) -> None:
    if location.startswith("linked"):
        target = "outside/w.bin" if location == "linked.bin" else "outside"
        path = symlinked_model(tmp_path, target, location.split("/")[0], location)
    else:
        path = external_model(tmp_path, {"location": location})
    line = assert_one_line_error(tasoc("opt", path), "tensor 'w'", fragment)
    assert f"keeps its data at '{location}'" in line


def test_external_data_without_a_location_is_refused(tasoc: StrictRun, tmp_path: Path) -> None:
    path = external_model(tmp_path, {"location": ""})
    assert_one_line_error(tasoc("opt", path), "tensor 'w'", "names no location")


def test_a_loop_of_symbolic_links_is_no_location_in_the_folder(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    (tmp_path / "a.bin").symlink_to(tmp_path / "b.bin")
    (tmp_path / "b.bin").symlink_to(tmp_path / "a.bin")
    path = external_model(tmp_path, {"location": "a.bin"})
    assert_one_line_error(tasoc("opt", path), "tensor 'w'", "a symbolic link takes out")


@pytest.mark.parametrize(
    ("elem_type", "dims", "fragment"),
    [
        (I64, [2, 3], "declared INT64 [2, 3], but the import infers FLOAT [2, 3]"),
        (F, [3, 2], "declared FLOAT [3, 2], but the import infers FLOAT [2, 3]"),
        (F, [2, 3, 1], "declared FLOAT [2, 3, 1], but the import infers FLOAT [2, 3]"),
    ],
    ids=["type", "shape", "rank"],
)
def test_an_output_declared_other_than_it_computes_is_one_error_line(
    tasoc: StrictRun, tmp_path: Path, elem_type: int, dims: list[int], fragment: str
) -> None:
    graph = helper.make_graph(
        [helper.make_node("Relu", ["x"], ["y"])],
        "g",
        [helper.make_tensor_value_info("x", F, [2, 3])],
        [helper.make_tensor_value_info("y", elem_type, dims)],
    )
    path = tmp_path / "m.onnx"
    onnx.save(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), path)
    assert_one_line_error(tasoc("opt", path), "output 'y' is", fragment)
