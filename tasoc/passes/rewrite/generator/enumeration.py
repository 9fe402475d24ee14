"""Step 1 of TASO's Algorithm 1: enumerate graphs, fingerprint them, pair the equal ones.

The enumeration is TASO's depth-first construction, level by level (graphs of 1 op,
then 2, ...), with three devices that keep it from building anything twice:

* *No duplicated computation.* Terms are hash-consed (`terms.Table`), and a graph is a
  set of terms listed in increasing term id, which is a topological order (an operand
  is always built before its users), so each set is visited exactly once.
* *Observational equivalence.* An op reads only *canonical* values: the first value
  of each fingerprint class (the smallest graph computing it). A graph that reads a
  non-canonical value `v` is redundant — the rule `v -> canonical(v)` and congruence
  rewrite it into one the enumeration has — which is TASO's common-subgraph pruning
  (§2.5) applied while enumerating instead of afterwards, and is what makes 4
  operators (and 5 on smaller operator sets) reachable. It also covers TASO's
  "duplicated tensors" check: no graph holds two equal values.
* *Incremental evaluation.* Level k extends every graph G of k-1 ops, with at most
  two sinks, by one op that reads all of G's sinks, so the new term's graph is exactly
  G plus that op; only the new op is evaluated, on the cached values of G.

Every new term is fingerprinted. A term whose value is new becomes canonical; one
whose value is already known is a *candidate*: its graph paired with a graph of the
same fingerprint that reads no other inputs (the class's canonical one when it can).
A split (which undoes a concatenation, thesis §2.3.1) yields a two-output graph,
paired with the canonical graphs of its two results: that is how multi-output rules
such as fusing two matmuls with a shared input arise. Splits are the one exception
to observational equivalence: they also apply to non-canonical values, because a
fused graph need not be the canonical one (see `_Enumerator._is_base`).
"""

from __future__ import annotations

import bisect
import itertools
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field

from tasoc.passes.rewrite.generator.fingerprint import graph_fingerprint
from tasoc.passes.rewrite.generator.terms import Table, Term
from tasoc.passes.rewrite.generator.worlds import World

LevelDone = Callable[[int], None]
"""Called with the number of ops after each level of enumeration (progress)."""


@dataclass(frozen=True, slots=True)
class Candidate:
    """Two graphs with equal fingerprints, each given by its output values (the
    graph is the union of their closures; an output may be a pool input)."""

    src: tuple[int, ...]
    tgt: tuple[int, ...]


@dataclass
class Enumeration:
    """What enumerating one world produced."""

    table: Table
    graphs: int = 0
    """Graphs fingerprinted: every term, i.e. every graph with one top op."""
    extended: int = 0
    """Intermediate graphs (sets of canonical terms) the levels extended."""
    candidates: list[Candidate] = field(default_factory=list)


def enumerate_world(
    world: World, max_ops: int, seed: int, level_done: LevelDone | None = None
) -> Enumeration:
    """All graphs of up to `max_ops` ops over `world`, and the candidate pairs."""
    enumerator = _Enumerator(world, max_ops, seed)
    for level in range(1, max_ops + 1):
        enumerator.level(level)
        if level_done is not None:
            level_done(level)
    result = enumerator.result
    result.candidates.extend(_split_candidates(result.table, enumerator.splits, max_ops))
    return result


class _Enumerator:
    """The state of one world's enumeration between levels."""

    def __init__(self, world: World, max_ops: int, seed: int) -> None:
        self.result = Enumeration(Table(world, seed))
        self.table = self.result.table
        self.max_ops = max_ops
        self.blocks: dict[frozenset[int], list[int]] = {}
        """Canonical terms by the terms they read (what a graph can be extended by)."""
        self.splits: list[Term] = []
        self.split_bases: list[int] = []
        """Non-canonical values of the last level a split can undo (see `_is_base`)."""

    def level(self, level: int) -> None:
        """Build every graph of `level` ops: one op on a graph of `level - 1`."""
        table = self.table
        new_blocks: list[Term] = []
        bases, self.split_bases = self.split_bases, []
        for ops, sinks in _graphs(table, self.blocks, level - 1):
            self.result.extended += 1
            for form_index, operands in _final_ops(table, ops, sinks):
                if self._record(table.build(form_index, operands), level):
                    new_blocks.append(table.terms[-1])
        for base in bases:
            for form_index, form in enumerate(table.forms):
                if form.op == "split":
                    self._record(table.build(form_index, (base,)), level)
            table.drop_exact(base)
        for term in new_blocks:
            self.blocks.setdefault(table.producers(term), []).append(term.id)

    def _record(self, term: Term | None, level: int) -> bool:
        """Fingerprint a term just built (not one `Table.build` returned again) and
        file it as a canonical block, a candidate or a split; True for a new block."""
        table = self.table
        if term is None or term.id != len(table.terms) - 1:
            return False
        self.result.graphs += 1
        if table.op(term) == "split":
            self.splits.append(term)
            for value in term.results:
                table.classify(value)
                table.drop_exact(value)
            return False
        value = term.results[0]
        canonical = table.classify(value)
        if canonical and level < self.max_ops:
            return True
        if not canonical and level < self.max_ops and self._is_base(value):
            self.split_bases.append(value)
        else:
            table.drop_exact(value)
        partner = None if canonical else _partner(table, value)
        if partner is not None:
            self.result.candidates.append(Candidate((value,), (partner,)))
        return False

    def _is_base(self, value_id: int) -> bool:
        """Whether a split may undo a concatenation inside this non-canonical value:
        it carries a split tree, and its graph does not also compute its canonical
        value (that graph would compute one tensor twice). A split of the canonical
        value may be impossible where this one is not (`conv(x, concat(w,
        enlarge(u)))` carries the tree that `concat(conv(x, w), conv(x, u))` has
        too, but only the first fuses the two convolutions), so these are split as
        well: that is how fusion rules whose fused graph is not canonical arise."""
        value = self.table.values[value_id]
        if all(tree is None for tree in value.trees):
            return False
        canonical = self.table.values[self.table.rep[value.cls]]
        return canonical.term not in value.closure and canonical.id not in value.inputs


def _graphs(
    table: Table, blocks: dict[frozenset[int], list[int]], size: int
) -> Iterator[tuple[list[int], tuple[int, ...]]]:
    """Every set of `size` canonical terms closed under operands (as a list in id
    order) whose sinks — results no term of the set reads — are at most two, the most
    one op can read; with the sinks."""
    ops: list[int] = []

    def extend(sinks: tuple[int, ...]) -> Iterator[tuple[list[int], tuple[int, ...]]]:
        if len(ops) == size:
            yield ops, sinks
            return
        later = size - len(ops) - 1
        last = ops[-1] if ops else -1
        for deps in _subsets(ops):
            members = blocks.get(deps)
            if not members:
                continue
            for term_id in members[bisect.bisect_right(members, last) :]:
                term = table.terms[term_id]
                kept = tuple(s for s in sinks if s not in term.operands)
                if len(kept) + 1 - later > 2:
                    continue
                ops.append(term_id)
                yield from extend((*kept, term.results[0]))
                ops.pop()

    yield from extend(())


def _subsets(ops: Sequence[int]) -> Iterator[frozenset[int]]:
    """The sets of at most two terms of `ops` (the producers an op can have)."""
    yield frozenset()
    for count in (1, 2):
        for chosen in itertools.combinations(ops, count):
            yield frozenset(chosen)


def _final_ops(
    table: Table, ops: Sequence[int], sinks: tuple[int, ...]
) -> Iterator[tuple[int, tuple[int, ...]]]:
    """(form, operands) for every op that reads all of the sinks (any pool input
    when the graph is empty), so that it adds exactly one op to the graph."""
    inputs = table.input_ids
    available = [*inputs, *(table.terms[t].results[0] for t in ops)]
    for form_index, form in enumerate(table.forms):
        if form.arity == 0:
            if not ops:
                yield form_index, ()
        elif form.arity == 1:
            for operand in sinks or (inputs if not ops else ()):
                yield form_index, (operand,)
        elif len(sinks) == 2:
            yield form_index, sinks
            yield form_index, (sinks[1], sinks[0])
        elif len(sinks) == 1:
            (sink,) = sinks
            for other in available:
                yield form_index, (sink, other)
                if other != sink:
                    yield form_index, (other, sink)
        elif not ops:
            for pair in itertools.product(inputs, repeat=2):
                yield form_index, pair


def _partner(table: Table, value_id: int) -> int | None:
    """The first value of `value_id`'s class that reads no input it does not read
    (so a rule from it can bind every input), or None."""
    value = table.values[value_id]
    for member in table.members[value.cls]:
        if member == value_id:
            return None
        other = table.values[member]
        is_split = other.term >= 0 and table.op(table.terms[other.term]) == "split"
        if not is_split and other.inputs <= value.inputs:
            return member
    return None


def _split_candidates(table: Table, splits: Sequence[Term], max_ops: int) -> Iterator[Candidate]:
    """Every split graph paired with the graph of the canonical values of its two
    outputs, which has the same fingerprint; oriented so that the source binds
    every input (and has more ops when both could)."""
    groups: dict[tuple[int, ...], list[Term]] = {}
    for term in splits:
        classes = [table.values[v].cls for v in term.results]
        groups.setdefault(graph_fingerprint(classes), []).append(term)
    for (first, second), members in groups.items():
        if first == second or min(table.rep[first], table.rep[second]) < 0:
            continue
        rep_ops = table.values[table.rep[first]].closure | table.values[table.rep[second]].closure
        if len(rep_ops) > max_ops:
            continue
        for term in members:
            results = term.results
            reps = tuple(table.rep[table.values[v].cls] for v in results)
            rep_inputs = table.values[reps[0]].inputs | table.values[reps[1]].inputs
            split_graph = table.values[results[0]]
            forward = rep_inputs <= split_graph.inputs
            backward = split_graph.inputs <= rep_inputs
            if forward and (len(split_graph.closure) >= len(rep_ops) or not backward):
                yield Candidate(results, reps)
            elif backward:
                yield Candidate(reps, results)
