"""TensorOpt's additive cost model of a strategy (TensorOpt §2.1, eq. 1-3), as a light
graph the frontier, tiling and ILP searches work on.

A `CostGraph` has one node per choice to make (an op's SOAP configuration, an
argument's layout), each with its options' operator costs: time (compute and
the op's own synchronization, eq. 1's t = t_c + t_s) and memory per device (eq. 1's
m = m_p + m_t). An edge joins two nodes whose options interact: for every pair of
options its time (eq. 2: the collectives re-scheduling a tensor between them), the
bytes it communicates per device (Spartan's tiling cost) and the memory it holds
(0 in eq. 2; a re-scheduled tensor's second copy where the model counts it). An
option pair that cannot be realized (a reader cannot reach that layout) costs `inf`.

A strategy is one option per node; its time and memory are the sums of eq. 3, and
`frontier` of a set of (memory, time) points is Algorithm 1. The graph knows nothing
of IR: `costs.py` builds it from a SOAP problem, and the searches map a strategy back
to configurations by node index. Small graphs can be searched by brute force
(`brute_force_frontier`), which is what the exactness tests compare FT with.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

Choice = tuple[int, ...]
"""One option index per node: a strategy."""

Floats = NDArray[np.float64]


@dataclass(frozen=True)
class CostNode:
    """One choice: its options' time (seconds) and memory per device (bytes)."""

    name: str
    time: Floats
    """Shape (K,): eq. 1's t of each option."""
    memory: Floats
    """Shape (K,): eq. 1's m of each option."""

    def __post_init__(self) -> None:
        if self.time.shape != self.memory.shape or self.time.ndim != 1 or not len(self.time):
            raise ValueError(f"node {self.name}: time and memory must be equal non-empty vectors")

    @property
    def options(self) -> int:
        return len(self.time)


@dataclass(frozen=True)
class CostEdge:
    """Two interacting choices and the cost of each pair of their options."""

    source: int
    target: int
    time: Floats
    """Shape (K_source, K_target): eq. 2's t_x; inf where the pair cannot be realized."""
    bytes: Floats
    """Shape (K_source, K_target): bytes communicated per device (inf where impossible)."""
    memory: Floats | None = None
    """Shape (K_source, K_target): bytes per device the pair holds beyond its nodes'
    (None: nothing, eq. 2)."""

    def __post_init__(self) -> None:
        if self.source == self.target:
            raise ValueError(f"edge {self.source}-{self.target} joins a node to itself")
        if self.time.shape != self.bytes.shape or (
            self.memory is not None and self.memory.shape != self.time.shape
        ):
            raise ValueError(f"edge {self.source}-{self.target}: matrices of different shapes")

    def memory_matrix(self) -> Floats:
        return np.zeros_like(self.time) if self.memory is None else self.memory


@dataclass(frozen=True)
class CostGraph:
    """Nodes and the edges between them (several edges may join one pair)."""

    nodes: tuple[CostNode, ...]
    edges: tuple[CostEdge, ...]
    fixed_memory: float = 0.0
    """Bytes per device every strategy holds (what no choice changes)."""
    fixed_time: float = 0.0
    """Seconds every strategy takes (ops with a single option folded in)."""

    def __post_init__(self) -> None:
        for edge in self.edges:
            ends = ((edge.source, edge.time.shape[0]), (edge.target, edge.time.shape[1]))
            for end, count in ends:
                if not 0 <= end < len(self.nodes) or self.nodes[end].options != count:
                    raise ValueError(f"edge {edge.source}-{edge.target} does not fit its nodes")

    @property
    def strategies(self) -> int:
        """How many strategies there are (the product of the option counts)."""
        return math.prod(node.options for node in self.nodes)

    def cost(self, choice: Sequence[int]) -> tuple[float, float]:
        """Eq. 3: (memory per device, time) of a strategy."""
        picked = list(zip(self.nodes, choice, strict=True))
        memory = self.fixed_memory + sum(node.memory[k] for node, k in picked)
        time = self.fixed_time + sum(node.time[k] for node, k in picked)
        for edge in self.edges:
            a, b = choice[edge.source], choice[edge.target]
            time += edge.time[a, b]
            if edge.memory is not None:
                memory += edge.memory[a, b]
        return float(memory), float(time)

    def communicated(self, choice: Sequence[int]) -> float:
        """Bytes per device a strategy communicates over its edges (Spartan's cost)."""
        return float(
            sum(edge.bytes[choice[edge.source], choice[edge.target]] for edge in self.edges)
        )

    def brute_force_frontier(self, limit: int = 1 << 16) -> list[tuple[float, float, Choice]]:
        """The exact frontier by enumerating every strategy (ValueError over `limit`):
        what the exactness tests compare the searches with."""
        if self.strategies > limit:
            raise ValueError(f"{self.strategies} strategies, more than the limit {limit}")
        points = []
        for choice in itertools.product(*(range(n.options) for n in self.nodes)):
            memory, time = self.cost(choice)
            if math.isfinite(time):
                points.append((memory, time, tuple(choice)))
        return frontier(points)


def frontier[P: tuple[float, float, object]](points: Sequence[P]) -> list[P]:
    """Algorithm 1: the points no other point beats in both memory and time (for equal
    points, the first), by increasing memory (so decreasing time)."""
    kept: list[P] = []
    best = math.inf
    for point in sorted(points, key=lambda p: (p[0], p[1])):
        if point[1] < best:
            kept.append(point)
            best = point[1]
    return kept
