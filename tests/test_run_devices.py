"""`tasoc run` on sharded programs: `--devices N` makes N CPU devices (in a fresh
process: in this one JAX already has 8, `conftest.TEST_DEVICES`), `--check` against the
unsharded reference, `--audit` and its report, and one-line errors for what cannot run."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error
from sharded_programs import GATHER, LINE, program_text, t


def written(tmp_path: Path, text: str, name: str = "s.mlir") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


def on_mesh(size: int) -> str:
    """GATHER on a 1-D mesh of `size` devices."""
    return GATHER.replace('["d" = 8]', f'["d" = {size}]')


def tasoc_process(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """`tasoc ARGS...` in a fresh process (JAX not yet started there)."""
    env = {k: v for k, v in os.environ.items() if k not in ("TASOC_DEBUG", "JAX_NUM_CPU_DEVICES")}
    return subprocess.run(
        [str(Path(sys.executable).parent / "tasoc"), *map(str, args)],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )


# ---------------------------------------------------------------- fresh processes


def test_devices_makes_cpu_devices_and_check_matches_the_unsharded_reference(
    tmp_path: Path,
) -> None:
    run = tasoc_process("run", written(tmp_path, GATHER), "--devices", "8", "--check")
    assert run.returncode == 0, run.stderr
    assert "on jax, 8 devices" in run.stdout
    assert "check: equivalent to the numpy reference of the unsharded program" in run.stdout


def test_without_devices_a_sharded_program_is_one_line_saying_how_many(
    tmp_path: Path,
) -> None:
    """JAX is not asked for fake devices behind the user's back (on a GPU machine that
    would run the program on the CPU): the error names the count to ask for."""
    run = tasoc_process("run", written(tmp_path, on_mesh(4)), "--check")
    assert run.returncode == 1
    (line,) = run.stderr.splitlines()
    assert (
        line.startswith("tasoc: error: ")
        and "sharded over 4 devices (@m): give --devices 4" in line
    )
    assert tasoc_process("run", written(tmp_path, on_mesh(4)), "--devices", "4").returncode == 0


def test_too_few_devices_is_one_line_naming_both_counts(tmp_path: Path) -> None:
    run = tasoc_process("run", written(tmp_path, on_mesh(16)), "--devices", "8")
    assert run.returncode == 1
    assert run.stderr.splitlines() == [
        "tasoc: error: cannot run on jax: mesh @m needs 16 devices and JAX has 8: "
        "run with --devices 16"
    ]


# ------------------------------------------------------------------- in-process

Tasoc = Callable[..., Result]


def test_audit_prints_the_table_and_reports_it(tasoc: Tasoc, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = tasoc(
        "run", written(tmp_path, GATHER), "--devices", "8", "--audit", "--report", report
    )
    assert result.code == 0, result
    assert "all-gather  1   32        1        32         1     ok" in result.out
    assert "audit: the compiled collectives are the ones the IR asks for" in result.out
    audit = json.loads(report.read_text())["audit"]
    assert audit["ok"] and audit["kinds"][0]["kind"] == "all-gather"


def test_bench_times_the_sharded_program(tasoc: Tasoc, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = tasoc(
        "run", written(tmp_path, GATHER), "--devices", "8", "--bench", "2", "--report", report
    )
    assert result.code == 0, result
    assert "bench: 2 runs on jax, 8 devices, median" in result.out
    written_report = json.loads(report.read_text())
    assert written_report["devices"] == 8 and len(written_report["bench_seconds"]) == 2


def test_numpy_backend_runs_the_unsharded_program(tasoc: Tasoc, tmp_path: Path) -> None:
    path = written(tmp_path, GATHER)
    jax_run = tasoc("run", path, "--devices", "8")
    numpy_run = tasoc("run", path, "--backend", "numpy")
    assert numpy_run.code == 0, numpy_run
    checksum = jax_run.out.splitlines()[1].split("mean")[1]
    assert numpy_run.out.splitlines()[1].split("mean")[1][:8] == checksum[:8]


@pytest.mark.parametrize(
    ("flags", "fragment"),
    [
        (["--devices", "0"], "--devices must be between 1 and 4096, not 0"),
        (["--devices", "5000"], "--devices must be between 1 and 4096, not 5000"),
        (["--devices", "16"], "JAX already runs on 8 devices and cannot make 16"),
        (["--devices", "8", "--steps", "2"], "--steps runs a training step"),
        (
            ["--devices", "8", "--check-onnxruntime"],
            "--check-onnxruntime on a sharded program is not supported",
        ),
        (["--audit", "--backend", "numpy"], "--audit reads the HLO that JAX compiles"),
    ],
)
def test_bad_device_options(tasoc: Tasoc, tmp_path: Path, flags: list[str], fragment: str) -> None:
    assert_one_line_error(tasoc("run", written(tmp_path, GATHER), *flags), fragment)


def test_audit_of_an_unsharded_program(tasoc: Tasoc, tmp_path: Path) -> None:
    plain = (
        "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n  func.return %x : tensor<4xf32>\n}"
    )
    result = tasoc("run", written(tmp_path, plain), "--audit")
    assert_one_line_error(result, "--audit reads a sharded program's collectives")


def test_a_sharded_program_with_too_few_devices(tasoc: Tasoc, tmp_path: Path) -> None:
    result = tasoc("run", written(tmp_path, on_mesh(16)), "--devices", "8")
    assert_one_line_error(result, "needs 16 devices and JAX has 8", "run with --devices 16")


def test_a_result_left_as_partial_sums(tasoc: Tasoc, tmp_path: Path) -> None:
    partial = t("8x16", "[], []", unreduced='"d"')
    text = program_text(
        LINE,
        {"x": t("8x32", '[], ["d"]'), "w": t("32x16", '["d"], []')},
        f"  %y = graph.matmul %x, %w : {partial}\n  func.return %y : {partial}",
        [partial],
    )
    result = tasoc("run", written(tmp_path, text), "--devices", "8")
    assert_one_line_error(result, "result #0 holds partial sums along ['d']")


def test_two_device_groups_run_and_check_but_do_not_audit(tasoc: Tasoc, tmp_path: Path) -> None:
    here = 'tensor<8xf32, #parallel.sharding<@m, [["d"]]>>'
    there = 'tensor<8xf32, #parallel.sharding<@n, [["d"]]>>'
    text = program_text(
        'parallel.mesh @m ["d" = 4]\nparallel.mesh @n ["d" = 4] devices [4, 5, 6, 7]',
        {"x": here},
        f"  %y = parallel.replicate %x : {there}\n  %z = graph.relu %y : {there}\n"
        f"  func.return %z : {there}",
        [there],
    )
    path = written(tmp_path, text)
    result = tasoc("run", path, "--devices", "8", "--check")
    assert result.code == 0, result
    assert "on jax, 8 devices" in result.out and "check: equivalent" in result.out
    audit = tasoc("run", path, "--devices", "8", "--audit")
    assert_one_line_error(audit, "the audit reads programs on one mesh")


# ------------------------------------------------------------------ the done


def test_alexnet_training_step_sharded_by_the_expert_strategy(tasoc: Tasoc, tmp_path: Path) -> None:
    """Issue 15's "done": autodiff then soap-shard{mesh=8 search=expert}, run on 8
    devices, equals the reference; the HLO's collectives carry the IR's bytes."""
    sharded = tmp_path / "s.mlir"
    made = tasoc(
        "opt",
        "zoo:alexnet?batch=16&image=64",
        "-p",
        "autodiff{loss=softmax-cross-entropy optimizer=sgd lr=0.01},"
        "soap-shard{mesh=8 search=expert}",
        "-o",
        sharded,
    )
    assert made.code == 0, made
    report = tmp_path / "r.json"
    result = tasoc("run", sharded, "--devices", "8", "--check", "--audit", "--report", report)
    assert result.code == 0, result
    assert "check: equivalent to the numpy reference of the unsharded program" in result.out
    audit = json.loads(report.read_text())["audit"]
    assert audit["same_bytes"], audit["kinds"]
    assert {row["kind"] for row in audit["kinds"]} >= {"all-reduce", "all-gather"}


def losses(output: str) -> list[float]:
    return [
        float(line.split("loss")[1]) for line in output.splitlines() if line.startswith("step ")
    ]


@pytest.mark.parametrize("search", ["data-parallel", "expert"])
def test_a_sharded_training_step_trains_as_the_unsharded_one(
    tasoc: Tasoc, tmp_path: Path, search: str
) -> None:
    """`--steps` feeds a sharded step's new weights back in the layout it reads them
    in; the losses are those of the same step on one device."""
    step = tmp_path / "step.mlir"
    train = "autodiff{loss=softmax-cross-entropy optimizer=momentum lr=0.05}"
    classifier = Path(__file__).resolve().parent.parent / "examples" / "classifier.mlir"
    made = tasoc("opt", str(classifier), "-p", train, "-o", str(step))
    assert made.code == 0, made
    sharded = tmp_path / "sharded.mlir"
    made = tasoc(
        "opt", str(step), "-p", f"soap-shard{{mesh=4 search={search}}}", "-o", str(sharded)
    )
    assert made.code == 0, made
    one = tasoc("run", str(step), "--steps", "4")
    many = tasoc("run", str(sharded), "--devices", "8", "--steps", "4")
    assert one.code == 0 and many.code == 0, many
    assert len(losses(many.out)) == 4
    assert losses(many.out) == pytest.approx(losses(one.out), rel=1e-4)
    assert losses(many.out)[-1] < losses(many.out)[0]
