"""The errors of the ONNX bridge, one line each, and how their messages write shapes."""

from __future__ import annotations

from collections.abc import Sequence


class OnnxImportError(ValueError):
    """The model cannot be imported; the message is one line naming what and where."""


class OnnxExportError(ValueError):
    """The program or its weight values cannot be exported; one line says why."""


def format_dims(dims: Sequence[int | str | None]) -> str:
    """A shape as messages write it, `[batch, 3]`; None (unknown) as `?`."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
