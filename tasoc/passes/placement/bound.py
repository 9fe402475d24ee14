"""A lower bound on the simulated step time of any plan within a capacity.

The planners' fractions of ideal say how good a plan is against infinite memory; they
do not say how good a plan *could* be under the capacity. `lower_bound` does, for
every plan the placement pass can write — any topological schedule of the step's ops,
any swaps, any recomputation of the values `recompute.recomputable` admits — priced
on the placed-step simulator (`tasoc.sim.placement`) with the machine's host link.
It is the largest of four times, each a floor of every such plan's makespan:

1. **Compute.** The compute stream runs every op of the step at least once, one at a
   time (an op run again only adds): the ops' own time, the ideal step's.
2. **Persistent tensors.** Every argument in device memory is held at the step's
   start, so at most the capacity of them is; a param or state tensor that starts on
   the host is read on the device (a swap-in of its bytes) and its new value leaves
   for the host (a swap-out), an input that starts there is swapped in. The fewest
   bytes that then cross the link (a fractional knapsack: keep on the device what
   costs most per byte to leave), over its bandwidth.
3. **Cuts.** Whatever the schedule, while op `o` runs every value made by an
   ancestor of `o` (or an argument) and read by `o` or a descendant of `o` (or
   returned) is alive: its device copy is held, or it is off the device and comes
   back later. The replay holds at most the capacity while `o` runs, `o`'s inputs and
   results among it, so at least `excess(o)` bytes of those values are off the
   device. Each costs, at the least, a crossing of its bytes (an argument swapped in
   again, a returned value swapped out), two (any other value: out, then in), or,
   for a value the pass may recompute, its op run again on the compute stream. The
   cheapest mix of link time and extra compute (fractional, solved exactly) is a
   floor; the bound takes the largest over the `CUTS_PRICED` cuts with the most
   bytes off (every op's excess is summed at once, `_Cuts.excesses`). The largest
   `excess + capacity` is also a floor of any schedule's peak (`least_peak_bytes`).
4. **A chain of cuts.** Cuts on one path (the longest) run in its order in every
   schedule. A value off the device at cut `a` that an op between `a` and the next
   cut `b` reads in every schedule (a descendant of `a`, an ancestor of `b` or `b`)
   comes back inside that window, by a swap-in or a recomputation distinct from any
   other window's. So each cut of the chain needs its excess, less the bytes of its
   values no op in the window reads, swapped in anew (or recomputed); a DP over
   (cut, next cut) pairs picks the chain that needs the most, and the swap-ins take
   their bytes over the one-way bandwidth (one swap-in stream), less what
   recomputation brings back in the added compute.

With `in_place` (an element-wise op's result written over an operand dying at it),
an op that may do so counts its result in that operand's bytes in its own cut.

Link time is bytes over the link's shared (duplex) bandwidth where its directions
share one, else over twice its one-way bandwidth: every copy holds the shared link
for its bytes over the duplex rate in the simulator (and its direction's stream at
the one-way rate), and latencies only add. The relaxations (fractional choices, a
recomputation costed without what it reads, cuts one at a time or on one path)
make it a floor, not a plan: a row whose best plan sits above it may still be at the
optimum. Assumptions (docs/placement.md): plans verify within the capacity by the
replay's count (`memory.replay`, which the verifier checks); ops read device copies
only; recomputation only re-runs the forward ops `recomputable` admits.

Cost: ancestor and descendant bit sets for every op (O(ops^2 / 64) words), a bit set
of cuts per value, and a few vector operations per priced cut and per chain pair:
half a second of CPU on an 11.9k-op step.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tasoc.ir.dag import Node, Value
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import reusable_operands
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.recompute import recomputable

CUTS_PRICED = 32
"""The cuts (module docstring, 3) whose floor is priced: those with the most bytes off
the device. A floor over some cuts is a floor; the rest cost time on a 10k-op step
(the pass's speed goal) and, with fewer bytes to move, rarely bind."""
CHAIN_CUTS = 48
"""The most ops of the longest path the chain bound (module docstring, 4) takes as
cuts: its DP is quadratic in them."""


@dataclass(frozen=True)
class LowerBound:
    """A floor on the simulated step time of any plan (module docstring) and where it
    comes from."""

    seconds: float
    compute_seconds: float
    """The ops' own time (the first floor)."""
    persistent_seconds: float
    """The second floor: the persistent tensors that cannot start on the device."""
    cut_seconds: float
    """The third floor: the largest over every op's cut."""
    crossing_bytes: int
    """The fewest bytes over the link at the binding cut (or of the persistent floor,
    whichever binds)."""
    cut_op: Node | None
    """The op whose cut binds, None when no cut needs anything off the device."""
    cut_excess_bytes: int
    """The bytes that must be off the device while `cut_op` runs."""
    chain_seconds: float
    """The fourth floor: the chain of cuts along the longest path."""
    chain_bytes: int
    """The fewest bytes swapped in over the chain's windows at that floor."""
    chain_cuts: int
    """The cuts of the chain that needed bytes off the device."""
    least_peak_bytes: int
    """The most bytes alive while one op runs in every schedule (its inputs, results
    and the values cut 3 counts): no schedule's peak without placement is below it,
    so what a schedule holds above it is the schedule's, not the step's."""

    @property
    def binds(self) -> str:
        """Which floor is the bound: `compute`, `persistent`, `cut` or `chain`."""
        floors = {
            "compute": self.compute_seconds,
            "persistent": self.persistent_seconds,
            "cut": self.cut_seconds,
            "chain": self.chain_seconds,
        }
        return max(floors, key=floors.__getitem__)

    def report(self, ideal_seconds: float) -> dict[str, object]:
        """The report's `lower_bound` keys (docs/placement.md)."""
        return {
            "seconds": self.seconds,
            # at most 1: the compute floor is ideal's time, summed in another order
            "best_possible_fraction": min(1.0, ideal_seconds / self.seconds)
            if self.seconds
            else 1.0,
            "binds": self.binds,
            "crossing_bytes": self.crossing_bytes,
            "cut_op": None if self.cut_op is None else self.cut_op.op,
            "cut_excess_bytes": self.cut_excess_bytes,
            "chain_swapped_in_bytes": self.chain_bytes,
            "chain_cuts": self.chain_cuts,
            "least_peak_bytes": self.least_peak_bytes,
        }


def link_seconds_per_byte(problem: PlacementProblem) -> float:
    """The least time a byte can hold the host link (module docstring)."""
    host = problem.machine.host
    both = host.duplex_bandwidth if host.duplex_bandwidth is not None else 2 * host.bandwidth
    return 1.0 / both


def lower_bound(problem: PlacementProblem) -> LowerBound:
    """The floor of `problem`'s step time under its capacity (module docstring)."""
    dag = problem.dag
    per_byte = link_seconds_per_byte(problem)
    compute = sum(problem.seconds[node] for node in dag.ops if not node.op.startswith("parallel."))
    persistent_bytes = _persistent_crossings(problem)
    persistent = max(compute, persistent_bytes * per_byte)
    cut = _Cuts(problem, per_byte, compute)
    best = (compute, 0, None, 0)
    excesses = cut.excesses()
    least_peak = float(excesses.max()) + problem.capacity
    over = np.nonzero(excesses > 0)[0]
    for o in over[np.argsort(-excesses[over], kind="stable")][:CUTS_PRICED]:
        found = cut.bound(int(o), *cut.alive(int(o)))
        if found is not None and found[0] > best[0]:
            best = found
    chained, chain_bytes, chain_cuts = cut.chain()
    seconds = max(compute, persistent, best[0], chained)
    crossing = best[1] if best[0] >= persistent else persistent_bytes
    return LowerBound(
        seconds,
        compute,
        persistent,
        best[0],
        int(crossing),
        best[2],
        best[3],
        chained,
        int(chain_bytes),
        chain_cuts,
        int(least_peak),
    )


def _persistent_crossings(problem: PlacementProblem) -> float:
    """The fewest bytes the arguments that cannot start on the device cost on the link:
    a param or state tensor a new value replaces two crossings a byte (in, and its new
    value out), any other argument one (in), where read; the device keeps the dearest
    per byte first, at most the capacity in all."""
    dag, signature = problem.dag, problem.signature
    replaced = {argument for _, argument in signature.replaces} if signature is not None else set()
    persistent = replaced & set((*signature.params, *signature.state)) if signature else set()
    read = {value for node in dag.ops for value in node.inputs}
    items = []  # (crossings a byte, bytes)
    for i, arg in enumerate(dag.args):
        if arg.out not in read:
            continue
        items.append((2 if i in persistent else 1, tensor_bytes(arg.out.sig)))
    room, moved = problem.capacity, 0.0
    for per, nbytes in sorted(items, reverse=True):
        kept = min(room, nbytes)
        room -= kept
        moved += per * (nbytes - kept)
    return moved


class _Cuts:
    """Each op's cut (module docstring, 3), over arrays of the step's values."""

    def __init__(self, problem: PlacementProblem, per_byte: float, compute: float) -> None:
        dag = problem.dag
        self.capacity, self.per_byte, self.compute = problem.capacity, per_byte, compute
        ops = self.ops = dag.ops
        self.count = len(ops)
        self.one_way = 1.0 / problem.machine.host.bandwidth
        where = self.where = {node: i for i, node in enumerate(ops)}
        values: list[Value] = [arg.out for arg in dag.args]
        values += [value for node in ops for value in node.results]
        index = {value: i for i, value in enumerate(values)}
        self.values = values
        self.size = np.array([tensor_bytes(v.sig) for v in values], dtype=np.float64)
        self.producer = np.array([-1 if v.node.is_arg else where[v.node] for v in values])
        returned = {index[v] for v in dag.outputs}
        self.returned = np.zeros(len(values), dtype=bool)
        self.returned[list(returned)] = True
        # crossings a byte off the device costs: an argument (swapped in again) or a
        # returned value (swapped out) one, any other value two
        self.crossings = np.where((self.producer < 0) | self.returned, 1.0, 2.0)
        again = set(recomputable(problem))
        self.again = np.array([v in again for v in values], dtype=bool)
        self.op_seconds = np.array([problem.seconds[node] for node in ops], dtype=np.float64)
        edges = [(index[v], where[node]) for node in ops for v in dict.fromkeys(node.inputs)]
        self.edge_value = np.array([e[0] for e in edges], dtype=np.int64)
        self.edge_reader = np.array([e[1] for e in edges], dtype=np.int64)
        self.results = [np.array([index[v] for v in node.results], dtype=np.int64) for node in ops]
        self.touched = [
            np.array(sorted({index[v] for v in (*node.inputs, *node.results)}), dtype=np.int64)
            for node in ops
        ]
        self.ancestors, self.descendants = _closures(dag.ops, where)
        # an op that may write its result over a dying operand (`in_place`) holds its
        # result in that operand's bytes: its working set is the smaller by them
        self.reused = np.array(
            [
                tensor_bytes(node.results[0].sig)
                if problem.in_place and reusable_operands(node)
                else 0.0
                for node in ops
            ],
            dtype=np.float64,
        )

    def alive(self, o: int) -> tuple[np.ndarray, float]:
        """The values alive while op `o` runs besides its inputs and results (module
        docstring, 3), and the bytes of them that must be off the device then."""
        count = self.count
        before = _bits(self.ancestors[o], count)
        after = _bits(self.descendants[o] | (1 << o), count)
        made = np.ones(len(self.values), dtype=bool)
        ops_made = self.producer >= 0
        made[ops_made] = before[self.producer[ops_made]]
        alive = made & ((self._read_in(after) > 0) | self.returned)
        alive[self.touched[o]] = False
        working = self.size[self.touched[o]].sum() - self.reused[o]
        return alive, float(self.size[alive].sum() - (self.capacity - working))

    def excesses(self) -> np.ndarray:
        """Per op, the bytes that must be off the device while it runs (`alive`'s
        second figure for every op at once): each value's cuts as a bit set, the ops
        after its maker and at or before one of its readers (every op after its maker
        for a returned value), summed over the values. O(values x ops / 8) bytes of
        work, a fraction of `alive` op by op."""
        count = self.count
        every = (1 << count) - 1
        reach = [0] * len(self.values)
        for value, reader in zip(self.edge_value.tolist(), self.edge_reader.tolist(), strict=True):
            reach[value] |= self.ancestors[reader] | (1 << reader)
        total = np.zeros(count)
        for i, producer in enumerate(self.producer.tolist()):
            made = every if producer < 0 else self.descendants[producer]
            cuts = made & (every if self.returned[i] else reach[i])
            if cuts:
                total += self.size[i] * _bits(cuts, count)
        results = np.array([self.size[t].sum() for t in self.results], dtype=np.float64)
        return total + results - self.reused - self.capacity

    def _read_in(self, ops: np.ndarray) -> np.ndarray:
        """Per value, how many of the ops marked in `ops` read it."""
        return np.bincount(
            self.edge_value, weights=ops[self.edge_reader], minlength=len(self.values)
        )

    def bound(
        self, o: int, alive: np.ndarray, excess: float
    ) -> tuple[float, float, Node, int] | None:
        """(floor, crossing bytes, the op, excess bytes) of op `o`'s cut, whose `alive`
        values put `excess` bytes over the capacity (`alive`); None when they fit."""
        if excess <= 0:
            return None
        once = float(self.size[alive & (self.crossings == 1)].sum())
        rebuilt = self._rebuilt([alive & (self.crossings == 2)])

        def crossing_at(seconds: float) -> float:
            rest = max(0.0, excess - rebuilt(seconds - self.compute))
            by_once = min(rest, once)
            return by_once + 2 * (rest - by_once)

        seconds = _least_time(self.compute, self.per_byte, crossing_at)
        return seconds, crossing_at(seconds), self.ops[o], int(excess)

    def _rebuilt(self, masks: list[np.ndarray]) -> Callable[[float], float]:
        """The most bytes of the values marked in `masks` (one mask per cut or window,
        each value's op run once per mask) that recomputation brings back in `spare`
        seconds of compute, fractionally, the cheapest per byte first: a floor's
        relaxation of what any plan recomputes."""
        costs, gains = [], []
        for mask in masks:
            mask = mask & self.again & (self.producer >= 0)
            if not mask.any():
                continue
            grouped = np.bincount(
                self.producer[mask], weights=self.size[mask], minlength=self.count
            )
            used = np.nonzero(grouped)[0]
            costs.append(self.op_seconds[used])
            gains.append(grouped[used])
        if not costs:
            return lambda spare: 0.0
        cost, gain = np.concatenate(costs), np.concatenate(gains)
        order = np.argsort(cost / gain)
        cum_cost = np.concatenate(([0.0], np.cumsum(cost[order])))
        cum_gain = np.concatenate(([0.0], np.cumsum(gain[order])))
        return lambda spare: float(np.interp(max(0.0, spare), cum_cost, cum_gain))

    def chain(self, cuts: int = CHAIN_CUTS) -> tuple[float, float, int]:
        """(floor, swap-in bytes, cuts used) of the chain of cuts (module docstring, 4)
        along the step's longest path, `cuts` of its ops at most, the chain among them
        that needs the most bytes chosen by a DP over (cut, next cut) pairs."""
        path = self._longest_path()
        if len(path) > cuts:
            path = [path[round(k * (len(path) - 1) / (cuts - 1))] for k in range(cuts)]
        path = list(dict.fromkeys(path))
        alive = [self.alive(o) for o in path]
        count = self.count
        reads: list[dict[int | None, np.ndarray]] = [{} for _ in path]

        def read_between(a: int, b: int | None) -> np.ndarray:
            """Values of cut `a`'s alive read by an op after path[a], at or before
            path[b] (after it when b is None: all of them)."""
            if b not in reads[a]:
                live = alive[a][0]
                if b is None:
                    reads[a][b] = live
                else:
                    window = _bits(self.descendants[path[a]], count) & _bits(
                        self.ancestors[path[b]] | (1 << path[b]), count
                    )
                    reads[a][b] = live & (self._read_in(window) > 0)
            return reads[a][b]

        def need(a: int, b: int | None) -> float:
            live, excess = alive[a]
            if excess <= 0:
                return 0.0
            shared = self.size[live & ~read_between(a, b)].sum()
            return max(0.0, excess - float(shared))

        best: list[tuple[float, int | None]] = [(0.0, None)] * len(path)
        for a in range(len(path) - 1, -1, -1):
            if alive[a][1] <= 0:
                best[a] = max(
                    ((best[b][0], b) for b in range(a + 1, len(path))), default=(0.0, None)
                )
                best[a] = (best[a][0], None if best[a][0] == 0 else best[a][1])
                continue
            options = [(need(a, None), None)]
            options += [(need(a, b) + best[b][0], b) for b in range(a + 1, len(path))]
            best[a] = max(options, key=lambda option: option[0])
        start = max(range(len(path)), key=lambda a: best[a][0], default=None)
        windows, total, at = [], 0.0, start
        while at is not None:
            nxt = best[at][1]
            if alive[at][1] > 0:
                windows.append(read_between(at, nxt))
                total += need(at, nxt)
            at = nxt
        rebuilt = self._rebuilt(windows)
        one_way = self.one_way

        def crossing_at(seconds: float) -> float:
            return max(0.0, total - rebuilt(seconds - self.compute))

        seconds = _least_time(self.compute, one_way, crossing_at)
        return seconds, crossing_at(seconds), len(windows)

    def _longest_path(self) -> list[int]:
        """The ops of a longest path of the step (most ops), in order."""
        length = [1] * self.count
        parent: list[int | None] = [None] * self.count
        for i, node in enumerate(self.ops):
            for value in node.inputs:
                if value.node.is_arg:
                    continue
                p = self.where[value.node]
                if length[p] + 1 > length[i]:
                    length[i], parent[i] = length[p] + 1, p
        at: int | None = max(range(self.count), key=length.__getitem__)
        path = []
        while at is not None:
            path.append(at)
            at = parent[at]
        return path[::-1]


def _least_time(compute: float, per_byte: float, crossing_at: Callable[[float], float]) -> float:
    """The least time T at least `compute` with `crossing_at(T)` bytes over the link
    taking at most T: the floor of a plan that may spend T - compute on recomputation
    (`crossing_at` falls as T grows)."""
    low = compute
    if crossing_at(low) * per_byte <= low:
        return low
    high = max(low, crossing_at(low) * per_byte)
    for _ in range(60):
        middle = (low + high) / 2
        if crossing_at(middle) * per_byte <= middle:
            high = middle
        else:
            low = middle
    return high


def _closures(ops: tuple[Node, ...], where: dict[Node, int]) -> tuple[list[int], list[int]]:
    """Each op's ancestors and descendants among `ops` (a topological order), as bit
    sets of op indices."""
    parents = [{where[v.node] for v in node.inputs if not v.node.is_arg} for node in ops]
    ancestors = [0] * len(ops)
    for i, mine in enumerate(parents):
        bits = 0
        for p in mine:
            bits |= ancestors[p] | (1 << p)
        ancestors[i] = bits
    children: list[list[int]] = [[] for _ in ops]
    for i, mine in enumerate(parents):
        for p in mine:
            children[p].append(i)
    descendants = [0] * len(ops)
    for i in range(len(ops) - 1, -1, -1):
        bits = 0
        for c in children[i]:
            bits |= descendants[c] | (1 << c)
        descendants[i] = bits
    return ancestors, descendants


def _bits(bits: int, count: int) -> np.ndarray:
    """Bit set `bits` over `count` positions as a boolean array."""
    raw = np.frombuffer(bits.to_bytes((count + 7) // 8 or 1, "little"), dtype=np.uint8)
    return np.unpackbits(raw, bitorder="little")[:count].astype(bool)
