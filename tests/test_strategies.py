"""`tasoc.verify`: the hypothesis strategies and numeric equivalence checking."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any, NamedTuple

import ml_dtypes
import numpy as np
import pytest
from conftest import examples
from hypothesis import Phase, find, given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.parser import Parser
from xdsl.traits import ConstantLike

from tasoc.cost import AnalyticCost
from tasoc.ir import graph as G
from tasoc.ir import soap
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag, from_module
from tasoc.ir.op_sets import ops_with
from tasoc.ir.opdef import op_defs
from tasoc.ir.parallel import is_sharded, unsharded
from tasoc.ir.program import arg_infos, entry_function
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.shard_plan import Plan, write_sharded
from tasoc.ir.soap import Mesh
from tasoc.ir.traits import Training
from tasoc.passes.autodiff.rules import VJP
from tasoc.verify.equivalence import compare, equivalent
from tasoc.verify.strategies import (
    EMITTERS,
    NO_GRADIENT,
    graphs,
    meshes,
    shardings,
    tensor_sigs,
)


def parse(text: str) -> builtin.ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, G.Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def graph_ops(module: builtin.ModuleOp) -> list[G.GraphOp]:
    return [op for op in module.walk() if isinstance(op, G.GraphOp)]


# ---------------------------------------------------------------- strategies


def test_every_op_has_an_emitter() -> None:
    assert set(EMITTERS) == set(G.OPS_BY_NAME)


@settings(max_examples=examples(40), deadline=None)
@given(module=graphs(max_ops=12, dtypes=[DType.F32, DType.F16, DType.BF16]))
def test_generated_graphs_verify_and_round_trip_through_text(module: builtin.ModuleOp) -> None:
    module.verify()
    text = str(module)
    reparsed = parse(text)
    reparsed.verify()
    assert str(reparsed) == text


@settings(max_examples=30, deadline=None)
@given(sig=tensor_sigs(min_rank=1, max_rank=3, max_side=5, dtypes=["f16", "i32"]))
def test_tensor_sigs_stay_in_bounds(sig: TensorSig) -> None:
    assert 1 <= sig.rank <= 3
    assert all(1 <= d <= 5 for d in sig.shape)
    assert sig.dtype in (DType.F16, DType.I32)


class OpSummary(NamedTuple):
    """What the coverage tests look at, small enough for hypothesis to print."""

    name: str
    attrs: dict[str, Any]
    consumers: tuple[str, ...]


def summarize(module: builtin.ModuleOp) -> tuple[tuple[OpSummary, ...], bool]:
    """The module's graph ops and whether it has a weight argument."""
    ops = tuple(
        OpSummary(op.op_name(), op.py_attrs(), tuple(u.operation.name for u in op.results[0].uses))
        for op in graph_ops(module)
    )
    return ops, any(info.is_param for info in arg_infos(entry_function(module)))


def findable(condition: Callable[[tuple[OpSummary, ...], bool], bool], **kwargs: Any) -> None:
    """Assert that `graphs(**kwargs)` can draw a module satisfying `condition`."""
    find(
        graphs(**kwargs).map(summarize),
        lambda summary: condition(*summary),
        settings=settings(max_examples=300, database=None, phases=[Phase.generate]),
    )


@pytest.mark.parametrize(
    "predicate",
    [
        lambda attrs: attrs["groups"] > 1,
        lambda attrs: attrs["strides"] == (2, 2),
        lambda attrs: isinstance(attrs["padding"], tuple),
        lambda attrs: attrs["padding"] == "valid",
        lambda attrs: attrs["activation"] == "relu",
    ],
)
def test_convolutions_cover_their_attributes(predicate: Callable[[dict[str, Any]], bool]) -> None:
    findable(
        lambda ops, _: any(op.name == "conv2d" and predicate(op.attrs) for op in ops),
        ops=["conv2d"],
        max_ops=1,
    )


@pytest.mark.parametrize(
    ("constant", "consumer"),
    [("c_pool", "conv2d"), ("i_conv", "conv2d"), ("enlarge", "conv2d"), ("i_matmul", "matmul")],
)
def test_constants_feed_the_ops_they_exist_for(constant: str, consumer: str) -> None:
    findable(
        lambda ops, _: any(
            op.name == constant and f"graph.{consumer}" in op.consumers for op in ops
        ),
        ops=[constant, consumer],
        max_ops=3,
    )


def test_graphs_mix_many_op_kinds_and_mark_weights() -> None:
    findable(lambda ops, has_weight: has_weight and len({op.name for op in ops}) >= 6)


def test_graphs_draw_programs_that_cost_nothing_and_ops_that_cancel() -> None:
    """The cases where a search's costs are zero (issue 13): outputs that are constants or
    computed from weights alone, and a transpose of a transpose."""
    forward_ops = sorted(EMITTERS.keys() - ops_with(Training))  # what a forward program has
    find(
        graphs(max_ops=12, ops=forward_ops),
        lambda module: (
            from_module(module).num_ops > 0 and AnalyticCost().cost(from_module(module)) == 0.0
        ),
        settings=settings(max_examples=1000, database=None, phases=[Phase.generate]),
    )
    findable(
        lambda ops, _: any(op.name == "transpose" and "graph.transpose" in op.consumers
                           for op in ops),
        ops=["transpose"],
        max_ops=2,
    )  # fmt: skip


def test_trainable_graphs_draw_only_ops_autodiff_differentiates() -> None:
    forward = EMITTERS.keys() - ops_with(Training) - NO_GRADIENT
    # Constants have no operands, batchnorm trains as batchnorm_train, and the
    # comparisons and logic ops make i1 values, which no gradient reaches.
    without_rule = {"batchnorm", "compare", "not", "and", "or", "xor"}
    assert forward - VJP.keys() == ops_with(ConstantLike) | without_rule
    assert not NO_GRADIENT & VJP.keys()


def test_graphs_draw_the_new_element_types_and_reduce_kinds() -> None:
    findable(lambda ops, _: any(op.attrs.get("to") == DType.BOOL for op in ops), ops=["cast"])
    findable(lambda ops, _: any(op.attrs.get("kind") == "prod" for op in ops), ops=["reduce"])


@settings(max_examples=20, deadline=None)
@given(module=graphs(max_ops=4, ops=["reduce"], trainable=True))
def test_trainable_graphs_reduce_only_as_reduce_grad_can(module: builtin.ModuleOp) -> None:
    reductions = [op for op in graph_ops(module) if isinstance(op, G.ReduceOp)]
    assert all(op.py_attrs()["kind"] in ("sum", "mean", "max") for op in reductions)


def test_graphs_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="unknown or no op names"):
        graphs(ops=["conv3d"])
    with pytest.raises(ValueError, match="min_ops <= max_ops"):
        graphs(min_ops=3, max_ops=2)
    with pytest.raises(ValueError, match="float types"):
        graphs(dtypes=["i32"])


# ------------------------------------------------------------ parallel programs

SHARDABLE = sorted(op_defs().keys() & EMITTERS.keys())
"""The op kinds `shardings()` can configure (every op with a SOAP rule)."""


@settings(max_examples=50, deadline=None)
@given(mesh=meshes(max_devices=6, max_axes=3))
def test_meshes_stay_in_bounds_and_name_their_axes(mesh: Mesh) -> None:
    assert 1 <= len(mesh.axes) <= 3
    assert mesh.size <= 6
    assert mesh.axis_names == (("d",) if len(mesh.axes) == 1 else ("x", "y", "z")[: len(mesh.axes)])
    if mesh.devices is not None:
        assert len(set(mesh.devices)) == mesh.size and all(0 <= d < 6 for d in mesh.devices)


def test_meshes_draw_device_groups_several_axes_and_axes_of_size_one() -> None:
    settings_ = settings(max_examples=300, database=None, phases=[Phase.generate])
    find(
        meshes(max_axes=3), lambda m: len(m.axes) == 3 and m.devices is not None, settings=settings_
    )
    find(meshes(), lambda m: m.devices is not None and m.devices != tuple(range(m.size)),
         settings=settings_)  # fmt: skip
    find(meshes(), lambda m: 1 in dict(m.axes).values() and m.size > 1, settings=settings_)
    find(meshes(), lambda m: m.size == 8, settings=settings_)


def test_parallel_strategies_reject_bad_arguments(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(ValueError, match="max_devices >= 1"):
        meshes(max_devices=0)
    with pytest.raises(ValueError, match="1 <= max_axes <= 6"):
        meshes(max_axes=7)
    g = GraphBuilder()
    dag = from_module(g.build(g.relu(g.input("x", (4, 8)))))
    monkeypatch.delitem(op_defs(), "relu")
    with pytest.raises(ValueError, match="ops without a SOAP rule: relu"):
        shardings(dag, Mesh("mesh", (("d", 2),)))


def split(config: Mapping[str, tuple[str, ...]]) -> dict[str, tuple[str, ...]]:
    """The factors a configuration splits (an unsplit one may be named with no axes)."""
    return {factor: axes for factor, axes in config.items() if axes}


def check_plan(dag: Dag, plan: Plan, mesh: Mesh) -> None:
    """Every op's configuration is one of its legal ones, its operands read in the
    shardings the configuration needs, and its results in those they imply."""
    for node in dag.ops:
        if not node.inputs:
            assert node not in plan.configs
            continue
        rule = soap.rule_of(node.op, [v.sig for v in node.inputs], dict(node.attrs), node.sigs)
        assert plan.configs[node] in list(soap.configurations(rule, mesh))
        reads = plan.operands[node]
        for value, read in zip(node.inputs, reads, strict=True):
            read.check(value.sig, mesh)
        results, config = soap.propagate(rule, reads, mesh.name)
        assert split(config) == split(plan.configs[node])
        assert [plan.values[v] for v in node.results] == results
    for value, target in zip(dag.outputs, plan.outputs, strict=True):
        target.check(value.sig, mesh)
        assert not target.unreduced


@settings(max_examples=examples(25), deadline=None)
@given(data=st.data(), module=graphs(ops=SHARDABLE, max_ops=4), mesh=meshes(max_devices=4))
def test_shardings_are_plans_the_writer_turns_into_equal_sharded_programs(
    data: st.DataObject, module: builtin.ModuleOp, mesh: Mesh
) -> None:
    dag = from_module(module)
    plan = data.draw(shardings(dag, mesh))
    check_plan(dag, plan, mesh)
    sharded = module.clone()
    write_sharded(sharded, dag, plan, mesh)
    sharded.verify()
    assert is_sharded(sharded)
    assert equivalent(unsharded(sharded), module).ok


def test_shardings_split_ops_and_shrink_to_the_unsplit_program() -> None:
    g = GraphBuilder()
    module = g.build(g.matmul(g.input("x", (4, 8)), g.param("w", (8, 4))))
    dag, mesh = from_module(module), Mesh("mesh", (("x", 2), ("y", 2)))
    (matmul,) = dag.ops
    drawn = shardings(dag, mesh)
    settings_ = settings(max_examples=300, database=None, phases=[Phase.generate])
    partial = find(drawn, lambda plan: plan.values[matmul.out].unreduced, settings=settings_)
    assert partial.configs[matmul].get("k")
    simplest = find(drawn, lambda plan: True, settings=settings(database=None))
    assert simplest.configs[matmul] == {}


# --------------------------------------------------------------- equivalence


def test_compare_scales_the_absolute_tolerance_by_the_output_magnitude() -> None:
    expected = np.array([1000.0, 0.0], np.float32)
    assert compare([expected], [expected + np.float32([0.0, 5e-3])]).ok
    assert not compare([expected], [expected + np.float32([0.0, 5e-2])]).ok
    assert not compare([expected], [expected * np.float32(1.001)]).ok


def test_compare_reports_errors_per_output() -> None:
    expected = [np.array([1.0, 2.0], np.float32), np.array([3, 4], np.int32)]
    actual = [np.array([1.0, 2.5], np.float32), np.array([3, 4], np.int32)]
    report = compare(expected, actual)
    assert not report.ok
    assert not report
    first, second = report.outputs
    assert first.max_abs_error == pytest.approx(0.5)
    assert first.max_rel_error == pytest.approx(0.25)
    assert second.ok and second.max_abs_error == 0
    assert report.summary().startswith("NOT equivalent: output #0 (2xf32): max abs error 0.5")
    assert "\n" not in report.summary()


def test_compare_uses_looser_defaults_for_half_precision() -> None:
    for dtype, close, far in [(np.float16, 1.005, 1.05), (ml_dtypes.bfloat16, 1.03, 1.1)]:
        expected = np.array([1.0, 2.0], dtype)
        assert compare([expected], [(expected.astype(np.float32) * close).astype(dtype)]).ok
        assert not compare([expected], [(expected.astype(np.float32) * far).astype(dtype)]).ok
    integers = np.array([7], np.int64)
    assert not compare([integers], [integers + 1], rtol=1e-3, atol=0).ok
    assert not compare([integers], [integers + 1]).ok


def test_compare_handles_non_finite_values_and_mismatched_types() -> None:
    special = np.array([np.nan, np.inf, -np.inf, 1], np.float32)
    assert compare([special], [special.copy()]).ok
    assert not compare([special], [np.array([0, np.inf, -np.inf, 1], np.float32)]).ok
    assert not compare([special], [np.array([np.nan, 1e30, -np.inf, 1], np.float32)]).ok
    shape = compare([np.zeros((2, 3), np.float32)], [np.zeros((3, 2), np.float32)])
    assert "shape differs: expected 2x3xf32, got 3x2xf32" in shape.summary()
    dtype = compare([np.zeros(2, np.float32)], [np.zeros(2, np.float16)])
    assert "dtype differs" in dtype.summary() and not dtype.ok
    count = compare([np.zeros(2)], [])
    assert count.summary() == "NOT equivalent: expected 1 outputs, got 0"


def two_layer(activation: str) -> builtin.ModuleOp:
    g = GraphBuilder()
    x, w = g.input("x", (4, 8)), g.param("w", (8, 8))
    h = g.matmul(x, w)
    return g.build(g.relu(h) if activation == "relu" else g.gelu(h))


@pytest.mark.parametrize("backend", ["numpy", "jax"])
def test_equivalent_runs_both_programs_on_the_same_inputs(backend: str) -> None:
    assert equivalent(two_layer("relu"), two_layer("relu"), backend=backend).ok
    report = equivalent(two_layer("relu"), two_layer("gelu"), seed=3, backend=backend)
    assert not report.ok
    assert report.summary().startswith("NOT equivalent: output #0 (4x8xf32)")


def test_equivalent_refuses_different_signatures_and_unknown_backends() -> None:
    g = GraphBuilder()
    other = g.build(g.relu(g.input("x", (4, 9))))
    with pytest.raises(ValueError, match="programs take different arguments"):
        equivalent(two_layer("relu"), other)
    with pytest.raises(ValueError, match="unknown backend 'torch'"):
        equivalent(two_layer("relu"), two_layer("relu"), backend="torch")  # type: ignore[arg-type]
