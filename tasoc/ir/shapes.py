"""Tensor types and shape inference for `graph` ops, in plain Python.

Each op's typing rule is part of its definition (`OpDef.infer`, in its family's
module under `tasoc/ir/ops/`): a function from operand signatures and Python-valued
attributes to result signatures. `infer` runs it; the xDSL verifiers, the builder and
the light `dag` all call `infer`, so the typing rules of the IR live in exactly one
place. A violated rule raises `ShapeError` with a message that names the mismatch;
the caller adds the op name. This module holds the types (`DType`, `TensorSig`) and
the checks the rules share (attribute kinds, broadcasting, windows).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from numbers import Integral, Real
from typing import Any

from tasoc.ir.encodings import PROPAGATE
from tasoc.ir.limits import LimitError, check_shape
from tasoc.ir.opdef import op_def


class DType(StrEnum):
    """Element types a tensor of the `graph` dialect may have: floats, signed integers,
    one unsigned integer (`ui8`, images as ONNX carries them) and booleans (`i1`, what
    `graph.compare` yields and `graph.where` selects by)."""

    F32 = "f32"
    F16 = "f16"
    BF16 = "bf16"
    F64 = "f64"
    I32 = "i32"
    I64 = "i64"
    I8 = "i8"
    I16 = "i16"
    U8 = "ui8"
    BOOL = "i1"

    @property
    def is_float(self) -> bool:
        return self in _FLOATS

    @property
    def is_integer(self) -> bool:
        """A signed or unsigned integer type (not a boolean)."""
        return self in _INTEGERS

    @property
    def itemsize(self) -> int:
        """Bytes per element (a boolean takes one, as NumPy and XLA store it)."""
        return _ITEMSIZES[self]


_FLOATS = frozenset((DType.F32, DType.F16, DType.BF16, DType.F64))
_INTEGERS = frozenset((DType.I32, DType.I64, DType.I8, DType.I16, DType.U8))
_ITEMSIZES = {
    DType.F32: 4,
    DType.F16: 2,
    DType.BF16: 2,
    DType.F64: 8,
    DType.I32: 4,
    DType.I64: 8,
    DType.I8: 1,
    DType.I16: 2,
    DType.U8: 1,
    DType.BOOL: 1,
}


@dataclass(frozen=True, slots=True)
class TensorSig:
    """The static type of a tensor: its shape, element type and encoding.

    `encoding` is the tensor type's encoding attribute (`tensor<4x4xf32, #enc>`), kept
    as the IR's own immutable, hashable object, or None for a plain tensor. It is where
    a memory space or a sharding lives (as JAX keeps them in the aval), so the light
    graph must carry it rather than forget it; this module never looks inside it.
    """

    shape: tuple[int, ...]
    dtype: DType
    encoding: Hashable | None = None

    @property
    def rank(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    def __str__(self) -> str:
        text = "x".join([*map(str, self.shape), self.dtype.value])
        return text if self.encoding is None else f"{text}, {self.encoding}"


@dataclass(frozen=True, slots=True)
class ConstData:
    """The value of a small dense constant, hashable so the `dag` can intern it."""

    shape: tuple[int, ...]
    dtype: DType
    values: tuple[float | int, ...]


class ShapeError(ValueError):
    """An op's operands or attributes do not type-check."""


class SizeLimitError(ShapeError, LimitError):
    """A tensor type is over a resource limit (`limits.py`): a ShapeError to every
    verifier and builder, and a LimitError to a caller that tells them apart (the zoo
    reports it as options too large, not as options that do not fit together)."""


def check_size(sig: TensorSig) -> None:
    """SizeLimitError when `sig` is over the largest rank, dimension or tensor bytes.

    Every type tasoc reads goes through here (`infer` for results, `graph.sig_of` for
    the rest), so a size is refused where it is written, before any backend allocates it.
    """
    try:
        check_shape(sig.shape, sig.dtype.itemsize)
    except LimitError as err:
        raise SizeLimitError(str(err)) from None


Attrs = Mapping[str, Any]
InferFn = Callable[[Sequence[TensorSig], Attrs], list[TensorSig]]


def infer(op: str, inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    """Result signatures of `op` applied to `inputs` with `attrs`; raises ShapeError.

    The op's rule (`OpDef.infer`) sees shapes and element types only. The results take the operands'
    encoding here, once for every op: by the rule the encoding's dialect registered in
    `encodings.PROPAGATE` (a sharding propagates by the op's SOAP rule), else the
    operands' common encoding (`common_encoding`).
    """
    definition = op_def(op)
    low, high = definition.arity
    if len(inputs) < low or (high is not None and len(inputs) > high):
        expected = f"{low}" if low == high else f"{low}..{high if high is not None else 'n'}"
        raise ShapeError(f"expected {expected} operands, got {len(inputs)}")
    results = definition.infer(inputs, attrs)
    for result in results:
        check_size(result)
    kinds = {type(sig.encoding) for sig in inputs if sig.encoding is not None}
    rules = [PROPAGATE[kind] for kind in kinds if kind in PROPAGATE]
    if rules:
        if len(kinds) > 1:
            common_encoding(inputs)  # raises, naming the encodings that differ
        return rules[0](op, inputs, attrs, results)
    encoding = common_encoding(inputs)
    if encoding is None:
        return results
    return [replace(result, encoding=encoding) for result in results]


def common_encoding(inputs: Sequence[TensorSig]) -> Hashable | None:
    """The encoding all `inputs` share, which an op's results take; ShapeError when
    they differ (an op reading a host tensor and a device tensor, or two shardings,
    needs an explicit move first). Ops without operands make plain tensors."""
    encodings = {sig.encoding for sig in inputs}
    if len(encodings) > 1:
        shown = ", ".join(sorted("none" if e is None else str(e) for e in encodings))
        raise ShapeError(f"operands have different tensor encodings: {shown}")
    return next(iter(encodings), None)


def fmt_shape(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def same_dtype(*sigs: TensorSig) -> DType:
    dtypes = {s.dtype for s in sigs}
    if len(dtypes) != 1:
        raise ShapeError(f"element types differ: {', '.join(sorted(dtypes))}")
    return sigs[0].dtype


def need_float(sig: TensorSig, what: str = "operand") -> None:
    if not sig.dtype.is_float:
        raise ShapeError(f"{what} must have a float element type, got {sig.dtype}")


def need_number(sig: TensorSig, what: str = "operand") -> None:
    """Arithmetic takes numbers: a boolean (i1) has no sum, negation or order of size."""
    if sig.dtype == DType.BOOL:
        raise ShapeError(f"{what} must be a number (float or integer), got i1")


def need_boolean(sig: TensorSig, what: str = "operand") -> None:
    if sig.dtype != DType.BOOL:
        raise ShapeError(f"{what} must be i1 (boolean), got {sig.dtype}")


def axis_index(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


# Attribute values are read through these accessors, which check their kinds: the
# text form can give any attribute any value (`groups = 1.5 : f32`, `padding = 3`), and
# `int(1.5)` or `tuple("ab")` would quietly make a wrong program type-check.


def _is_int(value: Any) -> bool:
    # `type(...) is int` first: the ABC check costs a fifth of inference on large graphs.
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


def int_attr(attrs: Attrs, name: str) -> int:
    value = attrs[name]
    if not _is_int(value):
        raise ShapeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def ints_attr(attrs: Attrs, name: str, length: int | None = None) -> tuple[int, ...]:
    value = attrs[name]
    if not isinstance(value, tuple | list) or not all(_is_int(v) for v in value):
        raise ShapeError(f"{name} must be an array of integers, got {value!r}")
    if length is not None and len(value) != length:
        raise ShapeError(f"{name} must have {length} integers, got {list(value)}")
    return tuple(int(v) for v in value)


def choice_attr(attrs: Attrs, name: str, choices: Sequence[str]) -> str:
    value = attrs[name]
    if not isinstance(value, str) or value not in choices:
        *others, last = [f"'{choice}'" for choice in choices]
        listed = f"{', '.join(others)} or {last}" if others else last
        raise ShapeError(f"{name} must be {listed}, got {value!r}")
    return value


def bool_attr(attrs: Attrs, name: str) -> bool:
    value = attrs[name]
    if not isinstance(value, bool):
        raise ShapeError(f"{name} must be a boolean, got {value!r}")
    return value


def number_attr(attrs: Attrs, name: str, valid: Callable[[float], bool], wanted: str) -> float:
    """`name`: a real number (not a flag) for which `valid` holds, `wanted` saying which
    in the message. NaN passes no comparison, so no range written as one accepts it."""
    value = attrs[name]
    if isinstance(value, bool) or not isinstance(value, Real) or not valid(value):
        raise ShapeError(f"{name} must be {wanted}, got {value!r}")
    return float(value)


def epsilon_attr(attrs: Attrs) -> float:
    return number_attr(attrs, "epsilon", lambda v: 0 <= v < math.inf, "a finite number >= 0")


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of two static shapes."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {fmt_shape(a)} and {fmt_shape(b)} are not broadcastable")
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(out)


def pair_attr(attrs: Attrs, name: str) -> tuple[int, int]:
    value = ints_attr(attrs, name)
    if len(value) != 2 or min(value) < 1:
        raise ShapeError(f"{name} must be two positive integers, got {list(value)}")
    return value[0], value[1]


def padding_attr(attrs: Attrs) -> str | tuple[int, ...]:
    """`padding`: a mode (`same`, `valid`: `window_pads` says which) or 4 integers."""
    value = attrs["padding"]
    return value if isinstance(value, str) else ints_attr(attrs, "padding", 4)


def window_pads(
    padding: str | Sequence[int],
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
) -> tuple[int, int, int, int]:
    """Explicit (top, left, bottom, right) padding of a 2-D window op.

    `same` follows TASO and TensorFlow: the output has ceil(in / stride) rows, and
    the odd padding element goes to the bottom/right.
    """
    if isinstance(padding, str):
        if padding == "valid":
            return (0, 0, 0, 0)
        if padding != "same":
            raise ShapeError(f"padding must be 'same', 'valid' or 4 integers, got '{padding}'")
        pads = []
        for size, k, s in zip(in_hw, kernel, strides, strict=True):
            out = -(-size // s)
            pads.append(max((out - 1) * s + k - size, 0))
        (ph, pw) = pads
        return (ph // 2, pw // 2, ph - ph // 2, pw - pw // 2)
    pads4 = tuple(padding)
    if len(pads4) != 4 or min(pads4) < 0:
        raise ShapeError(f"explicit padding must be 4 non-negative integers, got {list(pads4)}")
    return (pads4[0], pads4[1], pads4[2], pads4[3])


def window_output(
    in_hw: tuple[int, int],
    kernel: tuple[int, int],
    strides: tuple[int, int],
    padding: str | Sequence[int],
) -> tuple[int, int]:
    top, left, bottom, right = window_pads(padding, in_hw, kernel, strides)
    out = []
    for size, k, s, pad in zip(in_hw, kernel, strides, (top + bottom, left + right), strict=True):
        if size + pad < k:
            raise ShapeError(f"window {k} is larger than the padded input {size + pad}")
        out.append((size + pad - k) // s + 1)
    return out[0], out[1]


_DTYPE_NAMES = frozenset(DType)
"""Every DType, which a name (`"f32"`) is `in` as well: DType is a StrEnum."""


def dtype_attr(attrs: Attrs, name: str = "dtype") -> DType:
    """The element type an op makes: a type (`dtype = f32`), or its name from Python."""
    value = attrs[name]
    if not isinstance(value, str) or value not in _DTYPE_NAMES:
        names = ", ".join(DType)
        raise ShapeError(f"{name} must be one of {names}, got {value!r}")
    return DType(value)


def need_indices(sig: TensorSig, what: str) -> None:
    """ShapeError unless `sig` holds indices (ids, labels): i32 or i64."""
    if sig.dtype not in (DType.I32, DType.I64):
        raise ShapeError(f"{what} must be i32 or i64, got {sig.dtype}")


# ------------------------------------- backward ops, losses and optimizer updates
# A backward op's operands include its forward op's operands (or their shapes) and dy,
# the gradient of the forward result. Its rule runs the forward op's rule, so the two
# cannot drift apart, and checks that dy has the type the forward op yields.


def expect_shape(sig: TensorSig, name: str, shape: Sequence[int]) -> None:
    """ShapeError naming `name` unless `sig` has `shape`."""
    if sig.shape != tuple(shape):
        raise ShapeError(f"{name} must have shape {fmt_shape(shape)}, got {fmt_shape(sig.shape)}")


def check_forward(
    rule: InferFn,
    op: str,
    inputs: Sequence[TensorSig],
    attrs: Attrs,
    grad: TensorSig,
    grad_name: str = "dy",
) -> None:
    """ShapeError unless the forward `op` (its shape rule `rule`) type-checks on
    `inputs` and `attrs` and yields the shape and element type of `grad`."""
    try:
        (out,) = rule(inputs, attrs)
    except ShapeError as err:
        raise ShapeError(f"forward {op}: {err}") from None
    if grad.shape != out.shape:
        raise ShapeError(
            f"{grad_name} must have the forward {op}'s result shape {fmt_shape(out.shape)}, "
            f"got {fmt_shape(grad.shape)}"
        )
    same_dtype(out, grad)
