"""What a rewrite rule is.

A rule says that two small `graph` programs compute the same tensors: a *source*
pattern (what the optimizer looks for) and a *target* pattern (what it may put in
its place). Rules are IR, not code: the generator (`tasoc.passes.rewrite`) writes
them, the prover (`tasoc.verify`) proves them, and the search applies them, each
reading the same objects, so none of them needs to know who made a rule.

The pieces:

* `RuleInput` — a variable standing for any tensor of a given rank (`x: 4`).
* `PatternOp` — one op application in a pattern: the op's short name (`conv2d`),
  operands (input or result names), results, and *every* attribute of the op as an
  `AttrTerm`: a literal (`1`, `"same"`, `[1, 1]`), a parameter variable (`$s`,
  shared between source and target, so a rule holds for every value of it), or a
  term over shapes (`dim(y, 1)`, `shape(x)`, `dtype(x)`) for attributes that
  follow from the operands, such as the sizes of a split that undoes a concat.
* `Pattern` — ops in a topological order and the names of its outputs.
* `Rule` — name, inputs, source, target (output i of the source equals output i of
  the target: multi-output rules pair by position), `preconditions` (`Condition`s
  over parameters and shapes, for rules that hold only for some shapes, like
  grouped convolution), `provenance` (the generator settings that found it) and
  `proof` (`ProofStatus`: whether the verifier proved it, how, in what time).

Instantiating a rule at concrete shapes and parameter values (`Rule.instantiate`)
gives the two patterns as `dag.Dag`s, type-checked by the op's shape rules; that is
how rules are tested numerically and how a matcher checks a match.

A rule prints itself (`str(rule)`) in the text format of docs/rules.md, and its proof
digest (`rule_digest`) hashes that text; whole rule files are read and written by
`tasoc.ir.rule_text` (`parse_rules`/`format_rules`).
"""

from __future__ import annotations

import hashlib
import itertools
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from tasoc.ir.dag import ATTR_NAMES, Dag, Node, Value
from tasoc.ir.op_sets import ops_with
from tasoc.ir.opdef import op_defs
from tasoc.ir.shapes import DType, ShapeError, TensorSig
from tasoc.ir.traits import Broadcasting, Elementwise

# ------------------------------------------------------------------------------ terms


@dataclass(frozen=True, slots=True)
class Param:
    """A parameter variable (`$s`): any value, the same wherever the rule names it."""

    name: str

    def __str__(self) -> str:
        return f"${self.name}"


@dataclass(frozen=True, slots=True)
class Dim:
    """`dim(v, axis)`: the size of pattern value `v` along `axis` (negative counts
    from the end; a parameter, `dim(x, $a)`, in axioms that hold for any axis)."""

    value: str
    axis: int | Param

    def __str__(self) -> str:
        return f"dim({self.value}, {self.axis})"


@dataclass(frozen=True, slots=True)
class ShapeOf:
    """`shape(v)`: the whole shape of pattern value `v` (a constant's shape)."""

    value: str

    def __str__(self) -> str:
        return f"shape({self.value})"


@dataclass(frozen=True, slots=True)
class DTypeOf:
    """`dtype(v)`: the element type of pattern value `v` (a constant's dtype)."""

    value: str

    def __str__(self) -> str:
        return f"dtype({self.value})"


Literal = int | float | str | bool
AttrTerm = Literal | Param | Dim | ShapeOf | DTypeOf | tuple["AttrTerm", ...]
"""An attribute in a pattern: literals, `Param`s and shape terms, nested in tuples
(`[dim(y, 1), dim(z, 1)]`, `[$s, $s]`)."""


class RuleError(ValueError):
    """A malformed rule (text that does not parse, names that do not resolve, a pattern
    that does not type-check); the message is one line and names the rule."""


def term_params(term: AttrTerm) -> set[str]:
    """The parameter names a term mentions."""
    if isinstance(term, Param):
        return {term.name}
    if isinstance(term, Dim) and isinstance(term.axis, Param):
        return {term.axis.name}
    if isinstance(term, tuple):
        return set().union(*(term_params(t) for t in term)) if term else set()
    return set()


def term_values(term: AttrTerm) -> set[str]:
    """The pattern values whose shape or dtype a term reads."""
    if isinstance(term, Dim | ShapeOf | DTypeOf):
        return {term.value}
    if isinstance(term, tuple):
        return set().union(*(term_values(t) for t in term)) if term else set()
    return set()


def format_term(term: AttrTerm) -> str:
    """`term` as the text format writes it (docs/rules.md)."""
    if isinstance(term, tuple):
        return "[" + ", ".join(format_term(t) for t in term) + "]"
    if isinstance(term, bool):
        return "true" if term else "false"
    if isinstance(term, str):
        return '"' + term.replace("\\", "\\\\").replace('"', '\\"') + '"'
    if isinstance(term, float):
        text = repr(term)
        return text if math.isfinite(term) else f'"{text}"'
    return str(term)


# ---------------------------------------------------------------------------- patterns


@dataclass(frozen=True, slots=True)
class RuleInput:
    """A tensor variable of a rule: any tensor of rank `rank`."""

    name: str
    rank: int


@dataclass(frozen=True, slots=True)
class PatternOp:
    """`results = op{attrs}(operands)` inside a pattern."""

    results: tuple[str, ...]
    op: str
    operands: tuple[str, ...]
    attrs: tuple[tuple[str, AttrTerm], ...] = ()

    def attr(self, name: str) -> AttrTerm:
        for key, value in self.attrs:
            if key == name:
                return value
        raise KeyError(f"{self.op} has no attribute '{name}'")


@dataclass(frozen=True, slots=True)
class Pattern:
    """Ops in topological order (each operand is a rule input or an earlier result)
    and the values the pattern produces, in order."""

    ops: tuple[PatternOp, ...]
    outputs: tuple[str, ...]

    @property
    def num_ops(self) -> int:
        """Ops that compute (constants count: they are materialized)."""
        return len(self.ops)

    def op_counts(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for op in self.ops:
            counts[op.op] = counts.get(op.op, 0) + 1
        return counts


class Relation(StrEnum):
    EQ = "=="
    NE = "!="
    DIVIDES = "divides"
    """`a divides b`: b is a multiple of a."""


@dataclass(frozen=True, slots=True)
class Condition:
    """A shape precondition: `lhs relation rhs` over parameters, shape terms and literals
    (`$s == [1, 1]`, `$g divides dim(x, 1)`)."""

    lhs: AttrTerm
    relation: Relation
    rhs: AttrTerm

    def holds(self, env: Mapping[str, Any], dims: DimLookup) -> bool:
        left, right = evaluate(self.lhs, env, dims), evaluate(self.rhs, env, dims)
        if self.relation is Relation.EQ:
            return left == right
        if self.relation is Relation.NE:
            return left != right
        return isinstance(left, int) and isinstance(right, int) and left != 0 and right % left == 0

    def __str__(self) -> str:
        return f"{format_term(self.lhs)} {self.relation.value} {format_term(self.rhs)}"


class Proof(StrEnum):
    PROVEN = "proven"
    """The prover showed `axioms ∧ src ≠ tgt` unsat for every output pair."""
    REFUTED = "refuted"
    """The prover found a model of `src ≠ tgt`: the rule is false under the axioms."""
    UNKNOWN = "unknown"
    """The prover gave up (timeout); the rule is never applied."""
    UNCHECKED = "unchecked"
    """Not yet given to the prover (a generator's candidate)."""


@dataclass(frozen=True, slots=True)
class ProofStatus:
    status: Proof = Proof.UNCHECKED
    detail: str = ""
    """How: the prover and time, or why it failed (one line)."""
    digest: str = ""
    """`rule_digest` of the rule when the status was given: a rule edited afterwards no
    longer matches it, so a tampered file cannot pass an unproven rule off as proven."""


@dataclass(frozen=True, slots=True)
class Rule:
    """`src` equals `tgt` (output by output) for all tensors of the inputs' ranks and
    all parameter values satisfying `preconditions`."""

    name: str
    inputs: tuple[RuleInput, ...]
    src: Pattern
    tgt: Pattern
    preconditions: tuple[Condition, ...] = ()
    provenance: str = ""
    proof: ProofStatus = field(default_factory=ProofStatus)

    @property
    def params(self) -> tuple[str, ...]:
        """The parameter variables, in order of first mention."""
        seen: dict[str, None] = {}
        for pattern in (self.src, self.tgt):
            for op in pattern.ops:
                for _, term in op.attrs:
                    seen.update(dict.fromkeys(sorted(term_params(term))))
        for condition in self.preconditions:
            seen.update(
                dict.fromkeys(sorted(term_params(condition.lhs) | term_params(condition.rhs)))
            )
        return tuple(seen)

    @property
    def is_proven(self) -> bool:
        return self.proof.status is Proof.PROVEN

    def with_proof(self, status: Proof, detail: str = "") -> Rule:
        """This rule with a new proof status, stamped with its digest."""
        return replace(self, proof=ProofStatus(status, detail, rule_digest(self)))

    @property
    def proof_is_current(self) -> bool:
        """Whether the proof status was given to exactly this rule (see ProofStatus.digest)."""
        return self.proof.digest == rule_digest(self)

    def reversed(self, name: str | None = None) -> Rule:
        """The same equality read right to left."""
        return replace(self, name=name or f"{self.name}.rev", src=self.tgt, tgt=self.src)

    def __str__(self) -> str:
        """The rule's block in the text format (docs/rules.md): what `rule_digest`
        hashes, and what `rule_text.format_rules` writes once per rule."""
        inputs = ", ".join(f"{i.name}: {i.rank}" for i in self.inputs)
        lines = [f"rule {self.name}({inputs}) {{"]
        for condition in self.preconditions:
            lines.append(f"  where {condition}")
        for label, pattern in (("src", self.src), ("tgt", self.tgt)):
            lines.append(f"  {label} {{")
            for op in pattern.ops:
                attrs = ", ".join(f"{k} = {format_term(v)}" for k, v in op.attrs)
                lines.append(
                    f"    {', '.join(op.results)} = {op.op}"
                    + (f"{{{attrs}}}" if attrs else "")
                    + f"({', '.join(op.operands)})"
                )
            lines.append(f"    return {', '.join(pattern.outputs)}")
            lines.append("  }")
        if self.provenance:
            lines.append(f"  provenance {format_term(self.provenance)}")
        proof = self.proof
        detail = f" {format_term(proof.detail)}" if proof.detail else ""
        digest = f" digest {format_term(proof.digest)}" if proof.digest else ""
        lines.append(f"  proof {proof.status.value}{detail}{digest}")
        lines.append("}")
        return "\n".join(lines)

    def instantiate(
        self, shapes: Mapping[str, Sequence[int]], params: Mapping[str, Any], dtype: str = "f32"
    ) -> tuple[Any, Any]:
        """The source and target as `dag.Dag`s over arguments of the given shapes (by
        input name), with every parameter bound; RuleError when a precondition fails
        or a pattern does not type-check at these shapes."""
        return instantiate(self, shapes, params, dtype)


# ------------------------------------------------------------------ parameter domains

ATTR_DOMAINS: Mapping[tuple[str, str], tuple[Any, ...]] = {
    (op.name, key): values for op in op_defs().values() for key, values in op.domains.items()
}
"""Each op's `OpDef.domains` by (op, attribute): the values a parameter of each op
attribute ranges over when rules are enumerated, validated or tested numerically:
small, but each covering the cases that behave differently (unit and non-unit strides,
both paddings and activations, grouped and ungrouped convolution). Axes and
permutations depend on rank (`param_domain`)."""


def param_domain(rule: Rule, name: str) -> tuple[Any, ...]:
    """The values `$name` of `rule` takes in enumeration and tests: the intersection of
    the domains of every attribute it stands for (in the order of the first), where an
    axis ranges over the operand's axes and a permutation over all permutations.
    Preconditions are not applied here; `Rule.instantiate` checks them."""
    ranks = _static_ranks(rule)
    domain: tuple[Any, ...] | None = None
    for pattern in (rule.src, rule.tgt):
        for op in pattern.ops:
            rank = ranks.get(op.operands[0]) if op.operands else None
            for key, term in op.attrs:
                if name not in term_params(term):
                    continue
                values = _attr_domain(op.op, key, rank) if term == Param(name) else None
                if values is None:
                    continue
                domain = values if domain is None else tuple(v for v in domain if v in values)
    if domain is None:
        raise RuleError(f"rule '{rule.name}': no domain for ${name}")
    return domain


def _attr_domain(op: str, key: str, rank: int | None) -> tuple[Any, ...] | None:
    if key == "axis" and rank is not None:
        return tuple(range(rank))
    if key == "perm" and rank is not None:
        return tuple(itertools.permutations(range(rank)))
    return ATTR_DOMAINS.get((op, key))


def _static_ranks(rule: Rule) -> dict[str, int]:
    """Ranks of pattern values as far as they follow from the inputs' ranks without
    attribute values (enough to bound axes and permutations)."""
    ranks = {i.name: i.rank for i in rule.inputs}
    for pattern in (rule.src, rule.tgt):
        for op in pattern.ops:
            operand_ranks = [ranks.get(name) for name in op.operands]
            rank = operand_ranks[0] if operand_ranks else None
            if op.op == "matmul" and None not in operand_ranks:
                rank = max(r for r in operand_ranks if r is not None)
            for result in op.results:
                if rank is not None:
                    ranks.setdefault(result, rank)
    return ranks


# ------------------------------------------------------------------------- evaluation

DimLookup = Mapping[str, tuple[int, ...]]
"""Shapes of pattern values by name (inputs and results), for evaluating shape terms."""


def evaluate(term: AttrTerm, env: Mapping[str, Any], shapes: DimLookup) -> Any:
    """The concrete value of `term` with parameters from `env` and value shapes from
    `shapes` (and dtypes under the key `"<name>:dtype"`); tuples stay tuples."""
    if isinstance(term, Param):
        if term.name not in env:
            raise RuleError(f"parameter ${term.name} is not bound")
        return env[term.name]
    if isinstance(term, Dim):
        shape = shapes[term.value]
        axis = evaluate(term.axis, env, shapes)
        if not (isinstance(axis, int) and -len(shape) <= axis < len(shape)):
            raise RuleError(f"{term}: '{term.value}' has rank {len(shape)}")
        return shape[axis]
    if isinstance(term, ShapeOf):
        return tuple(shapes[term.value])
    if isinstance(term, DTypeOf):
        return shapes[f"{term.value}:dtype"]
    if isinstance(term, tuple):
        return tuple(evaluate(t, env, shapes) for t in term)
    return term


def rule_digest(rule: Rule) -> str:
    """A short hash of what the rule says (inputs, patterns, preconditions), not of its
    name, provenance or proof."""
    unproven = replace(rule, name="_", provenance="", proof=ProofStatus())
    text = str(unproven)
    return hashlib.sha256(text.encode()).hexdigest()[:16]


# -------------------------------------------------------------------------- checking


def check_rule(rule: Rule) -> None:
    """RuleError unless `rule` is well formed: known ops with all of their attributes,
    every name defined once before use, as many source as target outputs, and every
    parameter of the target also bound by the source (a match must fix it)."""
    try:
        if not rule.inputs:
            raise RuleError("a rule needs at least one input")
        input_names = [i.name for i in rule.inputs]
        if len(set(input_names)) != len(input_names):
            raise RuleError("an input name repeats")
        for label, pattern in (("src", rule.src), ("tgt", rule.tgt)):
            _check_pattern(label, pattern, set(input_names))
        if len(rule.src.outputs) != len(rule.tgt.outputs):
            raise RuleError(
                f"src has {len(rule.src.outputs)} outputs and tgt {len(rule.tgt.outputs)}"
            )
        bound = {p for op in rule.src.ops for _, term in op.attrs for p in term_params(term)}
        for op in rule.tgt.ops:
            for key, term in op.attrs:
                free = term_params(term) - bound
                if free:
                    raise RuleError(
                        f"tgt: {op.op} attribute {key} uses ${sorted(free)[0]}, which src "
                        "does not bind"
                    )
        defined = set(input_names) | _results(rule.src)
        for condition in rule.preconditions:
            unknown = (term_values(condition.lhs) | term_values(condition.rhs)) - defined
            if unknown:
                raise RuleError(f"precondition '{condition}' names unknown value '{min(unknown)}'")
    except RuleError as err:
        raise RuleError(f"rule '{rule.name}': {err}") from None


def _results(pattern: Pattern) -> set[str]:
    return {name for op in pattern.ops for name in op.results}


def _check_pattern(label: str, pattern: Pattern, inputs: set[str]) -> None:
    defined = set(inputs)
    for op in pattern.ops:
        names = ATTR_NAMES.get(op.op)
        if names is None:
            raise RuleError(f"{label}: unknown op '{op.op}'")
        given = [key for key, _ in op.attrs]
        if sorted(given) != sorted(names):
            raise RuleError(f"{label}: {op.op} takes attributes {list(names)}, got {given}")
        for operand in op.operands:
            if operand not in defined:
                raise RuleError(f"{label}: {op.op} uses '{operand}' before it is defined")
        for _, term in op.attrs:
            unknown = term_values(term) - defined
            if unknown:
                raise RuleError(f"{label}: {op.op} reads the shape of unknown '{min(unknown)}'")
        for result in op.results:
            if result in defined:
                raise RuleError(f"{label}: '{result}' is defined twice")
            defined.add(result)
    if not pattern.outputs:
        raise RuleError(f"{label}: no outputs")
    for output in pattern.outputs:
        if output not in defined:
            raise RuleError(f"{label}: returns unknown '{output}'")


# --------------------------------------------------------------------- instantiation

SAME_SHAPE_OPERANDS = ops_with(Elementwise) & ops_with(Broadcasting)
"""The element-wise ops that broadcast in the IR (`add`, `mul`). In a rule they denote
the op on operands of one shape, as in TASO: several properties (a conv of a sum of
kernels, concat of sums) are false when an operand broadcasts, so neither
instantiation nor matching lets one do so."""


def instantiate(
    rule: Rule, shapes: Mapping[str, Sequence[int]], params: Mapping[str, Any], dtype: str = "f32"
) -> tuple[Dag, Dag]:
    """See `Rule.instantiate`."""
    element = DType(dtype)
    args = []
    for index, rule_input in enumerate(rule.inputs):
        shape = tuple(shapes[rule_input.name])
        if len(shape) != rule_input.rank:
            raise RuleError(
                f"rule '{rule.name}': input {rule_input.name} has rank {rule_input.rank}, "
                f"given shape {list(shape)}"
            )
        args.append(Node.arg(index, rule_input.name, TensorSig(shape, element)))
    inputs = {node.attr("name"): node.out for node in args}
    src = _build(rule, "src", rule.src, inputs, params)
    known = shape_table({**inputs, **src})
    for condition in rule.preconditions:
        if not condition.holds(params, known):
            raise RuleError(f"rule '{rule.name}': precondition '{condition}' does not hold")
    tgt = _build(rule, "tgt", rule.tgt, inputs, params)
    return (
        Dag(args, [src[name] for name in rule.src.outputs]),
        Dag(args, [tgt[name] for name in rule.tgt.outputs]),
    )


def shape_table(values: Mapping[str, Value]) -> dict[str, Any]:
    """The `DimLookup` of pattern values bound to dag values: each one's shape, and its
    dtype under `"<name>:dtype"` as a `DType` (so that a `dtype(x)` attribute builds
    the same node as the IR's own `dtype = f32`)."""
    table: dict[str, Any] = {}
    for name, value in values.items():
        table[name] = value.sig.shape
        table[f"{name}:dtype"] = value.sig.dtype
    return table


def build_pattern(
    rule: Rule, pattern: Pattern, inputs: Mapping[str, Value], params: Mapping[str, Any]
) -> dict[str, Value]:
    """The nodes of `pattern` (`rule.src` or `rule.tgt`) built on `inputs` (rule input
    name -> dag value) with `params` bound: every pattern value by name, inputs
    included. RuleError when the pattern does not type-check on these values. This is
    how a matcher builds the target of a match inside a larger dag."""
    label = "src" if pattern is rule.src else "tgt"
    return _build(rule, label, pattern, inputs, params)


def _build(
    rule: Rule,
    label: str,
    pattern: Pattern,
    inputs: Mapping[str, Value],
    params: Mapping[str, Any],
) -> dict[str, Value]:
    values = dict(inputs)
    for op in pattern.ops:
        known = shape_table(values)
        operands = [values[name] for name in op.operands]
        if op.op in SAME_SHAPE_OPERANDS and len({value.sig.shape for value in operands}) > 1:
            shapes = " and ".join(str(list(value.sig.shape)) for value in operands)
            raise RuleError(
                f"rule '{rule.name}': {label}: {op.op} of {shapes}: in a rule, element-wise "
                "ops take operands of one shape (no broadcasting)"
            )
        try:
            attrs = {key: evaluate(term, params, known) for key, term in op.attrs}
            node = Node(op.op, operands, **attrs)
        except (ShapeError, RuleError, ValueError, TypeError) as err:
            raise RuleError(f"rule '{rule.name}': {label}: {op.op}: {err}") from None
        if len(node.results) != len(op.results):
            raise RuleError(
                f"rule '{rule.name}': {label}: {op.op} has {len(node.results)} results, "
                f"the pattern names {len(op.results)}"
            )
        values.update(zip(op.results, node.results, strict=True))
    return values
