"""Shape and dtype inference for every `graph` op, in plain Python.

One function per op maps operand signatures and Python-valued attributes to result
signatures. The xDSL verifiers, the builder and the light `dag` all call these, so
the typing rules of the IR live in exactly one place. A violated rule raises
`ShapeError` with a message that names the mismatch; the caller adds the op name.
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

INFER: dict[str, InferFn] = {}
"""Shape inference by op name (without the `graph.` prefix)."""

ARITY: dict[str, tuple[int, int | None]] = {}
"""(min, max) number of operands by op name; max None means variadic."""


def _rule(*names: str, arity: tuple[int, int | None]) -> Callable[[InferFn], InferFn]:
    def register(fn: InferFn) -> InferFn:
        for name in names:
            INFER[name] = fn
            ARITY[name] = arity
        return fn

    return register


def infer(op: str, inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    """Result signatures of `op` applied to `inputs` with `attrs`; raises ShapeError.

    The rules below see shapes and element types only. The results take the operands'
    encoding here, once for every op: by the rule the encoding's dialect registered in
    `encodings.PROPAGATE` (a sharding propagates by the op's SOAP rule), else the
    operands' common encoding (`common_encoding`).
    """
    low, high = ARITY[op]
    if len(inputs) < low or (high is not None and len(inputs) > high):
        expected = f"{low}" if low == high else f"{low}..{high if high is not None else 'n'}"
        raise ShapeError(f"expected {expected} operands, got {len(inputs)}")
    results = INFER[op](inputs, attrs)
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


def _fmt(shape: Sequence[int]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def _same_dtype(*sigs: TensorSig) -> DType:
    dtypes = {s.dtype for s in sigs}
    if len(dtypes) != 1:
        raise ShapeError(f"element types differ: {', '.join(sorted(dtypes))}")
    return sigs[0].dtype


def _float(sig: TensorSig, what: str = "operand") -> None:
    if not sig.dtype.is_float:
        raise ShapeError(f"{what} must have a float element type, got {sig.dtype}")


def _number(sig: TensorSig, what: str = "operand") -> None:
    """Arithmetic takes numbers: a boolean (i1) has no sum, negation or order of size."""
    if sig.dtype == DType.BOOL:
        raise ShapeError(f"{what} must be a number (float or integer), got i1")


def _boolean(sig: TensorSig, what: str = "operand") -> None:
    if sig.dtype != DType.BOOL:
        raise ShapeError(f"{what} must be i1 (boolean), got {sig.dtype}")


def _axis(axis: int, rank: int) -> int:
    if not -rank <= axis < rank:
        raise ShapeError(f"axis {axis} out of range for rank {rank}")
    return axis % rank


# Attribute values are read through these accessors, which check their kinds: the
# text form can give any attribute any value (`groups = 1.5 : f32`, `padding = 3`), and
# `int(1.5)` or `tuple("ab")` would quietly make a wrong program type-check.


def _is_int(value: Any) -> bool:
    # `type(...) is int` first: the ABC check costs a fifth of inference on large graphs.
    return type(value) is int or (isinstance(value, Integral) and not isinstance(value, bool))


def _int_attr(attrs: Attrs, name: str) -> int:
    value = attrs[name]
    if not _is_int(value):
        raise ShapeError(f"{name} must be an integer, got {value!r}")
    return int(value)


def _ints_attr(attrs: Attrs, name: str, length: int | None = None) -> tuple[int, ...]:
    value = attrs[name]
    if not isinstance(value, tuple | list) or not all(_is_int(v) for v in value):
        raise ShapeError(f"{name} must be an array of integers, got {value!r}")
    if length is not None and len(value) != length:
        raise ShapeError(f"{name} must have {length} integers, got {list(value)}")
    return tuple(int(v) for v in value)


def _choice_attr(attrs: Attrs, name: str, choices: Sequence[str]) -> str:
    value = attrs[name]
    if not isinstance(value, str) or value not in choices:
        *others, last = [f"'{choice}'" for choice in choices]
        listed = f"{', '.join(others)} or {last}" if others else last
        raise ShapeError(f"{name} must be {listed}, got {value!r}")
    return value


def _bool_attr(attrs: Attrs, name: str) -> bool:
    value = attrs[name]
    if not isinstance(value, bool):
        raise ShapeError(f"{name} must be a boolean, got {value!r}")
    return value


def _number_attr(attrs: Attrs, name: str, valid: Callable[[float], bool], wanted: str) -> float:
    """`name`: a real number (not a flag) for which `valid` holds, `wanted` saying which
    in the message. NaN passes no comparison, so no range written as one accepts it."""
    value = attrs[name]
    if isinstance(value, bool) or not isinstance(value, Real) or not valid(value):
        raise ShapeError(f"{name} must be {wanted}, got {value!r}")
    return float(value)


def _epsilon_attr(attrs: Attrs) -> float:
    return _number_attr(attrs, "epsilon", lambda v: 0 <= v < math.inf, "a finite number >= 0")


def broadcast_shapes(a: Sequence[int], b: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of two static shapes."""
    rank = max(len(a), len(b))
    pa = (1,) * (rank - len(a)) + tuple(a)
    pb = (1,) * (rank - len(b)) + tuple(b)
    out = []
    for x, y in zip(pa, pb, strict=True):
        if x != y and 1 not in (x, y):
            raise ShapeError(f"shapes {_fmt(a)} and {_fmt(b)} are not broadcastable")
        out.append(max(x, y) if 0 not in (x, y) else 0)
    return tuple(out)


@_rule("add", "mul", "sub", "div", "pow", "max", "min", arity=(2, 2))
def _binary(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    dtype = _same_dtype(lhs, rhs)
    _number(lhs, "operands")
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), dtype)]


@_rule("relu", "sigmoid", "tanh", "gelu", "exp", "log", "sqrt", "reciprocal", "erf", arity=(1, 1))
def _unary(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    _float(inputs[0])
    return [inputs[0]]


@_rule("neg", "abs", arity=(1, 1))
def _signed(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    _number(inputs[0])
    return [inputs[0]]


COMPARISONS = ("eq", "ne", "lt", "le", "gt", "ge")
"""The predicates of `graph.compare`."""


@_rule("compare", arity=(2, 2))
def _compare(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    _same_dtype(lhs, rhs)
    _choice_attr(attrs, "predicate", COMPARISONS)
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), DType.BOOL)]


@_rule("not", arity=(1, 1))
def _not(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    _boolean(inputs[0])
    return [inputs[0]]


@_rule("and", "or", "xor", arity=(2, 2))
def _logic(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    _boolean(lhs, "lhs")
    _boolean(rhs, "rhs")
    return [TensorSig(broadcast_shapes(lhs.shape, rhs.shape), DType.BOOL)]


@_rule("where", arity=(3, 3))
def _where(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    condition, lhs, rhs = inputs
    _boolean(condition, "condition")
    dtype = _same_dtype(lhs, rhs)
    shape = broadcast_shapes(condition.shape, broadcast_shapes(lhs.shape, rhs.shape))
    return [TensorSig(shape, dtype)]


@_rule("cast", arity=(1, 1))
def _cast(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    return [TensorSig(inputs[0].shape, _dtype_attr(attrs, "to"))]


@_rule("broadcast", arity=(1, 1))
def _broadcast(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    shape = _ints_attr(attrs, "shape")
    lead = len(shape) - x.rank
    if (
        min(shape, default=0) < 0
        or lead < 0
        or any(d not in (1, shape[lead + i]) for i, d in enumerate(x.shape))
    ):
        raise ShapeError(f"cannot broadcast {_fmt(x.shape)} to {_fmt(shape)}")
    return [TensorSig(shape, x.dtype)]


@_rule("scale", arity=(2, 2))
def _scale(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, s = inputs
    if s.rank != 0:
        raise ShapeError(f"scalar operand must have rank 0, got {_fmt(s.shape)}")
    _same_dtype(x, s)
    return [x]


@_rule("transpose", arity=(1, 1))
def _transpose(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    perm = _ints_attr(attrs, "perm")
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of {x.rank} dimensions")
    return [TensorSig(tuple(x.shape[p] for p in perm), x.dtype)]


@_rule("matmul", arity=(2, 2))
def _matmul(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    dtype = _same_dtype(lhs, rhs)
    if lhs.rank < 2 or rhs.rank < 2:
        raise ShapeError(f"operands must have rank >= 2, got {lhs.rank} and {rhs.rank}")
    (m, k), (k2, n) = lhs.shape[-2:], rhs.shape[-2:]
    if k != k2:
        raise ShapeError(
            f"contraction sizes differ: {_fmt(lhs.shape)} @ {_fmt(rhs.shape)} ({k} != {k2})"
        )
    batch = broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    return [TensorSig((*batch, m, n), dtype)]


def _pair(attrs: Attrs, name: str) -> tuple[int, int]:
    value = _ints_attr(attrs, name)
    if len(value) != 2 or min(value) < 1:
        raise ShapeError(f"{name} must be two positive integers, got {list(value)}")
    return value[0], value[1]


def _padding_attr(attrs: Attrs) -> str | tuple[int, ...]:
    """`padding`: a mode (`same`, `valid`: `window_pads` says which) or 4 integers."""
    value = attrs["padding"]
    return value if isinstance(value, str) else _ints_attr(attrs, "padding", 4)


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


@_rule("conv2d", arity=(2, 2))
def _conv2d(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, w = inputs
    dtype = _same_dtype(x, w)
    _float(x)
    if x.rank != 4 or w.rank != 4:
        raise ShapeError(
            f"input and weight must be 4-D (NCHW, OIHW), got {x.rank}-D and {w.rank}-D"
        )
    groups = _int_attr(attrs, "groups")
    n, c, h, wd = x.shape
    cout, cin_g, kh, kw = w.shape
    if groups < 1 or c % groups or cout % groups:
        raise ShapeError(
            f"groups={groups} must divide input channels {c} and output channels {cout}"
        )
    if cin_g * groups != c:
        raise ShapeError(
            f"weight expects {cin_g * groups} input channels "
            f"({cin_g} x {groups} groups), input has {c}"
        )
    _choice_attr(attrs, "activation", ("none", "relu"))
    oh, ow = window_output((h, wd), (kh, kw), _pair(attrs, "strides"), _padding_attr(attrs))
    return [TensorSig((n, cout, oh, ow), dtype)]


@_rule("enlarge", arity=(1, 1))
def _enlarge(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (w,) = inputs
    if w.rank != 4:
        raise ShapeError(f"weight must be 4-D (OIHW), got {w.rank}-D")
    kh, kw = _pair(attrs, "kernel")
    for have, want in ((w.shape[2], kh), (w.shape[3], kw)):
        if want < have or (want - have) % 2:
            raise ShapeError(
                f"cannot enlarge kernel {_fmt(w.shape[2:])} to {kh}x{kw} symmetrically"
            )
    return [TensorSig((*w.shape[:2], kh, kw), w.dtype)]


@_rule("pool2d", arity=(1, 1))
def _pool2d(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    _float(x)
    if x.rank != 4:
        raise ShapeError(f"input must be 4-D (NCHW), got {x.rank}-D")
    _choice_attr(attrs, "kind", ("avg", "max"))
    n, c, h, w = x.shape
    kernel, strides = _pair(attrs, "kernel"), _pair(attrs, "strides")
    oh, ow = window_output((h, w), kernel, strides, _padding_attr(attrs))
    return [TensorSig((n, c, oh, ow), x.dtype)]


@_rule("concat", arity=(1, None))
def _concat(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    dtype = _same_dtype(*inputs)
    rank = inputs[0].rank
    axis = _axis(_int_attr(attrs, "axis"), rank)
    for sig in inputs:
        off_axis = [d for i, d in enumerate(sig.shape) if i != axis]
        if sig.rank != rank or off_axis != [d for i, d in enumerate(inputs[0].shape) if i != axis]:
            raise ShapeError(
                f"operand {_fmt(sig.shape)} does not match {_fmt(inputs[0].shape)} off axis {axis}"
            )
    shape = list(inputs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in inputs)
    return [TensorSig(tuple(shape), dtype)]


@_rule("split", arity=(1, 1))
def _split(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    axis = _axis(_int_attr(attrs, "axis"), x.rank)
    sizes = _ints_attr(attrs, "sizes")
    # Zero-size pieces are legal (ONNX allows them): empty tensors.
    if min(sizes, default=0) < 0:
        raise ShapeError(f"sizes {list(sizes)} must not be negative")
    if not sizes or sum(sizes) != x.shape[axis]:
        raise ShapeError(
            f"sizes {list(sizes)} do not sum to dimension {axis} of size {x.shape[axis]}"
        )
    results = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        results.append(TensorSig(tuple(shape), x.dtype))
    return results


_DTYPE_NAMES = frozenset(DType)
"""Every DType, which a name (`"f32"`) is `in` as well: DType is a StrEnum."""


def _dtype_attr(attrs: Attrs, name: str = "dtype") -> DType:
    """The element type an op makes: a type (`dtype = f32`), or its name from Python."""
    value = attrs[name]
    if not isinstance(value, str) or value not in _DTYPE_NAMES:
        names = ", ".join(DType)
        raise ShapeError(f"{name} must be one of {names}, got {value!r}")
    return DType(value)


@_rule("ones", "zeros", arity=(0, 0))
def _filled(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    shape = _ints_attr(attrs, "shape")
    if min(shape, default=0) < 0:
        raise ShapeError(f"shape {list(shape)} has a negative dimension")
    return [TensorSig(shape, _dtype_attr(attrs))]


@_rule("c_pool", arity=(0, 0))
def _c_pool(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    channels = _int_attr(attrs, "channels")
    kh, kw = _pair(attrs, "kernel")
    if channels < 1:
        raise ShapeError(f"channels must be positive, got {channels}")
    return [TensorSig((channels, 1, kh, kw), _dtype_attr(attrs))]


@_rule("i_conv", arity=(0, 0))
def _i_conv(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    channels = _int_attr(attrs, "channels")
    kh, kw = _pair(attrs, "kernel")
    if channels < 1 or kh % 2 == 0 or kw % 2 == 0:
        raise ShapeError(f"identity kernel needs positive channels and odd sizes, got {kh}x{kw}")
    return [TensorSig((channels, channels, kh, kw), _dtype_attr(attrs))]


@_rule("i_matmul", arity=(0, 0))
def _i_matmul(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    size = _int_attr(attrs, "size")
    if size < 1:
        raise ShapeError(f"size must be positive, got {size}")
    return [TensorSig((size, size), _dtype_attr(attrs))]


@_rule("constant", arity=(0, 0))
def _constant(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    value = attrs["value"]
    if not isinstance(value, ConstData):
        raise ShapeError(f"value must be a dense constant, got {value!r}")
    return [TensorSig(value.shape, value.dtype)]


@_rule("reshape", arity=(1, 1))
def _reshape(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    shape = _ints_attr(attrs, "shape")
    if min(shape, default=0) < 0 or math.prod(shape) != x.size:
        raise ShapeError(f"cannot reshape {_fmt(x.shape)} ({x.size} elements) to {_fmt(shape)}")
    return [TensorSig(shape, x.dtype)]


@_rule("softmax", arity=(1, 1))
def _softmax(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    _float(x)
    _axis(_int_attr(attrs, "axis"), x.rank)
    return [x]


REDUCTIONS = ("sum", "mean", "max", "min", "prod")
"""The kinds of `graph.reduce`."""

DIFFERENTIABLE_REDUCTIONS = ("sum", "mean", "max")
"""The kinds `graph.reduce_grad` differentiates; min and prod have no gradient."""


@_rule("reduce", arity=(1, 1))
def _reduce(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    _number(x)
    kind = _choice_attr(attrs, "kind", REDUCTIONS)
    given = _ints_attr(attrs, "axes")
    axes = sorted({_axis(a, x.rank) for a in given})
    if len(axes) != len(given) or not axes:
        raise ShapeError(f"axes {list(given)} must be distinct and non-empty")
    # Over no values a sum is 0, a product 1, a max -inf and a min +inf (ONNX's
    # identities; an integer type's least and largest value); a mean is 0/0,
    # which ONNX leaves undefined, so it is refused rather than given a meaning.
    if kind == "mean" and any(x.shape[a] == 0 for a in axes):
        raise ShapeError(f"the mean over axes {axes} of the empty {_fmt(x.shape)} is undefined")
    if _bool_attr(attrs, "keepdims"):
        shape = tuple(1 if i in axes else d for i, d in enumerate(x.shape))
    else:
        shape = tuple(d for i, d in enumerate(x.shape) if i not in axes)
    return [TensorSig(shape, x.dtype)]


def _per_channel(x: TensorSig, params: Mapping[str, TensorSig], attrs: Attrs) -> None:
    """The typing every batch normalization shares: a float input with a channel axis 1,
    per-channel `params` of its element type, and a valid epsilon."""
    _float(x)
    _same_dtype(x, *params.values())
    _epsilon_attr(attrs)
    if x.rank < 2:
        raise ShapeError(f"input must have a channel dimension, got rank {x.rank}")
    for name, sig in params.items():
        if sig.shape != (x.shape[1],):
            raise ShapeError(f"{name} must have shape {x.shape[1]}, got {_fmt(sig.shape)}")


@_rule("batchnorm", arity=(5, 5))
def _batchnorm(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, *stats = inputs
    _per_channel(x, dict(zip(("scale", "bias", "mean", "var"), stats, strict=True)), attrs)
    return [x]


@_rule("layernorm", arity=(3, 3))
def _layernorm(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, gamma, beta = inputs
    _float(x)
    _same_dtype(x, gamma, beta)
    _epsilon_attr(attrs)
    axis = _axis(_int_attr(attrs, "axis"), x.rank)
    for name, sig in (("gamma", gamma), ("beta", beta)):
        if sig.shape != x.shape[axis:]:
            raise ShapeError(
                f"{name} must have shape {_fmt(x.shape[axis:])}, got {_fmt(sig.shape)}"
            )
    return [x]


def _indices(sig: TensorSig, what: str) -> None:
    if sig.dtype not in (DType.I32, DType.I64):
        raise ShapeError(f"{what} must be i32 or i64, got {sig.dtype}")


@_rule("gather", arity=(2, 2))
def _gather(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    data, indices = inputs
    _indices(indices, "indices")
    axis = _axis(_int_attr(attrs, "axis"), data.rank)
    return [TensorSig((*data.shape[:axis], *indices.shape, *data.shape[axis + 1 :]), data.dtype)]


@_rule("embedding", arity=(2, 2))
def _embedding(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    ids, table = inputs
    _indices(ids, "indices")
    if table.rank != 2:
        raise ShapeError(f"table must be 2-D (vocabulary x features), got {_fmt(table.shape)}")
    return [TensorSig((*ids.shape, table.shape[1]), table.dtype)]


# ------------------------------------- backward ops, losses and optimizer updates
# A backward op's operands include its forward op's operands (or their shapes) and dy,
# the gradient of the forward result. Its rule runs the forward op's rule, so the two
# cannot drift apart, and checks that dy has the type the forward op yields.


def _expect_shape(sig: TensorSig, name: str, shape: Sequence[int]) -> None:
    if sig.shape != tuple(shape):
        raise ShapeError(f"{name} must have shape {_fmt(shape)}, got {_fmt(sig.shape)}")


def _check_forward(
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
            f"{grad_name} must have the forward {op}'s result shape {_fmt(out.shape)}, "
            f"got {_fmt(grad.shape)}"
        )
    _same_dtype(out, grad)


@_rule("relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad", arity=(2, 2))
def _activation_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    forward, dy = inputs
    _float(forward)
    _same_dtype(forward, dy)
    _expect_shape(dy, "dy", forward.shape)
    return [forward]


@_rule("conv2d_grad_input", arity=(2, 2))
def _conv2d_grad_input(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    dy, w = inputs
    shape = _ints_attr(attrs, "input_shape", 4)
    if min(shape) < 0:
        raise ShapeError(f"input_shape {list(shape)} has a negative dimension")
    dx = TensorSig(shape, dy.dtype)
    _check_forward(_conv2d, "conv2d", [dx, w], {**attrs, "activation": "none"}, dy)
    return [dx]


@_rule("conv2d_grad_weight", arity=(2, 2))
def _conv2d_grad_weight(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    if x.rank != 4 or dy.rank != 4:
        raise ShapeError(f"input and dy must be 4-D (NCHW), got {x.rank}-D and {dy.rank}-D")
    kh, kw = _pair(attrs, "kernel")
    # A non-positive `groups` gets the forward rule's message, not a division by zero.
    groups = max(_int_attr(attrs, "groups"), 1)
    dw = TensorSig((dy.shape[1], x.shape[1] // groups, kh, kw), x.dtype)
    _check_forward(_conv2d, "conv2d", [x, dw], {**attrs, "activation": "none"}, dy)
    return [dw]


@_rule("pool2d_grad", arity=(2, 2))
def _pool2d_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    _check_forward(_pool2d, "pool2d", [x], attrs, dy)
    return [x]


@_rule("reduce_grad", arity=(2, 2))
def _reduce_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, dy = inputs
    _float(x)
    _choice_attr(attrs, "kind", DIFFERENTIABLE_REDUCTIONS)
    _check_forward(_reduce, "reduce", [x], attrs, dy)
    return [x]


@_rule("scatter_add", arity=(2, 2))
def _scatter_add(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    ids, updates = inputs
    _indices(ids, "ids")
    _float(updates, "updates")
    if updates.rank != ids.rank + 1 or updates.shape[:-1] != ids.shape:
        raise ShapeError(
            f"updates must have the shape of ids ({_fmt(ids.shape)}) plus a feature axis, "
            f"got {_fmt(updates.shape)}"
        )
    rows = _int_attr(attrs, "rows")
    if rows < 0:
        raise ShapeError(f"rows must not be negative, got {rows}")
    return [TensorSig((rows, updates.shape[-1]), updates.dtype)]


@_rule("layernorm_grad", arity=(3, 3))
def _layernorm_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, gamma, dy = inputs
    # beta types like gamma and does not enter the gradients: gamma stands in for it.
    _check_forward(_layernorm, "layernorm", [x, gamma, gamma], attrs, dy)
    return [x, gamma, gamma]


@_rule("batchnorm_train", arity=(3, 3))
def _batchnorm_train(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, scale, bias = inputs
    _per_channel(x, {"scale": scale, "bias": bias}, attrs)
    return [x, scale, scale]


@_rule("batchnorm_grad", arity=(3, 3))
def _batchnorm_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, scale, dy = inputs
    _per_channel(x, {"scale": scale}, attrs)
    _same_dtype(x, dy)
    _expect_shape(dy, "dy", x.shape)
    return [x, scale, scale]


@_rule("softmax_cross_entropy", arity=(2, 2))
def _softmax_cross_entropy(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    logits, labels = inputs
    _float(logits, "logits")
    if logits.rank < 1:
        raise ShapeError("logits must have rank >= 1 (classes on the last axis), got a scalar")
    _indices(labels, "labels")
    _expect_shape(labels, "labels", logits.shape[:-1])
    return [TensorSig(logits.shape[:-1], logits.dtype)]


@_rule("softmax_cross_entropy_grad", arity=(3, 3))
def _softmax_cross_entropy_grad(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    logits, labels, dloss = inputs
    _check_forward(
        _softmax_cross_entropy, "softmax_cross_entropy", [logits, labels], attrs, dloss, "dloss"
    )
    return [logits]


@_rule("adam_update", arity=(5, 5))
def _adam_update(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    param, grad, m, v, step = inputs
    _float(param, "param")
    _same_dtype(param, grad, m, v)
    for name, sig in (("grad", grad), ("m", m), ("v", v)):
        _expect_shape(sig, name, param.shape)
    # The step counter is float32 whatever the weights' type: a float16 count stops at
    # 2048 and a bfloat16 one at 256, after which the bias correction would be wrong.
    if step.rank != 0 or step.dtype != DType.F32:
        raise ShapeError(f"step must be a rank-0 f32 tensor, got {step}")
    _number_attr(attrs, "lr", lambda lr: 0 < lr < math.inf, "a finite number > 0")
    for beta in ("beta1", "beta2"):
        _number_attr(attrs, beta, lambda b: 0 <= b < 1, "a number in [0, 1)")
    _epsilon_attr(attrs)
    return [param, param, param]
