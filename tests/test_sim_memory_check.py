"""The memory check a search makes after each proposal (`ShardedStep.peak_bounds`,
`SimulatedStrategy.over_cap`) answers what the full memory replay answers: on random
plans edited at random, the bounds hold the peak `peak_memory` computes and tell
"over the cap" exactly as it does, for caps around the peak; and the heap packing
(`_best_fit`) places blocks as the plain best-fit rule does, runs of equal blocks
placed at once too."""

from __future__ import annotations

import contextlib
import functools
import math
import random

from conftest import examples
from hypothesis import example, given, settings
from hypothesis import strategies as st

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan
from tasoc.ir.training import training_signature
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.problem import SoapProblem
from tasoc.passes.soap.searches import baseline_plans
from tasoc.passes.soap.simulated import SimulatedStrategy
from tasoc.sim import parallel

K80 = machine("k80-cluster")


@functools.cache
def lstm() -> tuple[Problem, dict[str, Plan]]:
    """A one-layer LSTM's training step (3 steps unrolled) on 4 K80s, and its baselines."""
    module = build_zoo_model("rnn?layers=1&hidden=256&seq=3&batch=16&train=sgd&lr=0.01")
    dag = dag_module.from_module(module)
    program = Problem(dag, parse_mesh("4"), training_signature(entry_function(module)), {})
    return program, baseline_plans(program)[0]


def caps_around(step: parallel.ShardedStep, peak: int, rng: random.Random) -> list[int]:
    """Caps at, just under and just over `peak` and the bounds' own figures (the bytes
    live at once, one packing's heap: bounds asked about no cap and about any), and
    some anywhere near the peak."""
    loose, tight = step.peak_bounds(-1), step.peak_bounds(2**62)
    edges = {peak, loose.low, tight.low, int(tight.high)}
    near = [int(peak * rng.uniform(0.5, 1.5)) for _ in range(3)]
    return [*(edge + shift for edge in edges for shift in (-1, 0, 1)), *near]


@settings(max_examples=examples(8), deadline=None)
@given(st.integers(0, 2**32 - 1), st.integers(1, 5))
def test_the_memory_check_is_the_full_replays_on_random_edits(seed: int, edits: int) -> None:
    program, baselines = lstm()
    rng = random.Random(seed)
    start = baselines[rng.choice(sorted(baselines))]
    problem = SoapProblem(program, K80, 1)
    state = problem.simulate(start)
    space = problem.space(start)
    nodes = sorted(space, key=program.dag.ops.index)
    for _ in range(edits):
        node = rng.choice(nodes)
        with contextlib.suppress(ValueError):  # a layout a reader cannot reach: unchanged
            state.edit(node, *state.choose(node, [rng.choice(space[node])]))
        state.resimulate()
        peak = state.step.peak_memory()
        for cap in caps_around(state.step, peak, rng):
            bounds = state.step.peak_bounds(cap)
            assert bounds.low <= peak <= bounds.high
            assert bounds.over(cap) == (peak > cap)
            assert bounds.exact in (None, peak)
            checked = SimulatedStrategy(
                program, state.step, state.simulator, dict(state.configs), cap
            )
            assert checked.cost == (state.time if peak <= cap else math.inf)
            assert checked.memory == peak


def reference_best_fit(temps: list[parallel.Temp]) -> int:
    """The heap top of the best-fit rule written plainly: each block at the lowest
    offset of the smallest gap between the blocks placed before it whose lives overlap
    its own, or on top of them."""
    placed: list[tuple[float, float, int, int]] = []
    top = 0
    for first, last, nbytes, _ in temps:
        blocks = sorted((low, high) for f, t, low, high in placed if t >= first and f <= last)
        offset, best, below = None, math.inf, 0
        for low, high in blocks:
            if low - below >= nbytes and low - below < best:
                offset, best = below, low - below
            below = max(below, high)
        if offset is None:
            offset = below
        placed.append((first, last, offset, offset + nbytes))
        top = max(top, offset + nbytes)
    return top


@settings(max_examples=examples(200))
@given(
    st.lists(
        st.tuples(st.integers(0, 20), st.integers(0, 8), st.integers(1, 6)), min_size=1, max_size=30
    )
)
def test_the_heap_packing_is_the_plain_best_fit_rule(blocks: list[tuple[int, int, int]]) -> None:
    temps = [(first, first + span, nbytes, "activations") for first, span, nbytes in blocks]
    assert parallel._best_fit(temps)[0] == reference_best_fit(temps)


@settings(max_examples=examples(200))
@given(
    st.lists(
        st.tuples(
            st.integers(0, 12), st.integers(0, 6), st.integers(0, 5), st.sampled_from([1, 2, 3, 8])
        ),
        min_size=1,
        max_size=12,
    ),
    st.booleans(),
)
def test_runs_of_equal_blocks_are_placed_as_one_by_one(
    blocks: list[tuple[int, int, int, int]], by_life: bool
) -> None:
    """On the heap simulator's clock, the runs of equal blocks (an all-to-all's one per
    device) that `_best_fit` places at once land where the plain rule puts them."""
    temps = [
        (first, first + span, nbytes, "communication")
        for first, span, nbytes, copies in blocks
        for _ in range(copies)
    ]
    order = parallel._temporal if by_life else parallel._spatial
    timed = sorted(parallel._event_times(temps), key=order)
    assert parallel._best_fit(timed, ticked=True)[0] == reference_best_fit(timed)


temporaries = st.lists(
    st.tuples(st.integers(0, 20), st.integers(0, 8), st.integers(1, 6)), max_size=30
).map(lambda blocks: [(f, f + span, nbytes, "activations") for f, span, nbytes in blocks])


TEMPORAL_WINS = [
    (start, end, nbytes, "activations")
    for start, end, nbytes in (
        *((8, 14, 6), (15, 21, 2), (14, 20, 4), (19, 27, 5), (18, 21, 4)),
        *((9, 12, 1), (15, 22, 4), (9, 9, 6), (12, 19, 4)),
    )
]
"""Temporaries the second packing (by life) packs tighter than the first (by size)."""


@settings(max_examples=examples(300))
@given(temporaries, st.integers(-2, 4), st.integers(0, 2))
@example(TEMPORAL_WINS, 0, 0)
def test_heap_bounds_tell_what_the_packing_tells(
    temps: list[parallel.Temp], shift: int, anchor: int
) -> None:
    """Whatever the room, around the heap, the bytes live at once or one packing's heap:
    the bounds hold the heap and tell "over the room" as the heap does."""
    heap = parallel._packed(temps)[0]
    live = sum(nbytes for _, nbytes in parallel._most_live(temps))
    timed = parallel._event_times(temps)
    one = parallel._best_fit(sorted(timed, key=parallel._spatial))[0] if temps else 0
    room = (heap, live, one)[anchor] + shift
    low, high = parallel._heap_bounds(temps, room)
    assert low <= heap <= high
    assert (low > room) == (heap > room)
    assert (high == math.inf) == (heap > room)
