"""The simulator's semantics on schedules small enough to compute by hand (tasoc/sim/core.py):
FIFO per resource by ready time, ties by id, resources shared by independent chains,
memory peaks with frees before allocs, and the one-line errors of bad graphs."""

from __future__ import annotations

import pytest

from tasoc.sim import DeltaSimulator, SimulationError, Task, TaskGraph, simulate
from tasoc.sim.core import critical_path


def times(graph: TaskGraph) -> dict[int, tuple[float, float]]:
    timeline = simulate(graph)
    return {task_id: (timeline.start[task_id], timeline.end[task_id]) for task_id in graph.ids()}


def test_a_chain_on_one_resource_runs_back_to_back() -> None:
    graph = TaskGraph()
    first = graph.add(Task("gpu", 2.0))
    graph.add(Task("gpu", 3.0, deps=(first,)))
    assert times(graph) == {0: (0.0, 2.0), 1: (2.0, 5.0)}
    assert simulate(graph).makespan == 5.0


def test_a_resource_takes_tasks_in_order_of_ready_time() -> None:
    graph = TaskGraph()
    early = graph.add(Task("other", 3.0))
    late = graph.add(Task("gpu", 1.0, deps=(early,)))  # ready at 3
    waiting = graph.add(Task("other", 0.0))  # ends at 3 behind `early`...
    busy = graph.add(Task("gpu", 5.0, deps=(graph.add(Task("cpu", 1.0)),)))  # ready at 1
    assert times(graph)[busy] == (1.0, 6.0)
    assert times(graph)[late] == (6.0, 7.0)  # ready at 3, queued behind the task ready at 1
    assert times(graph)[waiting] == (3.0, 3.0)


def test_equal_ready_times_go_to_the_lower_id_first() -> None:
    graph = TaskGraph([Task("link", 2.0), Task("link", 1.0), Task("link", 4.0)])
    assert times(graph) == {0: (0.0, 2.0), 1: (2.0, 3.0), 2: (3.0, 7.0)}


def test_a_resource_shared_by_independent_chains_serializes_them() -> None:
    graph = TaskGraph()
    send_a = graph.add(Task("link", 2.0, deps=(graph.add(Task(("gpu", 0), 1.0)),)))
    send_b = graph.add(Task("link", 1.0, deps=(graph.add(Task(("gpu", 1), 2.0)),)))
    use_b = graph.add(Task(("gpu", 1), 0.5, deps=(send_b,)))
    result = times(graph)
    assert result[send_a] == (1.0, 3.0)
    assert result[send_b] == (3.0, 4.0)  # ready at 2, the link is busy until 3
    assert result[use_b] == (4.0, 4.5)
    assert simulate(graph).makespan == 4.5


def test_a_zero_length_task_releases_its_user_behind_a_task_already_queued() -> None:
    # FIFO by arrival: task 0 becomes ready at 0 only when the zero-length task 2 ends,
    # after task 1 (also ready at 0) was already taken, so the lower id waits.
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 1.0), Task("marker", 0.0)])
    graph.replace(0, Task("gpu", 1.0, deps=(2,)))
    assert times(graph) == {0: (1.0, 2.0), 1: (0.0, 1.0), 2: (0.0, 0.0)}


def test_memory_frees_come_before_allocs_at_equal_times() -> None:
    graph = TaskGraph()
    produce = graph.add(Task("gpu", 2.0, alloc=(("hbm", 10),), free=(("hbm", 10),)))
    graph.add(Task("gpu", 1.0, deps=(produce,), alloc=(("hbm", 10),), free=(("hbm", 10),)))
    assert simulate(graph).peak == {"hbm": 10}


def test_memory_peaks_count_overlapping_buffers_per_pool() -> None:
    graph = TaskGraph()
    weights = graph.add(Task("gpu", 1.0, alloc=(("hbm", 100),)))  # never freed
    act = graph.add(Task("gpu", 2.0, deps=(weights,), alloc=(("hbm", 30), ("host", 7))))
    graph.add(Task("copy", 1.0, deps=(act,), free=(("hbm", 30),), alloc=(("host", 30),)))
    graph.add(Task("gpu", 1.0, deps=(act,), alloc=(("hbm", 5),), free=(("hbm", 5),)))
    # hbm: 100 from 0, +30 at 1, +5 at 3 while the copy still holds the 30 -> 135
    assert simulate(graph).peak == {"hbm": 135, "host": 37}


def test_an_empty_graph_takes_no_time() -> None:
    timeline = simulate(TaskGraph())
    assert (timeline.makespan, dict(timeline.start), dict(timeline.peak)) == (0.0, {}, {})


def test_a_cycle_is_one_error_naming_a_task_on_it() -> None:
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 1.0, deps=(0,), name="matmul")])
    graph.replace(0, Task("gpu", 1.0, deps=(1,), name="relu"))
    graph.add(Task("gpu", 1.0, deps=(1,)))
    with pytest.raises(SimulationError, match=r"cycle through task [01] \((relu|matmul)\)$"):
        simulate(graph)


def test_delta_reports_a_cycle_and_recovers_once_it_is_gone() -> None:
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 2.0, deps=(0,))])
    simulator = DeltaSimulator(graph)
    graph.replace(0, Task("gpu", 1.0, deps=(1,)))
    with pytest.raises(SimulationError, match="cycle"):
        simulator.update()
    graph.replace(0, Task("gpu", 4.0))
    assert simulator.update() == simulate(graph)
    assert simulator.timeline.makespan == 6.0


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda: Task("gpu", -1.0, name="mm"), "task mm: duration must be finite and >= 0"),
        (lambda: Task("gpu", float("nan")), "duration must be finite"),
        (lambda: Task("gpu", 1.0, alloc=(("hbm", -4),)), "bytes of pool 'hbm' must be an int >= 0"),
        (lambda: TaskGraph().add(Task("gpu", 1.0, deps=(3,))), "depends on unknown task 3"),
        (lambda: TaskGraph()[0], "no task 0 in the task graph"),
    ],
)
def test_bad_tasks_are_one_line_errors(make, message: str) -> None:
    with pytest.raises(SimulationError, match=message) as error:
        make()
    assert "\n" not in str(error.value)


def test_a_task_others_depend_on_cannot_be_removed() -> None:
    graph = TaskGraph([Task("gpu", 1.0), Task("gpu", 1.0, deps=(0,)), Task("gpu", 1.0, deps=(0,))])
    with pytest.raises(SimulationError, match="cannot remove task 0: tasks 1, 2 depend on it"):
        graph.remove(0)
    graph.remove(2)
    graph.remove(1)
    graph.remove(0)
    assert len(graph) == 0


def test_the_critical_path_follows_what_each_task_waited_for() -> None:
    """Last first: the task ending last, the dependency it waited for, the task before
    it on a busy resource when that is what it waited for, down to a task at 0."""
    graph = TaskGraph()
    first = graph.add(Task(("gpu", 0), 1.0))
    send_a = graph.add(Task("link", 2.0, deps=(first,)))  # 1 -> 3
    send_b = graph.add(Task("link", 1.0, deps=(graph.add(Task(("gpu", 1), 2.0)),)))  # 3 -> 4
    use_b = graph.add(Task(("gpu", 1), 0.5, deps=(send_b,)))
    assert critical_path(graph, simulate(graph)) == [use_b, send_b, send_a, first]
    assert critical_path(TaskGraph(), simulate(TaskGraph())) == []
