"""Delta simulation equals full simulation exactly (thesis §3.4.3, issue 16): random task
graphs on a few resources and memory pools, random edit sequences (durations, dependencies
kept acyclic, resources, memory, adds, removes), and after every `update()` the same float
for every task's start and end, the same makespan and the same peaks as `simulate()`."""

from __future__ import annotations

from dataclasses import replace
from unittest.mock import patch

from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st

from tasoc.sim import DeltaSimulator, Task, TaskGraph, Timeline, core, simulate

RESOURCES = ("gpu0", "gpu1", ("link", 0, 1), "swap-in")
POOLS = ("hbm0", "hbm1")
# few distinct durations, so equal ready times (the tie rules) are common; graphs without
# zero-length tasks take the sparse update, those with them the replay (tasoc/sim/core.py)
POSITIVE = st.sampled_from([0.25, 0.5, 1.0, 1.5]) | st.floats(0.01, 3.0)
DURATIONS = {False: POSITIVE, True: POSITIVE | st.just(0.0)}
MEMORY = st.lists(st.tuples(st.sampled_from(POOLS), st.integers(0, 64)), max_size=2).map(tuple)


@st.composite
def tasks(draw: st.DrawFn, earlier: list[int], durations: st.SearchStrategy[float]) -> Task:
    """A task depending on some of `earlier` (lower ids only, so no edit makes a cycle)."""
    deps = draw(st.lists(st.sampled_from(earlier), max_size=3)) if earlier else []
    return Task(
        resource=draw(st.sampled_from(RESOURCES)),
        duration=draw(durations),
        deps=tuple(deps),
        alloc=draw(MEMORY),
        free=draw(MEMORY),
    )


def assert_equal(delta: Timeline, full: Timeline) -> None:
    assert dict(delta.start) == dict(full.start)
    assert dict(delta.end) == dict(full.end)
    assert delta.makespan == full.makespan
    assert dict(delta.peak) == dict(full.peak)


def edit(data: st.DataObject, graph: TaskGraph, durations: st.SearchStrategy[float]) -> None:
    """One random edit: add a task, remove a task nobody uses, or replace one."""
    ids = sorted(graph.ids())
    kind = data.draw(st.sampled_from(["add", "remove", "replace", "duration"])) if ids else "add"
    if kind == "add":
        graph.add(data.draw(tasks(ids, durations)))
        return
    task_id = data.draw(st.sampled_from(ids))
    if kind == "remove":
        if not graph.successors(task_id):
            graph.remove(task_id)
    elif kind == "replace":
        graph.replace(task_id, data.draw(tasks([i for i in ids if i < task_id], durations)))
    else:
        old = graph[task_id]
        duration = data.draw(durations)
        graph.replace(task_id, Task(old.resource, duration, old.deps, old.alloc, old.free))


@settings(max_examples=examples(200))
@given(st.data(), st.booleans(), st.sampled_from([2, core.HANDOFF_DIRTY]))
def test_delta_equals_full_after_every_edit(
    data: st.DataObject, zero_length: bool, handoff: int
) -> None:
    """`handoff` 2 makes the sparse update hand over to the event loop in small graphs too."""
    with patch.object(core, "HANDOFF_DIRTY", handoff):
        check_edit_sequences(data, DURATIONS[zero_length])


def check_edit_sequences(data: st.DataObject, durations: st.SearchStrategy[float]) -> None:
    """Also a simulator without memory: the same times, no peaks."""
    graph = TaskGraph()
    for _ in range(data.draw(st.integers(0, 25))):
        graph.add(data.draw(tasks(sorted(graph.ids()), durations)))
    simulator = DeltaSimulator(graph)
    timeless = DeltaSimulator(graph, memory=False)
    assert_equal(simulator.timeline, simulate(graph))
    for _ in range(data.draw(st.integers(1, 6))):
        for _ in range(data.draw(st.integers(1, 3))):
            edit(data, graph, durations)
        full = simulate(graph)
        assert_equal(simulator.update(), full)
        assert_equal(timeless.update(), replace(full, peak={}))
        assert simulate(graph, memory=False).peak == {}


def test_update_without_edits_returns_the_same_timeline() -> None:
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 2.0, deps=(0,))])
    simulator = DeltaSimulator(graph)
    assert simulator.update() is simulator.timeline


def test_two_simulators_of_one_graph_each_see_every_edit() -> None:
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 2.0, deps=(0,))])
    first, second = DeltaSimulator(graph), DeltaSimulator(graph)
    graph.replace(0, Task("gpu", 5.0))
    assert first.update().makespan == 7.0
    graph.add(Task("gpu", 1.0, deps=(1,)))
    assert second.update().makespan == first.update().makespan == 8.0
