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

from tasoc.driver.pass_options import build_pipeline, fits, quote_split_numbers
from tasoc.passes.options import describe_option_type
from tasoc.passes.registry import TASOC_PASSES, get_all_passes

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


LITERALS = ["1e-3", "1E-3", "3E2", "1e3", "1.0e-3", "1.5", ".5", "+1e-3", "1_000", '"2.5"']


@pytest.mark.parametrize("literal", LITERALS)
def test_a_number_option_takes_every_float_literal(literal: str) -> None:
    (built,) = build_pipeline(f"autodiff{{lr={literal}}}", get_all_passes())
    assert built.lr == float(literal.strip('"'))  # type: ignore[attr-defined]


@pytest.mark.parametrize(("literal", "value"), [("1e3", 1000), ("1000.0", 1000), ("2E1", 20)])
def test_a_whole_number_option_takes_a_whole_float_literal(literal: str, value: int) -> None:
    (built,) = build_pipeline(f"equality-rewrite{{budget={literal}}}", get_all_passes())
    assert built.budget == value and type(built.budget) is int  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("options", "fragments"),
    [
        ("budget=1e-3", ["option 'budget' expects a whole number, got '1e-3'"]),
        ("budget=.5", ["option 'budget' expects a whole number, got '.5'"]),
        ("timeout=inf", ["timeout must be a finite number, got inf"]),
        ("timeout=nan", ["timeout must be a finite number, got nan"]),
        ("timeout=1e400", ["timeout must be at most 1.8e+308 in magnitude", "got 1e400"]),
        ("budget=-1e400", ["budget must be at most 1.8e+308 in magnitude", "got -1e400"]),
        ("budget=" + "9" * 400, ["budget must be at most 1.8e+308", "got 9.9e+399"]),
        ("memory-limit=1e400", ["memory-limit: a byte size must be at most 1.8e+308"]),
        ("memory-limit=1.5XB", ["unknown unit 'XB' in byte size '1.5XB'"]),
        ("memory-limit=-1.5GB", ["memory-limit: a byte size must not be negative, got -1.5GB"]),
    ],
)
def test_numbers_out_of_range_or_of_the_wrong_kind_are_one_line(
    tasoc, tmp_path: Path, options: str, fragments: list[str]
) -> None:
    out = tmp_path / "out.mlir"
    result = tasoc("opt", SMALL_MODEL, "-p", f"equality-rewrite{{{options}}}", "-o", out)
    assert_one_line_error(result, "pass 'equality-rewrite'", *fragments)
    assert not out.exists()


def test_the_autodiff_example_of_the_docs_runs(tasoc) -> None:
    result = tasoc("opt", SMALL_MODEL, "-p", "autodiff{loss=mse optimizer=adam lr=1e-3}")
    assert result.code == 0, result.err
    assert result.err.startswith("autodiff: loss mse, optimizer adam (lr 0.001)")


@pytest.mark.parametrize(
    ("text", "quoted"),
    [
        ("placement{capacity=1.5GB}", 'placement{capacity="1.5GB"}'),
        ("autodiff{lr=.5 momentum=-1e-3}", 'autodiff{lr=".5" momentum="-1e-3"}'),
        ("p{devices=1,2.5GB}", 'p{devices=1,"2.5GB"}'),
        # what xDSL reads as one token, strings and MLIR pipelines stay as they are
        ('p{a=16GiB b=1e-3 c=2x4 d="1.5GB" e=[1.5GB]}', None),
        ("cse,dce", None),
    ],
)
def test_values_xdsl_would_split_are_quoted(text: str, quoted: str | None) -> None:
    assert quote_split_numbers(text)[0] == (text if quoted is None else quoted)


def test_a_syntax_error_after_a_quoted_number_names_the_column_as_written(tasoc) -> None:
    result = tasoc("opt", SMALL_MODEL, "-p", "autodiff{lr=.5 x=}")
    # `}` is the 18th character of the pipeline as written (20th once `.5` is quoted).
    assert_one_line_error(result, "invalid pipeline 'autodiff{lr=.5 x=}': at column 18:")
