"""Measured step times that the benchmarks compare side by side (DESIGN.md §7): each
program's sample is a mean over enough calls to span several scheduler time slices of
a shared machine, and the programs take turns, round after round, so that a burst of
load falls on all of them alike rather than on whichever ran during it."""

from __future__ import annotations

import math
import platform
import time
from collections.abc import Callable, Sequence
from importlib.metadata import version

import jax

MOST_CALLS = 1000
"""The most calls one sample makes: a step of microseconds still ends its sample."""


def calls_for(call: Callable[[], object], seconds: float) -> int:
    """How many calls of `call` take about `seconds` (at least one), timed on one call
    after a warm-up call (the first runs compilation and allocation)."""
    jax.block_until_ready(call())
    start = time.perf_counter()
    jax.block_until_ready(call())
    one = time.perf_counter() - start
    return max(1, min(MOST_CALLS, math.ceil(seconds / max(one, 1e-9))))


def averaged(call: Callable[[], object], count: int) -> Callable[[], float]:
    """A sampler: seconds per call of `call`, the mean over `count` calls, each awaited
    (a step's time, as the simulator predicts it, not calls overlapping in flight).
    A fixed count, not a fixed time: processes of one `jax.distributed` run must make
    the same calls of a collective program, whatever each one's clock says."""

    def sample() -> float:
        start = time.perf_counter()
        for _ in range(count):
            jax.block_until_ready(call())
        return (time.perf_counter() - start) / count

    return sample


def sampler(call: Callable[[], object], seconds: float) -> Callable[[], float]:
    """Seconds per call of `call`, averaged over as many calls as take `seconds`."""
    return averaged(call, calls_for(call, seconds))


def interleaved(samplers: Sequence[Callable[[], float]], rounds: int) -> list[list[float]]:
    """`rounds` rounds of one sample of each sampler, in order in even rounds and in
    reverse in odd ones, so that none always runs first; each sampler's seconds."""
    times: list[list[float]] = [[] for _ in samplers]
    for index in range(rounds):
        turn = list(enumerate(samplers))
        for position, sample in reversed(turn) if index % 2 else turn:
            times[position].append(sample())
    return times


def versions() -> str:
    """What a measurement ran on, for the line above its table."""
    packages = ", ".join(f"{p} {version(p)}" for p in ("jax", "jaxlib", "xdsl", "numpy"))
    return f"Python {platform.python_version()}, {packages}"
