"""Reading ONNX files: parsing, checking, the 2 GiB protobuf limit and external data.

`load_model` turns a path, serialized bytes or a ModelProto into a checked ModelProto
with its external tensors read in (from beside the model's file), or raises
OnnxImportError with one line. Nothing here knows what the graph computes.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from os import PathLike
from pathlib import Path

import numpy as np
import onnx
from google.protobuf.message import DecodeError, EncodeError
from onnx import TensorProto, external_data_helper

from tasoc.backends.onnx.errors import OnnxImportError

PROTOBUF_LIMIT = 2**31
"""Bytes a serialized protobuf may hold; larger ONNX models need external data."""


def fits_in_protobuf(model: onnx.ModelProto) -> bool:
    """Whether `model` serializes as one protobuf (under 2 GiB); larger models are only
    written, read and checked with their tensors in an external data file.

    upb sizes a message by encoding it, so the initializers' raw bytes (known from their
    dims) are added up first: a model over the limit is told so without encoding
    gigabytes only to fail."""
    raw = sum(
        math.prod(tensor.dims) * onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type).itemsize
        for tensor in model.graph.initializer
        if tensor.HasField("raw_data")
    )
    if raw >= PROTOBUF_LIMIT:
        return False
    try:
        return model.ByteSize() < PROTOBUF_LIMIT
    except EncodeError:  # the rest of the model pushed it over
        return False


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
                model = onnx.load(Path(source), load_external_data=False)
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
    try:
        # By path, the checker also checks that the external data files exist; a model
        # over 2 GiB already in memory cannot be serialized for the check, so is trusted.
        if external:
            onnx.checker.check_model(str(source))
        elif fits_in_protobuf(model):
            onnx.checker.check_model(model)
    except (onnx.checker.ValidationError, ValueError) as err:
        first = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise OnnxImportError(f"{what} is not a valid ONNX model: {first}") from None
    if external:
        _load_external_data(model, external, Path(source).parent, what)
    return model


def _external_tensors(model: onnx.ModelProto) -> list[TensorProto]:
    """The tensors of the main graph (initializers, Constant values) stored outside it."""
    tensors = [*model.graph.initializer]
    for node in model.graph.node:
        tensors += [attr.t for attr in node.attribute if attr.type == onnx.AttributeProto.TENSOR]
    return [tensor for tensor in tensors if external_data_helper.uses_external_data(tensor)]


def _load_external_data(
    model: onnx.ModelProto, external: Sequence[TensorProto], directory: Path, what: str
) -> None:
    """Read the external tensors of `model` (a file at `directory`) into it, checking
    each holds the bytes its shape and type need (a truncated data file reads short)."""
    try:
        external_data_helper.load_external_data_for_model(model, str(directory))
    except OSError as err:
        raise OnnxImportError(
            f"cannot read the external data of {what}: {err.strerror or err}"
        ) from None
    except ValueError as err:  # the data file is shorter than a tensor's offset + length
        raise OnnxImportError(
            f"the external data of {what} is truncated or corrupt: {str(err).splitlines()[0]}"
        ) from None
    for tensor in external:
        itemsize = np.dtype(onnx.helper.tensor_dtype_to_np_dtype(tensor.data_type)).itemsize
        expected = math.prod(tensor.dims) * itemsize
        if len(tensor.raw_data) != expected:
            raise OnnxImportError(
                f"the external data of {what} is truncated or corrupt: tensor '{tensor.name}' "
                f"needs {expected} bytes, read {len(tensor.raw_data)}"
            )


def read_metadata(model: onnx.ModelProto, key: str) -> object:
    """The exporter's JSON record under `key`, or None when there is none or it is not
    JSON (a record only ever picks among equal forms, so a bad one is ignored)."""
    text = next((entry.value for entry in model.metadata_props if entry.key == key), None)
    try:
        return json.loads(text) if text is not None else None
    except json.JSONDecodeError:
        return None
