"""Training programs: their marks (`tasoc.ir.training`) and `tasoc run --steps`.

The programs are written by hand (least squares with an SGD or momentum update in
plain graph ops), so these tests hold whatever the autodiff pass emits; the loop's
losses are compared with the same loop written in numpy."""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_one_line_error
from strict_cli import StrictRun, strict_runner
from xdsl.dialects.builtin import ArrayAttr, DictionaryAttr, IntegerAttr, ModuleOp, UnitAttr, i64
from xdsl.ir import Attribute

from tasoc.backends.arguments import random_inputs
from tasoc.driver.sources import load_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.graph import PARAM_ATTR
from tasoc.ir.liveness import peak_memory
from tasoc.ir.program import ProgramError, entry_function
from tasoc.ir.training import (
    GRADIENT_OF_ATTR,
    LABELS_ATTR,
    LOSS_ATTR,
    REPLACES_ATTR,
    STATE_ATTR,
    TrainingSignature,
    training_signature,
)

N, D, LR, MOMENTUM = 16, 4, 0.1, 0.9


@pytest.fixture
def run(capfd: pytest.CaptureFixture[str]) -> StrictRun:
    return strict_runner(capfd)


def marked(
    module: ModuleOp,
    arguments: list[dict[str, Attribute]],
    results: list[dict[str, Attribute]],
) -> ModuleOp:
    """`module` with these argument and result attributes on `@main`."""
    function = entry_function(module)
    function.arg_attrs = ArrayAttr([DictionaryAttr(a) for a in arguments])
    function.res_attrs = ArrayAttr([DictionaryAttr(r) for r in results])
    return module


def index(n: int) -> IntegerAttr:
    return IntegerAttr(n, i64)


def least_squares(momentum: bool) -> ModuleOp:
    """loss = mean((x w - y)^2); g = x^T (x w - y) (the gradient over 2/N); SGD:
    w' = w - lr 2/N g; momentum: v' = mu v + 2/N g, w' = w - lr v'."""
    b = GraphBuilder()
    x, y, w = b.input("x", [N, D]), b.input("y", [N, 1]), b.param("w", [D, 1])
    v = b.input("v", [D, 1]) if momentum else None
    residual = b.add(b.matmul(x, w), b.scale(y, -1.0))
    loss = b.reduce(b.mul(residual, residual), "mean", [0, 1])
    gradient = b.scale(b.matmul(b.transpose(x, [1, 0]), residual), 2.0 / N)
    if v is None:
        outputs = [loss, b.add(w, b.scale(gradient, -LR))]
    else:
        v2 = b.add(b.scale(v, MOMENTUM), gradient)
        outputs = [loss, b.add(w, b.scale(v2, -LR)), v2]
    arguments = [{}, {LABELS_ATTR: UnitAttr()}, {PARAM_ATTR: UnitAttr()}]
    results: list[dict[str, Attribute]] = [{LOSS_ATTR: UnitAttr()}, {REPLACES_ATTR: index(2)}]
    if momentum:
        arguments.append({STATE_ATTR: UnitAttr()})
        results.append({REPLACES_ATTR: index(3)})
    return marked(b.build(*outputs), arguments, results)


def numpy_losses(arguments: list[np.ndarray], steps: int, momentum: bool) -> list[float]:
    """The same training loop, written directly in numpy (float64)."""
    x, y, w = (a.astype(np.float64) for a in arguments[:3])
    v = np.zeros_like(w)
    losses = []
    for _ in range(steps):
        residual = x @ w - y
        losses.append(float(np.mean(residual**2)))
        gradient = 2.0 / N * x.T @ residual
        v = MOMENTUM * v + gradient if momentum else gradient
        w = w - LR * v
    return losses


def printed_losses(out: str) -> list[float]:
    return [float(loss) for loss in re.findall(r"^step +\d+/\d+  loss (\S+)$", out, re.M)]


def write(tmp_path: Path, module: ModuleOp, name: str = "step.mlir") -> Path:
    path = tmp_path / name
    path.write_text(str(module))
    return path


# ------------------------------------------------------------------ the marks


def test_signature_of_a_momentum_step() -> None:
    signature = training_signature(entry_function(least_squares(momentum=True)))
    assert signature == TrainingSignature(
        loss=0,
        inputs=(0,),
        labels=(1,),
        params=(2,),
        state=(3,),
        replaces=((1, 2), (2, 3)),
        gradients=(),
    )
    assert signature.replaced_by == {2: 1, 3: 2}


def test_forward_program_has_no_signature() -> None:
    b = GraphBuilder()
    module = b.build(b.relu(b.matmul(b.input("x", [2, 3]), b.param("w", [3, 4]))))
    assert training_signature(entry_function(module)) is None


def test_gradient_results() -> None:
    module = least_squares(momentum=False)
    marked(
        module,
        [{}, {LABELS_ATTR: UnitAttr()}, {PARAM_ATTR: UnitAttr()}],
        [{LOSS_ATTR: UnitAttr()}, {GRADIENT_OF_ATTR: index(2)}],
    )
    assert training_signature(entry_function(module)).gradients == ((1, 2),)  # type: ignore[union-attr]


LOSS = {LOSS_ATTR: UnitAttr()}
INPUT_LABELS_PARAM = [{}, {LABELS_ATTR: UnitAttr()}, {PARAM_ATTR: UnitAttr()}]


@pytest.mark.parametrize(
    ("arguments", "results", "message"),
    [
        (INPUT_LABELS_PARAM, [LOSS, {REPLACES_ATTR: index(7)}], "replaces = 7 is out of range"),
        (INPUT_LABELS_PARAM, [LOSS, {REPLACES_ATTR: index(-1)}], "replaces = -1 is out of range"),
        (INPUT_LABELS_PARAM, [LOSS, {REPLACES_ATTR: index(0)}], "but argument #0 has type"),
        (INPUT_LABELS_PARAM, [LOSS, LOSS], "already is; a training program has one loss"),
        (INPUT_LABELS_PARAM, [{}, {LOSS_ATTR: UnitAttr()}], "not a rank-0 float"),
        (INPUT_LABELS_PARAM, [LOSS, {REPLACES_ATTR: UnitAttr()}], "must be an argument index"),
        (
            [{}, {LABELS_ATTR: UnitAttr(), PARAM_ATTR: UnitAttr()}, {PARAM_ATTR: UnitAttr()}],
            [LOSS, {}],
            "marked both graph.param and graph.labels",
        ),
    ],
)
def test_inconsistent_marks(
    arguments: list[dict[str, Attribute]], results: list[dict[str, Attribute]], message: str
) -> None:
    module = marked(least_squares(momentum=False), arguments, results)
    with pytest.raises(ProgramError, match=re.escape(message)):
        training_signature(entry_function(module))


def test_argument_replaced_twice() -> None:
    b = GraphBuilder()
    w = b.param("w", [3])
    module = b.build(b.reduce(w, "sum", [0]), b.relu(w), w)
    replaces_w = {REPLACES_ATTR: index(0)}
    marked(module, [{PARAM_ATTR: UnitAttr()}], [LOSS, replaces_w, replaces_w])
    with pytest.raises(ProgramError, match=r"results #1 and #2 .* both marked graph.replaces = 0"):
        training_signature(entry_function(module))


def test_state_arguments_start_at_zero() -> None:
    values = random_inputs(least_squares(momentum=True), seed=3)
    assert not values[3].any() and values[2].any()


# ------------------------------------------------------------------ --steps


@pytest.mark.parametrize("momentum", [False, True], ids=["sgd", "momentum"])
def test_thirty_steps_match_numpy(run: StrictRun, tmp_path: Path, momentum: bool) -> None:
    module = least_squares(momentum)
    path = write(tmp_path, module)
    report = tmp_path / "r.json"
    result = run("run", path, "--steps", "30", "--seed", "5", "--report", report)
    assert result.code == 0, result
    losses = printed_losses(result.out)
    expected = numpy_losses(random_inputs(load_module(str(path)), seed=5), 30, momentum)
    np.testing.assert_allclose(losses, expected, rtol=1e-4)
    assert losses[-1] < 0.8 * losses[0]  # it learns
    assert "memory: peak" in result.out

    written = json.loads(report.read_text())
    assert written["steps"] == 30 and written["backend"] == "jax" and written["seed"] == 5
    np.testing.assert_allclose(written["losses"], expected, rtol=1e-4)
    assert len(written["seconds_per_step"]) == 30
    assert written["memory"] == peak_memory(entry_function(module)).to_json()


def test_numpy_backend_and_check_of_the_first_step(run: StrictRun, tmp_path: Path) -> None:
    path = write(tmp_path, least_squares(momentum=True))
    jax_run = run("run", path, "--steps", "4")
    result = run("run", path, "--steps", "4", "--backend", "numpy", "--check")
    assert result.code == 0, result
    assert "check: equivalent to the numpy reference (first step)" in result.out
    np.testing.assert_allclose(printed_losses(result.out), printed_losses(jax_run.out), rtol=1e-5)


def test_plain_run_of_a_training_step_prints_its_memory(run: StrictRun, tmp_path: Path) -> None:
    step = run("run", write(tmp_path, least_squares(momentum=False)))
    assert step.code == 0 and re.search(r"^memory: peak \d+ bytes live at op \d+ ", step.out, re.M)
    b = GraphBuilder()
    forward = write(tmp_path, b.build(b.relu(b.input("x", [3]))), "forward.mlir")
    assert "memory:" not in run("run", forward).out


# ------------------------------------------------------------------ bad input


def test_steps_on_a_forward_program(run: StrictRun, tmp_path: Path) -> None:
    b = GraphBuilder()
    path = write(tmp_path, b.build(b.relu(b.input("x", [3]))), "forward.mlir")
    report = tmp_path / "r.json"
    report.write_text("before")
    result = run("run", path, "--steps", "3", "--report", report)
    assert_one_line_error(result, "no result marked graph.replaces", "emit=step")
    assert report.read_text() == "before"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["forward.mlir", "r.json"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (["--steps", "0"], "--steps: expected an integer >= 1, got 0"),
        (["--steps", "-3"], "--steps: expected an integer >= 1, got -3"),
        (["--steps", "2", "--bench", "3"], "--bench cannot be combined with --steps"),
        (["--steps", "2", "--check-onnxruntime"], "--check compares the first step"),
    ],
)
def test_bad_steps_options(
    run: StrictRun, tmp_path: Path, options: list[str], message: str
) -> None:
    path = write(tmp_path, least_squares(momentum=False))
    report = tmp_path / "r.json"
    assert_one_line_error(run("run", path, *options, "--report", report), message)
    assert not report.exists()


def test_inconsistent_marks_through_the_cli(run: StrictRun, tmp_path: Path) -> None:
    module = marked(least_squares(momentum=False), INPUT_LABELS_PARAM, [LOSS, LOSS])
    result = run("run", write(tmp_path, module), "--steps", "2")
    assert_one_line_error(result, "a training program has one loss")


def classifier() -> ModuleOp:
    """softmax cross-entropy of an embedding lookup: labels index 5 classes, ids 7 rows."""
    b = GraphBuilder()
    ids, labels = b.input("ids", [4], "i32"), b.input("labels", [4], "i32")
    table = b.param("table", [7, 5])
    loss = b.reduce(b.softmax_cross_entropy(b.embedding(ids, table), labels), "mean", [0])
    return b.build(loss)


@pytest.mark.parametrize(
    ("ids", "labels", "message"),
    [
        (
            [0, 1, 2, 3],
            [0, 4, 5, 1],
            "argument 'labels' holds 5 at [2], outside [0, 5): it is the labels of "
            "graph.softmax_cross_entropy, which has 5 classes",
        ),
        ([0, -1, 2, 3], [0, 1, 2, 3], "argument 'ids' holds -1 at [1], outside [0, 7)"),
    ],
)
def test_indices_out_of_range(
    run: StrictRun, tmp_path: Path, ids: list[int], labels: list[int], message: str
) -> None:
    path = write(tmp_path, classifier())
    params = tmp_path / "p.npz"
    table = np.zeros((7, 5), np.float32)
    np.savez(params, ids=np.array(ids, np.int32), labels=np.array(labels, np.int32), table=table)
    for backend in ("jax", "numpy"):
        assert_one_line_error(run("run", path, "--params", params, "--backend", backend), message)
    good = {"ids": np.arange(4, dtype=np.int32), "labels": np.arange(4, dtype=np.int32)}
    np.savez(params, table=table, **good)
    assert run("run", path, "--params", params).code == 0
