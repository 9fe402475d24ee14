"""Re-timing the best candidates end to end before choosing (issue: fusion misranks).

A cost model prices ops (with a model of XLA's fusion), but XLA decides what it fuses,
how it lays out tensors and which kernels it picks, so the graph a search predicts
fastest is not always the fastest compiled program. With `retime=N`, the pass
compiles the input and the N cheapest distinct graphs the search found, times them
interleaved on the current JAX device (`tasoc.cost.time_end_to_end`), and keeps the
fastest, the input included: a search never returns a graph measured slower than
what it was given.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from tasoc.cost import time_end_to_end
from tasoc.ir.dag import Dag


@dataclass(frozen=True)
class Timed:
    """One graph as timed: its predicted cost and measured median seconds per run."""

    graph: Dag
    predicted: float
    measured_s: float


def retime(
    original: Dag,
    original_cost: float,
    candidates: Sequence[tuple[Dag, float]],
    count: int,
    repeats: int = 9,
) -> list[Timed]:
    """`original` and the `count` cheapest other `candidates` (cheapest first), timed
    end to end; fastest first."""
    chosen = [(original, original_cost)]
    chosen += [(graph, cost) for graph, cost in candidates if graph != original][:count]
    seconds = time_end_to_end([graph for graph, _ in chosen], repeats=repeats)
    timed = [Timed(g, cost, s) for (g, cost), s in zip(chosen, seconds, strict=True)]
    return sorted(timed, key=lambda t: t.measured_s)
