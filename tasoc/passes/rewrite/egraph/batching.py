"""Batch chains: n operands joined by a proven two-operand multi-output rule.

A *batching* rule is a multi-output rule whose target concatenates two of its inputs:
`matmul(x, z), matmul(y, z) => split(matmul(concat(x, y), z))` runs two matmuls that
share a weight as one on stacked rows, and its column twin runs two that share an
input as one on concatenated weights. Real graphs batch more than two: nasrnn's five
time steps go through each input weight, and each step's input through eight weights.
Pairs of pairs appear only if multi-output rules run again in later rounds, where
every pair meets every other pair and every single one and the e-graph explodes
(Tensat therefore runs them once, §4).

A *chain* batches all of a group instead, in n-1 rounds, one step a round: the group
is the matches of one batching rule that agree on everything but the two joined
inputs (the same weight `z`, the same attributes); its *members* are the classes
bound to those two, in class order `m1, m2, ...`; and step k applies the rule to the
match that joins the chain so far, `concat(...(m1, m2)..., mk)`, with `m(k+1)`. That
match exists because the previous step added `matmul(concat(...), z)`. Every step is
an ordinary match of the proven rule, found by e-matching, so the chain is as sound as
the rule; only which matches are applied is new. Concatenations batching made are
never members, and groups that share one are skipped (they are pairwise alternatives
to the chains), except the concatenation of a complete chain: when a chain made
`X = concat(x0, ..., x4)`, the matmuls `X @ w_i` that share it start a chain of their
own.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field

from tasoc.ir.rules import PatternOp, Rule
from tasoc.passes.rewrite.egraph.egraph import ClassId, EGraph
from tasoc.passes.rewrite.egraph.ematch import EMatch

GroupKey = tuple[str, tuple[tuple[str, ClassId], ...], tuple[tuple[str, object], ...]]
"""(rule, the bindings of its other inputs, its parameters)."""

Apply = Callable[[EMatch], ClassId | None]
"""Applies a match of a batching rule; the class of its target's concatenation, or
None where the target does not type-check on the match."""


def batch_concat(rule: Rule) -> PatternOp | None:
    """The op of a batching rule's target that concatenates two of its inputs, or None
    when `rule` is not a two-output rule with such a target."""
    if len(rule.src.outputs) != 2:
        return None
    names = {i.name for i in rule.inputs}
    for op in rule.tgt.ops:
        if op.op == "concat" and len(set(op.operands)) == 2 and set(op.operands) <= names:
            return op
    return None


@dataclass(frozen=True)
class _Chain:
    prefix: ClassId
    """The class of the members joined so far (the first member, before any step)."""
    members: tuple[ClassId, ...]
    """The members `prefix` joins, in order."""


@dataclass
class BatchChains:
    """The chains of one saturation, grown one step a round (`grow`)."""

    egraph: EGraph
    chains: dict[GroupKey, _Chain] = field(default_factory=dict)
    made: set[ClassId] = field(default_factory=set)
    """Concatenations batching made: joined operands, never members themselves."""
    complete: set[ClassId] = field(default_factory=set)
    """The concatenations of chains that joined their whole group."""

    def note(self, joined: ClassId | None) -> None:
        """Record a concatenation a batching rule made (in round 1, pairwise)."""
        if joined is not None:
            self.made.add(joined)

    def anchors(self) -> set[ClassId] | None:
        """The classes the next round's matches must start at (`ematch.Index`): each
        chain's prefix (its next step joins it with the next member, and that match
        also names every member) and each complete chain's concatenation (which may
        start chains of its own). None before the first round, which needs every
        match to find the groups."""
        if not self.chains:
            return None
        find = self.egraph.find
        return {find(chain.prefix) for chain in self.chains.values()} | {
            find(cid) for cid in self.complete
        }

    def grow(self, matches: Iterable[EMatch], apply: Apply) -> int:
        """Take each group's next chain step among `matches` (this round's matches of
        batching rules); how many steps were taken. A step may have been applied
        already (round 1 applies every pair): it is taken all the same, to move on."""
        self._canonicalize()
        groups: dict[GroupKey, list[tuple[ClassId, ClassId, EMatch]]] = {}
        for match in matches:
            concat = batch_concat(match.rule)
            if concat is None:
                continue
            pair = concat.operands
            first, second = (self.egraph.find(match.inputs[name]) for name in pair)
            key = _group_key(match, pair)
            if not any(cid in self.made and cid not in self.complete for _, cid in key[1]):
                groups.setdefault(key, []).append((first, second, match))
        steps = 0
        for key, found in sorted(groups.items(), key=lambda item: repr(item[0])):
            chain = self._extended(self.chains.get(key), self._members(found), found, apply)
            if chain is not None:
                self.chains[key] = chain
                steps += 1
        return steps

    def _extended(
        self,
        chain: _Chain | None,
        members: Sequence[ClassId],
        found: Sequence[tuple[ClassId, ClassId, EMatch]],
        apply: Apply,
    ) -> _Chain | None:
        """`chain` (a new one at the first member) joined with its next member, or
        None when it has none left (it is then complete) or the step does not apply."""
        if chain is None:
            if not members:
                return None
            chain = _Chain(members[0], (members[0],))
        following = [m for m in members if m not in chain.members]
        if not following:
            self.complete.add(chain.prefix)
            return None
        step = _step(found, chain.prefix, following[0])
        joined = None if step is None else apply(step)
        if joined is None:
            return None
        self.made.add(joined)
        return _Chain(joined, (*chain.members, following[0]))

    def _members(self, found: Sequence[tuple[ClassId, ClassId, EMatch]]) -> list[ClassId]:
        """The group's members in class order: the classes it joins, without the
        concatenations batching made."""
        bound = {cid for first, second, _ in found for cid in (first, second)}
        return sorted(bound - self.made)

    def _canonicalize(self) -> None:
        find = self.egraph.find
        self.made = {find(cid) for cid in self.made}
        self.complete = {find(cid) for cid in self.complete}
        self.chains = {
            (rule, tuple((name, find(cid)) for name, cid in others), params): _Chain(
                find(chain.prefix), tuple(find(cid) for cid in chain.members)
            )
            for (rule, others, params), chain in self.chains.items()
        }


def _group_key(match: EMatch, pair: Sequence[str]) -> GroupKey:
    others = tuple(sorted((n, c) for n, c in match.inputs.items() if n not in pair))
    return match.rule.name, others, tuple(sorted(match.params.items(), key=lambda kv: kv[0]))


def _step(
    found: Sequence[tuple[ClassId, ClassId, EMatch]], prefix: ClassId, member: ClassId
) -> EMatch | None:
    """The match joining `prefix` with `member`, if e-matching found it."""
    return next((m for first, second, m in found if (first, second) == (prefix, member)), None)
