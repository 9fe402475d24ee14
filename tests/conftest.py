"""Fixtures shared by the driver tests: run `tasoc` in-process and read its output."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest

from tasoc.driver.main import main


@dataclass
class Result:
    """Exit status and captured output of one in-process `tasoc` run."""

    code: int
    out: str
    err: str

    def __repr__(self) -> str:
        return f"Result({self.code}, out={self.out[-300:]!r}, err={self.err!r})"


@pytest.fixture
def tasoc(capsys: pytest.CaptureFixture[str]) -> Callable[..., Result]:
    """Run `tasoc ARGS...` in this process; return its exit status and output."""

    def run(*args: str | Path) -> Result:
        code = main([str(arg) for arg in args])
        captured = capsys.readouterr()
        return Result(code, captured.out, captured.err)

    return run


def assert_one_line_error(result: Result, *fragments: str) -> str:
    """Exit status 1, exactly one stderr line `tasoc: error: ...` holding `fragments`."""
    assert result.code == 1, result
    assert "Traceback" not in result.err + result.out
    lines = result.err.splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("tasoc: error: "), lines
    for fragment in fragments:
        assert fragment in lines[0], (fragment, lines[0])
    return lines[0]
