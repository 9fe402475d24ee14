"""Dropping rules that are instances of more general ones.

A rule is redundant when another rule of the set, read in either direction (a rule
is an equality), becomes it by substituting inputs for inputs and values for
parameters: `matmul(matmul(x, y), x) -> matmul(x, matmul(y, x))` is associativity
with `z` renamed to `x` (the thesis's Figure 2.4a, where renaming merges two inputs),
and a rule with `axis = 0` is redundant next to the same rule with `axis = $axis`.
Wherever the specific rule matches, the general one matches too (binding two inputs
to one tensor, or the parameter to 0), so dropping the specific one loses no rewrite.

Rules are compared with their ops aligned position by position (both patterns come
from the same canonical traversal), so the check is a single walk that builds the
substitution and fails at the first conflict; rules are first grouped by a skeleton
that blanks out inputs and parameter-able literals, so only candidates are walked.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.rules import ATTR_DOMAINS, AttrTerm, Dim, DTypeOf, Param, Pattern, Rule, ShapeOf

_BLANK = "?"


def prune_instances(rules: Sequence[Rule]) -> list[Rule]:
    """The rules that are not instances of another rule of `rules` (of two rules
    that are instances of each other, the first is kept)."""
    groups: dict[tuple, list[int]] = {}
    for index, rule in enumerate(rules):
        groups.setdefault(_skeleton(rule), []).append(index)
    dropped: set[int] = set()
    for members in groups.values():
        for specific in members:
            for general in members:
                if general == specific or general in dropped:
                    continue
                if _covered(rules[specific], rules[general]) and not (
                    general > specific and _covered(rules[general], rules[specific])
                ):
                    dropped.add(specific)
                    break
    return [rule for index, rule in enumerate(rules) if index not in dropped]


def _covered(specific: Rule, general: Rule) -> bool:
    return is_instance(specific, general) or is_instance(specific, general.reversed())


def is_instance(specific: Rule, general: Rule) -> bool:
    """Whether substituting inputs of `specific` for the inputs of `general` (not
    necessarily one-to-one, ranks kept) and terms for its parameters gives
    `specific`, op for op."""
    matcher = _Matcher(specific, general)
    return all(
        matcher.pattern(s, g) for s, g in ((specific.src, general.src), (specific.tgt, general.tgt))
    )


class _Matcher:
    """One attempt at the substitution, built as the walk goes."""

    def __init__(self, specific: Rule, general: Rule) -> None:
        self.specific_ranks = {i.name: i.rank for i in specific.inputs}
        self.general_ranks = {i.name: i.rank for i in general.inputs}
        self.inputs: dict[str, str] = {}
        self.results: dict[str, str] = {}
        self.params: dict[str, Any] = {}

    def pattern(self, specific: Pattern, general: Pattern) -> bool:
        if len(specific.ops) != len(general.ops):
            return False
        for s, g in zip(specific.ops, general.ops, strict=True):
            if (
                s.op != g.op
                or len(s.results) != len(g.results)
                or len(s.operands) != len(g.operands)
            ):
                return False
            if not all(self.name(a, b) for a, b in zip(s.operands, g.operands, strict=True)):
                return False
            for a, b in zip(s.results, g.results, strict=True):
                if self.results.setdefault(b, a) != a:
                    return False
            for (_, s_term), (_, g_term) in zip(s.attrs, g.attrs, strict=True):
                if not self.term(s_term, g_term):
                    return False
        return len(specific.outputs) == len(general.outputs) and all(
            self.name(a, b) for a, b in zip(specific.outputs, general.outputs, strict=True)
        )

    def name(self, specific: str, general: str) -> bool:
        """Value names: inputs of `general` map to inputs of `specific` of the same
        rank, results to the results of the ops at the same positions."""
        if general not in self.general_ranks:
            return self.results.get(general) == specific
        if self.specific_ranks.get(specific) != self.general_ranks[general]:
            return False
        return self.inputs.setdefault(general, specific) == specific

    def bind(self, param: str, value: Any) -> bool:
        bound = self.params.setdefault(param, value)
        return bound == value and type(bound) is type(value)

    def term(self, specific: AttrTerm, general: AttrTerm) -> bool:
        if isinstance(general, Param):
            return self.bind(general.name, specific)
        if isinstance(general, Dim):
            if not (isinstance(specific, Dim) and self.name(specific.value, general.value)):
                return False
            if isinstance(general.axis, Param):
                return self.bind(general.axis.name, specific.axis)
            return specific.axis == general.axis
        if isinstance(general, ShapeOf | DTypeOf):
            return type(specific) is type(general) and self.name(specific.value, general.value)
        if isinstance(general, tuple):
            return (
                isinstance(specific, tuple)
                and len(specific) == len(general)
                and all(self.term(s, g) for s, g in zip(specific, general, strict=True))
            )
        return type(specific) is type(general) and specific == general


def _skeleton(rule: Rule) -> tuple:
    """The rule with inputs and parameter-able values blanked out and results
    numbered per side, its two sides in either order: an instance and the rule it is
    an instance of (in either direction) have the same skeleton."""
    inputs = {i.name for i in rule.inputs}
    numbers: dict[str, str] = {}

    def blank(name: str) -> str:
        return _BLANK if name in inputs else numbers[name]

    def term(op: str, key: str, value: AttrTerm) -> object:
        if isinstance(value, Param) or (op, key) in ATTR_DOMAINS or key == "axis":
            return _BLANK
        if isinstance(value, Dim):
            return ("dim", blank(value.value), _BLANK)
        if isinstance(value, ShapeOf | DTypeOf):
            return (type(value).__name__, blank(value.value))
        if isinstance(value, tuple):
            return tuple(term(op, key, v) for v in value)
        return value

    def pattern(p: Pattern) -> tuple:
        numbers.clear()
        ops = []
        for op in p.ops:
            attrs = tuple(term(op.op, k, v) for k, v in op.attrs)
            operands = tuple(blank(o) for o in op.operands)
            for result in op.results:
                numbers[result] = str(len(numbers))
            ops.append((op.op, operands, attrs))
        return tuple(ops), tuple(blank(o) for o in p.outputs)

    return tuple(sorted((pattern(rule.src), pattern(rule.tgt)), key=repr))
