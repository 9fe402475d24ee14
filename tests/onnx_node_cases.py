"""ONNX's own node test cases run through tasoc, and the per-operator table of docs/onnx.md.

The `onnx` package generates one test case per operator behaviour
(`onnx.backend.test.case.node`, 1,884 with onnx 1.23): a one-node model, or the node's
function expansion (`*_expanded`), with inputs and the expected outputs. Every case is
imported; an imported case runs on the reference interpreter and on JAX and is compared
with ONNX's expected outputs at the tolerances ONNX states for the case (rtol 1e-3,
atol 1e-7), dtype and shape exactly, NaN where ONNX has NaN. Each case ends one of
three ways:

- *passed*: both backends give ONNX's numbers;
- *rejected*: import raised `OnnxImportError` with one line (an operator, op form,
  element type or opset the dialect cannot express) — allowed, counted, documented;
- *failed*: a wrong number, or any other exception (an internal error) — never allowed.

The cases feed axes, shapes, split sizes and pads as int64 graph inputs, where models
hold constants; the importer needs them at import time, so every int64 input becomes
an initializer holding the case's value.

Run as a script, this module rewrites the record of passing cases
(`onnx_node_cases.passing`) and the per-operator table in docs/onnx.md:

    .venv/bin/python tests/onnx_node_cases.py --write
"""

from __future__ import annotations

import argparse
import re
import warnings
from collections import Counter, defaultdict
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from functools import cache
from pathlib import Path

import ml_dtypes
import numpy as np
import onnx
from onnx import numpy_helper
from onnx.backend.test.case import node as node_cases
from onnx.backend.test.case.test_case import TestCase

from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.backends.onnx import OnnxImportError, import_onnx
from tasoc.ir.program import arg_infos, entry_function

PASSING_FILE = Path(__file__).with_name("onnx_node_cases.passing")
"""The names of the cases that pass, one a line: a case that stops passing fails the test
even when it turns into a clean rejection."""

DOCS = Path(__file__).parents[1] / "docs" / "onnx.md"
TABLE_START = "<!-- node-case table: written by tests/onnx_node_cases.py --write -->"
TABLE_END = "<!-- end of node-case table -->"


class Outcome(Enum):
    PASSED = "passed"
    REJECTED = "rejected"
    FAILED = "failed"


@dataclass(frozen=True)
class Result:
    outcome: Outcome
    detail: str = ""
    """The rejection's message, or what went wrong and where."""


@cache
def all_cases() -> tuple[TestCase, ...]:
    with warnings.catch_warnings():  # generating some cases overflows on purpose
        warnings.simplefilter("ignore")
        return tuple(node_cases.collect_testcases(None))


@cache
def operator_of() -> Mapping[str, str]:
    """The ONNX operator each case tests: the op of a one-node case, and for an expansion
    (several nodes) the op of the one-node case it expands."""
    single = {
        case.name: case.model.graph.node[0].op_type
        for case in all_cases()
        if len(case.model.graph.node) == 1
    }
    ops = {}
    for case in all_cases():
        base = re.sub(r"_expanded(_ver\d+)?$", "", case.name)
        ops[case.name] = single.get(case.name) or single.get(base) or _first_op(case)
    return ops


def _first_op(case: TestCase) -> str:
    return case.model.graph.node[0].op_type if case.model.graph.node else "(no node)"


def _array(value: object) -> np.ndarray:
    if isinstance(value, onnx.TensorProto):
        return numpy_helper.to_array(value)
    return np.asarray(value)


def with_constant_configuration(
    case: TestCase, inputs: Sequence[object]
) -> tuple[onnx.ModelProto, list[object]]:
    """The case's model with its int64 inputs made initializers, and the other inputs."""
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    kept, activations = [], []
    for info, value in zip(case.model.graph.input, inputs, strict=True):
        if isinstance(value, np.ndarray) and value.dtype == np.int64:
            model.graph.initializer.append(numpy_helper.from_array(value, info.name))
        else:
            kept.append(info)
            activations.append(value)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, activations


def mismatch(
    case: TestCase, results: Sequence[np.ndarray], expected: Sequence[np.ndarray]
) -> str | None:
    """What differs between `results` and ONNX's expected outputs, or None."""
    if len(results) != len(expected):
        return f"{len(results)} outputs, ONNX expects {len(expected)}"
    for index, (got, want) in enumerate(zip(results, expected, strict=True)):
        if got.dtype != want.dtype or got.shape != want.shape:
            got_type, want_type = f"{got.dtype}{list(got.shape)}", f"{want.dtype}{list(want.shape)}"
            return f"output #{index} is {got_type}, not {want_type}"
        try:
            np.testing.assert_allclose(got, want, rtol=rtol(case, want.dtype), atol=case.atol)
        except AssertionError as err:
            return f"output #{index}: " + " ".join(str(err).split()[:40])
    return None


HALF_PRECISION_ULPS = 2
"""How many units in the last place a half-precision (f16/bf16) output may differ by.

ONNX's expected outputs of half-precision cases come from its reference evaluator, whose
intermediates round differently from a kernel that computes in float32 and rounds once
(tasoc, onnxruntime): its fp16 causal-attention softmax is 1-2 ulps off the correctly
rounded one in 14 of 144 entries. The cases' rtol of 1e-3 is one ulp of f16 and an
eighth of one of bf16, so those cases are held to 2 ulps instead."""


def rtol(case: TestCase, dtype: np.dtype) -> float:
    if dtype in (np.float16, ml_dtypes.bfloat16):
        return max(case.rtol, HALF_PRECISION_ULPS * float(ml_dtypes.finfo(dtype).eps))
    return case.rtol


def run_case(case: TestCase) -> Result:
    inputs, outputs = case.data_sets[0]
    model, activations = with_constant_configuration(case, list(inputs))
    try:
        module, params = import_onnx(model)
    except OnnxImportError as err:
        return Result(Outcome.REJECTED, str(err))
    except Exception as err:  # any other exception is what this test looks for
        return Result(Outcome.FAILED, f"import: {type(err).__name__}: {err}")
    try:  # only tensors reach here: an imported program takes and gives nothing else
        expected = [_array(value) for value in outputs]
        remaining = iter(_array(value) for value in activations)
    except ValueError as err:
        return Result(Outcome.FAILED, f"imported a case with non-tensor values: {err}")
    infos = arg_infos(entry_function(module))
    args = [params[info.name] if info.is_param else next(remaining) for info in infos]
    backends = {"reference": run_reference, "jax": lambda m, a: lower(m)(*a)}
    for backend, run in backends.items():
        try:
            results = [np.asarray(r) for r in run(module, args)]
        except Exception as err:
            return Result(Outcome.FAILED, f"{backend}: {type(err).__name__}: {err}")
        wrong = mismatch(case, results, expected)
        if wrong is not None:
            return Result(Outcome.FAILED, f"{backend}: {wrong}")
    return Result(Outcome.PASSED)


@cache
def results() -> Mapping[str, Result]:
    return {case.name: run_case(case) for case in all_cases()}


def recorded_passing() -> frozenset[str]:
    return frozenset(PASSING_FILE.read_text().split())


# ------------------------------------------------------------------- the docs table


def reason(message: str) -> str:
    """A rejection's message without the node's name and opset, so equal reasons of
    different cases read the same (`Conv node 'c' (opset 17): dilations ...`)."""
    text = re.sub(r"^.*? node '.*?' \(opset \d+\): ", "", message)
    text = re.sub(r"\b(input|output|initializer|tensor|node) '[^']*'", r"\1 '…'", text)
    text = re.sub(r"\b\d+(x\d+)*\b", "N", text)
    return text if len(text) <= 90 else text[:89] + "…"


def table(outcomes: Mapping[str, Result]) -> str:
    """Markdown: per operator, its cases passed and rejected and why they were rejected."""
    by_op: dict[str, list[Result]] = defaultdict(list)
    for name, result in outcomes.items():
        by_op[operator_of()[name]].append(result)
    rows = [
        "| operator | cases | passed | rejected | why rejected (most frequent reasons) |",
        "| --- | ---: | ---: | ---: | --- |",
    ]
    for op in sorted(by_op, key=str.lower):
        counts = Counter(result.outcome for result in by_op[op])
        reasons = Counter(
            reason(result.detail) for result in by_op[op] if result.outcome is Outcome.REJECTED
        )
        why = "; ".join(f"{text} ({n})" for text, n in reasons.most_common(2))
        if len(reasons) > 2:
            why += f"; {len(reasons) - 2} more"
        why = why.replace("|", "\\|")
        rows.append(
            f"| {op} | {len(by_op[op])} | {counts[Outcome.PASSED]} | "
            f"{counts[Outcome.REJECTED]} | {why} |"
        )
    totals = Counter(result.outcome for result in outcomes.values())
    passing_ops = sum(
        any(r.outcome is Outcome.PASSED for r in results_) for results_ in by_op.values()
    )
    summary = (
        f"**{len(outcomes)} cases of {len(by_op)} operators: {totals[Outcome.PASSED]} pass on "
        f"both backends, {totals[Outcome.REJECTED]} are rejected in one line, "
        f"{totals[Outcome.FAILED]} fail.** {passing_ops} operators have a passing case."
    )
    return "\n".join([summary, "", *rows])


def _table_span(docs: str) -> tuple[int, int]:
    """Where the table lies in docs/onnx.md, between its two markers."""
    return docs.index(TABLE_START) + len(TABLE_START), docs.index(TABLE_END)


def documented_table(docs: str) -> str:
    start, end = _table_span(docs)
    return docs[start:end].strip()


def _write(outcomes: Mapping[str, Result], passing: Iterable[str]) -> None:
    PASSING_FILE.write_text("".join(f"{name}\n" for name in sorted(passing)))
    docs = DOCS.read_text()
    start, end = _table_span(docs)
    DOCS.write_text(docs[:start] + "\n" + table(outcomes) + "\n" + docs[end:])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--write", action="store_true", help="rewrite the record and the table")
    args = parser.parse_args()
    outcomes = results()
    failed = {n: r.detail for n, r in outcomes.items() if r.outcome is Outcome.FAILED}
    for name, detail in sorted(failed.items()):
        print(f"FAILED {name}: {detail}")
    print(table(outcomes).split("\n")[0])
    if args.write:
        if failed:
            raise SystemExit("not written: cases fail")
        _write(outcomes, (n for n, r in outcomes.items() if r.outcome is Outcome.PASSED))


if __name__ == "__main__":
    main()
