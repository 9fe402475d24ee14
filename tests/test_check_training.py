"""`--check` of training steps: gradient tolerances, and the witnesses that decide where
end-to-end gradients drift apart: the step in float64 and the op-by-op comparison
(`verify.equivalence.arbitrate`, `compare_ops`)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import jax
import numpy as np
import pytest
from autodiff_helpers import convnet, training

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lowering
from tasoc.driver.errors import DriverError
from tasoc.driver.run import Witnesses, _check_against
from tasoc.ir.program import entry_function
from tasoc.verify.equivalence import GRADIENT_TOLERANCES, OpByOp, OpReport, compare, compare_ops


def test_every_op_of_a_training_step_agrees_with_its_kernel() -> None:
    step = training(convnet(), loss="softmax-cross-entropy", optimizer="adam")
    compared = compare_ops(step, random_inputs(step, 0))
    ops = [op for op in entry_function(step).body.block.ops if op.name.startswith("graph.")]
    assert len(compared.ops) == len(ops) and compared.mismatches == []


def test_a_wrong_lowering_is_named_by_the_op_by_op_check(monkeypatch: pytest.MonkeyPatch) -> None:
    step = training(convnet(), loss="mse")
    right = lowering.JAX_KERNELS["relu_grad"]

    def wrong(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
        return [r * 1.01 for r in right(attrs, inputs)]

    monkeypatch.setitem(lowering.JAX_KERNELS, "relu_grad", wrong)
    mismatches = compare_ops(step, random_inputs(step, 0)).mismatches
    assert {m.name for m in mismatches} == {"graph.relu_grad"}


def test_gradients_are_compared_at_gradient_tolerances() -> None:
    expected = [np.ones(4, np.float32), np.ones(4, np.float32)]
    actual = [np.ones(4, np.float32), np.full(4, 1.0005, np.float32)]
    assert not compare(expected, actual).ok
    assert compare(expected, actual, gradients={1}).ok
    assert GRADIENT_TOLERANCES[np.dtype(np.float32)] == (1e-3, 1e-3)


EXPECTED = [np.float32(2.0), np.ones(4, np.float32)]
DRIFTED = [np.float32(2.0), np.full(4, 1.1, np.float32)]
FLOAT64 = [np.float64(2.0), np.full(4, 1.05)]
"""The step in float64: the reference and the drifted gradient equally far from it."""
AGREE = OpByOp((OpReport(2, "graph.relu_grad", compare([EXPECTED[1]], [EXPECTED[1]])),))


def witnesses(ops: OpByOp = AGREE, wide: list[np.ndarray] = FLOAT64) -> Witnesses:
    return Witnesses(float64=lambda: wide, op_by_op=lambda: ops)


def test_drifted_gradients_pass_when_as_far_from_float64_and_every_op_agrees(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _check_against("the reference", EXPECTED, DRIFTED, "jax", {1}, witnesses())
    out = capsys.readouterr().out
    assert "check output #1: jax 0.048, numpy 0.048 from float64: equivalent within" in out
    assert "all 1 ops agree with their reference kernels" in out


def test_drifted_gradients_fail_when_an_op_disagrees() -> None:
    wrong = OpReport(3, "graph.conv2d_grad_weight", compare([EXPECTED[1]], [DRIFTED[1]]))
    with pytest.raises(DriverError, match=r"op 3 \(graph.conv2d_grad_weight\) result #0"):
        _check_against("the reference", EXPECTED, DRIFTED, "jax", {1}, witnesses(OpByOp((wrong,))))


def test_a_drifted_loss_fails_whatever_the_ops_say() -> None:
    wrong_loss = [np.float32(2.5), EXPECTED[1]]
    with pytest.raises(DriverError, match=r"output #0: jax 0.25, numpy 0 from float64"):
        _check_against("the reference", EXPECTED, wrong_loss, "jax", {1}, witnesses())


def test_many_outputs_are_summarized(capsys: pytest.CaptureFixture[str]) -> None:
    expected = [np.ones(2, np.float32)] * 30
    actual = [np.ones(2, np.float32)] * 29 + [np.full(2, 2.0, np.float32)]
    with pytest.raises(DriverError) as failure:
        _check_against("the reference", expected, actual, "jax", set())
    lines = capsys.readouterr().out.splitlines()
    assert lines == [
        "  check output #29 (2xf32): max abs error 1, max rel error 1 (rtol 0.0001, atol 1e-05)",
        "  check: 29 more outputs; the largest error: output #29 (2xf32): max abs error 1, "
        "max rel error 1 (rtol 0.0001, atol 1e-05)",
    ]
    assert "output #29" in str(failure.value) and "more outputs" not in str(failure.value)


def test_a_summary_names_the_first_failures_and_counts_the_rest() -> None:
    report = compare([np.ones(1, np.float32)] * 5, [np.zeros(1, np.float32)] * 5)
    summary = report.summary()
    assert "output #2" in summary and "output #3" not in summary
    assert summary.endswith("; and 2 more outputs")
