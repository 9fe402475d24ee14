"""Range partitions that balance a per-vertex cost, and the baselines built on them.

ROC (Jia thesis §4.4.2) gives each device a range of consecutive vertices, so a
partition is `parts - 1` split points, and with the prefix sums of the vertices'
costs every range's cost is a subtraction. `balanced_bounds` finds the split points
whose most expensive range is cheapest: a bisection on that bottleneck, each probe
placing the split points greedily by binary search on the prefix sums (O(parts log V)
per probe). It starts from the thesis' proportional split (split point `k` where the
prefix reaches `k / parts` of the total), so it is never worse than that.

`equal_edge` balances in-edges this way (Gemini's and PowerGraph's strategy, the
thesis' second baseline); `metis` is METIS (pymetis) on the symmetric graph.
"""

from __future__ import annotations

import numpy as np

from tasoc.ir.graph_data import Csr
from tasoc.passes.soap.roc.partition import (
    PartitionError,
    VertexPartition,
    check_parts,
    ranges,
)

BISECTIONS = 60
"""Bisection steps on the bottleneck cost: 2^-60 of the initial gap, float precision."""


def proportional_bounds(cumulative: np.ndarray, parts: int) -> np.ndarray:
    """Split points where the prefix sum `cumulative` (V + 1 entries from 0) reaches
    `k / parts` of the total, each moved just enough that every range is non-empty."""
    vertices = len(cumulative) - 1
    targets = cumulative[-1] * np.arange(1, parts) / parts
    inner = np.searchsorted(cumulative, targets, side="left")
    bounds = np.concatenate([[0], inner, [vertices]]).astype(np.int64)
    return _non_empty(bounds)


def _non_empty(bounds: np.ndarray) -> np.ndarray:
    """`bounds` with each inner bound clamped so range `k` has at least one vertex and
    leaves one for every later range (bound k in [k, V - parts + k])."""
    parts, vertices = len(bounds) - 1, bounds[-1]
    k = np.arange(parts + 1)
    low = np.maximum.accumulate(np.maximum(bounds, k) - k) + k
    return np.minimum(low, vertices - parts + k)


def bottleneck(cumulative: np.ndarray, bounds: np.ndarray) -> float:
    """The cost of the most expensive range."""
    return float(np.max(np.diff(cumulative[bounds])))


def _greedy(cumulative: np.ndarray, parts: int, limit: float) -> np.ndarray | None:
    """Bounds that fill each range up to `limit` (at least one vertex each, leaving
    one for every later range), or None when the last range still exceeds it."""
    vertices = len(cumulative) - 1
    bounds = np.zeros(parts + 1, dtype=np.int64)
    for k in range(1, parts):
        start = bounds[k - 1]
        stop = int(np.searchsorted(cumulative, cumulative[start] + limit, side="right")) - 1
        stop = min(max(stop, start + 1), vertices - (parts - k))
        if cumulative[stop] - cumulative[start] > limit:
            return None
        bounds[k] = stop
    bounds[parts] = vertices
    if cumulative[vertices] - cumulative[bounds[parts - 1]] > limit:
        return None
    return bounds


def balanced_bounds(costs: np.ndarray, parts: int) -> np.ndarray:
    """Range bounds (parts + 1, non-empty ranges) minimising the largest range's total
    of `costs` (non-negative, one per vertex in order)."""
    costs = np.asarray(costs, dtype=np.float64)
    if np.any(costs < 0) or not np.all(np.isfinite(costs)):
        raise PartitionError("vertex costs must be finite and non-negative")
    cumulative = np.concatenate([[0.0], np.cumsum(costs)])
    best = proportional_bounds(cumulative, parts)
    high = bottleneck(cumulative, best)
    low = max(cumulative[-1] / parts, float(costs.max(initial=0.0)))
    for _ in range(BISECTIONS):
        if high - low <= 1e-12 * max(high, 1e-300):
            break
        middle = (low + high) / 2
        found = _greedy(cumulative, parts, middle)
        if found is None:
            low = middle
        else:
            best, high = found, bottleneck(cumulative, found)
    return best


def equal_edge(graph: Csr, parts: int) -> VertexPartition:
    """Ranges of (nearly) equal in-edge counts: the balanced split of the degrees
    (each vertex also counts one, so runs of isolated vertices are split too)."""
    check_parts(graph, parts)
    return ranges(graph, balanced_bounds(graph.degrees() + 1.0, parts))


def metis(graph: Csr, parts: int, seed: int = 0) -> VertexPartition:
    """METIS's k-way partition of the symmetric graph, vertices weighted by in-degree
    + 1 so parts balance aggregation work as well as vertices, edge cut minimised.
    `order` lists part 0's vertices, then part 1's, ..., each ascending. A part METIS
    leaves empty (it may, on tiny graphs) takes a vertex from the largest part."""
    check_parts(graph, parts)
    if parts == 1:
        return ranges(graph, np.array([0, graph.vertices]))
    import pymetis

    options = pymetis.Options()
    options.seed = seed
    _, membership = pymetis.part_graph(
        parts,
        pymetis.CSRAdjacency(graph.indptr, graph.indices),
        vweights=(graph.degrees() + 1).tolist(),
        options=options,
    )
    membership = np.asarray(membership, dtype=np.int64)
    for empty in np.flatnonzero(np.bincount(membership, minlength=parts) == 0):
        largest = int(np.argmax(np.bincount(membership, minlength=parts)))
        membership[np.flatnonzero(membership == largest)[-1]] = empty
    order = np.argsort(membership, kind="stable")
    bounds = np.zeros(parts + 1, dtype=np.int64)
    np.cumsum(np.bincount(membership, minlength=parts), out=bounds[1:])
    return VertexPartition(order.astype(np.int64), bounds)
