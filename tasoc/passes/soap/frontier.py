"""TensorOpt's Frontier Tracking (FT, TensorOpt §3.2): every strategy of a `CostGraph`
on the (memory, time) cost frontier, not one strategy for one objective.

How it works here, following Algorithm 2:

- **Initialization** (line 3). Each node i keeps one frontier per option,
  F(o_i, s_i^k), and each edge one per option pair, F(e_ij, s_i^k, s_j^p); each starts
  with the single point of eq. 1 or eq. 2 (none where the time is `inf`: an impossible
  pair is not a strategy at all, so it is dropped everywhere).
- **Exact elimination** (line 6) on an undirected graph. *Edge* (eq. 5): parallel
  edges between one pair merge into one, costs summed per option pair. *Node* (eq. 4):
  a node with two neighbours h, j becomes one edge h-j whose frontier for (w, p) is the
  reduce of the union over the node's options k of e_hi ⊗ o_i ⊗ e_ij. *Branch* (eq. 6):
  a node with one neighbour folds into it: the neighbour's frontier for p becomes the
  reduce of the union over the leaf's options of o_h ⊗ o_i ⊗ e_ih. Unmarked nodes go
  first, lowest index first within each kind: leaves hanging off a node with three or
  more neighbours (so the marks can run on past it), then nodes with two neighbours,
  then other leaves (chain ends the marks have not reached).
- **Heuristic elimination** (line 7, eq. 7) when no exact one applies: the unmarked
  node with the most edges (ties: the one whose best option leads its second by
  most; in a run following an anchor, the lowest index) takes one option, the least
  score under the rule (least memory, least time, or least of both normalized),
  each option scored by its own costs and, per neighbour, the best of the edge's
  and the neighbour's frontiers together; each of its edges then folds into the
  neighbour's frontier. With
  `heuristic=None` the node is *conditioned* on instead: the rest of FT runs once per
  option and the results are united and reduced, which is exponential but exact.
- **Anchors.** TensorOpt uses "multiple heuristics" to fix a node; `anchors` adds
  whole strategies as such heuristics: one more run per anchor, each of its
  heuristic eliminations fixing the node as the anchor does, the final frontiers
  united. The runs differ only from their first heuristic elimination on, so the
  exact eliminations before it are done once and each run starts from a copy. A
  training step's forward, backward and update ops are separate nodes
  joined by the weights and saved activations, a ladder rather than a chain, so
  heuristic elimination runs hundreds of times there (TensorOpt's forward-only
  graphs needed it twice for BERT), and a local rule alone strays far from the
  optimum; a run following an anchor keeps the anchor's strategy in its space.
- **Marking** (line 5): the first node of each connected component is marked, and a
  mark extends to the last marked node's single higher-index neighbour, so the chain
  the program runs along stays whole for LDP instead of being eliminated. Elimination
  stops once every component is a simple path; should marked nodes alone keep a
  component from being one (a cycle they close), they are eliminated too.
- **LDP** (line 12, Algorithm 3) runs along each path: CF(o_i, p) is the reduce of the
  union over the previous node's options k of CF(o_{i-1}, k) ⊗ e(k, p) ⊗ o_i(p);
  components combine by product.
- **Unroll** (lines 13-14): every point carries an id into an append-only table of
  records (which node took which option, and the ids of the up to three points it was
  made from); walking those records back from the final points gives each strategy.

A frontier is never a list of Python objects: a family of per-group frontiers (one
group per option or option pair) lives in flat numpy arrays with group offsets, and
product, union and reduce (Algorithm 1) are vectorized over all groups at once. Only
points that survive a reduce get a record. `max_points` bounds every frontier (at most
that many points, both ends kept, the rest spread evenly in memory), which is what
keeps long graphs fast: an exact frontier grows with the graph, and each LDP step
costs K² times its length.
"""

from __future__ import annotations

import functools
import heapq
import itertools
import math
import time as clock
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
from numpy.typing import NDArray

from tasoc.passes.search import Deadline
from tasoc.passes.soap.cost_graph import Choice, CostGraph

Floats = NDArray[np.float64]
Ints = NDArray[np.int64]
Heuristic = Literal["memory", "time", "weighted"]

_PARENTS = 3
"""The most points one record is made from (eq. 4, 6 and Algorithm 3 multiply three)."""


@dataclass(frozen=True)
class FrontierPoint:
    """One strategy on the frontier and what it costs."""

    memory: float
    """Bytes per device (eq. 3)."""
    time: float
    """Seconds (eq. 3)."""
    choice: Choice
    """One option index per graph node."""


@dataclass
class Tracked:
    """What `track` found and how."""

    points: list[FrontierPoint]
    """The frontier by increasing memory (so decreasing time); [] when no strategy is
    feasible."""
    eliminations: Counter[str]
    """How many of each elimination ran: "node", "edge", "branch", "heuristic",
    "conditioned" (one per node conditioned on, in every branch). The exact ones
    before the first heuristic elimination are done once for every run; the rest are
    summed over the runs (one, and one more per anchor)."""
    chain: int
    """Nodes of the linear graph LDP ran on, summed over components (with conditioning,
    the longest of its runs)."""
    thinned: int
    """Points dropped by `max_points` (0 when exact)."""
    seconds: float
    """Wall-clock time `track` took."""
    exact: bool
    """True when neither heuristic elimination nor thinning ran: the frontier is exact."""


class FrontierTimeout(Exception):
    """The deadline passed before FT finished; the message says how far it got."""


def track(
    graph: CostGraph,
    *,
    heuristic: Heuristic | None = "weighted",
    max_points: int | None = None,
    deadline: Deadline | None = None,
    anchors: Sequence[Choice] = (),
) -> Tracked:
    """The (memory, time) frontier of `graph` by Frontier Tracking (Algorithm 2).

    `heuristic` picks the option of a node heuristic elimination fixes; None conditions
    on it instead, keeping the result exact at exponential cost. `max_points` thins any
    frontier longer than it (the result is then approximate); `deadline` raises
    `FrontierTimeout` once passed.

    `anchors` are whole strategies (a data-parallel plan, an ILP's optimum) used as
    more of TensorOpt's "multiple heuristics": FT runs once more per anchor, its
    heuristic eliminations fixing each node as the anchor does, and the frontiers
    are united. An anchor's strategy stays in its run's space, so the result has a
    point at least as good as every anchor on both costs."""
    if heuristic not in (None, "memory", "time", "weighted"):
        raise ValueError(f"unknown heuristic {heuristic!r}")
    if max_points is not None and max_points < 2:
        raise ValueError(f"max_points must keep both ends of a frontier, got {max_points}")
    started = clock.perf_counter()
    run = _Run(heuristic, max_points, deadline, _scales(graph))
    for anchor in anchors:
        if len(anchor) != len(graph.nodes):
            raise ValueError(f"an anchor needs one option per node, got {len(anchor)}")
    if graph.nodes:
        state = _State.initial(graph, run)
        _exact(state, run)  # every run eliminates alike up to its first heuristic choice
        runs = (None, *anchors) if heuristic is not None else (None,)
        results = []
        for anchor in runs:
            run.anchor = anchor
            start = state.copy() if len(runs) > 1 else state
            if anchor is not None:
                start.rule = None
            results.append(_solve(start, run))
        final = results[0] if len(results) == 1 else _union(results, run)
        choices = _unroll(run.records, final.src[:, 0], len(graph.nodes))
    else:
        final = _leaf(np.zeros(1), np.zeros(1), 1)
        choices = np.zeros((1, 0), np.int64)
    points = [
        FrontierPoint(
            float(memory + graph.fixed_memory),
            float(seconds + graph.fixed_time),
            tuple(choice),
        )
        for memory, seconds, choice in zip(
            final.memory.tolist(), final.time.tolist(), choices.tolist(), strict=True
        )
        if math.isfinite(seconds + graph.fixed_time)
    ]
    exact = run.thinned == 0 and run.eliminations["heuristic"] == 0
    return Tracked(
        points,
        run.eliminations,
        run.chain,
        run.thinned,
        clock.perf_counter() - started,
        exact,
    )


# ----------------------------------------------------------------------------------
# Frontier families: product, union and reduce over many groups at once


@dataclass(frozen=True, slots=True)
class _Frontiers:
    """One frontier per group (an option, an option pair) in flat arrays.

    Group g's points are `starts[g]:starts[g + 1]`, by increasing memory and
    decreasing time. `src` holds, per point, the columns that say where it came from:
    one record id once sealed, the ids of its factors (and an option) before."""

    starts: Ints
    memory: Floats
    time: Floats
    src: Ints
    """Shape (points, columns)."""

    @property
    def groups(self) -> int:
        return len(self.starts) - 1

    def sizes(self) -> Ints:
        return self.starts[1:] - self.starts[:-1]


@functools.cache
def _grid(*options: int) -> tuple[Ints, ...]:
    """Every combination of one option per node, in row-major order: one flat index
    array per node. Shared and read-only: eliminations ask for the same few shapes
    thousands of times."""
    grids = np.meshgrid(*(np.arange(k) for k in options), indexing="ij")
    flat = tuple(grid.ravel() for grid in grids)
    for array in flat:
        array.flags.writeable = False
    return flat


def _leaf(memory: Floats, time: Floats, groups: int) -> _Frontiers:
    """Initialization (Algorithm 2 line 3): one point per group, none where the time
    is infinite (an impossible option or pair); nothing to unroll yet (id -1)."""
    possible = np.isfinite(time) & np.isfinite(memory)
    starts = np.zeros(groups + 1, np.int64)
    np.cumsum(possible, out=starts[1:])
    count = int(starts[-1])
    return _Frontiers(
        starts,
        memory[possible].astype(np.float64),
        time[possible].astype(np.float64),
        np.full((count, 1), -1, np.int64),
    )


def _reduce(memory: Floats, time: Floats, counts: Ints) -> Ints:
    """Algorithm 1 in every group at once. The candidates come grouped: group g is the
    `counts[g]` consecutive ones after the groups before it. Returns the indices of
    the points no other point of their group beats in both costs, by (group, memory).

    Stored frontiers hold no infinite time, so no candidate (a sum of them) does.
    Sorting is one stable sort of memory shifted by a multiple of the memory span per
    group (so groups stay in place; the result is checked, and a two-key sort runs
    where rounding misordered it). The running minimum of time restarts per group:
    a loop over groups where they are long, else one pass over a padded (group,
    position) grid, else (a grid mostly padding) over shifted time ranks."""
    size = len(memory)
    if size <= 1:
        return np.arange(size)
    groups = len(counts)
    ends = np.cumsum(counts)
    starts = ends - counts
    where = np.repeat(np.arange(groups), counts)
    if groups > 1:
        low = memory.min()
        stride = 2.0 * (memory.max() - low) + 1.0
        order = np.argsort((memory - low) + where * stride, kind="stable")
        ordered = memory[order]
        misordered = ordered[1:] < ordered[:-1]
        misordered[ends[(ends > 0) & (ends < size)] - 1] = False
        if misordered.any():
            order = np.lexsort((memory, where))
            ordered = memory[order]
    else:
        order = np.argsort(memory, kind="stable")
        ordered = memory[order]
    seconds = time[order]
    kept = np.empty(size, bool)
    if size >= 256 * groups:
        for lo, hi in zip(starts.tolist(), ends.tolist(), strict=True):
            if lo < hi:
                best = np.minimum.accumulate(seconds[lo:hi])
                kept[lo] = True
                np.less(seconds[lo + 1 : hi], best[:-1], out=kept[lo + 1 : hi])
    elif groups * (int(counts.max()) + 1) <= 4 * size + 4096:
        width = int(counts.max()) + 1
        cell = where * width + (np.arange(size) - np.repeat(starts, counts)) + 1
        grid = np.full(groups * width, np.inf)
        grid[cell] = seconds
        grid = np.minimum.accumulate(grid.reshape(groups, width), axis=1).ravel()
        np.less(seconds, grid[cell - 1], out=kept)
    else:
        # many groups, one far longer than the rest: dense time ranks shifted so that
        # each later group starts below every earlier one make one running minimum
        _, rank = np.unique(seconds, return_inverse=True)
        key = rank.astype(np.int64) + (groups - 1 - where) * (int(rank.max()) + 1)
        best = np.minimum.accumulate(key)
        kept[0] = True
        np.less(key[1:], best[:-1], out=kept[1:])
    order, ordered = order[kept], ordered[kept]
    tie = (ordered[1:] == ordered[:-1]) & (where[order[1:]] == where[order[:-1]])
    if tie.any():
        order = order[np.concatenate([~tie, [True]])]
    return order


def _combine(
    run: _Run,
    terms: list[tuple[_Frontiers, Ints]],
    out: Ints,
    groups: int,
    extra: Ints | None = None,
) -> _Frontiers:
    """Product, union and reduce in one: row r multiplies group `g_t[r]` of every term
    (the product: every combination, costs summed), rows sharing an output group are
    united, and each output group is reduced (and thinned if it must be).

    The result's `src` is the terms' columns side by side, then `extra[r]` (the option
    an eliminated node took) when given. Rows are taken in output-group order so the
    candidates come grouped, which is what `_reduce` wants."""
    if len(out) > 1 and (out[1:] < out[:-1]).any():
        rank = np.argsort(out, kind="stable")
        out = out[rank]
        terms = [(frontiers, rows[rank]) for frontiers, rows in terms]
        extra = None if extra is None else extra[rank]
    sizes = [frontiers.sizes()[rows] for frontiers, rows in terms]
    per_row = sizes[0].copy()
    for size in sizes[1:]:
        per_row *= size
    width = sum(f.src.shape[1] for f, _ in terms) + (extra is not None)
    total = int(per_row.sum())
    if total == 0:
        return _empty(groups, width)
    ends = np.cumsum(per_row)
    varying = [t for t, size in enumerate(sizes) if (size != 1).any()]
    memory = np.zeros(total)
    seconds = np.zeros(total)
    picks: dict[int, Ints] = {}
    local = None
    if len(varying) > 1:
        local = np.arange(total) - np.repeat(ends - per_row, per_row)
        row = np.repeat(np.arange(len(out)), per_row)
    for t in reversed(range(len(terms))):
        frontiers, rows = terms[t]
        first = frontiers.starts[rows]
        if t not in varying:
            # one point per row: its costs repeat, and only kept points need its index
            memory += np.repeat(frontiers.memory[first], per_row)
            seconds += np.repeat(frontiers.time[first], per_row)
            continue
        if local is None:
            pick = np.arange(total) + np.repeat(first - (ends - per_row), per_row)
        elif t == varying[0]:
            pick = np.repeat(first, per_row) + local
        else:
            size = sizes[t][row]
            pick = np.repeat(first, per_row) + local % size
            local = local // size
        picks[t] = pick
        memory += frontiers.memory[pick]
        seconds += frontiers.time[pick]
    counts = np.bincount(out, weights=per_row, minlength=groups).astype(np.int64)
    if len(varying) <= 1 and len(out) == groups and (out == np.arange(groups)).all():
        # one frontier per output group shifted by constants: still a frontier
        kept = np.arange(total)
    else:
        kept = _reduce(memory, seconds, counts)
    group = np.searchsorted(np.cumsum(counts), kept, side="right")
    if run.max_points is not None and len(kept) > run.max_points:
        kept, group = run.thin(kept, group, memory[kept])
    starts = np.zeros(groups + 1, np.int64)
    np.cumsum(np.bincount(group, minlength=groups), out=starts[1:])
    kept_row = np.searchsorted(ends, kept, side="right")
    columns = []
    for t, (frontiers, rows) in enumerate(terms):
        pick = picks[t][kept] if t in picks else frontiers.starts[rows][kept_row]
        columns.append(frontiers.src[pick])
    if extra is not None:
        columns.append(extra[kept_row][:, None])
    return _Frontiers(starts, memory[kept], seconds[kept], np.concatenate(columns, axis=1))


def _empty(groups: int, width: int) -> _Frontiers:
    return _Frontiers(
        np.zeros(groups + 1, np.int64),
        np.zeros(0),
        np.zeros(0),
        np.zeros((0, width), np.int64),
    )


# ----------------------------------------------------------------------------------
# Unroll records


class _Records:
    """Append-only: record r says node `node[r]` took option `option[r]` (node -1:
    nothing) and lists the ids of the up to three points it was made from."""

    def __init__(self) -> None:
        nothing = np.zeros(0, np.int64)
        self._chunks: list[tuple[Ints, Ints, Ints]] = [
            (nothing, nothing, np.zeros((0, _PARENTS), np.int64))
        ]
        self.size = 0

    def add(self, node: int, option: Ints, parents: Ints) -> Ints:
        count = len(parents)
        if parents.shape[1] < _PARENTS:
            pad = np.full((count, _PARENTS - parents.shape[1]), -1, np.int64)
            parents = np.concatenate([parents, pad], axis=1)
        self._chunks.append((np.full(count, node, np.int64), option, parents))
        ids = np.arange(self.size, self.size + count, dtype=np.int64)
        self.size += count
        return ids

    def arrays(self) -> tuple[Ints, Ints, Ints]:
        """Every record as three arrays (node, option, parents), merged once."""
        nodes, options, parents = zip(*self._chunks, strict=True)
        merged = np.concatenate(nodes), np.concatenate(options), np.concatenate(parents)
        self._chunks = [merged]
        return merged


def _seal(
    records: _Records,
    frontiers: _Frontiers,
    parents: tuple[int, ...],
    node: int | None = None,
    option: int | None = None,
) -> _Frontiers:
    """Give each point one id: a new record when it assigns an option or joins two
    histories; otherwise the id of its only history (no record needed)."""
    origins = frontiers.src[:, list(parents)]
    if node is None:
        ids = origins.max(axis=1) if len(parents) else np.full(len(origins), -1, np.int64)
        joined = (origins >= 0).sum(axis=1) > 1
        if joined.any():
            ids[joined] = records.add(-1, np.full(int(joined.sum()), -1), origins[joined])
    else:
        assert option is not None
        ids = records.add(node, frontiers.src[:, option].copy(), origins)
    return _Frontiers(frontiers.starts, frontiers.memory, frontiers.time, ids[:, None])


def _unroll(records: _Records, ids: Ints, nodes: int) -> NDArray[np.int64]:
    """Lines 13-14: walk every final point's records back at once, level by level,
    writing each node's option; every node is assigned exactly once."""
    node_of, option_of, parents_of = records.arrays()
    choices = np.full((len(ids), nodes), -1, np.int64)
    point = np.arange(len(ids))
    live = ids >= 0
    point, ids = point[live], ids[live]
    while len(ids):
        node = node_of[ids]
        assigns = node >= 0
        choices[point[assigns], node[assigns]] = option_of[ids[assigns]]
        ids = parents_of[ids].ravel()
        point = np.repeat(point, _PARENTS)
        live = ids >= 0
        point, ids = point[live], ids[live]
    if (choices < 0).any():
        raise AssertionError("frontier tracking left a node without an option")
    return choices


# ----------------------------------------------------------------------------------
# The graph being eliminated


@dataclass
class _Run:
    """What every branch of one `track` call shares."""

    heuristic: Heuristic | None
    max_points: int | None
    deadline: Deadline | None
    scales: tuple[float, float]
    """(time, memory) totals the weighted heuristic divides by."""
    records: _Records = field(default_factory=_Records)
    anchor: Choice | None = None
    """The strategy heuristic elimination follows in this run (None: `heuristic`)."""
    eliminations: Counter[str] = field(default_factory=Counter)
    thinned: int = 0
    chain: int = 0

    def check(self, where: str) -> None:
        if self.deadline is not None and self.deadline.expired():
            done = sum(self.eliminations.values())
            raise FrontierTimeout(
                f"frontier tracking ran out of time {where} after {done} eliminations"
            )

    def thin(self, kept: Ints, group: Ints, memory: Floats) -> tuple[Ints, Ints]:
        """Thin every group of a reduced result (sorted by group, then memory) longer
        than `max_points` to at most that many points spread evenly in memory: its
        memory range cut into `max_points` - 1 equal steps, the point nearest each step
        (the first one rounding to it), and always both ends."""
        limit = self.max_points
        assert limit is not None
        counts = np.bincount(group)
        if counts.max() <= limit:
            return kept, group
        ends = np.cumsum(counts)
        first, last = (ends - counts)[group], ends[group] - 1
        low, high = memory[first], memory[last]
        span = np.where(high > low, high - low, 1.0)
        step = np.floor((memory - low) / span * (limit - 1) + 0.5)
        index = np.arange(len(kept))
        opens = np.ones(len(kept), bool)
        opens[1:] = (step[1:] != step[:-1]) | (group[1:] != group[:-1])
        keep = (counts[group] <= limit) | (index == last) | (opens & (step < limit - 1))
        self.thinned += int(len(kept) - keep.sum())
        return kept[keep], group[keep]


def _scales(graph: CostGraph) -> tuple[float, float]:
    """Totals of each cost over the graph (every node's and edge's largest finite
    value), so the weighted heuristic counts seconds and bytes alike."""

    def largest(values: Floats) -> float:
        finite = values[np.isfinite(values)]
        return float(finite.max()) if len(finite) else 0.0

    time_total = sum(largest(n.time) for n in graph.nodes)
    time_total += sum(largest(e.time) for e in graph.edges)
    memory_total = sum(largest(n.memory) for n in graph.nodes)
    memory_total += sum(largest(e.memory) for e in graph.edges if e.memory is not None)
    return time_total or 1.0, memory_total or 1.0


class _State:
    """The graph during elimination: live nodes and edges with their frontiers, the
    marks, the queue of exact eliminations, and what `paths` needs to answer fast."""

    def __init__(
        self, options: list[int], rule: Heuristic | None, scales: tuple[float, float]
    ) -> None:
        self.options = options
        self.rule = rule
        """What heuristic elimination minimizes and ranks tied nodes by. None where
        it conditions instead, and in a run following an anchor: there the anchor
        picks every option, the rule's lead says nothing about it, and ties go to
        the lowest index (which kept the anchored frontiers of issue 31's steps as
        large as before or larger; ranked by the lead they were up to 6 % smaller)."""
        self.scales = scales
        self.nodes: dict[int, _Frontiers] = {}
        self.edges: dict[tuple[int, int], _Frontiers] = {}
        """Keyed (u, v) with u < v; group a * K_v + b for options a of u, b of v."""
        self.neighbours: dict[int, set[int]] = {}
        self.marked: set[int] = set()
        self.tips: dict[int, list[int]] = {}
        """The last marked node of each chain of marks -> the chain."""
        self.touched: set[int] = set()
        """Nodes whose neighbours changed since the marks were last extended."""
        self.heap: list[tuple[int, int]] = []
        """Candidates for exact elimination as (`rank`, node); stale entries are
        re-ranked or skipped when they come up."""
        self.high = 0
        """Live nodes with three or more neighbours."""
        self.recheck_at = math.inf
        """`paths` walks the graph only once no more nodes than this are left."""
        self.assessed: dict[int, tuple[int, float]] = {}
        """`assess` of nodes whose frontiers, edges and neighbours' frontiers have not
        changed since; an entry is dropped when one of them does."""

    @classmethod
    def initial(cls, graph: CostGraph, run: _Run) -> _State:
        state = cls([node.options for node in graph.nodes], run.heuristic, run.scales)
        for index, node in enumerate(graph.nodes):
            state.nodes[index] = _leaf(node.memory, node.time, node.options)
            state.neighbours[index] = set()
        for edge in graph.edges:
            seconds, memory = edge.time, edge.memory_matrix()
            u, v = edge.source, edge.target
            if u > v:
                u, v, seconds, memory = v, u, seconds.T, memory.T
            state.add_edge(u, v, _leaf(memory.ravel(), seconds.ravel(), seconds.size), run)
        state.heap = [(rank, n) for n in range(len(graph.nodes)) if (rank := state.rank(n)) < 3]
        heapq.heapify(state.heap)
        state.touched = set(range(len(graph.nodes)))
        seen: set[int] = set()
        for start in range(len(graph.nodes)):
            if start not in seen:
                state.tips[start] = [start]
                state.marked.add(start)
                seen |= state.component(start)
        return state

    def copy(self) -> _State:
        other = _State(self.options, self.rule, self.scales)
        other.nodes = dict(self.nodes)
        other.edges = dict(self.edges)
        other.neighbours = {n: set(ns) for n, ns in self.neighbours.items()}
        other.marked = set(self.marked)
        other.tips = {tip: list(chain) for tip, chain in self.tips.items()}
        other.touched = set(self.touched)
        other.heap = list(self.heap)
        other.high, other.recheck_at = self.high, self.recheck_at
        other.assessed = dict(self.assessed)
        return other

    def component(self, start: int) -> set[int]:
        found, todo = {start}, [start]
        while todo:
            for n in self.neighbours[todo.pop()]:
                if n not in found:
                    found.add(n)
                    todo.append(n)
        return found

    # -- degrees and the path test ----------------------------------------------

    def _count(self, node: int, sign: int) -> None:
        if len(self.neighbours[node]) > 2:
            self.high += sign

    def _relink(self, u: int, v: int, add: bool) -> None:
        for a, b in ((u, v), (v, u)):
            self.assessed.pop(a, None)
            self._count(a, -1)
            if add:
                self.neighbours[a].add(b)
            else:
                self.neighbours[a].discard(b)
            self._count(a, +1)
            if (rank := self.rank(a)) < 3:
                heapq.heappush(self.heap, (rank, a))
            self.touched.add(a)

    def paths(self) -> bool:
        """Every component is a simple path: no node has three neighbours (counted as
        degrees change), and no component is a cycle.

        Degrees only fall during elimination, so once none is above two, what remains
        are paths and cycles; the nodes the walks from path ends do not reach are on
        cycles. A cycle of L nodes needs L - 2 eliminations to become a path, and each
        elimination removes one node, so the walk is not repeated before then."""
        if self.high or len(self.nodes) > self.recheck_at:
            return False
        seen: set[int] = set()
        for start in self.nodes:
            if len(self.neighbours[start]) <= 1 and start not in seen:
                seen |= self.component(start)
        if len(seen) == len(self.nodes):
            return True
        cycles: list[int] = []
        for start in self.nodes:
            if start not in seen:
                members = self.component(start)
                seen |= members
                cycles.append(len(members))
        self.recheck_at = len(self.nodes) - (min(cycles) - 2)
        return False

    # -- edges -------------------------------------------------------------------

    def edge(self, u: int, a: Ints, v: int, b: Ints) -> tuple[_Frontiers, Ints]:
        """Edge u-v's frontiers and the groups of option pairs (a of u, b of v)."""
        if u < v:
            return self.edges[(u, v)], a * self.options[v] + b
        return self.edges[(v, u)], b * self.options[u] + a

    def add_edge(self, u: int, v: int, frontiers: _Frontiers, run: _Run) -> None:
        """Add edge u-v (frontiers oriented (min, max)); eq. 5 merges it into one there."""
        key = (min(u, v), max(u, v))
        old = self.edges.get(key)
        if old is None:
            self.edges[key] = frontiers
            self._relink(u, v, add=True)
            return
        rows = np.arange(old.groups)
        merged = _combine(run, [(old, rows), (frontiers, rows)], rows, old.groups)
        self.edges[key] = _seal(run.records, merged, (0, 1))
        self.assessed.pop(u, None)
        self.assessed.pop(v, None)
        run.eliminations["edge"] += 1

    def set_node(self, node: int, frontiers: _Frontiers) -> None:
        """Replace `node`'s frontiers; its and its neighbours' `assess` are stale."""
        self.nodes[node] = frontiers
        self.assessed.pop(node, None)
        for other in self.neighbours[node]:
            self.assessed.pop(other, None)

    def remove_node(self, node: int) -> None:
        for other in list(self.neighbours[node]):
            del self.edges[(min(node, other), max(node, other))]
            self._relink(node, other, add=False)
        self._count(node, -1)
        del self.nodes[node], self.neighbours[node]
        if node in self.marked:
            self.marked.discard(node)
            chain = self.tips.pop(node, None)
            while chain and chain[-1] not in self.nodes:
                chain.pop()
            if chain:
                self.tips[chain[-1]] = chain
                self.touched.add(chain[-1])

    # -- marks (Algorithm 2 line 5) ----------------------------------------------

    def extend_marks(self) -> None:
        """Mark the last marked node's single higher-index neighbour, as long as
        there is one: it lies on the linear structure LDP will run along."""
        for tip in [t for t in self.touched if t in self.tips]:
            chain = self.tips.pop(tip)
            node = tip
            while True:
                higher = [n for n in self.neighbours[node] if n > node]
                if len(higher) != 1 or higher[0] in self.marked:
                    break
                node = higher[0]
                self.marked.add(node)
                chain.append(node)
            self.tips[node] = chain
        self.touched.clear()

    # -- choosing what to eliminate ----------------------------------------------

    def rank(self, node: int) -> int:
        """Which exact elimination to do first: 0, a leaf hanging off a node with three
        or more neighbours (a branch, eq. 6: folding it may let the marks run on);
        1, a node with two neighbours (eq. 4); 2, another leaf (the end of a chain
        the marks have not reached, which a branch elimination still folds exactly);
        3, none."""
        neighbours = self.neighbours[node]
        if len(neighbours) == 2:
            return 1
        if len(neighbours) == 1:
            (other,) = neighbours
            return 0 if len(self.neighbours[other]) > 2 else 2
        return 3

    def exact_candidate(self) -> int | None:
        """The unmarked node of least `rank`, lowest index first (program order, so
        eliminations follow the marks along the program)."""
        while self.heap:
            rank, node = self.heap[0]
            if node not in self.nodes or node in self.marked:
                heapq.heappop(self.heap)
                continue
            now = self.rank(node)
            if now == rank:
                return node
            if now < 3:
                heapq.heapreplace(self.heap, (now, node))
            else:
                heapq.heappop(self.heap)
        return None

    def heuristic_candidate(self, among: set[int] | None = None) -> int | None:
        """The node with the most edges (at least three), unmarked ones unless `among`
        is given. Ties go to the node whose option is clearest: the largest lead of
        its best option (`assess`), then the lowest index (only the index without a
        `rule`). A training step has many nodes of equal degree (every layer's
        weight and gradient ops alike); fixing first the ones whose best option leads
        by most, the others' choices are made later with more of the graph folded
        into their neighbours, or exactly once their degree has fallen."""
        pool = sorted(among) if among is not None else sorted(self.nodes)
        degrees = {
            node: len(self.neighbours[node])
            for node in pool
            if among is not None or node not in self.marked
        }
        most = max(degrees.values(), default=0)
        if most <= 2:
            return None
        tied = [node for node, degree in degrees.items() if degree == most]
        if self.rule is None or len(tied) == 1:
            return tied[0]
        return max(tied, key=lambda node: (self.assess(node)[1], -node))

    def marked_candidate(self) -> int | None:
        """Only marked nodes keep the graph from being paths: one of them in a
        component that is not a path, exact elimination first."""
        bad: set[int] = set()
        seen: set[int] = set()
        for start in sorted(self.nodes):
            if start in seen:
                continue
            members = self.component(start)
            seen |= members
            edges = sum(len(self.neighbours[n]) for n in members) // 2
            branching = any(len(self.neighbours[n]) > 2 for n in members)
            if branching or edges != len(members) - 1:
                bad |= members
        for node in sorted(bad):
            if 1 <= len(self.neighbours[node]) <= 2:
                return node
        return self.heuristic_candidate(bad)

    # -- eliminations ------------------------------------------------------------

    def eliminate_node(self, node: int, run: _Run) -> None:
        """Eq. 4: node i between h and j becomes edge h-j. The product e_hi ⊗ o_i is
        reduced per (w, k) before e_ij multiplies it, except where o_i has at most one
        point per option (a node nothing was folded into yet): then it only shifts
        e_hi's frontiers, there is nothing to reduce, and one product of the three
        does the work of two."""
        h, j = sorted(self.neighbours[node])
        kh, ki, kj = self.options[h], self.options[node], self.options[j]
        own = self.nodes[node]
        w, k, p = _grid(kh, ki, kj)
        right, right_groups = self.edge(node, k, j, p)
        if (own.sizes() <= 1).all():
            left, left_groups = self.edge(h, w, node, k)
            terms = [(left, left_groups), (own, k), (right, right_groups)]
        else:
            pair_w, pair_k = _grid(kh, ki)
            left, left_groups = self.edge(h, pair_w, node, pair_k)
            pairs = [(left, left_groups), (own, pair_k)]
            half = _combine(run, pairs, pair_w * ki + pair_k, kh * ki)
            terms = [(half, w * ki + k), (right, right_groups)]
        whole = _combine(run, terms, w * kj + p, kh * kj, k)
        joined = _seal(run.records, whole, (0, 1, 2), node, 3)
        self.remove_node(node)
        run.eliminations["node"] += 1
        self.add_edge(h, j, joined, run)

    def eliminate_branch(self, node: int, run: _Run) -> None:
        """Eq. 6: a node with one neighbour h folds into h's frontiers."""
        (h,) = self.neighbours[node]
        ki, kh = self.options[node], self.options[h]
        k, p = _grid(ki, kh)
        edge, groups = self.edge(node, k, h, p)
        leaf = _combine(run, [(self.nodes[node], k), (edge, groups)], p, kh, k)
        rows = np.arange(kh)
        merged = _combine(run, [(self.nodes[h], rows), (leaf, rows)], rows, kh)
        self.set_node(h, _seal(run.records, merged, (0, 1, 2), node, 3))
        self.remove_node(node)
        run.eliminations["branch"] += 1

    def fix(self, node: int, option: int, run: _Run) -> None:
        """Eq. 7: the node takes `option`; each edge's costs for it move into the
        neighbour's frontiers (the node's own into the first neighbour's, whose records
        say which option the node took)."""
        own = self.nodes[node]
        for n, other in enumerate(sorted(self.neighbours[node])):
            rows = np.arange(self.options[other])
            fixed = np.full(len(rows), option, np.int64)
            edge, groups = self.edge(node, fixed, other, rows)
            if n == 0:
                terms = [(self.nodes[other], rows), (own, fixed), (edge, groups)]
                folded = _combine(run, terms, rows, len(rows), fixed)
                self.set_node(other, _seal(run.records, folded, (0, 1, 2), node, 3))
            else:
                terms = [(self.nodes[other], rows), (edge, groups)]
                folded = _combine(run, terms, rows, len(rows))
                self.set_node(other, _seal(run.records, folded, (0, 1)))
        self.remove_node(node)

    def assess(self, node: int) -> tuple[int, float]:
        """The option heuristic elimination would fix and how far its score leads the
        second best (inf: one feasible option). An option's score under the rule
        (least memory, least time, or least normalized sum) is the node's best point
        for it, plus for each neighbour the least over the neighbour's options of the
        edge's best point and the neighbour's own. Counting the neighbour's frontier
        is what makes the score see past the edge: after branch and node eliminations
        a neighbour carries the subgraphs folded into it, and an option that only
        fits the neighbour's costly options is not cheap. Cached until the node's
        surroundings change."""
        cached = self.assessed.get(node)
        if cached is not None:
            return cached
        assert self.rule is not None
        size = self.options[node]
        score = _least(self.nodes[node], self.rule, self.scales)
        # in index order: a set's order depends on its history, and a copied state's
        # sets (each anchor's run) would sum the same floats in another order
        for other in sorted(self.neighbours[node]):
            a, b = _grid(size, self.options[other])
            edge, groups = self.edge(node, a, other, b)
            reached = _least(edge, self.rule, self.scales)[groups].reshape(size, -1)
            reached += _least(self.nodes[other], self.rule, self.scales)[None, :]
            score = score + reached.min(axis=1)
        best = int(np.argmin(score))
        second = min((v for o, v in enumerate(score.tolist()) if o != best), default=math.inf)
        lead = second - float(score[best]) if math.isfinite(second) else math.inf
        self.assessed[node] = best, lead
        return best, lead

    # -- LDP (Algorithm 3) -------------------------------------------------------

    def chains(self) -> list[list[int]]:
        """Each component's path from its lower-index end."""
        found: list[list[int]] = []
        seen: set[int] = set()
        for start in sorted(self.nodes):
            if start in seen or len(self.neighbours[start]) > 1:
                continue
            path, previous = [start], -1
            while True:
                ahead = [n for n in self.neighbours[path[-1]] if n != previous]
                if not ahead:
                    break
                previous = path[-1]
                path.append(ahead[0])
            seen.update(path)
            found.append(path)
        return found

    def ldp(self, path: list[int], run: _Run) -> _Frontiers:
        """Algorithm 3 along one path: a one-group frontier of the whole path."""
        cumulative = self.nodes[path[0]]
        for step, (before, node) in enumerate(itertools.pairwise(path)):
            run.check(f"in LDP at node {step + 1} of {len(path)}")
            kb, kn = self.options[before], self.options[node]
            k, p = _grid(kb, kn)
            edge, groups = self.edge(before, k, node, p)
            reached = _combine(run, [(cumulative, k), (edge, groups)], p, kn, k)
            rows = np.arange(kn)
            step_frontiers = _combine(run, [(reached, rows), (self.nodes[node], rows)], rows, kn)
            cumulative = _seal(run.records, step_frontiers, (0, 1, 3), before, 2)
        last = path[-1]
        rows = np.arange(self.options[last])
        whole = _combine(run, [(cumulative, rows)], np.zeros_like(rows), 1, rows)
        return _seal(run.records, whole, (0,), last, 1)


def _least(frontiers: _Frontiers, rule: Heuristic, scales: tuple[float, float]) -> Floats:
    """Each group's least value under `rule` over its points (inf for an empty
    group): memory, time, or time and memory each divided by its `scales` total."""
    if rule == "memory":
        values = frontiers.memory
    elif rule == "time":
        values = frontiers.time
    else:
        values = frontiers.time / scales[0] + frontiers.memory / scales[1]
    least = np.full(frontiers.groups, np.inf)
    full = frontiers.sizes() > 0
    if full.any():
        least[full] = np.minimum.reduceat(values, frontiers.starts[:-1][full])
    return least


def _exact(state: _State, run: _Run) -> int | None:
    """Exact eliminations from `state` on until every component is a path (None) or
    none applies: then the node heuristic elimination or conditioning takes next,
    `state` left as it is (so a second call returns the same node at once)."""
    while True:
        run.check(f"with {len(state.nodes)} nodes left")
        state.extend_marks()
        if state.paths():
            return None
        node = state.exact_candidate()
        if node is None:
            node = state.heuristic_candidate()
        if node is None:
            node = state.marked_candidate()
        assert node is not None, "a graph that is not paths has a node to eliminate"
        degree = len(state.neighbours[node])
        if degree == 1:
            state.eliminate_branch(node, run)
        elif degree == 2:
            state.eliminate_node(node, run)
        else:
            return node


def _solve(state: _State, run: _Run) -> _Frontiers:
    """Algorithm 2 from `state` on: eliminate until every component is a path, then
    LDP; a one-group frontier whose ids unroll into whole strategies."""
    while (node := _exact(state, run)) is not None:
        if run.heuristic is None:
            return _condition(state, node, run)
        option = run.anchor[node] if run.anchor is not None else state.assess(node)[0]
        state.fix(node, option, run)
        run.eliminations["heuristic"] += 1
    return _ldp_all(state, run)


def _condition(state: _State, node: int, run: _Run) -> _Frontiers:
    """Exact in place of heuristic elimination: FT once per option of `node`, united
    and reduced (each branch's records already say which option it fixed)."""
    run.eliminations["conditioned"] += 1
    results = []
    for option in range(state.options[node]):
        branch = state.copy()
        branch.fix(node, option, run)
        results.append(_solve(branch, run))
    return _union(results, run)


def _union(results: list[_Frontiers], run: _Run) -> _Frontiers:
    """The reduce of the union of one-group frontiers (ids pass through)."""
    sizes = np.array([len(r.memory) for r in results], np.int64)
    united = _Frontiers(
        np.concatenate([[0], np.cumsum(sizes)]).astype(np.int64),
        np.concatenate([r.memory for r in results]),
        np.concatenate([r.time for r in results]),
        np.concatenate([r.src for r in results]),
    )
    rows = np.arange(len(results))
    return _seal(run.records, _combine(run, [(united, rows)], np.zeros_like(rows), 1), (0,))


def _ldp_all(state: _State, run: _Run) -> _Frontiers:
    """LDP on every path, the components' frontiers combined by product."""
    chains = state.chains()
    run.chain = max(run.chain, sum(len(path) for path in chains))
    total: _Frontiers | None = None
    zero = np.zeros(1, np.int64)
    for path in chains:
        part = state.ldp(path, run)
        if total is None:
            total = part
        else:
            product = _combine(run, [(total, zero), (part, zero)], zero, 1)
            total = _seal(run.records, product, (0, 1))
    assert total is not None
    return total
