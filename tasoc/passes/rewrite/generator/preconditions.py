"""Shape preconditions for generated rules that hold only for some shapes.

The generator finds rules at a few shape sets, where, for instance, its two conv
weights always have the same shape. Some of those rules hold only when such a
coincidence does: fusing two convolutions into one grouped convolution needs their
kernels to agree (TASO's release shipped 15 such rules unprovable, and dropped them).

`infer_precondition` asks the prover instead of guessing: it adds one candidate
condition at a time, most general first, and keeps the first under which the rule is
proven. The prover makes this sound — a rule proven under a precondition holds
wherever the precondition does — and each candidate must hold at the shapes the rule
was found at, so the condition never makes the rule vacuous.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from tasoc.ir.rules import Condition, Dim, Param, Relation, Rule, ShapeOf, param_domain
from tasoc.verify.prover import prove_rule

CANDIDATE_TIMEOUT_S = 2.0
"""Seconds the prover gets per candidate precondition."""


def candidates(rule: Rule) -> Iterator[Condition]:
    """Conditions to try, most general first: one parameter fixed to a value of its
    domain, two inputs' dimensions equal (the same axis, then any two axes, as where a
    concat's split point meets a matmul's inner dimension), then two inputs of the same
    shape."""
    for name in rule.params:
        for value in param_domain(rule, name):
            yield Condition(Param(name), Relation.EQ, value)
    same_rank = [
        (a, b) for a, b in itertools.combinations(rule.inputs, 2) if a.rank == b.rank and a.rank
    ]
    for a, b in same_rank:
        for axis in range(a.rank):
            yield Condition(Dim(a.name, axis), Relation.EQ, Dim(b.name, axis))
    for a, b in itertools.combinations(rule.inputs, 2):
        for axis_a, axis_b in itertools.product(range(a.rank), range(b.rank)):
            if axis_a != axis_b or a.rank != b.rank:
                yield Condition(Dim(a.name, axis_a), Relation.EQ, Dim(b.name, axis_b))
    for a, b in same_rank:
        yield Condition(ShapeOf(a.name), Relation.EQ, ShapeOf(b.name))


def infer_precondition(
    rule: Rule,
    axioms: Sequence[Rule],
    examples: Sequence[Mapping[str, tuple[int, ...]]],
    timeout_s: float = CANDIDATE_TIMEOUT_S,
) -> Rule | None:
    """`rule` with one more precondition under which it is proven, or None.

    A candidate must hold at one of `examples` (input shapes the rule was found at)
    for some value of the rule's parameters, so that it does not exclude every use."""
    for condition in candidates(rule):
        if not any(_holds_somewhere(rule, condition, shapes) for shapes in examples):
            continue
        guarded = replace(rule, preconditions=(*rule.preconditions, condition))
        proven = prove_rule(guarded, axioms, timeout_s)
        if proven.is_proven:
            return proven
    return None


def _holds_somewhere(rule: Rule, condition: Condition, shapes: Mapping[str, Any]) -> bool:
    table: dict[str, Any] = dict(shapes)
    names = rule.params
    domains = [param_domain(rule, name) for name in names]
    return any(
        condition.holds(dict(zip(names, values, strict=True)), table)
        for values in itertools.product(*domains)
    )
