"""Convolution weights laid out once (`tasoc.passes.rewrite.weight_layout`): the graph
computes the same (the NumPy reference of the input against JAX running the laid-out
graph with its weights preprocessed), what is preprocessed and what the step reads,
the fusion model's layout views, and equality-rewrite offering the layout to its
cost model."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rewrite_helpers import arg, module_of

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax import lower
from tasoc.backends.numpy import run_reference
from tasoc.cost import CPU, H100, AnalyticCost, roofline
from tasoc.cost.fusion import layout_views, plan_fusion, relaid_out_weights, relayout
from tasoc.cost.measured import preprocessed, weight_preprocessing
from tasoc.ir.dag import Dag, Node, to_module
from tasoc.passes.rewrite.equality_rewrite import (
    EqualityRewritePass,
    _input_laid_out,
    _layout_kept,
    offer_weight_layout,
)
from tasoc.passes.rewrite.retime import keep_measured_fastest
from tasoc.passes.rewrite.weight_layout import HWIO, NAME, OIHW, lay_out_conv_weights
from tasoc.passes.search import Deadline, SearchOutcome, StopReason
from tasoc.verify.equivalence import compare

CONV = {"strides": (1, 1), "padding": "same", "activation": "none"}


def small_cnn() -> Dag:
    """Three convolutions: a parameter weight also read by an op of the step, a grouped one,
    and one whose weight is computed from a parameter (`enlarge`); then one whose
    weight is an activation, which stays as it is."""
    x = arg(0, "x", 1, 4, 6, 6)
    w = arg(1, "w", 4, 4, 3, 3, param=True)
    g = arg(2, "g", 4, 2, 3, 3, param=True)
    small = arg(3, "s", 4, 4, 1, 1, param=True)
    h = Node("conv2d", [x.out, w.out], groups=1, **CONV)
    h = Node("conv2d", [Node("relu", [h.out]).out, g.out], groups=2, **CONV)
    wide = Node("enlarge", [small.out], kernel=(3, 3))
    h = Node("conv2d", [h.out, wide.out], groups=1, **CONV)
    kernel = Node("reshape", [h.out], shape=(4, 4, 3, 3))  # an activation as a weight
    y = Node("conv2d", [x.out, kernel.out], groups=1, **CONV)
    return Dag([x, w, g, small], [y.out, Node("mul", [w.out, kernel.out]).out])


def test_laid_out_weights_compute_what_the_input_does_under_numpy_and_jax() -> None:
    dag = small_cnn()
    laid_out, changed = lay_out_conv_weights(dag)
    assert changed == 3  # not the convolution reading an activation
    values = random_inputs(module_of(dag), seed=0)
    expected = run_reference(module_of(dag), values)
    assert compare(expected, run_reference(module_of(laid_out), values)).ok
    step, step_values = preprocessed(laid_out, values)
    check = compare(expected, lower(to_module(step))(*step_values))
    assert check.ok, check.summary()


def test_run_bench_times_the_step_with_weights_laid_out_once(tasoc, tmp_path: Path) -> None:
    """`tasoc run --bench` computes the weight-only values once before its runs (what
    the rewrite's measured gain assumes), and only where there are some."""
    laid_out, _ = lay_out_conv_weights(small_cnn())
    for dag, note in ((small_cnn(), "(1 weight-only value"), (laid_out, "(3 weight-only values")):
        path = tmp_path / "cnn.mlir"
        path.write_text(str(module_of(dag)))
        result = tasoc("run", str(path), "--check", "--bench", "2")
        assert result.code == 0, result.err
        assert "check: equivalent to the numpy reference" in result.out
        bench = next(line for line in result.out.splitlines() if line.startswith("bench:"))
        assert bench.endswith(f"{note} computed once)"), bench


NAME_OF_PASS = EqualityRewritePass.name


def conv_relu() -> Dag:
    """One convolution of a parameter weight and its relu: a step a rule matches."""
    x = arg(0, "x", 2, 4, 6, 6)
    w = arg(1, "w", 4, 4, 3, 3, param=True)
    return Dag([x, w], [Node("relu", [Node("conv2d", [x.out, w.out], groups=1, **CONV).out]).out])


@pytest.mark.parametrize("training", [False, True])
def test_a_training_step_is_priced_with_its_weights_changing(
    tasoc, tmp_path: Path, training: bool
) -> None:
    """A training step's weights change every step: the cost model charges what is
    computed from them at every step and no layout is offered; an inference program
    gets both."""
    path = tmp_path / "conv.mlir"
    path.write_text(str(module_of(conv_relu())))
    pipeline = "equality-rewrite{timeout=20 retime=0}"
    if training:
        pipeline = "autodiff{optimizer=sgd}," + pipeline
    report = tmp_path / "report.json"
    result = tasoc(
        "opt", str(path), "-p", pipeline, "-o", tmp_path / "out.mlir", "--report", report
    )
    assert result.code == 0, result.err
    (rewrite,) = (p for p in json.loads(report.read_text())["passes"] if p["name"] == NAME_OF_PASS)
    section = rewrite["section"]
    assert ("weight-only ops preprocessed" in section["cost_model"]) is not training
    assert ("weight_layout" in section) is not training


def test_a_convolution_no_rule_matches_is_still_offered_the_layout(tasoc, tmp_path: Path) -> None:
    """No rule matches a lone convolution, but its weight is laid out by the default
    pipeline's prediction (the analytic CPU model charges the relayout it saves)."""
    x, w = arg(0, "x", 1, 4, 6, 6), arg(1, "w", 4, 4, 3, 3, param=True)
    path = tmp_path / "conv.mlir"
    path.write_text(
        str(module_of(Dag([x, w], [Node("conv2d", [x.out, w.out], **CONV, groups=1).out])))
    )
    report = tmp_path / "report.json"
    pipeline = "equality-rewrite{timeout=20 retime=0}"
    result = tasoc("opt", str(path), "-p", pipeline, "-o", tmp_path / "o.mlir", "--report", report)
    assert result.code == 0, result.err
    (rewrite,) = (p for p in json.loads(report.read_text())["passes"] if p["name"] == NAME_OF_PASS)
    section = rewrite["section"]
    assert "note" not in section and section["weight_layout"]["taken"]
    assert section["rules_applied"] == {NAME: 1} and section["predicted_speedup"] > 1


def test_the_step_reads_each_weight_in_hwio_and_transposes_it_only_as_a_view() -> None:
    laid_out, _ = lay_out_conv_weights(small_cnn())
    step, weights = weight_preprocessing(laid_out)
    assert weights is not None
    folded = [a.sigs[0].shape for a in step.args[len(laid_out.args) :]]
    assert folded == [(3, 3, 4, 4), (3, 3, 2, 4), (3, 3, 4, 4)]  # HWIO, laid out once
    transposes = [node for node in step.ops if node.op == "transpose"]
    assert [node.attr("perm") for node in transposes] == [OIHW] * 3
    assert all(node.inputs[0].node.is_arg for node in transposes)
    assert {node.attr("perm") for node in weights.ops if node.op == "transpose"} == {HWIO}
    # the parameter another op reads is still read as it was
    assert any(node.op == "mul" and node.inputs[0].node.is_arg for node in step.ops)


def test_a_view_runs_in_its_convolutions_kernel_and_saves_the_weights_relayout() -> None:
    """Under XLA:CPU each OIHW weight argument (or preprocessed weight-only value) a
    convolution reads is relaid out on every call, a kernel of its own; a view of the
    HWIO copy costs nothing, a weight computed in the step or a constant pays no
    relayout. A device that relays out nothing prices both graphs alike."""
    dag = small_cnn()
    laid_out, _ = lay_out_conv_weights(dag)
    assert len(layout_views(laid_out)) == 3 and not layout_views(dag)
    before, after = plan_fusion(dag), plan_fusion(laid_out)
    assert before.fused.count(-1) == after.fused.count(-1)  # no kernel more or less
    w, g = dag.args[1].out, dag.args[2].out
    wide = next(node for node in dag.ops if node.op == "enlarge").out
    assert relaid_out_weights(before) == [w, g, wide]  # not the activation's
    assert relaid_out_weights(after) == []
    launch = CPU.launch_overhead_s
    relayouts = sum(launch + roofline(relayout(v), -1, False, CPU) for v in (w, g, wide))
    cpu = AnalyticCost(CPU)
    assert cpu.cost(dag) - cpu.cost(laid_out) == pytest.approx(relayouts, rel=1e-9)
    gpu = AnalyticCost(H100)
    assert gpu.cost(laid_out) == pytest.approx(gpu.cost(dag), rel=1e-9)


def test_a_training_step_pays_the_relayout_either_way() -> None:
    """With the weights changing every step nothing is preprocessed: the laid-out
    weight's transpose runs on every call, the very op XLA relays out with, so the
    layout is priced as no gain; a weight computed in the step pays no relayout."""
    dag = small_cnn()
    laid_out, _ = lay_out_conv_weights(dag)
    w, g = dag.args[1].out, dag.args[2].out
    assert relaid_out_weights(plan_fusion(dag, fold_weights=False)) == [w, g]
    model = AnalyticCost(CPU, fold_weights=False)
    assert model.cost(laid_out) == pytest.approx(model.cost(dag), rel=1e-9)


def test_laying_out_twice_changes_nothing_more() -> None:
    laid_out, _ = lay_out_conv_weights(small_cnn())
    assert lay_out_conv_weights(laid_out) == (laid_out, 0)


def outcome_of(dag: Dag, cost: float) -> SearchOutcome[Dag]:
    return SearchOutcome(dag, cost, cost, 0.0, StopReason.SATURATED, Counter({"r": 1}))


def test_the_layout_is_taken_where_the_cost_model_prices_it_cheaper() -> None:
    dag, model = small_cnn(), AnalyticCost(CPU)
    offered, laid_out = offer_weight_layout(
        outcome_of(dag, model.cost(dag)), model, Deadline.never()
    )
    assert offered.best == laid_out == lay_out_conv_weights(dag)[0]
    assert offered.applied == Counter({"r": 1, NAME: 3})
    assert offered.details["weight_layout"]["taken"]
    assert offered.candidates[0] == (offered.best, offered.cost_after)


def test_a_model_that_prices_the_layout_alike_does_not_take_it() -> None:
    dag, model = small_cnn(), AnalyticCost(H100)  # cuDNN reads OIHW: no relayout
    offered, laid_out = offer_weight_layout(
        outcome_of(dag, model.cost(dag)), model, Deadline.never()
    )
    assert offered.best == dag and offered.applied == Counter({"r": 1})
    layout = offered.details["weight_layout"]
    assert layout["convolutions"] == 3 and not layout["taken"]
    assert layout["predicted_speedup"] == pytest.approx(1.0)
    assert laid_out in dict(offered.candidates)  # for re-timing to measure


@pytest.mark.parametrize("kept", [True, False])
def test_re_timing_decides_whether_the_layout_is_kept(kept: bool) -> None:
    dag, model = small_cnn(), AnalyticCost(H100)
    offered, laid_out = offer_weight_layout(
        outcome_of(dag, model.cost(dag)), model, Deadline.never()
    )
    assert laid_out is not None
    retimed = _layout_kept(replace(offered, best=laid_out if kept else dag), laid_out)
    assert retimed.details["weight_layout"]["kept"] is kept
    assert (NAME in retimed.applied) is kept


def test_with_no_time_to_re_time_the_input_is_kept_with_its_weights_laid_out() -> None:
    """Re-timing that measures nothing keeps the input; where the model took the
    layout, the input is returned laid out (by prediction), and the search's other
    rewrites are not."""
    dag, model = small_cnn(), AnalyticCost(CPU)
    search_best = Dag(dag.args, [Node("relu", [dag.outputs[0]]).out, dag.outputs[1]])
    best = outcome_of(search_best, model.cost(search_best))
    offered, laid_out = offer_weight_layout(
        replace(best, cost_before=model.cost(dag)), model, Deadline.never()
    )
    assert laid_out is not None and offered.best == laid_out
    expired = Deadline(end=0.0, start=0.0, clock=lambda: 1.0)
    kept = keep_measured_fastest(offered, dag, 3, expired, seed=0)
    assert kept.best == dag and kept.details["retimed"] == []
    kept = _input_laid_out(_layout_kept(kept, laid_out), dag, model, expired)
    assert kept.best == lay_out_conv_weights(dag)[0]
    assert kept.cost_after == pytest.approx(model.cost(kept.best))
    assert kept.applied == Counter({NAME: 3})
    assert kept.details["weight_layout"]["by_prediction"]


def test_a_graph_without_a_convolution_weight_to_lay_out_is_offered_nothing() -> None:
    x, w = arg(0, "x", 4, 4), arg(1, "w", 4, 4, param=True)
    dag = Dag([x, w], [Node("matmul", [x.out, w.out]).out])
    outcome = outcome_of(dag, 1.0)
    assert offer_weight_layout(outcome, AnalyticCost(CPU), Deadline.never()) == (outcome, None)


def test_the_summary_says_whether_the_layout_was_taken() -> None:
    layout = {"convolutions": 53, "predicted_speedup": 1.2, "taken": True}
    section = {"rules_applied": {NAME: 53}, "ops_before": 9, "ops_after": 115,
               "predicted_speedup": 1.2, "weight_layout": layout}  # fmt: skip
    assert EqualityRewritePass().summary(section).details == (
        "convolution weights laid out once (HWIO, 53 convolutions): predicted 1.20x, taken",
    )
    layout.update(taken=False, kept=True)
    assert EqualityRewritePass().summary(section).details == (
        "convolution weights laid out once (HWIO, 53 convolutions): predicted 1.20x, "
        "not taken, re-timing kept it",
    )
    layout.update(taken=True, by_prediction=True)
    section.update(retimed=[], retime_seconds=0.4)
    assert EqualityRewritePass().summary(section).details == (
        "re-timing measured no candidate against the input in the 0.4 s left: kept the "
        "input, its convolution weights laid out as predicted",
        "convolution weights laid out once (HWIO, 53 convolutions): predicted 1.20x, "
        "taken, by prediction",
    )


def test_the_reference_and_jax_agree_on_a_grouped_convolution_read_in_hwio() -> None:
    """The view XLA folds is a plain transpose: JAX on the step equals JAX on the input."""
    dag = small_cnn()
    values = random_inputs(module_of(dag), seed=1)
    laid_out, _ = lay_out_conv_weights(dag)
    step, step_values = preprocessed(laid_out, values)
    direct = lower(module_of(dag))(*values)
    for want, got in zip(direct, lower(to_module(step))(*step_values), strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
