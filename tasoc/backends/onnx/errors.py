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


SHOWN_NAME_LENGTH = 60
"""Characters of an ONNX name a message shows; a longer one is cut in the middle."""


def shown(name: str, quote: bool = True) -> str:
    """An ONNX name as messages quote it, `'w'` (or `w` without `quote`): names are
    whatever the file holds, so control characters are escaped and a long name is cut
    to its two ends, keeping the error one readable line."""
    text = "".join(c if c.isprintable() else ascii(c)[1:-1] for c in name)
    if len(text) > SHOWN_NAME_LENGTH:
        half = SHOWN_NAME_LENGTH // 2
        text = f"{text[:half]}...{text[-half:]}"
    return f"'{text}'" if quote else text


def first_line(error: BaseException) -> str:
    """The first line of what `error` says (onnx's checker and numpy write paragraphs),
    or its type's name when it says nothing: the part a one-line message can quote."""
    text = str(error).strip()
    return text.splitlines()[0] if text else type(error).__name__
