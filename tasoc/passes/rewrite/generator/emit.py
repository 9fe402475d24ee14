"""From pairs of graphs to `tasoc.ir.rules.Rule`s: attribute terms, parameters, checks.

Enumeration knows each attribute's concrete value at every shape set. A rule states
it as a term:

* the same value at every set is a literal (`"same"`, `[3, 3]`), except `dtype`,
  which is always `dtype(x)` of an input;
* a value that varies with the shapes is read off a value the pattern names: a split's
  sizes off the operands of the concatenation it undoes (`[dim(y, 1), dim(z, 1)]`,
  from the split tree, never by coincidence of sizes), a depthwise convolution's groups
  off its input's channels, the others (`ones{shape}`, `i_matmul{size}`, a kernel that
  `enlarge` or `i_conv` produce) off the first named value of matching sizes at every
  set;
* a varying value that no named value matches becomes a parameter when the attribute
  has a domain (`enlarge{kernel = $kernel}`), checked over that whole domain.

Then each literal with a domain in `rules.ATTR_DOMAINS` (and each concat/split axis)
is tried as a parameter, one (attribute, value) group at a time: `$strides` replaces
every `strides = [1, 1]` of the rule, and stays only if the rule holds for every value
of `param_domain` — at every shape set where it type-checks, and type-checking at one
at least. Every rule is finally checked the same way, so what comes out holds
numerically, with the true semantics, wherever it applies at the generator's shapes.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from tasoc.ir.dag import ATTR_NAMES, Dag
from tasoc.ir.rules import (
    ATTR_DOMAINS,
    AttrTerm,
    Dim,
    DTypeOf,
    Param,
    Pattern,
    PatternOp,
    Rule,
    RuleError,
    RuleInput,
    ShapeOf,
    check_rule,
    param_domain,
)
from tasoc.passes.rewrite.generator.evaluate import apply
from tasoc.passes.rewrite.generator.prune import ATOL, RTOL, Pair

INPUT_NAMES = ("x", "y", "z", "u", "v", "w", "p", "q", "r")
MAX_ASSIGNMENTS = 64
"""Parameter assignments a rule is checked at; a rule with more is not generalized."""

ShapeSet = dict[str, tuple[int, ...]]


@dataclass(frozen=True, slots=True)
class Draft:
    """A rule with the input shapes to check it at: those of every shape set of its
    world and, per set, the *uniform* shapes that give every input of a rank the
    first one's shape (a rule about any concatenation axis, found for inputs whose
    shapes allow only one, can then be checked at the others)."""

    rule: Rule
    shapes: tuple[ShapeSet, ...]


# --------------------------------------------------------------------------- drafts


def draft(pair: Pair, name: str) -> Draft | None:
    """The rule of a pair (src = `pair.src`), or None when it cannot be stated: an
    attribute no term expresses, or a pattern without inputs."""
    table = pair.table
    inputs = pair.inputs(pair.src)
    if not inputs or not set(pair.inputs(pair.tgt)) <= set(inputs):
        return None
    names = {v: _input_name(i) for i, v in enumerate(inputs)}
    patterns = []
    for label, outputs in (("s", pair.src), ("t", pair.tgt)):
        pattern = _pattern(pair, outputs, dict(names), label)
        if pattern is None:
            return None
        patterns.append(pattern)
    rule_inputs = tuple(RuleInput(names[v], len(table.values[v].shapes[0])) for v in inputs)
    rule = Rule(name, rule_inputs, patterns[0], patterns[1])
    shapes: list[ShapeSet] = []
    for i in range(len(table.world.sizes)):
        found = {names[v]: table.values[v].shapes[i] for v in inputs}
        by_rank: dict[int, tuple[int, ...]] = {}
        for shape in found.values():
            by_rank.setdefault(len(shape), shape)
        uniform = {name: by_rank[len(shape)] for name, shape in found.items()}
        shapes += [found] if uniform == found else [found, uniform]
    return Draft(rule, tuple(shapes))


def _input_name(index: int) -> str:
    if index < len(INPUT_NAMES):
        return INPUT_NAMES[index]
    return f"x{index}"


def _pattern(
    pair: Pair, outputs: Sequence[int], names: dict[int, str], label: str
) -> Pattern | None:
    """One side's pattern; `names` starts with the inputs and gains the results."""
    table = pair.table
    ops = []
    count = 0
    for term_id in pair.ops(outputs):
        term = table.terms[term_id]
        op = table.op(term)
        attrs = []
        for key in ATTR_NAMES[op]:
            value = _attr_term(pair, term_id, key, names)
            if value is None:
                return None
            attrs.append((key, value))
        results = []
        for result in term.results:
            count += 1
            names[result] = f"{label}{count}"
            results.append(names[result])
        operands = tuple(names[v] for v in term.operands)
        ops.append(PatternOp(tuple(results), op, operands, tuple(attrs)))
    return Pattern(tuple(ops), tuple(names[v] for v in outputs))


def _attr_term(pair: Pair, term_id: int, key: str, names: Mapping[int, str]) -> AttrTerm | None:
    """The term of attribute `key` of a term (see the module docstring)."""
    table = pair.table
    term = table.terms[term_id]
    op = table.op(term)
    per_set = [attrs[key] for attrs in term.attrs]
    first_input = next(iter(names))
    if key == "dtype":
        return DTypeOf(names[first_input])
    if key == "sizes":
        tree = table.values[term.operands[0]].trees[term.attrs[0]["axis"]]
        assert tree is not None
        if tree.left not in names or tree.right not in names:
            return None
        return (Dim(names[tree.left], tree.axis), Dim(names[tree.right], tree.axis))
    if all(value == per_set[0] for value in per_set):
        return per_set[0]
    if key == "groups":
        data = term.operands[0]
        channels = [shape[1] for shape in table.values[data].shapes]
        return Dim(names[data], 1) if channels == per_set and data in names else None
    if key == "shape":
        for value_id, name in names.items():
            if list(table.values[value_id].shapes) == [tuple(s) for s in per_set]:
                return ShapeOf(name)
    elif isinstance(per_set[0], tuple):
        parts = [
            _dim(pair, [value[i] for value in per_set], names, preferred=2 + i)
            for i in range(len(per_set[0]))
        ]
        if all(part is not None for part in parts):
            return tuple(parts)  # type: ignore[arg-type]
    else:
        found = _dim(pair, per_set, names, preferred=None)
        if found is not None:
            return found
    return Param(key) if (op, key) in ATTR_DOMAINS else None


def _dim(
    pair: Pair, sizes: Sequence[int], names: Mapping[int, str], preferred: int | None
) -> Dim | None:
    """`dim(v, axis)` for the first named value whose `axis` has `sizes` at every set,
    trying axis `preferred` of every value first."""
    values = pair.table.values
    for only_preferred in (True, False):
        for value_id, name in names.items():
            shapes = values[value_id].shapes
            for axis in range(len(shapes[0])):
                if only_preferred and axis != preferred:
                    continue
                if [shape[axis] for shape in shapes] == list(sizes):
                    return Dim(name, axis)
    return None


# ----------------------------------------------------------------------- checking


class Checker:
    """Numeric checks of rules with the true semantics (float64), at given shapes."""

    def __init__(self, seed: int) -> None:
        self._seed = seed

    def holds(
        self, rule: Rule, shapes: Sequence[ShapeSet], settled: tuple[str, Any] | None = None
    ) -> tuple[int, ...] | None:
        """The shape sets at which the rule type-checks for some parameter values, if
        it holds at all of them for every value of its parameters (and type-checks
        somewhere for each); None otherwise. `settled = (param, value)` skips the
        assignments with that value, already checked as the literal it replaces (at
        least one other value must then hold)."""
        try:
            check_rule(rule)
            params = rule.params
            domains = [param_domain(rule, p) for p in params]
        except RuleError:
            return None
        assignments = list(itertools.islice(itertools.product(*domains), MAX_ASSIGNMENTS + 1))
        if len(assignments) > MAX_ASSIGNMENTS:
            return None
        typed: set[int] = set()
        for assignment in assignments:
            env = dict(zip(params, assignment, strict=True))
            if settled is not None and env[settled[0]] == settled[1]:
                continue
            typed_here = 0
            for index, set_shapes in enumerate(shapes):
                try:
                    src, tgt = rule.instantiate(set_shapes, env)
                except RuleError:
                    continue
                if not self._agree(src, tgt, index):
                    return None
                typed_here += 1
                typed.add(index)
            if not typed_here:
                return None
        return tuple(sorted(typed)) or None

    def _agree(self, src: Dag, tgt: Dag, index: int) -> bool:
        rng = np.random.default_rng([self._seed, index, 11])
        args = [rng.uniform(-1.0, 1.0, size=node.sigs[0].shape) for node in src.args]
        a, b = run(src, args), run(tgt, args)
        return all(
            x.shape == y.shape and np.allclose(x, y, RTOL, ATOL) for x, y in zip(a, b, strict=True)
        )


def run(dag: Dag, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Evaluate a dag with the float evaluator."""
    env: dict[Any, list[np.ndarray]] = {
        node: [arg] for node, arg in zip(dag.args, args, strict=True)
    }
    for node in dag.ops:
        operands = [env[v.node][v.index] for v in node.inputs]
        env[node] = apply(node.op, dict(node.attrs), operands, False)
    return [env[v.node][v.index] for v in dag.outputs]


# --------------------------------------------------------------------- parameters


Occurrence = tuple[str, int, str]
"""(side, op index, attribute) of a literal in a rule."""


def parametrize(draft: Draft, checker: Checker) -> tuple[Rule, tuple[int, ...]] | None:
    """The most general rule of `draft` that holds (see the module docstring) and the
    shape sets where it type-checks; None when not even the draft holds."""
    rule = draft.rule
    typed = checker.holds(rule, draft.shapes)
    if typed is None:
        return None
    for (key, value), occurrences in _literal_groups(rule).items():
        name = _fresh_param(rule, key)
        trial = _substitute(rule, occurrences, key, value, Param(name))
        trial_typed = checker.holds(trial, draft.shapes, settled=(name, value))
        if trial_typed is not None:
            rule, typed = trial, tuple(sorted({*typed, *trial_typed}))
    return rule, typed


def _literal_groups(rule: Rule) -> dict[tuple[str, Any], list[Occurrence]]:
    """Occurrences of literals that a parameter could stand for, by (attribute, value)."""
    groups: dict[tuple[str, Any], list[Occurrence]] = {}
    for side, pattern in (("src", rule.src), ("tgt", rule.tgt)):
        for index, op in enumerate(pattern.ops):
            for key, term in op.attrs:
                has_domain = (op.op, key) in ATTR_DOMAINS or (
                    key == "axis" and op.op in ("concat", "split")
                )
                if has_domain and not isinstance(term, Param | Dim | ShapeOf | DTypeOf):
                    groups.setdefault((key, term), []).append((side, index, key))
    return groups


def _fresh_param(rule: Rule, key: str) -> str:
    taken = set(rule.params)
    for suffix in itertools.count(1):
        name = key if suffix == 1 else f"{key}{suffix}"
        if name not in taken:
            return name
    raise AssertionError("unreachable")


def _substitute(
    rule: Rule, occurrences: Sequence[Occurrence], key: str, value: Any, param: Param
) -> Rule:
    """`rule` with `param` at the occurrences; for an axis, also in the sizes of the
    splits that undo a concatenation along that axis (`dim(y, $axis)`)."""
    where = set(occurrences)

    def pattern(side: str, original: Pattern) -> Pattern:
        ops = []
        for index, op in enumerate(original.ops):
            attrs = []
            for attr, term in op.attrs:
                if (side, index, attr) in where:
                    term = param
                elif key == "axis" and op.op == "split" and attr == "sizes":
                    term = tuple(
                        Dim(d.value, param) if isinstance(d, Dim) and d.axis == value else d
                        for d in term  # type: ignore[union-attr]
                    )
                attrs.append((attr, term))
            ops.append(replace(op, attrs=tuple(attrs)))
        return replace(original, ops=tuple(ops))

    return replace(rule, src=pattern("src", rule.src), tgt=pattern("tgt", rule.tgt))
