"""`search=dp-fixed-order`: a caching DP on the step's own, fixed schedule — which
tensors stay cached in device memory between ops, so that the bytes moved between host
and device are fewest within a capacity. It borrows ROC's cost and memory rule (Jia
thesis §4.5, Algorithm 3) but is not ROC's DP, which also chooses the order of the ops
(over a graph's execution states); `search=dp` is kept for that one.

ROC's DP walks the execution states of a graph and, for each, the sets of tensors
cached on the GPU; COST(S, T) is the fewest transfers that compute S and leave T
cached. Here the schedule is given (the dag's op order), so the execution states are
its prefixes and a state is (position, what is cached). The DP runs forward over the
positions, memoized (a state reached two ways keeps the cheaper), and costs what
`memory.replay` charges:

- **Held memory.** While op `i` runs: the cached tensors, its missing inputs (swapped
  in for it) and its results — at most `capacity` (Algorithm 3's line 18, and the
  verifier's replay). A tensor nobody reads again is dropped at no cost (a result
  after its last reader; an argument by a `Release`). Every device argument is held
  at the start.
- **Choices.** Where op `i` does not fit: which cached tensors (not its inputs) to
  evict, every minimal set that makes it fit. An eviction takes effect from the
  tensor's last reader — the device copy is released there — so deciding it only
  when room is needed loses nothing: it costs the same and frees the same memory,
  earlier than the op that needs it. A set larger than needed can be completed later
  with the same effect; evicting a tensor nothing needs room from only adds bytes.
- **Cost.** An evicted tensor costs its bytes twice, once to copy it to the host
  (unless a host copy exists: values are immutable, so a copy made once stays valid)
  and once to bring it back for its next reader. A value returned in device memory is
  never evicted (bringing it back for the return would prefetch for nothing), as in
  the swap planner.
- **Params and optimizer state across steps.** A training loop runs the step again on
  its own new params, so each persistent tensor either arrives in device memory with
  its new value returned there, or arrives on the host (one swap-in before its first
  reader) with its new value swapped out when made. The DP makes this choice per
  tensor, exactly: at the start it branches on it, and the state carries it until the
  new value is made, which it places — where the swap planner's double pass guesses it
  from a first scan.

A state is three bit sets: the cached tensors, those of them with a host copy (their
eviction costs half), and the persistent arguments that started on the host and whose
new value is not made yet. An arrival whose persistent tensors' new values, never
evicted once made, leave some op no room is dropped at once (`_Model._doom`): the only
way a state dies later, so every state kept reaches the end. The number of states
grows exponentially with the tensors cached at once; `max_states` bounds it. Above the
bound the DP is a beam search over the same states, no longer exact: at each step it
keeps the `max_states` cheapest states so far (the least memory held breaking ties:
room for what comes), and where an op does not fit it tries, per state, a few minimal
eviction sets among the tensors read again last (Belady's order). That plan is then
compared with the swap planner's Belady and LRU plans and the fewest bytes win;
`DpPlan.method` says which ran (`exact`, `bounded`, `belady`, `lru`).

The choice is written as a plan by the swap planner's own scan (`swap_planner.SwapScan`)
with the DP's evictions for victims: swap-outs right after a tensor is made, releases
after its last reader, swap-ins prefetched as early as memory allows. That scan too
evicts only when an op does not fit, so its plan moves the DP's bytes.
"""

from __future__ import annotations

import bisect
import heapq
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import islice
from typing import Literal

from tasoc.ir.dag import Dag, Value
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import PlacementPlan, Release, positions, readers_in_order
from tasoc.ir.training import TrainingSignature
from tasoc.passes.placement.problem import PlacementProblem, SearchLimits
from tasoc.passes.placement.swap_planner import (
    CapacityTooSmall,
    Meter,
    SwapScan,
    SwapSettings,
    plan_swaps,
)
from tasoc.passes.search import Progress, SearchOutcome, StopReason

Method = Literal["exact", "bounded", "belady", "lru"]

DEFAULT_MAX_STATES = 1000
"""States kept at a step before the DP turns into its bounded form: the random graphs
of up to 10 ops the tests draw need a few dozen at most; a 750-op RNN step far more
than any bound, and the bounded DP runs it in seconds."""

SUCCESSORS = 4
"""The bounded DP's work per op: at most this many successors per kept state, spread
over the states that must evict."""

Failure = tuple[int, int]
"""The least bytes held where no state fits, and the op."""

State = tuple[int, int, int]
"""(cached, cached with a host copy, persistent arguments that started on the host):
bit sets over the model's values (over argument indices for the third)."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """What a state costs and where it came from."""

    cost: int
    """Bytes transferred so far, each eviction charged in full (out and back in)."""
    held: int
    """Bytes of the cached set."""
    parent: State | None
    """The state at the previous step (None where the arguments arrive)."""


def transferred_bytes(plan: PlacementPlan) -> int:
    """Bytes a plan moves between host and device in one run: every swap-out and
    swap-in, each its tensor's bytes. What the DP minimizes, for comparing plans."""
    moves = plan.moves()
    return sum(tensor_bytes(move.value.sig) for move in moves if not isinstance(move, Release))


@dataclass(frozen=True)
class DpPlan:
    """The plan `plan_dp` returns and how it was found."""

    plan: PlacementPlan
    method: Method
    """`exact`: the DP's optimum; `bounded`: the DP above `max_states` (module
    docstring); `belady`/`lru`: the swap planner's plan, which moved fewer bytes than
    the bounded DP's."""
    transferred_bytes: int
    """What `plan` moves (`transferred_bytes`)."""
    dp_bytes: int | None
    """What the DP's choice costs (the optimum when exact; None when the bounded DP
    kept no state that fits)."""
    max_states: int
    peak_states: int
    """The most states the DP held at one step."""
    seconds: float
    baselines: Mapping[str, int] = field(default_factory=dict)
    """Bytes of the swap planner's plans, where the bounded DP was compared with them."""

    @property
    def note(self) -> str:
        """One line for the report: which search ran and why."""
        if self.method == "exact":
            return (
                f"dp-fixed-order: exact, {self.peak_states} states at most "
                f"(max_states={self.max_states}): {self.transferred_bytes} bytes moved"
            )
        found = "no plan" if self.dp_bytes is None else f"{self.dp_bytes} bytes"
        compared = ", ".join(f"{name} {nbytes}" for name, nbytes in self.baselines.items())
        head = (
            f"dp-fixed-order: more states than max_states={self.max_states}; the bounded DP "
            f"(a beam of {self.max_states} states) found {found}"
        )
        if self.method == "bounded":
            return f"{head}, the fewest (swap planner: {compared})"
        return f"{head}; {self.method}'s plan moves fewer and is used ({compared})"


def plan_dp(
    dag: Dag,
    signature: TrainingSignature | None,
    capacity: int,
    *,
    max_states: int = DEFAULT_MAX_STATES,
    lookback: int = 64,
    progress: Progress | None = None,
) -> DpPlan:
    """The plan of `dag` (ops in schedule order) that moves the fewest bytes within
    `capacity` bytes (module docstring): exact while at most `max_states` states are
    live at a step, else the bounded DP or the swap planner, whichever moves less.
    `lookback` bounds how far back a swap-in is prefetched (`SwapSettings`);
    `progress` hears of the ops done and the least bytes a state has moved so far.
    CapacityTooSmall when no plan fits."""
    if max_states < 1:
        raise ValueError(f"max_states must be at least 1, got {max_states}")
    start = time.perf_counter()
    model = _Model(dag, signature, capacity, max_states)
    choice = model.solve(progress)
    plans: dict[Method, PlacementPlan] = {}
    if choice is not None:
        cached, host, _ = choice
        scan = _Realized(
            dag,
            Meter(SwapSettings(capacity, lookback=lookback)),
            host=host,
            sticky=False,
            replaced=dict(signature.replaces) if signature is not None else {},
            cached=cached,
            dead=frozenset(model.values[a] for a in model.dead_args),
        )
        plans["bounded" if model.pruned else "exact"] = scan.run().plan()
    baselines: dict[str, int] = {}
    if model.pruned:
        failure = None
        for policy in ("belady", "lru"):
            try:
                plans[policy] = plan_swaps(dag, signature, SwapSettings(capacity, policy))
            except CapacityTooSmall as err:
                failure = failure or err
            else:
                baselines[policy] = transferred_bytes(plans[policy])
        if not plans:
            assert failure is not None
            raise failure
    method = min(plans, key=lambda name: transferred_bytes(plans[name]))
    return DpPlan(
        plans[method],
        method,
        transferred_bytes(plans[method]),
        None if choice is None else choice[2],
        max_states,
        model.peak_states,
        time.perf_counter() - start,
        baselines,
    )


class _Model:
    """The DP of the module docstring over `dag`'s values, numbered: arguments first
    (value `a` is argument `a`), then each op's results in schedule order."""

    def __init__(
        self, dag: Dag, signature: TrainingSignature | None, capacity: int, max_states: int
    ) -> None:
        self.dag, self.capacity, self.max_states = dag, capacity, max_states
        self.pruned = False
        """Whether the DP dropped a state or an eviction set: no longer exact."""
        self.peak_states = 0
        ops = dag.ops
        n = len(ops)
        self.values: list[Value] = [arg.out for arg in dag.args]
        self.values += [v for node in ops for v in node.results]
        index = {v: i for i, v in enumerate(self.values)}
        self.size = [tensor_bytes(v.sig) for v in self.values]
        where = positions(ops)
        readers = readers_in_order(dag)
        self.reads = [[where[node] for node in readers.get(v, ())] for v in self.values]
        self.born = born = [-1] * len(dag.args)
        born += [where[v.node] for v in self.values[len(dag.args) :]]

        replacing = dict(signature.replaces) if signature is not None else {}
        self.new_value_of = {index[dag.outputs[r]]: a for r, a in replacing.items()}
        """A persistent argument's new value -> the argument (its space follows it)."""
        pinned = {index[v] for r, v in enumerate(dag.outputs) if r not in replacing}
        """Values returned in device memory whatever the start: never evicted."""
        self.fixed = _mask(pinned) | _mask(self.new_value_of)
        """Values `_make_room` does not evict: those returned in device memory, and new
        values of persistent arguments unless they have a host copy (their argument
        came from the host, so they go back there)."""
        returned = {index[v] for v in dag.outputs}
        persistent = (*signature.params, *signature.state) if signature is not None else ()
        self.hostable = {a for a in persistent if a not in returned}
        self.dead_args = [a for a in range(len(dag.args)) if not self.reads[a] and a not in pinned]

        def last_touch(v: int) -> int:
            return self.reads[v][-1] if self.reads[v] else born[v]

        self.ins = [[index[v] for v in dict.fromkeys(node.inputs)] for node in ops]
        self.in_mask = [_mask(ins) for ins in self.ins]
        self.out_mask = [_mask([index[v] for v in node.results]) for node in ops]
        self.out_bytes = [sum(tensor_bytes(v.sig) for v in node.results) for node in ops]
        self.made = [
            [
                (index[v], self.new_value_of[index[v]])
                for v in node.results
                if index[v] in self.new_value_of
            ]
            for node in ops
        ]
        """Per op, the new values of persistent arguments it makes, with the arguments."""
        self.renewed = _mask(self.new_value_of.values())
        """The arguments with a new value."""
        self.unmovable = [0] * (n + 1)
        """Per op, the bytes no eviction frees while it runs, whatever arrived where: its
        inputs and results, and the values returned in device memory made before it."""
        for v in pinned:
            self.unmovable[born[v] + 1] += self.size[v]
        for i in range(n):
            self.unmovable[i + 1] += self.unmovable[i]
            working = sum(self.size[v] for v in self.ins[i] if v not in pinned)
            self.unmovable[i] += working + self.out_bytes[i]
        self._dooms: dict[int, Failure | None] = {}
        self.dies: list[list[int]] = [[] for _ in ops]
        """Values whose last reader (or maker, when none reads them) is each op."""
        for v in range(len(self.values)):
            if v not in pinned and last_touch(v) >= 0:  # not an argument nobody reads
                self.dies[last_touch(v)].append(v)

    def next_read(self, v: int, i: int) -> int:
        """The first op at or after `i` that reads value `v`; the op count when none does."""
        reads = self.reads[v]
        at = bisect.bisect_left(reads, i)
        return reads[at] if at < len(reads) else len(self.dag.ops)

    # ------------------------------------------------------------------ the DP

    def solve(
        self, progress: Progress | None = None
    ) -> tuple[list[frozenset[Value]], frozenset[int], int] | None:
        """The cheapest final state's path: the values the DP keeps cached while each op
        runs, the arguments that start on the host, and its cost. None when the bounded
        DP kept no state that fits; CapacityTooSmall when the exact DP finds none.
        `progress` hears of each op done and the cheapest state's cost (bytes moved)."""
        arrived, failure = self._arrivals()
        layers = [arrived]
        states: dict[State, _Entry] = {}
        dead = _mask(self.dead_args)
        for key, entry in arrived.items():
            cached, flagged, hosted = key
            gone = sum(self.size[a] for a in self.dead_args if cached >> a & 1)
            kept = _Entry(entry.cost, entry.held - gone, key)
            _put(states, (cached & ~dead, flagged, hosted), kept)
        layers.append(states)
        for i in range(len(self.dag.ops)):
            if not states:
                break
            states, failure = self._run(states, i)
            layers.append(states)
            if progress is not None and states:
                progress(i + 1, min(entry.cost for entry in states.values()))
        if not states:
            if self.pruned:
                return None
            assert failure is not None
            needed, at = failure
            raise CapacityTooSmall.in_bytes(self.dag.ops[at], at, needed, self.capacity)
        return self._path(layers)

    def _arrivals(self) -> tuple[dict[State, _Entry], Failure | None]:
        """Where each argument arrives: device, or host for a persistent one (a swap-in
        for its first reader). Every device argument is held at the start, so they must
        fit together, and so must the new values of those persistent ones, returned in
        device memory (`_doom`). Also the least any arrival over the capacity needed."""
        states = {(0, 0, 0): _Entry(0, 0, None)}
        failure = None
        pending = set(self.new_value_of.values())
        for a, size in enumerate(self.size[: len(self.dag.args)]):
            bit = 1 << a
            arrived: dict[State, _Entry] = {}
            for (cached, flagged, hosted), entry in states.items():
                doom = self._doom((cached | bit) & self.renewed) if bit & self.renewed else None
                if doom is None and entry.held + size > self.capacity:
                    doom = (entry.held + size, 0)
                if doom is None:
                    on_device = _Entry(entry.cost, entry.held + size, None)
                    _put(arrived, (cached | bit, flagged, hosted), on_device)
                else:
                    failure = min(failure or doom, doom)
                if a in self.hostable:
                    on_host = _Entry(entry.cost + (size if self.reads[a] else 0), entry.held, None)
                    _put(arrived, (cached, flagged, hosted | (bit if a in pending else 0)), on_host)
            states = self._bounded(arrived)
        return states, failure

    def _doom(self, device: int) -> Failure | None:
        """Whether the persistent arguments `device` (a bit set), arriving in device
        memory, leave some op no room: their new values are returned there, so from
        when each is made no eviction frees it. The first op over the capacity with
        them (the bytes it needs, the op), else None; a tensor an op needs whatever is
        evicted only makes it over the capacity once (`unmovable`)."""
        if device not in self._dooms:
            made = sorted(
                (self.born[v], v) for v, a in self.new_value_of.items() if device >> a & 1
            )
            doom, held, k = None, 0, 0
            for i in range(made[0][0] + 1 if made else len(self.dag.ops), len(self.dag.ops)):
                while k < len(made) and made[k][0] < i:
                    held += self.size[made[k][1]]
                    k += 1
                read = sum(self.size[v] for born, v in made[:k] if v in self.ins[i])
                if self.unmovable[i] + held - read > self.capacity:
                    doom = (self.unmovable[i] + held - read, i)
                    break
            self._dooms[device] = doom
        return self._dooms[device]

    def _run(
        self, states: dict[State, _Entry], i: int
    ) -> tuple[dict[State, _Entry], Failure | None]:
        """Op `i` from each state: room made where it does not fit (one successor per
        eviction set), its missing inputs swapped in, its results made, what it read
        last dropped, a persistent argument's new value placed (returned in device
        memory, or swapped out when made for one that started on the host). The states
        after it, and the least bytes a state that cannot make room needs."""
        ins, in_mask, out_mask = self.ins[i], self.in_mask[i], self.out_mask[i]
        after: dict[State, _Entry] = {}
        failure = None
        share = max(1, SUCCESSORS * self.max_states // len(states))
        for key, entry in states.items():
            missing = in_mask & ~key[0]
            need = entry.held + self.out_bytes[i]
            need += sum(self.size[v] for v in ins if missing >> v & 1)
            for cached, flagged, cost, held in self._make_room(key, entry, i, need, share):
                if held > self.capacity:
                    failure = min(failure or (held, i), (held, i))
                    continue
                cached |= in_mask | out_mask
                flagged |= missing
                hosted = key[2]
                for v, a in self.made[i]:
                    if hosted >> a & 1:
                        cost += self.size[v]  # its argument came from the host: it goes back
                        flagged |= 1 << v
                        hosted &= ~(1 << a)
                for v in self.dies[i]:
                    # A new value with no host copy is returned in device memory: it stays.
                    if v not in self.new_value_of or flagged >> v & 1:
                        cached &= ~(1 << v)
                        flagged &= ~(1 << v)
                        held -= self.size[v]
                _put(after, (cached, flagged, hosted), _Entry(cost, held, key))
        return self._bounded(after), failure

    def _make_room(
        self, key: State, entry: _Entry, i: int, need: int, share: int
    ) -> Iterator[tuple[int, int, int, int]]:
        """The ways state `key` runs op `i`, which holds `need` bytes with nothing
        evicted: (cached, with a host copy, cost, bytes held while op `i` runs)
        after each minimal eviction set of cached tensors the op does not read (module
        docstring); `need` alone when it fits or nothing can be evicted. The bounded
        DP tries `share` sets among the first tensors in Belady's order."""
        cached, flagged, _ = key
        excess = need - self.capacity
        if excess <= 0:
            yield cached, flagged, entry.cost, need
            return
        free = cached & ~self.in_mask[i] & (~self.fixed | flagged)
        candidates = sorted(
            set_bits(free), key=lambda v: (self.next_read(v, i), self.size[v]), reverse=True
        )
        movable = sum(self.size[v] for v in candidates)
        if movable < excess:  # over the capacity whatever is evicted: the caller counts it
            yield cached, flagged, entry.cost, need - movable
            return
        sets = None
        if not self.pruned:
            sets = list(islice(_minimal_sets(candidates, self.size, excess), self.max_states + 1))
            if len(sets) > self.max_states:
                self.pruned, sets = True, None
        if sets is None:
            covered, reach = 0, 0
            while covered < excess:
                covered += self.size[candidates[reach]]
                reach += 1
            first = candidates[: max(reach, share)]
            sets = list(islice(_minimal_sets(first, self.size, excess), share))
        for chosen in sets:
            cost, held = entry.cost, need
            for v in chosen:
                cost += self.size[v] if flagged >> v & 1 else 2 * self.size[v]
                held -= self.size[v]
            evicted = _mask(chosen)
            yield cached & ~evicted, flagged & ~evicted, cost, held

    def _bounded(self, states: dict[State, _Entry]) -> dict[State, _Entry]:
        """`states` when within `max_states`, else the most promising of them: the
        cheapest so far, then those holding the least (room for what comes)."""
        self.peak_states = max(self.peak_states, min(len(states), self.max_states))
        if len(states) <= self.max_states:
            return states
        self.pruned = True
        ranked = heapq.nsmallest(
            self.max_states, states.items(), key=lambda item: (item[1].cost, item[1].held, item[0])
        )
        return dict(ranked)

    def _path(
        self, layers: list[dict[State, _Entry]]
    ) -> tuple[list[frozenset[Value]], frozenset[int], int]:
        """The cheapest final state's way back (see `solve`): `layers` are the states
        where the arguments arrived, then before each op and after the last."""
        key: State | None = min(layers[-1], key=lambda k: (layers[-1][k].cost, k))
        cost = layers[-1][key].cost
        steps: list[State] = []
        for layer in reversed(layers[1:]):
            steps.append(key)
            key = layer[key].parent
        assert key is not None  # where the arguments arrived
        host = frozenset(a for a in range(len(self.dag.args)) if not key[0] >> a & 1)
        # What op i kept cached (besides its inputs) is what is cached after it.
        kept = [frozenset(self.values[v] for v in set_bits(step[0])) for step in steps[-2::-1]]
        return kept, host, cost


def _minimal_sets(
    candidates: Sequence[int], size: Sequence[int], excess: int
) -> Iterator[tuple[int, ...]]:
    """Every set of `candidates` of at least `excess` bytes that loses that with any
    member gone. Members are taken largest first, so a set is minimal exactly when its
    last (smallest) member is what reaches `excess`."""
    order = sorted(candidates, key=lambda v: size[v], reverse=True)
    rest = [0] * (len(order) + 1)
    for j in range(len(order) - 1, -1, -1):
        rest[j] = rest[j + 1] + size[order[j]]

    def grow(start: int, total: int, chosen: tuple[int, ...]) -> Iterator[tuple[int, ...]]:
        for j in range(start, len(order)):
            if total + rest[j] < excess:
                return
            reached = total + size[order[j]]
            if reached >= excess:
                yield (*chosen, order[j])
            else:
                yield from grow(j + 1, reached, (*chosen, order[j]))

    return grow(0, 0, ())


@dataclass
class _Realized(SwapScan):
    """The swap planner's scan with the DP's choice of victims (module docstring)."""

    cached: Sequence[frozenset[Value]] = ()
    """The values the DP keeps in device memory while each op runs (its inputs aside)."""
    dead: frozenset[Value] = frozenset()
    """Device arguments nobody reads, which the DP releases at no cost."""

    def __post_init__(self) -> None:
        super().__post_init__()
        self.on_host |= self.dead  # nothing reads them again: released without a copy

    def victim(self, i: int, inputs: set[Value], key: int) -> Value | None:
        """A value the DP does not keep across op `i` (the one read again last): one
        exists whenever op `i` does not fit, since it fits what the DP keeps."""
        candidates = [v for v in self.members[key] if v not in inputs and v not in self.cached[i]]
        return max(candidates, key=lambda v: self.next_use(v, i)) if candidates else None


def _put(states: dict[State, _Entry], key: State, entry: _Entry) -> None:
    """Memoization: keep the cheaper of two ways to one state."""
    known = states.get(key)
    if known is None or entry.cost < known.cost:
        states[key] = entry


def _mask(values: Iterable[int]) -> int:
    mask = 0
    for v in values:
        mask |= 1 << v
    return mask


def set_bits(mask: int) -> list[int]:
    """The members of a set held as the bits of `mask`, lowest first."""
    found = []
    while mask:
        low = mask & -mask
        found.append(low.bit_length() - 1)
        mask ^= low
    return found


def dp_search(
    problem: PlacementProblem, limits: SearchLimits, max_states: int = DEFAULT_MAX_STATES
) -> SearchOutcome[PlacementPlan]:
    """`placement{search=dp-fixed-order}`: the DP's plan as a search outcome. The DP's cost is
    bytes moved; the outcome's costs are simulated seconds (the belady plan's before,
    the DP's after), as every placement search reports them. The stop reason says
    whether the exact DP ran to its end or the bound cut it."""
    found = plan_dp(
        problem.dag,
        problem.signature,
        problem.capacity,
        max_states=max_states,
        progress=limits.progress,
    )
    belady = plan_swaps(problem.dag, problem.signature, SwapSettings(problem.capacity, "belady"))
    return SearchOutcome(
        best=found.plan,
        cost_before=problem.simulate(belady).seconds,
        cost_after=problem.simulate(found.plan).seconds,
        seconds=found.seconds,
        stopped=StopReason.EXHAUSTED if found.method == "exact" else StopReason.BUDGET,
        details={
            "method": found.method,
            "transferred_bytes": found.transferred_bytes,
            "dp_bytes": found.dp_bytes,
            "max_states": found.max_states,
            "peak_states": found.peak_states,
            "compared_bytes": dict(found.baselines),
            "dp_note": found.note,
        },
    )
