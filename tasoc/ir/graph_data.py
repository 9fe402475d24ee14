"""Input graphs for graph neural networks: the adjacency a GNN program aggregates over.

A graph is a `Csr` of in-edges: vertex `v` receives from `indices[indptr[v]:indptr[v+1]]`,
sorted, no duplicates, no self loops (a GNN layer adds each vertex's own term itself,
as GCN's A + I does, so a self loop in the data would count it twice). Vertices are
numbered 0..V-1; the numbering matters, since ROC partitions a graph into ranges of
consecutive vertices (Jia thesis §4.4.2) and its cost model counts runs of
consecutively numbered neighbours (Table 4.2).

Where graphs come from:

- `stand_in(name, scale, seed)`: a synthetic graph with the statistics of one of ROC's
  datasets (thesis Table 4.4: vertices, edges, feature and label sizes), scaled. These
  are stand-ins, not the datasets: degrees follow a power law (Chung-Lu: each edge's
  endpoints drawn in proportion to per-vertex weights), part of each vertex's edges stay
  within a window of nearby numbers (the locality crawled and citation data have), and
  the graph is symmetric, as the GNN datasets are. Seeded: the same arguments give the
  same graph on every machine.
- `small(name)`: small real graphs that ship with networkx, for tests.
- `from_edges(sources, targets, vertices)`: a user's edge list, checked.

This module is pure NumPy (networkx only for `small`), so the IR, the passes and the
model zoo can all read it.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import MappingProxyType
from typing import Final

import numpy as np


class GraphDataError(ValueError):
    """A graph that cannot be used as given; the message is one line for the user."""


@dataclass(frozen=True)
class DatasetStats:
    """One row of ROC's Table 4.4 (Jia thesis §4.7.1). `edges` counts directed
    edges as the table does (both directions of an undirected edge, and the table's
    counts include each vertex's self loop: Pubmed's 44,338 undirected citations give
    2 x 44,338 + 19,717 = 108,393 against the table's 108,365)."""

    vertices: int
    edges: int
    features: int
    labels: int

    def scaled(self, scale: float) -> tuple[int, int]:
        """(vertices, directed edges without self loops) of a stand-in at `scale`,
        keeping the average degree."""
        vertices = max(2, round(self.vertices * scale))
        loops_free = max(0, self.edges - self.vertices)
        edges = round(loops_free * vertices / self.vertices)
        edges = min(edges, vertices * (vertices - 1))
        return vertices, edges - edges % 2


DATASETS: Final = MappingProxyType(
    {
        "pubmed": DatasetStats(19_717, 108_365, 500, 3),
        "ppi": DatasetStats(56_944, 1_612_348, 700, 121),
        "reddit": DatasetStats(232_965, 114_848_857, 602, 41),
        "amazon": DatasetStats(9_430_088, 231_594_310, 300, 24),
    }
)
"""ROC's four datasets (Table 4.4): the stand-ins' statistics."""

SMALL_GRAPHS: Final = (
    "karate_club",
    "davis_southern_women",
    "florentine_families",
    "les_miserables",
)
"""Real graphs that ship with networkx (`networkx.<name>_graph()`), for tests."""

MAX_EDGES: Final = 1 << 25
"""Edges a stand-in may have (about 33 million: a few GiB while it is built, on a
24 GB machine): larger scales are refused with a message rather than exhausting
memory. Reddit and Amazon at full size are over it."""


@dataclass(frozen=True, eq=False)
class Csr:
    """In-edges in compressed sparse rows: `indptr` (int64, V + 1 entries) and
    `indices` (int32, E sources, sorted within each row)."""

    indptr: np.ndarray
    indices: np.ndarray

    @property
    def vertices(self) -> int:
        return len(self.indptr) - 1

    @property
    def edges(self) -> int:
        return len(self.indices)

    def degrees(self) -> np.ndarray:
        """In-degree of every vertex (int64)."""
        return np.diff(self.indptr)

    def targets(self) -> np.ndarray:
        """The receiving vertex of every edge, aligned with `indices` (int32)."""
        return np.repeat(np.arange(self.vertices, dtype=np.int32), self.degrees())

    def isolated(self) -> int:
        """Vertices without in-edges: their aggregation is over the empty set."""
        return int(np.count_nonzero(self.degrees() == 0))


def from_edges(sources: np.ndarray, targets: np.ndarray, vertices: int) -> Csr:
    """The in-edge CSR of the directed edges `sources[i] -> targets[i]`.

    Refused, with one line each: an index outside 0..vertices-1, a self loop (the
    layers add each vertex's own term), a repeated edge. Isolated vertices are
    allowed: every aggregation defines its value over no neighbours."""
    sources = np.asarray(sources)
    targets = np.asarray(targets)
    if sources.shape != targets.shape or sources.ndim != 1:
        raise GraphDataError(
            f"an edge list is two 1-D arrays of equal length, got shapes "
            f"{sources.shape} and {targets.shape}"
        )
    if vertices < 1:
        raise GraphDataError(f"a graph needs at least one vertex, got {vertices}")
    if not (np.issubdtype(sources.dtype, np.integer) and np.issubdtype(targets.dtype, np.integer)):
        raise GraphDataError("edge endpoints must be integers")
    for side, ends in (("source", sources), ("target", targets)):
        bad = np.flatnonzero((ends < 0) | (ends >= vertices))
        if bad.size:
            raise GraphDataError(
                f"edge {bad[0]} has {side} {ends[bad[0]]}, outside the {vertices} "
                f"vertices 0..{vertices - 1}"
            )
    loops = np.flatnonzero(sources == targets)
    if loops.size:
        raise GraphDataError(
            f"edge {loops[0]} is a self loop on vertex {sources[loops[0]]} "
            f"({loops.size} in all): GNN layers add each vertex's own term, remove them"
        )
    order = np.lexsort((sources, targets))
    sources, targets = sources[order].astype(np.int64), targets[order].astype(np.int64)
    repeated = np.flatnonzero((sources[1:] == sources[:-1]) & (targets[1:] == targets[:-1]))
    if repeated.size:
        i = repeated[0]
        raise GraphDataError(f"edge {sources[i]} -> {targets[i]} appears more than once")
    indptr = np.zeros(vertices + 1, dtype=np.int64)
    np.cumsum(np.bincount(targets, minlength=vertices), out=indptr[1:])
    return Csr(indptr, sources.astype(np.int32))


def stand_in(
    name: str, *, scale: float = 1.0, seed: int = 0, locality: float = 0.5, gamma: float = 2.5
) -> Csr:
    """A symmetric synthetic graph with the statistics of dataset `name` at `scale`.

    Degrees follow a power law of exponent `gamma` (Chung-Lu weights, assigned to
    vertices in a seeded random order); a `locality` share of each edge's partners
    is drawn within a window of nearby vertex numbers, the rest from the whole
    graph. Duplicates and self loops are dropped and redrawn until the edge count
    is reached, so the average degree is the dataset's."""
    if name not in DATASETS:
        raise GraphDataError(f"unknown graph '{name}'; known: {', '.join(DATASETS)}")
    if not 0 < scale <= 1:
        raise GraphDataError(f"scale must be in (0, 1], got {scale}")
    if not 0 <= locality <= 1 or gamma <= 2:
        raise GraphDataError(f"need 0 <= locality <= 1 and gamma > 2, got {locality}, {gamma}")
    vertices, edges = DATASETS[name].scaled(scale)
    if edges > MAX_EDGES:
        raise GraphDataError(
            f"graph '{name}' at scale {scale} has {edges:,} edges, over the "
            f"{MAX_EDGES:,} tasoc builds: use a smaller scale"
        )
    rng = np.random.default_rng(seed)
    weights = rng.permutation((np.arange(vertices) + 1.0) ** (-1.0 / (gamma - 1.0)))
    cumulative = np.cumsum(weights)
    cumulative /= cumulative[-1]
    window = max(1, round(2 * edges / vertices))
    wanted = edges // 2
    keys = np.empty(0, dtype=np.int64)
    while keys.size < wanted:
        draw = max(1024, round(1.2 * (wanted - keys.size)))
        ends = np.searchsorted(cumulative, rng.random(draw), side="right")
        local = rng.random(draw) < locality
        partners = np.searchsorted(cumulative, rng.random(draw), side="right")
        offsets = rng.integers(-window, window + 1, draw)
        partners[local] = np.clip(ends[local] + offsets[local], 0, vertices - 1)
        low, high = np.minimum(ends, partners), np.maximum(ends, partners)
        fresh = (low * vertices + high)[low != high]
        keys = np.unique(np.concatenate([keys, fresh]))
    keys = rng.permutation(keys)[:wanted]
    low, high = np.divmod(keys, vertices)
    return from_edges(np.concatenate([low, high]), np.concatenate([high, low]), vertices)


def small(name: str) -> Csr:
    """A small real graph from networkx, made symmetric, self loops dropped."""
    if name not in SMALL_GRAPHS:
        raise GraphDataError(f"unknown small graph '{name}'; known: {', '.join(SMALL_GRAPHS)}")
    import networkx

    graph = networkx.convert_node_labels_to_integers(getattr(networkx, f"{name}_graph")())
    pairs = np.array([(u, v) for u, v in graph.edges() if u != v], dtype=np.int64)
    pairs = np.unique(np.sort(pairs, axis=1), axis=0)
    return from_edges(
        np.concatenate([pairs[:, 0], pairs[:, 1]]),
        np.concatenate([pairs[:, 1], pairs[:, 0]]),
        graph.number_of_nodes(),
    )
