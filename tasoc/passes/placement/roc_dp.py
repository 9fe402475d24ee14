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
the ops of S and end with T, a subset of A(S), cached. Running op o from (S, T) loads
its inputs not in T and must hold T | IN(o) | OUT(o) (plus its `work`) within the
capacity (Algorithm 3's line 18), evicting cached tensors it does not touch where they
do not fit; what stays cached after it is what it held that is still live.

**Departure from the pseudocode.** Read literally, Algorithm 3's recursion sets the
cache before o to T' = (T \\ OUT(o)) ∩ A(S'): a tensor whose last reader is o is never
in T (it is not live after o), so never in T', so always loaded again for its last
reader, and a cached tensor still live after o can never be evicted at o. That is not
"the globally optimal strategy" its text claims; here a state may evict any cached
tensor at no cost (host memory has a copy), which is what the text's model allows.

**How it runs.** Forward over the states by size, each (S, T) evaluated once
(memoised). Evicting is free and keeping never loads more, so a tensor is evicted only
when an op needs its room, and only minimal eviction sets are tried (`_evictions`): a
tensor evicted beyond one could as well be evicted when room is next needed. Every
plan keeps at least what some such plan keeps, so the optimum is among them (the
brute-force test checks it against every subset kept before every op).

**The bound.** `max_states` bounds the (S, T) pairs evaluated (default 65,536: the
thesis' largest GNN had 16 states and 4,096 tensor sets); the execution states alone
are counted first. ROC's ops are layer-level, so a tasoc training step (tens to
hundreds of fine ops) is coarsened (`coarsen`): its schedule is cut into contiguous
runs of ops (each a coarse op; contiguous runs of a topological order keep the coarse
graph acyclic), and the values that cross runs are grouped by (maker run, reader runs)
into coarse tensors — a layer's activations, its weights. Values inside one run are the
coarse op's `work`. `roc_plan` takes the finest cut (every op its own run on a step of
at most `MAX_RUNS` ops, else `MAX_RUNS` runs, then half as many, ...) the DP solves
within the bound with an order that fits the capacity; `StateSpaceTooLarge` (one line,
naming the bound and the count) when not even the step as one run is within it.

**The plan.** The DP's order of coarse ops, each run's ops in their schedule order, is
the placed program's order. Op-level swaps on that order are the fixed-order DP's
(`dp.py`: exact in tasoc's accounting below its own bound, where a value evicted is
copied out once and a param may arrive on the host, which ROC's model has not). The
step's own order is planned the same way, and the order that moves fewer bytes is
kept, so `dp` never moves more than `dp-fixed-order`, Belady or LRU on the step's
schedule. Lowering and JAX execution are every placed program's.
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
from tasoc.passes.placement.dp import DpPlan, plan_dp, set_bits
from tasoc.passes.placement.problem import PlacementProblem, SearchLimits
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.passes.search import SearchOutcome, StopReason

DEFAULT_MAX_STATES = 16 * 4096
"""(S, T) pairs the DP may evaluate: the thesis' largest, 16 execution states times
4,096 tensor sets."""

MAX_RUNS = 64
"""The finest coarsening `roc_plan` tries: ROC's graphs had a handful of layer-level
ops, and counting a step's execution states costs O(ops) each."""

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
    chunks: tuple[tuple[int, ...], ...] = field(init=False, repr=False)
    """Per byte of a tensor bit set, the bytes of each of its 256 values: `size` is the
    DP's innermost step, a lookup per 8 tensors instead of a loop over the set."""

    def __post_init__(self) -> None:
        n = len(self.ins)
        if len(self.outs) != n or (self.work and len(self.work) != n):
            raise ValueError("ins, outs and work must have one entry per op")
        maker: dict[int, int] = {}
        for o, out in enumerate(self.outs):
            for t in set_bits(out):
                if t in maker:
                    raise ValueError(f"tensor {t} is made by ops {maker[t]} and {o}")
                maker[t] = o
        readers = [0] * len(self.sizes)
        preds = []
        for o, read in enumerate(self.ins):
            if read & self.outs[o]:
                raise ValueError(f"op {o} reads a tensor it makes")
            before = 0
            for t in set_bits(read):
                readers[t] |= 1 << o
                if t in maker:
                    if maker[t] > o:
                        raise ValueError(f"op {o} reads tensor {t} before op {maker[t]} makes it")
                    before |= 1 << maker[t]
            preds.append(before)
        object.__setattr__(self, "readers", tuple(readers))
        chunks = []
        for base in range(0, len(self.sizes), 8):
            part = self.sizes[base : base + 8]
            table = [0] * 256
            for byte in range(1, 256):
                low = (byte & -byte).bit_length() - 1
                table[byte] = table[byte & (byte - 1)] + (part[low] if low < len(part) else 0)
            chunks.append(tuple(table))
        object.__setattr__(self, "chunks", tuple(chunks))
        object.__setattr__(self, "preds", tuple(preds))
        if not self.work:
            object.__setattr__(self, "work", (0,) * n)

    @property
    def num_ops(self) -> int:
        return len(self.ins)

    def size(self, tensors: int) -> int:
        """Bytes of a set of tensors."""
        total, k = 0, 0
        while tensors:
            total += self.chunks[k][tensors & 255]
            tensors >>= 8
            k += 1
        return total

    def live(self, state: int) -> int:
        """A(S): the tensors an op of `state` made or read that an op outside reads."""
        touched = 0
        for o in set_bits(state):
            touched |= self.ins[o] | self.outs[o]
        return sum(1 << t for t in set_bits(touched) if self.readers[t] & ~state)

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


def execution_states(graph: CoarseGraph, bound: int) -> list[int]:
    """The execution states (down-sets) of `graph` by size. StateSpaceTooLarge as soon
    as they are more than `bound` (the count then is a lower bound)."""
    states, seen, frontier = [], {0}, [0]
    while frontier:
        following = []
        for state in frontier:
            states.append(state)
            if len(states) > bound:
                raise StateSpaceTooLarge(len(states), bound, f"on {graph.num_ops} ops")
            for o in graph.ready(state):
                if state | 1 << o not in seen:
                    seen.add(state | 1 << o)
                    following.append(state | 1 << o)
        frontier = following
    return states


Entry = tuple[int, int, int, int]
"""How the DP reached (S, T): (bytes loaded, the last op, the cache before it — what
the state before kept — and the tensors evicted before it ran)."""


def solve(graph: CoarseGraph, capacity: int, max_states: int = DEFAULT_MAX_STATES) -> RocSolution:
    """Algorithm 3 (module docstring): the order and caching of `graph`'s ops that load
    the fewest bytes within `capacity`. StateSpaceTooLarge when the (S, T) pairs pass
    `max_states`, NoOrderFits when no order runs within the capacity."""
    start = time.perf_counter()
    states = execution_states(graph, max_states)
    full = (1 << graph.num_ops) - 1
    best: dict[int, dict[int, Entry]] = {0: {0: (0, -1, 0, 0)}}
    pairs = 1
    live_of: dict[int, int] = {}
    for state in states:  # by size: every state before it is done
        ready = list(graph.ready(state))
        for cached, (cost, *_) in best.get(state, {}).items():
            for o in ready:
                touched = graph.ins[o] | graph.outs[o]
                excess = graph.size(cached | touched) + graph.work[o] - capacity
                after = state | 1 << o
                table = best.setdefault(after, {})
                if after not in live_of:
                    live_of[after] = graph.live(after)
                live = live_of[after]
                loaded = cost + graph.size(graph.ins[o] & ~cached)
                fits = excess <= 0  # most transitions: nothing to evict
                for evicted in (0,) if fits else _evictions(graph, cached & ~touched, excess):
                    kept = (cached & ~evicted | touched) & live
                    known = table.get(kept)
                    if known is None:
                        pairs += 1
                        if pairs > max_states:
                            where = f"on {graph.num_ops} ops"
                            raise StateSpaceTooLarge(pairs, max_states, where)
                    if known is None or loaded < known[0]:
                        table[kept] = (loaded, o, cached, evicted)
    if 0 not in best.get(full, {}):
        raise NoOrderFits(
            f"no order of the {graph.num_ops} ops runs within {capacity} bytes: "
            f"some op needs more with nothing cached"
        )
    return RocSolution(
        _path(best, full), best[full][0][0], len(states), pairs, time.perf_counter() - start
    )


def _evictions(graph: CoarseGraph, movable: int, excess: int) -> Iterator[int]:
    """The sets of `movable` tensors whose eviction frees at least `excess` (positive)
    bytes and that free less with any member kept. Only these are worth trying:
    evicting is free (host memory has every tensor) and keeping never loads more, so a
    tensor is best evicted only when an op needs its room, and one evicted beyond a
    minimal set can as well be evicted when room is next needed."""
    members = sorted(set_bits(movable), key=lambda t: graph.sizes[t], reverse=True)
    rest = [0] * (len(members) + 1)
    for j in range(len(members) - 1, -1, -1):
        rest[j] = rest[j + 1] + graph.sizes[members[j]]

    def grow(first: int, freed: int, chosen: int) -> Iterator[int]:
        # Largest first: a set is minimal exactly when its last, smallest member
        # is the one that reaches `excess`.
        for j in range(first, len(members)):
            if freed + rest[j] < excess:
                return
            reached = freed + graph.sizes[members[j]]
            if reached >= excess:
                yield chosen | 1 << members[j]
            else:
                yield from grow(j + 1, reached, chosen | 1 << members[j])

    yield from grow(0, 0, 0)


def _path(best: dict[int, dict[int, Entry]], full: int) -> tuple[RocStep, ...]:
    """The optimum's steps, followed back from (all ops, nothing cached)."""
    steps: list[RocStep] = []
    state, kept = full, 0
    while state:
        _, o, cached, evicted = best[state][kept]
        steps.append(RocStep(o, cached & ~evicted, kept))
        state &= ~(1 << o)
        kept = cached
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
            victims = set_bits(cached & ~touched)
            if not victims:
                return None
            if policy == "lru":
                victim = min(victims, key=lambda t: used[t])
            else:
                victim = max(victims, key=lambda t: _next_read(graph, order, i, t))
            cached &= ~(1 << victim)
        loaded += graph.size(graph.ins[o] & ~cached)
        for t in set_bits(touched):
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


def coarsenings(dag: Dag) -> Iterator[Coarsening]:
    """The coarsenings `roc_plan` tries, finest first: every op its own run (at most
    `MAX_RUNS` runs), then half as many runs, and so on down to one."""
    groups = min(len(dag.ops), MAX_RUNS)
    while groups:
        yield coarsen(dag, groups)
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
) -> RocPlan:
    """The plan of `dag` within `capacity` (module docstring): ROC's DP on the finest
    coarsening (`coarsenings`) it solves within `max_states` with an order that fits,
    that order planned op by op by the fixed-order DP, against the step's own order
    planned the same way. StateSpaceTooLarge when the step as one op is over the
    bound, CapacityTooSmall when nothing fits."""
    start = time.perf_counter()
    solution: RocSolution | None = None
    for coarse in coarsenings(dag):
        try:
            solution = solve(coarse.graph, capacity, max_states)
        except NoOrderFits:  # a coarse op holds its inputs and results at once
            continue
        except StateSpaceTooLarge as err:
            if coarse.graph.num_ops > 1:
                continue  # a coarser cut has fewer states
            where = "even with the step as one op"
            raise StateSpaceTooLarge(err.count, err.bound, where) from None
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
    whose = "its" if found.order_from == "dp" else "the step's own"
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
                f"dp: {searched} (max_states={max_states}); {whose} order, planned op by "
                f"op, moves {found.dp_plan.transferred_bytes} bytes"
            ),
        },
    )
