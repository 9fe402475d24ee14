"""The `autodiff` pass: gradients against `jax.grad` (zoo models, random graphs) and
against float64 finite differences, optimizer steps against the same update written
in numpy, the program convention, and every bad input through the CLI."""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from autodiff_helpers import (
    convnet,
    evaluate64,
    jax_gradients,
    scaled_error,
    step_gradients,
    training,
)
from conftest import PROFILE, Result, examples
from hypothesis import given, settings
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.ir import dag as dag_module
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.program import arg_infos, entry_function, result_attributes
from tasoc.ir.training import training_signature
from tasoc.models.registry import get_model, list_models
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.autodiff.step import forward_with_loss
from tasoc.verify.strategies import graphs

GRADIENT_TOLERANCE = 1e-3
"""Scaled max error (`scaled_error`) allowed between two float32 gradient programs."""

# ------------------------------------------------------------------ small programs


def mlp(batch: int = 4) -> ModuleOp:
    g = GraphBuilder()
    x = g.input("x", (batch, 3))
    w1, b1, w2 = g.param("w1", (3, 5)), g.param("b1", (5,)), g.param("w2", (5, 2))
    h = g.tanh(g.add(g.matmul(x, w1), b1))
    return g.build(g.matmul(h, w2))


def sequence_model() -> ModuleOp:
    """embedding with repeated ids, a shared weight used three times, layernorm,
    gelu, sigmoid, batched matmul broadcasting, mul broadcasting, scale by a weight."""
    g = GraphBuilder()
    ids = g.input("ids", (2, 3), "i32")
    table = g.param("table", (5, 4))
    shared = g.param("shared", (4, 4))
    gamma, beta = g.param("gamma", (4,)), g.param("beta", (4,))
    gate = g.param("gate", (1, 3, 1))
    factor = g.param("factor", ())
    h = g.embedding(ids, table)
    for _ in range(3):  # an RNN-like reuse of one weight
        h = g.gelu(g.matmul(h, shared))
    h = g.layernorm(h, gamma, beta, axis=-1)
    h = g.mul(g.sigmoid(h), gate)
    return g.build(g.reduce(g.scale(h, factor), "mean", (2,)))


# ------------------------------------------------------------- against jax.grad


def assert_matches_jax_grad(module: ModuleOp, **options: object) -> None:
    args, outputs = step_gradients(module, **options)
    value, expected = jax_gradients(module, args, **options)
    assert outputs[0] == pytest.approx(value, rel=1e-5, abs=1e-6)
    assert len(outputs) == 1 + len(expected)
    for index, (ours, theirs) in enumerate(zip(outputs[1:], expected, strict=True)):
        assert scaled_error(ours, theirs) <= GRADIENT_TOLERANCE, f"gradient #{index}"


COVERED_BY = {"inception_v4": "inception_v3", "resnet101": "resnet50", "wresnet": "resnet50"}
"""Zoo models whose gradients are not compared with `jax.grad` here (their two JAX
compiles take 15-70 s a model on 2 cores), and the checked model made of the same
blocks: inception_v4 is inception_v3's (its two-operand concat is squeezenet's and
nasnet's), resnet101 and wresnet are resnet50's bottlenecks, deeper or wider. That
nothing is lost is checked below: every op of their forward and gradients programs,
with its attributes (sizes aside), operand ranks and dtypes, and every fan-out, is
some checked model's, and the loss is the same. test_zoo_training.py still builds
their training steps."""

ZOO = [model.name for model in list_models() if PROFILE == "long" or model.name not in COVERED_BY]
"""The models compared with `jax.grad`: all of them under `HYPOTHESIS_PROFILE=long`
(`make test-long`)."""


@pytest.mark.parametrize("name", ZOO)
def test_gradients_equal_jax_grad_on_every_small_zoo_model(name: str) -> None:
    model = get_model(name)
    assert_matches_jax_grad(model.build(**model.small), loss=model.loss)


def _op_kinds(name: str) -> tuple[set[tuple[object, ...]], set[int], str]:
    """(op, its non-size attributes, operand ranks and dtypes) of every op of zoo model
    `name`'s small forward and gradients programs, how many readers its values have
    (how many gradients the pass sums), and its loss."""
    model = get_model(name)
    forward = model.build(**model.small)
    kinds: set[tuple[object, ...]] = set()
    fan_outs: set[int] = set()
    for module in (forward, training(forward, loss=model.loss, emit="gradients")):
        dag = dag_module.from_module(module)
        readers: Counter[object] = Counter()
        for node in dag.ops:
            readers.update(node.inputs)
            attrs = sorted(
                (key, str(value))
                for key, value in dict(node.attrs).items()
                if key not in ("input_shape", "shape", "sizes", "rows")
            )
            operands = tuple((v.sig.rank, str(v.sig.dtype)) for v in node.inputs)
            kinds.add((module is forward, node.op, tuple(attrs), operands))
        fan_outs |= set(readers.values())
    return kinds, fan_outs, model.loss


def test_the_zoo_models_left_out_have_nothing_the_checked_ones_lack() -> None:
    checked = {name: _op_kinds(name) for name in ZOO}
    all_kinds = set().union(*(kinds for kinds, _, _ in checked.values()))
    all_fan_outs = set().union(*(fan_outs for _, fan_outs, _ in checked.values()))
    for name, like in COVERED_BY.items():
        kinds, fan_outs, loss = _op_kinds(name)
        assert kinds <= all_kinds, (name, kinds - all_kinds)
        assert fan_outs <= all_fan_outs, (name, fan_outs - all_fan_outs)
        assert loss == checked[like][2], name


# Not (convnet, sum): the sum of a softmax is constant, its gradient rounding noise.
@pytest.mark.parametrize(
    ("build", "loss"),
    [
        (mlp, "sum"),
        (mlp, "mse"),
        (mlp, "softmax-cross-entropy"),
        (convnet, "mse"),
        (convnet, "softmax-cross-entropy"),
        (sequence_model, "sum"),
        (sequence_model, "softmax-cross-entropy"),
    ],
)
def test_gradients_equal_jax_grad_for_every_loss(build: Callable[[], ModuleOp], loss: str) -> None:
    assert_matches_jax_grad(build(), loss=loss)


@settings(max_examples=examples(12))
@given(module=graphs(max_ops=6, trainable=True))
def test_gradients_equal_jax_grad_on_random_graphs(module: ModuleOp) -> None:
    assert_matches_jax_grad(module, loss="sum")


# ------------------------------------------------------- float64 finite differences


def finite_difference_check(module: ModuleOp, loss: str, seed: int = 0) -> None:
    """Central differences of forward+loss in float64 on the reference kernels against
    the gradients program, also in float64, at a few coordinates of every weight."""
    options = AutodiffPass(loss=loss, emit="gradients")
    forward = dag_module.from_module(module)
    objective = forward_with_loss(forward, options)
    step = dag_module.from_module(training(module, loss=loss, emit="gradients"))
    args = [a.astype(np.float64) if a.dtype.kind == "f" else a for a in random_inputs(
        dag_module.to_module(step), seed)]  # fmt: skip
    loss_value, *gradients = evaluate64(step, args)
    assert float(evaluate64(objective, args)[0]) == pytest.approx(float(loss_value), rel=1e-12)
    rng = np.random.default_rng(seed)
    weights = [i for i, node in enumerate(step.args) if node.attr("is_param")]
    h = 1e-6
    for gradient, index in zip(gradients, weights, strict=True):
        for flat in rng.choice(args[index].size, size=min(4, args[index].size), replace=False):
            coordinate = np.unravel_index(flat, args[index].shape)
            moved = [a.copy() for a in args]
            moved[index][coordinate] += h
            above = float(evaluate64(objective, moved)[0])
            moved[index][coordinate] -= 2 * h
            below = float(evaluate64(objective, moved)[0])
            numeric = (above - below) / (2 * h)
            assert gradient[coordinate] == pytest.approx(numeric, rel=1e-5, abs=1e-7), (
                f"weight {step.args[index].attr('name')} at {coordinate}"
            )


@pytest.mark.parametrize(
    ("build", "loss"),
    [(mlp, "softmax-cross-entropy"), (convnet, "mse"), (sequence_model, "sum")],
)
def test_gradients_equal_float64_finite_differences(
    build: Callable[[], ModuleOp], loss: str
) -> None:
    finite_difference_check(build(), loss)


# ---------------------------------------------------------------- optimizers


def one_step(module: ModuleOp, **options: object) -> tuple[list[np.ndarray], list[np.ndarray]]:
    step = training(module, **options)
    args = random_inputs(step, 0)
    return args, lower(step)(*args)


@pytest.mark.parametrize(
    "options",
    [
        {"optimizer": "sgd", "lr": 0.5},
        {"optimizer": "momentum", "lr": 0.1, "momentum": 0.8},
        {"optimizer": "momentum", "lr": 0.1, "momentum": 0.8, "nesterov": True},
        {"optimizer": "adam", "lr": 0.01, "beta1": 0.8, "beta2": 0.9, "epsilon": 1e-6},
    ],
    ids=["sgd", "momentum", "nesterov", "adam"],
)
def test_one_step_equals_the_update_written_directly(options: dict[str, object]) -> None:
    """Two steps (so momentum and Adam state matter), each against the formula applied
    to the gradients the `emit=gradients` program computes."""
    module = mlp()
    step = training(module, loss="mse", **options)
    gradients_program = lower(training(module, loss="mse", emit="gradients"))
    run = lower(step)
    signature = training_signature(entry_function(step))
    assert signature is not None
    args = random_inputs(step, 0)
    weights = list(signature.params)
    state = list(signature.state)
    for count in (1, 2):
        grads = gradients_program(*args[: len(args) - len(state)])[1:]
        outputs = run(*args)
        params = [args[i] for i in weights]
        expected_params, expected_state = _reference_update(
            options, params, grads, [args[i] for i in state], count
        )
        new_params = outputs[1 : 1 + len(weights)]
        new_state = outputs[1 + len(weights) :]
        for ours, theirs in zip(
            new_params + new_state, expected_params + expected_state, strict=True
        ):
            np.testing.assert_allclose(ours, theirs, rtol=2e-5, atol=1e-6)
        for result, argument in signature.replaces:
            args[argument] = outputs[result]


def _reference_update(
    options: dict[str, object],
    params: list[np.ndarray],
    grads: list[np.ndarray],
    state: list[np.ndarray],
    count: int,
) -> tuple[list[np.ndarray], list[np.ndarray]]:
    """The optimizers of PyTorch/optax in numpy; state in the step's order."""
    lr = float(options["lr"])  # type: ignore[arg-type]
    if options["optimizer"] == "sgd":
        return [p - lr * g for p, g in zip(params, grads, strict=True)], []
    if options["optimizer"] == "momentum":
        mu = float(options["momentum"])  # type: ignore[arg-type]
        velocities = [mu * v + g for v, g in zip(state, grads, strict=True)]
        if options.get("nesterov"):
            directions = [g + mu * v for g, v in zip(grads, velocities, strict=True)]
        else:
            directions = velocities
        return [p - lr * d for p, d in zip(params, directions, strict=True)], velocities
    b1, b2 = float(options["beta1"]), float(options["beta2"])  # type: ignore[arg-type]
    eps = float(options["epsilon"])  # type: ignore[arg-type]
    assert state[-1] == count - 1  # the shared step counter, before this update
    new_params, new_state = [], []
    for index, (p, g) in enumerate(zip(params, grads, strict=True)):
        m = b1 * state[2 * index] + (1 - b1) * g
        v = b2 * state[2 * index + 1] + (1 - b2) * g * g
        m_hat, v_hat = m / (1 - b1**count), v / (1 - b2**count)
        new_params.append(p - lr * m_hat / (np.sqrt(v_hat) + eps))
        new_state += [m, v]
    return new_params, [*new_state, np.float32(count)]


def test_gradients_do_not_depend_on_the_optimizer_named() -> None:
    module = mlp()
    plain = training(module, loss="mse", emit="gradients")
    for optimizer in ("momentum", "adam"):
        other = training(module, loss="mse", emit="gradients", optimizer=optimizer)
        assert str(other) == str(plain)


def test_half_precision_weights_train_with_a_float32_adam_counter() -> None:
    g = GraphBuilder()
    x = g.input("x", (4, 3), "f16")
    w = g.param("w", (3, 2), "f16")
    step = training(g.build(g.matmul(x, w)), loss="mse", optimizer="adam")
    infos = {info.name: info.sig for info in arg_infos(entry_function(step))}
    assert str(infos["adam.step"]) == "f32" and str(infos["w.m"]) == "3x2xf16"
    args = random_inputs(step, 0)
    outputs = lower(step)(*args)
    assert np.all(np.isfinite(outputs[1].astype(np.float32)))


# ------------------------------------------------------------- the convention


def test_arguments_results_and_marks_follow_the_convention() -> None:
    step = training(convnet(), loss="softmax-cross-entropy", optimizer="momentum")
    function = entry_function(step)
    infos = arg_infos(function)
    names = [info.name for info in infos]
    assert names == [
        "x", "labels", "w", "small", "gamma", "beta", "mean", "var",
        "w.velocity", "small.velocity", "gamma.velocity", "beta.velocity",
    ]  # fmt: skip
    signature = training_signature(function)
    assert signature is not None
    assert signature.loss == 0 and signature.labels == (1,)
    assert signature.params == tuple(range(2, 8)) and signature.state == tuple(range(8, 12))
    # Every weight then every state argument is replaced, in order, by results 1...
    assert signature.replaces == tuple((i - 1, i) for i in range(2, 12))
    assert str(infos[1].sig) == "2xi32"
    assert len(result_attributes(function)) == 11


def test_running_statistics_get_their_moving_average_not_an_update() -> None:
    step = training(convnet(), loss="mse", optimizer="sgd", lr=0.5, bn_momentum=0.25)
    args = random_inputs(step, 0)
    outputs = lower(step)(*args)
    infos = arg_infos(entry_function(step))
    mean_at = next(i for i, info in enumerate(infos) if info.name == "mean")
    batch = dag_module.from_module(step)
    trained = next(n for n in batch.ops if n.op == "batchnorm_train")
    statistics = evaluate64(dag_module.Dag(batch.args, [trained.results[1]]), args)[0]
    expected = 0.75 * args[mean_at] + 0.25 * statistics
    np.testing.assert_allclose(outputs[mean_at - 1], expected, rtol=1e-5, atol=1e-6)


def test_the_backward_is_written_layer_by_layer_with_each_update_after_its_gradient() -> None:
    """Framework order: the last layer's weight is updated before the backward reaches
    the first layer (tanh's gradient), the first layer's weights only after it."""
    step = training(mlp(), loss="mse")
    function = entry_function(step)
    ops = list(function.body.block.ops)
    position = {op: index for index, op in enumerate(ops)}
    returned = ops[-1].operands
    signature = training_signature(function)
    assert signature is not None
    names = [info.name for info in arg_infos(function)]
    updated_at = {
        names[argument]: position[returned[result].owner]  # type: ignore[index]
        for result, argument in signature.replaces
    }
    tanh_grad = next(i for i, op in enumerate(ops) if op.name == "graph.tanh_grad")
    assert updated_at["w2"] < tanh_grad < min(updated_at["w1"], updated_at["b1"])


def test_the_pass_reports_ops_weights_and_memory(
    tmp_path: Path, tasoc: Callable[..., Result]
) -> None:
    source = tmp_path / "mlp.mlir"
    source.write_text(str(mlp()))
    report = tmp_path / "r.json"
    result = tasoc(
        "opt",
        source,
        "-p",
        "autodiff{optimizer=adam}",
        "--report",
        report,
        "-o",
        tmp_path / "s.mlir",
    )
    assert result.code == 0, result
    import json

    section = json.loads(report.read_text())["sections"]["autodiff"]
    assert section["forward_ops"] == 4 and section["trained_weights"] == 3
    assert section["state_arguments"] == 7
    assert section["memory"]["peak_bytes"] > 0


def test_verify_each_checks_the_steps_loss(tmp_path: Path, tasoc: Callable[..., Result]) -> None:
    source = tmp_path / "conv.mlir"
    source.write_text(str(convnet()))
    result = tasoc(
        "opt", source, "--verify-each", "-p", "autodiff{loss=softmax-cross-entropy},cse",
        "-o", tmp_path / "s.mlir",
    )  # fmt: skip
    assert result.code == 0, result


def test_equality_rewrite_still_batches_nasrnn_inside_its_training_step() -> None:
    from xdsl.context import Context

    from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass

    model = get_model("nasrnn")
    step = training(model.build(hidden=64, length=2), loss="mse", optimizer="sgd")
    before = dag_module.from_module(step)
    rewritten = step.clone()
    # bounded by work (node limit, no polishing), not by the clock
    EqualityRewritePass(timeout=120, node_limit=1000, polish=0, retime=0).apply(
        Context(), rewritten
    )
    after = dag_module.from_module(rewritten)

    def matmuls(dag: object) -> int:
        return sum(1 for node in dag.ops if node.op == "matmul")  # type: ignore[attr-defined]

    assert matmuls(after) < matmuls(before)
    args = random_inputs(step, 0)
    # on the reference, the ground truth: the step's JAX lowering is checked elsewhere
    ours, theirs = run_reference(rewritten, args), run_reference(step, args)
    for new, old in zip(ours, theirs, strict=True):
        np.testing.assert_allclose(new, old, rtol=1e-4, atol=1e-5)


def test_a_thousand_op_forward_graph_is_differentiated_in_under_two_seconds() -> None:
    """Counted in this process's CPU seconds, not wall seconds, so that other work on
    the machine cannot fail it (0.3 s here; benchmarks/autodiff.py has the wall time)."""
    import time

    module = get_model("rnnlm").build()
    forward_ops = len(list(entry_function(module).body.block.ops))
    assert forward_ops > 1000
    start = time.process_time()
    training(module, loss="softmax-cross-entropy")
    assert time.process_time() - start < 2.0


# ---------------------------------------------------------------- bad input


def rank1_program() -> str:
    g = GraphBuilder()
    x = g.input("x", (3,))
    return str(g.build(g.mul(x, g.param("w", (3,)))))


def no_weights_program() -> str:
    g = GraphBuilder()
    return str(g.build(g.relu(g.input("x", (2, 3)))))


def labelled_program() -> str:
    g = GraphBuilder()
    x = g.input("x", (4, 3))
    g.input("target", (4, 5))
    return str(g.build(g.matmul(x, g.param("w", (3, 2)))))


def two_outputs_program() -> str:
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    y = g.mul(x, g.param("w", (2, 3)))
    return str(g.build(y, g.relu(y)))


BAD = [
    ("no weights", no_weights_program, "autodiff", "no float weights"),
    ("rank-1 cross-entropy", rank1_program, "autodiff{loss=softmax-cross-entropy}", "rank >= 2"),
    ("mse label mismatch", labelled_program, "autodiff{loss=mse labels=target}", "4x2xf32"),
    ("unknown labels", labelled_program, "autodiff{loss=mse labels=nope}", "no input argument"),
    ("unknown optimizer", labelled_program, "autodiff{optimizer=rmsprop}", "optimizer"),
    ("unknown option", labelled_program, "autodiff{momentun=0.5}", "momentun"),
    ("zero lr", labelled_program, "autodiff{lr=0}", "lr must be a positive"),
    ("negative lr", labelled_program, "autodiff{lr=-1}", "lr must be a positive"),
    ("beta of one", labelled_program, "autodiff{optimizer=adam beta2=1}", "beta2 must be below 1"),
    ("bn-momentum", labelled_program, "autodiff{bn-momentum=1.5}", "bn-momentum must be at most 1"),
    ("two outputs", two_outputs_program, "autodiff", "returns 2 values"),
]  # fmt: skip


@pytest.mark.parametrize(("case", "program", "pipeline", "fragment"), BAD, ids=[b[0] for b in BAD])
def test_bad_input_is_one_error_line_and_no_output(
    tmp_path: Path,
    tasoc: Callable[..., Result],
    case: str,
    program: Callable[[], str],
    pipeline: str,
    fragment: str,
) -> None:
    source = tmp_path / "in.mlir"
    source.write_text(program())
    out = tmp_path / "out.mlir"
    result = tasoc("opt", source, "-p", pipeline, "-o", out)
    assert result.code == 1
    lines = result.err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("tasoc: error: "), result
    assert fragment in lines[0]
    assert not out.exists()


def test_a_training_step_is_not_differentiated_again(
    tmp_path: Path, tasoc: Callable[..., Result]
) -> None:
    source = tmp_path / "step.mlir"
    source.write_text(str(training(mlp(), loss="mse")))
    result = tasoc("opt", source, "-p", "autodiff", "-o", tmp_path / "out.mlir")
    assert result.code == 1 and "already a training step" in result.err
    assert len(result.err.strip().splitlines()) == 1
