"""`tasoc rules generate`: TASO's rewrite-rule generator (thesis §2.3, §2.5).

    rules, report = generate(3)                      # TASO's Table 2.1 operators
    rules, report = generate(3, ["matmul", "concat", "split"], seed=1)
    print("\\n".join(report.table()))                 # counts per stage, like Table 2.3

The stages, each in its own module:

1. `enumeration` — every graph of up to `max_ops` ops over the operator set, without
   duplicated computation, fingerprinted with exact integer arithmetic at two shape
   sets (`fingerprint`, `evaluate`); graphs with equal fingerprints become candidate
   pairs.
2. `prune.retest` — each pair run on random floats with the true semantics.
3. `prune.rename` — pairs equal up to renaming their inputs, once.
4. `prune.Generalizer` — pairs with a common subgraph replaced by the more general
   pair without it, when that holds.
5. `emit` — each pair stated as a `Rule` (attributes as literals, shape terms or
   parameters), checked numerically at every shape set, duplicates dropped.
6. `instances` — rules that are instances of other rules (inputs merged, a literal
   where the other has a parameter) dropped.

The rules come out UNCHECKED (the prover's business), named `g<max_ops>-<nnnn>` in the
order found, with `provenance` naming the command and seed; the same arguments give
the same rules.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace

from tasoc.ir.dag import ATTR_NAMES
from tasoc.ir.rules import Rule, rule_digest
from tasoc.passes.rewrite.generator.emit import Checker, Draft, ShapeSet, draft, parametrize
from tasoc.passes.rewrite.generator.enumeration import enumerate_world
from tasoc.passes.rewrite.generator.evaluate import SUPPORTED_OPS
from tasoc.passes.rewrite.generator.instances import prune_instances
from tasoc.passes.rewrite.generator.prune import Generalizer, Pair, rename, retest
from tasoc.passes.rewrite.generator.worlds import TABLE_2_1, World, worlds

__all__ = ["STAGES", "TABLE_2_1", "GenerationReport", "Stage", "generate"]

MAX_SHAPE_SETS = 6
"""Shape sets a rule is checked at, at most (those of the pairs that state it)."""

Progress = Callable[[int, int], None]
"""`progress(done, total)`, called as the stages complete."""

STAGES = (
    "graphs enumerated",
    "candidate pairs",
    "after float re-test",
    "after input renaming",
    "after common subgraph",
    "rules stated",
    "final rules",
)
"""The stages a report counts, in order (Table 2.3 counts from "candidate pairs"):
"rules stated" are the pairs that `emit` could state as rules that hold, without
duplicates; "final rules" drops those that are instances of others (`instances`)."""


@dataclass(frozen=True, slots=True)
class Stage:
    """How many graphs or pairs a stage left, and the seconds it took."""

    name: str
    count: int
    seconds: float


@dataclass(frozen=True)
class GenerationReport:
    """What `generate` did: its settings, and the count and time of every stage."""

    max_ops: int
    ops: tuple[str, ...]
    seed: int
    stages: tuple[Stage, ...]
    classes: int
    """Distinct values (fingerprint classes) among the enumerated graphs."""
    extended: int
    """Intermediate graphs (of canonical values) that enumeration extended by an op."""
    examples: Mapping[str, tuple[ShapeSet, ...]] = field(default_factory=dict)
    """Per rule name, input shapes at which the rule type-checks and was checked."""

    @property
    def command(self) -> str:
        return f"tasoc rules generate --max-ops {self.max_ops} --ops {','.join(self.ops)}"

    @property
    def provenance(self) -> str:
        return f"{self.command} (seed {self.seed})"

    def count(self, stage: str) -> int:
        return next(s.count for s in self.stages if s.name == stage)

    @property
    def seconds(self) -> float:
        return sum(s.seconds for s in self.stages)

    def table(self) -> list[str]:
        """The report as text lines: Table 2.3 of the thesis, plus times."""
        initial = self.count("candidate pairs") or 1
        lines = [
            f"{self.provenance}: {self.count('final rules')} rules in {self.seconds:.1f} s",
            f"{'stage':<24}{'remaining':>12}{'reduction':>11}{'seconds':>9}",
        ]
        for stage in self.stages:
            reduction = f"{initial / max(stage.count, 1):.1f}x" if stage.name != STAGES[0] else ""
            lines.append(f"{stage.name:<24}{stage.count:>12}{reduction:>11}{stage.seconds:>9.1f}")
        lines.append(
            f"({self.classes} distinct values among the enumerated graphs, "
            f"built by extending {self.extended} graphs of canonical values)"
        )
        return lines


def generate(
    max_ops: int,
    ops: Sequence[str] | None = None,
    seed: int = 0,
    progress: Progress | None = None,
) -> tuple[list[Rule], GenerationReport]:
    """Rules over `ops` (TASO's Table 2.1 set by default) whose two sides have at most
    `max_ops` ops each, and the report; ValueError for an op the generator cannot
    enumerate or a `max_ops` below 1."""
    chosen = _operator_set(ops)
    if max_ops < 1:
        raise ValueError(f"max_ops must be at least 1, got {max_ops}")
    chosen_worlds = worlds(chosen)
    tally = _Tally(len(chosen_worlds) * (max_ops + 1) + 1, progress)
    pairs: list[Pair] = []
    for world in chosen_worlds:
        pairs += _world_pairs(world, max_ops, seed, tally)
    with tally.stage(STAGES[5]):
        stated, examples = _emit(pairs, seed)
        tally.counts[STAGES[5]] = len(stated)
    report = GenerationReport(max_ops, chosen, seed, (), tally.classes, tally.extended)
    with tally.stage(STAGES[6]):
        rules = [
            replace(rule, name=f"g{max_ops}-{index:04d}", provenance=report.provenance)
            for index, rule in enumerate(prune_instances(stated), 1)
        ]
        tally.counts[STAGES[6]] = len(rules)
    tally.step()
    named_examples = {rule.name: examples[rule_digest(rule)] for rule in rules}
    return rules, replace(report, stages=tally.stages(), examples=named_examples)


def _world_pairs(world: World, max_ops: int, seed: int, tally: _Tally) -> list[Pair]:
    """The pairs of one world that survive re-testing and both prunings."""
    with tally.stage(STAGES[0]):
        enumeration = enumerate_world(world, max_ops, seed, lambda _: tally.step())
        table = enumeration.table
        tally.classes += len(table.classes)
        tally.extended += enumeration.extended
        tally.counts[STAGES[0]] += enumeration.graphs
        tally.counts[STAGES[1]] += len(enumeration.candidates)
    with tally.stage(STAGES[2]):
        retested = [Pair(table, c.src, c.tgt) for c in retest(table, enumeration.candidates)]
        table.clear_floats()
        tally.counts[STAGES[2]] += len(retested)
    with tally.stage(STAGES[3]):
        renamed = rename(retested)
        tally.counts[STAGES[3]] += len(renamed)
    with tally.stage(STAGES[4]):
        generalizer = Generalizer(seed)
        general = rename(generalizer.generalize(pair) for pair in renamed)
        tally.counts[STAGES[4]] += len(general)
    tally.step()
    return general


class _Tally:
    """Counts and seconds per stage, and progress in steps (a level of enumeration,
    the pruning of a world, the emission)."""

    def __init__(self, total: int, progress: Progress | None) -> None:
        self.counts = dict.fromkeys(STAGES, 0)
        self.seconds = dict.fromkeys(STAGES, 0.0)
        self.classes = self.extended = 0
        self._done, self._total, self._progress = 0, total, progress

    @contextmanager
    def stage(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        yield
        self.seconds[name] += time.perf_counter() - start

    def step(self) -> None:
        self._done += 1
        if self._progress is not None:
            self._progress(self._done, self._total)

    def stages(self) -> tuple[Stage, ...]:
        return tuple(Stage(name, self.counts[name], self.seconds[name]) for name in STAGES)


def _operator_set(ops: Sequence[str] | None) -> tuple[str, ...]:
    """The requested ops in Table 2.1 order; ValueError for one it cannot enumerate."""
    if ops is None:
        return TABLE_2_1
    requested = set(ops)
    if not requested:
        raise ValueError("the operator set is empty")
    for op in sorted(requested):
        if op not in ATTR_NAMES:
            raise ValueError(f"unknown op '{op}' (the graph dialect has no such op)")
        if op not in SUPPORTED_OPS or op not in TABLE_2_1:
            raise ValueError(
                f"the generator cannot enumerate '{op}'; it supports {', '.join(TABLE_2_1)}"
            )
    return tuple(op for op in TABLE_2_1 if op in requested)


def _oriented_draft(pair: Pair) -> Draft | None:
    """The rule of a pair, its source the graph with more ops; for a tie, whichever
    direction states it with the smaller digest (so a rule and its reverse, which are
    the same equality, come out the same)."""
    found = draft(pair, "_")
    if len(pair.ops(pair.src)) != len(pair.ops(pair.tgt)):
        return found
    reverse = draft(Pair(pair.table, pair.tgt, pair.src, pair.fresh), "_")
    if found is None or (
        reverse is not None and rule_digest(reverse.rule) < rule_digest(found.rule)
    ):
        return reverse
    return found


def _emit(pairs: Sequence[Pair], seed: int) -> tuple[list[Rule], dict[str, tuple[ShapeSet, ...]]]:
    """The rules of the pairs that can be stated and hold, one per distinct rule,
    and, by rule digest, the input shapes each was checked at.

    Pairs from different inputs often state the same rule (the same pattern over
    matrices of other shapes); each rule is generalized and checked once, at the
    shapes of all of them."""
    drafts: dict[str, Draft] = {}
    for pair in pairs:
        found = _oriented_draft(pair)
        if found is None:
            continue
        key = rule_digest(found.rule)
        known = drafts.get(key)
        if known is None:
            drafts[key] = found
        else:
            shapes = known.shapes + tuple(s for s in found.shapes if s not in known.shapes)
            drafts[key] = Draft(known.rule, shapes[:MAX_SHAPE_SETS])
    checker = Checker(seed)
    rules: list[Rule] = []
    examples: dict[str, tuple[ShapeSet, ...]] = {}
    for found in drafts.values():
        general = parametrize(found, checker)
        if general is None:
            continue
        rule, typed = general
        digest = rule_digest(rule)
        if digest not in examples:
            examples[digest] = tuple(found.shapes[i] for i in typed)
            rules.append(rule)
    return rules, examples
