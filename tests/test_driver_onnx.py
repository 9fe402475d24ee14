"""The driver's ONNX bridge: `.onnx` in and out of `tasoc opt`, `--input-shape`, the `.npz`
beside text IR, `tasoc run` on ONNX models and `--check-onnxruntime`, and the errors.

The models are built here with `onnx.helper` (a Conv+Relu+pool CNN with static shapes,
a MatMul+Add+Softmax MLP with a dynamic batch), and onnxruntime is the independent
judge of what an ONNX model computes.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import onnx
import onnxruntime
import pytest
from conftest import assert_one_line_error
from onnx import TensorProto, helper, numpy_helper

from tasoc.backends.arguments import load_inputs, random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import files
from tasoc.driver import run as run_module
from tasoc.driver.sources import load_module, load_program
from tasoc.ir.program import arg_infos, entry_function
from tasoc.verify.equivalence import compare

OPSET = 17
IR_VERSION = 8
"""onnxruntime refuses models newer than it knows; onnx.helper defaults to the newest."""

MLIR_WITH_WEIGHT = """\
func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x3xf32> {graph.param}) -> tensor<2x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = graph.relu %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}
"""

NOT_EXPORTABLE = """\
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  %0 = arith.addf %x, %x : tensor<2xf32>
  func.return %0 : tensor<2xf32>
}
"""

OLD_OUTPUT = b"previous contents\n"


def _weight(rng: np.random.Generator, name: str, shape: Sequence[int]) -> onnx.TensorProto:
    return numpy_helper.from_array((rng.standard_normal(shape) * 0.3).astype(np.float32), name)


def _model(
    nodes: list[onnx.NodeProto],
    inputs: list[onnx.ValueInfoProto],
    outputs: list[onnx.ValueInfoProto],
    initializers: list[onnx.TensorProto],
) -> onnx.ModelProto:
    graph = helper.make_graph(nodes, "test", inputs, outputs, initializers)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", OPSET)])
    model.ir_version = IR_VERSION
    onnx.checker.check_model(model, full_check=True)
    return model


def cnn_model() -> onnx.ModelProto:
    """Conv(+bias) → Relu → MaxPool → Conv → Relu → GlobalAveragePool on 1x3x8x8."""
    rng = np.random.default_rng(1)
    nodes = [
        helper.make_node("Conv", ["x", "w1", "b1"], ["c1"], pads=[1, 1, 1, 1], name="conv1"),
        helper.make_node("Relu", ["c1"], ["r1"]),
        helper.make_node("MaxPool", ["r1"], ["p1"], kernel_shape=[2, 2], strides=[2, 2]),
        helper.make_node("Conv", ["p1", "w2"], ["c2"], pads=[1, 1, 1, 1], name="conv2"),
        helper.make_node("Relu", ["c2"], ["r2"]),
        helper.make_node("GlobalAveragePool", ["r2"], ["y"]),
    ]
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 8, 8])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 6, 1, 1])],
        [
            _weight(rng, "w1", (4, 3, 3, 3)),
            _weight(rng, "b1", (4,)),
            _weight(rng, "w2", (6, 4, 3, 3)),
        ],
    )


def mlp_model(extra: Sequence[onnx.NodeProto] = ()) -> onnx.ModelProto:
    """MatMul → Add → Softmax on x: [batch, 4] with `batch` dynamic; `extra` nodes read y."""
    rng = np.random.default_rng(2)
    nodes = [
        helper.make_node("MatMul", ["x", "w"], ["h"]),
        helper.make_node("Add", ["h", "b"], ["a"]),
        helper.make_node("Softmax", ["a"], ["y"], axis=-1),
        *extra,
    ]
    output = extra[-1].output[0] if extra else "y"
    return _model(
        nodes,
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["batch", 4])],
        [helper.make_tensor_value_info(output, TensorProto.FLOAT, ["batch", 3])],
        [_weight(rng, "w", (4, 3)), _weight(rng, "b", (3,))],
    )


def save(model: onnx.ModelProto, path: Path) -> Path:
    onnx.save(model, path)
    return path


def onnxruntime_run(model: onnx.ModelProto | Path | str, x: np.ndarray) -> list[np.ndarray]:
    source = model.SerializeToString() if isinstance(model, onnx.ModelProto) else str(model)
    session = onnxruntime.InferenceSession(source, providers=["CPUExecutionProvider"])
    return [np.asarray(out) for out in session.run(None, {session.get_inputs()[0].name: x})]


@pytest.fixture
def cnn(tmp_path: Path) -> Path:
    return save(cnn_model(), tmp_path / "cnn.onnx")


@pytest.fixture
def mlp(tmp_path: Path) -> Path:
    return save(mlp_model(), tmp_path / "mlp.onnx")


# ------------------------------------------------------------------------------ tasoc opt


def test_opt_prints_graph_ir_without_weight_values(tasoc, cnn: Path) -> None:
    result = tasoc("opt", cnn)
    assert result.code == 0, result
    assert result.err == ""
    module_text = result.out
    for op in ("graph.conv2d", "graph.relu", "graph.pool2d"):
        assert op in module_text, op
    assert module_text.count("graph.pool2d") == 2  # MaxPool and GlobalAveragePool
    assert module_text.count("{graph.param}") == 3
    assert "dense<" not in module_text  # values stay out of the text
    generic = tasoc("opt", cnn, "-p", "cse", "--print-op-generic")
    assert generic.code == 0 and '"graph.conv2d"' in generic.out


def test_opt_onnx_to_onnx_keeps_the_weights(tasoc, cnn: Path, tmp_path: Path) -> None:
    out = tmp_path / "cnn2.onnx"
    result = tasoc("opt", cnn, "-p", "cse,canonicalize", "-o", out)
    assert result.code == 0 and result.err == "" and result.out == "", result
    onnx.checker.check_model(onnx.load(out), full_check=True)
    x = np.random.default_rng(5).standard_normal((1, 3, 8, 8)).astype(np.float32)
    assert compare(onnxruntime_run(cnn, x), onnxruntime_run(out, x)).ok


def test_opt_onnx_to_text_writes_the_weights_beside_it(tasoc, mlp: Path, tmp_path: Path) -> None:
    out = tmp_path / "m.mlir"
    result = tasoc("opt", mlp, "--input-shape", "x=2x4", "-o", out)
    assert result.code == 0 and result.err == "", result
    weights_file = tmp_path / "m.npz"
    module = load_module(str(out))
    params = [info.name for info in arg_infos(entry_function(module)) if info.is_param]
    with np.load(weights_file) as stored:
        assert sorted(stored.files) == sorted(params) == ["b", "w"]
        assert all(stored[name].dtype == np.float32 for name in stored.files)
    assert "tensor<2x4xf32>" in out.read_text()

    checked = tasoc("run", out, "--params", weights_file, "--check")
    assert checked.code == 0, checked
    assert "check: equivalent to the numpy reference" in checked.out

    # The text and the .npz together are the ONNX model: same results on the same input.
    arguments = load_inputs(module, weights_file, seed=3)
    x = arguments[0]
    assert compare(onnxruntime_run(mlp, x), run_reference(module, arguments)).ok


def test_opt_text_output_without_extension_gets_npz_by_stem(
    tasoc, cnn: Path, tmp_path: Path
) -> None:
    out = tmp_path / "plain"
    assert tasoc("opt", cnn, "-o", out).code == 0
    assert (tmp_path / "plain.npz").exists()


def test_opt_text_input_to_onnx_has_random_weights_and_says_so(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "p.mlir"
    source.write_text(MLIR_WITH_WEIGHT)
    out = tmp_path / "p.onnx"
    result = tasoc("opt", source, "-o", out, "--seed", "4")
    assert result.code == 0, result
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tasoc: note: "), lines
    assert "random weights" in lines[0] and "--seed 4" in lines[0]
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    again = tmp_path / "q.onnx"
    assert tasoc("opt", source, "-o", again, "--seed", "4").code == 0
    assert onnx.load(again).graph.initializer == model.graph.initializer  # deterministic
    assert not (tmp_path / "p.npz").exists()


def test_opt_zoo_model_to_onnx_passes_the_checker(tasoc, tmp_path: Path) -> None:
    out = tmp_path / "r.onnx"
    result = tasoc("opt", "zoo:resnet50?image=32&width=0.125&classes=10", "-o", out)
    assert result.code == 0, result
    assert "random weights" in result.err
    model = onnx.load(out)
    onnx.checker.check_model(model, full_check=True)
    assert sum(node.op_type == "Conv" for node in model.graph.node) >= 50


def test_models_over_2_gib_go_through_external_data(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With the protobuf limit lowered, a small zoo model takes the path of one over
    2 GiB: `-o` writes the model and its `.data` file, and both commands read them."""
    monkeypatch.setattr(files, "PROTOBUF_LIMIT", 4096)
    out = tmp_path / "r.onnx"
    assert tasoc("opt", "zoo:resnet50?image=32&width=0.125&classes=10", "-o", out).code == 0
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.onnx", "r.onnx.data"]
    assert out.stat().st_size < (tmp_path / "r.onnx.data").stat().st_size
    result = tasoc("run", out, "--check", "--check-onnxruntime")
    assert result.code == 0, result
    assert "check: equivalent to onnxruntime" in result.out
    back = tmp_path / "r.mlir"
    assert tasoc("opt", out, "-o", back).code == 0
    assert (tmp_path / "r.npz").exists()
    (tmp_path / "r.onnx.data").unlink()
    assert_one_line_error(tasoc("run", out), "r.onnx", "r.onnx.data")


# ------------------------------------------------------------------------------ tasoc run


@pytest.mark.parametrize(
    ("model_name", "shapes"), [("cnn", []), ("mlp", ["--input-shape", "x=3x4"])]
)
def test_run_onnx_checks_against_reference_and_onnxruntime(
    tasoc, model_name: str, shapes: list[str], request: pytest.FixtureRequest
) -> None:
    path: Path = request.getfixturevalue(model_name)
    result = tasoc("run", path, *shapes, "--check", "--check-onnxruntime")
    assert result.code == 0, result
    assert "check: equivalent to the numpy reference" in result.out
    assert "check: equivalent to onnxruntime" in result.out


def test_run_onnx_uses_the_initializers(tasoc, mlp: Path) -> None:
    """The printed checksum is onnxruntime's output on the same random activation."""
    result = tasoc("run", mlp, "--input-shape", "x=2x4", "--backend", "numpy", "--seed", "7")
    assert result.code == 0, result
    program = load_program(str(mlp), {"x": (2, 4)})
    x = random_inputs(program.module, 7)[0]
    expected = onnxruntime_run(mlp, x)[0]
    printed = re.search(r"abs-max (\S+)", result.out)
    assert printed is not None, result
    assert float(printed[1]) == pytest.approx(np.abs(expected).max(), rel=1e-5)


def test_run_text_program_checks_its_export_against_onnxruntime(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "p.mlir"
    source.write_text(MLIR_WITH_WEIGHT)
    result = tasoc("run", source, "--check-onnxruntime", "--backend", "numpy")
    assert result.code == 0, result
    assert "check: equivalent to onnxruntime" in result.out


def test_run_reports_a_difference_from_onnxruntime(
    tasoc, mlp: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def shifted(
        model: onnx.ModelProto | str, activations: Sequence[np.ndarray]
    ) -> list[np.ndarray]:
        return [out + 0.5 for out in onnxruntime_run(model, activations[0])]

    monkeypatch.setattr(run_module, "onnxruntime_outputs", shifted)
    result = tasoc("run", mlp, "--input-shape", "x=2x4", "--check-onnxruntime")
    assert_one_line_error(
        result,
        "jax results differ from onnxruntime",
        "from float64: onnxruntime is more than 32x further than jax",
    )


# --------------------------------------------------------------------------------- errors

HARDMAX = helper.make_node("Hardmax", ["y"], ["s"], name="hard")

# (name, model bytes or None for mlp.onnx, arguments after `opt INPUT`, error fragments)
OPT_FAILURES = [
    (
        "truncated",
        lambda: mlp_model().SerializeToString()[:40],
        [],
        ["bad.onnx: the file is not an ONNX model"],
    ),
    (
        "not onnx",
        lambda: b"func.func @main() {}\n",
        [],
        ["bad.onnx: the file is not an ONNX model"],
    ),
    (
        "unsupported op",
        lambda: mlp_model([HARDMAX]).SerializeToString(),
        ["--input-shape", "x=2x4"],
        ["Hardmax node 'hard' (opset 17)", "unsupported ONNX op 'Hardmax'"],
    ),
    ("dynamic shape", None, [], ["input 'x' has a dynamic shape", "--input-shape x="]),
    ("unknown input", None, ["--input-shape", "z=2x4"], ["--input-shape names 'z'"]),
    ("wrong rank", None, ["--input-shape", "x=2x4x1"], ["'x'", "does not fit"]),
    ("no dims", None, ["--input-shape", "x="], ["argument --input-shape", "got 'x='"]),
    ("no name", None, ["--input-shape", "=2x4"], ["argument --input-shape"]),
    ("bad dims", None, ["--input-shape", "x=2by4"], ["argument --input-shape", "2by4"]),
    ("zero dim", None, ["--input-shape", "x=0x4"], ["argument --input-shape", "dims >= 1"]),
    (
        "two shapes",
        None,
        ["--input-shape", "x=2x4", "--input-shape", "x=3x4"],
        ["--input-shape gives 'x' two different shapes"],
    ),
    ("split onnx input", None, ["--split-input-file"], ["--split-input-file", ".onnx"]),
]


@pytest.mark.parametrize(
    ("data", "extra", "fragments"),
    [case[1:] for case in OPT_FAILURES],
    ids=[case[0] for case in OPT_FAILURES],
)
@pytest.mark.parametrize("output", ["out.mlir", "out.onnx"])
def test_opt_onnx_failures_are_one_line_and_leave_output(
    tasoc, tmp_path: Path, mlp: Path, data, extra: list[str], fragments: list[str], output: str
) -> None:
    source = mlp
    if data is not None:
        source = tmp_path / "bad.onnx"
        source.write_bytes(data())
    out = tmp_path / output
    out.write_bytes(OLD_OUTPUT)
    assert_one_line_error(tasoc("opt", source, *extra, "-o", out), *fragments)
    assert out.read_bytes() == OLD_OUTPUT
    assert not (tmp_path / "out.npz").exists()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        {source.name, mlp.name, output}
    )  # no temporary file left behind


def test_export_refusal_is_one_line(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "arith.mlir"
    source.write_text(NOT_EXPORTABLE)
    out = tmp_path / "arith.onnx"
    out.write_bytes(OLD_OUTPUT)
    result = tasoc("opt", source, "-o", out)
    assert_one_line_error(result, "cannot export to ONNX", "arith.addf")
    assert out.read_bytes() == OLD_OUTPUT


def test_split_input_file_with_onnx_output_is_an_error(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "p.mlir"
    source.write_text(MLIR_WITH_WEIGHT)
    out = tmp_path / "p.onnx"
    result = tasoc("opt", source, "--split-input-file", "-o", out)
    assert_one_line_error(result, "--split-input-file", ".onnx output")
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "fragments"),
    [
        (["--input-shape", "x=2x4"], ["--input-shape applies to .onnx inputs only"]),
        (["--input-shape", "x"], ["argument --input-shape"]),
    ],
)
def test_input_shape_on_text_input_is_an_error(
    tasoc, tmp_path: Path, args: list[str], fragments: list[str]
) -> None:
    source = tmp_path / "p.mlir"
    source.write_text(MLIR_WITH_WEIGHT)
    assert_one_line_error(tasoc("opt", source, *args), *fragments)
    assert_one_line_error(tasoc("run", source, *args), *fragments)


def test_run_onnx_errors_are_one_line(tasoc, tmp_path: Path, mlp: Path) -> None:
    assert_one_line_error(tasoc("run", mlp), "input 'x' has a dynamic shape", "--input-shape")
    params = tmp_path / "p.npz"
    np.savez(params, w=np.zeros((4, 3), np.float32))
    assert_one_line_error(
        tasoc("run", mlp, "--input-shape", "x=2x4", "--params", params),
        "--params",
        "carries its own",
    )
    broken = tmp_path / "broken.onnx"
    broken.write_bytes(mlp.read_bytes()[:50])
    assert_one_line_error(tasoc("run", broken), "broken.onnx: the file is not an ONNX model")


# ------------------------------------------- import -> optimize -> export keeps weights


def _random_feeds(model: Path) -> dict[str, np.ndarray]:
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(11)
    return {
        info.name: rng.standard_normal(info.shape).astype(np.float32)
        for info in session.get_inputs()
    }


def _onnxruntime_outputs(model: Path, feeds: dict[str, np.ndarray]) -> list[np.ndarray]:
    session = onnxruntime.InferenceSession(str(model), providers=["CPUExecutionProvider"])
    return [np.asarray(out) for out in session.run(None, feeds)]


@pytest.mark.parametrize("source", ["cnn", "zoo:bert?layers=1&hidden=64"])
def test_import_optimize_export_keeps_the_weights(
    tasoc, cnn: Path, tmp_path: Path, source: str
) -> None:
    model = cnn
    if source.startswith("zoo:"):
        model = tmp_path / "zoo.onnx"
        assert tasoc("opt", source, "-o", model).code == 0
    text = tmp_path / "m.mlir"
    assert tasoc("opt", model, "-o", text).code == 0
    assert (tmp_path / "m.npz").exists()

    out = tmp_path / "m2.onnx"
    result = tasoc("opt", text, "-p", "cse", "-o", out)
    assert result.code == 0 and result.err == "", result  # no note: the weights are real
    feeds = _random_feeds(model)
    assert compare(_onnxruntime_outputs(model, feeds), _onnxruntime_outputs(out, feeds)).ok

    # Text output takes the weights on beside it, so the chain can go on.
    assert tasoc("opt", text, "-p", "cse", "-o", tmp_path / "m3.mlir").code == 0
    with np.load(tmp_path / "m.npz") as first, np.load(tmp_path / "m3.npz") as second:
        assert sorted(first.files) == sorted(second.files)
        assert all(np.array_equal(first[name], second[name]) for name in first.files)


def test_run_uses_the_weights_beside_a_text_input(tasoc, cnn: Path, tmp_path: Path) -> None:
    text = tmp_path / "m.mlir"
    assert tasoc("opt", cnn, "-o", text).code == 0
    from_text = tasoc("run", text, "--check", "--check-onnxruntime")
    assert from_text.code == 0, from_text
    assert "values from" in from_text.out.splitlines()[0] and "m.npz" in from_text.out
    from_onnx = tasoc("run", cnn)
    assert from_text.out.splitlines()[1] == from_onnx.out.splitlines()[1]


def test_params_name_the_weights_of_a_text_input(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "p.mlir"
    source.write_text(MLIR_WITH_WEIGHT)
    weights = tmp_path / "chosen.npz"
    w = np.arange(12, dtype=np.float32).reshape(4, 3)
    np.savez(weights, w=w)
    out = tmp_path / "p.onnx"
    result = tasoc("opt", source, "--params", weights, "-o", out)
    assert result.code == 0 and result.err == "", result
    initializers = {t.name: numpy_helper.to_array(t) for t in onnx.load(out).graph.initializer}
    assert np.array_equal(initializers["w"], w)


WEIGHT_FAILURES = [
    ("missing weight", {"x": np.zeros((2, 4), np.float32)}, [], ["beside", "missing weights w"]),
    ("wrong shape", {"w": np.zeros((3, 3), np.float32)}, [], ["beside", "'w' expects 4x3xf32"]),
    ("absent --params", None, ["--params", "absent.npz"], ["cannot read --params file"]),
    ("--params with split input", None, ["--params", "p.npz", "--split-input-file"],
     ["--params", "split"]),
]  # fmt: skip


@pytest.mark.parametrize(
    ("stored", "args", "fragments"),
    [case[1:] for case in WEIGHT_FAILURES],
    ids=[case[0] for case in WEIGHT_FAILURES],
)
def test_weights_that_do_not_fit_are_one_line(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, stored, args, fragments
) -> None:
    monkeypatch.chdir(tmp_path)
    Path("p.mlir").write_text(MLIR_WITH_WEIGHT)
    if stored is not None:
        np.savez("p.npz", **stored)
    Path("out.onnx").write_bytes(OLD_OUTPUT)
    assert_one_line_error(tasoc("opt", "p.mlir", *args, "-o", "out.onnx"), *fragments)
    assert Path("out.onnx").read_bytes() == OLD_OUTPUT
    if "--split-input-file" not in args:
        assert_one_line_error(tasoc("run", "p.mlir", *args), *fragments)


def test_params_with_an_onnx_input_is_an_error(tasoc, cnn: Path, tmp_path: Path) -> None:
    params = tmp_path / "p.npz"
    np.savez(params, w1=np.zeros((4, 3, 3, 3), np.float32))
    assert_one_line_error(tasoc("opt", cnn, "--params", params), "--params", "carries its own")
