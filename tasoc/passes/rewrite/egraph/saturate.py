"""Equality saturation: apply every match of every rule, round after round.

Each round matches all rules against the e-graph as it stood at the round's start
(so the order of rules does not matter), then adds each match's target and unions
it with the matched source, then rebuilds. The e-graph is *saturated* when a round
changes nothing: it then holds every graph the rules can reach. Real rule sets do
not saturate on real models (associativity and concat/split rules grow without
bound), so a round stops early at `node_limit` e-nodes or at the deadline.

Following Tensat (Yang et al., MLSys 2021, §4): single-output rules run every round,
while multi-output rules (two matmuls sharing an input fused into one and a split)
run only in the first `multi_rounds` rounds, because each application adds a
concat and a split that further rules multiply. After saturation, batching rules
(multi-output rules that concatenate two operands) go on alone as *chains*
(`batching.py`): one step a round along each group of operands, so n matmuls that
share a weight become one without every pair meeting every other.

Rounds that do not saturate would take all the time and leave the chains none, and
on a model whose gain is the chains' (nasrnn: the single rules' three rounds take
most of the search on a loaded machine, and never pay there), the search would then
return its input. So where there are batching rules, the rounds get
`1 - chain_share` of saturation's time and the chains the rest (and whatever the
rounds leave): rounds cut short stop where they are (the e-graph, rebuilt, holds
every graph it held and the targets added so far) and the chains grow on it.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Collection, Sequence
from dataclasses import dataclass, field

from tasoc.ir.rules import Rule, RuleError, build_pattern
from tasoc.ir.shapes import ShapeError
from tasoc.passes.rewrite.egraph.batching import Apply, BatchChains, batch_concat
from tasoc.passes.rewrite.egraph.egraph import ClassId, EGraph
from tasoc.passes.rewrite.egraph.ematch import EMatch, Index, ematch
from tasoc.passes.search import Deadline, Progress, StopReason


@dataclass(frozen=True)
class SaturationLimits:
    node_limit: int = 20_000
    """Stop adding targets once the e-graph holds this many e-nodes."""
    rounds: int = 15
    """Rounds at most."""
    multi_rounds: int = 1
    """Rounds in which multi-output rules are applied."""
    batch_chains: bool = True
    """Grow batching rules' chains after saturation (`batching.py`)."""
    chain_share: float = 0.3
    """The share of saturation's time kept for the chains when there are batching rules
    (module docstring; 0 <= chain_share < 1)."""


@dataclass
class Saturation:
    """What saturating did."""

    rounds: int = 0
    stopped: StopReason = StopReason.SATURATED
    """`SATURATED`, `NODE_LIMIT`, `ROUNDS` or `TIMEOUT`: the rounds' limit (`TIMEOUT`
    also where the rounds were cut short at their share and the chains grew after
    them), or the batch chains' after rounds that saturated or used all `rounds`."""
    matches: int = 0
    applied: Counter[str] = field(default_factory=Counter)
    """How often each rule's application merged two classes (changed the e-graph)."""
    chain_rounds: int = 0
    """Rounds of batch chains after saturation (`batching.py`)."""
    chain_steps: int = 0
    """Chain steps taken in them."""


def saturate(
    egraph: EGraph,
    rules: Sequence[Rule],
    limits: SaturationLimits,
    deadline: Deadline,
    progress: Progress | None = None,
) -> Saturation:
    """Grow `egraph` with `rules` (applied as given: pass both directions) until it is
    saturated or a limit is reached; see the module docstring. `progress` hears of the
    rounds done and the e-nodes, after each round."""
    single = [rule for rule in rules if len(rule.src.outputs) == 1]
    multi = [rule for rule in rules if len(rule.src.outputs) > 1]
    batching = [rule for rule in multi if batch_concat(rule)] if limits.batch_chains else []
    chains = BatchChains(egraph)

    def apply(match: EMatch) -> tuple[bool, ClassId | None]:
        """Apply `match`, counting it where it merged; whether it did, and the class a
        batching rule's target concatenated."""
        merged, joined = _apply(egraph, match)
        if merged:
            result.applied[match.rule.name] += 1
        chains.note(joined)
        return merged, joined

    def chain_step(match: EMatch) -> ClassId | None:
        return apply(match)[1]

    result = Saturation()
    if not 0.0 <= limits.chain_share < 1.0:
        raise ValueError(f"chain_share must be in [0, 1), got {limits.chain_share}")
    rounds_deadline = deadline.share(1.0 - limits.chain_share) if batching else deadline
    while True:
        if result.rounds >= limits.rounds:
            result.stopped = StopReason.ROUNDS
            break
        active = single + multi if result.rounds < limits.multi_rounds else single
        egraph.generation = result.rounds + 1
        matches = _matches(egraph, active, rounds_deadline)
        result.matches += len(matches)
        changed = False
        for match in matches:
            stop = _limit_reached(egraph, limits, rounds_deadline)
            if stop is not None:
                result.stopped = stop
                break
            changed |= apply(match)[0]
        egraph.rebuild()
        result.rounds += 1
        if progress is not None:
            progress(result.rounds, egraph.num_nodes)
        if result.stopped != StopReason.SATURATED:
            break
        if rounds_deadline.expired():
            result.stopped = StopReason.TIMEOUT
            break
        if not changed:
            break
    grows = result.stopped in (StopReason.SATURATED, StopReason.ROUNDS, StopReason.TIMEOUT)
    if batching and grows and not deadline.expired():
        _grow_chains(egraph, batching, chains, chain_step, result, limits, deadline, progress)
    return result


def _grow_chains(
    egraph: EGraph,
    batching: Sequence[Rule],
    chains: BatchChains,
    apply: Apply,
    result: Saturation,
    limits: SaturationLimits,
    deadline: Deadline,
    progress: Progress | None,
) -> None:
    """Chain rounds with the batching rules alone, until no chain grows or a limit is
    reached (which then is why saturation stopped). Alone because the nested
    concatenations chains make would feed concat associativity and the concat/matmul
    rules, which multiply them without bound. `progress` hears of the e-nodes, with
    the saturation rounds unchanged."""
    while (stop := _limit_reached(egraph, limits, deadline)) is None:
        egraph.generation += 1
        steps = chains.grow(_matches(egraph, batching, deadline, chains.anchors()), apply)
        egraph.rebuild()
        if not steps:
            return
        result.chain_rounds += 1
        result.chain_steps += steps
        if progress is not None:
            progress(result.rounds, egraph.num_nodes)
    result.stopped = stop


def _limit_reached(
    egraph: EGraph, limits: SaturationLimits, deadline: Deadline
) -> StopReason | None:
    """Why saturation must stop adding to `egraph` now, if it must."""
    if egraph.num_nodes >= limits.node_limit:
        return StopReason.NODE_LIMIT
    return StopReason.TIMEOUT if deadline.expired() else None


def _matches(
    egraph: EGraph,
    rules: Sequence[Rule],
    deadline: Deadline,
    anchors: Collection[ClassId] | None = None,
) -> list[EMatch]:
    """Every match of `rules` (starting at `anchors`, when given: `ematch.Index`),
    found before any is applied."""
    index = Index(egraph, anchors)
    found: list[EMatch] = []
    for rule in rules:
        found.extend(ematch(index, rule))
        if deadline.expired():
            break
    return found


def _apply(egraph: EGraph, match: EMatch) -> tuple[bool, ClassId | None]:
    """Add `match`'s target and union it with the source: whether a class merged, and
    for a batching rule the class of its target's concatenation. A target that does
    not type-check on the bound classes, or whose type differs from the source's, is
    skipped (as on a dag: a rule holds where both sides type-check)."""
    rule = match.rule
    inputs = {name: egraph.placeholder(cid) for name, cid in match.inputs.items()}
    try:
        built = build_pattern(rule, rule.tgt, inputs, match.params)
    except (RuleError, ShapeError):
        return False, None
    targets = [built[name] for name in rule.tgt.outputs]
    if any(
        value.sig != egraph.sig(source)
        for value, source in zip(targets, match.outputs, strict=True)
    ):
        return False, None
    merged = False
    for value, source in zip(targets, match.outputs, strict=True):
        merged |= egraph.union(source, egraph.add_value(value))
    concat = batch_concat(rule)
    joined = None if concat is None else egraph.add_value(built[concat.results[0]])
    return merged, joined
