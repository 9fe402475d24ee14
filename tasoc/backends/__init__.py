"""Backends: run a `graph` program.

- `tasoc.backends.numpy`: the reference interpreter, the semantic ground truth.
- `tasoc.backends.jax`: lowering to a jitted JAX function (XLA on CPU or GPU).
- `tasoc.backends.arguments`: argument values (random, from `.npz`) and their checks.

This module holds the vocabulary they share: which NumPy dtype holds each IR
element type (bfloat16 is `ml_dtypes.bfloat16`, the type JAX itself uses), and the
array namespace an op's own kernel (`OpDef.kernel`) is run on.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import ModuleType
from typing import Any

import ml_dtypes
import numpy as np

from tasoc.ir.shapes import DType

NUMPY_DTYPES: Mapping[DType, np.dtype] = {
    DType.F32: np.dtype(np.float32),
    DType.F16: np.dtype(np.float16),
    DType.BF16: np.dtype(ml_dtypes.bfloat16),
    DType.F64: np.dtype(np.float64),
    DType.I32: np.dtype(np.int32),
    DType.I64: np.dtype(np.int64),
    DType.I8: np.dtype(np.int8),
    DType.I16: np.dtype(np.int16),
    DType.U8: np.dtype(np.uint8),
    DType.BOOL: np.dtype(np.bool_),
}
"""The NumPy dtype that holds each IR element type."""

_DTYPE_NAMES = {dtype: kind.value for kind, dtype in NUMPY_DTYPES.items()}


def numpy_dtype(dtype: DType | str) -> np.dtype:
    return NUMPY_DTYPES[DType(dtype)]


def describe(array: np.ndarray) -> str:
    """`2x3xf32`-style text for an array's type, as `TensorSig` prints types."""
    element = _DTYPE_NAMES.get(array.dtype, str(array.dtype))
    return "x".join([*map(str, array.shape), element])


class ArrayModule:
    """An array namespace for the ops' own kernels (`tasoc.ir.opdef.ArrayNamespace`):
    `module`'s functions (`numpy`, `jax.numpy`), plus `erf` and `erfc`, which NumPy
    lacks, `dtype_of`, the backend's dtype for an IR element type, and the segment
    reductions of the GNN ops, `segment_sum(data, ids, segments)` and `segment_max`
    (rows of `data` added / maxed into `segments` rows by `ids`; ids outside
    `0 .. segments-1` dropped; an empty segment is 0 for a sum, -inf for a max)."""

    def __init__(
        self,
        module: ModuleType,
        *,
        erf: Callable[[Any], Any],
        erfc: Callable[[Any], Any],
        dtype_of: Callable[[DType | str], Any],
        segment_sum: Callable[[Any, Any, int], Any],
        segment_max: Callable[[Any, Any, int], Any],
    ) -> None:
        self._module = module
        self.erf = erf
        self.erfc = erfc
        self.dtype_of = dtype_of
        self.segment_sum = segment_sum
        self.segment_max = segment_max

    def __getattr__(self, name: str) -> Any:
        return getattr(self._module, name)
