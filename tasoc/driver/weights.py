"""The weight values of a text program: `--params FILE`, or the `.npz` beside INPUT.

A tasoc program names its weights (`{graph.param}` arguments) but never holds their
values (DESIGN.md §2). `tasoc opt m.onnx -o m.mlir` writes them to `m.npz`; so that
import → optimize → export keeps them, `tasoc opt m.mlir ... -o out.onnx` and
`tasoc run m.mlir` read `m.npz` when it lies beside INPUT (same stem), or the file
`--params` names. The values are checked against the program's signature when they
are read (`tasoc.backends.arguments.load_inputs`: every weight present, shapes and
element kinds right, no stray names), so a mismatch is one line before any work.

The file may come from anyone, and NumPy believes an `.npy` header: twelve bytes can
ask for 64 GiB, and a zip member can inflate to far more than its compressed size. So
`check_archive` reads every member's header first and refuses, before anything is
decompressed or allocated, a member that is not a `.npy` array of numbers, that no
argument of `@main` takes, whose shape is not that argument's, or whose size in the
archive is not what its header says (a zip bomb or a truncated member).
"""

from __future__ import annotations

import math
import os
import zipfile
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import IO

import numpy as np
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import load_inputs
from tasoc.driver.errors import DriverError
from tasoc.driver.onnx_bridge import weights_path
from tasoc.ir.limits import open_regular
from tasoc.ir.program import ProgramError, arg_infos, entry_function
from tasoc.ir.shapes import TensorSig

WEIGHTS_EXTENSION = ".npz"
TEXT_EXTENSION = ".mlir"
MEMBER_EXTENSION = ".npy"
"""An `.npz` is a zip archive of `NAME.npy` members, one array each."""

NUMBER_KINDS = "biuf"
"""NumPy kinds of the element types a weights file may hold: bool, integers, floats.
Objects (pickles) are never loaded; strings, dates, complex and structured types have
no argument to fill."""

_NPY_HEADER_READERS = {
    (1, 0): np.lib.format.read_array_header_1_0,
    (2, 0): np.lib.format.read_array_header_2_0,
}
"""The `.npy` versions whose headers hold only a shape and a plain type (3.0 exists
for structured types with unicode field names)."""


@dataclass(frozen=True)
class WeightsFile:
    """An `.npz` of argument values by name, and how it was chosen."""

    path: str
    beside: str | None = None
    """The INPUT it was found beside, or None when `--params` named it."""

    @property
    def kind(self) -> str:
        """How messages name the file's role."""
        return "--params file" if self.beside is None else f"weights file beside {self.beside}"


def find_weights(input_spec: str | None, params: str | None) -> WeightsFile | None:
    """`--params`, else the `.npz` with INPUT's stem when INPUT is a `.mlir` file that
    has one beside it, else None (the program's weights are then drawn at random)."""
    if params is not None:
        return WeightsFile(params)
    if input_spec is None or os.path.splitext(input_spec)[1] != TEXT_EXTENSION:
        return None
    candidate = weights_path(input_spec)
    return WeightsFile(candidate, input_spec) if os.path.isfile(candidate) else None


def load_arguments(module: ModuleOp, weights: WeightsFile, seed: int) -> list[np.ndarray]:
    """Every argument of `@main` in order: the file's values, activations it lacks
    drawn from `seed`; a file that does not fit the program is a one-line error.

    Values are cast to their argument's type within their kind; one beyond that type's
    range (1e10 for an f16 weight) is refused rather than turned into inf, and NumPy's
    overflow warning never prints."""
    try:
        with open_regular(weights.path) as stream:  # `/dev/zero` would fill memory
            signature = {info.name: info.sig for info in arg_infos(entry_function(module))}
            check_archive(stream, signature)
        with np.errstate(over="raise", invalid="raise"):
            return load_inputs(module, weights.path, seed)
    except FloatingPointError as err:
        raise DriverError(
            f"bad {weights.kind}: {weights.path}: a value is beyond the range of its "
            f"argument's element type ({err})"
        ) from None
    except OSError as err:
        raise DriverError(
            f"cannot read {weights.kind} '{weights.path}': {err.strerror or err}"
        ) from None
    except (ValueError, KeyError, EOFError, zipfile.BadZipFile, ProgramError) as err:
        # np.load raises these for a file that is not an .npz; load_inputs names the file.
        message = str(err) if weights.path in str(err) else f"{weights.path}: {err}"
        raise DriverError(f"bad {weights.kind}: {message}") from None


def load_weights(module: ModuleOp, weights: WeightsFile) -> dict[str, np.ndarray]:
    """The values of `module`'s weights by argument name, read from `weights`."""
    values = load_arguments(module, weights, seed=0)
    infos = arg_infos(entry_function(module))
    return {info.name: value for info, value in zip(infos, values, strict=True) if info.is_param}


def check_archive(stream: IO[bytes], signature: Mapping[str, TensorSig]) -> None:
    """Check an `.npz` against `@main`'s arguments (`signature`, by name) from its member
    headers alone, before NumPy loads any member; raise ValueError naming the first
    problem. See the module docstring for what is refused and why."""
    if stream.read(len(np.lib.format.MAGIC_PREFIX)) == np.lib.format.MAGIC_PREFIX:
        raise ValueError(
            "a single .npy array names no argument; write an .npz of arrays by argument "
            "name (numpy.savez(path, name=value, ...))"
        )
    stream.seek(0)
    try:
        with zipfile.ZipFile(stream) as archive:
            names: set[str] = set()
            for member in archive.infolist():
                name = _check_member(archive, member, signature)
                if name in names:
                    raise ValueError(f"member '{member.filename}' appears twice")
                names.add(name)
    except (zipfile.BadZipFile, zlib.error, EOFError, NotImplementedError, RuntimeError) as err:
        # zipfile's errors for a file that is no zip, a corrupt, encrypted or
        # differently compressed member.
        raise ValueError(f"not an .npz file (a zip archive of .npy arrays): {err}") from None


def _check_member(
    archive: zipfile.ZipFile, member: zipfile.ZipInfo, signature: Mapping[str, TensorSig]
) -> str:
    """The argument name of one member, after checking its header (see `check_archive`)."""
    label = f"member '{member.filename}'"
    name = member.filename.removesuffix(MEMBER_EXTENSION)
    if name == member.filename:
        raise ValueError(f"{label} is not a {MEMBER_EXTENSION} array")
    if name not in signature:
        raise ValueError(f"no argument of @main is named {name}")
    with archive.open(member) as data:
        try:
            version = np.lib.format.read_magic(data)
            reader = _NPY_HEADER_READERS.get(version)
            if reader is None:
                raise ValueError(f".npy version {version[0]}.{version[1]} is not supported")
            shape, _, dtype = reader(data)
        except ValueError as err:
            raise ValueError(f"{label} is not a {MEMBER_EXTENSION} array: {err}") from None
        header_size = data.tell()
    if dtype.kind == "V" and dtype.fields is None and dtype.subdtype is None:
        raise ValueError(
            f"{label} holds raw {dtype.itemsize}-byte values (how NumPy saves bfloat16), not "
            "numbers: save bfloat16 weights as float32, which is cast to the argument's type"
        )
    if dtype.kind not in NUMBER_KINDS or dtype.fields is not None or dtype.subdtype is not None:
        raise ValueError(f"{label} holds {dtype}, not numbers (bool, integers or floats)")
    if shape != signature[name].shape:
        raise ValueError(f"'{name}' expects {signature[name]}, got shape {list(shape)}")
    needed = header_size + math.prod(shape) * dtype.itemsize
    if member.file_size != needed:
        raise ValueError(
            f"{label} holds {member.file_size} bytes, but its header says {needed} "
            "(truncated, or not what it claims)"
        )
    return name
