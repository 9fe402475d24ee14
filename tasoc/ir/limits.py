"""Resource limits: the largest sizes a program may ask tasoc for.

A tensor type costs a few bytes of text and can ask for exabytes; a few hundred
brackets can nest deeper than Python's recursion allows. tasoc allocates what types
say (random arguments, weights, the reference interpreter's results, folded ONNX
constants), so every size a program can ask for is checked here first, before
anything is allocated, and going over a limit is a one-line error that names the
limit and how to raise it. `docs/driver.md` ("Resource limits") lists them for users.

The limits that depend on the machine (bytes) are read from the environment on each
check, so a user can raise them for one run without a flag on every command; the
others are fixed by what the libraries underneath accept.
"""

from __future__ import annotations

import errno
import math
import os
import stat
from collections.abc import Sequence
from os import PathLike
from typing import BinaryIO

MAX_DIM = 2**31 - 1
"""Largest size of one dimension: the largest signed 32-bit index. JAX (without x64)
and ONNX runtimes index with 32-bit integers in many kernels, and no real model's
dimension comes near it; 2^63 or 2^64 would overflow numpy and XLA outright."""

MAX_RANK = 64
"""Largest rank of a tensor: numpy's (the reference interpreter's) maximum."""

MAX_NESTING = 64
"""Deepest bracket nesting (`{`, `(`, `[`, `<`) of text IR. xDSL's parser, verifier
and printer recurse about ten Python frames per level, so 64 levels stay well inside
Python's recursion limit wherever tasoc is called from; real programs nest under ten.
Fixed: raising it would need a larger Python recursion limit, not a setting."""

TENSOR_BYTES_ENV = "TASOC_MAX_TENSOR_BYTES"
DEFAULT_MAX_TENSOR_BYTES = 16 * 2**30
"""Largest tensor, in bytes, a type may describe (16 GiB: a large embedding table is
a few GiB). Raise it with `TASOC_MAX_TENSOR_BYTES=<bytes>`."""

ARGUMENT_BYTES_ENV = "TASOC_MAX_ARGUMENT_BYTES"
DEFAULT_MAX_ARGUMENT_BYTES = 64 * 2**30
"""Largest total, in bytes, of a program's arguments (inputs and weights): what `tasoc
run` allocates before the first op runs, and what a zoo model may ask for. Raise it
with `TASOC_MAX_ARGUMENT_BYTES=<bytes>`."""


class LimitError(ValueError):
    """A size is over one of the limits; the message names the limit and how to raise it."""


def max_tensor_bytes() -> int:
    return bytes_from_env(TENSOR_BYTES_ENV, DEFAULT_MAX_TENSOR_BYTES)


def max_argument_bytes() -> int:
    return bytes_from_env(ARGUMENT_BYTES_ENV, DEFAULT_MAX_ARGUMENT_BYTES)


def check_environment() -> None:
    """LimitError for a limit variable set to something that is not a byte count, so a
    command can refuse it up front rather than in the middle of verifying an op."""
    max_tensor_bytes()
    max_argument_bytes()


def bytes_from_env(name: str, default: int) -> int:
    """The limit the environment variable `name` sets (every byte limit of tasoc reads
    its override here), or `default`; LimitError for a value that is not a whole,
    positive number of bytes (a typo must not silently lift or keep a limit)."""
    text = os.environ.get(name)
    if text is None:
        return default
    try:
        value = int(text)
    except ValueError:
        value = 0
    if value < 1:
        raise LimitError(f"{name} must be a positive whole number of bytes, got '{text}'")
    return value


_UNITS = (
    ("EiB", 2**60),
    ("PiB", 2**50),
    ("TiB", 2**40),
    ("GiB", 2**30),
    ("MiB", 2**20),
    ("KiB", 2**10),
)


def format_bytes(count: int) -> str:
    """`count` bytes in the largest binary unit it reaches, to a tenth (`1.5 GiB`).

    Integer arithmetic: a size over a limit may be far beyond what a float holds.
    """
    for unit, scale in _UNITS:
        if count >= scale:
            whole, rest = divmod(count, scale)
            tenth = rest * 10 // scale
            return f"{shown(whole)}{f'.{tenth}' if tenth and whole < 1000 else ''} {unit}"
    return f"{count} bytes"


def bytes_and_size(count: int) -> str:
    """`1018152 bytes (994.3 KiB)`: the exact count, which a person compares with what
    they gave (`capacity=1018152`), and its size as `format_bytes` writes it; only the
    count below 1 KiB. What one-line messages say of a size they name in bytes."""
    size = format_bytes(count)
    return size if count < 2**10 else f"{shown(count)} bytes ({size})"


def shown(number: int) -> str:
    """`number` short enough for a one-line message: as is up to 20 digits (2^64), then
    like `6.4e+301` (a size computed from a float option can have hundreds)."""
    digits = str(abs(number))
    if len(digits) <= 20:
        return str(number)
    sign = "-" if number < 0 else ""
    return f"{sign}{digits[0]}.{digits[1]}e+{len(digits) - 1}"


def check_shape(shape: Sequence[int], itemsize: int) -> None:
    """LimitError unless a tensor of `shape` with `itemsize`-byte elements is within
    MAX_RANK, MAX_DIM and `max_tensor_bytes()`.

    Python integers do not overflow, so the product is exact however large the dims.
    """
    if len(shape) > MAX_RANK:
        raise LimitError(f"rank {len(shape)} is over the largest supported, {MAX_RANK}")
    for dim in shape:
        if dim > MAX_DIM:
            raise LimitError(
                f"dimension {shown(dim)} is over the largest supported, {MAX_DIM} (2^31-1)"
            )
    nbytes = math.prod(shape) * itemsize
    limit = max_tensor_bytes()
    if nbytes > limit:
        raise LimitError(
            f"a tensor of {format_bytes(nbytes)} is over the limit of {format_bytes(limit)} "
            f"(set {TENSOR_BYTES_ENV} to raise it)"
        )


def check_argument_bytes(nbytes: int, what: str) -> None:
    """LimitError when `what` (a program's arguments, named for the message) needs more
    than `max_argument_bytes()`."""
    limit = max_argument_bytes()
    if nbytes > limit:
        raise LimitError(
            f"{what} need {format_bytes(nbytes)}, over the limit of {format_bytes(limit)} "
            f"(set {ARGUMENT_BYTES_ENV} to raise it)"
        )


def irregular_file(mode: int) -> str | None:
    """Why a file of `mode` (its `st_mode`) is not one tasoc reads whole, or None for a
    regular file: a directory, or a device, FIFO or socket, which may never end
    (`/dev/zero` would fill memory) or never start (a FIFO with no writer). Every file
    tasoc reads whole (weights, rule files, ONNX models) is checked with it."""
    if stat.S_ISREG(mode):
        return None
    return os.strerror(errno.EISDIR) if stat.S_ISDIR(mode) else "not a regular file"


def open_regular(path: str | PathLike[str]) -> BinaryIO:
    """`path` opened for reading in binary, checked on the open file (a path swapped
    after a check cannot slip through) to be a regular file; OSError otherwise, its
    `strerror` the reason (`irregular_file`). Opened without blocking, so that a FIFO
    is refused rather than waited on."""
    descriptor = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
    problem = irregular_file(os.fstat(descriptor).st_mode)
    if problem is not None:
        os.close(descriptor)
        raise OSError(errno.EINVAL, problem, str(path))
    return os.fdopen(descriptor, "rb")
