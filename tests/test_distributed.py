"""`tasoc run --processes P`: a sharded program as P JAX processes (`jax.distributed`).

The runs are real: `tasoc` starts its worker processes, which join a coordinator on a
localhost port and run the program with gloo's CPU collectives. Each test that starts
processes costs a few seconds; the unreachable coordinator waits out its timeout.
"""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.driver.distributed import STARTUP_GRACE
from tasoc.driver.run import checksum
from tasoc.driver.sources import load_program
from tasoc.ir.parallel import unsharded

BATCH_SPLIT_MATMUL = """\
parallel.mesh @mesh ["x" = 2, "y" = 4]
func.func @main(%x: tensor<16x8xf32, #parallel.sharding<@mesh, [["x"], ["y"]]>>,
                %w: tensor<8x4xf32, #parallel.sharding<@mesh, [["y"], []]>>)
    -> tensor<16x4xf32, #parallel.sharding<@mesh, [[], []]>> {
  %y = graph.matmul %x, %w
      : tensor<16x4xf32, #parallel.sharding<@mesh, [["x"], []], unreduced = ["y"]>>
  %s = parallel.all_reduce %y : tensor<16x4xf32, #parallel.sharding<@mesh, [["x"], []]>>
  %r = graph.relu %s : tensor<16x4xf32, #parallel.sharding<@mesh, [["x"], []]>>
  %z = parallel.all_gather %r : tensor<16x4xf32, #parallel.sharding<@mesh, [[], []]>>
  func.return %z : tensor<16x4xf32, #parallel.sharding<@mesh, [[], []]>>
}
"""
"""A 2 x 4 mesh: the batch split over "x" (one process each), the contracting dim over
"y" (the devices of a process), so the matmul's partial sums are all-reduced within a
process and the result all-gathered across the two."""

PARTIAL_RESULT = """\
parallel.mesh @mesh ["d" = 4]
func.func @main(%x: tensor<16x8xf32, #parallel.sharding<@mesh, [[], ["d"]]>>,
                %w: tensor<8x4xf32, #parallel.sharding<@mesh, [["d"], []]>>)
    -> tensor<16x4xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>> {
  %y = graph.matmul %x, %w
      : tensor<16x4xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
  func.return %y : tensor<16x4xf32, #parallel.sharding<@mesh, [[], []], unreduced = ["d"]>>
}
"""
"""A program that verifies and that no backend can run: its result is left as partial sums."""


def _program(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sharded.mlir"
    path.write_text(text)
    return path


def _tasoc_process(*args: str | Path) -> tuple[subprocess.CompletedProcess[str], float]:
    """`tasoc ARGS...` as its own process (as a user runs it), and its seconds."""
    start = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", "tasoc.driver.main", *map(str, args)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    return done, time.monotonic() - start


def _as_result(done: subprocess.CompletedProcess[str]) -> Result:
    return Result(done.returncode, done.stdout, done.stderr)


def _reference_checksum(module: ModuleOp, seed: int) -> str:
    """The checksum one process prints for the numpy reference of the unsharded program."""
    (expected,) = run_reference(unsharded(module), random_inputs(module, seed))
    return checksum(expected)


def test_two_processes_of_four_devices_match_the_reference(tmp_path: Path) -> None:
    path = _program(tmp_path, BATCH_SPLIT_MATMUL)
    done, _ = _tasoc_process("run", path, "--processes", "2", "--devices", "4", "--check")
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
    lines = done.stdout.splitlines()
    assert lines[0] == f"{path} on jax, 8 devices (seed 0):"
    # Only process 0's output, and nothing of gloo's connection log.
    assert len(lines) == 4 and not any("Gloo" in line for line in lines), lines
    assert lines[1] == f"  z: 16x4xf32  {_reference_checksum(load_program(str(path)).module, 0)}"
    assert lines[-1] == "check: equivalent to the numpy reference of the unsharded program"


def test_a_failing_worker_is_one_error_line(tmp_path: Path) -> None:
    path = _program(tmp_path, PARTIAL_RESULT)
    done, _ = _tasoc_process("run", path, "--processes", "2")
    assert_one_line_error(_as_result(done), "process 0: ", "partial sums")


def _closed_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def test_an_unreachable_coordinator_is_an_error_within_the_timeout(tmp_path: Path) -> None:
    path = _program(tmp_path, BATCH_SPLIT_MATMUL)
    address = f"127.0.0.1:{_closed_port()}"
    done, seconds = _tasoc_process(
        "run",
        path,
        *("--processes", "2", "--devices", "4", "--coordinator", address),
        *("--process-id", "1", "--connect-timeout", "2"),
    )
    line = assert_one_line_error(_as_result(done))
    assert line == f"tasoc: error: could not reach the coordinator {address} within 2 s"
    assert seconds < 2 + STARTUP_GRACE


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        (("--processes", "2", "--devices", "2"), ("mesh has 8 devices", "make 4")),
        (("--processes", "3"), ("8 devices", "3 processes cannot share")),
        (("--process-id", "1"), ("--process-id needs --processes",)),
        (("--processes", "2", "--process-id", "1"), ("go together",)),
        (("--processes", "2", "--coordinator", "h:1", "--process-id", "2"), ("not below",)),
        (("--processes", "2", "--coordinator", "nohost", "--process-id", "1"), ("HOST:PORT",)),
        (("--processes", "2", "--backend", "numpy"), ("not with --backend numpy",)),
        (("--processes", "2", "--steps", "2"), ("not with --steps",)),
        (("--processes", "2", "--report", "r.json"), ("not with --report",)),
    ],
)
def test_bad_process_options_are_one_line_errors(
    tasoc: Callable[..., Result],
    tmp_path: Path,
    options: tuple[str, ...],
    fragments: tuple[str, ...],
) -> None:
    path = _program(tmp_path, BATCH_SPLIT_MATMUL)
    assert_one_line_error(tasoc("run", path, *options), *fragments)


def test_an_unsharded_program_is_refused(tasoc: Callable[..., Result], tmp_path: Path) -> None:
    path = tmp_path / "plain.mlir"
    path.write_text(
        "func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {\n"
        "  %y = graph.relu %x : tensor<4xf32>\n"
        "  func.return %y : tensor<4xf32>\n"
        "}\n"
    )
    assert_one_line_error(tasoc("run", path, "--processes", "2"), "is not one")
