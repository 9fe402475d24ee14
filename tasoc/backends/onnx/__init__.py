"""The ONNX bridge: import ONNX models into the `graph` dialect and export back.

- `import_onnx(model, input_shapes)` -> (module, weight values by argument name)
- `export_onnx(module, param_values)` -> `onnx.ModelProto` (opset 17; 22 when the
  program has bfloat16 values); `save_onnx` writes it atomically.

What maps to what, the tolerances and the errors are in `docs/onnx.md`. The modules:
`importer` walks an ONNX graph (`handlers`: one handler per op type, gathered from
`elementwise`, `activations`, `indexing`, `reductions`, `normalization`, `windows`
(Conv, ConvTranspose, pools), `padding`, `recurrent` (RNN/GRU/LSTM unrolled), `einsum`
and `resize` through `registry`; `folding` and `fold_dispatch`: everything computable
from constants and static shapes evaluated at import time; `operands`: configuring
inputs read as the spec states them; `known_values`: values fixed at import time;
`gelu`: the erf-form GELU), `tensors` reads
tensors without trusting their dims and sizes arrays against the limits, `files` reads,
writes and checks model files (external data, the 2 GiB limit), `exporter` writes
programs back, `conventions` is what the two directions agree on, `runtime` runs models
under onnxruntime.
"""

from tasoc.backends.onnx.errors import OnnxExportError, OnnxImportError
from tasoc.backends.onnx.exporter import BFLOAT16_OPSET, EXPORT_OPSET, export_onnx
from tasoc.backends.onnx.files import save_onnx
from tasoc.backends.onnx.importer import MAX_OPSET, MIN_OPSET, import_onnx
from tasoc.backends.onnx.windows import canonical_padding

__all__ = [
    "BFLOAT16_OPSET",
    "EXPORT_OPSET",
    "MAX_OPSET",
    "MIN_OPSET",
    "OnnxExportError",
    "OnnxImportError",
    "canonical_padding",
    "export_onnx",
    "import_onnx",
    "save_onnx",
]
