"""ONNX files built to hurt the importer: sizes that a few bytes can ask for, inputs the
ONNX spec forbids in folded ops, tensors whose dims disagree with their data, external
data out of bounds, and names no reader wants.

Each is refused through the command line as the error contract says: exit 1, exactly
one `tasoc: error:` line naming the node and what is wrong, nothing on stdout, no
warning (warnings are errors here), and, for the sizes, at once (nothing allocated).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
import onnx
import pytest
from conftest import assert_one_line_error
from onnx import TensorProto, helper, numpy_helper
from onnx_builders import (
    I64,
    F,
    external_model,
    graph_model,
    raw_tensor,
    refused,
    relu_of,
)
from strict_cli import StrictRun, strict_runner

from tasoc.backends.onnx import OnnxExportError, export_onnx, import_onnx
from tasoc.backends.onnx import files as onnx_files
from tasoc.backends.onnx.importer import MAX_NAME_LENGTH
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.limits import TENSOR_BYTES_ENV


@pytest.fixture
def tasoc(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    return strict_runner(capfd)


# ----------------------------------------------------------------------------- helpers


def const(name: str, value: object) -> onnx.NodeProto:
    """A Constant node holding `value` (an array)."""
    return helper.make_node(
        "Constant", [], [name], value=numpy_helper.from_array(np.asarray(value))
    )


def constants(operands: Sequence[object]) -> tuple[list[str], list[onnx.NodeProto]]:
    """Constant nodes `c0`, `c1`, ... holding `operands`, and their names."""
    names = [f"c{i}" for i in range(len(operands))]
    return names, [const(name, value) for name, value in zip(names, operands, strict=True)]


def folded(
    op_type: str, operands: Sequence[object], rank: int = 1, **attrs: object
) -> onnx.ModelProto:
    """A model whose one `op_type` node reads only Constants (`operands`), so that the
    importer folds it; its output has rank `rank`."""
    names, nodes = constants(operands)
    return graph_model([*nodes, helper.make_node(op_type, names, ["y"], **attrs)], {"y": rank})


def on_input(
    op_type: str,
    operands: Sequence[object],
    shape: Sequence[int] = (1, 1, 4, 4),
    opset: int = 17,
    **attrs: object,
) -> onnx.ModelProto:
    """A model whose one `op_type` node reads float input `x` of `shape` and Constants."""
    names, nodes = constants(operands)
    node = helper.make_node(op_type, ["x", *names], ["y"], **attrs)
    return graph_model([*nodes, node], {"y": len(shape)}, {"x": (F, list(shape))}, (), opset)


INT64_ARRAY = np.array([1, 2, 3], np.int64)


# -------------------------------------------------------------- sizes asked for by folding

HUGE_SHAPE = np.array([2**20, 2**20, 2**10], np.int64)
"""2^50 elements: petabytes, asked for by 24 bytes."""

HUGE_MODELS: dict[str, Callable[[], onnx.ModelProto]] = {
    "ConstantOfShape": lambda: folded("ConstantOfShape", [HUGE_SHAPE], rank=3),
    "Range": lambda: folded("Range", [np.int64(0), np.int64(2**40), np.int64(1)], rank=1),
    "Range backwards": lambda: folded(
        "Range", [np.int64(2**40), np.int64(0), np.int64(-1)], rank=1
    ),
    "Expand": lambda: folded("Expand", [np.array([7], np.int64), HUGE_SHAPE], rank=3),
    "Mul broadcast": lambda: folded(
        "Mul", [np.zeros((2**17, 1), np.int64), np.zeros((1, 2**17), np.int64)], rank=2
    ),
    "Where broadcast": lambda: folded(
        "Where",
        [np.ones((2**17, 1), bool), np.zeros((1, 2**17), np.int64), np.int64(1)],
        rank=2,
    ),
    "Gather": lambda: folded(
        "Gather", [np.zeros((2**4, 2**12), np.int64), np.zeros(2**12, np.int64)], rank=2
    ),
    "Concat": lambda: folded("Concat", [np.zeros(2**16, np.int64)] * 3, axis=0),
}


@pytest.mark.parametrize("op", list(HUGE_MODELS))
def test_a_folded_value_over_the_size_limit_is_refused_before_it_is_made(
    tasoc: StrictRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, op: str
) -> None:
    # The limit is lowered for Gather and Concat, whose results the default allows.
    monkeypatch.setenv(TENSOR_BYTES_ENV, str(2**20))
    refused(tasoc, tmp_path / "m.onnx", HUGE_MODELS[op](), op.split()[0], "is over the")


def test_eye_like_of_a_type_larger_than_its_input_is_sized_before_it_is_made(
    tasoc: StrictRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(TENSOR_BYTES_ENV, str(4 * 2**20))
    node = helper.make_node("EyeLike", ["x"], ["y"], dtype=I64)
    model = graph_model([node], {"y": 2}, {"x": (TensorProto.FLOAT16, [1024, 1024])})
    refused(tasoc, tmp_path / "m.onnx", model, "EyeLike node", "over the limit")


def test_an_input_over_the_limits_is_refused(tasoc: StrictRun, tmp_path: Path) -> None:
    relu = helper.make_node("Relu", ["x"], ["y"])
    for shape, fragment in (([2**20, 2**20], "over the limit"), ([2**31], "2^31-1")):
        model = graph_model([relu], {"y": len(shape)}, {"x": (F, shape)})
        refused(tasoc, tmp_path / "m.onnx", model, "input 'x'", fragment)


def test_an_input_with_a_negative_dim_is_refused(tasoc: StrictRun, tmp_path: Path) -> None:
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], {"y": 2}, {"x": (F, [-1, 8])})
    refused(tasoc, tmp_path / "m.onnx", model, "input 'x' has negative dims [-1, 8]")


def test_a_pad_to_a_huge_size_is_refused(tasoc: StrictRun, tmp_path: Path) -> None:
    pads = np.array([0, 0, 2**40, 2**40, 0, 0, 2**40, 2**40], np.int64)
    refused(tasoc, tmp_path / "m.onnx", on_input("Pad", [pads]), "Pad node")


# ------------------------------------------------------------- tensors that lie about size


@pytest.mark.parametrize(
    ("tensor", "fragment"),
    [
        (raw_tensor("w", F, [2**40], b"\0" * 8), "2^31-1"),
        (raw_tensor("w", F, [2**16, 2**16, 2**16], b""), "over the limit"),
        (raw_tensor("w", F, [2], b"\0" * 4096), "holds 4096 bytes of data"),
        (raw_tensor("w", 999, [2], b"\0" * 8), "unknown element type (999)"),
        (
            TensorProto(name="w", data_type=F, dims=[1], float_data=[1.0, 2.0, 3.0]),
            "holds 3 values",
        ),
    ],
    ids=["dims", "dims-no-data", "too-much-data", "type-999", "values"],
)
def test_an_initializer_whose_dims_type_and_data_disagree_is_refused(
    tasoc: StrictRun, tmp_path: Path, tensor: TensorProto, fragment: str
) -> None:
    refused(
        tasoc, tmp_path / "m.onnx", relu_of(tensor, len(tensor.dims)), "initializer 'w'", fragment
    )


def test_a_constant_whose_value_disagrees_with_its_dims_is_refused(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    value = raw_tensor("v", I64, [2], b"\0" * 4096)
    node = helper.make_node("Constant", [], ["y"], value=value)
    model = graph_model([node], {"y": 1})
    refused(tasoc, tmp_path / "m.onnx", model, "Constant node", "value holds 4096 bytes")


@pytest.mark.parametrize(
    ("entries", "dims", "fragment"),
    [
        ({"length": "1000000"}, (4,), "declares 1000000 bytes"),
        ({"length": "8"}, (4,), "declares 8 bytes"),
        ({"offset": "4096"}, (4,), "exceeds file size"),
        ({"offset": "-4"}, (4,), "negative external data offset"),
        ({"offset": "x"}, (4,), "non-integer"),
        ({"length": "16", "comment": "hi"}, (4,), "unknown external data keys 'comment'"),
        ({}, (8,), "truncated"),
        ({}, (2**20, 2**20), "over the limit"),
    ],
    ids=["long", "short", "offset", "negative", "text", "key", "truncated", "huge"],
)
def test_external_data_beyond_its_file_or_its_tensor_is_refused(
    tasoc: StrictRun, tmp_path: Path, entries: dict[str, str], dims: Sequence[int], fragment: str
) -> None:
    result = tasoc("opt", external_model(tmp_path, entries, dims))
    assert_one_line_error(result, "tensor 'w'", fragment)


def test_external_data_without_a_length_reads_only_the_tensor(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    data = np.arange(4, dtype=np.float32).tobytes() + b"\0" * 100
    _, weights = import_onnx(external_model(tmp_path, {}, (4,), data))
    assert weights["w"].tolist() == [0, 1, 2, 3]


def test_model_files_that_no_protobuf_holds_are_not_read(
    tasoc: StrictRun, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "zero.onnx").symlink_to("/dev/zero")
    assert_one_line_error(tasoc("opt", tmp_path / "zero.onnx"), "not a regular file")
    (tmp_path / "dir.onnx").mkdir()
    assert_one_line_error(tasoc("opt", tmp_path / "dir.onnx"), "Is a directory")
    monkeypatch.setattr(onnx_files, "MAX_MODEL_FILE_BYTES", 16)
    refused(tasoc, tmp_path / "m.onnx", relu_of(raw_tensor("w", F, [4], b"\0" * 16)), "2 GiB")


# ----------------------------------------------------------- inputs the spec does not allow

FOLDING_ERRORS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "gather index": (lambda: folded("Gather", [INT64_ARRAY, np.int64(3)], 0), "[-3, 2]"),
    "gather negative": (lambda: folded("Gather", [INT64_ARRAY, np.array([-4])]), "[-3, 2]"),
    "gather axis": (lambda: folded("Gather", [INT64_ARRAY, np.int64(0)], 0, axis=1), "axis 1"),
    "gather float": (
        lambda: folded("Gather", [INT64_ARRAY, np.float32(0)], 0),
        "indices ('c1') must be integers",
    ),
    "concat axis": (lambda: folded("Concat", [INT64_ARRAY] * 2, axis=3), "axis 3 is out of range"),
    "concat shapes": (
        lambda: folded(
            "Concat", [np.zeros((2, 2), np.int64), np.zeros((2, 3), np.int64)], 2, axis=0
        ),
        "differ outside axis 0",
    ),
    "concat ranks": (
        lambda: folded("Concat", [INT64_ARRAY, np.zeros((1, 3), np.int64)], axis=0),
        "one rank",
    ),
    "slice step 0": (
        lambda: folded("Slice", [INT64_ARRAY, [0], [3], [0], np.array([0])]),
        "steps [0] hold a 0",
    ),
    "slice lengths": (
        lambda: folded("Slice", [INT64_ARRAY, [0, 0], [3]]),
        "one entry per sliced axis",
    ),
    "slice axes twice": (
        lambda: folded("Slice", [np.zeros((2, 2), np.int64), [0, 0], [1, 1], [0, -2]], 2),
        "name an axis twice",
    ),
    "range delta 0": (
        lambda: folded("Range", [np.int64(0), np.int64(9), np.int64(0)]),
        "delta is 0",
    ),
    "range vector": (
        lambda: folded("Range", [INT64_ARRAY, np.int64(9), np.int64(1)]),
        "must be scalars",
    ),
    "range types": (
        lambda: folded("Range", [np.int64(0), np.int32(9), np.int64(1)]),
        "one element type",
    ),
    "where shapes": (
        lambda: folded("Where", [np.ones(3, bool), np.zeros(2, np.int64), INT64_ARRAY]),
        "do not broadcast",
    ),
    "where condition": (
        lambda: folded("Where", [INT64_ARRAY, INT64_ARRAY, INT64_ARRAY]),
        "condition ('c0') must be bool",
    ),
    "div by zero": (lambda: folded("Div", [INT64_ARRAY, np.array([1, 0, 1])]), "division by zero"),
    "add types": (lambda: folded("Add", [INT64_ARRAY, np.int32(1)]), "one element type"),
    "cast overflow": (
        lambda: folded("Cast", [np.array([10**6], np.int64)], to=TensorProto.FLOAT16),
        "overflow",
    ),
    "cast type": (
        lambda: folded("Cast", [INT64_ARRAY], to=999),
        "to 999 is not an ONNX element type",
    ),
    "expand negative": (
        lambda: folded("Expand", [INT64_ARRAY, np.array([-1, 3], np.int64)], 2),
        "dims >= 0",
    ),
    "expand shapes": (
        lambda: folded("Expand", [INT64_ARRAY, np.array([2], np.int64)]),
        "do not broadcast",
    ),
    "neg bool": (lambda: folded("Neg", [np.ones(2, bool)]), "must be numbers"),
    "constant of shape negative": (
        lambda: folded("ConstantOfShape", [np.array([-1], np.int64)]),
        "negative dim",
    ),
    "constant of shape float": (
        lambda: folded("ConstantOfShape", [np.array([2.5], np.float32)]),
        "must be integers",
    ),
    "constant of shape fill": (
        lambda: folded(
            "ConstantOfShape",
            [np.array([2], np.int64)],
            value=numpy_helper.from_array(np.zeros(0, np.float32)),
        ),
        "value must hold one element",
    ),
    "unsqueeze to rank 100": (
        lambda: folded("Unsqueeze", [INT64_ARRAY, np.arange(99, dtype=np.int64)], 100),
        "rank 100 is over the largest supported, 64",
    ),
    "unsqueeze twice": (
        lambda: folded("Unsqueeze", [INT64_ARRAY, np.array([0, 0], np.int64)], 3),
        "name an axis twice",
    ),
}


@pytest.mark.parametrize("case", list(FOLDING_ERRORS))
def test_a_folded_op_with_inputs_the_spec_forbids_is_one_error_line(
    tasoc: StrictRun, tmp_path: Path, case: str
) -> None:
    build, fragment = FOLDING_ERRORS[case]
    refused(tasoc, tmp_path / "m.onnx", build(), "node", fragment)


NODE_ERRORS: dict[str, tuple[Callable[[], onnx.ModelProto], str]] = {
    "reshape nan": (
        lambda: on_input("Reshape", [np.array([np.nan], np.float32)], (4,)),
        "integers",
    ),
    "reshape bool": (lambda: on_input("Reshape", [np.array([True])], (1,)), "integers"),
    "squeeze twice": (
        lambda: on_input("Squeeze", [np.array([0, 0], np.int64)], (1, 4)),
        "name an axis twice",
    ),
    "pad short": (lambda: on_input("Pad", [np.array([1], np.int64)]), "two values (begin, end)"),
    "pad fill": (
        lambda: on_input("Pad", [np.zeros(8, np.int64), np.zeros(2, np.float32)]),
        "constant_value must hold one element",
    ),
    "pad axes twice": (
        lambda: on_input(
            "Pad", [np.zeros(4, np.int64), np.float32(0), np.array([2, 2], np.int64)], opset=18
        ),
        "name an axis twice",
    ),
    "dropout flags": (
        lambda: on_input("Dropout", [np.float32(0.5), np.array([True, False])], (4,)),
        "training_mode must be one boolean",
    ),
    "max pool stride 0": (
        lambda: on_input("MaxPool", [], kernel_shape=[1, 1], strides=[0, 0]),
        "two positive integers",
    ),
    "average pool all padding": (
        lambda: on_input("AveragePool", [], kernel_shape=[1, 1], pads=[3, 3, 3, 3]),
        "no input element",
    ),
    "auto_pad not utf-8": (
        lambda: on_input("MaxPool", [], kernel_shape=[2, 2], auto_pad=b"\xff"),
        "auto_pad '\\xff' is not NOTSET",
    ),
    "cast type": (lambda: on_input("Cast", [], (4,), to=999), "to 999 is not an ONNX element type"),
    "split parts": (lambda: on_input("Split", [], (4,), 18, num_outputs=0), "num_outputs 0"),
}


@pytest.mark.parametrize("case", list(NODE_ERRORS))
def test_an_op_with_operands_the_spec_forbids_is_one_error_line(
    tasoc: StrictRun, tmp_path: Path, case: str
) -> None:
    build, fragment = NODE_ERRORS[case]
    refused(tasoc, tmp_path / "m.onnx", build(), "node", fragment)


@pytest.mark.parametrize("divisor", [0.0, 3.4e38], ids=["zero", "huge"])
def test_division_by_a_constant_zero_or_huge_imports_without_a_warning(
    tasoc: StrictRun, tmp_path: Path, divisor: float
) -> None:
    """x / 0 is x * (1 / 0): the same inf or nan, so it imports, and computing 1 / 0
    prints nothing; 1 / 3.4e38 underflows to a subnormal, which is no error either."""
    path = tmp_path / "m.onnx"
    onnx.save(on_input("Div", [np.full(4, divisor, np.float32)], (4,)), path)
    result = tasoc("opt", path)
    assert result.code == 0 and result.err == "", result


def test_division_by_a_subnormal_constant_is_refused(tasoc: StrictRun, tmp_path: Path) -> None:
    """1 / 1e-45 overflows float32: x * inf is not x / 1e-45 for small x."""
    model = on_input("Div", [np.full(4, 1e-45, np.float32)], (4,))
    refused(tasoc, tmp_path / "m.onnx", model, "Div node", "overflow encountered")


# ------------------------------------------------------------------------------ names


def test_very_long_initializer_names_become_short_distinct_ir_names(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    """Two 100,000-character names sharing a start: the IR names are at most
    MAX_NAME_LENGTH long and differ, the `.npz` beside the text holds them, and the
    program runs with it; the ONNX names survive nowhere a reader has to see them."""
    names = ["w" * 100_000 + "a", "w" * 100_000 + "b"]
    weights = [numpy_helper.from_array(np.ones(3, np.float32), name) for name in names]
    add = helper.make_node("Add", names, ["y"])
    path, text = tmp_path / "m.onnx", tmp_path / "m.mlir"
    onnx.save(graph_model([add], {"y": 1}, None, weights), path)
    assert tasoc("opt", path, "-o", text).code == 0
    with np.load(tmp_path / "m.npz") as stored:
        ir_names = stored.files
    assert len(set(ir_names)) == 2
    assert all(len(name) <= MAX_NAME_LENGTH for name in ir_names)
    result = tasoc("run", text)
    assert result.code == 0, result


def test_a_message_quotes_a_hostile_name_short_and_on_one_line(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    model = folded("Gather", [INT64_ARRAY, np.int64(7)], 0)
    model.graph.node[-1].name = "n\n\x1b[2J" * 50_000
    line = refused(tasoc, tmp_path / "m.onnx", model, "Gather node 'n\\n\\x1b[2J", "...").err
    assert len(line) < 300


def test_onnxruntime_warnings_do_not_reach_stderr(tasoc: StrictRun, tmp_path: Path) -> None:
    """onnxruntime warns about an unused initializer on the process's stderr; `tasoc run
    --check-onnxruntime` keeps stderr for its own lines."""
    unused = numpy_helper.from_array(np.ones(3, np.float32), "unused")
    relu = helper.make_node("Relu", ["x"], ["y"])
    path = tmp_path / "m.onnx"
    model = graph_model([relu], {"y": 1}, {"x": (F, [3])}, [unused])
    model.graph.output[0].type.tensor_type.elem_type = F  # onnxruntime wants it stated
    onnx.save(model, path)
    result = tasoc("run", path, "--check-onnxruntime")
    assert result.code == 0 and result.err == "", result


def test_export_refuses_a_weight_beyond_its_type_without_a_warning() -> None:
    g = GraphBuilder()
    module = g.build(g.add(g.input("x", (2,), "f16"), g.param("w", (2,), "f16")))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        with pytest.raises(OnnxExportError, match="'w' holds values beyond the range of f16"):
            export_onnx(module, {"w": np.array([1e10, 1.0])})


def test_deeply_nested_metadata_is_ignored_like_any_record_that_is_not_the_exporters(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    model = graph_model([helper.make_node("Relu", ["x"], ["y"])], {"y": 1}, {"x": (F, [3])})
    deep = {"tasoc.argument_order": "[" * 100_000, "tasoc.node_forms": '{"a": ' * 50_000}
    helper.set_model_props(model, deep)
    path = tmp_path / "m.onnx"
    onnx.save(model, path)
    result = tasoc("opt", path)
    assert result.code == 0 and result.err == "", result
