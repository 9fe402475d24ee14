"""SwapAdvisor's swap planner (Huang thesis §4.3.2) and the on-demand LRU baseline.

Given a schedule (the dag's op order) and a device capacity, the planner scans the ops
in order, keeping the set of device copies the replay would hold (`memory.replay`'s
rule: a copy from where it is made to its last reader). When an op's missing inputs
and its results do not fit, it evicts resident tensors the op does not read.

What "fit" means is the memory's: without a pool, bytes against the capacity; with a
memory pool (`SwapSettings.pool`, SwapAdvisor §4.3.1), objects of its size classes —
every tensor takes one object of the smallest class that holds it, as `memory.replay`
counts a module's `memory.pool` — so the planner runs out of room when the tensor's
class has no free object, and evicts a resident tensor *of that class* (§4.3.2: "the
planner chooses the tensor from the same size-class"). Both are one rule over
`Meter`'s classes: bytes are one class whose objects are bytes.

- `belady` picks the one (of the class short of room) whose next use is furthest
  ahead (Belady's rule, optimal for a cache, and it leaves the most time to bring the
  tensor back), among those last used at least `threshold` ops ago when there are
  any — SwapAdvisor's remedy for an eviction that cannot start until a just-used
  tensor is done; `lru` picks the least recently used (SwapAdvisor's ODSwap baseline).
- An evicted tensor without a host copy is swapped out right after the op that made
  it (as early as safe: the copy then overlaps the ops in between), and released
  after its last reader before the op that needs the room.
- A missing input is swapped in as early as memory allows (`prefetch`): the planner
  looks back up to `lookback` ops for the earliest point from which the replay's held
  bytes (objects of its class) plus the tensor stay within the capacity (the class's
  count), and never before the tensor's previous device copy is released: evicted,
  or dead after what was its last reader until an op run again read it later (an
  argument's copy is released there explicitly, so a swap-in placed before would be
  released with it and the op run again would find no device copy). A tensor may
  have its own `lookback` (`SwapSettings.lookbacks`). Without prefetching (LRU),
  right before the op.

Recomputation (beyond SwapAdvisor; Checkmate's choice of keep, swap or recompute per
saved activation): a value of `SwapSettings.recompute` (the caller picks them:
results of ops without side effects) that must leave the device and has no host copy
is released without a swap-out when every input of its op can be had where the value
is next read — on the device or the host then, or itself recomputed there from such
inputs, up to `SwapSettings.recompute_depth` ops deep — and that read becomes a use of
each of those inputs, so none dies before it. Where the value is next read, its op
runs again (`Recompute`, making all its results), after the ops its inputs need run
again and after the swap-ins of those not resident.

Buffer reuse (`SwapSettings.in_place`): an element-wise op's result written over an
operand of its type whose device copy dies at the op (XLA's buffer assignment; JAX's
donated buffers) takes no bytes beside it — the SGD update `w - lr*g` writes over its
scaled gradient, a gradient's sum over time steps over the sum so far. The scan counts
it for the ops of the schedule; an op run again that could reuse is counted without it
(the written plan then holds less than counted, never more).

Params and optimizer state persist across iterations, so the plan must leave them
where it found them. The double pass (§4.3.2): the first pass starts with every
param and state tensor on the host and keeps each new value on the device until it
is evicted; those still resident at the end are the *initial residents*. The second
pass starts with them on the device (their new values returned there, never
evicted) and the rest on the host (their new values swapped out when made); where
that pass runs out of memory, the largest initial resident (of the pool class that ran
out) goes back to the host and the pass runs again.

Every plan the planner returns verifies within the capacity and its pool (the replay
is what the verifier checks; a plan carries its pool, so the written module has
`memory.pool`). The simulator (`tasoc.sim.placement`) prices it.
"""

from __future__ import annotations

import bisect
import heapq
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.limits import bytes_and_size
from tasoc.ir.memory import Pool, tensor_bytes
from tasoc.ir.placement_plan import (
    PlacementPlan,
    Recompute,
    Release,
    Slots,
    SwapIn,
    SwapOut,
    output_spaces,
    positions,
    readers_in_order,
    reusable_operands,
)
from tasoc.ir.training import TrainingSignature
from tasoc.passes.search import Deadline
from tasoc.sim.core import paused_gc

Policy = Literal["belady", "lru"]

RECOMPUTE_DEPTH = 4
"""The most ops run again, one reading another, to bring one value back, unless
`SwapSettings.recompute_depth` says otherwise: a chain such as convolution, batchnorm,
relu."""

RECOMPUTE_SHARE = 0.5
"""The most of the capacity a chain run again may take at once (what it rebuilds, and
what it reads that is not resident when it is released): more, and the op it is
rebuilt for may find no room beside it."""


class CapacityTooSmall(ValueError):
    """No eviction makes an op fit: the op and what it needs at once (one line)."""

    def __init__(self, op: Node, position: int, needs: str, size_class: int | None = 0) -> None:
        super().__init__(f"op {position} ({op.op}) needs {needs}")
        self.size_class = size_class
        """The class that ran out (`Meter`: 0 for bytes), None when no class could
        hold the tensor."""

    @classmethod
    def in_bytes(cls, op: Node, position: int, needed: int, capacity: int) -> CapacityTooSmall:
        """More bytes than the capacity, whatever is moved."""
        return cls(
            op,
            position,
            f"{bytes_and_size(needed)} of device memory at once (its inputs and results, "
            f"with what cannot be moved), over the capacity of {bytes_and_size(capacity)}",
        )


class OutOfTime(Exception):
    """A scan given a deadline passed it: the caller keeps the plans it has (the pass's
    `timeout` bounds the whole pass, `planning.plan_within`)."""


CHECK_EVERY = 128
"""Ops a scan runs between looks at its deadline: a look costs a clock read, and 128
ops of a 10k-op step take about a millisecond."""


class NoCopyLeft(ValueError):
    """A value to recompute from has neither a device nor a host copy: a chain of
    recomputations the scan's bookkeeping did not keep alive (a guard: the recomputing
    planner then drops that set of candidates, `recompute.plan_recomputing`)."""


@dataclass(frozen=True)
class SwapSettings:
    """How the planner evicts and prefetches (module docstring)."""

    capacity: int
    policy: Policy = "belady"
    prefetch: bool = True
    threshold: int = 2
    lookback: int = 64
    pool: Pool | None = None
    """Count device memory in this pool's objects (module docstring), not in bytes; its
    total is within `capacity` (the caller's to check)."""
    recompute: frozenset[Value] = frozenset()
    """Values recomputed rather than swapped where they can be (module docstring)."""
    recompute_depth: int = RECOMPUTE_DEPTH
    """The most ops run again, one reading another, to bring one value back."""
    lookbacks: Mapping[Value, int] = field(default_factory=dict)
    """A tensor's own `lookback`, where its swap-ins should start earlier than others'
    (`prefetch.py` sets them from the simulated timeline)."""
    headroom: float = 0.0
    """The part of the capacity evictions keep free for prefetches (bytes, not a pool's
    objects): an op that does not fit within the capacity less it evicts until it does
    (where anything but its inputs can go), and swap-ins may still take the whole
    capacity, so they start earlier instead of waiting for room an eviction on demand
    makes only at their reader."""
    in_place: bool = False
    """An element-wise op writes its result over an operand whose copy dies at it, as
    XLA's buffer assignment does (`PlacementPlan.in_place`): the scan counts no new
    bytes for that result, and its plans say so, for the simulator, the writer (the
    `memory.in_place` mark) and the runtime (a donated buffer)."""


@paused_gc()  # a scan allocates some 10^5 entries, ranks and dicts, none in a cycle
def plan_swaps(
    dag: Dag,
    signature: TrainingSignature | None,
    settings: SwapSettings,
    deadline: Deadline | None = None,
) -> PlacementPlan:
    """The swap plan of `dag` (ops in schedule order) within `settings.capacity`, by the
    double pass (module docstring); CapacityTooSmall when no plan fits, OutOfTime when
    `deadline` passes during a scan."""
    persistent = (
        frozenset((*signature.params, *signature.state)) if signature is not None else frozenset()
    )
    replaced = dict(signature.replaces) if signature is not None else {}
    meter = Meter(settings)
    first = SwapScan(dag, meter, persistent, True, replaced, deadline).run()
    at_end = first.resident_at_end()
    residents = sorted(
        (i for i in persistent if i in at_end),
        key=lambda i: tensor_bytes(dag.args[i].out.sig),
    )
    while True:
        host = persistent - frozenset(residents)
        try:
            return SwapScan(dag, meter, host, False, replaced, deadline).run().plan()
        except CapacityTooSmall as err:
            # the largest initial resident of the class that ran out goes back to the host
            short = [
                i for i, r in enumerate(residents) if meter.key(dag.args[r].out) == err.size_class
            ]
            if not short:
                raise
            residents.pop(short[-1])


class Meter:
    """Device memory as the planner counts it (module docstring): each value takes
    `units` of one class `key`, each class holds at most `limits[key]` units. Without a
    pool: one class, bytes, the capacity. With one: a class per pool size class, one
    object per tensor, its object count."""

    def __init__(self, settings: SwapSettings) -> None:
        self.settings = settings
        self.pool = settings.pool
        self.limits = (settings.capacity,) if self.pool is None else self.pool.counts
        self._costs: dict[Value, tuple[int, int] | None] = {}

    def cost(self, value: Value) -> tuple[int, int] | None:
        """(class, units) of `value`; None when no pool class holds it."""
        if value not in self._costs:
            nbytes = tensor_bytes(value.sig)
            key = 0 if self.pool is None else self.pool.size_class(nbytes)
            units = nbytes if self.pool is None else 1
            self._costs[value] = None if key is None else (key, units)
        return self._costs[value]

    def key(self, value: Value) -> int | None:
        """The class of `value`, None when no pool class holds it."""
        cost = self.cost(value)
        return None if cost is None else cost[0]

    def too_small(self, op: Node, position: int, key: int, needed: int) -> CapacityTooSmall:
        """Op `position` needs `needed` units of class `key` at once, over its limit."""
        if self.pool is None:
            return CapacityTooSmall.in_bytes(op, position, needed, self.limits[0])
        return CapacityTooSmall(
            op,
            position,
            f"{needed} objects of the memory pool's {self.pool.sizes[key]}-byte size class at "
            f"once (its inputs and results, with what cannot be moved), over its "
            f"{self.limits[key]} objects",
            key,
        )


@dataclass
class SwapScan:
    """One scan of the schedule (module docstring): `host` are the arguments that
    start on the host; with `sticky`, new values of persistent tensors stay on the
    device until evicted (the first pass), else they leave where their argument came.

    Other planners reuse the scan (the moves, prefetches and pools it writes) with
    their own choice of what to evict: a subclass overrides `victim` (ROC's DP does,
    `dp.py`)."""

    dag: Dag
    meter: Meter
    host: frozenset[int]
    sticky: bool
    replaced: dict[int, int]
    """Result index -> the argument it replaces."""
    deadline: Deadline | None = None
    """When the scan gives up (`OutOfTime`), looked at every `CHECK_EVERY` ops."""
    slots: Slots = field(default_factory=Slots)
    resident: dict[Value, tuple[int, int]] = field(default_factory=dict)
    """Device copies held now, each with its class and units (`Meter`)."""
    made_at: dict[Value, tuple[int, bool]] = field(default_factory=dict)
    """Where the current device copy was made: (op position, made by a swap-in before it)."""
    on_host: set[Value] = field(default_factory=set)
    last_read: dict[Value, int] = field(default_factory=dict)
    """The last op that read the current device copy."""
    gone_since: dict[Value, int] = field(default_factory=dict)
    """The first op position after each tensor's device copy was released (evicted or
    dead), where a swap-in bringing it back may start at the earliest."""
    dropped: set[Value] = field(default_factory=set)
    """Evicted values released without a host copy, recomputed where next read."""

    def __post_init__(self) -> None:
        order = self.dag.ops
        self.where = positions(order)
        readers = readers_in_order(self.dag)
        self.uses = {v: [self.where[n] for n in nodes] for v, nodes in readers.items()}
        self.last_use = {v: uses[-1] for v, uses in self.uses.items()}
        self.cursor: dict[Value, int] = {}
        """Per value, the index in `uses` of its next use (`next_use`)."""
        self.settings = self.meter.settings
        pooled = self.meter.pool is not None
        free = 0 if pooled else int(self.settings.headroom * self.settings.capacity)
        self.target = [limit - free for limit in self.meter.limits]
        """Per class, what evictions keep the held units within (`SwapSettings.headroom`)."""
        classes = range(len(self.meter.limits))
        self.held = [0 for _ in classes]
        """Units held now, per class: `resident` summed."""
        self.members: list[dict[Value, None]] = [{} for _ in classes]
        """The resident values of each class, in the order they became resident."""
        self.ranked: list[list[tuple[tuple[int, int, int], int, Value]]] = [[] for _ in classes]
        """Per class, a heap of the resident values by eviction rank (`victim`)."""
        self._pushes = itertools.count()
        self.joined: dict[Value, int] = {}
        """When each resident value became resident (ties of `_rank`)."""
        self.held_at = [np.zeros(len(self.dag.ops), dtype=np.int64) for _ in classes]
        """Per class, the replay's held units while each op so far runs (kept right
        within `lookback`): arrays, so a prefetch's search back and an eviction's
        correction are a vector operation each, not a loop over up to a window of ops."""
        spaces = output_spaces(self.dag, self.host)
        self.leaves_on_host = {
            v for v, space in zip(self.dag.outputs, spaces, strict=True) if space == "host"
        }
        self.pinned = {
            v for v, space in zip(self.dag.outputs, spaces, strict=True) if space == "device"
        }
        self.persistent_new = {
            self.dag.outputs[result]: argument for result, argument in self.replaced.items()
        }
        if self.sticky:
            self.pinned -= set(self.persistent_new)
        for index, arg in enumerate(self.dag.args):
            if index in self.host:
                self.on_host.add(arg.out)
            else:
                self._hold(arg.out, 0)
                self.made_at[arg.out] = (-1, False)
                self._rank_again(arg.out, 0)

    def _cost(self, value: Value, position: int) -> tuple[int, int]:
        """`value`'s class and units; CapacityTooSmall, at the op making or first reading
        it, when no pool class holds it."""
        cost = self.meter.cost(value)
        if cost is None:
            assert self.meter.pool is not None
            at = position if not value.node.is_arg else self.next_use(value, 0)
            at = min(at, len(self.dag.ops) - 1)
            raise CapacityTooSmall(
                self.dag.ops[at],
                at,
                f"a tensor of {bytes_and_size(tensor_bytes(value.sig))}, larger than the "
                f"memory pool's largest size class ({bytes_and_size(self.meter.pool.sizes[-1])})",
                None,
            )
        return cost

    def _hold(self, value: Value, position: int) -> None:
        key, units = self.resident[value] = self._cost(value, position)
        self.held[key] += units
        self.members[key][value] = None
        self.joined[value] = next(self._pushes)

    def _unhold(self, value: Value) -> int:
        """Drop `value`'s device copy from the count; its units."""
        key, units = self.resident.pop(value)
        self.held[key] -= units
        del self.members[key][value]
        return units

    # ------------------------------------------------------------------ the scan

    def run(self) -> SwapScan:
        limits = self.meter.limits
        for key, held in enumerate(self.held):
            if held > limits[key]:
                raise self.meter.too_small(self.dag.ops[0], 0, key, held)
        for i, node in enumerate(self.dag.ops):
            if self.deadline is not None and i % CHECK_EVERY == 0 and self.deadline.expired():
                raise OutOfTime(f"the scan stopped at op {i} of {len(self.dag.ops)}")
            inputs = set(node.inputs)
            missing = [v for v in dict.fromkeys(node.inputs) if v not in self.resident]
            fetched, rerun = self._gather(missing)
            for value in rerun:  # what the ops run again read stays, or comes back
                inputs.update((value, *value.node.inputs))
            need: dict[int, int] = {}
            made: dict[int, int] = {}
            again = [r for v in rerun for r in v.node.results if r not in self.resident]
            for value in [*fetched, *again]:
                key, units = self._cost(value, i)
                need[key] = need.get(key, 0) + units
            for value in node.results:
                key, units = self._cost(value, i)
                need[key] = need.get(key, 0) + units
                made[key] = made.get(key, 0) + units
            reused = self._reused(node, i) if self.settings.in_place else None
            if reused is not None:  # the result takes its buffer: no new room for it
                key, units = self._cost(reused, i)
                need[key] -= units
                made[key] -= units
            for key, units in need.items():
                while self.held[key] + units > self.target[key]:
                    victim = self.victim(i, inputs, key)
                    if victim is None:
                        if self.held[key] + units <= limits[key]:
                            break  # within the capacity: the headroom is given up here
                        raise self.meter.too_small(node, i, key, self.held[key] + units)
                    self._evict(victim, i)
            for value in fetched:
                self._swap_in(value, i)
            for value in rerun:
                for key, units in self._recompute(value, i).items():
                    made[key] = made.get(key, 0) + units
            for key, at in enumerate(self.held_at):
                at[i] = self.held[key] + made.get(key, 0)
            for value in node.inputs:
                self.last_read[value] = i
            for value in dict.fromkeys(node.inputs):
                self._rank_again(value, i + 1)
            for value in node.results:
                self._hold(value, i)
                self.made_at[value] = (i, False)
                self._rank_again(value, i + 1)
                if value in self.leaves_on_host:
                    self.slots.after[i].append(SwapOut(value))
                    self.on_host.add(value)
            rerun_reads = [u for v in rerun for u in (v, *v.node.inputs)]
            self._drop_dead([*node.inputs, *rerun_reads], node.results, i)
        return self

    def _reused(self, node: Node, i: int) -> Value | None:
        """The operand whose device copy op `i`'s result is written over
        (`SwapSettings.in_place`): the first of `reusable_operands` that dies at the op
        (no later reader, not kept to the end) — the copy `in_place_entries` finds in
        the written plan, so the plan's replay holds what the scan counted."""
        for p in reusable_operands(node):
            value = node.inputs[p]
            if value in self.pinned or (self.sticky and value in self.persistent_new):
                continue
            if self.last_use.get(value, -1) <= i:  # no reader after this op
                return value
        return None

    def victim(self, i: int, inputs: set[Value], key: int) -> Value | None:
        """The resident tensor of class `key` to evict for op `i` (module docstring),
        None if none can: the hook a subclass overrides. The best by `_rank` among
        those last used `threshold` ops ago, else among all but the op's inputs: popped
        from the class's heap, entries made stale by a read since pushed again."""
        heap = self.ranked[key]
        popped: list[tuple[tuple[int, int, int], int, Value]] = []
        fallback: Value | None = None
        found: Value | None = None
        while heap:
            rank, order, value = heapq.heappop(heap)
            if self.resident.get(value, (None,))[0] != key:
                continue  # evicted or dead since: the entry is gone with it
            fresh = self._rank(value, i)
            if fresh != rank:
                heapq.heappush(heap, (fresh, next(self._pushes), value))
                continue
            popped.append((rank, order, value))
            if value in inputs:
                continue
            fallback = fallback or value
            if i - self._last(value) >= self.settings.threshold:
                found = value
                break
        for entry in popped:
            heapq.heappush(heap, entry)
        return found or fallback

    def _last(self, value: Value) -> int:
        """The last op that read `value`'s device copy, else the op that made it."""
        return self.last_read.get(value, self.made_at[value][0])

    def _rank(self, value: Value, i: int) -> tuple[int, int, int]:
        """`value`'s place in the eviction order at op `i`, least first: `belady` the
        furthest next use, `lru` the oldest last use, the other breaking ties, then the
        order tensors became resident."""
        last, upcoming = self._last(value), self.next_use(value, i)
        if self.settings.policy == "lru":
            return (last, upcoming, self.joined[value])
        return (-upcoming, last, self.joined[value])

    def _rank_again(self, value: Value, i: int) -> None:
        """Push `value`'s rank at op `i` after what ranks it changed (a read, a new
        copy): a rank only worsens that way, so the stale entry left behind is met
        after the fresh one and dropped."""
        if value in self.resident and value not in self.pinned:
            entry = (self._rank(value, i), next(self._pushes), value)
            heapq.heappush(self.ranked[self.resident[value][0]], entry)

    def next_use(self, value: Value, i: int) -> int:
        """The first op at or after `i` that reads `value` (past the end: none). A scan
        asks with `i` never decreasing, so each value's cursor only moves forward."""
        uses = self.uses.get(value, ())
        at = self.cursor.get(value, 0)
        while at < len(uses) and uses[at] < i:
            at += 1
        self.cursor[value] = at
        return uses[at] if at < len(uses) else len(self.dag.ops) + 1

    def _evict(self, value: Value, i: int) -> None:
        """Send `value`'s device copy away before op `i`: swapped out when made (unless
        its host copy exists), released after its last reader."""
        made, by_swap_in = self.made_at.pop(value)
        if value not in self.on_host and self._may_drop(value, i):
            self.dropped.add(value)
        elif value not in self.on_host:
            self.slots.after[made].append(SwapOut(value))  # made == -1: at the start
            self.on_host.add(value)
        last = self.last_read.get(value, made)
        if by_swap_in and last < made:  # a swap-in nobody read: release right after it
            self.slots.before[made].append(Release(value))
            last = made - 1
        else:
            self.slots.after[last].append(Release(value))
        self.gone_since[value] = last + 1
        key = self.resident[value][0]
        units = self._unhold(value)
        self.held_at[key][max(last + 1, i - self.settings.lookback, 0) : i] -= units
        self.last_read.pop(value, None)

    def _may_drop(self, value: Value, i: int) -> bool:
        """Whether `value`, leaving before op `i`, is released to be recomputed where
        next read (at `n`) rather than swapped out: it is one of `recompute` and its op's
        inputs can all be had at `n` (`_reachable`). If so, `n` becomes a use of each
        input (the op run again reads it there), so none dies before."""
        if value not in self.settings.recompute:
            return False
        back = self.next_use(value, i)
        rebuilt: list[Value] = []
        depth = self.settings.recompute_depth
        if not all(self._reachable(u, back, depth, rebuilt) for u in value.node.inputs):
            return False
        sources = {u for v in (value, *rebuilt) for u in v.node.inputs}
        made = {r for v in (value, *rebuilt) for r in v.node.results}
        held = {*made, *(u for u in sources if u not in self.resident)}
        if sum(tensor_bytes(u.sig) for u in held) > self.settings.capacity * RECOMPUTE_SHARE:
            return False  # the chain would crowd out the op it is rebuilt for
        self.dropped.update(rebuilt)
        for source in {u for v in (value, *rebuilt) for u in v.node.inputs}:
            self._use_at(source, back, i)
        return True

    def _reachable(self, value: Value, at: int, depth: int, rebuilt: list[Value]) -> bool:
        """Whether `value` can be had at op `at`: on the device or the host then (read
        at or after `at`, resident now, or with a host copy), else recomputed there from
        inputs that can be had (at most `depth` ops deep; it joins `rebuilt`). A value
        released to be recomputed counts as a link of the chain, so chains through
        batchnorm's statistics do not grow past `depth` into the whole forward pass."""
        if value in rebuilt:
            return True
        if value not in self.dropped and (
            value in self.resident or value in self.on_host or self.last_use.get(value, -1) >= at
        ):
            return True
        if depth == 0 or value not in self.settings.recompute:
            return False
        rebuilt.append(value)
        return all(self._reachable(u, at, depth - 1, rebuilt) for u in value.node.inputs)

    def _use_at(self, value: Value, at: int, i: int) -> None:
        """Count op `at` as a reader of `value` (an op run again before it reads it),
        the scan being at op `i`."""
        uses = self.uses.setdefault(value, [])
        if at not in uses:
            bisect.insort(uses, at)
        self.last_use[value] = max(self.last_use.get(value, -1), at)
        self._rank_again(value, i)

    def _gather(self, missing: Sequence[Value]) -> tuple[list[Value], list[Value]]:
        """What comes back for an op whose `missing` inputs these are: the values to
        swap in and those to recompute, each recomputed one after what it reads."""
        fetched: list[Value] = []
        rerun: list[Value] = []

        def bring(value: Value) -> None:
            if value in self.resident or value in fetched or value in rerun:
                return
            if any(other in rerun for other in value.node.results):
                return  # made again with a sibling: one run of the op makes every result
            if value not in self.dropped:
                if value not in self.on_host:
                    raise NoCopyLeft(f"{value.node.op} result #{value.index}")
                fetched.append(value)
                return
            for source in value.node.inputs:
                bring(source)
            rerun.append(value)

        for value in missing:
            bring(value)
        return fetched, rerun

    def _recompute(self, value: Value, i: int) -> dict[int, int]:
        """Run `value`'s op again right before op `i`, its inputs resident by now; the
        units, per class, of the results nobody reads again, made and dropped at once.

        The op makes all its results again (batchnorm's output with its statistics): a
        result read again (or recomputed) is held from here, its new copy replacing a
        resident one, which the replay ends at its last reader before; the others
        live only while the op runs (the replay frees a result nobody reads)."""
        self.slots.before[i].append(Recompute(value.node))
        transient: dict[int, int] = {}
        for result in value.node.results:
            wanted = result == value or result in self.dropped
            if not wanted and self.next_use(result, i) > len(self.dag.ops):
                key, units = self._cost(result, i)
                transient[key] = transient.get(key, 0) + units
                continue
            self.dropped.discard(result)
            if result not in self.resident:
                self._hold(result, i)
            self.made_at[result] = (i, True)
            self.last_read[result] = i - 1
            self._rank_again(result, i)
        for source in value.node.inputs:  # read by the run again, right before op i
            self.last_read[source] = i
            self._rank_again(source, i)
        return transient

    def _swap_in(self, value: Value, i: int) -> None:
        """Bring `value` back before op `i`, as early as memory allows (module docstring)."""
        key, units = self._cost(value, i)
        held_at, limit = self.held_at[key], self.meter.limits[key]
        start = i
        if self.settings.prefetch:
            lookback = self.settings.lookbacks.get(value, self.settings.lookback)
            earliest = max(self.gone_since.get(value, 0), i - lookback, 0)
            if earliest < i:  # back to just after the last op with no room for it
                over = np.flatnonzero(held_at[earliest:i] > limit - units)
                start = earliest + int(over[-1]) + 1 if over.size else earliest
        self.slots.before[start].append(SwapIn(value))
        held_at[start:i] += units
        self._hold(value, i)
        self.made_at[value] = (start, True)
        self.last_read[value] = start - 1
        self._rank_again(value, i)

    def _drop_dead(self, read: Sequence[Value], results: Sequence[Value], i: int) -> None:
        """Release what op `i` (and the ops run again before it) `read` for the last
        time: a result implicitly (the replay ends it there), an argument explicitly
        (the caller would hold it); and the op's `results` nobody reads."""
        for value in dict.fromkeys(read):
            if value not in self.resident or value in self.pinned:
                continue
            if self.next_use(value, i + 1) <= len(self.dag.ops):
                continue
            if self.sticky and value in self.persistent_new:
                continue
            if value.node.is_arg:
                self.slots.after[i].append(Release(value))
            # an op run again may read it later (`_may_drop`): its swap-in starts after
            # this release, which would otherwise end the copy it brings (an argument's)
            self.gone_since[value] = i + 1
            self._unhold(value)
            self.made_at.pop(value)
        for value in results:  # made and never read
            if (
                value not in self.uses
                and value not in self.pinned
                and not (self.sticky and value in self.persistent_new)
            ):
                self._unhold(value)
                self.made_at.pop(value)

    # ------------------------------------------------------------------ results

    def resident_at_end(self) -> set[int]:
        """The persistent arguments whose new values are on the device at the end: one
        pass over the new values (asking per argument was quadratic: 2.4M looks a plan
        on nasnet's 1.5k params and statistics)."""
        return {arg for value, arg in self.persistent_new.items() if value in self.resident}

    def plan(self) -> PlacementPlan:
        schedule = self.slots.schedule(self.dag.ops)
        return PlacementPlan(
            schedule, self.host, self.settings.capacity, self.settings.pool, self.settings.in_place
        )


def ideal_plan(dag: Dag) -> PlacementPlan:
    """The schedule with nothing moved: what infinite memory runs."""
    return PlacementPlan(dag.ops)


def working_set(dag: Dag, in_place: bool = False) -> tuple[Node, int]:
    """The op whose inputs and results together are largest, and those bytes: no
    capacity below them can run the step, whatever is moved. With `in_place`, an op
    that may write its result over a dying operand (`reusable_operands`) holds the
    result in that operand's bytes."""

    def needs(node: Node) -> int:
        held = sum(tensor_bytes(v.sig) for v in {*node.inputs, *node.results})
        if in_place and reusable_operands(node):
            held -= tensor_bytes(node.results[0].sig)
        return held

    best = max(dag.ops, key=needs)
    return best, needs(best)


__all__: Sequence[str] = (
    "CapacityTooSmall",
    "OutOfTime",
    "Policy",
    "SwapSettings",
    "ideal_plan",
    "plan_swaps",
    "working_set",
)
