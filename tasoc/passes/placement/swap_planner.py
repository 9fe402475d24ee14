"""SwapAdvisor's swap planner (Huang thesis §4.3.2) and the on-demand LRU baseline.

Given a schedule (the dag's op order) and a device capacity, the planner scans the ops
in order, keeping the set of device copies the replay would hold (`memory.replay`'s
rule: a copy from where it is made to its last reader). When an op's missing inputs
and its results do not fit, it evicts resident tensors the op does not read:

- `belady` picks the one whose next use is furthest ahead (Belady's rule, optimal for
  a cache, and it leaves the most time to bring the tensor back), among those last
  used at least `threshold` ops ago when there are any — SwapAdvisor's remedy for an
  eviction that cannot start until a just-used tensor is done; `lru` picks the least
  recently used (SwapAdvisor's ODSwap baseline).
- An evicted tensor without a host copy is swapped out right after the op that made
  it (as early as safe: the copy then overlaps the ops in between), and released
  after its last reader before the op that needs the room.
- A missing input is swapped in as early as memory allows (`prefetch`): the planner
  looks back up to `lookback` ops for the earliest point from which the replay's held
  bytes plus the tensor stay within the capacity, and never before the tensor's last
  eviction. Without prefetching (LRU), right before the op.

Params and optimizer state persist across iterations, so the plan must leave them
where it found them. The double pass (§4.3.2): the first pass starts with every
param and state tensor on the host and keeps each new value on the device until it
is evicted; those still resident at the end are the *initial residents*. The second
pass starts with them on the device (their new values returned there, never
evicted) and the rest on the host (their new values swapped out when made); where
that pass runs out of memory, the largest initial resident goes back to the host and
the pass runs again.

Every plan the planner returns verifies within the capacity (the replay is what the
verifier checks). The simulator (`tasoc.sim.placement`) prices it.
"""

from __future__ import annotations

import bisect
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import (
    Entry,
    PlacementPlan,
    Release,
    SwapIn,
    SwapOut,
    output_spaces,
    positions,
    readers_in_order,
)
from tasoc.ir.training import TrainingSignature

Policy = Literal["belady", "lru"]


class CapacityTooSmall(ValueError):
    """No eviction makes an op fit: the op and the bytes it needs at once (one line)."""

    def __init__(self, op: Node, position: int, needed: int, capacity: int) -> None:
        super().__init__(
            f"op {position} ({op.op}) needs {needed} bytes of device memory at once (its "
            f"inputs and results, with what cannot be moved), over the capacity of {capacity}"
        )
        self.needed = needed


@dataclass(frozen=True)
class SwapSettings:
    """How the planner evicts and prefetches (module docstring)."""

    capacity: int
    policy: Policy = "belady"
    prefetch: bool = True
    threshold: int = 2
    lookback: int = 64


def plan_swaps(
    dag: Dag, signature: TrainingSignature | None, settings: SwapSettings
) -> PlacementPlan:
    """The swap plan of `dag` (ops in schedule order) within `settings.capacity`, by the
    double pass (module docstring); CapacityTooSmall when no plan fits."""
    persistent = (
        frozenset((*signature.params, *signature.state)) if signature is not None else frozenset()
    )
    replaced = dict(signature.replaces) if signature is not None else {}
    first = _Pass(dag, settings, host=persistent, sticky=True, replaced=replaced).run()
    residents = sorted(
        (i for i in persistent if first.resident_at_end(i)),
        key=lambda i: tensor_bytes(dag.args[i].out.sig),
    )
    while True:
        host = persistent - frozenset(residents)
        try:
            return _Pass(dag, settings, host=host, sticky=False, replaced=replaced).run().plan()
        except CapacityTooSmall:
            if not residents:
                raise
            residents.pop()  # the largest initial resident goes back to the host


@dataclass
class _Pass:
    """One scan of the schedule (module docstring): `host` are the arguments that
    start on the host; with `sticky`, new values of persistent tensors stay on the
    device until evicted (the first pass), else they leave where their argument came."""

    dag: Dag
    settings: SwapSettings
    host: frozenset[int]
    sticky: bool
    replaced: dict[int, int]
    """Result index -> the argument it replaces."""
    before: defaultdict[int, list[Entry]] = field(default_factory=lambda: defaultdict(list))
    after: defaultdict[int, list[Entry]] = field(default_factory=lambda: defaultdict(list))
    resident: dict[Value, int] = field(default_factory=dict)
    """Device copies held now, and bytes."""
    made_at: dict[Value, tuple[int, bool]] = field(default_factory=dict)
    """Where the current device copy was made: (op position, made by a swap-in before it)."""
    on_host: set[Value] = field(default_factory=set)
    last_read: dict[Value, int] = field(default_factory=dict)
    """The last op that read the current device copy."""
    held_at: list[int] = field(default_factory=list)
    """The replay's held bytes while each op so far runs (kept right within `lookback`)."""
    gone_since: dict[Value, int] = field(default_factory=dict)
    """The first op position after each evicted tensor's device copy was released."""

    def __post_init__(self) -> None:
        order = self.dag.ops
        self.where = positions(order)
        readers = readers_in_order(self.dag)
        self.uses = {v: [self.where[n] for n in nodes] for v, nodes in readers.items()}
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
                self.resident[arg.out] = tensor_bytes(arg.out.sig)
                self.made_at[arg.out] = (-1, False)

    # ------------------------------------------------------------------ the scan

    def run(self) -> _Pass:
        capacity = self.settings.capacity
        if sum(self.resident.values()) > capacity:
            raise CapacityTooSmall(self.dag.ops[0], 0, sum(self.resident.values()), capacity)
        for i, node in enumerate(self.dag.ops):
            inputs = set(node.inputs)
            missing = [v for v in dict.fromkeys(node.inputs) if v not in self.resident]
            results = sum(tensor_bytes(v.sig) for v in node.results)
            need = sum(tensor_bytes(v.sig) for v in missing) + results
            held = sum(self.resident.values())
            while held + need > capacity:
                victim = self._victim(i, inputs)
                if victim is None:
                    raise CapacityTooSmall(node, i, held + need, capacity)
                held -= self._evict(victim, i)
            for value in missing:
                self._swap_in(value, i)
            self.held_at.append(sum(self.resident.values()) + results)
            for value in node.inputs:
                self.last_read[value] = i
            for value in node.results:
                self.resident[value] = tensor_bytes(value.sig)
                self.made_at[value] = (i, False)
                if value in self.leaves_on_host:
                    self.after[i].append(SwapOut(value))
                    self.on_host.add(value)
            self._drop_dead(node, i)
        return self

    def _victim(self, i: int, inputs: set[Value]) -> Value | None:
        """The resident tensor to evict for op `i` (module docstring), None if none can."""
        candidates = [v for v in self.resident if v not in inputs and v not in self.pinned]
        if not candidates:
            return None
        last = {v: self.last_read.get(v, self.made_at[v][0]) for v in candidates}
        settled = [v for v in candidates if i - last[v] >= self.settings.threshold]
        pool = settled or candidates
        if self.settings.policy == "lru":
            return min(pool, key=lambda v: (last[v], self._next_use(v, i)))
        return max(pool, key=lambda v: (self._next_use(v, i), -last[v]))

    def _next_use(self, value: Value, i: int) -> int:
        uses = self.uses.get(value, ())
        at = bisect.bisect_left(uses, i)
        return uses[at] if at < len(uses) else len(self.dag.ops) + 1

    def _evict(self, value: Value, i: int) -> int:
        """Send `value`'s device copy away before op `i`: swapped out when made (unless
        its host copy exists), released after its last reader. Returns its bytes."""
        made, by_swap_in = self.made_at.pop(value)
        if value not in self.on_host:
            self.after[made].append(SwapOut(value))  # made == -1: at the start
            self.on_host.add(value)
        last = self.last_read.get(value, made)
        if by_swap_in and last < made:  # a swap-in nobody read: release right after it
            self.before[made].append(Release(value))
            last = made - 1
        else:
            self.after[last].append(Release(value))
        self.gone_since[value] = last + 1
        nbytes = self.resident.pop(value)
        for p in range(max(last + 1, i - self.settings.lookback, 0), i):
            self.held_at[p] -= nbytes
        self.last_read.pop(value, None)
        return nbytes

    def _swap_in(self, value: Value, i: int) -> None:
        """Bring `value` back before op `i`, as early as memory allows (module docstring)."""
        nbytes = tensor_bytes(value.sig)
        start = i
        if self.settings.prefetch:
            earliest = max(self.gone_since.get(value, 0), i - self.settings.lookback, 0)
            while start > earliest and self.held_at[start - 1] + nbytes <= self.settings.capacity:
                start -= 1
        self.before[start].append(SwapIn(value))
        for p in range(start, i):
            self.held_at[p] += nbytes
        self.resident[value] = nbytes
        self.made_at[value] = (start, True)
        self.last_read[value] = start - 1

    def _drop_dead(self, node: Node, i: int) -> None:
        """Release what op `i` read for the last time: a result implicitly (the replay
        ends it there), an argument explicitly (the caller would hold it)."""
        for value in dict.fromkeys(node.inputs):
            if value not in self.resident or value in self.pinned:
                continue
            if self._next_use(value, i + 1) <= len(self.dag.ops):
                continue
            if self.sticky and value in self.persistent_new:
                continue
            if value.node.is_arg:
                self.after[i].append(Release(value))
            self.resident.pop(value)
            self.made_at.pop(value)
        for value in node.results:  # made and never read
            if (
                value not in self.uses
                and value not in self.pinned
                and not (self.sticky and value in self.persistent_new)
            ):
                self.resident.pop(value)
                self.made_at.pop(value)

    # ------------------------------------------------------------------ results

    def resident_at_end(self, argument: int) -> bool:
        """Whether the new value of persistent `argument` is on the device at the end."""
        return any(
            arg == argument and value in self.resident for value, arg in self.persistent_new.items()
        )

    def plan(self) -> PlacementPlan:
        schedule: list[Entry] = [*self.after[-1]]
        for p, node in enumerate(self.dag.ops):
            schedule += [*self.before[p], node, *self.after[p]]
        return PlacementPlan(tuple(schedule), self.host, self.settings.capacity)


def ideal_plan(dag: Dag) -> PlacementPlan:
    """The schedule with nothing moved: what infinite memory runs."""
    return PlacementPlan(dag.ops)


def working_set(dag: Dag) -> tuple[Node, int]:
    """The op whose inputs and results together are largest, and those bytes: no
    capacity below them can run the step, whatever is moved."""
    best = max(
        dag.ops,
        key=lambda node: sum(tensor_bytes(v.sig) for v in {*node.inputs, *node.results}),
    )
    return best, sum(tensor_bytes(v.sig) for v in {*best.inputs, *best.results})


__all__: Sequence[str] = (
    "CapacityTooSmall",
    "Policy",
    "SwapSettings",
    "ideal_plan",
    "plan_swaps",
    "working_set",
)
