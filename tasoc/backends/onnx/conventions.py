"""What the importer and the exporter agree on: the element types the `graph` dialect
shares with ONNX, the metadata keys the exporter records so that a round trip gives a
program back as it was, and the GELU divisor the exporter writes and the importer finds."""

from __future__ import annotations

import math
from collections.abc import Mapping

import numpy as np
from onnx import TensorProto

from tasoc.backends import NUMPY_DTYPES
from tasoc.ir.shapes import DType

DTYPES_BY_ONNX: Mapping[int, DType] = {
    TensorProto.FLOAT: DType.F32,
    TensorProto.FLOAT16: DType.F16,
    TensorProto.BFLOAT16: DType.BF16,
    TensorProto.DOUBLE: DType.F64,
    TensorProto.INT32: DType.I32,
    TensorProto.INT64: DType.I64,
    TensorProto.INT8: DType.I8,
    TensorProto.INT16: DType.I16,
    TensorProto.UINT8: DType.U8,
    TensorProto.BOOL: DType.BOOL,
}
"""ONNX element types the `graph` dialect has, shared with the exporter."""

ARGUMENT_ORDER_KEY = "tasoc.argument_order"
"""Model metadata written by the exporter: the JSON list of `@main`'s argument names
in order. ONNX keeps graph inputs and initializers (weights) in separate lists; this
lets the importer interleave them again as they were."""

NODE_FORMS_KEY = "tasoc.node_forms"
"""Model metadata written by the exporter: a JSON object mapping node names to the
IR form a node was written from, where ONNX has one spelling for several equal IR
forms: a Conv/pool's padding (`same`, `valid`, `explicit`), a Relu `fused` into the
Conv before it, a Mul that was a `mul` (a Mul by a scalar is otherwise a `scale`), a
constant that was `ones`, `zeros`, `c_pool`, `i_conv` or a `constant`, a Conv that was
an average pool (`avg_pool same`; see the exporter). The importer follows a form only where
it means the same as the node (a stale entry is ignored), so the metadata chooses
among equal programs and never changes what one computes."""

GELU_SQRT2 = math.sqrt(2.0)
"""The divisor of the erf-form GELU, x * 0.5 * (1 + erf(x / sqrt 2)), as exported."""

DTYPES_BY_NUMPY: Mapping[np.dtype, DType] = {dtype: kind for kind, dtype in NUMPY_DTYPES.items()}
