"""`search=ga`: SwapAdvisor's genetic algorithm (Huang thesis §4.4) over operator
schedules and memory allocations, and a random search with the same evaluations.

A chromosome is a schedule — a topological order of the step's ops, as positions in
the step's own schedule — and a memory allocation (§4.4.3) over TS, the sorted unique
tensor sizes of the step: CLS maps each size to a size class (0 first, each step 0 or
1: consecutive sizes share a class or take the next one, which cuts the O(N^N)
mappings to O(2^N)), CNT gives each class its object count; a class's objects are
as large as its largest size. Its fitness is the simulated iteration time
(`PlacementProblem.simulate`, the one placed-step simulator) of the swap planner's
plan for that schedule within that pool (`plan_swaps`: Belady, prefetching; the pool's
objects are what runs out). Lower is fitter.

Operators (§4.4.2-4.4.3):

- schedule crossover (Fig. 4.5): a random cut CR; a child takes one parent's first CR
  ops, then the other ops in the other parent's order — a prefix of a topological
  order holds every op's producers, so the child is one too;
- ready-set mutation: replay the schedule as a dataflow scheduler would, each pick
  from the ready ops being, with probability `mutation`, a random one, else the one
  the schedule runs first (many ops mutate at once, which the thesis found > 2x better
  on RNNs than moving one);
- allocation crossover (Fig. 4.6): the same cut on CLS, repaired to steps of 0 or 1
  (`monotone`), and on the extended counts CNT_EXT (each size's class count), averaged
  over each new class;
- allocation mutation: each CLS element, with probability `mutation`, moves its class
  boundary (steps it up when equal to the one before, down otherwise, the rest
  following); each count, with probability `mutation`, is drawn from a Gaussian around
  itself (sigma a quarter of it, at least one object);
- repair (`Genome.fit`), after every allocation operator: each class gets at least the
  objects that must fit in it at once (`Genome.needs`: an op's inputs and results, the
  arguments at the start), then, while the pool is over the capacity, every class
  above that floor gives up the same bytes (counts fall inversely to the class size:
  Fig. 4.6's [8, 3] becomes [4, 2]). An allocation no repair fits is dropped; a
  chromosome the planner cannot fit (`CapacityTooSmall`: what must stay on the device
  fills a class) is *penalized*: infinitely slow, it survives only while nothing
  feasible can take its place.

Each generation crosses random pairs of the population; each crossing gives two
schedules and two allocations, so four children, each mutated. Survivors (eq. 4.1):
among the population and the children (distinct chromosomes), each survives with
probability softmax((T_best - t) / T_best) — t its time, T_best the best time seen —
drawn without replacement; the best always survives (elitism: the best never gets
worse). The search stops after `budget` evaluations (distinct chromosomes simulated;
repeats come from a cache), at the deadline, or when the best has not improved for
`patience` generations (converged).

The first population: each seed schedule — the step's own (what `search=belady`
plans), the greedy least-memory order (`schedules.least_memory`, issue 32), the
least-peak order (`schedules.least_peak`: the fewest bytes at the busiest op), the
depth-first order from the outputs last to first (`schedules.depth_first_reversed`:
a training step's backward a layer at a time from the top) and the
light graph's depth-first order (`Genome.depth_first`: each output's
computation in turn, a value made just before its first reader) — with the one-class
allocation that fits (every tensor in an object of the largest size) and with the
*profile* allocation (a class per size, as many objects as the step's schedule holds of
that size at once, repaired to the capacity); then random variants: a seed schedule's
ready-set mutation, a random CLS and Gaussian counts around the profile's. `mode`
freezes a part: `schedule` searches schedules with the profile allocation (else the
one-class one, else a random one that fits),
`allocation` allocations on the step's schedule (the thesis' ablations, ch. 5).
`random_search` evaluates the same first population, then random variants alone, for
the same budget.

The last stage (`without_pool`, in the last tenth of the time): SwapAdvisor needs a pool
because MXNet's allocator does; the programs tasoc writes run on XLA's allocator, which
needs none, so the pool is only a constraint there. The last population's schedules
are also planned without one (bytes against the capacity), and the fastest plan of all
is the search's.

Evaluations run in parallel on the machine's cores (forked worker processes, a
generation at a time); an evaluation is a pure function of its chromosome and every
random choice is made in the parent from `random.Random(seed)`, so a seed gives one
result whatever the number of workers (when the budget, not the clock, stops it).
"""

from __future__ import annotations

import functools
import heapq
import math
import os
import random
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ProcessPoolExecutor
from concurrent.futures import TimeoutError as FutureTimeout
from dataclasses import dataclass
from multiprocessing import get_context
from typing import Any, Literal

from tasoc.ir.dag import Value
from tasoc.ir.memory import Pool, tensor_bytes
from tasoc.ir.placement_plan import PlacementPlan, check_plan
from tasoc.passes.placement.problem import NoPlanFound, PlacementProblem, SearchLimits
from tasoc.passes.placement.schedules import (
    depth_first,
    depth_first_reversed,
    least_memory,
    least_peak,
)
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.passes.search import Deadline, SearchOutcome, StopReason

Mode = Literal["joint", "schedule", "allocation"]

SIGMA = 0.25
"""A mutated count's Gaussian standard deviation, as a share of the count."""

PARALLEL_OPS = 200
"""Steps with fewer ops are evaluated here unless workers are asked for: their
evaluations take milliseconds, less than handing them to another process costs."""


@dataclass(frozen=True)
class GASettings:
    """The GA's own parameters (module docstring); `SearchLimits` holds the rest."""

    population: int = 16
    """N_p: chromosomes that survive each generation."""
    mutation: float = 0.03
    """P: the probability each pick of a schedule mutation is random, and each CLS and
    CNT element mutates. The thesis' 10 % is for SwapAdvisor's hundreds of thousands
    of evaluations; with hundreds, 3 % did better (docs/placement.md, search=ga)."""
    patience: int = 10
    """Generations without a better best after which the search has converged."""
    mode: Mode = "joint"
    without_pool: bool = True
    """Also plan the last population's schedules without a pool (module docstring)."""
    workers: int | None = None
    """Processes that evaluate; None: one per core this process may run on (one for
    steps under `PARALLEL_OPS` ops)."""

    def __post_init__(self) -> None:
        if self.population < 2:
            raise ValueError(f"a population needs at least 2 chromosomes, got {self.population}")
        if not 0.0 <= self.mutation <= 1.0:
            raise ValueError(f"mutation must be a probability, got {self.mutation}")
        if self.patience < 1:
            raise ValueError(f"patience must be at least 1 generation, got {self.patience}")


# --------------------------------------------------------------------- chromosomes


@dataclass(frozen=True, slots=True)
class Allocation:
    """SwapAdvisor's memory allocation (§4.4.3) over a step's sizes TS: `classes` is
    CLS (the class of each size), `counts` is CNT (the objects of each class)."""

    classes: tuple[int, ...]
    counts: tuple[int, ...]

    def extended(self) -> tuple[int, ...]:
        """CNT_EXT: the objects each size may use, its class's count (Fig. 4.6)."""
        return tuple(self.counts[c] for c in self.classes)

    def pool(self, sizes: Sequence[int]) -> Pool:
        """The memory pool: each class's objects as large as its largest size."""
        tops = dict(zip(self.classes, sizes, strict=True))  # ascending: the last wins
        return Pool(tuple(tops[c] for c in range(len(self.counts))), self.counts)


@dataclass(frozen=True, slots=True)
class Chromosome:
    """A schedule (positions in the step's own schedule, in run order) and an allocation."""

    schedule: tuple[int, ...]
    allocation: Allocation


def monotone(classes: Sequence[int]) -> tuple[int, ...]:
    """CLS repaired to start at 0 and step by 0 or 1: each element moved the least to
    lie between the one before and one more (Fig. 4.6: [0, 1, 0, 0] -> [0, 1, 1, 1])."""
    repaired = [0]
    for value in classes[1:]:
        repaired.append(min(max(value, repaired[-1]), repaired[-1] + 1))
    return tuple(repaired)


def regroup(classes: Sequence[int], extended: Sequence[int]) -> tuple[int, ...]:
    """CNT for `classes` from extended counts: each class's mean, rounded (Fig. 4.6:
    [8, 1, 4, 4] over classes [0, 1, 1, 1] is [8, 3])."""
    totals: Counter[int] = Counter()
    sizes: Counter[int] = Counter()
    for c, count in zip(classes, extended, strict=True):
        totals[c] += count
        sizes[c] += 1
    return tuple(max(1, (2 * totals[c] + sizes[c]) // (2 * sizes[c])) for c in sorted(totals))


@dataclass(frozen=True)
class Genome:
    """What the operators know of a step, computed once (`of`): its sizes, what each op
    needs at once, its dependences, and its schedule's memory profile."""

    sizes: tuple[int, ...]
    """TS: the sorted unique tensor sizes (bytes) of the step's values."""
    needs: tuple[tuple[int, ...], ...]
    """What must fit at once, per size (the floors of `fit`): the arguments that start
    on the device (inputs and labels; params and state start on the host in the
    planner's first pass), and each op's inputs and results with the outputs that stay
    on the device to the end (the loss), distinct."""
    depth_first: tuple[int, ...]
    """The light graph's own order (`Dag`: depth-first from the outputs, operands left
    to right), a seed schedule."""
    least_memory: tuple[int, ...]
    """The greedy least-memory order (`schedules.least_memory`), a seed schedule."""
    least_peak: tuple[int, ...]
    """The least-peak order (`schedules.least_peak`), a seed schedule."""
    depth_first_reversed: tuple[int, ...]
    """Depth-first from the outputs last to first (`schedules.depth_first_reversed`),
    a seed schedule."""
    successors: tuple[tuple[int, ...], ...]
    """Per op (a position in the step's schedule), the ops that read its results."""
    producers: tuple[int, ...]
    """Per op, how many distinct ops make its operands."""
    live: tuple[int, ...]
    """Per size, the most tensors of it the step's own schedule holds at once."""
    capacity: int

    @classmethod
    def of(cls, problem: PlacementProblem) -> Genome:
        dag = problem.dag
        values = [v for node in (*dag.args, *dag.ops) for v in node.results]
        sizes = tuple(sorted({tensor_bytes(v.sig) for v in values}))
        index = {size: i for i, size in enumerate(sizes)}

        def size_of(value: Value) -> int:
            return index[tensor_bytes(value.sig)]

        def count(values: Iterable[Value]) -> list[int]:
            counts = [0] * len(sizes)
            for value in values:
                counts[size_of(value)] += 1
            return counts

        signature = problem.signature
        persistent = set() if signature is None else {*signature.params, *signature.state}
        replacing = set() if signature is None else {result for result, _ in signature.replaces}
        starting = count(arg.out for i, arg in enumerate(dag.args) if i not in persistent)
        pinned = count({v for i, v in enumerate(dag.outputs) if i not in replacing})
        needs = {tuple(starting)}
        where = {node: i for i, node in enumerate(dag.ops)}
        successors: list[set[int]] = [set() for _ in dag.ops]
        producers = []
        for i, node in enumerate(dag.ops):
            need = count({*node.inputs, *node.results})
            needs.add(tuple(n + p for n, p in zip(need, pinned, strict=True)))
            made_by = {where[v.node] for v in node.inputs if not v.node.is_arg}
            for producer in made_by:
                successors[producer].add(i)
            producers.append(len(made_by))
        return cls(
            sizes,
            tuple(sorted(needs)),
            tuple(where[node] for node in depth_first(dag)),
            tuple(where[node] for node in least_memory(dag)),
            tuple(where[node] for node in least_peak(dag)),
            tuple(where[node] for node in depth_first_reversed(dag)),
            tuple(tuple(sorted(s)) for s in successors),
            tuple(producers),
            _live_by_size(problem, size_of, len(sizes)),
            problem.capacity,
        )

    @property
    def default(self) -> tuple[int, ...]:
        """The step's own schedule."""
        return tuple(range(len(self.producers)))

    @property
    def seeds(self) -> list[tuple[int, ...]]:
        """The schedules the first population starts from: the step's own, then the
        reversed depth-first, depth-first, least-memory and least-peak ones where they
        differ."""
        seeds = (
            self.default,
            self.depth_first_reversed,
            self.depth_first,
            self.least_memory,
            self.least_peak,
        )
        return list(dict.fromkeys(seeds))

    def describe(self, schedule: Sequence[int]) -> str:
        """Which schedule this is, for the report."""
        if tuple(schedule) == self.default:
            return "the step's own"
        names = {
            self.least_peak: "least-peak",
            self.depth_first_reversed: "reversed depth-first",
            self.least_memory: "least-memory",
            self.depth_first: "depth-first",
        }
        return names.get(tuple(schedule), "searched")

    def fit(self, classes: Sequence[int], counts: Sequence[int]) -> Allocation | None:
        """The allocation repaired (module docstring): floors, then the capacity; None
        when the floors alone are over it."""
        floors = [0] * len(counts)
        for need in self.needs:
            per_class = [0] * len(counts)
            for c, n in zip(classes, need, strict=True):
                per_class[c] += n
            floors = [max(f, n, 1) for f, n in zip(floors, per_class, strict=True)]
        tops = dict(zip(classes, self.sizes, strict=True))
        object_bytes = [tops[c] for c in range(len(counts))]
        fitted = [max(count, floor) for count, floor in zip(counts, floors, strict=True)]
        while (total := sum(n * b for n, b in zip(fitted, object_bytes, strict=True))) > (
            self.capacity
        ):
            above = [c for c in range(len(fitted)) if fitted[c] > floors[c]]
            if not above:
                return None
            share = len(above)
            for c in above:
                fewer = -(-(total - self.capacity) // (share * object_bytes[c]))
                fitted[c] -= min(fewer, fitted[c] - floors[c])
        return Allocation(tuple(classes), tuple(fitted))

    def one_class(self) -> Allocation | None:
        """Every tensor in an object of the largest size, as many as fit."""
        classes = (0,) * len(self.sizes)
        return self.fit(classes, (self.capacity // self.sizes[-1],))

    def profile(self) -> Allocation | None:
        """A class per size, as many objects as the step's schedule holds at once."""
        return self.fit(tuple(range(len(self.sizes))), self.live)

    def seed_allocations(self) -> list[Allocation | None]:
        """The first population's allocations: one class, then the profile (None for
        one that does not fit)."""
        return [self.one_class(), self.profile()]

    # ------------------------------------------------------------------ operators

    def cross_schedules(
        self, first: Sequence[int], second: Sequence[int], rng: random.Random
    ) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """Fig. 4.5: two children, each one parent's prefix then the other's order."""
        cut = rng.randrange(1, len(first)) if len(first) > 1 else 0
        return _crossed(second, first, cut), _crossed(first, second, cut)

    def mutate_schedule(
        self, schedule: Sequence[int], probability: float, rng: random.Random
    ) -> tuple[int, ...]:
        """The ready-set mutation (module docstring)."""
        if probability == 0.0:
            return tuple(schedule)
        rank = [0] * len(schedule)
        for position, op in enumerate(schedule):
            rank[op] = position
        waiting = list(self.producers)
        earliest = [(rank[op], op) for op in range(len(schedule)) if waiting[op] == 0]
        heapq.heapify(earliest)
        ready = [op for _, op in sorted(earliest)]
        slot = {op: i for i, op in enumerate(ready)}
        order: list[int] = []
        while ready:
            if rng.random() < probability:
                op = ready[rng.randrange(len(ready))]
            else:
                while earliest[0][1] not in slot:
                    heapq.heappop(earliest)
                op = heapq.heappop(earliest)[1]
            last = ready.pop()  # remove `op` from `ready`: the last element fills its slot
            if last != op:
                ready[slot[op]] = last
                slot[last] = slot[op]
            del slot[op]
            order.append(op)
            for successor in self.successors[op]:
                waiting[successor] -= 1
                if waiting[successor] == 0:
                    slot[successor] = len(ready)
                    ready.append(successor)
                    heapq.heappush(earliest, (rank[successor], successor))
        return tuple(order)

    def cross_allocations(
        self, first: Allocation, second: Allocation, rng: random.Random
    ) -> list[Allocation]:
        """Fig. 4.6: CLS and CNT_EXT cut at one point, CLS repaired, counts regrouped,
        then fitted (children no repair fits are left out)."""
        cut = rng.randrange(1, len(self.sizes)) if len(self.sizes) > 1 else 0
        children = []
        for a, b in ((second, first), (first, second)):
            classes = monotone((*a.classes[:cut], *b.classes[cut:]))
            extended = (*a.extended()[:cut], *b.extended()[cut:])
            children.append(self.fit(classes, regroup(classes, extended)))
        return [child for child in children if child is not None]

    def mutate_allocation(
        self, allocation: Allocation, probability: float, rng: random.Random
    ) -> Allocation | None:
        """Class boundaries moved and counts drawn around themselves (module docstring)."""
        classes = list(allocation.classes)
        extended = allocation.extended()
        for i in range(1, len(classes)):
            if rng.random() < probability:
                step = 1 if classes[i] == classes[i - 1] else -1
                classes[i:] = [c + step for c in classes[i:]]
        counts = [
            max(1, round(rng.gauss(count, max(1.0, SIGMA * count))))
            if rng.random() < probability
            else count
            for count in regroup(classes, extended)
        ]
        return self.fit(classes, counts)

    def random_allocation(self, rng: random.Random) -> Allocation | None:
        """A random CLS, each count drawn around the profile's."""
        classes = [0]
        for _ in self.sizes[1:]:
            classes.append(classes[-1] + rng.randrange(2))
        counts = [
            max(1, round(rng.gauss(count, max(1.0, SIGMA * count))))
            for count in regroup(classes, self.live)
        ]
        return self.fit(classes, counts)


def _crossed(prefix_from: Sequence[int], rest_from: Sequence[int], cut: int) -> tuple[int, ...]:
    head = prefix_from[:cut]
    taken = set(head)
    return (*head, *(op for op in rest_from if op not in taken))


def _live_by_size(
    problem: PlacementProblem, size_of: Callable[[Value], int], count: int
) -> tuple[int, ...]:
    """Per size, the most values of it live at once on the step's own schedule, by the
    replay's rule (`check_plan`'s `dies`: a value from where it is made to its last
    reader, an argument and a returned value to the end)."""
    plan = PlacementPlan(problem.dag.ops)
    copies = check_plan(problem.dag, plan)
    end = len(problem.dag.ops)
    changes: list[list[int]] = [[0] * (end + 2) for _ in range(count)]
    for key, value in copies.value_of.items():
        dies = copies.dies[key]
        size = size_of(value)
        changes[size][max(key[0], -1) + 1] += 1
        changes[size][(end if dies is None else dies) + 1] -= 1
    most = []
    for row in changes:
        held = best = 0
        for change in row:
            held += change
            best = max(best, held)
        most.append(max(best, 1))
    return tuple(most)


# ---------------------------------------------------------------------- evaluation


def plan_of(
    problem: PlacementProblem,
    sizes: Sequence[int],
    schedule: Sequence[int],
    allocation: Allocation | None,
) -> PlacementPlan:
    """The swap planner's plan for a schedule (positions in the step's schedule) within
    `allocation`'s pool, or within bytes when None (Belady, prefetching);
    CapacityTooSmall when what must stay on the device does not fit."""
    ops = problem.dag.ops
    scheduled = problem.dag.scheduled(ops[i] for i in schedule)
    pool = None if allocation is None else allocation.pool(sizes)
    settings = SwapSettings(problem.capacity, pool=pool, in_place=problem.in_place)
    return plan_swaps(scheduled, problem.signature, settings)


def evaluate(
    problem: PlacementProblem,
    sizes: Sequence[int],
    schedule: Sequence[int],
    allocation: Allocation | None,
) -> float:
    """The fitness of a schedule and allocation: its plan's simulated seconds, infinite
    when it has none."""
    try:
        plan = plan_of(problem, sizes, schedule, allocation)
    except CapacityTooSmall:
        return math.inf
    return problem.simulate(plan).seconds


Candidate = tuple[tuple[int, ...], Allocation | None]
"""What an evaluation plans: a schedule and an allocation (None: no pool)."""

_INSTALLED: tuple[PlacementProblem, tuple[int, ...]] | None = None
"""A worker process's problem and sizes (`_install`)."""


def _install(problem: PlacementProblem, sizes: tuple[int, ...]) -> None:
    """A worker's start: the problem, handed over by the fork (never pickled: a `Dag`
    pickles without its schedule); Ctrl-C is the parent's to handle."""
    global _INSTALLED
    _INSTALLED = (problem, sizes)
    signal.signal(signal.SIGINT, signal.SIG_IGN)


def _evaluate_installed(candidate: Candidate) -> float:
    assert _INSTALLED is not None
    return evaluate(*_INSTALLED, *candidate)


def _can_fork() -> bool:
    """Whether forking this process is safe. A fork copies only the calling thread, so
    a lock another thread holds would stay locked in the child forever: Python threads
    and JAX's runtime (whose threads start with its first backend) are such threads;
    numpy's OpenBLAS threads stop across a fork by themselves. (A fork server would
    avoid the question, but its workers re-run the main script of a program that
    does not guard it with `if __name__ == "__main__"`.)"""
    if threading.active_count() > 1:
        return False
    bridge = sys.modules.get("jax._src.xla_bridge")
    return bridge is None or not getattr(bridge, "backends_are_initialized", lambda: True)()


class _Evaluator:
    """Evaluates candidates in order, in forked worker processes when there are
    several workers and forking is safe (`_can_fork`), else here; the results are
    the same."""

    def __init__(self, problem: PlacementProblem, sizes: tuple[int, ...], workers: int) -> None:
        self.problem, self.sizes = problem, sizes
        self.workers = workers if workers > 1 and _can_fork() else 1
        self.executor: ProcessPoolExecutor | None = None
        if self.workers > 1:
            self.executor = ProcessPoolExecutor(
                self.workers,
                mp_context=get_context("fork"),
                initializer=_install,
                initargs=(problem, sizes),
            )

    def __call__(self, candidates: Sequence[Candidate], deadline: Deadline) -> list[float]:
        """The seconds of the candidates evaluated before the deadline: a prefix."""
        if deadline.expired():
            return []
        if self.executor is None or len(candidates) < 2:
            times = []
            for candidate in candidates:
                if deadline.expired():
                    break
                times.append(evaluate(self.problem, self.sizes, *candidate))
            return times
        futures = [self.executor.submit(_evaluate_installed, c) for c in candidates]
        times = []
        try:
            for future in futures:
                left = deadline.remaining()
                times.append(future.result(timeout=left if math.isfinite(left) else None))
        except FutureTimeout:
            for future in futures:
                future.cancel()
        return times

    def close(self) -> None:
        if self.executor is not None:
            self.executor.shutdown(wait=True, cancel_futures=True)


# -------------------------------------------------------------------------- search


Scored = tuple[Chromosome, float]

LOOP_SHARE = 0.9
"""The part of the deadline the search's loop takes; the rest is the last stage's
(`without_pool`)."""


class _Run:
    """One search's state: the genome, the evaluator, the cache of every chromosome's
    seconds, the best so far. A context manager: leaving it stops the workers."""

    def __init__(
        self, problem: PlacementProblem, limits: SearchLimits, settings: GASettings
    ) -> None:
        self.started = time.perf_counter()
        self.problem, self.limits, self.settings = problem, limits, settings
        self.deadline = limits.deadline.share(LOOP_SHARE if settings.without_pool else 1.0)
        self.genome = Genome.of(problem)
        self.rng = random.Random(limits.seed)
        workers = settings.workers or (
            len(os.sched_getaffinity(0)) if len(problem.dag.ops) >= PARALLEL_OPS else 1
        )
        self.evaluate = _Evaluator(problem, self.genome.sizes, workers)
        self.cache: dict[Chromosome, float] = {}
        self.repeats = 0
        self.timed_out = False
        self.best: Scored | None = None

    def __enter__(self) -> _Run:
        return self

    def __exit__(self, *exc: object) -> None:
        self.evaluate.close()

    @property
    def evaluations(self) -> int:
        return len(self.cache)

    def spent(self) -> StopReason | None:
        """Why the search must stop now, if it must."""
        if self.evaluations >= self.limits.budget:
            return StopReason.BUDGET
        if self.timed_out or self.deadline.expired():
            return StopReason.TIMEOUT
        return None

    def score(self, chromosomes: Iterable[Chromosome]) -> list[Scored]:
        """The distinct chromosomes with their seconds: repeats from the cache, new ones
        evaluated while the budget and the deadline last (the rest are left out)."""
        chromosomes = list(dict.fromkeys(chromosomes))
        new = [c for c in chromosomes if c not in self.cache]
        self.repeats += len(chromosomes) - len(new)
        new = new[: max(0, self.limits.budget - self.evaluations)]
        times = self.evaluate([(c.schedule, c.allocation) for c in new], self.deadline)
        self.timed_out |= len(times) < len(new)
        self.cache.update(zip(new, times, strict=False))
        scored = [(c, self.cache[c]) for c in chromosomes if c in self.cache]
        for chromosome, seconds in scored:
            if self.best is None or seconds < self.best[1]:
                self.best = (chromosome, seconds)
        if self.limits.progress is not None and self.best is not None:
            self.limits.progress(self.evaluations, self.best[1])
        return scored

    def first_population(self) -> list[Chromosome]:
        """The seed schedules with the one-class and profile allocations, then random
        variants (module docstring), as `mode` allows."""
        genome, settings = self.genome, self.settings
        allocations = [self.frozen] if settings.mode == "schedule" else genome.seed_allocations()
        schedules = [genome.default] if settings.mode == "allocation" else genome.seeds
        chosen = [Chromosome(s, a) for s in schedules for a in allocations if a is not None]
        for _ in range(4 * settings.population):
            if len(dict.fromkeys(chosen)) >= settings.population:
                break
            variant = self.variant()
            if variant is not None:
                chosen.append(variant)
        return list(dict.fromkeys(chosen))[: settings.population]

    @functools.cached_property
    def frozen(self) -> Allocation | None:
        """The allocation of `mode=schedule`: the profile, else the one-class one, else
        the first random one that fits."""
        tries = (self.genome.random_allocation(self.rng) for _ in range(self.settings.population))
        fitting = (a for a in (*reversed(self.genome.seed_allocations()), *tries) if a is not None)
        return next(fitting, None)

    def variant(self) -> Chromosome | None:
        """A random variant: a seed schedule mutated, a random allocation (the frozen
        part as `mode` says)."""
        genome, settings = self.genome, self.settings
        schedule = genome.default
        if settings.mode != "allocation":
            seed = self.rng.choice(genome.seeds)
            schedule = genome.mutate_schedule(seed, settings.mutation, self.rng)
        schedule_only = settings.mode == "schedule"
        allocation = self.frozen if schedule_only else genome.random_allocation(self.rng)
        return None if allocation is None else Chromosome(schedule, allocation)

    def outcome(
        self, stopped: StopReason, population: Sequence[Scored], details: dict[str, Any]
    ) -> SearchOutcome[PlacementPlan]:
        """The best plan: the best chromosome's, or (`without_pool`) the byte plan of a
        schedule of the last population when faster; NoPlanFound when nothing fits."""
        schedules = dict.fromkeys(c.schedule for c, _ in sorted(population, key=lambda c: c[1]))
        unpooled = [(s, None) for s in schedules] if self.settings.without_pool else []
        times = self.evaluate(unpooled, self.limits.deadline)
        best: tuple[Candidate, float] | None = None
        if self.best is not None:
            best = ((self.best[0].schedule, self.best[0].allocation), self.best[1])
        for candidate, seconds in zip(unpooled, times, strict=False):
            if best is None or seconds < best[1]:
                best = (candidate, seconds)
        if best is None or not math.isfinite(best[1]):
            raise NoPlanFound(
                f"none of the {self.evaluations} schedules and allocations it evaluated "
                "fits (what must stay on the device fills a size class)"
            )
        (schedule, allocation), seconds = best
        genome = self.genome
        on_step = [t for c, t in self.cache.items() if c.schedule == genome.default]
        return SearchOutcome(
            best=plan_of(self.problem, genome.sizes, schedule, allocation),
            cost_before=min(on_step, default=seconds),
            cost_after=seconds,
            seconds=time.perf_counter() - self.started,
            stopped=stopped,
            details={
                "evaluations": self.evaluations,
                "repeats": self.repeats,
                "infeasible": sum(1 for t in self.cache.values() if not math.isfinite(t)),
                "unpooled_evaluations": len(times),
                "workers": self.evaluate.workers,
                "mode": self.settings.mode,
                "pool": None if allocation is None else str(allocation.pool(genome.sizes)),
                "schedule": genome.describe(schedule),
                **details,
            },
        )


def ga_search(
    problem: PlacementProblem, limits: SearchLimits, settings: GASettings | None = None
) -> SearchOutcome[PlacementPlan]:
    """SwapAdvisor's GA (module docstring): the best plan it finds."""
    settings = settings or GASettings()
    with _Run(problem, limits, settings) as run:
        genome, rng = run.genome, run.rng
        population = run.score(run.first_population())
        history = [run.best[1] if run.best else math.inf]
        stale = 0
        while population and run.spent() is None and stale < settings.patience:
            children = []
            for _ in range(-(-settings.population // 4)):
                (a, _), (b, _) = (
                    rng.sample(population, 2) if len(population) > 1 else population * 2
                )
                children += _offspring(genome, a, b, settings, rng)
            population = _survivors(population + run.score(children), settings.population, rng)
            history.append(run.best[1] if run.best else math.inf)
            stale = stale + 1 if history[-1] >= history[-2] else 0
        return run.outcome(
            run.spent() or (StopReason.CONVERGED if population else StopReason.EXHAUSTED),
            population,
            {
                "generations": len(history) - 1,
                "population": settings.population,
                "mutation": settings.mutation,
                "best_seconds_per_generation": history,
                "found_in_generation": history.index(history[-1]),
            },
        )


def _offspring(
    genome: Genome, a: Chromosome, b: Chromosome, settings: GASettings, rng: random.Random
) -> list[Chromosome]:
    """The four mutated children of one crossing (two schedules by two allocations),
    the frozen part as `mode` says."""
    schedules: Sequence[tuple[int, ...]] = (a.schedule, b.schedule)
    allocations: Sequence[Allocation] = (a.allocation, b.allocation)
    if settings.mode != "allocation":
        schedules = genome.cross_schedules(a.schedule, b.schedule, rng)
    if settings.mode != "schedule":
        allocations = genome.cross_allocations(a.allocation, b.allocation, rng)
    children = []
    for schedule in schedules:
        for allocation in allocations:
            order, mutated = schedule, allocation
            if settings.mode != "allocation":
                order = genome.mutate_schedule(schedule, settings.mutation, rng)
            if settings.mode != "schedule":
                mutated = genome.mutate_allocation(allocation, settings.mutation, rng)
            if mutated is not None:
                children.append(Chromosome(order, mutated))
    return children


def _survivors(candidates: list[Scored], size: int, rng: random.Random) -> list[Scored]:
    """Eq. 4.1's softmax survival among distinct candidates, the best kept (elitism);
    infeasible ones only while nothing feasible is left to take."""
    distinct = list(dict(candidates).items())
    feasible = [c for c in distinct if math.isfinite(c[1])]
    if not feasible:
        return distinct[:size]
    best = min(feasible, key=lambda c: c[1])
    rest = [c for c in feasible if c is not best]
    weights = [math.exp((best[1] - t) / best[1]) for _, t in rest]
    chosen = [best]
    while len(chosen) < size and rest:
        pick = rng.random() * sum(weights)
        index = 0
        while index < len(weights) - 1 and pick >= weights[index]:
            pick -= weights[index]
            index += 1
        chosen.append(rest.pop(index))
        weights.pop(index)
    return chosen


def random_search(
    problem: PlacementProblem, limits: SearchLimits, settings: GASettings | None = None
) -> SearchOutcome[PlacementPlan]:
    """The GA's first population, then random variants alone (no crossover, no
    selection), a population's worth at a time, for the same budget: the baseline
    the GA must beat."""
    settings = settings or GASettings()
    with _Run(problem, limits, settings) as run:
        population = run.score(run.first_population())
        while run.spent() is None:
            before = run.evaluations
            batch = (run.variant() for _ in range(settings.population))
            scored = run.score(c for c in batch if c is not None)
            population = sorted(population + scored, key=lambda c: c[1])[: settings.population]
            if run.evaluations == before:
                break  # the variants are all repeats: nothing new to try
        return run.outcome(run.spent() or StopReason.EXHAUSTED, population, {})


__all__: Sequence[str] = (
    "Allocation",
    "Chromosome",
    "GASettings",
    "Genome",
    "Mode",
    "evaluate",
    "ga_search",
    "monotone",
    "plan_of",
    "random_search",
    "regroup",
)
