"""Running `tasoc` in-process the way its error contract is checked from outside.

Warnings become errors (a NumPy or onnx warning printed beside the one error line breaks
the contract, and as an exception it shows up as an internal error instead of passing
unseen); output is read at the file-descriptor level, where C++ libraries such as
onnx's write; and the time taken is kept, for inputs that must be refused before any
large allocation.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from conftest import Result

from tasoc.driver.main import main


@dataclass
class TimedResult(Result):
    seconds: float = 0.0


StrictRun = Callable[..., TimedResult]


def strict_runner(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    """A function running `tasoc ARGS...` with warnings as errors; its exit status, the
    output of both file descriptors and the seconds it took."""

    def run(*args: str | Path) -> TimedResult:
        capfd.readouterr()
        start = time.monotonic()
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            code = main([str(arg) for arg in args])
        seconds = time.monotonic() - start
        captured = capfd.readouterr()
        return TimedResult(code, captured.out, captured.err, seconds)

    return run
