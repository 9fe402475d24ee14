"""The operator axioms and the z3 rule prover (tasoc.verify.axioms, tasoc.verify.prover).

Each axiom is checked against the reference kernels at small random shapes; the prover
must prove rules that take one or several axioms (multi-output rules, preconditions,
shape reasoning, case splits on a parameter), and must not prove rules that are false.
"""

from __future__ import annotations

import random
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from rule_examples import ENLARGE, MATMUL_COMMUTES, MATMUL_FUSION, RELU_OVER_ADD

from tasoc.backends.numpy import KERNELS
from tasoc.ir.dag import Dag, Value
from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import Proof, Rule, RuleError, RuleInput, param_domain
from tasoc.verify.axioms import load_axioms
from tasoc.verify.prover import (
    MIN_TIMEOUT_S,
    _is_rank_exact,
    prove_rule,
    prove_rules,
    redundant_axioms,
)
from tasoc.verify.validate import validate_rule

AXIOMS = load_axioms()

# ------------------------------------------------------------------ the axioms hold


def evaluate(dag: Dag, arrays: list[np.ndarray]) -> list[np.ndarray]:
    """`dag` on `arrays` with the reference kernels."""
    values = {Value(arg, 0): array for arg, array in zip(dag.args, arrays, strict=True)}
    for node in dag.ops:
        results = KERNELS[node.op](dict(node.attrs), [values[v] for v in node.inputs])
        values.update(zip(node.results, results, strict=True))
    return [values[v] for v in dag.outputs]


def broadcasts(dag: Dag) -> bool:
    """Whether an element-wise op of `dag` broadcasts between operands of one rank,
    which the prover assumes away (a rank-0 operand is fine)."""
    return any(
        node.op in ("add", "mul")
        and node.inputs[0].sig.rank == node.inputs[1].sig.rank
        and node.inputs[0].sig != node.inputs[1].sig
        for node in dag.ops
    )


def instances(rule: Rule, count: int = 4, tries: int = 400) -> list[tuple[Rule, Dag, Dag]]:
    """Up to `count` instances of `rule` (the rule, at the ranks it was tried at, and
    its two patterns) at random small shapes and parameter values where both patterns
    type-check without broadcasting. A rule whose ranks may shift (see the prover's
    rank guards) is also tried one rank up and down."""
    rng = random.Random(rule.name)
    lowest = min((i.rank for i in rule.inputs if i.rank), default=0)
    shifts = (0,) if _is_rank_exact(rule) else (0, 1, -1) if lowest > 1 else (0, 1)
    found: dict[str, tuple[Rule, Dag, Dag]] = {}
    for _ in range(tries):
        shift = rng.choice(shifts)
        inputs = tuple(RuleInput(i.name, i.rank + shift if i.rank else 0) for i in rule.inputs)
        tried = replace(rule, inputs=inputs)
        params = {name: rng.choice(param_domain(tried, name)) for name in tried.params}
        # Most inputs share one shape per rank, so that element-wise ops and matmuls meet.
        common = {r: tuple(rng.choice((1, 2, 3, 4)) for _ in range(r)) for r in range(6)}
        shapes = {
            i.name: common[i.rank]
            if rng.random() < 0.7
            else tuple(rng.choice((1, 2, 3, 4)) for _ in range(i.rank))
            for i in inputs
        }
        try:
            src, tgt = tried.instantiate(shapes, params)
        except RuleError:
            continue
        if not (broadcasts(src) or broadcasts(tgt)):
            found.setdefault(repr((shapes, params)), (tried, src, tgt))
        if len(found) == count:
            break
    return list(found.values())


def differs(src: Dag, tgt: Dag) -> bool:
    """Whether the patterns differ in result types or values on random inputs."""
    rng = np.random.default_rng(0)
    arrays = [rng.standard_normal(arg.sigs[0].shape) for arg in src.args]
    if src.output_sigs != tgt.output_sigs:
        return True
    pairs = zip(evaluate(src, arrays), evaluate(tgt, arrays), strict=True)
    return not all(np.allclose(a, b, rtol=1e-6, atol=1e-9) for a, b in pairs)


@pytest.mark.parametrize("axiom", AXIOMS, ids=lambda axiom: axiom.name)
def test_axiom_holds_numerically(axiom: Rule) -> None:
    cases = instances(axiom)
    scalars_only = all(i.rank == 0 for i in axiom.inputs)  # one shape: ()
    assert len(cases) >= (1 if scalars_only else 2), "too few shapes where it type-checks"
    for rule, src, tgt in cases:
        assert not differs(src, tgt), f"at ranks {rule.inputs}"


def test_numeric_check_catches_a_false_axiom() -> None:
    (wrong,) = parse_rules(RELU_OVER_ADD)
    assert any(differs(src, tgt) for _, src, tgt in instances(wrong))


def test_axioms_load_with_names_and_provenance() -> None:
    names = [axiom.name for axiom in AXIOMS]
    assert len(names) == len(set(names)) >= 43
    assert all(axiom.provenance.startswith(("TASO Table 2.2", "tasoc")) for axiom in AXIOMS)


def test_malformed_axiom_files_are_rule_errors(tmp_path: Path) -> None:
    broken = tmp_path / "broken.rules"
    broken.write_text("rule r(x: 2) { src { a = relu(x) return a }")
    with pytest.raises(RuleError, match="line 1"):
        load_axioms(broken)
    anonymous = tmp_path / "anonymous.rules"
    anonymous.write_text(RELU_OVER_ADD)
    with pytest.raises(RuleError, match="no provenance"):
        load_axioms(anonymous)


# ------------------------------------------------------------------------ the prover


def prove(text: str, axioms: list[Rule] = AXIOMS, timeout_s: float = 10.0) -> Rule:
    (rule,) = parse_rules(text)
    return prove_rule(rule, axioms, timeout_s)


TRUE_RULES = {
    # Two outputs: concat-matmul, then the split of a concat of *matmul results*,
    # whose sizes must be seen to be dim(y, 1) and dim(z, 1) (the shape facts).
    "matmul-fusion": MATMUL_FUSION,
    # The same with axes counted from the end.
    "matmul-fusion-negative-axes": MATMUL_FUSION.replace("1", "-1"),
    "conv-relu-fusion": """
rule conv-relu-fusion(x: 4, w: 4) {
  src {
    a = conv2d{strides = $s, padding = $p, activation = "none", groups = $g}(x, w)
    b = relu(a)
    return b
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = $g}(x, w)
    return a
  }
}
""",
    # By cases on $act: relu(conv_relu) is conv_relu as relu is idempotent.
    "relu-after-any-conv": """
rule relu-after-any-conv(x: 4, w: 4) {
  src {
    a = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(x, w)
    b = relu(a)
    return b
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = 1}(x, w)
    return a
  }
}
""",
    "relu-concat-fusion": """
rule relu-concat-fusion(x: 3, y: 3) {
  src {
    a = relu(x)
    b = relu(y)
    return a, b
  }
  tgt {
    c = concat{axis = 2}(x, y)
    d = relu(c)
    e, f = split{axis = 2, sizes = [dim(x, 2), dim(y, 2)]}(d)
    return e, f
  }
}
""",
    "conv-kernel-fusion": """
rule conv-kernel-fusion(x: 4, w: 4, v: 4) {
  src {
    a = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(x, w)
    b = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(x, v)
    return a, b
  }
  tgt {
    c = concat{axis = 0}(w, v)
    d = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(x, c)
    e, f = split{axis = 1, sizes = [dim(w, 0), dim(v, 0)]}(d)
    return e, f
  }
}
""",
    # Two associativity steps.
    "matmul-reassociate": """
rule matmul-reassociate(x: 3, y: 3, z: 3, w: 3) {
  src {
    a = matmul(x, y)
    b = matmul(z, w)
    c = matmul(a, b)
    return c
  }
  tgt {
    a = matmul(y, z)
    b = matmul(a, w)
    c = matmul(x, b)
    return c
  }
}
""",
    # avg pooling is a depthwise conv with C_pool, conv is linear, and back.
    "scale-through-avg-pool": """
rule scale-through-avg-pool(x: 4, s: 0) {
  src {
    a = pool2d{kind = "avg", kernel = $k, strides = $st, padding = $p}(x)
    b = scale(a, s)
    return b
  }
  tgt {
    a = scale(x, s)
    b = pool2d{kind = "avg", kernel = $k, strides = $st, padding = $p}(a)
    return b
  }
}
""",
    # Permutations compose: [1, 2, 0] then [2, 0, 1] is the identity.
    "transposes-cancel": """
rule transposes-cancel(x: 3) {
  src {
    a = transpose{perm = [1, 2, 0]}(x)
    b = transpose{perm = [2, 0, 1]}(a)
    return b
  }
  tgt {
    return x
  }
}
""",
    # result dim i of transpose{q}(transpose{p}(x)) is x's dim p[q[i]].
    "transposes-compose": """
rule transposes-compose(x: 4) {
  src {
    a = transpose{perm = [1, 2, 3, 0]}(x)
    b = transpose{perm = [0, 2, 1, 3]}(a)
    return b
  }
  tgt {
    a = transpose{perm = [1, 3, 2, 0]}(x)
    return a
  }
}
""",
    # BERT's projections: a batch of rows times two weights, fused (broadcast axioms).
    "broadcast-matmul-fusion": """
rule broadcast-matmul-fusion(x: 3, y: 2, z: 2) {
  src {
    a = matmul(x, y)
    b = matmul(x, z)
    return a, b
  }
  tgt {
    c = concat{axis = 1}(y, z)
    d = matmul(x, c)
    e, f = split{axis = 2, sizes = [dim(y, 1), dim(z, 1)]}(d)
    return e, f
  }
}
""",
    # Split along the batch axis: the split's sizes are the matmuls' batch dims only
    # because a batch times one matrix keeps its batch (a shape fact).
    "broadcast-batch-split": """
rule broadcast-batch-split(x: 3, y: 3, z: 2) {
  src {
    a = matmul(x, z)
    b = matmul(y, z)
    return a, b
  }
  tgt {
    c = concat{axis = 0}(x, y)
    d = matmul(c, z)
    e, f = split{axis = 0, sizes = [dim(x, 0), dim(y, 0)]}(d)
    return e, f
  }
}
""",
    # The matmul type-checks only for a square x, where dim(x, 0) is dim(x, 1).
    "square-identity": """
rule square-identity(x: 2) {
  src {
    a = i_matmul{size = dim(x, 0), dtype = dtype(x)}()
    b = matmul(x, a)
    return b
  }
  tgt {
    return x
  }
}
""",
}


@pytest.mark.parametrize("name", TRUE_RULES)
def test_true_rule_is_proven(name: str) -> None:
    rule = prove(TRUE_RULES[name])
    assert rule.proof.status is Proof.PROVEN, rule.proof.detail
    assert rule.proof_is_current
    assert rule.proof.detail.startswith("z3 ") and rule.proof.detail.endswith(" ms")


FALSE_RULES = {
    "relu-over-add": RELU_OVER_ADD,
    "conv-relu-is-linear": """
rule conv-relu-is-linear(x: 4, y: 4, w: 4) {
  src {
    a = add(x, y)
    b = conv2d{strides = $s, padding = $p, activation = "relu", groups = 1}(a, w)
    return b
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = 1}(x, w)
    b = conv2d{strides = $s, padding = $p, activation = "relu", groups = 1}(y, w)
    c = add(a, b)
    return c
  }
}
""",
    "split-on-another-axis": """
rule split-on-another-axis(x: 2, y: 2) {
  src {
    a = concat{axis = 0}(x, y)
    b, c = split{axis = 1, sizes = [dim(x, 1), dim(y, 1)]}(a)
    return b, c
  }
  tgt {
    return x, y
  }
}
""",
    "matmul-commutes": MATMUL_COMMUTES,
    # transposes-compose with the permutations composed the wrong way round.
    "transposes-compose-backwards": TRUE_RULES["transposes-compose"].replace(
        "[1, 3, 2, 0]", "[2, 1, 3, 0]"
    ),
    "matmul-fusion-outputs-swapped": MATMUL_FUSION.replace("return e, f", "return f, e"),
    # The generator's g3-0095: it holds where the concats split at the same point, but a
    # product of concats also type-checks where they do not (x 1x1, y 1x2, z 2x1, u 1x1).
    # Axioms without typing preconditions once proved it.
    # g3-0250, the same for a convolution over channel concats (x: 1x1x1x1, y: 1x2x1x1,
    # z: 1x2x1x1, u: 1x1x1x1); conv-concat-channels once lacked its channel precondition.
    "conv-concat-split-points-differ": """
rule conv-concat-split-points-differ(x: 4, y: 4, z: 4, u: 4) {
  src {
    a = concat{axis = 1}(x, y)
    b = concat{axis = 1}(z, u)
    c = conv2d{strides = $s, padding = $p, activation = "none", groups = 1}(a, b)
    return c
  }
  tgt {
    a = concat{axis = 1}(y, x)
    b = concat{axis = 1}(u, z)
    c = conv2d{strides = $s, padding = $p, activation = "none", groups = 1}(a, b)
    return c
  }
}
""",
    "concat-matmul-split-points-differ": """
rule concat-matmul-split-points-differ(x: 2, y: 2, z: 2, u: 2) {
  src {
    a = concat{axis = 1}(x, y)
    b = concat{axis = 0}(z, u)
    c = matmul(a, b)
    return c
  }
  tgt {
    a = concat{axis = 1}(y, x)
    b = concat{axis = 0}(u, z)
    c = matmul(a, b)
    return c
  }
}
""",
}


@pytest.mark.parametrize("name", FALSE_RULES)
def test_false_rule_is_not_proven(name: str) -> None:
    rule = prove(FALSE_RULES[name], timeout_s=1.0)
    assert rule.proof.status is not Proof.PROVEN
    assert rule.proof.detail.startswith("output ")


@pytest.mark.parametrize("name", TRUE_RULES)
def test_true_rule_holds_numerically(name: str) -> None:
    (rule,) = parse_rules(TRUE_RULES[name])
    cases = instances(rule)
    assert cases and not any(differs(src, tgt) for _, src, tgt in cases)


@pytest.mark.parametrize("name", FALSE_RULES)
def test_false_rule_is_false(name: str) -> None:
    """Numerically false where it type-checks; the split on another axis never does,
    and must not be proven all the same."""
    (rule,) = parse_rules(FALSE_RULES[name])
    if name == "conv-concat-split-points-differ":
        # Random shapes rarely type-check here; the exhaustive small-shape search does.
        assert validate_rule(rule, bound=2, max_instances=400).failed > 0
        return
    cases = instances(rule)
    assert any(differs(src, tgt) for _, src, tgt in cases) or name == "split-on-another-axis"
    assert cases or name == "split-on-another-axis"


GROUPED = """
rule grouped-conv-fusion(x: 4, y: 4, w: 4, v: 4) {
  where dim(w, 0) == dim(v, 0)
  src {
    a = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(x, w)
    b = conv2d{strides = $s, padding = $p, activation = $act, groups = 1}(y, v)
    c = concat{axis = 1}(a, b)
    return c
  }
  tgt {
    a = concat{axis = 1}(x, y)
    b = concat{axis = 0}(w, v)
    c = conv2d{strides = $s, padding = $p, activation = $act, groups = 2}(a, b)
    return c
  }
}
"""


COUNTEREXAMPLES = {
    "enlarge": ({"x": (1, 1, 4, 4), "w": (1, 1, 1, 1)}, {"s": (2, 2), "act": "none"}),
    "grouped": (
        {"x": (1, 2, 3, 3), "y": (1, 2, 3, 3), "w": (1, 2, 1, 1), "v": (3, 2, 1, 1)},
        {"s": (1, 1), "p": "same", "act": "none"},
    ),
}
"""Where the rules below, without their preconditions, type-check and are false."""


@pytest.mark.parametrize("name", COUNTEREXAMPLES)
def test_precondition_is_needed(name: str) -> None:
    text = {"enlarge": ENLARGE, "grouped": GROUPED}[name]
    assert prove(text).is_proven
    unconditional = text.replace("where", "// where")
    assert not prove(unconditional, timeout_s=1.0).is_proven
    (rule,) = parse_rules(unconditional)
    shapes, params = COUNTEREXAMPLES[name]
    assert differs(*rule.instantiate(shapes, params))


def test_timeout_gives_unknown() -> None:
    rule = prove(MATMUL_FUSION, timeout_s=MIN_TIMEOUT_S)
    assert rule.proof.status is Proof.UNKNOWN
    assert rule.proof.detail.startswith("output 0: timeout")


def test_prove_rules_in_worker_processes_keeps_order() -> None:
    texts = [MATMUL_FUSION, RELU_OVER_ADD, TRUE_RULES["transposes-cancel"]]
    rules = [rule for text in texts for rule in parse_rules(text)]
    seen: list[tuple[int, int, str]] = []
    proven = prove_rules(
        rules, AXIOMS, timeout_s=5.0, jobs=2, progress=lambda d, n, r: seen.append((d, n, r.name))
    )
    assert [r.name for r in proven] == [r.name for r in rules]
    assert [r.is_proven for r in proven] == [True, False, True]
    assert seen == [(i + 1, 3, rule.name) for i, rule in enumerate(rules)]


def test_redundancy_check_finds_implied_axioms() -> None:
    by_name = {axiom.name: axiom for axiom in AXIOMS}
    (implied,) = parse_rules("""
rule relu-after-conv-relu(x: 4, w: 4) {
  src {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = $g}(x, w)
    b = relu(a)
    return b
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = $g}(x, w)
    return a
  }
}
""")
    axioms = [
        by_name["mul-comm"],
        replace(by_name["mul-comm"], name="mul-comm-again"),
        by_name["conv-relu"],
        by_name["relu-idempotent"],
        implied,
    ]
    assert redundant_axioms(axioms, timeout_s=1.0, jobs=1) == [
        ("mul-comm", True),
        ("mul-comm-again", True),
        ("conv-relu", False),
        ("relu-idempotent", False),
        ("relu-after-conv-relu", True),
    ]


@pytest.mark.parametrize("timeout_s", [float("inf"), 1e308, 0.0, -1.0, float("nan"), 1e-6])
def test_a_timeout_the_prover_cannot_honour_is_refused_before_any_proof(timeout_s: float) -> None:
    """inf and 1e308 overflow z3's millisecond counter; 0, negative, NaN and below a
    millisecond leave every rule unknown without saying why."""
    with pytest.raises(ValueError, match=r"expected a timeout from 0\.001 to 3600 seconds"):
        prove_rules([MATMUL_COMMUTES], AXIOMS, timeout_s=timeout_s)
    with pytest.raises(ValueError, match="expected a timeout"):
        prove_rule(MATMUL_COMMUTES, AXIOMS, timeout_s)
    with pytest.raises(ValueError, match="expected a timeout"):
        redundant_axioms(AXIOMS[:2], timeout_s)


def test_no_rule_starts_no_worker() -> None:
    assert prove_rules([], AXIOMS, jobs=1) == []
