"""E-matching: where a rule's source pattern occurs in an e-graph.

It follows the same plans as matching on a dag (`match.compile_plan`): the first op
of each connected piece of the pattern is looked up among all e-nodes of its kind, an
operand's producer among the e-nodes of the operand's class, and a consumer among
the e-nodes that read a bound class at the right operand position. Where a dag gives
one node per value, a class gives several e-nodes, so each step may branch.

A match binds pattern values to classes and `$parameters` to attribute values, under
the same checks as on a dag: input ranks, element-wise operands of one shape, shape
terms and preconditions evaluated at the classes' types. The checks that protect a
dag from losing a value (internal values used elsewhere, cycles) have no counterpart
here: an e-graph keeps every alternative, and extraction rules out cycles.
"""

from __future__ import annotations

from collections.abc import Collection, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasoc.ir.rules import Rule, shape_table
from tasoc.passes.rewrite.egraph.egraph import PROJECT, ClassId, EGraph, ENode
from tasoc.passes.rewrite.match import (
    PartialMatch,
    Plan,
    Reach,
    Step,
    bind_occurrence,
    compile_plan,
    shape_terms_hold,
    walk,
)


@dataclass(frozen=True)
class EMatch:
    """One occurrence of `rule.src` in an e-graph."""

    rule: Rule
    inputs: dict[str, ClassId]
    params: dict[str, Any]
    outputs: tuple[ClassId, ...]
    """The classes of `rule.src.outputs`: each is unioned with the target's output."""


class Index:
    """What e-matching asks of an e-graph, built once per saturation round (after
    `rebuild`): e-nodes by op, and the users of each class by operand position.

    With `anchors`, a match's first op is looked up only among the e-nodes that read
    one of those classes (its later ops as always): the matches *at* those classes,
    which is what a batch chain's next step needs (`batching.BatchChains.anchors`),
    without enumerating every other pair of an e-graph that holds thousands."""

    def __init__(self, egraph: EGraph, anchors: Collection[ClassId] | None = None) -> None:
        self.egraph = egraph
        self.by_op: dict[str, list[tuple[ClassId, ENode]]] = {}
        self.users: dict[tuple[ClassId, int], list[tuple[ClassId, ENode]]] = {}
        anchored = None if anchors is None else {egraph.find(cid) for cid in anchors}
        for cid, enode in egraph.items():
            if anchored is None or not anchored.isdisjoint(enode[2]):
                self.by_op.setdefault(enode[0], []).append((cid, enode))
            for position, child in enumerate(enode[2]):
                self.users.setdefault((child, position), []).append((cid, enode))

    def candidates(
        self, step: Step, values: Mapping[str, ClassId]
    ) -> Sequence[tuple[ClassId, ENode]]:
        """The (class, e-node) pairs that `step`'s op could be bound to."""
        if step.reach is Reach.SCAN:
            return self.by_op.get(step.op, ())
        bound = values[step.via]
        if step.reach is Reach.CONSUMER:
            return [
                pair for pair in self.users.get((bound, step.position), ()) if pair[1][0] == step.op
            ]
        classes = self.egraph.classes
        if len(step.results) == 1:
            return [(bound, enode) for enode in classes[bound] if enode[0] == step.op]
        # A result of a multi-result op: through its projection to the tuple class.
        index = step.results.index(step.via)
        return [
            (owner, enode)
            for projection in classes[bound]
            if projection[0] == PROJECT and projection[1][0][1] == index
            for owner in projection[2]
            for enode in classes[owner]
            if enode[0] == step.op
        ]


def ematch(index: Index, rule: Rule) -> Iterator[EMatch]:
    """Every match of `rule.src` in the indexed e-graph."""
    plan = compile_plan(rule)
    egraph = index.egraph

    def bind(step: Step, pair: tuple[ClassId, ENode], state: PartialMatch) -> PartialMatch | None:
        cid, (_, attrs, children) = pair
        sigs = egraph.sigs(cid)
        if len(sigs) != len(step.results):
            return None
        multi = len(sigs) > 1
        results = [egraph.result_class(cid, i) for i in range(len(sigs))] if multi else [cid]
        return bind_occurrence(plan, step, state, pair, results, children, shape_of, attrs)

    def shape_of(cid: ClassId) -> tuple[int, ...]:
        return egraph.sig(cid).shape

    for state in walk(plan, index.candidates, bind):
        if _complete(egraph, plan, state):
            yield EMatch(
                rule,
                {i.name: state.values[i.name] for i in rule.inputs},
                state.params,
                tuple(state.values[name] for name in rule.src.outputs),
            )


def _complete(egraph: EGraph, plan: Plan, state: PartialMatch) -> bool:
    """Shape terms and preconditions, at the bound classes' types."""
    if not state.deferred and not plan.rule.preconditions:
        return True
    table = shape_table({name: egraph.placeholder(cid) for name, cid in state.values.items()})
    return shape_terms_hold(plan, state, table)
