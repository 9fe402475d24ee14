"""Re-timing the best candidates end to end before choosing (issue: fusion misranks).

A cost model prices ops (with a model of XLA's fusion), but XLA decides what it fuses,
how it lays out tensors and which kernels it picks, so the graph a search predicts
fastest is not always the fastest compiled program. With `retime=N`, the pass
compiles the input and the N cheapest distinct graphs the search found, times them in
interleaved rounds on the current JAX device (`tasoc.cost.measured.end_to_end_sampler`), and
keeps the input unless a candidate is *measurably* faster: each round pairs the
candidate's sample with the input's, and the candidate is kept only when the
`CONFIDENCE` interval of the median of its per-round speedups (input / candidate)
lies above 1 (`median_interval`: the sign test's distribution-free interval, so a
load spike in a round or two moves neither end). Of those, it keeps the one with the
lowest median. A candidate merely as fast as the input is not kept: a change that
this backend cannot tell from noise may still cost on another (onnxruntime runs
squeezenet's batched poolings about 4% slower, where JAX sees no difference). The
report gives every candidate's interval, and the summary says why the input was
kept (`measured 0.97-1.04x, not significant`).

Re-timing runs under the pass's deadline. The input is compiled first; a candidate
only while the time left covers another compile as long as the input's; after the
first round, only the candidates whose remaining rounds fit in the time left are
timed on. When no candidate could be timed, nothing was measured against the input,
and the input is kept. A compile is waited for only until the deadline
(`Deadline.wait_for`): on a loaded machine, where XLA compiles several times slower,
a compile still running at the deadline is abandoned rather than waited out, so the
deadline is overrun by at most one sample round longer than expected.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from tasoc.cost.measured import end_to_end_sampler
from tasoc.ir.dag import Dag
from tasoc.passes.search import Deadline, SearchOutcome, StopReason, speedup

CONFIDENCE = 0.95
"""The least coverage of the interval a candidate's median speedup must lie above 1 in.
With `REPEATS` = 9 rounds the interval is the 2nd to the 8th of the sorted per-round
speedups (96.1 %): a candidate not faster than the input clears it by chance at most
2 % of the time."""

REPEATS = 9
"""Interleaved rounds: each program gives one sample (≥ 20 ms of calls) per round."""


def median_interval(values: Sequence[float], confidence: float = CONFIDENCE) -> tuple[float, float]:
    """A distribution-free interval for the median of `values`: the order statistics
    x(k) and x(n+1-k), k the largest with P(Binomial(n, 1/2) < k) <= (1 - confidence)/2,
    which cover the median with at least `confidence` whatever the distribution (the
    sign test's interval). Too few values for any such k: (0, inf), never significant."""
    n, ordered = len(values), sorted(values)

    def below(k: int) -> float:  # P(Binomial(n, 1/2) <= k), summed (scipy.stats: 1 s to import)
        return sum(math.comb(n, i) for i in range(k + 1)) / 2**n

    k = 0
    while k < n // 2 and below(k) <= (1 - confidence) / 2:
        k += 1
    if k == 0:
        return 0.0, math.inf
    return ordered[k - 1], ordered[n - k]


@dataclass(frozen=True)
class Timed:
    """One graph as timed: its predicted cost, measured median seconds per run, and the
    interval of its median per-round speedup over the input (`median_interval`; None
    for the input itself)."""

    graph: Dag
    predicted: float
    measured_s: float
    interval: tuple[float, float] | None

    @property
    def significant(self) -> bool:
        """Measurably faster than the input: its interval lies above 1."""
        return self.interval is not None and self.interval[0] > 1


@dataclass(frozen=True)
class Retiming:
    """What re-timing measured."""

    timed: list[Timed]
    """The graph kept first, then the others, fastest first; empty when no candidate
    could be timed against the input in time (the input is then kept)."""
    cut_short: bool
    """The deadline left candidates untimed that `count` asked for."""
    seconds: float


def retime(
    original: Dag,
    original_cost: float,
    candidates: Sequence[tuple[Dag, float]],
    count: int,
    deadline: Deadline,
    seed: int = 0,
    repeats: int = REPEATS,
    fold_weights: bool = True,
) -> Retiming:
    """`original` and the `count` cheapest other `candidates` (cheapest first), timed
    end to end by `deadline` on inputs drawn with `seed` (see the module docstring),
    their weight-only values computed once before the runs unless `fold_weights` is
    False (a training step, whose weights change every step)."""
    phase = deadline.share(1.0)  # all the time left, counted from now: re-timing's own
    chosen = [(original, original_cost)]
    chosen += [(graph, cost) for graph, cost in candidates if graph != original][:count]
    samplers = _compiled([graph for graph, _ in chosen], phase, seed, fold_weights)
    rounds = _rounds(samplers, repeats, phase)
    cut_short = len(rounds) < len(chosen)
    if len(rounds) < 2:
        return Retiming([], cut_short, phase.elapsed())
    baseline = rounds[0]
    timed = [
        Timed(
            graph,
            cost,
            statistics.median(samples),
            None
            if index == 0
            else median_interval([b / s for s, b in zip(samples, baseline, strict=True)]),
        )
        for index, ((graph, cost), samples) in enumerate(zip(chosen, rounds, strict=False))
    ]
    faster = [t for t in timed[1:] if t.significant]
    kept = min(faster, key=lambda t: t.measured_s) if faster else timed[0]
    others = sorted((t for t in timed if t is not kept), key=lambda t: t.measured_s)
    return Retiming([kept, *others], cut_short, phase.elapsed())


Sampler = Callable[[], float]
"""One sample of a compiled program: seconds per call (`end_to_end_sampler`)."""


def _compiled(
    graphs: Sequence[Dag], deadline: Deadline, seed: int, fold_weights: bool
) -> list[Sampler]:
    """Samplers of the first `graphs` there is time to compile: the input's (unless the
    deadline has passed), then a candidate's while the time left covers a compile as
    long as the input's."""
    if deadline.expired():
        return []
    start = deadline.clock()
    first = _compile(graphs[0], deadline, seed, fold_weights)
    if first is None:
        return []
    samplers = [first]
    compile_s = deadline.clock() - start
    for graph in graphs[1:]:
        if deadline.remaining() < compile_s:
            break
        sampler = _compile(graph, deadline, seed, fold_weights)
        if sampler is None:
            break
        samplers.append(sampler)
    return samplers


def _compile(graph: Dag, deadline: Deadline, seed: int, fold_weights: bool) -> Sampler | None:
    """`graph` compiled for sampling, None when the deadline came first (the compile is
    abandoned: module docstring)."""
    return deadline.wait_for(lambda: end_to_end_sampler(graph, fold_weights, seed))


def _rounds(samplers: Sequence[Sampler], repeats: int, deadline: Deadline) -> list[list[float]]:
    """`repeats` interleaved samples (A, B, C, A, B, C, ...: drift in the machine's speed
    hits all alike) of each of the first samplers whose rounds fit before `deadline`,
    as the first round's wall times predict; fewer than two when no candidate fits."""
    first: list[float] = []
    walls: list[float] = []
    for sample in samplers:
        start = deadline.clock()
        first.append(sample())
        walls.append(deadline.clock() - start)
    fit = len(samplers)
    while fit > 1 and (repeats - 1) * sum(walls[:fit]) > deadline.remaining():
        fit -= 1
    samples = [[value] for value in first[:fit]]
    if fit < 2:
        return samples
    for _ in range(repeats - 1):
        for sample, values in zip(samplers, samples, strict=False):
            values.append(sample())
    return samples


def keep_measured_fastest(
    outcome: SearchOutcome[Dag],
    original: Dag,
    count: int,
    deadline: Deadline,
    seed: int,
    fold_weights: bool = True,
) -> SearchOutcome[Dag]:
    """`outcome` with the graph re-timing keeps as its best (`retime`): its predicted
    cost, the measured speedup over the input, the re-timing's time added, the timed
    graphs in `details["retimed"]`, and `TIMEOUT` as the stop reason when the deadline
    cut re-timing short. Rules applied are kept unless the input is kept."""
    retiming = retime(
        original, outcome.cost_before, outcome.candidates, count, deadline, seed, REPEATS,
        fold_weights,
    )  # fmt: skip
    timed = retiming.timed
    kept = timed[0] if timed else Timed(original, outcome.cost_before, 0.0, None)
    input_s = next((t.measured_s for t in timed if t.graph == original), None)
    details = {
        **outcome.details,
        "retimed": [
            {"ops": t.graph.num_ops, "predicted": t.predicted, "measured_s": t.measured_s,
             "speedup_interval": None if t.interval is None else list(t.interval),
             "input": t.graph == original, "search_best": t.graph == outcome.best}
            for t in timed
        ],
        "retime_seconds": round(retiming.seconds, 3),
    }  # fmt: skip
    return replace(
        outcome,
        best=kept.graph,
        cost_after=kept.predicted,
        seconds=outcome.seconds + retiming.seconds,
        stopped=StopReason.TIMEOUT if retiming.cut_short else outcome.stopped,
        applied=Counter() if kept.graph == original else outcome.applied,
        details=details,
        measured_speedup=None if input_s is None else speedup(input_s, kept.measured_s),
    )
