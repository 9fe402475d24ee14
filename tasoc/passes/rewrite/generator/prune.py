"""Step 2 of TASO's Algorithm 1 and the pruning of §2.5: re-test candidate pairs with
floats, then drop the redundant ones.

* `retest` runs both graphs of a pair on random float inputs at every shape set
  (including one the fingerprints never saw) with the true `relu` and max pooling,
  and keeps the pairs whose outputs agree; this removes pairs that only the
  polynomial stand-ins, or a coincidence modulo the prime, made equal.
* `rename` keeps one pair of each class of pairs equal up to a renaming of their
  inputs (thesis §2.5, "input tensor renaming"): pairs are compared by a canonical
  key that numbers inputs in order of first use and labels each with its symbolic
  shape, so only interchangeable inputs are identified.
* `generalize` is the common-subgraph pruning (thesis §2.5, Figure 2.4b): where both
  graphs of a pair compute the same subgraph (the same hash-consed term) and feed it
  to other ops, or one of them returns it, the subgraph is replaced by a fresh input;
  if the more general pair still holds on random values it takes the place of the
  specific one, and pairs that generalize to the same one collapse. (TASO's second
  form — both graphs end in the same op on equal operands — cannot occur: the
  enumeration only ever applies an op to canonical values, see `enumeration.py`.)
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from tasoc.passes.rewrite.generator.enumeration import Candidate
from tasoc.passes.rewrite.generator.evaluate import apply, random_input
from tasoc.passes.rewrite.generator.terms import Table
from tasoc.passes.rewrite.generator.worlds import FINGERPRINT_SETS

RTOL, ATOL = 1e-7, 1e-9
"""Float agreement: float64 evaluation of graphs of a few ops on inputs in [-1, 1]
agrees to ~1e-15, so this only absorbs rounding, never a real difference."""


@dataclass(frozen=True, slots=True)
class Pair:
    """A candidate pair of one world's table, in which the values `fresh` (results of
    terms both graphs compute) are read as fresh inputs instead."""

    table: Table
    src: tuple[int, ...]
    tgt: tuple[int, ...]
    fresh: frozenset[int] = frozenset()

    def leaves(self, value_id: int) -> bool:
        """Whether the value is an input of the pair (pool or fresh)."""
        return value_id in self.fresh or self.table.values[value_id].term < 0

    def ops(self, outputs: Iterable[int]) -> list[int]:
        """The terms computing `outputs`, operands first (a depth-first post-order,
        operands left to right), stopping at inputs."""
        order: list[int] = []
        seen: set[int] = set()
        values = self.table.values
        terms = self.table.terms

        def visit(value_id: int) -> None:
            if self.leaves(value_id):
                return
            term_id = values[value_id].term
            if term_id in seen:
                return
            seen.add(term_id)
            for operand in terms[term_id].operands:
                visit(operand)
            order.append(term_id)

        for output in outputs:
            visit(output)
        return order

    def inputs(self, outputs: Iterable[int]) -> list[int]:
        """The inputs (pool or fresh) the graph of `outputs` reads, in order of use."""
        found: dict[int, None] = {}
        terms = self.table.terms
        for output in outputs:
            if self.leaves(output):
                found.setdefault(output)
        for term_id in self.ops(outputs):
            for operand in terms[term_id].operands:
                if self.leaves(operand):
                    found.setdefault(operand)
        return list(found)


# ------------------------------------------------------------------------- re-test


def retest(table: Table, candidates: Iterable[Candidate]) -> Iterator[Candidate]:
    """The candidates whose graphs agree on the table's random float inputs."""
    for candidate in candidates:
        if all(
            _close(table.floats(a), table.floats(b))
            for a, b in zip(candidate.src, candidate.tgt, strict=True)
        ):
            yield candidate


def _close(a: Sequence[np.ndarray], b: Sequence[np.ndarray]) -> bool:
    return all(
        x.shape == y.shape and np.allclose(x, y, RTOL, ATOL) for x, y in zip(a, b, strict=True)
    )


# ------------------------------------------------------------------------ renaming


def canonical_key(pair: Pair) -> tuple:
    """A key equal for two pairs exactly when they are equal up to a renaming of
    interchangeable inputs (same symbolic shape; fresh inputs by their shapes); for
    two outputs, the smaller of the keys of both output orders."""
    orders = [(pair.src, pair.tgt)]
    if len(pair.src) == 2:
        orders.append((pair.src[::-1], pair.tgt[::-1]))
    return min(_key(pair, src, tgt) for src, tgt in orders)


def _key(pair: Pair, src: Sequence[int], tgt: Sequence[int]) -> tuple:
    table = pair.table
    inputs: dict[int, tuple[int, int]] = {}
    labels: list[str] = []

    def code(value_id: int, results: Mapping[int, tuple[int, int]]) -> tuple[int, int]:
        """(position, result) of an op of the side, (-1, n) for the n-th input."""
        if pair.leaves(value_id):
            if value_id not in inputs:
                inputs[value_id] = (-1, len(inputs))
                value = table.values[value_id]
                if value.term >= 0:
                    labels.append(repr(value.shapes))
                else:
                    labels.append(repr(table.world.inputs[table.input_ids.index(value_id)].dims))
            return inputs[value_id]
        return results[value_id]

    sides = []
    for outputs in (src, tgt):
        results: dict[int, tuple[int, int]] = {}
        entries = []
        for position, term_id in enumerate(pair.ops(outputs)):
            term = table.terms[term_id]
            entries.append((term.form, tuple(code(v, results) for v in term.operands)))
            for index, result in enumerate(term.results):
                results[result] = (position, index)
        sides.append((tuple(entries), tuple(code(v, results) for v in outputs)))
    return (*sides, tuple(labels))


def rename(pairs: Iterable[Pair]) -> list[Pair]:
    """One pair of each renaming class, the first met."""
    kept: dict[tuple, Pair] = {}
    for pair in pairs:
        kept.setdefault(canonical_key(pair), pair)
    return list(kept.values())


# -------------------------------------------------------------- common subgraphs


class Generalizer:
    """Common-subgraph pruning (see the module docstring), with the verdict on each
    general pair cached: many specific pairs generalize to the same one."""

    def __init__(self, seed: int) -> None:
        self._rng = np.random.default_rng([seed, 7])
        self._verdicts: dict[tuple, bool] = {}

    def generalize(self, pair: Pair) -> Pair:
        """`pair` with each term both graphs compute read as a fresh input instead,
        bottom-up, wherever the result still holds.

        Bottom-up and one term at a time, because replacing every common term at
        once can fail where replacing some succeeds: in `matmul(r, scale(r, s)) ->
        matmul(scale(r, s), r)` with `r = relu(x)`, `r` may become an input `v` but
        `scale(v, s)` may not become a second, independent one.
        """
        common = sorted(set(pair.ops(pair.src)) & set(pair.ops(pair.tgt)))
        current = pair
        for term_id in common:
            results = pair.table.terms[term_id].results
            if len(results) > 1 or term_id not in current.ops((*current.src, *current.tgt)):
                continue
            trial = Pair(pair.table, pair.src, pair.tgt, current.fresh | {results[0]})
            if self._admissible(trial) and self._verdict(trial):
                current = trial
        return current

    def _verdict(self, pair: Pair) -> bool:
        key = canonical_key(pair)
        verdict = self._verdicts.get(key)
        if verdict is None:
            verdict = self._verdicts[key] = self._holds(pair)
        return verdict

    @staticmethod
    def _admissible(pair: Pair) -> bool:
        """Whether the pair can still be a rule: the target reads no input the
        source does not bind, and every split can name what it undoes."""
        if not set(pair.inputs(pair.tgt)) <= set(pair.inputs(pair.src)):
            return False
        return all(_splits_named(pair, side) for side in (pair.src, pair.tgt))

    def _holds(self, pair: Pair) -> bool:
        for exact, sets in ((True, FINGERPRINT_SETS), (False, len(pair.table.world.sizes))):
            fresh = {
                v: [
                    random_input(self._rng, pair.table.values[v].shapes[i], exact)
                    for i in range(sets)
                ]
                for v in sorted(pair.fresh)
            }
            src = evaluate(pair, pair.src, fresh, exact)
            tgt = evaluate(pair, pair.tgt, fresh, exact)
            for a, b in zip(src, tgt, strict=True):
                same = (
                    all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))
                    if exact
                    else _close(a, b)
                )
                if not same:
                    return False
        return True


def _splits_named(pair: Pair, outputs: Sequence[int]) -> bool:
    """Whether every split of the graph can still name the operands of the
    concatenation it undoes (its sizes are read off them)."""
    table = pair.table
    ops = pair.ops(outputs)
    named = set(pair.inputs(outputs))
    for term_id in ops:
        named.update(table.terms[term_id].results)
    for term_id in ops:
        term = table.terms[term_id]
        if table.op(term) == "split":
            tree = table.values[term.operands[0]].trees[term.attrs[0]["axis"]]
            assert tree is not None
            if tree.left not in named or tree.right not in named:
                return False
    return True


def evaluate(
    pair: Pair, outputs: Sequence[int], fresh: Mapping[int, list[np.ndarray]], exact: bool
) -> list[list[np.ndarray]]:
    """The outputs at every shape set the mode covers (the fingerprint sets when
    `exact`, all otherwise), with the fresh inputs' values given."""
    table = pair.table
    sets = FINGERPRINT_SETS if exact else len(table.world.sizes)
    known: dict[int, list[np.ndarray]] = dict(fresh)

    def value(value_id: int) -> list[np.ndarray]:
        found = known.get(value_id)
        if found is not None:
            return found
        record = table.values[value_id]
        if record.term < 0:
            found = list(record.exact or []) if exact else table.floats(value_id)
            known[value_id] = found
            return found
        term = table.terms[record.term]
        args = [value(v) for v in term.operands]
        per_set = [
            apply(table.op(term), term.attrs[i], [a[i] for a in args], exact) for i in range(sets)
        ]
        for index, result in enumerate(term.results):
            known[result] = [outs[index] for outs in per_set]
        return known[value_id]

    return [value(v) for v in outputs]
