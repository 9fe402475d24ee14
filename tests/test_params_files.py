"""`--params` files against hostile input: what a file claims is checked against `@main`
before NumPy loads anything, and each bad file is one error line (exit 1, no warning).

The files are built with `zipfile` and NumPy's header writers, so that they can lie:
a header asking for 64 GiB in a few bytes, a member that inflates far past what its
header says, types NumPy can store but no argument takes.
"""

from __future__ import annotations

import io
import os
import pickle
import zipfile
from pathlib import Path

import ml_dtypes
import numpy as np
import pytest
from conftest import assert_one_line_error
from strict_cli import StrictRun, strict_runner

from tasoc.driver.onnx_bridge import write_npz
from tasoc.ir.builder import GraphBuilder


def write_program(path: Path, dtype: str = "f32") -> Path:
    """`@main(x, w) = x + w`: one activation and one weight `w`, both 2x`dtype`."""
    g = GraphBuilder()
    module = g.build(g.add(g.input("x", (2,), dtype), g.param("w", (2,), dtype)))
    path.write_text(str(module))
    return path


FAST_SECONDS = 5.0
"""A refused file must be refused from its headers, before anything large is read."""


@pytest.fixture
def tasoc(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    return strict_runner(capfd)


@pytest.fixture
def program(tmp_path: Path) -> Path:
    return write_program(tmp_path / "m.mlir")


def npy_header(
    shape: tuple[int, ...], descr: object = "<f4", version: tuple[int, int] = (1, 0)
) -> bytes:
    """The header of an `.npy` array of `shape` and type `descr`, data not included."""
    stream = io.BytesIO()
    header = {"descr": descr, "fortran_order": False, "shape": shape}
    if version == (1, 0):
        np.lib.format.write_array_header_1_0(stream, header)
    else:
        np.lib.format.write_array_header_2_0(stream, header)
    data = bytearray(stream.getvalue())
    data[6:8] = bytes(version)  # the version after the magic string, as claimed
    return bytes(data)


def archive(path: Path, members: dict[str, bytes], method: int = zipfile.ZIP_STORED) -> Path:
    with zipfile.ZipFile(path, "w", method) as zipped:
        for name, data in members.items():
            zipped.writestr(name, data)
    return path


def params_error(tasoc: StrictRun, program: Path, params: Path, *fragments: str) -> None:
    """`tasoc run` and `tasoc opt ... -o` refuse `params` in one line holding `fragments`."""
    for args in (["run", program], ["opt", program, "-o", program.with_name("out.mlir")]):
        result = tasoc(*args, "--params", params)
        assert_one_line_error(result, "--params file", *fragments)
        assert result.seconds < FAST_SECONDS, result.seconds
    assert not program.with_name("out.mlir").exists()


W = "w.npy"
F32_DATA = b"\0" * 8


@pytest.mark.parametrize(
    ("members", "fragments"),
    [
        ({W: npy_header((2**34,))}, ("'w' expects 2xf32, got shape [17179869184]",)),
        ({"zz.npy": npy_header((2**34,))}, ("no argument of @main is named zz",)),
        ({W: npy_header((2,)) + F32_DATA, "w": b"hello"}, ("member 'w' is not a .npy",)),
        ({W: b"hello"}, ("member 'w.npy' is not a .npy array",)),
        ({W: npy_header((2,), "|O") + F32_DATA * 2}, ("holds object",)),
        ({W: npy_header((2,), [("a", "<f4")]) + F32_DATA}, ("holds [('a', '<f4')]",)),
        ({W: npy_header((2,), "<M8[s]") + F32_DATA * 2}, ("holds datetime64[s]",)),
        ({W: npy_header((2,), "<m8[s]") + F32_DATA * 2}, ("holds timedelta64[s]",)),
        ({W: npy_header((2,), "<U1") + F32_DATA}, ("holds <U1",)),
        ({W: npy_header((2,), "<c8") + F32_DATA * 2}, ("holds complex64",)),
        ({W: npy_header((2,), "|V2") + b"\0" * 4}, ("raw 2-byte values", "bfloat16")),
        ({W: npy_header((2,), version=(3, 0)) + F32_DATA}, (".npy version 3.0",)),
        ({W: npy_header((2,)) + F32_DATA + b"\0" * 100}, ("holds 236 bytes",)),
        ({W: npy_header((2,)) + F32_DATA[:4]}, ("header says 136",)),
    ],
    ids=[
        "64GiB-header",
        "64GiB-unknown-name",
        "not-npy-member",
        "garbage-member",
        "object",
        "structured",
        "datetime",
        "timedelta",
        "string",
        "complex",
        "raw-bytes",
        "npy-3.0",
        "member-too-long",
        "member-truncated",
    ],
)
def test_a_member_that_does_not_fit_main_is_refused_from_its_header(
    tasoc: StrictRun,
    tmp_path: Path,
    program: Path,
    members: dict[str, bytes],
    fragments: tuple[str, ...],
) -> None:
    params_error(tasoc, program, archive(tmp_path / "p.npz", members), *fragments)


def test_a_zip_bomb_is_refused_before_it_is_inflated(
    tasoc: StrictRun, tmp_path: Path, program: Path
) -> None:
    """200 MB of zeros compress to a few hundred KB; the member's size in the archive
    is not what its header says, and nothing is inflated to find that out."""
    bomb = {W: npy_header((2,)) + bytes(200 * 2**20)}
    path = archive(tmp_path / "p.npz", bomb, zipfile.ZIP_DEFLATED)
    assert path.stat().st_size < 2**20
    params_error(tasoc, program, path, f"holds {len(bomb[W])} bytes")


def test_a_member_given_twice_is_refused(tasoc: StrictRun, tmp_path: Path, program: Path) -> None:
    member = npy_header((2,)) + F32_DATA
    path = tmp_path / "p.npz"
    with zipfile.ZipFile(path, "w") as zipped, pytest.warns(UserWarning, match="Duplicate"):
        zipped.writestr(W, member)
        zipped.writestr(W, member)
    params_error(tasoc, program, path, "appears twice")


def test_a_plain_npy_is_refused_because_it_names_no_argument(
    tasoc: StrictRun, tmp_path: Path, program: Path
) -> None:
    np.save(tmp_path / "w.npy", np.ones(2, np.float32))
    params_error(tasoc, program, tmp_path / "w.npy", "single .npy array names no argument")


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        (b"", "not an .npz file"),
        (b"hello world", "not an .npz file"),
        (pickle.dumps({"w": np.ones(2)}), "not an .npz file"),
    ],
    ids=["empty", "text", "pickle"],
)
def test_a_file_that_is_no_zip_archive_is_refused(
    tasoc: StrictRun, tmp_path: Path, program: Path, content: bytes, fragment: str
) -> None:
    (tmp_path / "p.npz").write_bytes(content)
    params_error(tasoc, program, tmp_path / "p.npz", fragment)


def test_a_truncated_archive_is_refused(tasoc: StrictRun, tmp_path: Path, program: Path) -> None:
    np.savez(tmp_path / "whole.npz", w=np.ones(2, np.float32))
    data = (tmp_path / "whole.npz").read_bytes()
    for cut in (len(data) // 2, len(data) - 10):
        (tmp_path / "p.npz").write_bytes(data[:cut])
        params_error(tasoc, program, tmp_path / "p.npz", "p.npz")


def test_a_directory_or_a_missing_file_cannot_be_read(
    tasoc: StrictRun, tmp_path: Path, program: Path
) -> None:
    (tmp_path / "d.npz").mkdir()
    params_error(tasoc, program, tmp_path / "d.npz", "Is a directory")
    params_error(tasoc, program, tmp_path / "missing.npz", "No such file")


@pytest.mark.parametrize("special", ["/dev/zero", "fifo"])
def test_a_device_or_a_fifo_is_refused_before_it_is_read(
    tasoc: StrictRun, tmp_path: Path, program: Path, special: str
) -> None:
    """`/dev/zero` never ends (NumPy would read GBs, then fail for memory) and a FIFO
    with no writer never starts: neither is read."""
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "p.npz"
        os.mkfifo(path)
    params_error(tasoc, program, path, "not a regular file")


def test_a_good_file_still_runs(tasoc: StrictRun, tmp_path: Path, program: Path) -> None:
    np.savez(tmp_path / "p.npz", w=np.full(2, 3.0), x=np.ones(2, np.float32))
    result = tasoc("run", program, "--params", tmp_path / "p.npz")
    assert result.code == 0 and result.err == "", result
    assert "mean 4" in result.out


def test_bfloat16_weights_round_trip_through_the_npz_beside_text_ir(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    """The driver writes bfloat16 weights as float32 (exact), which `--params` casts back:
    NumPy alone would store raw 2-byte values that read back as no number."""
    program = write_program(tmp_path / "b.mlir", "bf16")
    values = {"w": np.array([1.5, -2.0], ml_dtypes.bfloat16)}
    with open(tmp_path / "b.npz", "wb") as stream:
        write_npz(stream, values)
    with np.load(tmp_path / "b.npz") as stored:
        assert stored["w"].dtype == np.float32
    result = tasoc("run", program, "--params", tmp_path / "b.npz")
    assert result.code == 0, result


def test_a_value_beyond_its_arguments_type_is_refused_without_a_warning(
    tasoc: StrictRun, tmp_path: Path
) -> None:
    """Floats are cast to the argument's type; 1e10 is no f16 (it would become inf)."""
    program = write_program(tmp_path / "h.mlir", "f16")
    np.savez(tmp_path / "p.npz", w=np.array([1e10, 1.0]))
    params_error(tasoc, program, tmp_path / "p.npz", "beyond the range", "overflow")


@pytest.mark.parametrize("value", [2**40, -(2**31) - 1])
def test_an_integer_beyond_its_arguments_type_is_refused_not_wrapped(
    tasoc: StrictRun, tmp_path: Path, value: int
) -> None:
    """An integer cast wraps silently (int64 2^40 into i32 is 0): refused instead."""
    program = write_program(tmp_path / "i.mlir", "i32")
    np.savez(tmp_path / "p.npz", w=np.array([value, 1], np.int64))
    params_error(tasoc, program, tmp_path / "p.npz", "holds values outside i32")


@pytest.mark.parametrize("backend", ["jax", "numpy"])
@pytest.mark.parametrize(
    ("x", "w"),
    [((np.nan, 1.0), (1.0, np.nan)), ((65504.0, 1.0), (65504.0, 1.0))],
    ids=["nan", "overflow"],
)
def test_values_that_are_not_finite_are_one_note_not_numpys_warnings(
    tasoc: StrictRun, tmp_path: Path, backend: str, x: tuple[float, ...], w: tuple[float, ...]
) -> None:
    """NaN weights, or an f16 sum beyond 65504, run as IEEE arithmetic does (NaN, inf),
    checked against the reference, with one `tasoc: note:` line instead of NumPy's
    RuntimeWarnings (which the strict runner would turn into an internal error)."""
    program = write_program(tmp_path / "m.mlir", "f16")
    np.savez(tmp_path / "p.npz", x=np.array(x, np.float16), w=np.array(w, np.float16))
    result = tasoc("run", program, "--params", tmp_path / "p.npz", "--backend", backend, "--check")
    assert result.code == 0, result
    assert result.err.splitlines() == [
        "tasoc: note: output #0 holds values that are not finite (NaN or inf)"
    ]
