"""Pass options on the command line: every bad option fails before any pass runs, in
one `tasoc: error:` line naming the pass and the option (`tasoc.driver.pass_options`)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import ClassVar, Literal

import pytest
from conftest import assert_one_line_error
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass

from tasoc.driver.pass_options import fits
from tasoc.passes.options import describe_option_type
from tasoc.passes.registry import TASOC_PASSES

SMALL_MODEL = "zoo:nasrnn?hidden=8&length=1"


@dataclass(frozen=True)
class RecordRunPass(ModulePass):
    """Test-only: remembers that it ran."""

    name: ClassVar[str] = "test-record-run"
    runs: ClassVar[list[str]] = []

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        RecordRunPass.runs.append(self.name)


@pytest.fixture
def record_run(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    monkeypatch.setitem(TASOC_PASSES, RecordRunPass.name, lambda: RecordRunPass)
    RecordRunPass.runs.clear()
    return RecordRunPass.runs


EQUALITY_REWRITE_FAILURES = [
    ("wrong type", "timeout=abc", ["option 'timeout' expects", "'abc'"]),
    ("bool for a number", "timeout=true", ["option 'timeout' expects", "'true'"]),
    ("float for an int", "budget=1.5", ["option 'budget' expects", "'1.5'"]),
    ("two values for one", "budget=1,2", ["option 'budget' expects", "'1,2'"]),
    ("unknown choice", "search=dfs", ["search", "dfs"]),
    ("unknown option", "foo=1", ["has no option 'foo'", "budget"]),
    ("out of range", "budget=0", ["budget"]),
]


@pytest.mark.parametrize(
    ("options", "fragments"),
    [case[1:] for case in EQUALITY_REWRITE_FAILURES],
    ids=[case[0] for case in EQUALITY_REWRITE_FAILURES],
)
def test_bad_equality_rewrite_options_fail_before_any_pass_runs(
    tasoc, record_run: list[str], tmp_path: Path, options: str, fragments: list[str]
) -> None:
    out = tmp_path / "out.mlir"
    pipeline = f"{RecordRunPass.name},equality-rewrite{{{options}}}"
    result = tasoc("opt", SMALL_MODEL, "-p", pipeline, "-o", out)
    assert_one_line_error(result, "pass 'equality-rewrite'", *fragments)
    assert record_run == [] and not out.exists()


def test_option_names_take_dashes_or_underscores(tasoc, record_run: list[str]) -> None:
    for key in ("split-size", "split_size"):
        result = tasoc("opt", SMALL_MODEL, "-p", f"equality-rewrite{{{key}=0}}")
        assert_one_line_error(result, "pass 'equality-rewrite'", "split-size")


def test_a_pass_without_options_names_none(tasoc) -> None:
    result = tasoc("opt", SMALL_MODEL, "-p", "cse{depth=3}")
    assert_one_line_error(result, "pass 'cse' has no option 'depth' (it takes no options)")


@pytest.mark.parametrize(
    ("values", "hint", "expected"),
    [
        ((3,), int, True),
        ((True,), int, False),
        ((True,), bool, True),
        ((True,), bool | None, True),
        ((2.5,), int | float, True),
        (("abc",), int | float, False),
        ((), int | None, True),
        ((), int, False),
        ((1, 2), tuple[int, ...], True),
        ((1,), tuple[int, ...], True),
        (("egraph",), Literal["egraph", "backtrack"], True),
        (("dfs",), Literal["egraph", "backtrack"], False),
    ],
)
def test_fits_follows_xdsl_except_for_bools(values: tuple, hint: object, expected: bool) -> None:
    assert fits(values, hint) is expected


def test_option_types_are_described_in_words() -> None:
    assert describe_option_type(Literal["egraph", "backtrack"]) == "one of 'egraph', 'backtrack'"
    assert describe_option_type(int | float | None) == "a number"
    assert describe_option_type(int | None) == "a whole number"
