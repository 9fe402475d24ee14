"""`tasoc run` on memory-placed programs: `--mode compiled|runtime`, `--check` against
the unplaced program's reference, the measured memory line and report, `--audit`'s
CUDA placements, `--steps`, `--backend numpy`'s note, and every refusal in one line."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from conftest import assert_one_line_error
from memory_helpers import STEP, SWAPS
from strict_cli import StrictRun, strict_runner

FORWARD = """\
func.func @main(%x: tensor<4x8xf32>, %w: tensor<8x8xf32> {graph.param}) -> tensor<4x8xf32> {
  %y = graph.matmul %x, %w : tensor<4x8xf32>
  func.return %y : tensor<4x8xf32>
}
"""


@pytest.fixture
def run(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    return strict_runner(capfd)


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    paths = {}
    for name, text in {
        "swaps": SWAPS,
        "step": STEP,
        "forward": FORWARD,
    }.items():
        paths[name] = tmp_path / f"{name}.mlir"
        paths[name].write_text(text)
    return paths


def test_compiled_is_the_default_mode(run: StrictRun, files: dict[str, Path]) -> None:
    result = run("run", files["swaps"], "--check")
    assert result.code == 0, result
    assert "on jax, compiled mode (seed 0):" in result.out
    assert "check: equivalent to the numpy reference of the unplaced program" in result.out
    assert "memory: planned peak device memory 48 KiB (replay); 80 KiB without placement" in (
        result.out
    )
    assert result.err == ""


def test_runtime_mode_measures_the_replay(
    run: StrictRun, files: dict[str, Path], tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    result = run("run", files["swaps"], "--check", "--mode", "runtime", "--report", report)
    assert result.code == 0, result
    assert "on jax, runtime mode (seed 0):" in result.out
    assert "memory: peak live device memory measured 48 KiB, planned 48 KiB (replay)" in result.out
    assert "check: the measured device bytes are the replay's, op by op" in result.out
    placement = json.loads(report.read_text())["placement"]
    assert placement["mode"] == "runtime"
    assert placement["measured_peak_bytes"] == placement["planned_peak_bytes"] == 49152
    assert placement["measured_bytes"] == placement["planned_bytes"]
    assert len(placement["measured_bytes"]) == 1 + 7  # the arguments, then each op


def test_runtime_check_fails_when_the_measurement_is_not_the_replay(
    run: StrictRun, files: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A runtime that holds more than planned (here: one that never releases a value)
    is caught at the first op where the bytes differ, in one line."""
    from tasoc.backends.jax import placed
    from tasoc.ir.memory import release_points

    never = lambda function: tuple(() for _ in release_points(function))  # noqa: E731
    monkeypatch.setattr(placed, "release_points", never)
    result = run("run", files["swaps"], "--check", "--mode", "runtime")
    assert_one_line_error(
        result,
        "runtime mode measured what the replay does not plan:",
        "49152 bytes after op 2 (memory.swap_out), planned 32768",
    )


def test_audit_sets_the_cuda_placements_beside_the_program(
    run: StrictRun, files: dict[str, Path], tmp_path: Path
) -> None:
    report = tmp_path / "r.json"
    result = run("run", files["swaps"], "--audit", "--report", report)
    assert result.code == 0, result
    assert re.search(r"copies to host \(swap-outs, host results\)\s+2\s+2", result.out)
    assert re.search(r"copies to device \(swap-ins, device results\)\s+3\s+3", result.out)
    assert "audit: the CUDA lowering places every value where the IR says" in result.out
    audit = json.loads(report.read_text())["audit"]
    assert audit["equal"] and audit["planned"] == audit["cuda"]


@pytest.mark.parametrize("mode", ["compiled", "runtime"])
def test_steps_of_a_placed_training_step(
    run: StrictRun, files: dict[str, Path], mode: str, tmp_path: Path
) -> None:
    """The new weight comes back in host memory, where the step reads it next; the
    batch the runtime frees is placed anew each step; the losses are the reference's."""
    report = tmp_path / "r.json"
    result = run(
        "run", files["step"], "--steps", "3", "--check", "--mode", mode, "--report", report
    )
    assert result.code == 0, result
    assert f"3 training steps on jax, {mode} mode (seed 0)" in result.out
    assert "check: equivalent to the numpy reference (first step)" in result.out
    losses = json.loads(report.read_text())["losses"]
    reference = run("run", files["step"], "--steps", "3", "--backend", "numpy", "--report", report)
    assert reference.code == 0, reference
    expected = json.loads(report.read_text())["losses"]
    assert losses == pytest.approx(expected, rel=1e-5)
    assert losses[2] < losses[0]
    if mode == "runtime":
        assert (
            "memory: peak live device memory measured 776 bytes, planned 776 bytes (replay)"
            in result.out
        )


def test_numpy_backend_runs_the_unplaced_program_and_says_so(
    run: StrictRun, files: dict[str, Path]
) -> None:
    result = run("run", files["swaps"], "--backend", "numpy")
    assert result.code == 0, result
    assert "on numpy (seed 0):" in result.out
    lines = result.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("tasoc: note: --backend numpy ignores memory")


@pytest.mark.parametrize(
    ("name", "options", "fragments"),
    [
        ("forward", ["--mode", "runtime"], ["--mode says how a memory-placed program runs"]),
        ("forward", ["--mode", "compiled"], ["forward.mlir is not one"]),
        ("swaps", ["--mode", "runtime", "--backend", "numpy"], ["it needs --backend jax"]),
        ("swaps", ["--mode", "eager"], ["argument --mode: invalid choice: 'eager'"]),
        ("swaps", ["--mode", "runtime", "--bench", "2"], ["--bench times the compiled mode"]),
        ("swaps", ["--check-onnxruntime"], ["on a memory-placed program is not supported"]),
        ("forward", ["--audit"], ["(or a memory-placed program's host-memory placements)"]),
        ("swaps", ["--steps", "2"], ["--steps runs a training step"]),
    ],
)
def test_bad_placed_runs_are_one_line(
    run: StrictRun, files: dict[str, Path], name: str, options: list[str], fragments: list[str]
) -> None:
    assert_one_line_error(run("run", files[name], *options), *fragments)


def test_help_lists_the_mode(run: StrictRun) -> None:
    result = run("run", "--help")
    assert "--mode {compiled,runtime}" in result.out
    assert "memory-placed program" in result.out
