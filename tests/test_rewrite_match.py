"""Matching rules on light graphs and applying them (`tasoc.passes.rewrite.match`,
`apply`, `fold`): multi-output rules, parameters, shape preconditions, the conditions
that make a subgraph replaceable, cycle rejection, and with hypothesis that every
application computes what the original did."""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rewrite_helpers import (
    ADD_COMMUTES,
    BY_NAME,
    LIBRARY,
    MATMUL_FUSION,
    RULES,
    arg,
    matches,
    module_of,
)
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.ir import dag
from tasoc.ir.dag import Dag, Node
from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import check_rule
from tasoc.passes.rewrite.apply import apply
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.verify.equivalence import compare, equivalent
from tasoc.verify.instances import instances
from tasoc.verify.strategies import graphs

CONV_RELU = BY_NAME["g3-0206"]
"""relu(conv2d{$strides, $padding, $activation}(x, y)) -> conv2d{activation = relu}."""
CONV_ENLARGE = BY_NAME["g3-0287"]
"""conv(x, y) + conv(x, z) -> conv(x, y + enlarge(z)), where $padding == "same"."""
CONCAT_ASSOC = BY_NAME["g3-0009"]
"""concat{$axis}(concat{$axis}(x, y), z) -> concat{$axis}(x, concat{$axis}(y, z))."""

CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


def assert_same_results(before: Dag, after: Dag) -> None:
    report = equivalent(module_of(before), module_of(after))
    assert report.ok, report.summary()


# -------------------------------------------------------------------- the library


def test_directed_reads_every_rule_both_ways_where_it_can() -> None:
    assert len(LIBRARY) < len(RULES) < 2 * len(LIBRARY)
    for rule in RULES:
        check_rule(rule)
        assert rule.src.ops
    names = set(BY_NAME)
    # relu(conv{$activation}) <- conv{relu} would have to invent $activation.
    assert "g3-0206.rev" not in names
    # add(y, x) -> add(x, y) is add(x, y) -> add(y, x) with the inputs renamed.
    assert "g3-0001.rev" not in names
    # A rule whose target is a bare input (x * ones -> x) is not read backwards.
    assert "g3-0010" in names and "g3-0010.rev" not in names
    assert "g3-0197" in names and "g3-0197.rev" in names


def test_every_rule_matches_its_own_source_and_rewrites_it_to_its_target() -> None:
    """The matcher is complete on each rule's own source (at its first small instance),
    and applying the match builds exactly the rule's target (hash-consed equality)."""
    for rule in RULES:
        instance = next(instances(rule, bound=3))
        src, tgt = rule.instantiate(dict(instance.shapes), dict(instance.params))
        bound = {node.attr("name"): node.out for node in src.args}
        found = [m for m in matches(src, rule) if m.inputs == bound]
        assert len(found) == 1, f"{rule.name} at {instance}"
        assert found[0].outputs == src.outputs
        assert apply(src, found[0]) == tgt, f"{rule.name} at {instance}"


# ------------------------------------------------------------------ multi-output


def two_matmuls() -> tuple[Dag, dict[str, Node]]:
    a = arg(0, "a", 4, 5)
    b = arg(1, "b", 5, 3, param=True)
    c = arg(2, "c", 5, 2, param=True)
    ab = Node("matmul", [a.out, b.out])
    ac = Node("matmul", [a.out, c.out])
    return Dag([a, b, c], [ab.out, ac.out]), {"a": a, "b": b, "c": c, "ab": ab, "ac": ac}


def test_matmul_fusion_matches_both_matmuls_in_both_orders() -> None:
    graph, n = two_matmuls()
    found = matches(graph, MATMUL_FUSION)
    assert [(m.inputs["x"], m.inputs["y"]) for m in found] == [
        (n["b"].out, n["c"].out),
        (n["c"].out, n["b"].out),
    ]
    first = found[0]
    assert first.inputs["z"] == n["a"].out
    assert first.outputs == (n["ab"].out, n["ac"].out)
    assert first.rule == MATMUL_FUSION and first.params == {}

    fused = apply(graph, first)
    assert fused is not None
    assert sorted(node.op for node in fused.ops) == ["concat", "matmul", "split"]
    assert fused.outputs[0].node is fused.outputs[1].node  # both read the one split
    assert_same_results(graph, fused)


def test_a_match_needs_distinct_nodes_and_one_value_per_input() -> None:
    a = arg(0, "a", 4, 5)
    b = arg(1, "b", 5, 3)
    ab = Node("matmul", [a.out, b.out])
    # Two outputs reading one matmul are not two matmuls of the pattern.
    assert matches(Dag([a, b], [ab.out, Node("relu", [ab.out]).out]), MATMUL_FUSION) == []
    # matmul(a, b) and matmul(b', b) do not share their left operand.
    c = arg(2, "c", 2, 5)
    cb = Node("matmul", [c.out, b.out])
    assert matches(Dag([a, b, c], [ab.out, cb.out]), MATMUL_FUSION) == []


def test_a_substitution_that_would_create_a_cycle_is_refused() -> None:
    """Thesis Fig. 2.6: fusing the matmuls of matmul(a, relu(matmul(a, b))) would make
    the fused matmul read its own result."""
    a = arg(0, "a", 4, 4)
    b = arg(1, "b", 4, 4, param=True)
    inner = Node("matmul", [a.out, b.out])
    outer = Node("matmul", [a.out, Node("relu", [inner.out]).out])
    graph = Dag([a, b], [outer.out])
    found = matches(graph, MATMUL_FUSION)
    assert len(found) == 2  # a legal match of the pattern...
    assert all(apply(graph, m) is None for m in found)  # ...that cannot be applied


# ------------------------------------------------------------------ conv + relu


def conv_relu(**conv: object) -> tuple[Node, Node, Node, Node]:
    x = arg(0, "x", 1, 3, 6, 6)
    w = arg(1, "w", 4, 3, 3, 3, param=True)
    convolution = Node("conv2d", [x.out, w.out], **{**CONV, **conv})
    return x, w, convolution, Node("relu", [convolution.out])


def test_conv_relu_fusion_binds_parameters_from_the_node() -> None:
    x, w, _, relu = conv_relu(strides=(2, 2), padding="valid")
    graph = Dag([x, w], [relu.out])
    [found] = matches(graph, CONV_RELU)
    assert found.params == {"strides": (2, 2), "padding": "valid", "activation": "none"}
    assert found.inputs == {"x": x.out, "y": w.out}
    assert found.outputs == (relu.out,)
    fused = apply(graph, found)
    assert fused is not None
    [node] = fused.ops
    assert node.op == "conv2d" and node.attr("activation") == "relu"
    assert node.attr("strides") == (2, 2) and node.attr("padding") == "valid"
    assert_same_results(graph, fused)


def test_an_internal_value_read_outside_the_match_is_not_matched() -> None:
    x, w, convolution, relu = conv_relu()
    # The convolution is also an output, or also feeds another op: fusing would
    # leave it alive and compute it twice.
    assert matches(Dag([x, w], [relu.out, convolution.out]), CONV_RELU) == []
    other = Node(
        "pool2d", [convolution.out], kind="max", kernel=(2, 2), strides=(2, 2), padding="valid"
    )
    assert matches(Dag([x, w], [relu.out, other.out]), CONV_RELU) == []
    assert len(matches(Dag([x, w], [relu.out]), CONV_RELU)) == 1


def test_a_parameter_binds_one_value_wherever_the_rule_names_it() -> None:
    x, y = arg(0, "x", 2, 2), arg(1, "y", 2, 2)

    def nested(inner_axis: int, outer_axis: int) -> Dag:
        inner = Node("concat", [x.out, y.out], axis=inner_axis)
        z = arg(2, "z", *inner.sigs[0].shape)  # fits the outer concat on either axis
        return Dag([x, y, z], [Node("concat", [inner.out, z.out], axis=outer_axis).out])

    graph = nested(1, 1)
    [found] = matches(graph, CONCAT_ASSOC)
    assert found.params == {"axis": 1}
    rewritten = apply(graph, found)
    assert rewritten is not None and rewritten != graph
    assert_same_results(graph, rewritten)
    assert matches(nested(0, 1), CONCAT_ASSOC) == []


# ---------------------------------------------------------- preconditions, typing


def test_shape_terms_must_give_the_nodes_attributes() -> None:
    """concat then split back (`sizes = [dim(x, $axis), dim(y, $axis)]`) -> x, y."""
    undo = BY_NAME["g3-0191"]
    x, y = arg(0, "x", 2, 3), arg(1, "y", 3, 3)
    joined = Node("concat", [x.out, y.out], axis=0)

    def split(*sizes: int) -> Dag:
        return Dag([x, y], Node("split", [joined.out], axis=0, sizes=sizes).results)

    [found] = matches(split(2, 3), undo)
    assert found.params == {"axis": 0}
    assert apply(split(2, 3), found) == Dag([x, y], [x.out, y.out])
    assert matches(split(3, 2), undo) == []


def test_an_input_computed_inside_the_match_is_not_matched() -> None:
    """mul(z, scale(x, y)) with z the scale itself: the target would read the old
    scale, which the rewrite was meant to remove."""
    scale_then_mul = BY_NAME["g3-0004"]
    x, c = arg(0, "x", 2, 2), arg(1, "c")
    scaled = Node("scale", [x.out, c.out])
    assert matches(Dag([x, c], [Node("mul", [scaled.out, scaled.out]).out]), scale_then_mul) == []
    other = Node("relu", [x.out])
    graph = Dag([x, c], [Node("mul", [other.out, scaled.out]).out])
    assert len(matches(graph, scale_then_mul)) == 1


def two_convs_added(padding: str, z_kernel: int) -> Dag:
    """conv(x, y) + conv(x, z), kernels of 3x3 and z_kernel x z_kernel."""
    x = arg(0, "x", 1, 2, 5, 5)
    y = arg(1, "y", 3, 2, 3, 3, param=True)
    z = arg(2, "z", 3, 2, z_kernel, z_kernel, param=True)
    conv = {**CONV, "padding": padding}
    left = Node("conv2d", [x.out, y.out], **conv)
    right = Node("conv2d", [x.out, z.out], **conv)
    return Dag([x, y, z], [Node("add", [left.out, right.out]).out])


def test_a_shape_precondition_is_checked_on_the_match() -> None:
    graph = two_convs_added("same", z_kernel=1)
    [found] = matches(graph, CONV_ENLARGE)
    assert found.params == {"padding": "same"}
    merged = apply(graph, found)
    assert merged is not None
    assert [node.op for node in merged.ops].count("conv2d") == 1
    assert_same_results(graph, merged)
    assert len(matches(two_convs_added("same", z_kernel=3), CONV_ENLARGE)) == 1
    # `where $padding == "same"`: with valid padding, enlarging a kernel would
    # shrink the output, so the rule does not apply even to kernels of one size.
    assert matches(two_convs_added("valid", z_kernel=3), CONV_ENLARGE) == []


def test_ranks_and_broadcasting_are_not_matched() -> None:
    x = arg(0, "x", 2, 3)
    row = arg(1, "row", 1, 3)
    assert matches(Dag([x, row], [Node("add", [x.out, row.out]).out]), ADD_COMMUTES) == []
    batched = arg(0, "x", 2, 3, 3)
    assert (
        matches(Dag([batched], [Node("add", [batched.out, batched.out]).out]), ADD_COMMUTES) == []
    )
    [found] = matches(Dag([x], [Node("add", [x.out, x.out]).out]), ADD_COMMUTES)
    assert found.inputs == {"x": x.out, "y": x.out}


def test_a_target_that_does_not_type_check_is_refused() -> None:
    """Fusing pools along the batch axis needs inputs that agree off that axis."""
    pool_fusion = BY_NAME["g3-0307.rev"]
    x = arg(0, "x", 1, 2, 4, 4)
    y = arg(1, "y", 1, 3, 4, 4)
    window = {"kind": "max", "kernel": (2, 2), "strides": (2, 2), "padding": "valid"}
    graph = Dag([x, y], [Node("pool2d", [v], **window).out for v in (x.out, y.out)])
    found = matches(graph, pool_fusion)
    assert len(found) == 2
    assert all(apply(graph, m) is None for m in found)


# ---------------------------------------------------------------------- property

MATRIX_OPS = ["add", "mul", "scale", "relu", "transpose", "matmul", "concat", "split"]
IMAGE_OPS = ["add", "mul", "scale", "relu", "conv2d", "enlarge", "pool2d", "concat", "split"]
CONSTANTS = ["ones", "i_matmul", "i_conv", "c_pool"]
MAX_MATCHES = 12


def assert_every_application_preserves_results(graph: Dag, module: ModuleOp) -> None:
    args = random_inputs(module, seed=0)
    expected = run_reference(module, args)
    for found in itertools.islice(find_matches(graph, RULES), MAX_MATCHES):
        rewritten = apply(graph, found)
        if rewritten is None:
            continue
        assert rewritten.output_sigs == graph.output_sigs
        report = compare(expected, run_reference(module_of(rewritten), args))
        assert report.ok, f"{found.rule.name}: {report.summary()}"


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    st.one_of(
        graphs(max_ops=7, ops=MATRIX_OPS + CONSTANTS), graphs(max_ops=7, ops=IMAGE_OPS + CONSTANTS)
    )
)
def test_applying_any_match_in_a_random_graph_preserves_its_results(module: ModuleOp) -> None:
    assert_every_application_preserves_results(dag.from_module(module), module)


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_applying_any_match_in_a_rule_instance_preserves_its_results(data: st.DataObject) -> None:
    """Random graphs rarely hold two- and three-op patterns; a rule's own source at a
    random small instance holds its own and many other rules' patterns."""
    rule = data.draw(st.sampled_from(RULES), label="rule")
    instance = data.draw(st.sampled_from(list(itertools.islice(instances(rule, 3), 40))))
    src, _ = rule.instantiate(dict(instance.shapes), dict(instance.params))
    assert_every_application_preserves_results(src, module_of(src))


RETURNS_AN_INPUT = """
rule returns-x(x: 2, y: 2) {
  src {
    s1 = transpose{perm = [1, 0]}(x)
    s2 = concat{axis = 0}(s1, y)
    s3 = transpose{perm = [1, 0]}(s2)
    s4, s5 = split{axis = 1, sizes = [dim(s1, 0), dim(y, 0)]}(s3)
    return s4, s5
  }
  tgt {
    t1 = transpose{perm = [1, 0]}(y)
    return x, t1
  }
}
"""


def test_a_direction_whose_source_only_returns_an_input_is_not_applied() -> None:
    """A 4-op generated rule (g4-2343) whose target returns input `x` untouched: read
    backwards, no op binds `x`, and matching it raised a KeyError; that direction is
    left out, and the forward one still matches."""
    (rule,) = parse_rules(RETURNS_AN_INPUT)
    assert [r.name for r in directed([rule])] == ["returns-x"]
    # The reverse direction's source: x returned as it is, beside transpose(y).
    x, y = arg(0, "x", 2, 3), arg(1, "y", 4, 2)
    graph = Dag([x, y], [x.out, Node("transpose", [y.out], perm=(1, 0)).out])
    assert list(find_matches(graph, directed([rule]))) == []
    # The forward direction matches its own source.
    s1 = Node("transpose", [x.out], perm=(1, 0))
    s2 = Node("concat", [s1.out, y.out], axis=0)
    s3 = Node("transpose", [s2.out], perm=(1, 0))
    s4 = Node("split", [s3.out], axis=1, sizes=(3, 4))
    forward = Dag([x, y], list(s4.results))
    assert [m.rule.name for m in find_matches(forward, directed([rule]))] == ["returns-x"]
