"""onnxruntime sessions for exported models of any size.

onnxruntime takes a model as serialized bytes or as a path. Bytes are limited to
protobuf's 2 GiB, so a larger model is saved with external data into a temporary
directory and opened from there. onnxruntime is imported only when a session is made.
"""

from __future__ import annotations

import tempfile
from collections.abc import Sequence
from os import PathLike
from pathlib import Path
from typing import TYPE_CHECKING

import onnx

from tasoc.backends.onnx.files import fits_in_protobuf, save_onnx

if TYPE_CHECKING:
    import onnxruntime

CPU = ("CPUExecutionProvider",)

ERRORS_ONLY = 3
"""onnxruntime's log severity for errors (0 verbose, 1 info, 2 warning, 3 error, 4 fatal)."""


def inference_session(
    model: onnx.ModelProto | str | PathLike[str],
    providers: Sequence[str] = CPU,
    options: onnxruntime.SessionOptions | None = None,
) -> onnxruntime.InferenceSession:
    """An onnxruntime session for `model` (in memory, or a file with or without external
    data), with `providers` in order of preference and session `options`.

    Without `options`, the session logs errors only: onnxruntime writes its warnings
    (such as an unused initializer) straight to the process's stderr, beside tasoc's own
    output, and its errors come back as exceptions anyway."""
    import onnxruntime

    if options is None:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = ERRORS_ONLY

    def session(source: str | bytes) -> onnxruntime.InferenceSession:
        return onnxruntime.InferenceSession(source, options, providers=list(providers))

    if not isinstance(model, onnx.ModelProto):
        return session(str(model))
    if fits_in_protobuf(model):
        return session(model.SerializeToString())
    with tempfile.TemporaryDirectory(prefix="tasoc-onnx-") as directory:
        path = Path(directory) / "model.onnx"
        save_onnx(model, path, external_data=True)
        # The session holds the weights once built, so the files may go.
        return session(str(path))
