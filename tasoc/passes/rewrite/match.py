"""Finding where a rule's source pattern occurs in a light graph (`tasoc.ir.dag`).

A *match* binds every op of a rule's source pattern to a distinct node of the dag,
every rule input to a dag value and every `$parameter` to an attribute value, such
that the ops, their operand wiring and their attributes agree, and such that the
matched subgraph can be cut out and replaced (TASO, thesis §2.7):

* a value the pattern computes but does not return (an *internal* value) is read only
  by matched nodes and is not a program output, else replacing the outputs would
  leave the old nodes alive and compute them twice;
* no rule input is bound to a value a matched node computes;
* each bound input has the rule input's rank; broadcasting element-wise ops
  (`rules.SAME_SHAPE_OPERANDS`) match only operands of one shape, as rules mean them
  without broadcasting;
* shape terms in attributes (`dim(y, 1)`, `shape(x)`, `dtype(x)`) evaluate to the
  node's actual attribute, and the rule's preconditions hold at the bound shapes.

Each rule is compiled once into a *plan*: its source ops in an order in which every
op after the first is reached from one already matched, either as the producer of an
operand (walking back from an output) or as a consumer of a bound value (the second
matmul of a fused pair shares the first one's input). Only the first op of each
connected piece is looked up by op name among all nodes, so matching costs about one
attempt per node of that op kind and rule, and the order of matches is deterministic.

Commutativity is not searched for: the generated library states the commuted
variants as rules of their own.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from typing import Any

from tasoc.ir.dag import ATTR_NAMES, Attrs, Dag, Node, Use, Value
from tasoc.ir.rules import (
    SAME_SHAPE_OPERANDS,
    AttrTerm,
    Condition,
    Dim,
    DimLookup,
    DTypeOf,
    Param,
    Pattern,
    PatternOp,
    Rule,
    RuleError,
    RuleInput,
    ShapeOf,
    check_rule,
    evaluate,
    rule_digest,
    shape_table,
)


@dataclass(frozen=True)
class Match:
    """One occurrence of `rule.src` in a dag."""

    rule: Rule
    """The rule as applied (possibly a `Rule.reversed()` one): its `src` was matched."""
    inputs: dict[str, Value]
    """Rule input name -> the dag value it is bound to."""
    params: dict[str, Any]
    """Parameter name -> its value at this occurrence."""
    outputs: tuple[Value, ...]
    """The dag values of `rule.src.outputs`, in order: what `apply` replaces."""


def directed(rules: Sequence[Rule]) -> list[Rule]:
    """Each rule in both directions (`rule`, `rule.reversed()`), without duplicates.

    A rule is an equality, so the search may rewrite either way; a direction is left
    out when it cannot be applied: its source has no ops (a bare input matches
    anything), no op of it reads some rule input (returning an input binds nothing:
    matching raised a KeyError on such 4-op rules), or its target needs a parameter or
    names a value in a precondition that its source does not bind (`check_rule`).
    """
    result: list[Rule] = []
    seen: set[str] = set()
    for rule in rules:
        for candidate in (rule, rule.reversed()):
            if not _applicable(candidate):
                continue
            digest = rule_digest(_canonical(candidate))
            if digest not in seen:
                seen.add(digest)
                result.append(candidate)
    return result


def _canonical(rule: Rule) -> Rule:
    """`rule` with its values renamed in the order the source first mentions them, so
    that rules equal up to names (a commutativity rule and its reverse) coincide."""
    names: dict[str, str] = {}
    for op in (*rule.src.ops, *rule.tgt.ops):
        for name in (*op.operands, *op.results):
            names.setdefault(name, f"v{len(names)}")
    for name in (*rule.src.outputs, *rule.tgt.outputs, *(i.name for i in rule.inputs)):
        names.setdefault(name, f"v{len(names)}")

    def term(t: AttrTerm) -> AttrTerm:
        if isinstance(t, Dim):
            return Dim(names[t.value], t.axis)
        if isinstance(t, ShapeOf | DTypeOf):
            return type(t)(names[t.value])
        if isinstance(t, tuple):
            return tuple(term(item) for item in t)
        return t

    def pattern(p: Pattern) -> Pattern:
        ops = tuple(
            PatternOp(
                tuple(names[r] for r in op.results),
                op.op,
                tuple(names[o] for o in op.operands),
                tuple((key, term(value)) for key, value in op.attrs),
            )
            for op in p.ops
        )
        return Pattern(ops, tuple(names[o] for o in p.outputs))

    inputs = sorted((RuleInput(names[i.name], i.rank) for i in rule.inputs), key=_number)
    conditions = tuple(Condition(term(c.lhs), c.relation, term(c.rhs)) for c in rule.preconditions)
    return Rule("_", tuple(inputs), pattern(rule.src), pattern(rule.tgt), conditions)


def _number(rule_input: RuleInput) -> int:
    return int(rule_input.name[1:])


def _applicable(rule: Rule) -> bool:
    if not rule.src.ops:
        return False
    # An input the source only returns (no op reads it) cannot be bound by matching.
    read = {name for op in rule.src.ops for name in op.operands}
    if any(rule_input.name not in read for rule_input in rule.inputs):
        return False
    try:
        check_rule(rule)
    except RuleError:
        return False
    return True


def find_matches(dag: Dag, rules: Sequence[Rule]) -> Iterator[Match]:
    """Every match of every rule's source pattern in `dag` (see the module docstring):
    rules in order, and for each the matches in the order of `dag.ops`."""
    graph = _Graph(dag)
    for rule in rules:
        yield from _match_rule(graph, compile_plan(rule))


# -------------------------------------------------------------------------- plans


class Reach(Enum):
    """How a plan step finds the candidate nodes for its pattern op."""

    SCAN = "scan"
    """Every node of the op's kind (the first op of a connected piece)."""
    PRODUCER = "producer"
    """The node producing `via`, an operand of an op matched earlier."""
    CONSUMER = "consumer"
    """The nodes reading `via`, a value bound earlier, at operand `position`."""


@dataclass(frozen=True, slots=True)
class Step:
    op: str
    results: tuple[str, ...]
    operands: tuple[str, ...]
    attrs: tuple[AttrTerm, ...]
    """The op's attribute terms in `ATTR_NAMES` order, the order of `Node.attrs`."""
    reach: Reach
    via: str = ""
    position: int = 0


@dataclass(frozen=True, slots=True)
class Plan:
    rule: Rule
    steps: tuple[Step, ...]
    ranks: Mapping[str, int]
    """Rule input name -> rank."""


@functools.lru_cache(maxsize=4096)
def compile_plan(rule: Rule) -> Plan:
    """The order in which to match `rule.src`'s ops (module docstring), compiled once
    per rule; the e-graph matcher follows the same plans."""
    pattern = rule.src
    producer = {name: index for index, op in enumerate(pattern.ops) for name in op.results}
    order: list[tuple[int, Reach, str, int]] = []
    placed: set[int] = set()

    def place(index: int, reach: Reach, via: str = "", position: int = 0) -> None:
        placed.add(index)
        order.append((index, reach, via, position))
        for operand in pattern.ops[index].operands:
            source = producer.get(operand)
            if source is not None and source not in placed:
                place(source, Reach.PRODUCER, operand)

    roots = [producer[name] for name in pattern.outputs if name in producer]
    roots += range(len(pattern.ops))
    while len(placed) < len(pattern.ops):
        bound = {
            name
            for index in placed
            for name in (*pattern.ops[index].results, *pattern.ops[index].operands)
        }
        reached = next(
            (
                (index, position, operand)
                for index, op in enumerate(pattern.ops)
                if index not in placed
                for position, operand in enumerate(op.operands)
                if operand in bound
            ),
            None,
        )
        if reached is None:
            place(next(i for i in roots if i not in placed), Reach.SCAN)
        else:
            index, position, operand = reached
            place(index, Reach.CONSUMER, operand, position)
    steps = tuple(_step(pattern, index, reach, via, pos) for index, reach, via, pos in order)
    return Plan(rule, steps, {i.name: i.rank for i in rule.inputs})


def _step(pattern: Pattern, index: int, reach: Reach, via: str, position: int) -> Step:
    op = pattern.ops[index]
    attrs = tuple(op.attr(name) for name in ATTR_NAMES[op.op])
    return Step(op.op, op.results, op.operands, attrs, reach, via, position)


# ----------------------------------------------------------------------- matching


class _Graph:
    """What matching asks of a dag, computed once per `find_matches` call."""

    def __init__(self, dag: Dag) -> None:
        self.by_op: dict[str, list[Node]] = {}
        for node in dag.ops:
            self.by_op.setdefault(node.op, []).append(node)
        self.uses: Mapping[Value, tuple[Use, ...]] = dag.consumers()
        self.outputs = frozenset(dag.outputs)

    def candidates(self, step: Step, values: Mapping[str, Value]) -> Sequence[Node]:
        if step.reach is Reach.SCAN:
            return self.by_op.get(step.op, ())
        value = values[step.via]
        if step.reach is Reach.PRODUCER:
            return (value.node,)
        return [use.node for use in self.uses.get(value, ()) if use.operand == step.position]


@dataclass(frozen=True, slots=True)
class PartialMatch:
    """A partial match: pattern value bindings, parameters, the occurrences bound so
    far (dag nodes, or e-nodes with their class), and the shape terms to check once
    every value they read is bound. Shared with the e-graph matcher."""

    values: dict[str, Any]
    params: dict[str, Any]
    nodes: tuple[Hashable, ...]
    deferred: tuple[tuple[AttrTerm, Any], ...]


def walk(
    plan: Plan,
    candidates: Callable[[Step, Mapping[str, Any]], Iterable[Any]],
    bind: Callable[[Step, Any, PartialMatch], PartialMatch | None],
) -> Iterator[PartialMatch]:
    """Every binding of all of `plan`'s steps: each step's `candidates` given the
    values bound so far, kept where `bind` accepts them (depth first, in order)."""

    def extend(at: int, state: PartialMatch) -> Iterator[PartialMatch]:
        if at == len(plan.steps):
            yield state
            return
        step = plan.steps[at]
        for candidate in candidates(step, state.values):
            bound = bind(step, candidate, state)
            if bound is not None:
                yield from extend(at + 1, bound)

    yield from extend(0, PartialMatch({}, {}, (), ()))


def bind_occurrence(
    plan: Plan,
    step: Step,
    state: PartialMatch,
    occurrence: Hashable,
    results: Sequence[Any],
    operands: Sequence[Any],
    shape_of: Callable[[Any], tuple[int, ...]],
    attrs: Attrs,
) -> PartialMatch | None:
    """`state` with `step`'s op bound to `occurrence` of an op of its kind, which
    computes `results` from `operands` (`shape_of` each) with `attrs`; None where
    they disagree: counts, an occurrence bound already, element-wise operands of two
    shapes, a value bound to two things, an input of another rank, or attributes the
    pattern's terms cannot denote."""
    if (
        len(operands) != len(step.operands)
        or len(results) != len(step.results)
        or occurrence in state.nodes
    ):
        return None
    if step.op in SAME_SHAPE_OPERANDS and len({shape_of(value) for value in operands}) > 1:
        return None
    values = dict(state.values)
    for name, value in zip(step.results, results, strict=True):
        if values.setdefault(name, value) != value:
            return None
    for name, value in zip(step.operands, operands, strict=True):
        if values.setdefault(name, value) != value:
            return None
        rank = plan.ranks.get(name)
        if rank is not None and len(shape_of(value)) != rank:
            return None
    params = dict(state.params)
    deferred = list(state.deferred)
    for term, (_, actual) in zip(step.attrs, attrs, strict=True):
        if not unify(term, actual, params, deferred):
            return None
    return PartialMatch(values, params, (*state.nodes, occurrence), tuple(deferred))


def shape_terms_hold(plan: Plan, state: PartialMatch, table: DimLookup) -> bool:
    """Whether the deferred shape terms denote their attributes and the rule's
    preconditions hold, at the bound values' shapes (`table`)."""
    try:
        return all(
            same_attr(evaluate(term, state.params, table), actual)
            for term, actual in state.deferred
        ) and all(c.holds(state.params, table) for c in plan.rule.preconditions)
    except (RuleError, KeyError, TypeError):
        return False


def _shape(value: Value) -> tuple[int, ...]:
    return value.sig.shape


def _match_rule(graph: _Graph, plan: Plan) -> Iterator[Match]:
    def bind(step: Step, node: Node, state: PartialMatch) -> PartialMatch | None:
        if node.op != step.op:
            return None
        return bind_occurrence(
            plan, step, state, node, node.results, node.inputs, _shape, node.attrs
        )

    for state in walk(plan, graph.candidates, bind):
        if _complete(graph, plan, state):
            rule = plan.rule
            yield Match(
                rule,
                {i.name: state.values[i.name] for i in rule.inputs},
                state.params,
                tuple(state.values[name] for name in rule.src.outputs),
            )


def unify(term: AttrTerm, actual: Any, params: dict[str, Any], deferred: list[Any]) -> bool:
    """Whether `term` can denote `actual`, binding parameters in `params`; shape terms
    are put off to `deferred` (they may read values not bound yet)."""
    if isinstance(term, Param):
        if term.name in params:
            return same_attr(params[term.name], actual)
        params[term.name] = actual
        return True
    if isinstance(term, Dim | ShapeOf | DTypeOf):
        deferred.append((term, actual))
        return True
    if isinstance(term, tuple):
        return (
            isinstance(actual, tuple)
            and len(actual) == len(term)
            and all(unify(t, a, params, deferred) for t, a in zip(term, actual, strict=True))
        )
    return same_attr(term, actual)


def same_attr(expected: Any, actual: Any) -> bool:
    """Equality as the IR sees it: `True` is not `1` (the node interning tells them
    apart too); tuples element by element; a `DType` equals its name."""
    if isinstance(expected, tuple) or isinstance(actual, tuple):
        return (
            isinstance(expected, tuple)
            and isinstance(actual, tuple)
            and len(expected) == len(actual)
            and all(same_attr(e, a) for e, a in zip(expected, actual, strict=True))
        )
    return isinstance(expected, bool) == isinstance(actual, bool) and expected == actual


def _complete(graph: _Graph, plan: Plan, state: PartialMatch) -> bool:
    """The checks that need the whole match: shape terms, preconditions, and that the
    matched subgraph can be replaced (internal values unused outside it, no input
    computed inside it)."""
    if not shape_terms_hold(plan, state, shape_table(state.values)):
        return False
    matched = set(state.nodes)
    if any(state.values[i.name].node in matched for i in plan.rule.inputs):
        return False
    returned = {state.values[name] for name in plan.rule.src.outputs}
    for node in state.nodes:
        for value in node.results:
            if value in returned:
                continue
            if value in graph.outputs:
                return False
            if any(use.node not in matched for use in graph.uses.get(value, ())):
                return False
    return True
