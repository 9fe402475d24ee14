"""`search=dp`: ROC's memory manager (Jia thesis §4.5, Algorithm 3) — a dynamic program
over a graph's execution states that picks both the order of the ops and which tensors
stay cached in device memory, for the fewest bytes loaded from host memory.

**ROC's model.** Host memory holds every tensor; device memory is a cache of at most
`capacity` bytes. An op runs on device copies of its inputs and writes its results
there (ROC writes each result back to host memory as well, overlapped with compute:
the same bytes for every plan, so not counted). A state S is a set of ops already run
that contains every predecessor of its members (a down-set of the graph: the states
are every execution order at once); its live tensors A(S) are those an op of S made or
read that an op outside S still reads. COST(S, T) is the fewest bytes loaded to run
the ops of S and end with T, a subset of A(S), cached. Running op o from (S, T) loads its inputs
not in T, must hold T | IN(o) | OUT(o) (plus its `work`) within the capacity
(Algorithm 3's line 18), and may keep any part of (T | IN(o) | OUT(o)) ∩ A(S + o).

**Departure from the pseudocode.** Read literally, Algorithm 3's recursion sets the
cache before o to T' = (T \\ OUT(o)) ∩ A(S'): a tensor whose last reader is o is never
in T (it is not live after o), so never in T', so always loaded again for its last
reader, and a cached tensor still live after o can never be evicted at o. That is not
"the globally optimal strategy" its text claims; here a state may drop any cached
tensor at no cost (host memory has a copy), which is what the text's model allows. The
DP runs forward over states by size, each (S, T) evaluated once (memoised): an op's
arrivals keep everything they may, then every subset of a state's cached sets is
reached by dropping one tensor at a time (a superset-minimum over the subsets of
A(S)), so each (S, T) costs O(|A(S)| + ready ops) — the thesis' O(S²T) bound, less.

**The bound.** The pairs (S, T) are at most Σ_S 2^|A(S)|; `max_states` bounds that sum
(default 65,536: the thesis' largest GNN had 16 states and 4,096 tensor sets). ROC's
ops are layer-level, so a tasoc training step (tens to hundreds of fine ops) is first
coarsened (`coarsen`): its schedule is cut into `groups` contiguous runs of ops (each
a coarse op; contiguous runs of a topological order keep the coarse graph acyclic), and
the values that cross runs are grouped by (maker run, reader runs) into coarse tensors
— a layer's activations, its weights. Values inside one run are the coarse op's
`work`. `roc_plan` takes the finest coarsening within the bound (every op its own
run when the whole step fits, as on small graphs) on which some order fits the
capacity; `StateSpaceTooLarge` (one line, naming the bound and the count) when not
even the step as one run is within the bound.

**The plan.** The DP's order of coarse ops, each run's ops in their schedule order, is
the placed program's order. Op-level swaps on that order are the fixed-order DP's
(`dp.py`: exact in tasoc's accounting, where a value evicted is copied out once and a
param may arrive on the host, which ROC's model has not); the step's own order is
planned the same way, and the order that moves fewer bytes is kept, so `dp` never
moves more than `dp-fixed-order`, Belady or LRU on the step's schedule. Lowering and
JAX execution are every placed program's.
"""

from __future__ import annotations

import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Literal

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import PlacementPlan, readers_in_order
from tasoc.ir.training import TrainingSignature
from tasoc.passes.placement.dp import DEFAULT_MAX_STATES as FIXED_ORDER_STATES
from tasoc.passes.placement.dp import DpPlan, plan_dp
from tasoc.passes.placement.problem import PlacementProblem, SearchLimits
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.passes.search import SearchOutcome, StopReason

DEFAULT_MAX_STATES = 16 * 4096
"""(S, T) pairs the DP may have: the thesis' largest, 16 execution states times 4,096
tensor sets."""

CachePolicy = Literal["stream", "lru", "belady"]
"""ROC's baselines on a fixed order (§4.7.7): `stream` caches nothing (NeuGraph's
streaming), `lru` evicts the least recently used tensor, `belady` the one read again
last."""


class StateSpaceTooLarge(ValueError):
    """ROC's DP over its `max_states` bound (one line: the bound and the count)."""

    def __init__(self, count: int, bound: int, where: str) -> None:
        super().__init__(
            f"search=dp: ROC's DP has at least {count} (execution state, cached tensor "
            f"set) pairs {where}, over max-states={bound}"
        )
        self.count, self.bound = count, bound


class NoOrderFits(ValueError):
    """No execution order runs within the capacity in ROC's model (one line)."""


@dataclass(frozen=True)
class CoarseGraph:
    """ROC's view of a graph: ops over tensors, listed in a topological order (each
    tensor made by an op before its readers, or by none: a graph input on the host)."""

    sizes: tuple[int, ...]
    """Bytes of each tensor."""
    ins: tuple[int, ...]
    """Per op, the tensors it reads (a bit set)."""
    outs: tuple[int, ...]
    """Per op, the tensors it makes (a bit set)."""
    work: tuple[int, ...] = ()
    """Per op, bytes it holds besides its inputs and results while it runs (a coarse
    op's values inside it); none when empty."""
    readers: tuple[int, ...] = field(init=False)
    """Per tensor, the ops that read it (a bit set)."""
    preds: tuple[int, ...] = field(init=False)
    """Per op, the ops that make its inputs (a bit set)."""

    def __post_init__(self) -> None:
        n = len(self.ins)
        if len(self.outs) != n or (self.work and len(self.work) != n):
            raise ValueError("ins, outs and work must have one entry per op")
        maker: dict[int, int] = {}
        for o, out in enumerate(self.outs):
            for t in _bits(out):
                if t in maker:
                    raise ValueError(f"tensor {t} is made by ops {maker[t]} and {o}")
                maker[t] = o
        readers = [0] * len(self.sizes)
        preds = []
        for o, read in enumerate(self.ins):
            if read & self.outs[o]:
                raise ValueError(f"op {o} reads a tensor it makes")
            before = 0
            for t in _bits(read):
                readers[t] |= 1 << o
                if t in maker:
                    if maker[t] > o:
                        raise ValueError(f"op {o} reads tensor {t} before op {maker[t]} makes it")
                    before |= 1 << maker[t]
            preds.append(before)
        object.__setattr__(self, "readers", tuple(readers))
        object.__setattr__(self, "preds", tuple(preds))
        if not self.work:
            object.__setattr__(self, "work", (0,) * n)

    @property
    def num_ops(self) -> int:
        return len(self.ins)

    def size(self, tensors: int) -> int:
        """Bytes of a set of tensors."""
        return sum(self.sizes[t] for t in _bits(tensors))

    def live(self, state: int) -> int:
        """A(S): the tensors an op of `state` made or read that an op outside reads."""
        touched = 0
        for o in _bits(state):
            touched |= self.ins[o] | self.outs[o]
        return sum(1 << t for t in _bits(touched) if self.readers[t] & ~state)

    def ready(self, state: int) -> Iterator[int]:
        """The ops outside `state` whose predecessors all ran."""
        for o in range(self.num_ops):
            if not state >> o & 1 and self.preds[o] & ~state == 0:
                yield o


@dataclass(frozen=True)
class RocStep:
    """One op of the DP's plan: the tensors cached when it starts (what it need not
    load) and those kept after it."""

    op: int
    cached: int
    kept: int


@dataclass(frozen=True)
class RocSolution:
    """The DP's optimum: the order, the cache at each op, the bytes loaded."""

    steps: tuple[RocStep, ...]
    loaded: int
    execution_states: int
    """Down-sets of the graph (S)."""
    pairs: int
    """(S, T) pairs the DP evaluated."""
    seconds: float

    @property
    def order(self) -> tuple[int, ...]:
        return tuple(step.op for step in self.steps)


def state_space(graph: CoarseGraph, bound: int) -> tuple[list[int], int]:
    """The execution states (down-sets) of `graph` by size, and Σ_S 2^|A(S)|: the
    (S, T) pairs the DP may have. StateSpaceTooLarge as soon as the sum passes
    `bound` (the count then is a lower bound)."""
    states, seen, total, frontier = [], {0}, 0, [0]
    while frontier:
        following = []
        for state in frontier:
            states.append(state)
            total += 1 << graph.live(state).bit_count()
            if total > bound:
                raise StateSpaceTooLarge(total, bound, f"on {graph.num_ops} ops")
            for o in graph.ready(state):
                if state | 1 << o not in seen:
                    seen.add(state | 1 << o)
                    following.append(state | 1 << o)
        frontier = following
    return states, total


def solve(graph: CoarseGraph, capacity: int, max_states: int = DEFAULT_MAX_STATES) -> RocSolution:
    """Algorithm 3 (module docstring): the order and caching of `graph`'s ops that load
    the fewest bytes within `capacity`. StateSpaceTooLarge over `max_states`,
    NoOrderFits when no order runs within the capacity."""
    start = time.perf_counter()
    states, _ = state_space(graph, max_states)
    full = (1 << graph.num_ops) - 1
    # best[S][T] = (cost, how): ("op", o, T_before) from S \ {o}, or ("drop", T_super).
    best: dict[int, dict[int, tuple[int, tuple[str, int, int]]]] = {0: {0: (0, ("op", -1, 0))}}
    pairs = 0
    for state in states:  # by size: every predecessor state is done
        table = best.get(state, {})
        _drop_closure(table)
        pairs += len(table)
        for cached, (cost, _) in table.items():
            held = graph.size(cached)
            for o in graph.ready(state):
                touched = cached | graph.ins[o] | graph.outs[o]
                extra = graph.size(touched & ~cached)
                if held + extra + graph.work[o] > capacity:
                    continue
                after = state | 1 << o
                kept = touched & graph.live(after)
                loaded = cost + graph.size(graph.ins[o] & ~cached)
                known = best.setdefault(after, {}).get(kept)
                if known is None or loaded < known[0]:
                    best[after][kept] = (loaded, ("op", o, cached))
    if 0 not in best.get(full, {}):
        raise NoOrderFits(
            f"no order of the {graph.num_ops} ops runs within {capacity} bytes: "
            f"some op needs more with nothing cached"
        )
    return RocSolution(
        _path(best, full), best[full][0][0], len(states), pairs, time.perf_counter() - start
    )


def _drop_closure(table: dict[int, tuple[int, tuple[str, int, int]]]) -> None:
    """Reach every subset of the cached sets in `table` by dropping tensors, each at
    the least cost of a superset (host memory has every tensor: dropping is free).
    Largest sets first, so a set's cost is final before its subsets take it."""
    by_count: dict[int, set[int]] = {}
    for cached in table:
        by_count.setdefault(cached.bit_count(), set()).add(cached)
    for count in range(max(by_count, default=0), 0, -1):
        for cached in by_count.get(count, ()):
            cost = table[cached][0]
            for t in _bits(cached):
                smaller = cached & ~(1 << t)
                known = table.get(smaller)
                if known is None or cost < known[0]:
                    table[smaller] = (cost, ("drop", -1, cached))
                    by_count.setdefault(count - 1, set()).add(smaller)


def _path(
    best: dict[int, dict[int, tuple[int, tuple[str, int, int]]]], full: int
) -> tuple[RocStep, ...]:
    """The optimum's steps, followed back from (all ops, nothing cached)."""
    steps: list[RocStep] = []
    state, cached = full, 0
    while state:
        _, (how, o, before) = best[state][cached]
        if how == "op":
            state &= ~(1 << o)
            steps.append(RocStep(o, before, cached))
        cached = before
    return tuple(reversed(steps))


def cache_loads(
    graph: CoarseGraph, order: Sequence[int], capacity: int, policy: CachePolicy
) -> int | None:
    """Bytes `policy` loads running `graph` in `order` within `capacity` in ROC's model
    (§4.7.7's baselines): before each op, cached tensors it does not touch are evicted
    while it does not fit (`stream` keeps nothing cached); after it, what it touched
    stays cached while live. None when an op does not fit even with nothing cached."""
    cached, loaded, state = 0, 0, 0
    used = [-1] * len(graph.sizes)
    for i, o in enumerate(order):
        touched = graph.ins[o] | graph.outs[o]
        if policy == "stream":
            cached = 0
        while graph.size(cached | touched) + graph.work[o] > capacity:
            victims = _bits(cached & ~touched)
            if not victims:
                return None
            if policy == "lru":
                victim = min(victims, key=lambda t: used[t])
            else:
                victim = max(victims, key=lambda t: _next_read(graph, order, i, t))
            cached &= ~(1 << victim)
        loaded += graph.size(graph.ins[o] & ~cached)
        for t in _bits(touched):
            used[t] = i
        state |= 1 << o
        cached = (cached | touched) & graph.live(state)
    return loaded


def _next_read(graph: CoarseGraph, order: Sequence[int], i: int, tensor: int) -> int:
    """The position after `i` of the next op of `order` that reads `tensor`."""
    for j in range(i + 1, len(order)):
        if graph.readers[tensor] >> order[j] & 1:
            return j
    return len(order)


# ---------------------------------------------------------------- a tasoc step


@dataclass(frozen=True)
class Coarsening:
    """A dag as ROC's coarse graph (module docstring): coarse op k is the run of fine
    ops `runs[k]`, coarse tensor t the fine values `tensors[t]`."""

    graph: CoarseGraph
    runs: tuple[tuple[Node, ...], ...]
    tensors: tuple[tuple[Value, ...], ...]

    def order(self, coarse: Sequence[int]) -> tuple[Node, ...]:
        """The fine ops of a coarse order, each run's in its schedule order."""
        return tuple(node for k in coarse for node in self.runs[k])


def coarsen(dag: Dag, groups: int) -> Coarsening:
    """`dag`'s schedule cut into `groups` contiguous runs of about equal op counts, the
    values between runs grouped by (maker run, reader runs) into coarse tensors, the
    values inside a run its `work` (their most bytes live at one of its ops). A value
    returned from a run that nothing else reads is one of its results (it is written
    back to host memory); an argument nobody reads is left out."""
    ops = dag.ops
    groups = max(1, min(groups, len(ops)))
    run_of = {node: k * groups // len(ops) for k, node in enumerate(ops)}
    readers = readers_in_order(dag)
    returned = set(dag.outputs)
    keys: dict[tuple[int, frozenset[int]], list[Value]] = {}
    inside: dict[int, list[tuple[int, int, int]]] = {}  # run -> (made at, last read, bytes)
    where = {node: i for i, node in enumerate(ops)}
    values = [arg.out for arg in dag.args] + [v for node in ops for v in node.results]
    for v in values:
        maker = -1 if v.node.is_arg else run_of[v.node]
        reading = frozenset(run_of[r] for r in readers.get(v, ())) - {maker}
        if reading or (maker >= 0 and v in returned):
            keys.setdefault((maker, reading), []).append(v)
        elif maker >= 0:
            reads = [where[r] for r in readers.get(v, ())]
            inside.setdefault(maker, []).append(
                (where[v.node], max(reads, default=where[v.node]), tensor_bytes(v.sig))
            )
    tensors = tuple(tuple(vs) for vs in keys.values())
    sizes = tuple(sum(tensor_bytes(v.sig) for v in vs) for vs in tensors)
    ins, outs = [0] * groups, [0] * groups
    for t, (maker, reading) in enumerate(keys):
        if maker >= 0:
            outs[maker] |= 1 << t
        for k in reading:
            ins[k] |= 1 << t
    work = [0] * groups
    for k, spans in inside.items():
        work[k] = max(sum(b for s, e, b in spans if s <= i <= e) for i, _, _ in spans)
    runs = tuple(tuple(node for node in ops if run_of[node] == k) for k in range(groups))
    return Coarsening(CoarseGraph(sizes, tuple(ins), tuple(outs), tuple(work)), runs, tensors)


def coarsenings(dag: Dag, max_states: int) -> Iterator[Coarsening]:
    """The coarsenings of `dag` whose state space is within `max_states`, finest first:
    every op its own run, then half as many runs, and so on down to one.
    StateSpaceTooLarge when none is (`max_states` below 2: one run has two states)."""
    groups, within = len(dag.ops), False
    while groups:
        coarse = coarsen(dag, groups)
        try:
            state_space(coarse.graph, max_states)
        except StateSpaceTooLarge as err:
            if groups == 1 and not within:
                where = "even with the step as one op"
                raise StateSpaceTooLarge(err.count, err.bound, where) from None
        else:
            within = True
            yield coarse
        groups //= 2


@dataclass(frozen=True)
class RocPlan:
    """`roc_plan`'s plan and how it was found."""

    plan: PlacementPlan
    dp_plan: DpPlan
    """The fixed-order DP's plan on the chosen order (`plan` is its)."""
    solution: RocSolution | None
    """The DP's optimum; None where no coarsening within the bound has an order that
    fits ROC's model (a coarse op holds all its inputs and results at once), so the
    step's order is used."""
    coarse: Coarsening
    """The coarsening the DP ran on (the coarsest tried, when none fit)."""
    order_from: Literal["dp", "schedule"]
    """Whose order `plan` runs: the DP's, or the step's own (which moved fewer bytes
    once planned op by op)."""
    seconds: float


def roc_plan(
    dag: Dag,
    signature: TrainingSignature | None,
    capacity: int,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    groups: int | None = None,
) -> RocPlan:
    """The plan of `dag` within `capacity` (module docstring): ROC's DP on the finest
    coarsening within `max_states` that has an order within the capacity (or on
    `groups` runs), its order planned op by op by the fixed-order DP, against the
    step's own order planned the same way.
    StateSpaceTooLarge over the bound, CapacityTooSmall when nothing fits."""
    start = time.perf_counter()
    choices = coarsenings(dag, max_states) if groups is None else iter([coarsen(dag, groups)])
    solution: RocSolution | None = None
    for coarse in choices:
        try:
            solution = solve(coarse.graph, capacity, max_states)
        except NoOrderFits:  # a run's `work` over-counts: a finer or coarser one may fit
            continue
        break
    candidates: dict[Literal["dp", "schedule"], Dag] = {}
    if solution is not None:
        candidates["dp"] = dag.scheduled(coarse.order(solution.order))
    if solution is None or candidates["dp"].ops != dag.ops:
        candidates["schedule"] = dag
    tried: dict[Literal["dp", "schedule"], DpPlan] = {}
    failure: CapacityTooSmall | None = None
    for name, candidate in candidates.items():
        try:
            tried[name] = plan_dp(candidate, signature, capacity, max_states=FIXED_ORDER_STATES)
        except CapacityTooSmall as err:
            failure = failure or err
    if not tried:
        assert failure is not None
        raise failure
    chosen = min(tried, key=lambda name: tried[name].transferred_bytes)
    return RocPlan(
        tried[chosen].plan, tried[chosen], solution, coarse, chosen, time.perf_counter() - start
    )


def roc_search(
    problem: PlacementProblem, limits: SearchLimits, max_states: int = DEFAULT_MAX_STATES
) -> SearchOutcome[PlacementPlan]:
    """`placement{search=dp}`: ROC's plan as a search outcome, its costs simulated
    seconds (belady's plan's before, the DP's after) as every placement search
    reports them, its figures in `details`."""
    del limits  # the DP is exact within its bound: no budget, deadline or seed
    found = roc_plan(problem.dag, problem.signature, problem.capacity, max_states=max_states)
    belady = plan_swaps(problem.dag, problem.signature, SwapSettings(problem.capacity, "belady"))
    solution = found.solution
    searched = (
        "no order of the coarse ops fits ROC's model"
        if solution is None
        else f"ROC's DP over {solution.execution_states} execution states of "
        f"{found.coarse.graph.num_ops} coarse ops, {solution.pairs} (S, T) pairs"
    )
    return SearchOutcome(
        best=found.plan,
        cost_before=problem.simulate(belady).seconds,
        cost_after=problem.simulate(found.plan).seconds,
        seconds=found.seconds,
        stopped=StopReason.EXHAUSTED,
        details={
            "coarse_ops": found.coarse.graph.num_ops,
            "coarse_tensors": len(found.coarse.graph.sizes),
            "execution_states": None if solution is None else solution.execution_states,
            "dp_pairs": None if solution is None else solution.pairs,
            "max_states": max_states,
            "roc_loaded_bytes": None if solution is None else solution.loaded,
            "order_from": found.order_from,
            "transferred_bytes": found.dp_plan.transferred_bytes,
            "dp_note": (
                f"dp: {searched} (max_states={max_states}); the {found.order_from}'s "
                f"order, planned op by op, moves {found.dp_plan.transferred_bytes} bytes"
            ),
        },
    )


def _bits(mask: int) -> list[int]:
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found
