"""Every output safe: the files a `tasoc` command writes are committed together or not
at all, colliding paths are refused, special files are written through, signals leave
nothing behind (`tasoc.driver.outputs`, docs/driver.md *Outputs*).

Each case has several members: the contract is about a family of inputs, not one.
Failures are checked byte for byte against a snapshot of the whole directory, so a
changed output and a temporary file left behind both show.
"""

from __future__ import annotations

import errno
import io
import json
import os
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
import weakref
from collections.abc import Callable, Iterator
from pathlib import Path
from unittest import mock

import numpy as np
import onnx
import pytest
from conftest import assert_one_line_error
from hypothesis import given
from hypothesis import strategies as st

from tasoc.backends.arguments import random_inputs
from tasoc.driver import outputs
from tasoc.driver.errors import DriverError, Terminated
from tasoc.driver.outputs import Outputs
from tasoc.driver.signals import signals_as_exceptions
from tasoc.driver.sources import load_module
from tasoc.ir.program import arg_infos, entry_function

SMALL = "zoo:nasrnn?hidden=8&length=1"
OLD = b"the previous contents\n"
IS_ROOT = os.geteuid() == 0

FALSE_RULE = """\
// tasoc rules, format 1

rule relu-is-identity(x: 2) {
  src {
    s1 = relu(x)
    return s1
  }
  tgt {
    return x
  }
}
"""

TRUE_RULE = """\
// tasoc rules, format 1

rule add-commutes(x: 2, y: 2) {
  src {
    s1 = add(x, y)
    return s1
  }
  tgt {
    t1 = add(y, x)
    return t1
  }
}
"""

BAD_SHAPES = """\
func.func @main(%x: tensor<2x3xf32>, %w: tensor<4x5xf32>) -> tensor<2x5xf32> {
  %y = "graph.matmul"(%x, %w) : (tensor<2x3xf32>, tensor<4x5xf32>) -> tensor<2x5xf32>
  func.return %y : tensor<2x5xf32>
}
"""

IDENTITY = """\
func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
  func.return %x : tensor<2xf32>
}
"""


def snapshot(directory: Path) -> dict[str, object]:
    """Every entry of `directory` (recursively) with what identifies its state: a file's
    bytes, a link's target, a FIFO or device's kind."""
    state: dict[str, object] = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        mode = path.lstat().st_mode
        if stat.S_ISLNK(mode):
            state[name] = ("link", os.readlink(path))
        elif stat.S_ISREG(mode):
            state[name] = path.read_bytes()
        else:
            state[name] = ("node", stat.S_IFMT(mode))
    return state


@pytest.fixture
def program(tasoc, tmp_path: Path) -> Path:
    """A small text program `m.mlir` with its weights beside it in `m.npz`."""
    path = tmp_path / "m.mlir"
    assert tasoc("opt", SMALL, "-o", path).code == 0
    module = load_module(str(path))
    infos = arg_infos(entry_function(module))
    params = {
        info.name: value
        for info, value in zip(infos, random_inputs(module, 0), strict=True)
        if info.is_param
    }
    np.savez(tmp_path / "m.npz", **params)
    return path


@pytest.fixture
def outputs_exist(tmp_path: Path) -> Iterator[dict[str, Path]]:
    """`out.mlir`, `out.npz` and `r.json` holding OLD."""
    paths = {name: tmp_path / name for name in ("out.mlir", "out.npz", "r.json")}
    for path in paths.values():
        path.write_bytes(OLD)
    yield paths


# ----------------------------------------------------------------- all or nothing


def _report_is_directory(tmp_path: Path) -> str:
    (tmp_path / "dir.json").mkdir()
    return str(tmp_path / "dir.json")


def _report_under_a_file(tmp_path: Path) -> str:
    return str(tmp_path / "m.mlir" / "r.json")


def _report_under_nothing(tmp_path: Path) -> str:
    return str(tmp_path / "missing" / "r.json")


def _report_is_a_socket(tmp_path: Path) -> str:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(tmp_path / "s.json"))
    server.close()
    return str(tmp_path / "s.json")


@pytest.mark.parametrize(
    ("make_report", "fragment"),
    [
        (_report_is_directory, "Is a directory"),
        (_report_under_a_file, "Not a directory"),
        (_report_under_nothing, "No such file or directory"),
        (_report_is_a_socket, "not a regular file, FIFO or character device"),
    ],
    ids=["directory", "parent-is-a-file", "no-parent", "socket"],
)
def test_a_report_that_cannot_be_written_fails_first_and_changes_no_output(
    tasoc, tmp_path: Path, program: Path, outputs_exist, make_report, fragment: str
) -> None:
    report = make_report(tmp_path)
    before = snapshot(tmp_path)
    out = outputs_exist["out.mlir"]
    result = tasoc("opt", program, "-p", "cse", "-o", out, "--report", report)
    assert_one_line_error(result, f"cannot write '{report}'", fragment)
    assert snapshot(tmp_path) == before


def _npz_is_a_directory(npz: Path) -> None:
    npz.mkdir()


def _npz_links_to_a_directory(npz: Path) -> None:
    (npz.parent / "dir").mkdir()
    npz.symlink_to("dir")


def _npz_links_into_nothing(npz: Path) -> None:
    npz.symlink_to("missing/w.npz")


def _npz_is_a_socket(npz: Path) -> None:
    server = socket.socket(socket.AF_UNIX)
    server.bind(str(npz))
    server.close()


@pytest.mark.parametrize("flag", ["-o", "--report"])
def test_a_path_ending_in_a_slash_names_a_directory_and_is_refused(
    tasoc, tmp_path: Path, flag: str
) -> None:
    """`out.mlir/` is a directory to every Unix tool, existing or not: never written."""
    given = f"{tmp_path / 'out.mlir'}/"
    assert_one_line_error(
        tasoc("opt", SMALL, flag, given), f"cannot write '{given}': Is a directory"
    )
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(
    "block",
    [_npz_is_a_directory, _npz_links_to_a_directory, _npz_links_into_nothing, _npz_is_a_socket],
    ids=["directory", "link-to-directory", "dangling-into-nothing", "socket"],
)
def test_a_weights_file_that_cannot_be_written_changes_no_output(
    tasoc, tmp_path: Path, program: Path, block: Callable[[Path], None]
) -> None:
    """The `.npz` beside `-o` is an output too, checked before any work."""
    out = tmp_path / "out.mlir"
    out.write_bytes(OLD)
    block(tmp_path / "out.npz")
    before = snapshot(tmp_path)
    result = tasoc("opt", program, "-o", out, "--report", tmp_path / "r.json")
    assert_one_line_error(result, f"cannot write '{tmp_path / 'out.npz'}'")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("failing", ["out.mlir", "out.npz", "r.json"])
def test_a_commit_that_fails_halfway_puts_back_what_it_replaced(
    tasoc,
    tmp_path: Path,
    program: Path,
    outputs_exist,
    monkeypatch: pytest.MonkeyPatch,
    failing: str,
) -> None:
    """A destination that refuses its replacement at the last moment (an immutable
    file, which a test running as root cannot make): the outputs moved before it get
    their previous files back."""
    real_replace = os.replace

    def replace(source: str | Path, target: str | Path) -> None:
        if Path(target).name == failing and Path(source).parent.name.endswith(".tmp"):
            raise PermissionError(errno.EPERM, os.strerror(errno.EPERM))
        real_replace(source, target)

    before = snapshot(tmp_path)
    monkeypatch.setattr(os, "replace", replace)
    out, report = outputs_exist["out.mlir"], outputs_exist["r.json"]
    result = tasoc("opt", program, "-o", out, "--report", report)
    assert_one_line_error(result, "cannot write", "Operation not permitted")
    assert snapshot(tmp_path) == before


def test_a_successful_run_commits_every_output(
    tasoc, tmp_path: Path, program: Path, outputs_exist
) -> None:
    out, report = outputs_exist["out.mlir"], outputs_exist["r.json"]
    assert tasoc("opt", program, "-o", out, "--report", report).code == 0
    assert all(path.read_bytes() != OLD for path in outputs_exist.values())
    assert _stages(tmp_path) == []


class _FullDisk(io.BytesIO):
    """A file on a full disk: every write fails with ENOSPC."""

    def write(self, data: object) -> int:
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


def _full_disk_open(*args: object, **kwargs: object) -> io.IOBase:
    mode = str(args[1] if len(args) > 1 else kwargs.get("mode", "r"))
    return _FullDisk() if "b" in mode else io.TextIOWrapper(_FullDisk(), write_through=True)


@pytest.mark.parametrize(
    "command",
    [
        ["opt", "{program}", "-o", "{out}"],
        ["opt", "{program}", "-o", "{out}", "--report", "{tmp}/r.json"],
        ["rules", "generate", "--max-ops", "1", "--ops", "relu,transpose", "-o", "{out}"],
    ],
    ids=["opt", "opt-report", "rules-generate"],
)
def test_a_full_disk_is_one_line_and_leaves_no_temporary_file(
    tasoc,
    tmp_path: Path,
    program: Path,
    outputs_exist,
    monkeypatch: pytest.MonkeyPatch,
    command: list[str],
) -> None:
    """ENOSPC while writing a staged file (faked: the file system of the tests is not
    full) names the destination."""
    out = outputs_exist["out.mlir"]
    before = snapshot(tmp_path)
    monkeypatch.setattr(outputs, "open", _full_disk_open, raising=False)
    args = [part.format(program=program, out=out, tmp=tmp_path) for part in command]
    result = tasoc(*args)
    line = assert_one_line_error(result, ": No space left on device")
    assert line.startswith(f"tasoc: error: cannot write '{tmp_path}/out.")  # its first output
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(not IS_ROOT, reason="makes a /dev/full device node (root only)")
@pytest.mark.parametrize("which", ["-o", "--report"])
def test_a_full_device_fails_and_puts_back_the_other_outputs(
    tasoc, tmp_path: Path, program: Path, outputs_exist, which: str
) -> None:
    """A real ENOSPC: a device node like /dev/full, written through at commit after
    the regular files were replaced, which then get their previous contents back."""
    full = tmp_path / "full"
    os.mknod(full, 0o666 | stat.S_IFCHR, os.makedev(1, 7))
    before = snapshot(tmp_path)
    targets = {"-o": outputs_exist["out.mlir"], "--report": outputs_exist["r.json"]}
    targets[which] = full
    result = tasoc("opt", program, "-o", targets["-o"], "--report", targets["--report"])
    assert_one_line_error(result, f"cannot write '{full}': No space left on device")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("blocker", ["directory", "report"])
def test_the_external_data_of_an_onnx_output_is_an_output_too(
    tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, blocker: str
) -> None:
    """A model over protobuf's limit (lowered here) writes `x.onnx.data` beside
    `x.onnx`; where that path is a directory, or the report, nothing is written."""
    from tasoc.backends.onnx import files

    monkeypatch.setattr(files, "PROTOBUF_LIMIT", 4096)
    out, data = tmp_path / "x.onnx", tmp_path / "x.onnx.data"
    out.write_bytes(OLD)
    report = tmp_path / "r.json"
    if blocker == "directory":
        data.mkdir()
    else:
        report = data
        report.write_bytes(OLD)
    before = snapshot(tmp_path)
    result = tasoc("opt", "zoo:nasrnn?hidden=32&length=1", "-o", out, "--report", report)
    fragment = "Is a directory" if blocker == "directory" else "both write"
    assert_one_line_error(result, str(data), fragment)
    assert snapshot(tmp_path) == before


def test_rules_verify_writes_nothing_when_a_rule_is_not_proven(tasoc, tmp_path: Path) -> None:
    rules = tmp_path / "r.rules"
    rules.write_text(FALSE_RULE)
    out = tmp_path / "out.rules"
    out.write_bytes(OLD)
    before = snapshot(tmp_path)
    result = tasoc("rules", "verify", rules, "-o", out, "--timeout", "2", "--jobs", "1")
    assert_one_line_error(result, "not proven", "relu-is-identity")
    assert snapshot(tmp_path) == before


def test_rules_verify_may_rewrite_its_input_in_place(tasoc, tmp_path: Path) -> None:
    rules = tmp_path / "r.rules"
    rules.write_text(TRUE_RULE)
    result = tasoc("rules", "verify", rules, "-o", rules, "--timeout", "5", "--jobs", "1")
    assert result.code == 0, result
    assert "proof proven" in rules.read_text()
    assert [path.name for path in tmp_path.iterdir()] == ["r.rules"]


@pytest.mark.parametrize("split", [False, True], ids=["one-module", "split-input"])
def test_verify_diagnostics_writes_the_diagnostic_to_o_instead_of_emptying_it(
    tasoc, tmp_path: Path, split: bool
) -> None:
    """With `--verify-diagnostics`, a module that fails to verify is the run's result:
    `-o OUT` gets the diagnostic where stdout would, never an empty file."""
    source = tmp_path / "bad.mlir"
    source.write_text(f"{IDENTITY}// -----\n{BAD_SHAPES}" if split else BAD_SHAPES)
    out = tmp_path / "out.mlir"
    out.write_bytes(OLD)
    extra = ["--split-input-file"] if split else []
    result = tasoc("opt", source, *extra, "--verify-diagnostics", "-o", out)
    assert result.code == 0, result
    written = out.read_text()
    assert "contraction" in written
    assert ("func.return %x" in written) == split
    assert sorted(path.name for path in tmp_path.iterdir()) == ["bad.mlir", "out.mlir"]


@pytest.mark.parametrize("bad_chunk", [0, 1, 2])
def test_a_failing_chunk_of_split_input_writes_no_chunk(
    tasoc, tmp_path: Path, outputs_exist, bad_chunk: int
) -> None:
    """`--split-input-file` makes one output of many modules: one failing module
    (first, middle or last) fails the run, and `-o` and the report stay as they were."""
    chunks = [IDENTITY, IDENTITY, IDENTITY]
    chunks[bad_chunk] = BAD_SHAPES
    source = tmp_path / "chunks.mlir"
    source.write_text("// -----\n".join(chunks))
    before = snapshot(tmp_path)
    out, report = outputs_exist["out.mlir"], outputs_exist["r.json"]
    result = tasoc("opt", source, "--split-input-file", "-o", out, "--report", report)
    assert_one_line_error(result, "contraction")
    assert snapshot(tmp_path) == before


def test_diagnostics_cannot_go_to_an_onnx_output(tasoc, tmp_path: Path) -> None:
    source = tmp_path / "bad.mlir"
    source.write_text(BAD_SHAPES)
    out = tmp_path / "out.onnx"
    out.write_bytes(OLD)
    result = tasoc("opt", source, "--verify-diagnostics", "-o", out)
    assert_one_line_error(result, "--verify-diagnostics", ".onnx")
    assert out.read_bytes() == OLD


# ------------------------------------------------------------------------ collisions


def _same_string(tmp_path: Path) -> tuple[str, str]:
    return str(tmp_path / "x.mlir"), str(tmp_path / "x.mlir")


def _dot_slash(tmp_path: Path) -> tuple[str, str]:
    return "x.mlir", "./x.mlir"  # the test runs in tmp_path


def _through_a_symlink(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "x.mlir").write_bytes(OLD)
    (tmp_path / "link.json").symlink_to("x.mlir")
    return "x.mlir", "link.json"


def _through_a_hard_link(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "x.mlir").write_bytes(OLD)
    os.link(tmp_path / "x.mlir", tmp_path / "hard.json")
    return "x.mlir", "hard.json"


def _through_a_parent_symlink(tmp_path: Path) -> tuple[str, str]:
    (tmp_path / "alias").symlink_to(".")
    return "x.mlir", "alias/x.mlir"


@pytest.mark.parametrize(
    "make_paths",
    [_same_string, _dot_slash, _through_a_symlink, _through_a_hard_link, _through_a_parent_symlink],
    ids=["same", "dot-slash", "symlink", "hard-link", "parent-symlink"],
)
def test_a_report_on_the_output_is_refused_naming_both(
    tasoc, tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch, make_paths
) -> None:
    monkeypatch.chdir(tmp_path)
    out, report = make_paths(tmp_path)
    before = snapshot(tmp_path)
    result = tasoc("opt", program, "-o", out, "--report", report)
    assert_one_line_error(result, f"'{out}'", f"'{report}'", "same file")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("report", ["out.npz", "./out.npz"])
def test_a_report_on_the_weights_beside_the_output_is_refused(
    tasoc, tmp_path: Path, program: Path, monkeypatch: pytest.MonkeyPatch, report: str
) -> None:
    monkeypatch.chdir(tmp_path)
    before = snapshot(tmp_path)
    result = tasoc("opt", program, "-o", "out.mlir", "--report", report)
    assert_one_line_error(result, "the weights beside -o", "--report", "same file")
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("output", ["m.npz", "./m.npz", "other.npz"])
@pytest.mark.parametrize("source", ["m.mlir", "m.onnx"])
def test_an_output_named_like_its_own_weights_file_is_refused(
    tasoc,
    tmp_path: Path,
    program: Path,
    monkeypatch: pytest.MonkeyPatch,
    output: str,
    source: str,
) -> None:
    """`-o x.npz` for a program with weights (a text program with its `.npz`, an ONNX
    model with initializers): the weights go to `x.npz` too."""
    monkeypatch.chdir(tmp_path)
    if source.endswith(".onnx"):
        assert tasoc("opt", program, "-o", source).code == 0
    before = snapshot(tmp_path)
    result = tasoc("opt", source, "-o", output)
    assert_one_line_error(result, "the weights beside -o", "same file")
    assert snapshot(tmp_path) == before


@pytest.mark.skipif(IS_ROOT, reason="root writes into a read-only directory")
@pytest.mark.parametrize("option", ["-o", "--report"])
def test_an_output_in_a_read_only_directory_fails_first(
    tasoc, tmp_path: Path, program: Path, option: str
) -> None:
    locked = tmp_path / "locked"
    locked.mkdir()
    (locked / "x").write_bytes(OLD)
    locked.chmod(0o555)
    try:
        before = snapshot(tmp_path)
        result = tasoc("opt", program, option, locked / "x")
        assert_one_line_error(result, f"cannot write '{locked / 'x'}': Permission denied")
        assert snapshot(tmp_path) == before
    finally:
        locked.chmod(0o755)


@pytest.mark.parametrize("which", ["input", "params"])
def test_a_report_never_overwrites_an_input(
    tasoc, tmp_path: Path, program: Path, which: str
) -> None:
    report = program if which == "input" else tmp_path / "m.npz"
    before = snapshot(tmp_path)
    result = tasoc("opt", program, "--params", tmp_path / "m.npz", "--report", report)
    assert_one_line_error(result, "would overwrite the input", str(report))
    assert snapshot(tmp_path) == before


def test_the_output_may_be_the_input_and_replaces_it_once_the_run_succeeded(
    tasoc, tmp_path: Path, program: Path
) -> None:
    """As in mlir-opt, `-o INPUT` works: INPUT (and its `.npz`) are read before
    anything is written, and replaced atomically."""
    weights = np.load(tmp_path / "m.npz")
    expected = {name: weights[name] for name in weights.files}
    result = tasoc("opt", program, "-p", "cse", "-o", program)
    assert result.code == 0, result
    assert "graph.matmul" in program.read_text()
    written = np.load(tmp_path / "m.npz")
    assert sorted(written.files) == sorted(expected)
    assert all(np.array_equal(written[name], expected[name]) for name in expected)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["m.mlir", "m.npz"]


# --------------------------------------------------------------------- special files


@pytest.mark.parametrize(
    "command", [["opt", SMALL], ["rules", "generate", "--max-ops", "1", "--ops", "relu"]]
)
def test_dash_is_stdout(tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, command) -> None:
    monkeypatch.chdir(tmp_path)
    with_dash = tasoc(*command, "-o", "-")
    without = tasoc(*command)
    assert with_dash.code == without.code == 0
    assert with_dash.out == without.out
    assert with_dash.out.strip()
    assert list(tmp_path.iterdir()) == []


def test_dev_null_is_written_through_and_stays_a_device(tasoc) -> None:
    """The real /dev/null: written to, never replaced (as root a rename would replace
    the node for the whole machine)."""
    before = os.stat("/dev/null")
    assert tasoc("opt", SMALL, "-o", "/dev/null", "--report", "/dev/null").code == 0
    after = os.stat("/dev/null")
    assert stat.S_ISCHR(after.st_mode)
    assert (after.st_ino, after.st_rdev) == (before.st_ino, before.st_rdev)


@pytest.mark.skipif(not IS_ROOT, reason="makes a device node (root only)")
@pytest.mark.parametrize("name", ["null", "null.onnx", "null.mlir"])
def test_a_character_device_is_written_through(tasoc, tmp_path: Path, name: str) -> None:
    device = tmp_path / name
    os.mknod(device, 0o666 | stat.S_IFCHR, os.makedev(1, 3))
    result = tasoc("opt", SMALL, "-o", device)
    assert result.code == 0, result
    assert stat.S_ISCHR(device.lstat().st_mode)
    assert [path.name for path in tmp_path.iterdir()] == [name]


def _read_fifo(path: Path, into: list[bytes]) -> threading.Thread:
    def read() -> None:
        with open(path, "rb") as stream:
            into.append(stream.read())

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    return reader


@pytest.mark.parametrize(
    ("name", "option"),
    [("pipe.mlir", "-o"), ("pipe.json", "--report"), ("pipe.onnx", "-o")],
    ids=["text", "report", "onnx"],
)
def test_a_fifo_is_written_through(tasoc, tmp_path: Path, name: str, option: str) -> None:
    fifo = tmp_path / name
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = _read_fifo(fifo, received)
    result = tasoc("opt", SMALL, option, fifo)
    reader.join(timeout=10)
    assert result.code == 0, result
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert [path.name for path in tmp_path.iterdir()] == [name]
    if name.endswith(".mlir"):
        assert received[0].decode() == tasoc("opt", SMALL).out
    elif name.endswith(".json"):
        assert json.loads(received[0])["input"] == SMALL
    else:
        assert onnx.load_model_from_string(received[0]).graph.node


@pytest.mark.parametrize(
    ("link", "target"),
    [("out.mlir", "real.mlir"), ("out.mlir", "sub/real.mlir"), ("r.json", "real.json")],
    ids=["beside", "in-a-subdirectory", "report"],
)
@pytest.mark.parametrize("target_exists", [True, False], ids=["existing", "dangling"])
def test_a_symlink_is_followed_and_stays_a_link(
    tasoc, tmp_path: Path, link: str, target: str, target_exists: bool
) -> None:
    (tmp_path / "sub").mkdir()
    if target_exists:
        (tmp_path / target).write_bytes(OLD)
    (tmp_path / link).symlink_to(target)
    option = "--report" if link.endswith(".json") else "-o"
    result = tasoc("opt", SMALL, option, tmp_path / link)
    assert result.code == 0, result
    assert (tmp_path / link).is_symlink()
    assert os.readlink(tmp_path / link) == target
    assert (tmp_path / target).read_bytes() not in (b"", OLD)
    assert _stages(tmp_path) == _stages(tmp_path / "sub") == []


# --------------------------------------------------------------------------- signals


def _start_slow_run(tmp_path: Path) -> subprocess.Popen[bytes]:
    """`tasoc opt` on the full nasrnn with a 30 s search, `-o` and `--report`."""
    command = [
        sys.executable,
        "-m",
        "tasoc.driver.main",
        "opt",
        "zoo:nasrnn",
        "-p",
        "equality-rewrite{timeout=30}",
        "-o",
        str(tmp_path / "out.mlir"),
        "--report",
        str(tmp_path / "r.json"),
    ]
    return subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, preexec_fn=_default_signals
    )


def _default_signals() -> None:
    """The run's signals at their defaults, whatever the test runner's: under `nohup`
    SIGHUP is ignored, the run inherits that and rightly keeps it ignored
    (`signals_as_exceptions`), and the SIGHUP case would test the launcher instead."""
    for number in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(number, signal.SIG_DFL)


def _stages(directory: Path) -> list[Path]:
    return [path for path in directory.iterdir() if path.name.endswith(".tmp")]


PATIENCE_S = 60
"""How long the signal tests wait for an event (the stages appearing, the process
ending) before failing: they wait for events, not for a time, so only a hung run
should reach it, however loaded the machine."""


def _wait_for(condition: Callable[[], bool], seconds: float) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


@pytest.mark.parametrize(
    ("signum", "line"),
    [
        (signal.SIGTERM, "tasoc: error: terminated by SIGTERM"),
        (signal.SIGHUP, "tasoc: error: terminated by SIGHUP"),
        (signal.SIGINT, "tasoc: error: interrupted"),
    ],
    ids=["SIGTERM", "SIGHUP", "SIGINT"],
)
@pytest.mark.parametrize("later", [0.0, 1.5], ids=["staged", "searching"])
def test_a_signal_during_a_run_leaves_no_temporary_file_and_no_changed_output(
    tmp_path: Path, signum: int, line: str, later: float
) -> None:
    """Sent as soon as the stages exist (the model being built), or a moment later
    (the search running)."""
    (tmp_path / "out.mlir").write_bytes(OLD)
    (tmp_path / "r.json").write_bytes(OLD)
    before = snapshot(tmp_path)
    process = _start_slow_run(tmp_path)
    try:
        _wait_for(lambda: len(_stages(tmp_path)) == 2, PATIENCE_S)
        time.sleep(later)
        process.send_signal(signum)
        _, err = process.communicate(timeout=PATIENCE_S)
    finally:
        process.kill()
    assert (process.returncode, err.decode().splitlines()) == (128 + signum, [line])
    assert snapshot(tmp_path) == before


# ------------------------------------------------------------------- the Outputs API


@given(
    existing=st.lists(st.booleans(), min_size=1, max_size=4),
    failing=st.none() | st.integers(min_value=0, max_value=3),
)
def test_outputs_commit_all_or_none(existing: list[bool], failing: int | None) -> None:
    """Whatever subset of the destinations exists and whichever replace fails, after
    the commit either every destination has its new content, or each has exactly what
    it had (or still does not exist), and no stage is left."""
    with tempfile.TemporaryDirectory() as name:
        directory = Path(name)
        paths = [directory / f"out{index}.txt" for index in range(len(existing))]
        for path, exists in zip(paths, existing, strict=True):
            if exists:
                path.write_bytes(OLD)
        before = snapshot(directory)
        real_replace = os.replace
        calls = 0

        def replace(source: str | Path, target: str | Path) -> None:
            nonlocal calls
            if Path(source).parent.name.endswith(".tmp"):
                calls += 1
                if calls - 1 == failing:
                    raise OSError(errno.EIO, os.strerror(errno.EIO))
            real_replace(source, target)

        transaction = Outputs()
        for index, path in enumerate(paths):
            staged = transaction.declare(str(path), f"output {index}")
            assert staged is not None
            with staged.open() as stream:
                stream.write(f"new {index}")
        try:
            with mock.patch.object(os, "replace", replace):
                transaction.commit()
            committed = True
        except DriverError:
            committed = False
        if committed:
            assert [path.read_text() for path in paths] == [f"new {i}" for i in range(len(paths))]
        else:
            assert snapshot(directory) == before


def test_an_output_declared_but_never_written_is_left_as_it_was(tmp_path: Path) -> None:
    kept, written = tmp_path / "kept", tmp_path / "written"
    kept.write_bytes(OLD)
    with Outputs() as transaction:
        transaction.declare(str(kept), "kept")
        staged = transaction.declare(str(written), "written")
        assert staged is not None
        with staged.open(binary=True) as stream:
            stream.write(b"new")
    assert kept.read_bytes() == OLD
    assert written.read_bytes() == b"new"
    assert sorted(path.name for path in tmp_path.iterdir()) == ["kept", "written"]


def test_an_exception_in_the_run_discards_every_stage(tmp_path: Path) -> None:
    target = tmp_path / "out"
    target.write_bytes(OLD)
    with pytest.raises(KeyboardInterrupt), Outputs() as transaction:
        staged = transaction.declare(str(target), "-o")
        assert staged is not None
        with staged.open() as stream:
            stream.write("new")
        raise KeyboardInterrupt
    assert target.read_bytes() == OLD
    assert [path.name for path in tmp_path.iterdir()] == ["out"]


def test_a_signal_during_the_commit_waits_for_the_moves_then_undoes_them(tmp_path: Path) -> None:
    """SIGTERM arriving while the outputs are moved is held back until the moves are
    done (never half of them), then undoes them like any failure."""
    paths = [tmp_path / "a", tmp_path / "b", tmp_path / "c"]
    for path in paths[:2]:
        path.write_bytes(OLD)
    before = snapshot(tmp_path)
    transaction = Outputs()
    for path in paths:
        staged = transaction.declare(str(path), path.name)
        assert staged is not None
        with staged.open() as stream:
            stream.write("new")
    real_replace = os.replace
    moved: list[str] = []

    def replace(source: str | Path, target: str | Path) -> None:
        real_replace(source, target)
        moved.append(Path(target).name)
        if len(moved) == 1:
            os.kill(os.getpid(), signal.SIGTERM)

    with (
        signals_as_exceptions(),
        mock.patch.object(os, "replace", replace),
        pytest.raises(Terminated),
    ):
        transaction.commit()
    assert moved[:3] == ["a", "b", "c"]  # all three moved before the signal was taken
    assert snapshot(tmp_path) == before


def test_a_signal_taken_inside_a_weakref_callback_is_not_lost() -> None:
    """Python runs the handler wherever the main thread is, a weakref callback included,
    where an exception is printed and dropped (a run went on and ended with status 0):
    the signal is sent again and taken once the callback has returned."""

    class Thing:
        pass

    thing = Thing()
    called: list[bool] = []

    def dropped(_: object) -> None:
        called.append(True)
        os.kill(os.getpid(), signal.SIGTERM)  # the handler runs in here
        for _ in range(1000):  # bytecodes, where Python checks for signals
            pass

    with signals_as_exceptions(), pytest.raises(Terminated):
        reference = weakref.ref(thing, dropped)
        del thing
        for _ in range(100_000):  # the signal again, taken out here
            pass
        time.sleep(1)
    assert called and reference() is None
