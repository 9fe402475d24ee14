"""ONNX files: reading and writing them, checking them, the 2 GiB protobuf limit and
external data.

`load_model` turns a path, serialized bytes or a ModelProto into a checked ModelProto
with its external tensors read in (from beside the model's file), or raises
OnnxImportError with one line. `save_onnx` writes a model atomically, its large
tensors to a data file beside it when the model is over the limit (or when asked);
`write_onnx_files` writes the same files into a staging directory for a caller that
commits them itself.
Nothing here knows what the graph computes.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from os import PathLike
from pathlib import Path, PurePath, PureWindowsPath
from typing import IO

import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto, external_data_helper

from tasoc.backends.onnx.errors import OnnxExportError, OnnxImportError, first_line, shown
from tasoc.backends.onnx.tensors import element_dtype, stored_bytes
from tasoc.ir.limits import irregular_file

PROTOBUF_LIMIT = 2**31
"""Bytes a serialized protobuf may hold; larger ONNX models need external data."""

MAX_MODEL_FILE_BYTES = PROTOBUF_LIMIT
"""The largest model file `load_model` reads: what one protobuf holds (its weights may
lie in external data files beside it, each tensor within the size limit)."""


def fits_in_protobuf(model: onnx.ModelProto) -> bool:
    """Whether `model` serializes as one protobuf (under 2 GiB); larger models are only
    written, read and checked with their tensors in an external data file.

    upb sizes a message by encoding it, so the initializers' raw bytes (known from their
    dims) are added up first: a model over the limit is told so without encoding
    gigabytes only to fail."""
    raw = sum(
        math.prod(max(d, 0) for d in tensor.dims) * _itemsize(tensor.data_type)
        for tensor in model.graph.initializer
        if tensor.HasField("raw_data")
    )
    if raw >= PROTOBUF_LIMIT:
        return False
    try:
        return model.ByteSize() < PROTOBUF_LIMIT
    except EncodeError:  # the rest of the model pushed it over
        return False


def _itemsize(data_type: int) -> int:
    """Bytes per element of an ONNX element type; 1 for a type ONNX does not define
    (an imported file is checked later, and the count only has to be a count)."""
    dtype = element_dtype(data_type)
    return dtype.itemsize if dtype is not None else 1


def load_model(source: str | PathLike[str] | bytes | onnx.ModelProto) -> onnx.ModelProto:
    """Parse and check the model, with its external data when read from a path; any
    failure is one OnnxImportError line."""
    if isinstance(source, onnx.ModelProto):
        model, what = source, "the model"
    else:
        what = "the data" if isinstance(source, bytes) else f"'{source}'"
        try:
            if isinstance(source, bytes):
                model = onnx.load_model_from_string(source)
            else:
                _check_model_file(Path(source), what)
                model = onnx.load(Path(source), load_external_data=False)
        except OnnxImportError:
            raise
        except OSError as err:
            raise OnnxImportError(f"cannot read {what}: {err.strerror or err}") from None
        except (DecodeError, ValueError, RuntimeError):
            raise OnnxImportError(
                f"{what} is not an ONNX model (it does not parse as one; truncated?)"
            ) from None
    if model.ir_version == 0 or not model.HasField("graph"):
        raise OnnxImportError(f"{what} is not an ONNX model (no IR version or no graph)")
    external = _external_tensors(model)
    if external and isinstance(source, bytes | onnx.ModelProto):
        raise OnnxImportError(
            f"{what} keeps tensors in external data ('{external[0].name}' ...); import the "
            "model from its path so that they can be found beside it"
        )
    for tensor in external:
        _check_location(tensor, Path(source).parent, what)
    try:
        # By path, the checker also checks that the external data files exist; a model
        # over 2 GiB already in memory cannot be serialized for the check, so is trusted.
        if external:
            onnx.checker.check_model(str(source))
        elif fits_in_protobuf(model):
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        raise OnnxImportError(f"{what} is not a valid ONNX model: {first_line(err)}") from None
    if external:
        _load_external_data(model, external, Path(source).parent, what)
    return model


def _check_model_file(path: Path, what: str) -> None:
    """Refuse, before reading it, a model file that no protobuf parse can take: larger
    than a protobuf holds, or not a regular file (a device such as /dev/zero never ends)."""
    status = path.stat()
    problem = irregular_file(status.st_mode)
    if problem is not None:
        raise OnnxImportError(f"cannot read {what}: {problem}")
    if status.st_size > MAX_MODEL_FILE_BYTES:
        raise OnnxImportError(
            f"{what} has {status.st_size} bytes, more than a protobuf holds (2 GiB): not an "
            "ONNX model (larger models keep their weights in an external data file)"
        )


def _external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    """The tensors of the main graph (initializers, Constant values) stored outside it."""
    tensors = [*model.graph.initializer]
    for node in model.graph.node:
        tensors += [attr.t for attr in node.attribute if attr.type == onnx.AttributeProto.TENSOR]
    return [tensor for tensor in tensors if external_data_helper.uses_external_data(tensor)]


def _check_location(tensor: TensorProto, directory: Path, what: str) -> None:
    """Refuse, before anything is opened, an external tensor whose data would be read
    from outside the model's folder: an absolute location, one with a `..` part, or
    one that a symbolic link takes out of the folder. A model file may come from
    anyone, and its location is a path into the reader's file system."""
    name = f"tensor {shown(tensor.name)} of {what}"
    location = next((e.value for e in tensor.external_data if e.key == "location"), None)
    if not location:
        raise OnnxImportError(f"{name} keeps its data outside the model but names no location")
    relative, windows = PurePath(location), PureWindowsPath(location)
    folder = directory.resolve()
    if relative.is_absolute() or windows.drive:
        why = "an absolute path"
    elif ".." in relative.parts + windows.parts:
        why = "a path through '..'"
    elif not _resolves_within(folder / relative, folder):
        why = "which a symbolic link takes out of the model's folder"
    else:
        return
    raise OnnxImportError(
        f"{name} keeps its data at {shown(location)}, {why}: refused (external data must "
        "lie in the model's folder or below it)"
    )


def _resolves_within(path: Path, folder: Path) -> bool:
    """Whether `path`, its symbolic links followed, lies in `folder` (a loop of links
    resolves nowhere)."""
    try:
        return path.resolve().is_relative_to(folder)
    except (OSError, RuntimeError):  # RuntimeError: a symlink loop, before Python 3.13
        return False


def _load_external_data(
    model: onnx.ModelProto, external: Sequence[TensorProto], directory: Path, what: str
) -> None:
    """Read the external tensors of `model` (a file at `directory`) into it, each the
    bytes its shape and type need, checked before reading (`_check_external`); onnx
    checks that they lie within the data file."""
    for tensor in external:
        _check_external(tensor, what)
    try:
        external_data_helper.load_external_data_for_model(model, str(directory))
    except OSError as err:
        raise OnnxImportError(
            f"cannot read the external data of {what}: {err.strerror or err}"
        ) from None
    except ValueError as err:  # the data file is shorter than a tensor's offset + length
        raise OnnxImportError(
            f"the external data of {what} is truncated or corrupt: {first_line(err)}"
        ) from None


_EXTERNAL_DATA_KEYS = ("location", "offset", "length", "checksum", "basepath")
"""The keys an external tensor's `external_data` may hold (the ONNX spec's, and onnx's)."""


def _check_external(tensor: TensorProto, what: str) -> None:
    """Check an external tensor's record before its data is read: known keys (onnx
    would warn and ignore others), integer offset and length, sane dims within the
    size limit, and a length equal to what the dims and type need. A record without
    a length (the data runs to the end of the file) gets that length, so that no more
    than the tensor's bytes are ever read."""
    name = f"tensor {shown(tensor.name)} of {what}"
    entries = {entry.key: entry.value for entry in tensor.external_data}
    unknown = sorted(set(entries) - set(_EXTERNAL_DATA_KEYS))
    if unknown:
        keys = ", ".join(shown(key) for key in unknown[:3])
        raise OnnxImportError(f"{name} has unknown external data keys {keys}")
    expected = stored_bytes(tensor, name)
    try:
        offset, length = (int(entries.get(key, "0")) for key in ("offset", "length"))
    except ValueError:
        raise OnnxImportError(f"{name} has a non-integer external data offset or length") from None
    if offset < 0:
        raise OnnxImportError(f"{name} has a negative external data offset {offset}")
    if "length" in entries and length != expected:
        raise OnnxImportError(
            f"{name} declares {length} bytes of external data, but its shape "
            f"{list(tensor.dims)} and type need {expected}"
        )
    if "length" not in entries:
        tensor.external_data.add(key="length", value=str(expected))


def read_metadata(model: onnx.ModelProto, key: str) -> object:
    """The exporter's JSON record under `key`, or None when there is none or it is not
    JSON (a record only ever picks among equal forms, so a bad one is ignored). The
    records are flat, so JSON nested deeper than Python's parser recurses is no record
    either; nor is one that is not UTF-8 (protobuf decodes a string when it is read)."""
    try:
        text = next((entry.value for entry in model.metadata_props if entry.key == key), None)
        return json.loads(text) if text is not None else None
    except (json.JSONDecodeError, RecursionError, UnicodeDecodeError):
        return None


# --------------------------------------------------------------------------- writing


def external_data_path(path: str | PathLike[str]) -> Path:
    """Where `save_onnx` puts the tensors of `path` written with external data:
    `model.onnx` -> `model.onnx.data`, beside it (ONNX records the name relative to
    the model's directory, so the pair moves together)."""
    target = Path(path)
    return target.with_name(f"{target.name}.data")


def save_onnx(
    model: onnx.ModelProto, path: str | PathLike[str], external_data: bool | None = None
) -> None:
    """Write `model` to `path` atomically: a failure never leaves a half-written file.

    With `external_data` (default: only when the model exceeds protobuf's 2 GiB) the
    initializers of at least EXTERNAL_DATA_THRESHOLD bytes go to `external_data_path(path)`
    and the model file keeps references to them; `onnx.load(path)`, onnxruntime and
    `import_onnx(path)` read the pair. `model` is left as it was.

    The files are staged in a private directory beside `path` (`write_onnx_files`) and
    moved into place with `os.replace`, atomic within one file system; the data file
    moves first, so a model file is never seen without its data. (The `tasoc` driver
    stages them with its other outputs instead: `tasoc.driver.outputs`.)
    """
    target = Path(path)
    stage = Path(tempfile.mkdtemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent))
    try:
        for staged in write_onnx_files(model, stage, target.name, external_data):
            os.replace(staged, target.parent / staged.name)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_onnx_files(
    model: onnx.ModelProto, directory: Path, name: str, external_data: bool | None = None
) -> list[Path]:
    """Serialize `model` into `directory` as `name` (and `name.data` with external data,
    see `save_onnx`), check it, and return the files written, data file first.

    The files get their final names, so the model's reference to its data file holds
    both here, where `onnx.checker` checks them by path, and once moved beside each
    other elsewhere: `directory` is a stage, not the destination."""
    fits = fits_in_protobuf(model)
    if external_data is None:
        external_data = not fits
    elif not external_data and not fits:
        raise OnnxExportError(
            f"the model has {model.ByteSize() / 2**30:.1f} GiB, more than one protobuf "
            "holds (2 GiB); write it with external data"
        )
    model_file = directory / name
    if not external_data:
        model_file.write_bytes(model.SerializeToString())
        return [model_file]
    data_file = directory / external_data_path(model_file).name
    with open(data_file, "w+b") as stream, _externalized(model, stream, data_file.name):
        model_file.write_bytes(model.SerializeToString())
    check_exported(str(model_file))
    return [data_file, model_file]


EXTERNAL_DATA_THRESHOLD = 1024
"""Initializers of fewer bytes stay inside the model file when writing external data
(as `onnx.save_model` does): shape constants are read with the graph."""

_ALIGNMENT = 4096
"""External tensors start at multiples of this (a page), so runtimes can map them."""


@contextmanager
def _externalized(model: onnx.ModelProto, stream: IO[bytes], location: str) -> Iterator[None]:
    """Within the block, `model`'s large initializers point into `stream` (written here,
    opened for reading too) instead of holding their bytes; afterwards they hold them
    again, read back from `stream`.

    Moving the bytes out and back, rather than copying the model or keeping them aside,
    keeps memory at one copy of the weights plus one tensor, which for the models that
    need external data is gigabytes.
    """
    moved: list[tuple[TensorProto, int, int]] = []
    try:
        for tensor in model.graph.initializer:
            if not tensor.HasField("raw_data") or len(tensor.raw_data) < EXTERNAL_DATA_THRESHOLD:
                continue
            stream.write(bytes(-stream.tell() % _ALIGNMENT))
            offset = stream.tell()
            length = stream.write(tensor.raw_data)
            moved.append((tensor, offset, length))
            external_data_helper.set_external_data(tensor, location, offset, length)
            tensor.data_location = TensorProto.EXTERNAL
            tensor.ClearField("raw_data")
        yield
    finally:
        for tensor, offset, length in moved:
            stream.seek(offset)
            tensor.raw_data = stream.read(length)
            tensor.ClearField("external_data")
            tensor.ClearField("data_location")


def check_exported(model: onnx.ModelProto | str) -> None:
    """`onnx.checker` on a model or a model file, failing as one OnnxExportError line."""
    try:
        onnx.checker.check_model(model)
    except onnx.checker.ValidationError as err:
        raise OnnxExportError(f"the exported model is invalid: {first_line(err)}") from None
