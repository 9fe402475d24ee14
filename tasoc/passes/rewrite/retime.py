"""Re-timing the best candidates end to end before choosing (issue: fusion misranks).

A cost model prices ops (with a model of XLA's fusion), but XLA decides what it fuses,
how it lays out tensors and which kernels it picks, so the graph a search predicts
fastest is not always the fastest compiled program. With `retime=N`, the pass
compiles the input and the N cheapest distinct graphs the search found, times them in
interleaved rounds on the current JAX device (`tasoc.cost.time_rounds`), and keeps
the input unless a candidate is *measurably* faster: faster than the input in at
least `WIN_SHARE` of the rounds. Of those, it keeps the one with the lowest median.
A candidate merely as fast as the input is not kept: a change that this backend
cannot tell from noise may still cost on another (onnxruntime runs squeezenet's
batched poolings about 4% slower, where JAX sees no difference).
"""

from __future__ import annotations

import statistics
from collections.abc import Sequence
from dataclasses import dataclass

from tasoc.cost import time_rounds
from tasoc.ir.dag import Dag

WIN_SHARE = 0.85
"""The share of rounds a candidate must beat the input in to replace it: 8 of 9. A
candidate that is not faster wins each round with probability 1/2 or less, so 8 of 9
by chance happens at most 2% of the time."""


@dataclass(frozen=True)
class Timed:
    """One graph as timed: its predicted cost, measured median seconds per run, and in
    how many rounds it ran faster than the input (None for the input itself)."""

    graph: Dag
    predicted: float
    measured_s: float
    wins: int | None


def retime(
    original: Dag,
    original_cost: float,
    candidates: Sequence[tuple[Dag, float]],
    count: int,
    repeats: int = 9,
) -> list[Timed]:
    """`original` and the `count` cheapest other `candidates` (cheapest first), timed
    end to end: the graph kept first (see the module docstring), then the others,
    fastest first."""
    chosen = [(original, original_cost)]
    chosen += [(graph, cost) for graph, cost in candidates if graph != original][:count]
    rounds = time_rounds([graph for graph, _ in chosen], repeats=repeats)
    baseline = rounds[0]
    timed = [
        Timed(
            graph,
            cost,
            statistics.median(samples),
            None if index == 0 else sum(s < b for s, b in zip(samples, baseline, strict=True)),
        )
        for index, ((graph, cost), samples) in enumerate(zip(chosen, rounds, strict=True))
    ]
    faster = [t for t in timed[1:] if t.wins is not None and t.wins >= WIN_SHARE * repeats]
    kept = min(faster, key=lambda t: t.measured_s) if faster else timed[0]
    others = sorted((t for t in timed if t is not kept), key=lambda t: t.measured_s)
    return [kept, *others]
