"""The `tasoc` command: opt/run/zoo, the one-line error contract, reports, --verify-each.

Most tests call `main([...])` in the test process (fast); two run the installed
console script to prove the entry point itself works.
"""

from __future__ import annotations

import gc
import io
import json
import os
import re
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar

import numpy as np
import pytest
from conftest import assert_one_line_error
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.rewriter import Rewriter

from tasoc.backends.arguments import random_inputs
from tasoc.driver import opt as opt_module
from tasoc.driver import run as run_module
from tasoc.driver.main import main
from tasoc.driver.sources import load_module
from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import arg_infos, entry_function
from tasoc.models import list_models, parse_spec
from tasoc.passes.registry import TASOC_PASSES
from tasoc.passes.report import current_report
from tasoc.verify.equivalence import OpByOp, OpReport, compare, compare_ops

GOOD = """\
func.func @main(%x: tensor<2x4xf32>, %w: tensor<4x3xf32> {graph.param}) -> tensor<2x3xf32> {
  %0 = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %1 = graph.matmul %x, %w : (tensor<2x4xf32>, tensor<4x3xf32>) -> tensor<2x3xf32>
  %unused = graph.tanh %x : (tensor<2x4xf32>) -> tensor<2x4xf32>
  %2 = graph.add %0, %1 : (tensor<2x3xf32>, tensor<2x3xf32>) -> tensor<2x3xf32>
  %3 = graph.relu %2 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %3 : tensor<2x3xf32>
}
"""

SMALL_BERT = "zoo:bert?layers=1&hidden=64"
SMALL_NASRNN = "zoo:nasrnn?hidden=32&length=2"
TASOC_SCRIPT = Path(sys.executable).parent / "tasoc"


@pytest.fixture
def good(tmp_path: Path) -> Path:
    path = tmp_path / "good.mlir"
    path.write_text(GOOD)
    return path


def graph_op_counts(text: str) -> dict[str, int]:
    counts: dict[str, int] = {}
    for name in G.OPS_BY_NAME:
        counts[name] = text.count(f"graph.{name} ")
    return {name: n for name, n in counts.items() if n}


# --------------------------------------------------------------------- bad inputs to opt

MALFORMED = "func.func @main() {\n  %0 = \n}\n"
UNKNOWN_OP = 'func.func @main() {\n  %0 = "graph.frobnicate"() : () -> tensor<2xf32>\n}\n'
VERIFY_FAILURE = """\
func.func @main(%a: tensor<2x3xf32>, %b: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %0 = graph.matmul %a, %b : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %0 : tensor<2x5xf32>
}
"""
TYPE_CONFLICT = """\
func.func @main(%a: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %0 = graph.relu %a : (tensor<2x3xf32>) -> tensor<3x2xf32>
  %1 = graph.relu %0 : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %1 : tensor<2x3xf32>
}
"""

# (name, INPUT file text or None, extra args, fragments of the one error line);
# INPUT is `bad.mlir` in the test's directory unless the args name another.
OPT_FAILURES = [
    ("malformed IR", MALFORMED, [], ["bad.mlir:3:1: operation name expected"]),
    ("unknown op", UNKNOWN_OP, [], ["bad.mlir:2:", "graph.frobnicate is not registered"]),
    (
        "verifier failure",
        VERIFY_FAILURE,
        [],
        ["bad.mlir:2:3: 'graph.matmul': contraction sizes differ: 2x3 @ 4x5"],
    ),
    ("type conflict", TYPE_CONFLICT, [], ["bad.mlir:3:", "tensor<2x3xf32>"]),
    ("unknown zoo model", None, ["zoo:nosuchmodel"], ["unknown zoo model 'nosuchmodel'"]),
    ("unknown zoo option", None, ["zoo:nasrnn?width=3"], ["unknown option 'width'"]),
    ("bad zoo option value", None, ["zoo:nasrnn?hidden=big"], ["'hidden'", "'big'"]),
    ("pipeline syntax", GOOD, ["-p", "cse{"], ["invalid pipeline 'cse{'", "column 5"]),
    ("unknown pass", GOOD, ["-p", "cse,nosuchpass"], ["unknown pass 'nosuchpass'", "dce"]),
    ("bad pass option", GOOD, ["-p", "cse{depth=3}"], ["pass 'cse' has no option 'depth'"]),
    ("trailing comma", GOOD, ["-p", "cse,"], ["invalid pipeline 'cse,'", "column 5"]),
    ("missing file", None, ["missing.mlir"], ["cannot read 'missing.mlir'", "No such file"]),
    ("unknown extension", None, ["model.txt"], ["model.txt: unknown file extension '.txt'"]),
    ("unknown option", GOOD, ["--no-such-flag"], ["unrecognized arguments: --no-such-flag"]),
]


@pytest.mark.parametrize(
    ("text", "args", "fragments"),
    [case[1:] for case in OPT_FAILURES],
    ids=[case[0] for case in OPT_FAILURES],
)
def test_opt_failure_is_one_line_and_keeps_output(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, text, args, fragments
) -> None:
    monkeypatch.chdir(tmp_path)
    if text is not None:
        Path("bad.mlir").write_text(text)
    Path("model.txt").write_text(GOOD)
    out = Path("out.mlir")
    out.write_text("previous result\n")
    inputs = [] if args and not args[0].startswith("-") else ["bad.mlir"]
    result = tasoc("opt", *inputs, *args, "-o", "out.mlir")
    assert_one_line_error(result, *fragments)
    assert out.read_text() == "previous result\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(
        ["out.mlir", "model.txt", *(["bad.mlir"] if text is not None else [])]
    ), "a temporary output file was left behind"


def test_unreadable_input_is_one_line(tasoc, tmp_path: Path) -> None:
    directory = tmp_path / "dir.mlir"
    directory.mkdir()
    assert_one_line_error(tasoc("opt", str(directory)), "cannot read", "Is a directory")


def test_non_utf8_input_is_one_line(tasoc, tmp_path: Path) -> None:
    path = tmp_path / "binary.mlir"
    path.write_bytes(b"\xff\xfe\x00graph")
    assert_one_line_error(tasoc("opt", str(path)), "binary.mlir: not UTF-8 text")


def test_unwritable_output_is_one_line(tasoc, good: Path, tmp_path: Path) -> None:
    target = tmp_path / "no" / "such" / "dir" / "out.mlir"
    assert_one_line_error(tasoc("opt", str(good), "-o", str(target)), "cannot write")


def test_bad_report_path_fails_before_writing_output(tasoc, good: Path, tmp_path: Path) -> None:
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")
    result = tasoc("opt", str(good), "-o", str(out), "--report", str(tmp_path / "no" / "r.json"))
    assert_one_line_error(result, "cannot write")
    assert out.read_text() == "previous result\n"


def test_usage_errors_are_one_line(tasoc) -> None:
    assert_one_line_error(tasoc(), "COMMAND")
    assert_one_line_error(tasoc("optimize"), "invalid choice: 'optimize'")
    assert_one_line_error(tasoc("run"), "run: ", "INPUT")
    assert_one_line_error(tasoc("run", SMALL_NASRNN, "--backend", "tpu"), "invalid choice")


def test_verifier_message_for_verify_diagnostics(tasoc, tmp_path: Path) -> None:
    """`--verify-diagnostics` keeps xdsl-opt's behaviour: print the message, exit 0."""
    path = tmp_path / "bad.mlir"
    path.write_text(VERIFY_FAILURE)
    result = tasoc("opt", str(path), "--verify-diagnostics")
    assert result.code == 0
    assert result.out.startswith("'graph.matmul': contraction sizes differ: 2x3 @ 4x5 (3 != 4)")


def test_internal_error_is_one_line_unless_debugging(
    tasoc, good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def explode(module: ModuleOp) -> dict[str, int]:
        raise RuntimeError("counter exploded")

    monkeypatch.setattr(opt_module, "op_counts", explode)
    assert_one_line_error(
        tasoc("opt", str(good)), "tasoc: error: internal error: RuntimeError: counter exploded"
    )
    monkeypatch.setenv("TASOC_DEBUG", "1")
    with pytest.raises(RuntimeError, match="counter exploded"):
        main(["opt", str(good)])


# ------------------------------------------------------------------------- opt works


def test_opt_prints_what_it_parses(tasoc, good: Path) -> None:
    result = tasoc("opt", str(good))
    assert result.code == 0, result.err
    assert graph_op_counts(result.out) == {"matmul": 2, "tanh": 1, "add": 1, "relu": 1}


def test_opt_reads_stdin(tasoc, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(GOOD.encode())))
    result = tasoc("opt", "-", "-p", "dce")
    assert result.code == 0, result.err
    assert "graph.tanh" not in result.out and "graph.relu" in result.out


@pytest.mark.parametrize(
    ("pipeline", "expected"),
    [
        ("cse", {"matmul": 1, "add": 1, "relu": 1}),
        ("dce", {"matmul": 2, "add": 1, "relu": 1}),
        ("canonicalize", {"matmul": 2, "add": 1, "relu": 1}),
        ("dce,cse,canonicalize", {"matmul": 1, "add": 1, "relu": 1}),
    ],
)
def test_pipelines(tasoc, good: Path, pipeline: str, expected: dict[str, int]) -> None:
    result = tasoc("opt", str(good), "-p", pipeline)
    assert result.code == 0, result.err
    assert graph_op_counts(result.out) == expected


def test_print_op_generic_parses_back(tasoc, good: Path, tmp_path: Path) -> None:
    generic = tmp_path / "generic.mlir"
    assert tasoc("opt", str(good), "--print-op-generic", "-o", str(generic)).code == 0
    assert '"graph.matmul"(%x, %w)' in generic.read_text()
    assert tasoc("opt", str(generic)).out == tasoc("opt", str(good)).out


@pytest.mark.parametrize("spec", [SMALL_BERT, "zoo:bert"])
def test_zoo_model_round_trips_through_text(tasoc, tmp_path: Path, spec: str) -> None:
    """The issue's criterion: `tasoc opt zoo:bert -o b.mlir && tasoc opt b.mlir` prints b.mlir."""
    path = tmp_path / "b.mlir"
    assert tasoc("opt", spec, "-o", str(path)).code == 0
    text = path.read_text()
    assert "graph.layernorm" in text and "graph.softmax" in text
    again = tasoc("opt", str(path))
    assert again.code == 0, again.err
    assert again.out == text


def test_time_passes_keeps_stdout_ir(tasoc, good: Path) -> None:
    result = tasoc("opt", str(good), "-p", "cse", "--time-passes")
    assert result.code == 0
    assert "Pass cse took" in result.err
    assert result.out.startswith("builtin.module")


# ------------------------------------------------------------------------ --report


@dataclass(frozen=True)
class RecordSeedPass(ModulePass):
    """Test-only: writes to its report section through the public API."""

    name: ClassVar[str] = "test-record-seed"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        report = current_report()
        report.section(self.name)["seed_seen"] = report.seed


def test_report_json(tasoc, good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(TASOC_PASSES, RecordSeedPass.name, lambda: RecordSeedPass)
    report_path = tmp_path / "r.json"
    pipeline = "cse,dce,test-record-seed"
    result = tasoc("opt", str(good), "-p", pipeline, "--seed", "7", "--report", str(report_path))
    assert result.code == 0, result.err
    report = json.loads(report_path.read_text())
    assert report["input"] == str(good)
    assert report["pipeline"] == pipeline
    assert report["seed"] == 7
    assert [p["name"] for p in report["passes"]] == ["cse", "dce", "test-record-seed"]
    cse, dce, _ = report["passes"]
    assert cse["ops_before"]["graph.matmul"] == 2 and cse["ops_after"]["graph.matmul"] == 1
    assert dce["ops_before"] == cse["ops_after"]
    assert all(p["seconds"] >= 0 for p in report["passes"])
    assert report["sections"] == {"test-record-seed": {"seed_seen": 7}}
    assert [p["section"] for p in report["passes"]] == [{}, {}, {"seed_seen": 7}]


def test_current_report_outside_the_driver_is_scratch() -> None:
    current_report().section("x")["y"] = 1
    assert current_report().sections == {}


# -------------------------------------------------------------------- --verify-each


@dataclass(frozen=True)
class ReluToSigmoidPass(ModulePass):
    """Test-only, deliberately wrong: keeps types, changes values."""

    name: ClassVar[str] = "test-relu-to-sigmoid"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for relu in [o for o in op.walk() if isinstance(o, G.ReluOp)]:
            Rewriter.replace_op(relu, G.SigmoidOp.create_typed([relu.input]))


@dataclass(frozen=True)
class SwapMatmulOperandsPass(ModulePass):
    """Test-only, deliberately wrong: leaves IR that does not verify."""

    name: ClassVar[str] = "test-swap-matmul"

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        for matmul in [o for o in op.walk() if isinstance(o, G.MatmulOp)]:
            matmul.operands = [matmul.rhs, matmul.lhs]


def test_verify_each_passes_for_correct_passes(tasoc, good: Path) -> None:
    result = tasoc("opt", str(good), "-p", "cse,dce,canonicalize", "--verify-each")
    assert result.code == 0, result.err


def test_verify_each_catches_a_wrong_pass(
    tasoc, good: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TASOC_PASSES, ReluToSigmoidPass.name, lambda: ReluToSigmoidPass)
    out = tmp_path / "out.mlir"
    out.write_text("previous result\n")
    args = ("opt", str(good), "-p", f"cse,{ReluToSigmoidPass.name}", "-o", str(out))
    assert tasoc(*args).code == 0, "without --verify-each the wrong pass goes unnoticed"
    out.write_text("previous result\n")
    assert_one_line_error(
        tasoc(*args, "--verify-each"),
        "pass 'test-relu-to-sigmoid' changed the program's results: NOT equivalent",
    )
    assert out.read_text() == "previous result\n"


def test_pass_leaving_invalid_ir_is_named(
    tasoc, good: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setitem(TASOC_PASSES, SwapMatmulOperandsPass.name, lambda: SwapMatmulOperandsPass)
    assert_one_line_error(
        tasoc("opt", str(good), "-p", SwapMatmulOperandsPass.name),
        "IR after pass 'test-swap-matmul' does not verify",
        "contraction sizes differ",
    )


# ------------------------------------------------------------------------------ run


def test_run_check_small_nasrnn_on_jax(tasoc) -> None:
    result = tasoc("run", SMALL_NASRNN, "--check", "--bench", "2")
    assert result.code == 0, result.err
    assert "1x32xf32" in result.out
    assert "check: equivalent to the numpy reference" in result.out
    assert "bench: 2 runs on jax, median" in result.out


def test_run_check_full_nasrnn(tasoc) -> None:
    result = tasoc("run", "zoo:nasrnn", "--check")
    assert result.code == 0, result.err
    assert "1x512xf32" in result.out and "check: equivalent" in result.out


def test_run_numpy_backend_reads_mlir(tasoc, good: Path) -> None:
    result = tasoc("run", str(good), "--backend", "numpy", "--seed", "3")
    assert result.code == 0, result.err
    assert "on numpy (seed 3)" in result.out and "2x3xf32" in result.out


def test_run_check_reports_a_mismatch(tasoc, good: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """JAX off by one: far further from the program in float64 than the reference."""
    real_prepare = run_module.prepare

    def off_by_one(module: ModuleOp, backend: str) -> run_module.Executable:
        real = real_prepare(module, backend)
        return run_module.Executable(lambda args: [out + 1 for out in real.run(args)], real.time)

    monkeypatch.setattr(run_module, "prepare", off_by_one)
    assert_one_line_error(
        tasoc("run", str(good), "--check"),
        "jax results differ from the numpy reference: output #0: jax ",
        "from float64: jax is more than 32x further than numpy",
    )


def test_run_params_supply_the_arguments(tasoc, good: Path, tmp_path: Path) -> None:
    module = load_module(str(good))
    names = [info.name for info in arg_infos(entry_function(module))]
    params = tmp_path / "p.npz"
    np.savez(params, **dict(zip(names, random_inputs(module, seed=5), strict=True)))
    from_file = tasoc("run", str(good), "--backend", "numpy", "--params", str(params))
    seeded = tasoc("run", str(good), "--backend", "numpy", "--seed", "5")
    assert from_file.code == seeded.code == 0
    assert from_file.out.splitlines()[1:] == seeded.out.splitlines()[1:]


def test_run_bad_params_are_one_line(tasoc, good: Path, tmp_path: Path) -> None:
    not_npz = tmp_path / "junk.npz"
    not_npz.write_text("not a zip file")
    wrong_shape = tmp_path / "shape.npz"
    np.savez(wrong_shape, w=np.zeros((3, 3), np.float32))
    no_weights = tmp_path / "empty.npz"
    np.savez(no_weights, x=np.zeros((2, 4), np.float32))
    cases = [
        (not_npz, ["bad --params file", "junk.npz"]),
        (wrong_shape, ["bad --params file", "'w' expects 4x3xf32"]),
        (no_weights, ["bad --params file", "missing weights w"]),
        (tmp_path / "absent.npz", ["cannot read --params file", "absent.npz"]),
    ]
    for path, fragments in cases:
        result = tasoc("run", str(good), "--backend", "numpy", "--params", str(path))
        assert_one_line_error(result, *fragments)


@pytest.mark.parametrize(
    ("text", "fragment"),
    [(VERIFY_FAILURE, "bad.mlir:2:3: 'graph.matmul'"), (MALFORMED, "bad.mlir:3:1")],
)
def test_run_bad_ir_is_one_line(tasoc, tmp_path: Path, text: str, fragment: str) -> None:
    path = tmp_path / "bad.mlir"
    path.write_text(text)
    assert_one_line_error(tasoc("run", str(path), "--backend", "numpy"), fragment)


# ---------------------------------------------------------------------- zoo, help


def test_zoo_lists_models_with_options(tasoc) -> None:
    result = tasoc("zoo")
    assert result.code == 0
    lines = result.out.splitlines()
    for model in list_models():
        index = next(i for i, line in enumerate(lines) if line.startswith(f"{model.name} "))
        assert model.summary in lines[index]
        # The options line, written as a zoo spec, gives back exactly the defaults.
        options = lines[index + 1].strip().removeprefix("options: ")
        query = "" if options == "(none)" else options.replace(", ", "&")
        _, parsed = parse_spec(f"{model.name}?{query}")
        assert parsed == dict(model.defaults)


def test_help_and_version(tasoc) -> None:
    top = tasoc("--help")
    assert top.code == 0 and all(c in top.out for c in ("opt", "run", "zoo"))
    assert tasoc("--version").out.startswith("tasoc ")
    opt_help = tasoc("opt", "--help")
    assert opt_help.code == 0 and "--verify-each" in opt_help.out and "tasoc opt" in opt_help.out
    assert "--params" in tasoc("run", "--help").out


# ------------------------------------------------------------ the real console script


@pytest.mark.skipif(not TASOC_SCRIPT.exists(), reason="console script not installed")
def test_console_script_round_trip_and_error(tmp_path: Path) -> None:
    env = {k: v for k, v in os.environ.items() if k != "TASOC_DEBUG"}
    written = subprocess.run(
        [str(TASOC_SCRIPT), "opt", SMALL_BERT, "-o", "b.mlir"], cwd=tmp_path, env=env, check=True
    )
    assert written.returncode == 0
    printed = subprocess.run(
        [str(TASOC_SCRIPT), "opt", "b.mlir"], cwd=tmp_path, env=env, capture_output=True, text=True
    )
    assert printed.returncode == 0
    assert printed.stdout == (tmp_path / "b.mlir").read_text()

    failed = subprocess.run(
        [str(TASOC_SCRIPT), "opt", "zoo:bert?layers=x", "-o", "b.mlir"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
    )
    assert failed.returncode == 1
    assert failed.stderr.startswith("tasoc: error: ") and failed.stderr.count("\n") == 1
    assert "Traceback" not in failed.stderr
    assert printed.stdout == (tmp_path / "b.mlir").read_text()


def test_a_reader_that_stops_early_gets_no_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`tasoc opt model | head` (as `make demo` does): when the reader has gone, the run
    ends quietly with status 1 instead of an 'internal error: BrokenPipeError' line."""
    read_end, write_end = os.pipe()
    os.close(read_end)  # the reader went away
    closed_pipe = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", closed_pipe)
    assert main(["opt", "zoo:inception_v3"]) == 1
    closed_pipe.close()
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("args", [["--help"], ["zoo"], ["opt", "--help"]])
def test_a_reader_gone_before_the_last_buffered_bytes_gets_no_error(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], args: list[str]
) -> None:
    """A short output stays in Python's buffer until it is flushed: `main` flushes it
    itself, so a closed pipe is the same quiet status 1, not "Exception ignored" and
    status 120 at exit (or 0 for a help text)."""
    read_end, write_end = os.pipe()
    os.close(read_end)
    closed_pipe = os.fdopen(write_end, "w")
    monkeypatch.setattr(sys, "stdout", closed_pipe)
    assert main(args) == 1
    closed_pipe.close()
    assert capsys.readouterr().err == ""


def test_opt_leaves_the_garbage_collector_as_it_found_it(tasoc, good: Path) -> None:
    thresholds = gc.get_threshold()
    assert tasoc("opt", good).code == 0
    assert gc.get_threshold() == thresholds
    assert gc.get_freeze_count() == 0  # nothing left out of collections


def _tanh_mlp(depth: int, width: int = 64, gain: float = 2.5) -> ModuleOp:
    """`depth` layers of tanh(x @ W), W of gain 2.5: chaotic, so float32 rounding grows
    through it and two correct float32 computations end up far apart."""
    rng = np.random.default_rng(1)
    g = GraphBuilder()
    x = g.input("x", (8, width))
    for _ in range(depth):
        weight = rng.standard_normal((width, width)) * gain / np.sqrt(width)
        x = g.tanh(g.matmul(x, g.constant(weight.astype(np.float32))))
    return g.build(x)


def test_a_deep_program_past_the_tolerances_passes_as_far_from_float64_as_the_reference(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """20 chaotic layers: JAX and the reference differ beyond the tolerances end to end,
    both drift from the program in float64 alike, and every op agrees with its kernel;
    each line says why that is a pass."""
    module = _tanh_mlp(20)
    inputs = [np.random.default_rng(1).standard_normal((8, 64)).astype(np.float32)]
    expected = run_module.run_reference(module, inputs)
    outputs = run_module.prepare(module, "jax").run(inputs)
    assert not compare(expected, outputs).ok
    witnesses = run_module._witnesses(module, inputs, "jax")
    run_module._check_against("the numpy reference", expected, outputs, "jax", set(), witnesses)
    lines = capsys.readouterr().out.splitlines()
    assert re.fullmatch(
        r"  check output #0: jax \S+, numpy \S+ from float64: equivalent within float32 rounding",
        lines[1],
    )
    assert re.fullmatch(
        r"check: 1 output\(s\) differ from the numpy reference beyond tolerance, each as far "
        r"from float64 as rounding puts numpy \(within 32x\); all 60 ops agree with their "
        r"reference kernels on the same inputs; the most drift: op \d+ \(graph.\w+\) result "
        r"#0 .*; so the program is equivalent",
        lines[2],
    )


def _witnesses(wide: np.ndarray, ops: Sequence[OpReport] = ()) -> run_module.Witnesses:
    return run_module.Witnesses(float64=lambda: [wide], op_by_op=lambda: OpByOp(tuple(ops)))


def test_an_output_further_from_float64_than_the_reference_fails_in_one_line() -> None:
    """Past the tolerances and ROUNDING_FACTOR times further from float64 than the
    reference: the error names the output and both distances."""
    expected = [np.array([3.0, 1.0, 2.0, 0.5], np.float32)]
    wide = expected[0].astype(np.float64) + 1e-6  # the reference: one rounding away
    far = [expected[0] + np.float32(1e-3)]
    message = r"jax results differ from the numpy reference: output #0: jax 0.00033, numpy "
    message += r"3.3e-07 from float64: jax is more than 32x further than numpy$"
    with pytest.raises(run_module.DriverError, match=message):
        run_module._check_against(
            "the numpy reference", expected, far, "jax", set(), _witnesses(wide)
        )
    with pytest.raises(run_module.DriverError, match="NOT equivalent: output #0"):
        run_module._check_against("the numpy reference", expected, far, "jax", set())


def test_an_op_that_disagrees_fails_the_check_naming_the_op_that_drifts_most() -> None:
    """As far from float64 as the reference, but op by op two ops disagree with their
    kernels: the error names the one furthest past its tolerance."""
    expected = [np.array([3.0, 1.0], np.float32)]
    drifted = [expected[0] + np.float32(1e-3)]
    wide = expected[0].astype(np.float64) + 5e-4
    one = np.ones(1, np.float32)
    ops = [
        OpReport(1, "graph.tanh", compare([one], [one * np.float32(1.001)])),
        OpReport(3, "graph.erf", compare([one], [one * np.float32(1.1)])),
        OpReport(4, "graph.add", compare([one], [one])),
    ]
    match = r"2 of 3 ops disagree .* the most op 3 \(graph.erf\) result #0 \(1xf32\)"
    with pytest.raises(run_module.DriverError, match=match):
        run_module._check_against(
            "the numpy reference", expected, drifted, "jax", set(), _witnesses(wide, ops)
        )


def test_op_by_op_takes_i64_values_that_jax_holds_as_int32() -> None:
    """JAX without x64 computes i64 in int32; op by op, its results are compared in the
    declared type, as the program's outputs are."""
    g = GraphBuilder()
    ids = g.input("ids", (2, 3), "i64")
    module = g.build(g.add(ids, g.constant(np.arange(6).reshape(2, 3), "i64")))
    compared = compare_ops(module, random_inputs(module))
    assert (len(compared.ops), compared.mismatches) == (2, [])


F64_PROGRAM = """\
func.func @main(%x: tensor<3xf64>) -> tensor<3xf64> {
  %0 = graph.constant {value = dense<[1.0e+300, 1.0e-12, 0.0]> : tensor<3xf64>} : tensor<3xf64>
  %1 = graph.add %x, %0 : tensor<3xf64>
  %2 = graph.add %1, %0 : tensor<3xf64>
  func.return %2 : tensor<3xf64>
}
"""


def test_check_of_an_f64_program_compares_at_float64_precision(tasoc, tmp_path: Path) -> None:
    """1e300 + 1e300 and x + 2e-12 survive JAX (x64 scoped to the program), and the check
    holds them to float64's tolerances, which float32 arithmetic could not meet."""
    source = tmp_path / "f64.mlir"
    source.write_text(F64_PROGRAM)
    result = tasoc("run", source, "--check")
    assert result.code == 0, result
    assert "abs-max 2e+300" in result.out
    assert "max abs error 0, max rel error 0 (rtol 1e-12, atol 1e-13)" in result.out
    assert "check: equivalent to the numpy reference" in result.out
