"""Reading ONNX tensors into NumPy without trusting what the file says, and the size
limit on every array the importer makes.

A TensorProto states its element type and dims apart from the bytes holding its data,
so a file of a few bytes can state dims that multiply to petabytes, or data that does
not fit its dims. Every tensor the importer reads (initializers, `Constant` values,
`ConstantOfShape` fills, external data) is checked here against itself and against
the limits (`tasoc.ir.limits`) before NumPy allocates anything; `check_size` applies
the same limits to the values the importer computes (constant folding), before
computing them.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx
from onnx import TensorProto, numpy_helper

from tasoc.backends.onnx.errors import OnnxImportError, first_line, format_dims
from tasoc.ir.limits import LimitError, check_shape

_PACKED_4BIT = {TensorProto.INT4, TensorProto.UINT4, TensorProto.FLOAT4E2M1}
"""Element types stored two to a byte (and two to a typed-field entry)."""

_COMPLEX = {TensorProto.COMPLEX64, TensorProto.COMPLEX128}
"""Element types stored as two typed-field entries (real, imaginary) each."""


def element_dtype(data_type: int) -> np.dtype | None:
    """The NumPy type of an ONNX element type, or None for one ONNX does not define
    (a file may hold any number there)."""
    try:
        return np.dtype(onnx.helper.tensor_dtype_to_np_dtype(data_type))
    except (KeyError, ValueError, TypeError):
        return None


def element_type_name(data_type: int) -> str:
    """`FLOAT`, `INT64`, ... for an ONNX element type; the number for one ONNX lacks."""
    if data_type in TensorProto.DataType.values():
        return TensorProto.DataType.Name(data_type)
    return str(data_type)


def check_size(shape: Sequence[int], dtype: np.dtype, what: str) -> None:
    """Refuse, before it is allocated, an array of `shape` and `dtype` over the limits
    (`tasoc.ir.limits`: largest dim, rank and tensor); `what` names it in the message."""
    try:
        check_shape(shape, dtype.itemsize)
    except LimitError as err:
        raise OnnxImportError(
            f"{what} of shape {format_dims(shape)} and type {dtype}: {err}"
        ) from None


def stored_dtype(tensor: TensorProto, what: str) -> np.dtype:
    """The NumPy type of `tensor`'s elements, checking its dims: non-negative, and a
    size within the limit."""
    dtype = element_dtype(tensor.data_type)
    if dtype is None:
        raise OnnxImportError(f"{what} has an unknown element type ({tensor.data_type})")
    if any(d < 0 for d in tensor.dims):
        raise OnnxImportError(f"{what} has negative dims {format_dims(tensor.dims)}")
    check_size(tensor.dims, dtype, what)
    return dtype


def stored_bytes(tensor: TensorProto, what: str) -> int:
    """The bytes `tensor`'s raw (or external) data must hold for its dims and type."""
    dtype = stored_dtype(tensor, what)
    count = math.prod(tensor.dims)
    return (count + 1) // 2 if tensor.data_type in _PACKED_4BIT else count * dtype.itemsize


def _typed_entries(tensor: TensorProto) -> int:
    """How many entries of its typed field (`float_data`, `int32_data`, ...) `tensor`'s
    dims and type need."""
    count = math.prod(tensor.dims)
    if tensor.data_type in _PACKED_4BIT:
        return (count + 1) // 2
    return 2 * count if tensor.data_type in _COMPLEX else count


def tensor_array(tensor: TensorProto, what: str) -> np.ndarray:
    """`tensor` as an array, after checking that its dims are sane, within the limit,
    and match the amount of data it holds; `what` names it in messages ("initializer
    'w'"). External data must have been read in already (`files.load_model`)."""
    if tensor.data_location == TensorProto.EXTERNAL:
        raise OnnxImportError(f"{what} keeps its data outside the model, which was not read")
    expected = stored_bytes(tensor, what)
    if tensor.HasField("raw_data"):
        if len(tensor.raw_data) != expected:
            raise OnnxImportError(
                f"{what} holds {len(tensor.raw_data)} bytes of data, but its shape "
                f"{format_dims(tensor.dims)} and type need {expected}"
            )
    else:
        entries = _typed_entries(tensor)
        field = onnx.helper.tensor_dtype_to_field(tensor.data_type)
        held = len(getattr(tensor, field))
        if held != entries:
            raise OnnxImportError(
                f"{what} holds {held} values, but its shape {format_dims(tensor.dims)} "
                f"needs {entries}"
            )
    try:
        return numpy_helper.to_array(tensor)
    except (ValueError, TypeError) as err:
        raise OnnxImportError(f"cannot read {what}: {first_line(err)}") from None
