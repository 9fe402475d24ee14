"""The rewrite-rule generator (`tasoc.passes.rewrite.generator`): its evaluator against
the reference kernels, the enumeration, the pruning stages and the emitted rules."""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest

from tasoc.backends.numpy.interpreter import run_reference
from tasoc.backends.numpy.kernels import KERNELS
from tasoc.ir.dag import to_module
from tasoc.ir.rule_text import format_rules, parse_rules
from tasoc.ir.rules import Rule, RuleError, check_rule, param_domain
from tasoc.passes.rewrite.generator import STAGES, GenerationReport, generate
from tasoc.passes.rewrite.generator.enumeration import enumerate_world
from tasoc.passes.rewrite.generator.evaluate import PRIME, apply
from tasoc.passes.rewrite.generator.fingerprint import value_key
from tasoc.passes.rewrite.generator.instances import is_instance, prune_instances
from tasoc.passes.rewrite.generator.worlds import FINGERPRINT_SETS, TABLE_2_1, worlds

MATRIX_OPS = ["add", "mul", "scale", "relu", "transpose", "matmul", "concat", "split", "i_matmul"]
CONV_OPS = ["add", "relu", "conv2d", "enlarge", "pool2d", "concat", "split", "i_conv", "c_pool"]


@cache
def generated(
    max_ops: int, ops: tuple[str, ...], seed: int = 0
) -> tuple[list[Rule], GenerationReport]:
    return generate(max_ops, list(ops), seed=seed)


def one_line(rule: Rule) -> str:
    """`src => tgt` with nested expressions, for finding rules by their shape."""

    def side(pattern: Any) -> str:
        env: dict[str, str] = {}
        for op in pattern.ops:
            text = f"{op.op}({','.join(env.get(o, o) for o in op.operands)})"
            for index, result in enumerate(op.results):
                env[result] = text if len(op.results) == 1 else f"{text}[{index}]"
        return " , ".join(env.get(o, o) for o in pattern.outputs)

    return f"{side(rule.src)} => {side(rule.tgt)}"


# ------------------------------------------------------------------------ evaluator

CASES: list[tuple[str, dict[str, Any], list[tuple[int, ...]]]] = [
    ("add", {}, [(2, 3), (2, 3)]),
    ("mul", {}, [(2, 3, 4, 5), (2, 3, 4, 5)]),
    ("scale", {}, [(3, 4), ()]),
    ("relu", {}, [(2, 3, 4, 5)]),
    ("transpose", {"perm": (1, 0)}, [(3, 5)]),
    ("matmul", {}, [(2, 3), (3, 4)]),
    ("matmul", {}, [(2, 3, 4), (4, 5)]),
    ("concat", {"axis": 1}, [(2, 3), (2, 4)]),
    ("split", {"axis": 0, "sizes": (1, 3)}, [(4, 2)]),
    ("enlarge", {"kernel": (5, 5)}, [(3, 2, 1, 3)]),
    ("ones", {"shape": (2, 3), "dtype": "f32"}, []),
    ("i_matmul", {"size": 4, "dtype": "f32"}, []),
    ("i_conv", {"channels": 3, "kernel": (3, 3), "dtype": "f32"}, []),
    ("c_pool", {"channels": 3, "kernel": (3, 1), "dtype": "f32"}, []),
]
for strides, padding, activation in itertools.product(
    ((1, 1), (2, 2)), ("same", "valid"), ("none", "relu")
):
    CASES.append(
        (
            "conv2d",
            {"strides": strides, "padding": padding, "activation": activation, "groups": 1},
            [(2, 4, 7, 6), (3, 4, 3, 3)],
        )
    )
    CASES.append(
        (
            "conv2d",
            {"strides": strides, "padding": padding, "activation": activation, "groups": 2},
            [(1, 4, 5, 5), (6, 2, 3, 1)],
        )
    )
for kind, kernel, strides, padding in itertools.product(
    ("avg", "max"), ((1, 1), (2, 2), (3, 3)), ((1, 1), (2, 2)), ("same", "valid")
):
    attrs = {"kind": kind, "kernel": kernel, "strides": strides, "padding": padding}
    CASES.append(("pool2d", attrs, [(2, 3, 7, 6)]))


@pytest.mark.parametrize(("op", "attrs", "shapes"), CASES, ids=lambda c: str(c)[:40])
def test_float_evaluator_matches_the_reference_kernels(
    op: str, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
) -> None:
    rng = np.random.default_rng(0)
    args = [rng.uniform(-1, 1, size=s).astype(np.float32) for s in shapes]
    ours = apply(op, attrs, [a.astype(np.float64) for a in args], exact=False)
    reference = KERNELS[op](attrs, args)
    assert len(ours) == len(reference)
    for mine, theirs in zip(ours, reference, strict=True):
        assert mine.shape == theirs.shape
        np.testing.assert_allclose(mine, theirs, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    ("op", "attrs", "shapes"),
    [
        c
        for c in CASES
        if c[0] not in ("relu", "pool2d", "c_pool") and c[1].get("activation") != "relu"
    ],
    ids=lambda c: str(c)[:40],
)
def test_exact_evaluator_is_the_float_one_modulo_the_prime(
    op: str, attrs: dict[str, Any], shapes: list[tuple[int, ...]]
) -> None:
    """On linear ops, large residues, exact mode is float arithmetic on integers mod
    PRIME: no int64 overflow anywhere (object arithmetic gives the true integers)."""
    rng = np.random.default_rng(1)
    args = [rng.integers(PRIME - 1000, PRIME, size=s, dtype=np.int64) for s in shapes]
    exact = apply(op, attrs, args, exact=True)
    wide = apply(op, attrs, [a.astype(object) for a in args], exact=False)
    for mine, truth in zip(exact, wide, strict=True):
        assert mine.dtype == np.int64
        assert (mine == np.remainder(truth.astype(object), PRIME)).all()


def test_exact_nonlinear_ops_are_fixed_polynomials() -> None:
    x = np.arange(24, dtype=np.int64).reshape(1, 2, 3, 4) * 1_000_003 % PRIME
    (relu,) = apply("relu", {}, [x], exact=True)
    assert (relu == (x * x + 3 * x + 1) % PRIME).all()
    window = {"kind": "max", "strides": (1, 1), "padding": "same"}
    (one,) = apply("pool2d", {**window, "kernel": (1, 1)}, [x], exact=True)
    assert (one == x).all()
    average = {**window, "kind": "avg", "kernel": (2, 2)}
    (avg,) = apply("pool2d", average, [x], exact=True)
    (mean,) = apply("pool2d", average, [x.astype(np.float64)], exact=False)
    assert (avg * 4 % PRIME == np.remainder(np.rint(mean * 4).astype(np.int64), PRIME)).all()


# ---------------------------------------------------------------------- enumeration


def test_no_graph_is_enumerated_twice_or_holds_duplicated_computation() -> None:
    (world,) = [w for w in worlds(MATRIX_OPS) if w.name == "matrix"]
    table = enumerate_world(world, 3, seed=0).table
    keys = [(t.form, t.operands) for t in table.terms]
    assert len(keys) == len(set(keys)), "a term was built twice"
    for term in table.terms:
        graph = table.values[term.results[0]].closure
        ops = [(table.terms[t].form, table.terms[t].operands) for t in graph]
        assert len(ops) == len(set(ops))
        values = [v for t in graph for v in table.terms[t].results if t != term.id]
        values += list(table.values[term.results[0]].inputs)
        classes = [table.values[v].cls for v in values]
        assert len(classes) == len(set(classes)), "a graph computes one tensor twice"


def test_fingerprints_are_exact_over_all_fingerprint_sets() -> None:
    a = [np.arange(6).reshape(2, 3), np.arange(12).reshape(3, 4)]
    b = [a[0], a[1].copy()]
    assert value_key([(2, 3), (3, 4)], a) == value_key([(2, 3), (3, 4)], b)
    b[1][2, 3] += 1
    assert value_key([(2, 3), (3, 4)], a) != value_key([(2, 3), (3, 4)], b)
    assert FINGERPRINT_SETS >= 2


def test_each_symbol_has_its_own_sizes_in_every_world() -> None:
    for world in worlds(TABLE_2_1):
        assert len(world.sizes) > FINGERPRINT_SETS
        signatures = [tuple(sizes[s] for sizes in world.sizes) for s in world.sizes[0]]
        assert len(set(signatures)) == len(signatures)
        for signature in signatures:
            fingerprinted = signature[:FINGERPRINT_SETS]
            assert len(set(fingerprinted)) == len(fingerprinted)


# ------------------------------------------------------------------------ the rules


def test_known_rules_are_found() -> None:
    rules, _ = generated(2, ("add", "matmul", "transpose"))
    lines = {one_line(rule) for rule in rules}
    assert "add(x,y) => add(y,x)" in lines
    assert "transpose(transpose(x)) => x" in lines
    assert "matmul(matmul(x,y),z) => matmul(x,matmul(y,z))" in lines
    # three matrices of one shape take three ops; the third comes from a common subgraph
    rules, _ = generated(3, ("add",))
    lines = {one_line(rule) for rule in rules}
    assert "add(z,add(x,y)) => add(x,add(z,y))" in lines


def test_matmuls_sharing_an_input_are_fused_with_concat_and_split() -> None:
    rules, _ = generated(3, ("matmul", "concat", "split"))
    fused = [
        rule
        for rule in rules
        if rule.src.op_counts() == {"concat": 1, "matmul": 1, "split": 1}
        and rule.tgt.op_counts() == {"matmul": 2}
    ]
    assert fused, "no matmul fusion"
    texts = {one_line(rule) for rule in fused}
    fused_half = "split(matmul(z,concat(x,y)))"
    assert f"{fused_half}[0] , {fused_half}[1] => matmul(z,x) , matmul(z,y)" in texts
    split = next(op for op in fused[0].src.ops if op.op == "split")
    assert all(type(size).__name__ == "Dim" for size in split.attr("sizes"))  # type: ignore[union-attr]


def with_ranks(rule: Rule) -> str:
    """`one_line(rule)` followed by the inputs' ranks."""
    return f"{one_line(rule)} @ " + ",".join(f"{i.name}:{i.rank}" for i in rule.inputs)


def test_the_batched_world_is_there_for_broadcast_matmul_only() -> None:
    assert [w.name for w in worlds(["add", "concat", "split"])] == ["matrix", "conv"]
    (batched,) = [w for w in worlds(["add", "matmul"]) if w.name == "batched"]
    assert {i.dims for i in batched.inputs} == {("B", "N", "D"), ("D", "D")}


def test_broadcast_matmuls_sharing_an_input_are_fused() -> None:
    """BERT's Q/K/V projections, a batch of rows [B, N, D] times [D, D] weights: fused
    into one matmul of the concatenated weights, split along the last axis; and the
    relatives over the batch and row axes (split trees through a broadcast matmul)."""
    rules, _ = generated(3, ("matmul", "concat", "split"))
    found = {with_ranks(rule): rule for rule in rules}
    fused = "split(matmul(z,concat(x,y)))"
    rule = found[f"{fused}[0] , {fused}[1] => matmul(z,x) , matmul(z,y) @ x:2,y:2,z:3"]
    concat, _, split = rule.src.ops
    assert (concat.attr("axis"), split.attr("axis")) == (1, 2)
    assert [(d.value, d.axis) for d in split.attr("sizes")] == [("x", 1), ("y", 1)]  # type: ignore[union-attr]
    assert "concat(matmul(x,y),matmul(x,z)) => matmul(x,concat(y,z)) @ x:3,y:2,z:2" in found
    rows = "split(matmul(concat(x,y),z))[0]"
    batch_or_rows = [r for r in rules if one_line(r).startswith(rows) and r.inputs[0].rank == 3]
    assert {r.src.ops[-1].attr("axis") for r in batch_or_rows} == {0, 1}
    rules, _ = generated(3, ("add", "matmul"))
    lines = {with_ranks(rule) for rule in rules}
    assert "add(matmul(x,y),matmul(x,z)) => matmul(x,add(y,z)) @ x:3,y:2,z:2" in lines


def test_convolution_rules_of_taso_are_found() -> None:
    rules, _ = generated(3, tuple(CONV_OPS))
    lines = {one_line(rule) for rule in rules}
    assert "conv2d(x,c_pool()) => pool2d(x)" in lines
    assert "conv2d(x,i_conv()) => x" in lines
    assert any("enlarge" in line and "concat" in line for line in lines)
    pool = next(r for r in rules if one_line(r) == "conv2d(x,c_pool()) => pool2d(x)")
    assert set(pool.params) >= {"kernel", "strides", "padding"}


def test_pruning_stages_only_remove_and_keep_what_is_not_redundant() -> None:
    rules, report = generated(3, ("matmul", "concat", "split"))
    counts = [report.count(stage) for stage in STAGES[1:]]
    assert counts == sorted(counts, reverse=True)
    assert counts[0] > 4 * counts[-1], counts
    assert report.count("final rules") == len(rules)
    lines = {one_line(rule) for rule in rules}
    # associativity survives every stage, its renamings and instances do not
    assert "matmul(matmul(x,y),z) => matmul(x,matmul(y,z))" in lines
    assert "matmul(matmul(x,y),x) => matmul(x,matmul(y,x))" not in lines
    assert "matmul(z,matmul(x,y)) => matmul(matmul(z,x),y)" not in lines
    assert len(report.table()) == len(STAGES) + 3


INSTANCE_RULES = """
rule assoc(x: 2, y: 2, z: 2) {
  src {
    a = matmul(x, y)
    b = matmul(a, z)
    return b
  }
  tgt {
    c = matmul(y, z)
    d = matmul(x, c)
    return d
  }
}
rule merged(x: 2, y: 2) {
  src {
    a = matmul(x, y)
    b = matmul(a, x)
    return b
  }
  tgt {
    c = matmul(y, x)
    d = matmul(x, c)
    return d
  }
}
rule any_axis(x: 2, y: 2) {
  src {
    a = relu(x)
    b = relu(y)
    c = concat{axis = $axis}(a, b)
    return c
  }
  tgt {
    d = concat{axis = $axis}(x, y)
    e = relu(d)
    return e
  }
}
rule axis_one(x: 2, y: 2) {
  src {
    a = relu(x)
    b = relu(y)
    c = concat{axis = 1}(a, b)
    return c
  }
  tgt {
    d = concat{axis = 1}(x, y)
    e = relu(d)
    return e
  }
}
"""


def test_instances_merge_inputs_or_fix_parameters_and_nothing_else() -> None:
    assoc, merged, any_axis, axis_one = parse_rules(INSTANCE_RULES)
    assert is_instance(merged, assoc) and not is_instance(assoc, merged)
    assert is_instance(axis_one, any_axis) and not is_instance(any_axis, axis_one)
    assert not is_instance(merged, assoc.reversed())
    assert is_instance(assoc.reversed(), assoc.reversed())
    assert [r.name for r in prune_instances([merged, assoc, axis_one, any_axis])] == [
        "assoc",
        "any_axis",
    ]


def test_no_rule_is_an_instance_of_another() -> None:
    rules, _ = generated(3, ("matmul", "concat", "split"))
    for specific, general in itertools.permutations(rules, 2):
        assert not is_instance(specific, general), (specific.name, general.name)
        assert not is_instance(specific, general.reversed()), (specific.name, general.name)


def test_rules_are_well_formed_named_and_oriented() -> None:
    rules, report = generated(2, tuple(MATRIX_OPS))
    assert [r.name for r in rules] == [f"g2-{i:04d}" for i in range(1, len(rules) + 1)]
    for rule in rules:
        check_rule(rule)
        assert rule.provenance == report.provenance
        assert rule.proof.status.value == "unchecked"
        assert rule.src.num_ops >= rule.tgt.num_ops
        assert rule.src.num_ops <= 2 and rule.tgt.num_ops <= 2


def assignments(rule: Rule) -> list[dict[str, Any]]:
    """A few parameter assignments: the first, the last and one in between."""
    domains = [param_domain(rule, p) for p in rule.params]
    combos = list(itertools.product(*domains))
    picked = {0, len(combos) // 2, len(combos) - 1}
    return [dict(zip(rule.params, combos[i], strict=True)) for i in sorted(picked)]


def check_numerically(rule: Rule, shapes: Mapping[str, Sequence[int]], env: dict[str, Any]) -> bool:
    """Whether src equals tgt under the reference interpreter (False: ill-typed)."""
    try:
        src, tgt = rule.instantiate(shapes, env)
    except RuleError:  # an ill-typed instance is not a failure
        return False
    rng = np.random.default_rng(3)
    args = [rng.uniform(-1, 1, size=node.sigs[0].shape).astype(np.float32) for node in src.args]
    left = run_reference(to_module(src), args)
    right = run_reference(to_module(tgt), args)
    for a, b in zip(left, right, strict=True):
        np.testing.assert_allclose(
            a, b, rtol=1e-4, atol=1e-5, err_msg=f"{rule.name} at {shapes} {env}"
        )
    return True


@pytest.mark.parametrize("ops", [MATRIX_OPS, CONV_OPS], ids=["matrix", "conv"])
def test_every_rule_holds_under_the_reference_interpreter(ops: list[str]) -> None:
    rules, report = generated(2, tuple(ops))
    rng = np.random.default_rng(5)
    assert rules
    for rule in rules:
        examples = report.examples[rule.name]
        assert examples, rule.name
        checked = 0
        for shapes in examples:
            for env in assignments(rule):
                checked += check_numerically(rule, shapes, env)
            # the same rule at random sizes: every size of the example renamed
            sizes = sorted({d for shape in shapes.values() for d in shape})
            fresh = dict(
                zip(sizes, rng.choice(np.arange(1, 9), len(sizes), replace=False), strict=True)
            )
            renamed = {k: tuple(int(fresh[d]) for d in shape) for k, shape in shapes.items()}
            check_numerically(rule, renamed, assignments(rule)[0])
        assert checked, f"{rule.name} never type-checks at its examples"


def test_generation_is_deterministic_for_a_seed() -> None:
    steps: list[tuple[int, int]] = []
    first, report = generate(2, MATRIX_OPS, seed=4, progress=lambda *step: steps.append(step))
    second, _ = generate(2, MATRIX_OPS, seed=4)
    assert format_rules(first) == format_rules(second)
    assert parse_rules(format_rules(first)) == first
    assert "(seed 4)" in first[0].provenance
    assert report.command.startswith("tasoc rules generate --max-ops 2 --ops add,mul")
    assert [done for done, _ in steps] == list(range(1, len(steps) + 1))
    assert steps[-1][0] == steps[-1][1]


def test_bad_arguments_are_one_clear_error() -> None:
    with pytest.raises(ValueError, match="no such op"):
        generate(2, ["add", "frobnicate"])
    with pytest.raises(ValueError, match="cannot enumerate 'softmax'"):
        generate(2, ["softmax"])
    with pytest.raises(ValueError, match="at least 1"):
        generate(0)
