"""ROC's vertex features (Jia thesis Table 4.2) and their prefix sums.

The learned cost model prices a GNN layer on a set of vertices as a weighted sum of
per-vertex features, so a set's features are the sums of its vertices' (eq. 4.6).
For a vertex `v` with in-neighbours `N(v)`, split into runs `c_1 .. c_k` of
consecutively numbered vertices:

- x1 = 1 (the vertex itself: its share of the dense transform),
- x2 = |N(v)| (its edges: the aggregation's adds),
- x3 = k (how many runs: one scattered read each),
- x4 = sum_i ceil(|c_i| / G) (memory accesses to load the neighbours),
- x5 = sum_i ceil(|c_i| * d_in / G) (memory accesses to load their activations),

where G is the device's memory-access granularity (`Device.access_granularity`: 32,
a warp, on the GPU presets, as the thesis' WS; 16 floats, a 64-byte cache line, on
CPUs). Only x5 depends on the layer (through d_in).

Prefix sums over a vertex order make any range's features two lookups (§4.4.2), so a
balanced partition needs only O(parts log V) binary searches. Everything is NumPy
over the `Csr`: one pass over the edges finds the runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

import numpy as np

from tasoc.cost.gnn import Runs
from tasoc.ir.graph_data import Csr

FEATURES: Final = ("vertex", "neighbours", "runs", "neighbour-accesses", "activation-accesses")
"""The names of x1 .. x5, in column order."""


def vertex_features(
    graph: Csr, d_in: int, granularity: int, runs: Runs | None = None
) -> np.ndarray:
    """x1 .. x5 of every vertex for a layer reading `d_in` features: (V, 5) float64."""
    if d_in < 1 or granularity < 1:
        raise ValueError(f"need d_in >= 1 and granularity >= 1, got {d_in} and {granularity}")
    runs = runs if runs is not None else Runs.of(graph)
    x = np.empty((graph.vertices, len(FEATURES)), dtype=np.float64)
    x[:, 0] = 1.0
    x[:, 1] = graph.degrees()
    x[:, 2] = runs.per_vertex(np.ones_like(runs.length, dtype=np.float64))
    x[:, 3] = runs.per_vertex(np.ceil(runs.length / granularity))
    x[:, 4] = runs.per_vertex(np.ceil(runs.length * d_in / granularity))
    return x


@dataclass(frozen=True, eq=False)
class PrefixFeatures:
    """Prefix sums of each layer's vertex features over a vertex order: `sums[l][k]` is
    the features of layer `l` summed over the first `k` vertices of `order`
    (shape (layers, V + 1, 5)), so `range_sum(l, a, b)` is the features of
    `order[a:b]` in O(1)."""

    order: np.ndarray
    sums: np.ndarray

    @classmethod
    def of(
        cls,
        graph: Csr,
        d_ins: tuple[int, ...],
        granularity: int,
        order: np.ndarray | None = None,
    ) -> PrefixFeatures:
        """The prefix sums of every layer's features (one per entry of `d_ins`) over
        `order` (the identity when None)."""
        order = np.arange(graph.vertices) if order is None else np.asarray(order)
        runs = Runs.of(graph)
        sums = np.zeros((len(d_ins), graph.vertices + 1, len(FEATURES)))
        for layer, d_in in enumerate(d_ins):
            np.cumsum(
                vertex_features(graph, d_in, granularity, runs)[order], axis=0, out=sums[layer, 1:]
            )
        return cls(order, sums)

    def range_sum(self, layer: int, start: int, stop: int) -> np.ndarray:
        """Features of layer `layer` summed over `order[start:stop]`."""
        return self.sums[layer, stop] - self.sums[layer, start]

    def parts(self, bounds: np.ndarray) -> np.ndarray:
        """Each layer's features of each part `order[bounds[p]:bounds[p + 1]]`:
        (layers, parts, 5)."""
        at = self.sums[:, np.asarray(bounds)]
        return np.diff(at, axis=1)
