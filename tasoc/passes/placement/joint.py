"""The joint choice of swapping and recomputing: per saved activation, swap it or run its
op again, the two priced together on the one simulator (issue 32, fifth round).

A rule of `recompute.RULES` picks the values that may run again by one threshold, an
op's time over its result's swap time, the same for every value. One threshold is too
coarse: on nasnet at twice oversubscription, ratio 0.1 runs 139 convolutions again
(15.4 ms, no stall) while the host link carries an eighth of what it could, and ratio
0.05 swaps some of them instead and stalls 9.4 ms — some convolutions' swaps hide under
compute and some do not, which a threshold on the op alone cannot tell. Checkmate
(Jain et al., MLSys 2020) makes the choice per value with an ILP over a cost model that
has no link and no overlap; here the simulator, which has both, judges a local search
over the set of values that may run again (`SwapSettings.recompute`), starting from the
fastest plan a rule gave:

1. *recompute → swap*: the ops the plan runs again, the dearest per byte first (their
   time over every run again ÷ the bytes of their results that may run again), among
   those whose copies fit the host link's idle time on the plan's simulated timeline
   (`LinkIdle`: the swap-out between the op's first run and its first run again, the
   swap-in within its prefetch window before that, each in its own direction and on the
   link both directions share), each claiming the idle time it fits in so that two do
   not count on the same. Their results leave the set: the planner swaps them where it
   evicts them, and what is rebuilt from them reads the host copy.
2. *swap → recompute*: the values the set lacks whose swap-in stalled its reader
   (`prefetch.stalled`) and whose op may run again (`recompute.recomputable`) join it.

Each move is tried in batches, the whole list first: a batch the simulator finds faster
is kept and the rest tried at the same size; one that is not is halved, the dearer half
first, down to an eighth of the list (`SMALLEST`), and a batch of that size that is not
faster ends the move (at most `EVALUATIONS` plans in all, both moves and every round).
The two moves alternate, each ranking again on the last plan's timeline, until neither
keeps anything (at most `ROUNDS`); then the per-tensor prefetch windows are widened as
`prefetch.tuned_plan` widens them. Every plan is the swap planner's under the same
settings but the set, so it fits the capacity and passes the simulator's check, and the
result is never slower than the plan it started from. Cost: one scan and one simulation
per evaluation (about a second on nasnet's 6.5k ops); a deadline stops it with the
fastest plan so far.
"""

from __future__ import annotations

import bisect
from collections.abc import Hashable, Iterable
from dataclasses import dataclass, replace

from tasoc.ir.dag import Node, Value
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import Recompute, SwapIn
from tasoc.passes.placement.prefetch import Tuned, faster, stalled, widened
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.swap_planner import CapacityTooSmall, NoCopyLeft, SwapSettings
from tasoc.passes.search import Deadline
from tasoc.sim.placement import HOST_LINK, NETWORK, SWAP_IN, SWAP_OUT

EVALUATIONS = 8
"""Plans the joint choice prices at most (each a scan and a simulation: about a second
of CPU on nasnet's 6.5k ops; there, at 2x, the sixth plan was the last one kept of
twelve)."""
ROUNDS = 3
"""Rounds of both moves at most; a round that keeps nothing ends the search."""
SMALLEST = 8
"""A move's batches are not halved below an eighth of its list: on nasnet at 2x the
first half of 147 ops gained 2.8 points and the single ops after it 0.2 in 60 plans."""


@dataclass(frozen=True)
class Joint:
    """The plan the joint choice kept and what it moved (the report's `joint`)."""

    tuned: Tuned
    to_swap: int
    """Ops no longer run again: their results are swapped instead."""
    to_recompute: int
    """Values whose stalled swap-ins became runs again."""
    evaluations: int


class LinkIdle:
    """The host link's idle time on a simulated run, per op of the compute stream (from
    its task's start to the next's): per direction, its own stream's and the shared
    link's (where the directions share a capacity, `Link.duplex_bandwidth`). A copy
    claims what it needs from a range of ops, so that two copies do not count on the
    same idle time."""

    def __init__(self, tuned: Tuned, problem: PlacementProblem) -> None:
        run, link = tuned.simulated, problem.machine.host
        start, end = run.timeline.start, run.timeline.end
        self.at: dict[int, int] = {}
        """Schedule entry -> its op's index among the compute stream's ops."""
        edges: list[float] = []
        for index, (entry, task) in enumerate(zip(tuned.plan.schedule, run.tasks, strict=True)):
            node = entry.node if isinstance(entry, Recompute) else entry
            if isinstance(node, Node) and task is not None and run.graph[task].resource != NETWORK:
                self.at[index] = len(edges)
                edges.append(start[task])
        edges.append(run.seconds)
        self.edges = edges
        busy: dict[Hashable, list[float]] = {
            r: [0.0] * (len(edges) - 1) for r in (SWAP_IN, SWAP_OUT, HOST_LINK)
        }
        for task_id in run.graph.ids():
            resource = run.graph[task_id].resource
            if resource in busy:
                self._add(busy[resource], start[task_id], end[task_id])
        self.free = {
            r: [b - a - used for a, b, used in zip(edges, edges[1:], spent, strict=False)]
            for r, spent in busy.items()
        }
        self.one_way = link.time
        self.shared = link.shared_time

    def _add(self, spent: list[float], lo: float, hi: float) -> None:
        """Count `[lo, hi)` as busy in the ops it overlaps."""
        at = max(0, bisect.bisect_right(self.edges, lo) - 1)
        while at < len(spent) and self.edges[at] < hi:
            spent[at] += max(0.0, min(hi, self.edges[at + 1]) - max(lo, self.edges[at]))
            at += 1

    def claim(self, stream: str, nbytes: int, ops: Iterable[int]) -> int | None:
        """Claim the idle time a copy of `nbytes` on `stream` needs from `ops` (indices,
        in the order the copy would use them: a swap-in's latest first): the last of
        them it needed, or None, and nothing claimed, when they do not hold enough."""
        own_left = self.one_way(nbytes)
        shared_total = self.shared(nbytes)
        ratio = 0.0 if shared_total is None else shared_total / max(own_left, 1e-12)
        own, shared = self.free[stream], self.free[HOST_LINK]
        taken: list[tuple[int, float]] = []
        for op in ops:
            room = own[op] if ratio == 0.0 else min(own[op], shared[op] / ratio)
            used = min(max(room, 0.0), own_left)
            if used > 0.0:
                taken.append((op, used))
                own_left -= used
            if own_left <= 1e-12:
                break
        else:
            return None
        for op, used in taken:
            own[op] -= used
            shared[op] -= used * ratio
        return taken[-1][0] if taken else None


def refine(
    problem: PlacementProblem,
    start: Tuned,
    recomputable: frozenset[Value],
    deadline: Deadline | None = None,
) -> Joint:
    """The joint choice (module docstring) from `start`, a plan of `problem`'s schedule
    by the swap planner under `start.settings`; `recomputable` are the values whose op
    may run again at all."""
    best, moved, evaluations = start, [0, 0], 0
    for _ in range(ROUNDS):
        kept_any = False
        for move, pick in enumerate((_to_swap, _to_recompute)):
            pending = pick(problem, best, recomputable)
            found, kept, spent = _bisect(
                problem, best, pending, EVALUATIONS - evaluations, deadline
            )
            evaluations += spent
            if kept:
                best, kept_any = found, True
                moved[move] += kept
        if not kept_any or (deadline is not None and deadline.expired()):
            break
    return Joint(widened(problem, best, deadline), *moved, evaluations)


@dataclass(frozen=True)
class Move:
    """Values of one op that leave the set of those that may run again (or join it,
    `join`); a window, where their swap-ins may start that many ops ahead of their
    reader (`SwapSettings.lookbacks`) for the copy to fit the link's idle time."""

    values: tuple[Value, ...]
    window: int | None = None
    join: bool = False


Pick = list[Move]
"""Moves, the likeliest first."""


def _to_swap(problem: PlacementProblem, tuned: Tuned, recomputable: frozenset[Value]) -> Pick:
    """The ops `tuned` runs again whose results' copies fit the link's idle time, the
    dearest per byte first (module docstring, move 1)."""
    chosen = tuned.settings.recompute
    schedule = tuned.plan.schedule
    first_run: dict[Node, int] = {}
    again: dict[Node, list[int]] = {}
    for index, entry in enumerate(schedule):
        if isinstance(entry, Node):
            first_run[entry] = index
        elif isinstance(entry, Recompute):
            again.setdefault(entry.node, []).append(index)
    priced: list[tuple[float, Node, tuple[Value, ...], int]] = []
    for node, runs in again.items():
        values = tuple(v for v in node.results if v in chosen)
        nbytes = sum(tensor_bytes(v.sig) for v in values)
        if nbytes and node in first_run:
            per_byte = len(runs) * problem.seconds[node] / nbytes
            priced.append((per_byte, node, values, nbytes))
    priced.sort(key=lambda item: -item[0])
    idle = LinkIdle(tuned, problem)
    moves: Pick = []
    for _, node, values, nbytes in priced:
        made, back = idle.at[first_run[node]], idle.at[again[node][0]]
        if idle.claim(SWAP_OUT, nbytes, range(made + 1, back)) is None:
            continue
        earliest = idle.claim(SWAP_IN, nbytes, range(back - 1, made, -1))
        if earliest is not None:  # the swap-in may start that far ahead of its reader
            moves.append(Move(values, back - earliest))
    return moves


def _to_recompute(problem: PlacementProblem, tuned: Tuned, recomputable: frozenset[Value]) -> Pick:
    """The values outside the set whose swap-in stalled and whose op may run again,
    each with the forward values it is rebuilt from, as deep as the settings' chains
    (module docstring, move 2), in the order of their swap-ins."""
    chosen = tuned.settings.recompute
    late = stalled(tuned.plan, tuned.simulated) & recomputable - chosen
    moves: Pick = []
    for value in (v for v in _swapped_in(tuned) if v in late):
        links: dict[Value, None] = {}
        reach = [value]
        for _ in range(tuned.settings.recompute_depth):
            links.update(dict.fromkeys(reach))
            reach = [u for v in reach for u in v.node.inputs if u in recomputable]
        moves.append(Move(tuple(v for v in links if v not in chosen), join=True))
    return moves


def _swapped_in(tuned: Tuned) -> dict[Value, None]:
    """The values `tuned` swaps in, in the order of their first swap-in."""
    return {e.value: None for e in tuned.plan.moves() if isinstance(e, SwapIn)}


def _applied(settings: SwapSettings, batch: Iterable[Move]) -> SwapSettings:
    """`settings` with `batch`'s values taken from or added to the set, and their
    windows widened to the moves' own."""
    chosen, own = set(settings.recompute), dict(settings.lookbacks)
    for move in batch:
        if move.join:
            chosen.update(move.values)
        else:
            chosen.difference_update(move.values)
        for value in move.values if move.window is not None else ():
            own[value] = max(own.get(value, settings.lookback), move.window or 0)
    return replace(settings, recompute=frozenset(chosen), lookbacks=own)


def _bisect(
    problem: PlacementProblem,
    best: Tuned,
    pending: Pick,
    budget: int,
    deadline: Deadline | None,
) -> tuple[Tuned, int, int]:
    """Try `pending` in batches (module docstring) until `budget` plans are priced or
    `deadline` passes: the fastest plan, how many moves it kept and how many plans
    were priced."""
    kept = evaluations = 0
    size = len(pending)
    floor = max(1, size // SMALLEST)
    while pending and evaluations < budget:
        if deadline is not None and deadline.expired():
            break  # what was kept so far stands
        batch = pending[:size]
        evaluations += 1
        try:
            found = faster(problem, best, _applied(best.settings, batch), deadline)
        except (CapacityTooSmall, NoCopyLeft):
            found = None
        if found is not None:
            best, kept, pending = found, kept + len(batch), pending[size:]
        elif size > floor:
            size = max(floor, (size + 1) // 2)
        else:
            break
    return best, kept, evaluations


__all__ = ("EVALUATIONS", "ROUNDS", "Joint", "LinkIdle", "refine")
