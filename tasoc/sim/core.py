"""Tasks on FIFO resources with dependencies and memory pools: the full and delta simulation.

Semantics (FlexFlow's assumptions A3-A4, thesis §3.4): a task is *ready* when every
task in its `deps` has ended (at 0.0 when it has none). Tasks are taken in order of
their ready time, ties by lower task id, from one global queue of ready tasks
(§3.4.2's variant of Dijkstra's algorithm); each task then starts when its resource
is free, at max(ready, end of the resource's previous task), so every resource runs
its tasks one at a time in FIFO order of arrival. Ties are broken among the tasks
queued together: a task that becomes ready at time t only because a zero-length task
ended at t queues behind a same-time task that was already taken, as a real FIFO
queue would.

Memory: each task adds its `alloc` bytes to their pools when it starts and removes
its `free` bytes when it ends; at equal times frees come before allocs, so a buffer
handed from one task to the next at the same instant is not counted twice. A pool's
peak is the most bytes it held at any time (0 at the start).

Resources and pools are any hashables, so FlexFlow's devices and links and
SwapAdvisor's compute, swap-out and swap-in streams (with device memory as a pool) are
the same simulator. The module knows nothing of ops or shardings.

Delta simulation (§3.4.3) keeps, from the previous run, every task's ready/start/end
times, the global order tasks were taken in, and each memory pool's event trace. After
edits it finds the earliest ready time `cut` that an edit can influence (the old ready
time of every edited or removed task, and the new ready time of every edited or added
task whose dependencies are all unedited), keeps the tasks taken before `cut` as they
were — no edit can reach them, since ready times never decrease along the global order
— rebuilds the queue and each resource's free time as they stood at `cut`, and replays
the rest with the same loop as the full simulation. The result is therefore the full
simulation's, float for float.
"""

from __future__ import annotations

import heapq
import math
import weakref
from bisect import bisect_left
from collections.abc import Hashable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

Pool = Hashable
MemoryEvent = tuple[float, int, int, int, int]
"""(time, 0 for a free / 1 for an alloc, task id, index in the task's list, signed bytes):
sorted, these are a pool's trace with frees before allocs at equal times."""


Queued = tuple[float, int]
"""A ready task in the global queue: (ready time, task id), so ties go to the lower id."""


class SimulationError(ValueError):
    """A malformed task or task graph; one line, for the driver to print."""


@dataclass(frozen=True)
class Task:
    """One piece of work on one exclusive resource.

    `deps` are task ids that must end before this task starts (duplicates dropped);
    `alloc` and `free` are (pool, bytes) taken when it starts and given back when it ends.
    """

    resource: Hashable
    duration: float
    deps: tuple[int, ...] = ()
    alloc: tuple[tuple[Pool, int], ...] = ()
    free: tuple[tuple[Pool, int], ...] = ()
    name: str = ""

    def __post_init__(self) -> None:
        duration = float(self.duration)
        if not (math.isfinite(duration) and duration >= 0.0):
            raise SimulationError(
                f"task {self.label}: duration must be finite and >= 0, got {self.duration!r}"
            )
        for pool, nbytes in self.alloc + self.free:
            if not isinstance(nbytes, int) or nbytes < 0:
                raise SimulationError(
                    f"task {self.label}: bytes of pool {pool!r} must be an int >= 0, got {nbytes!r}"
                )
        object.__setattr__(self, "duration", duration)
        object.__setattr__(self, "deps", tuple(dict.fromkeys(self.deps)))

    @property
    def label(self) -> str:
        """How error messages name the task: its name, else its resource."""
        return self.name or repr(self.resource)


class _ChangeLog:
    """The ids a `TaskGraph` edited since its reader last looked (weakly held by the graph)."""

    __slots__ = ("__weakref__", "ids")

    def __init__(self) -> None:
        self.ids: set[int] = set()


class TaskGraph:
    """A mutable set of tasks with stable integer ids; dependencies always name tasks in it.

    Edits are recorded for every `DeltaSimulator` watching the graph, so a search can
    edit the graph it already simulated and pay only for what changed.
    """

    def __init__(self, tasks: Iterable[Task] = ()) -> None:
        self._tasks: dict[int, Task] = {}
        self._succ: dict[int, set[int]] = {}
        self._next_id = 0
        self._logs: weakref.WeakSet[_ChangeLog] = weakref.WeakSet()
        for task in tasks:
            self.add(task)

    def add(self, task: Task) -> int:
        """Adds `task` and returns its new id (ids are never reused)."""
        self._check_deps(task)
        task_id = self._next_id
        self._next_id += 1
        self._tasks[task_id] = task
        self._succ[task_id] = set()
        self._link(task_id, task)
        return task_id

    def remove(self, task_id: int) -> None:
        """Removes a task no other task depends on (remove or replace those first)."""
        task = self[task_id]
        if self._succ[task_id]:
            users = ", ".join(map(str, sorted(self._succ[task_id])))
            raise SimulationError(f"cannot remove task {task_id}: tasks {users} depend on it")
        self._unlink(task_id, task)
        del self._tasks[task_id], self._succ[task_id]

    def replace(self, task_id: int, task: Task) -> None:
        """Puts `task` in place of task `task_id`, keeping its id and its dependents."""
        old = self[task_id]
        self._check_deps(task)
        self._unlink(task_id, old)
        self._tasks[task_id] = task
        self._link(task_id, task)

    def __getitem__(self, task_id: int) -> Task:
        try:
            return self._tasks[task_id]
        except KeyError:
            raise SimulationError(f"no task {task_id} in the task graph") from None

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._tasks

    def __len__(self) -> int:
        return len(self._tasks)

    def ids(self) -> Iterator[int]:
        """Every task id, in the order they were added."""
        return iter(self._tasks)

    def successors(self, task_id: int) -> frozenset[int]:
        """The tasks that depend on task `task_id`."""
        self[task_id]
        return frozenset(self._succ[task_id])

    def watch(self) -> _ChangeLog:
        """A log that collects the id of every task edited from now on."""
        log = _ChangeLog()
        self._logs.add(log)
        return log

    def _check_deps(self, task: Task) -> None:
        missing = [dep for dep in task.deps if dep not in self._tasks]
        if missing:
            raise SimulationError(f"task {task.label} depends on unknown task {missing[0]}")

    def _link(self, task_id: int, task: Task) -> None:
        for dep in task.deps:
            self._succ[dep].add(task_id)
        self._touch(task_id)

    def _unlink(self, task_id: int, task: Task) -> None:
        for dep in task.deps:
            self._succ[dep].discard(task_id)
        self._touch(task_id)

    def _touch(self, task_id: int) -> None:
        for log in self._logs:
            log.ids.add(task_id)


@dataclass(frozen=True)
class Timeline:
    """One simulated run: every task's start and end, the makespan, each pool's peak bytes."""

    start: Mapping[int, float]
    end: Mapping[int, float]
    makespan: float
    peak: Mapping[Pool, int]


@dataclass
class _PoolTrace:
    """A pool's sorted memory events, with the level and running peak after each."""

    events: list[MemoryEvent]
    levels: list[int]
    peaks: list[int]


class _Schedule:
    """Everything one simulation knows, kept so that the next one can start from it."""

    def __init__(self, graph: TaskGraph) -> None:
        self.tasks: dict[int, Task] = {}
        self.ready: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.free_before: dict[int, float] = {}  # the resource's free time when the task was taken
        self.position: dict[int, int] = {}
        self.order: list[int] = []
        self.order_ready: list[float] = []  # non-decreasing: what `cut` bisects
        self.order_makespan: list[float] = []  # the makespan of the first i + 1 tasks taken
        self.resource_free: dict[Hashable, float] = {}
        self.pools: dict[Pool, _PoolTrace] = {}
        pending: dict[int, int] = {}
        queue: list[Queued] = []
        for task_id, task in graph._tasks.items():
            if task.deps:
                pending[task_id] = len(task.deps)
            else:
                queue.append((0.0, task_id))
        heapq.heapify(queue)
        self._run(graph, queue, pending)
        self._trace_memory(0, 0.0, set())

    def timeline(self) -> Timeline:
        return Timeline(
            start=dict(self.start),
            end=dict(self.end),
            makespan=self.order_makespan[-1] if self.order else 0.0,
            peak={pool: trace.peaks[-1] for pool, trace in self.pools.items()},
        )

    def resimulate(self, graph: TaskGraph, edited: set[int]) -> None:
        """Replays the tasks an edit of `edited` can reach (see the module docstring)."""
        cut_time = math.inf
        for task_id in edited:
            if task_id in self.position:
                cut_time = min(cut_time, self.ready[task_id])
            task = graph._tasks.get(task_id)
            if task is not None and edited.isdisjoint(task.deps):
                cut_time = min(cut_time, max((self.end[dep] for dep in task.deps), default=0.0))
        cut = bisect_left(self.order_ready, cut_time)
        replayed = self.order[cut:]
        pools = {pool for task_id in replayed for pool, _ in _memory(self.tasks[task_id])}
        rewound: set[Hashable] = set()
        for task_id in replayed:  # each resource as it was when its first replayed task was taken
            resource = self.tasks[task_id].resource
            if resource not in rewound:
                rewound.add(resource)
                self.resource_free[resource] = self.free_before[task_id]
        candidates = [task_id for task_id in replayed if task_id in graph._tasks]
        added = (task_id for task_id in edited if task_id not in self.position)
        candidates += [task_id for task_id in added if task_id in graph._tasks]
        for task_id in replayed:
            if task_id not in graph._tasks:
                for table in self._per_task():
                    del table[task_id]
        del self.order[cut:], self.order_ready[cut:], self.order_makespan[cut:]
        pending: dict[int, int] = {}
        queue: list[Queued] = []
        for task_id in candidates:
            deps = graph._tasks[task_id].deps
            waiting = sum(1 for dep in deps if self.position.get(dep, cut) >= cut)
            if waiting:
                pending[task_id] = waiting
            else:
                queue.append((max((self.end[dep] for dep in deps), default=0.0), task_id))
        heapq.heapify(queue)
        self._run(graph, queue, pending)
        self._trace_memory(cut, cut_time, pools)

    def _per_task(self) -> tuple[dict[int, Any], ...]:
        return (self.tasks, self.ready, self.start, self.end, self.free_before, self.position)

    def _run(self, graph: TaskGraph, queue: list[Queued], pending: dict[int, int]) -> None:
        """The loop both simulations share: take the earliest ready task, run it, free its users."""
        tasks, succ, end = graph._tasks, graph._succ, self.end
        resource_free, order = self.resource_free, self.order
        first = len(order)
        while queue:
            ready, task_id = heapq.heappop(queue)
            task = tasks[task_id]
            free = resource_free.get(task.resource, 0.0)
            start = ready if ready >= free else free
            end[task_id] = resource_free[task.resource] = start + task.duration
            self.tasks[task_id] = task
            self.ready[task_id] = ready
            self.start[task_id] = start
            self.free_before[task_id] = free
            order.append(task_id)
            self.order_ready.append(ready)
            for user in succ[task_id]:
                waiting = pending[user] - 1
                if waiting:
                    pending[user] = waiting
                else:
                    del pending[user]
                    heapq.heappush(queue, (max(end[dep] for dep in tasks[user].deps), user))
        makespan = self.order_makespan[-1] if first else 0.0
        for index in range(first, len(order)):
            self.position[order[index]] = index
            makespan = max(makespan, end[order[index]])
            self.order_makespan.append(makespan)
        if pending:
            member = _describe(graph, _cycle_member(graph, pending))
            raise SimulationError(f"the task graph has a cycle through {member}")

    def _trace_memory(self, cut: int, cut_time: float, pools: set[Pool]) -> None:
        """Rebuilds from `cut_time` on the traces of `pools` and of the replayed tasks' pools.

        Events before `cut_time` belong to tasks taken before `cut`, which the replay kept;
        `pools` are those the replayed tasks used before the edit.
        """
        fresh: dict[Pool, list[MemoryEvent]] = {}
        for task_id in self.order[cut:]:
            task = self.tasks[task_id]
            for index, (pool, nbytes) in enumerate(task.free):
                fresh.setdefault(pool, []).append((self.end[task_id], 0, task_id, index, -nbytes))
            for index, (pool, nbytes) in enumerate(task.alloc):
                fresh.setdefault(pool, []).append((self.start[task_id], 1, task_id, index, nbytes))
        for pool in pools | set(fresh):
            trace = self.pools.get(pool) or _PoolTrace([], [], [])
            keep = bisect_left(trace.events, (cut_time,))
            kept = trace.events[keep:]
            tail = [event for event in kept if self.position.get(event[2], cut) < cut]
            tail += fresh.get(pool, [])
            tail.sort()
            del trace.events[keep:], trace.levels[keep:], trace.peaks[keep:]
            level, peak = (trace.levels[-1], trace.peaks[-1]) if keep else (0, 0)
            for event in tail:
                level += event[4]
                peak = max(peak, level)
                trace.events.append(event)
                trace.levels.append(level)
                trace.peaks.append(peak)
            if trace.events:
                self.pools[pool] = trace
            else:
                self.pools.pop(pool, None)


def _cycle_member(graph: TaskGraph, pending: Mapping[int, int]) -> int:
    """A task on a dependency cycle among the never-ready tasks (each waits on another of them)."""
    seen: set[int] = set()
    task_id = min(pending)
    while task_id not in seen:
        seen.add(task_id)
        task_id = min(dep for dep in graph._tasks[task_id].deps if dep in pending)
    return task_id


def _memory(task: Task) -> tuple[tuple[Pool, int], ...]:
    return task.alloc + task.free


def _describe(graph: TaskGraph, task_id: int) -> str:
    name = graph._tasks[task_id].name
    return f"task {task_id} ({name})" if name else f"task {task_id}"


def simulate(graph: TaskGraph) -> Timeline:
    """The full simulation (§3.4.2): O((V + E) log V) for V tasks and E dependencies."""
    return _Schedule(graph).timeline()


class DeltaSimulator:
    """Re-simulates a `TaskGraph` after edits, replaying only what they can reach (§3.4.3).

    Every `update()` equals `simulate(graph)` exactly; it is cheaper the later in the
    timeline the earliest edited task sits.
    """

    def __init__(self, graph: TaskGraph) -> None:
        self._graph = graph
        self._log = graph.watch()
        self._schedule: _Schedule | None = _Schedule(graph)
        self._timeline = self._schedule.timeline()

    def update(self) -> Timeline:
        """The timeline of the graph as it is now; raises SimulationError on a cycle."""
        edited, self._log.ids = self._log.ids, set()
        if self._schedule is not None and not edited:
            return self._timeline
        # a replay that fails (a cycle) leaves no half-updated schedule behind
        schedule, self._schedule = self._schedule, None
        if schedule is None:
            schedule = _Schedule(self._graph)
        else:
            schedule.resimulate(self._graph, edited)
        self._schedule = schedule
        self._timeline = schedule.timeline()
        return self._timeline

    @property
    def timeline(self) -> Timeline:
        """The timeline of the last `update()` (or of the constructor's full simulation)."""
        return self._timeline
