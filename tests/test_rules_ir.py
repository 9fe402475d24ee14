"""The rule representation: text format round trips, malformed rules and files, proof
digests, parameter domains and instantiation at concrete shapes."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from rule_examples import ENLARGE, MATMUL_FUSION

from tasoc.backends.numpy import run_reference
from tasoc.ir import dag
from tasoc.ir.rule_text import format_rules, parse_rules
from tasoc.ir.rules import (
    Condition,
    Dim,
    Param,
    Pattern,
    Proof,
    Relation,
    Rule,
    RuleError,
    RuleInput,
    ShapeOf,
    param_domain,
)

FUSE = MATMUL_FUSION


def one(text: str) -> Rule:
    (rule,) = parse_rules(text)
    return rule


def test_text_round_trips_exactly() -> None:
    rules = parse_rules(FUSE + ENLARGE)
    text = format_rules(rules, header=["made by a test"])
    assert text.startswith("// tasoc rules, format 1\n// made by a test\n")
    assert parse_rules(text) == rules
    assert format_rules(parse_rules(text), header=["made by a test"]) == text


terms = st.recursive(
    st.integers(-3, 9)
    | st.sampled_from(["same", 'a "quoted" \\ name', ""])
    | st.booleans()
    | st.floats(allow_nan=False, allow_infinity=False, width=32)
    | st.builds(Param, st.sampled_from(["s", "a"]))
    | st.builds(Dim, st.just("x"), st.integers(-2, 1) | st.just(Param("a")))
    | st.just(ShapeOf("x")),
    lambda inner: st.lists(inner, max_size=3).map(tuple),
    max_leaves=6,
)


@given(terms)
@settings(max_examples=60, deadline=None)
def test_every_term_round_trips(term: object) -> None:
    rule = Rule(
        "t",
        (RuleInput("x", 2),),
        Pattern((), ("x",)),
        Pattern((), ("x",)),
        preconditions=(Condition(term, Relation.NE, 0),),  # type: ignore[arg-type]
    )
    assert parse_rules(format_rules([rule])) == [rule]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("rule r(x: 2) { src { return x } }", "line 1: expected 'tgt', found '}'"),
        ("rule r(x: 2) { src { a = frobnicate(x)\n return a } tgt { return x } }", "unknown op"),
        ("rule r(x: 2) { src { a = relu(y) return a } tgt { return x } }", "'y' before it"),
        ("rule r(x: 2) { src { a = transpose(x) return a } tgt { return x } }", "['perm']"),
        ("rule r(x: 2) { src { return x } tgt { return x, x } }", "1 outputs and tgt 2"),
        ("rule r(x: 2, x: 2) { src { return x } tgt { return x } }", "input name repeats"),
        (
            "rule r(x: 2) { src { return x } tgt { a = transpose{perm = $p}(x) return a } }",
            "uses $p, which src does not bind",
        ),
        ("rule r(x: 2) { src { a = relu(x) a = relu(a) return a } tgt { return x } }", "twice"),
        ("rule r(x: 2) { where dim(q, 0) == 1 src { return x } tgt { return x } }", "'q'"),
        ("rule r(x: 2) { src { return x } tgt { return x } proof maybe }", "proof status"),
        ("rule r(x: 2) { src { return x } tgt { return x } } #", "unexpected character '#'"),
        ("rule r(x: 2) { src { return x } tgt { return x } }\n" * 2, "defined twice"),
        (
            "rule r(x: 2) { where $a == "
            + "[" * 2000
            + "]" * 2000
            + " src { return x } tgt { return x } }",
            "lists nested deeper than 64 levels",
        ),
    ],
)
def test_malformed_rules_are_one_line_errors(text: str, message: str) -> None:
    with pytest.raises(RuleError) as info:
        parse_rules(text)
    assert message in str(info.value)
    assert "\n" not in str(info.value)


def test_proof_digest_detects_edits() -> None:
    proven = one(FUSE).with_proof(Proof.PROVEN, "by hand")
    again = one(format_rules([proven]))
    assert again.is_proven and again.proof_is_current
    renamed = one(format_rules([proven]).replace("matmul-concat-fuse", "renamed"))
    assert renamed.proof_is_current  # the name is not what the proof is about
    tampered = one(format_rules([proven]).replace("axis = 1}(y, z)", "axis = 0}(y, z)"))
    assert tampered.is_proven and not tampered.proof_is_current


def test_param_domains_follow_the_attribute_and_rank() -> None:
    enlarge = one(ENLARGE)
    assert param_domain(enlarge, "s") == ((1, 1), (2, 2))
    assert param_domain(enlarge, "act") == ("none", "relu")
    concat = one(
        "rule c(x: 3, y: 3) { src { a = concat{axis = $a}(x, y) return a }"
        " tgt { a = concat{axis = $a}(x, y) return a } }"
    )
    assert param_domain(concat, "a") == (0, 1, 2)
    with pytest.raises(RuleError, match=r"no domain for \$q"):
        param_domain(concat, "q")


def test_instantiate_builds_typed_dags_that_compute_the_same() -> None:
    rule = one(FUSE)
    src, tgt = rule.instantiate({"x": (3, 4), "y": (4, 5), "z": (4, 2)}, {})
    assert [n.op for n in src.ops] == ["matmul", "matmul"]
    assert [n.op for n in tgt.ops] == ["concat", "matmul", "split"]
    assert tgt.ops[-1].attr("sizes") == (5, 2)
    rng = np.random.default_rng(0)
    args = [rng.standard_normal(s).astype(np.float32) for s in ((3, 4), (4, 5), (4, 2))]
    for left, right in zip(
        run_reference(dag.to_module(src), args),
        run_reference(dag.to_module(tgt), args),
        strict=True,
    ):
        np.testing.assert_allclose(left, right, rtol=1e-5, atol=1e-6)


def test_instantiate_checks_preconditions_ranks_and_types() -> None:
    rule = one(ENLARGE)
    shapes = {"x": (1, 2, 6, 6), "w": (3, 2, 1, 1)}
    _, tgt = rule.instantiate(shapes, {"s": (1, 1), "act": "relu"})
    assert tgt.ops[0].sigs[0].shape == (3, 2, 3, 3)
    with pytest.raises(RuleError, match=r"precondition '\$s == \[1, 1\]' does not hold"):
        rule.instantiate(shapes, {"s": (2, 2), "act": "none"})
    with pytest.raises(RuleError, match="input x has rank 4"):
        rule.instantiate({"x": (2, 6, 6), "w": (3, 2, 1, 1)}, {"s": (1, 1), "act": "none"})
    with pytest.raises(RuleError, match=r"src: conv2d: .*input channels"):
        rule.instantiate({"x": (1, 4, 6, 6), "w": (3, 2, 1, 1)}, {"s": (1, 1), "act": "none"})
    with pytest.raises(RuleError, match=r"parameter \$act is not bound"):
        rule.instantiate(shapes, {"s": (1, 1)})


def test_reversed_swaps_the_patterns() -> None:
    rule = one(FUSE)
    back = rule.reversed()
    assert (back.src, back.tgt, back.name) == (rule.tgt, rule.src, "matmul-concat-fuse.rev")
    assert back.params == rule.params == ()
    assert one(ENLARGE).params == ("s", "act")  # in order of first mention
