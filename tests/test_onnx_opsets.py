"""ONNX opsets: every opset the installed `onnx` ships imports.

Models below MIN_OPSET are upgraded with `onnx.version_converter` (and the driver says
so in a `tasoc: note:` line); opsets MIN_OPSET..MAX_OPSET import directly; above the
newest the installed `onnx` knows is one error line. `OP_VERSIONS` declares which
versions of each op's schema the importer implements, and is checked here against the
installed `onnx`'s schemas, so that an onnx release adding a version of a handled op
fails here rather than importing it with an older version's semantics.

The same small CNN is built at several opsets, spelling its configuring operands the
way each opset does (`pads`, `axes`, `split` as attributes before opset 11 or 13, as
inputs after), and its numbers are compared with onnxruntime's on the model as built.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import onnx.defs
import onnxruntime
import pytest
from conftest import assert_one_line_error
from onnx import TensorProto, helper, numpy_helper

from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import importer
from tasoc.backends.onnx.folding import FOLDERS
from tasoc.backends.onnx.handlers import HANDLERS
from tasoc.backends.onnx.importer import MAX_OPSET, MIN_OPSET, OP_VERSIONS, import_onnx
from tasoc.ir.program import arg_infos, entry_function

NEWEST = onnx.defs.onnx_opset_version()
"""The newest default-domain opset the installed onnx knows."""


def _versions_in_force(op_type: str, first: int, last: int) -> tuple[int, ...]:
    """The `since_version`s of `op_type`'s schemas in force at opsets first..last."""
    versions = set()
    for opset in range(first, last + 1):
        try:
            versions.add(onnx.defs.get_schema(op_type, opset, "").since_version)
        except onnx.defs.SchemaError:  # not an op yet at this opset
            continue
    return tuple(sorted(versions))


def test_max_opset_is_the_newest_the_installed_onnx_knows() -> None:
    assert MAX_OPSET == NEWEST, (
        f"the installed onnx knows opset {NEWEST}: check each handled op's versions up to "
        "it (OP_VERSIONS, docs/onnx.md), then raise MAX_OPSET"
    )


def test_every_handled_op_declares_the_versions_it_implements() -> None:
    assert sorted(OP_VERSIONS) == sorted({*HANDLERS, *FOLDERS})
    for op_type in sorted(OP_VERSIONS):
        in_force = _versions_in_force(op_type, MIN_OPSET, NEWEST)
        assert OP_VERSIONS[op_type] == in_force, (
            f"{op_type}: onnx has versions {in_force} at opsets {MIN_OPSET}-{NEWEST}, the "
            f"importer declares {OP_VERSIONS[op_type]}: check the handler against the new "
            "version's semantics, then declare it (OP_VERSIONS, docs/onnx.md)"
        )


# ------------------------------------------------------------------------------ models


def _configuring(
    opset: int, since: int, node: str, name: str, values: list[int]
) -> tuple[dict[str, list[int]], list[str], list[onnx.TensorProto]]:
    """An integer list as an attribute (before opset `since`) or a constant input."""
    if opset < since:
        return {name: values}, [], []
    tensor = numpy_helper.from_array(np.asarray(values, np.int64), f"{node}.{name}")
    return {}, [tensor.name], [tensor]


def cnn_at(opset: int) -> onnx.ModelProto:
    """Conv → BatchNormalization → Relu → Dropout → MaxPool → Pad → ReduceSum →
    Unsqueeze → Squeeze → Gemm → Split → Concat → Softmax on 1x3x6x6."""
    rng = np.random.default_rng(opset)

    def weight(name: str, *shape: int, low: float = -1.0) -> onnx.TensorProto:
        return numpy_helper.from_array(rng.uniform(low, 1.0, shape).astype(np.float32), name)

    inits = [
        weight("w", 4, 3, 3, 3),
        weight("b", 4),
        weight("scale", 4),
        weight("shift", 4),
        weight("mean", 4),
        weight("var", 4, low=0.5),
        weight("wg", 5, 4),
        weight("bg", 5),
    ]
    pad_attrs, pad_inputs, pad_inits = _configuring(opset, 11, "pad", "pads", [0, 0, 1, 1] * 2)
    sum_attrs, sum_inputs, sum_inits = _configuring(opset, 13, "sum", "axes", [2, 3])
    uns_attrs, uns_inputs, uns_inits = _configuring(opset, 13, "uns", "axes", [0])
    sq_attrs, sq_inputs, sq_inits = _configuring(opset, 13, "sq", "axes", [0])
    split_attrs, split_inputs, split_inits = _configuring(opset, 13, "split", "split", [2, 3])
    inits += pad_inits + sum_inits + uns_inits + sq_inits + split_inits
    nodes = [
        helper.make_node("Conv", ["x", "w", "b"], ["c"], pads=[1, 1, 1, 1], name="conv"),
        helper.make_node("BatchNormalization", ["c", "scale", "shift", "mean", "var"], ["n"]),
        helper.make_node("Relu", ["n"], ["r"]),
        helper.make_node("Dropout", ["r"], ["d"]),
        helper.make_node("MaxPool", ["d"], ["p"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Pad", ["p", *pad_inputs], ["pd"], **pad_attrs),
        helper.make_node("ReduceSum", ["pd", *sum_inputs], ["s"], keepdims=0, **sum_attrs),
        helper.make_node("Unsqueeze", ["s", *uns_inputs], ["u"], **uns_attrs),
        helper.make_node("Squeeze", ["u", *sq_inputs], ["q"], **sq_attrs),
        helper.make_node("Gemm", ["q", "wg", "bg"], ["g"], transB=1, alpha=0.5),
        helper.make_node("Split", ["g", *split_inputs], ["g0", "g1"], axis=1, **split_attrs),
        helper.make_node("Concat", ["g1", "g0"], ["k"], axis=1),
        helper.make_node("Softmax", ["k"], ["y"], axis=1),
    ]
    graph = helper.make_graph(
        nodes,
        f"cnn{opset}",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 6, 6])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 5])],
        inits,
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 7 if opset < 15 else 8 if opset < 19 else 10
    onnx.checker.check_model(model, full_check=True)
    return model


def shapes_at(opset: int) -> onnx.ModelProto:
    """x + Cast(Range(0, Shape(x)[1], 1)) on 2x3: Shape, Gather, Range and Cast folded
    at import time (Range and Cast have versions above opset 25)."""
    graph = helper.make_graph(
        [
            helper.make_node("Shape", ["x"], ["shape"]),
            helper.make_node("Gather", ["shape", "one"], ["n"]),
            helper.make_node("Range", ["zero", "n", "one"], ["ramp"]),
            helper.make_node("Cast", ["ramp"], ["ramp.f"], to=TensorProto.FLOAT),
            helper.make_node("Add", ["x", "ramp.f"], ["y"]),
        ],
        "shapes",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])],
        [
            numpy_helper.from_array(np.asarray(0, np.int64), "zero"),
            numpy_helper.from_array(np.asarray(1, np.int64), "one"),
        ],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    onnx.checker.check_model(model, full_check=True)
    return model


def _assert_imports_exactly(model: onnx.ModelProto, notes: list[str] | None = None) -> None:
    """The imported program computes what onnxruntime does (on the model as given)."""
    x = np.random.default_rng(0).standard_normal(
        [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    )
    x = x.astype(np.float32)
    module, weights = import_onnx(model, notes=notes)
    session = onnxruntime.InferenceSession(
        model.SerializeToString(), providers=["CPUExecutionProvider"]
    )
    (expected,) = session.run(None, {"x": x})
    values = weights | {"x": x}
    (got,) = run_reference(module, [values[i.name] for i in arg_infos(entry_function(module))])
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("opset", [7, 9, 10, MIN_OPSET, 13, 17, 18, 22, MAX_OPSET])
def test_the_cnn_imports_at_each_opset(opset: int) -> None:
    notes: list[str] = []
    _assert_imports_exactly(cnn_at(opset), notes)
    upgraded = f"the model's opset {opset} was upgraded to opset {MIN_OPSET}"
    assert notes == ([f"{upgraded} with onnx.version_converter"] if opset < MIN_OPSET else [])


@pytest.mark.parametrize("opset", [MIN_OPSET, 25, MAX_OPSET])
def test_folded_shape_arithmetic_imports_at_each_opset(opset: int) -> None:
    _assert_imports_exactly(shapes_at(opset))


# --------------------------------------------------------------------------------- CLI


def test_an_upgraded_model_runs_with_a_note(tasoc, tmp_path: Path) -> None:
    path = tmp_path / "old.onnx"
    onnx.save(cnn_at(9), path)
    result = tasoc("run", path, "--check", "--check-onnxruntime", "--backend", "numpy")
    assert result.code == 0, result
    assert "check: equivalent to onnxruntime" in result.out
    notes = [line for line in result.err.splitlines() if line.startswith("tasoc: note: ")]
    assert notes == [
        f"tasoc: note: {path}: the model's opset 9 was upgraded to opset {MIN_OPSET} "
        "with onnx.version_converter"
    ]


def test_the_newest_opset_runs(tasoc, tmp_path: Path) -> None:
    path = tmp_path / "new.onnx"
    onnx.save(cnn_at(NEWEST), path)
    result = tasoc("opt", path, "-o", tmp_path / "out.onnx")
    assert result.code == 0, result
    assert "tasoc: note:" not in result.err


def _failing_opt(tasoc, tmp_path: Path, model: onnx.ModelProto, *fragments: str) -> None:
    """`tasoc opt` on `model` is one error line holding `fragments`, writing nothing."""
    path = tmp_path / "bad.onnx"
    onnx.save(model, path)
    assert_one_line_error(tasoc("opt", path, "-o", tmp_path / "out.mlir"), *fragments)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.onnx"]


def test_an_opset_newer_than_onnx_knows_is_one_line(tasoc, tmp_path: Path) -> None:
    model = shapes_at(MAX_OPSET)
    model.opset_import[0].version = NEWEST + 1
    _failing_opt(
        tasoc,
        tmp_path,
        model,
        f"unsupported ONNX opset {NEWEST + 1}",
        f"knows opsets up to {NEWEST}",
    )


def test_a_failing_upgrade_is_one_line(tasoc, tmp_path: Path) -> None:
    """ScaledTanh was an experimental op of opset 1: the converter has no schema for it."""
    graph = helper.make_graph(
        [helper.make_node("ScaledTanh", ["x"], ["y"], alpha=1.0, beta=1.0)],
        "old",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2])],
    )
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 1)])
    _failing_opt(
        tasoc,
        tmp_path,
        model,
        f"cannot upgrade the model from ONNX opset 1 to opset {MIN_OPSET}",
        "onnx.version_converter: op 'ScaledTanh' has no schema",
    )


def test_an_undeclared_op_version_is_one_line(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A version of a handled op the importer does not declare is refused by name, not
    imported with another version's semantics."""
    latest = OP_VERSIONS["Cast"][-1]
    monkeypatch.setitem(importer.OP_VERSIONS, "Cast", OP_VERSIONS["Cast"][:-1])
    _failing_opt(
        tasoc,
        tmp_path,
        shapes_at(MAX_OPSET),
        f"Cast node '#3' (opset {MAX_OPSET})",
        f"version {latest} of 'Cast' is not implemented",
    )
