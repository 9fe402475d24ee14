"""ONNX's own node test cases, every one of them (`onnx_node_cases.py` runs them):
none may give a wrong number or an internal error, every rejection is one line, the
cases that passed still pass, and docs/onnx.md's per-operator table is current."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

import pytest
from onnx_node_cases import (
    DOCS,
    Outcome,
    Result,
    all_cases,
    documented_table,
    operator_of,
    recorded_passing,
    results,
    run_case,
    table,
)

from tasoc.backends.onnx.handlers import HANDLERS

REWRITE = "rewrite them with `.venv/bin/python tests/onnx_node_cases.py --write`"


@pytest.fixture(scope="module")
def outcomes() -> Mapping[str, Result]:
    return results()


def test_no_case_gives_a_wrong_number_or_an_internal_error(
    outcomes: Mapping[str, Result],
) -> None:
    failed = {n: r.detail for n, r in outcomes.items() if r.outcome is Outcome.FAILED}
    assert not failed, "\n".join(f"{name}: {detail}" for name, detail in failed.items())


def test_rejections_are_one_line_import_errors(outcomes: Mapping[str, Result]) -> None:
    for name, result in outcomes.items():
        if result.outcome is Outcome.REJECTED:
            assert result.detail and "\n" not in result.detail, (name, result.detail)


def test_the_cases_that_passed_still_pass(outcomes: Mapping[str, Result]) -> None:
    lost = {
        name: outcomes[name].detail if name in outcomes else "gone"
        for name in recorded_passing()
        if name not in outcomes or outcomes[name].outcome is not Outcome.PASSED
    }
    assert not lost, lost


def test_the_record_and_the_docs_table_are_current(outcomes: Mapping[str, Result]) -> None:
    passed = {name for name, result in outcomes.items() if result.outcome is Outcome.PASSED}
    assert passed == recorded_passing(), f"newly passing: {passed - recorded_passing()}; {REWRITE}"
    assert documented_table(DOCS.read_text()) == table(outcomes), f"docs/onnx.md's table: {REWRITE}"


def test_a_wrong_number_is_a_failure_naming_the_backend() -> None:
    """The check itself: ONNX's Relu case with one expected value changed fails."""
    case = next(case for case in all_cases() if case.name == "test_relu")
    inputs, (expected,) = case.data_sets[0]
    wrong = expected.copy()
    wrong.flat[0] += 1
    result = run_case(dataclasses.replace(case, data_sets=[(inputs, [wrong])]))
    assert result.outcome is Outcome.FAILED
    assert result.detail.startswith("reference: output #0: ")


def test_every_handled_op_has_a_passing_case(outcomes: Mapping[str, Result]) -> None:
    """A handler that ONNX tests but whose cases are all rejected is named here."""
    passing_ops = {operator_of()[n] for n, r in outcomes.items() if r.outcome is Outcome.PASSED}
    tested = set(operator_of().values())
    assert set(HANDLERS) & tested - passing_ops == set()
