"""Vertex partitions of an input graph: which vertices each device owns.

ROC (Jia thesis §4.4.2) gives each device a range of consecutively numbered vertices
and their in-edges, so a partition is `parts + 1` bounds over a vertex order. Methods
that do not keep ranges (METIS) renumber: `order` lists the vertices device by device,
and device `d` owns `order[bounds[d]:bounds[d + 1]]`. For range methods `order` is the
identity.

Everything here works on the light `Csr` of `tasoc.ir.graph_data`, never on IR.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from tasoc.ir.graph_data import Csr, GraphDataError


class PartitionError(GraphDataError):
    """A partition that cannot be made; the message is one line for the user."""


@dataclass(frozen=True, eq=False)
class VertexPartition:
    """`order` (int64, every vertex once) and `bounds` (int64, parts + 1 entries,
    non-decreasing, from 0 to the vertex count)."""

    order: np.ndarray
    bounds: np.ndarray

    @property
    def parts(self) -> int:
        return len(self.bounds) - 1

    def sizes(self) -> np.ndarray:
        """Vertices each device owns."""
        return np.diff(self.bounds)

    def owner(self) -> np.ndarray:
        """The device of every vertex, indexed by the vertex's own number."""
        owners = np.empty(len(self.order), dtype=np.int64)
        owners[self.order] = np.repeat(np.arange(self.parts), self.sizes())
        return owners

    def is_ranges(self) -> bool:
        """Whether every device owns consecutively numbered vertices."""
        return bool(np.array_equal(self.order, np.arange(len(self.order))))


@dataclass(frozen=True, eq=False)
class PartitionRequest:
    """What a partitioner is asked: split `graph` for `parts` devices, for a GNN whose
    layers map `d_in` to `d_out` features (`layers`, in order; the learned cost model
    prices each layer), on `machine` (a preset name: where per-partition times are
    measured or simulated), `seed` for anything random."""

    graph: Csr
    parts: int
    layers: tuple[tuple[int, int], ...]
    machine: str = "cpu"
    seed: int = 0


Partitioner = Callable[[PartitionRequest], VertexPartition]
"""A partitioning method: `PARTITIONERS[name](request)`."""


def check_parts(graph: Csr, parts: int) -> None:
    """Refuse a partition count a graph cannot take (every device owns a vertex)."""
    if parts < 1:
        raise PartitionError(f"a partition needs at least one part, got {parts}")
    if parts > graph.vertices:
        raise PartitionError(
            f"cannot split {graph.vertices} vertices into {parts} parts: "
            "every device must own at least one vertex"
        )


def ranges(graph: Csr, bounds: np.ndarray) -> VertexPartition:
    """The range partition with these bounds, checked."""
    bounds = np.asarray(bounds, dtype=np.int64)
    if bounds[0] != 0 or bounds[-1] != graph.vertices or np.any(np.diff(bounds) < 1):
        raise PartitionError(
            f"bounds {bounds.tolist()} do not cover 0..{graph.vertices} with non-empty parts"
        )
    return VertexPartition(np.arange(graph.vertices, dtype=np.int64), bounds)


def equal_vertex(graph: Csr, parts: int) -> VertexPartition:
    """Ranges of (nearly) equal vertex counts: FlexFlow's equal partitioning."""
    check_parts(graph, parts)
    return ranges(graph, np.linspace(0, graph.vertices, parts + 1).round().astype(np.int64))


def _equal_edge(request: PartitionRequest) -> VertexPartition:
    from tasoc.passes.soap.roc.balance import equal_edge

    return equal_edge(request.graph, request.parts)


def _metis(request: PartitionRequest) -> VertexPartition:
    from tasoc.passes.soap.roc.balance import metis

    return metis(request.graph, request.parts, request.seed)


def _roc(request: PartitionRequest) -> VertexPartition:
    from tasoc.passes.soap.roc.learned import roc_partition

    return roc_partition(request).partition


PARTITIONERS: dict[str, Partitioner] = {
    "equal-vertex": lambda request: equal_vertex(request.graph, request.parts),
    "equal-edge": _equal_edge,
    "metis": _metis,
    "roc": _roc,
}
"""The partitioning methods by name: `soap-shard{search=roc partitioner=NAME}`. The
others live in `balance` (equal-edge, METIS) and `learned` (ROC's learned
partitioner), which build on this module, so they are imported when first asked for."""
