"""Values fixed at import time (`Known`) and the TASO constant ops they can be.

An initializer, a `Constant`-like node or a computation on such values and on static
shapes is known while importing; every other ONNX value is an SSA value of the IR.
Where a known value is used as data, the importer materializes it by its `Origin` and
`form`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from enum import Enum

import numpy as np
from xdsl.ir import SSAValue

from tasoc.backends.onnx.conventions import DTYPES_BY_NUMPY


class Origin(Enum):
    """Where an import-time value comes from, which decides how it is materialized."""

    INITIALIZER = "initializer"
    """A weight: becomes a `{graph.param}` argument named after the initializer."""
    LITERAL = "literal"
    """A `Constant`-like node: becomes a constant op where the node stands."""
    DERIVED = "derived"
    """Computed by the importer (folded, a reciprocal): made where first used."""


@dataclass(frozen=True, eq=False)
class Known:
    """A value fixed at import time."""

    name: str
    """The ONNX value name (or a name derived from one), unique per value."""
    array: np.ndarray
    origin: Origin
    form: str | None = None
    """The TASO constant op (`ones`, `zeros`, `c_pool`, `i_conv`, `i_matmul`) that
    makes this value, when it is one."""


Value = SSAValue | Known


def is_float(array: np.ndarray) -> bool:
    """Whether `array` holds floats (bfloat16 included, which NumPy does not know)."""
    kind = DTYPES_BY_NUMPY.get(array.dtype)
    return kind.is_float if kind else np.issubdtype(array.dtype, np.floating)


def is_integral(array: np.ndarray) -> bool:
    return array.dtype == np.bool_ or np.issubdtype(array.dtype, np.integer)


def is_program_data(known: Known) -> bool:
    """Whether `known` is float data the program itself holds, a weight or a float
    literal, rather than a value computed from shapes and integers. Ops on it stay ops
    (`fold_dispatch`): weights stay parameters, and a program tasoc exported (whose
    constant ops are Constant nodes) comes back as it was."""
    return known.origin is not Origin.DERIVED and is_float(known.array)


def broadcast_base(array: np.ndarray) -> np.ndarray | None:
    """The smallest array `array` is a NumPy broadcast of (its repeated axes cut to
    size 1), when that is smaller: a folded `Expand` or a `ConstantOfShape` fill is a
    view of its one value or row, which `graph.broadcast` makes from the base."""
    index = tuple(
        slice(0, 1) if stride == 0 and dim > 1 else slice(None)
        for stride, dim in zip(array.strides, array.shape, strict=True)
    )
    base = array[index]
    return base if base.size < array.size else None


def fill_forms(array: np.ndarray) -> list[str]:
    """The constant ops a `ConstantOfShape` fill could be, preferred first: TASO's
    C_pool (so that a 1x1 C_pool, all ones, stays one), ones, zeros."""
    if not array.size:
        return []
    value, shape = array.flat[0], array.shape
    forms = []
    pooling = len(shape) == 4 and shape[1] == 1 and is_float(array)
    # Compared in the array's own type: 1/3 rounds differently in bf16 and f32.
    if pooling and value == np.asarray(1 / (shape[2] * shape[3])).astype(array.dtype):
        forms.append("c_pool")
    forms += ["ones"] if value == 1 else ["zeros"] if value == 0 else []
    return forms


def literal_forms(array: np.ndarray) -> list[str]:
    """`["i_conv"]` when `array` is TASO's identity convolution kernel, else none."""
    if array.ndim != 4 or not is_float(array):
        return []
    out_channels, in_channels, kh, kw = array.shape
    if out_channels != in_channels or kh % 2 == 0 or kw % 2 == 0:
        return []
    expected = np.zeros(array.shape, array.dtype)
    expected[:, :, kh // 2, kw // 2] = np.eye(out_channels, dtype=array.dtype)
    return ["i_conv"] if np.array_equal(array, expected) else []


def pick_form(forms: Sequence[str], recorded: str | None) -> str | None:
    """The recorded form when it is one of `forms`, `None` when the record says it
    was a plain `constant`, else the preferred form (or None when there is none)."""
    if recorded == "constant":
        return None
    return recorded if recorded in forms else next(iter(forms), None)
