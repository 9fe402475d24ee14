"""The error every import failure raises, and how its messages write shapes."""

from __future__ import annotations

from collections.abc import Sequence


class OnnxImportError(ValueError):
    """The model cannot be imported; the message is one line naming what and where."""


def format_dims(dims: Sequence[int | str | None]) -> str:
    """A shape as messages write it, `[batch, 3]`; None (unknown) as `?`."""
    return "[" + ", ".join("?" if d is None else str(d) for d in dims) + "]"
