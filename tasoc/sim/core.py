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
times, the order tasks were taken in, each resource's free time when each task was
taken, and each memory pool's event trace. After edits it finds the earliest ready time
`cut` an edit can influence (the old ready time of every edited or removed task, and the
new one of every edited or added task whose dependencies are all unedited); tasks taken
before `cut` stay as they were, since ready times never decrease along the order taken.
From `cut` on, as the thesis' Bellman-Ford-like update does, only *dirty* tasks are
queued again — the edited ones, the users of a task whose end moved, and tasks met while
one of their dependencies is still dirty — while the others are walked in their old order
just to carry each resource's free time, and re-timed only where that free time moved.
The walk stops, keeping the old rest, where the edit's effect has closed up: nothing
dirty left and every resource free at the time it was in the old run at that point.
Merging the two by (ready, id) is the full simulation's order whenever no task from `cut`
on ends the instant it becomes ready (then ready times rise strictly along dependencies);
where one does (a zero-length task), ties depend on arrival order, so the update replays
the event loop itself from `cut`, as it also does for the rest once most tasks are dirty.
Either way the result is the full simulation's, float for float, and a memory pool's
trace is re-summed only from its earliest moved event.

Cost: both run with the cyclic garbage collector paused (`paused_gc`). An edit that
moves the makespan moves the tasks after it up to the end (a data-parallel step's op
does), so the update then costs the full simulation of the part of the timeline after
the edit; it is cheap where the edit's effect is absorbed by slack before the end
(`benchmarks/sim_delta.py` has the numbers).
"""

from __future__ import annotations

import gc
import heapq
import math
import weakref
from bisect import bisect_left
from collections import deque
from collections.abc import Hashable, Iterable, Iterator, Mapping
from contextlib import contextmanager, suppress
from dataclasses import dataclass
from itertools import accumulate, repeat
from typing import Any

Pool = Hashable
MemoryEvent = tuple[float, int, int, int, int]
"""(time, 0 for a free / 1 for an alloc, task id, index in the task's list, signed bytes):
sorted, these are a pool's trace with frees before allocs at equal times."""


Queued = tuple[float, int]
"""A ready task in the global queue: (ready time, task id), so ties go to the lower id."""


HANDOFF_DIRTY = 64
"""A sparse update hands the rest to the event loop once this many tasks, and half of
those walked, are dirty: a dirty task costs it more than the event loop pays per task."""


SPARSE_ODDS = 0.25
"""Below this share of sparse updates that paid (kept most of the old run, not handed
off), `_Schedule.resimulate` replays at once..."""

SPARSE_RETRY = 8
"""... trying the sparse update again every this many updates,"""

SPARSE_MEMORY = 0.2
"""... the share of each try in the running mean (the last five or so count)."""


@contextmanager
def paused_gc() -> Iterator[None]:
    """Runs its block (or decorated function) without the cyclic garbage collector.

    A simulation or a step's build allocates some 10^5 tuples, dicts and tasks, none in a
    reference cycle, and the collector, woken every 700 allocations, rescans the young
    ones and now and then the whole heap: measured, that was half the time of building
    and simulating a 10^5-task step. Nothing is leaked: the block's garbage is freed by
    reference counting, and any cycle waits for the collector's next run.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


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
        if duration is not self.duration:
            object.__setattr__(self, "duration", duration)
        if len(self.deps) > 1:  # duplicates only where there are two deps or more
            object.__setattr__(self, "deps", tuple(dict.fromkeys(self.deps)))
        elif type(self.deps) is not tuple:
            object.__setattr__(self, "deps", tuple(self.deps))

    @property
    def label(self) -> str:
        """How error messages name the task: its name, else its resource."""
        return self.name or repr(self.resource)


Before = tuple[Task | None, float, float]
"""A task as the previous simulation had it (None: it is new), with its start and end."""


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
        self._logs: list[weakref.ref[_ChangeLog]] = []
        """Weak references (a WeakSet's iteration costs more than the rest of an `add`)."""
        for task in tasks:
            self.add(task)

    def copy(self) -> TaskGraph:
        """The same tasks under the same ids, edited apart from now on; no simulator
        watches the copy."""
        twin = TaskGraph()
        twin._tasks = dict(self._tasks)
        twin._succ = {task_id: set(users) for task_id, users in self._succ.items()}
        twin._next_id = self._next_id
        return twin

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
        self._logs = [ref for ref in self._logs if ref() is not None] + [weakref.ref(log)]
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
        for ref in self._logs:
            log = ref()
            if log is not None:
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

    @paused_gc()
    def __init__(self, graph: TaskGraph, memory: bool = True) -> None:
        self.memory = memory  # whether the pools' traces are kept (`DeltaSimulator`)
        self.tasks: dict[int, Task] = {}
        self.ready: dict[int, float] = {}
        self.start: dict[int, float] = {}
        self.end: dict[int, float] = {}
        self.free_before: dict[int, float] = {}  # the resource's free time when the task was taken
        self.position: dict[int, int] = {}
        self.order: list[int] = []
        self.order_ready: list[float] = []  # non-decreasing: what `cut` bisects
        self.order_resource: list[Hashable] = []  # each taken task's resource, for C-speed scans
        self.order_makespan: list[float] = []  # the makespan of the first i + 1 tasks taken
        self.resource_free: dict[Hashable, float] = {}
        self.pools: dict[Pool, _PoolTrace] = {}
        self.instant: set[int] = set()  # tasks that ended when they became ready (see `_sparse`)
        self.sparse_odds = 1.0  # a running mean of how often a sparse update paid (`resimulate`)
        self.replays_in_a_row = 0
        self.handed_off = False  # whether the last sparse update handed the rest to the event loop
        pending: dict[int, int] = {}
        queue: list[Queued] = []
        for task_id, task in graph._tasks.items():
            if task.deps:
                pending[task_id] = len(task.deps)
            else:
                queue.append((0.0, task_id))
        heapq.heapify(queue)
        self._run(graph, queue, pending, {})
        self._retrace(dict.fromkeys(self.order, (None, 0.0, 0.0)))

    def timeline(self) -> Timeline:
        return Timeline(
            start=dict(self.start),
            end=dict(self.end),
            makespan=self.order_makespan[-1] if self.order else 0.0,
            peak={pool: trace.peaks[-1] for pool, trace in self.pools.items()},
        )

    @paused_gc()
    def resimulate(self, graph: TaskGraph, edited: set[int]) -> None:
        """Re-simulates after `edited` changed: sparsely when it can, else by replay."""
        cut_time = math.inf
        for task_id in edited:
            if task_id in self.position:
                cut_time = min(cut_time, self.ready[task_id])
            task = graph._tasks.get(task_id)
            if task is not None and edited.isdisjoint(task.deps):
                cut_time = min(cut_time, max((self.end[dep] for dep in task.deps), default=0.0))
        cut = bisect_left(self.order_ready, cut_time)
        if (
            any(self.position[task_id] >= cut for task_id in self.instant)
            or not self._worth_sparse()
        ):
            self._replay(graph, edited, cut)
            return
        self.handed_off = False
        paid = self._sparse(graph, edited, cut)
        if not paid:
            self._replay(graph, edited, cut)
        paid = paid and not self.handed_off
        self.sparse_odds = (1 - SPARSE_MEMORY) * self.sparse_odds + SPARSE_MEMORY * paid

    def _worth_sparse(self) -> bool:
        """Whether to try the sparse update first. Where edits move most of what follows
        them (an edit on a data-parallel step's critical path moves every later task),
        the sparse walk marks task after task dirty and then hands the rest to the
        event loop anyway, costing more than replaying at once: once it has mostly not
        paid, only every `SPARSE_RETRY`-th update tries it. Either way is exact."""
        if self.sparse_odds >= SPARSE_ODDS or self.replays_in_a_row >= SPARSE_RETRY:
            self.replays_in_a_row = 0
            return True
        self.replays_in_a_row += 1
        return False

    def _free_at(self, cut: int) -> dict[Hashable, float]:
        """Each resource's free time when the `cut`-th task was taken."""
        free = dict(self.resource_free)
        # a resource as its first task from `cut` on found it: written last, read backwards
        tail = self.order[cut:]
        tail.reverse()
        resources = self.order_resource[cut:]
        resources.reverse()
        free.update(zip(resources, map(self.free_before.__getitem__, tail), strict=True))
        return free

    def _replay(self, graph: TaskGraph, edited: set[int], cut: int) -> None:
        """Keeps the first `cut` tasks taken and runs the event loop again from there."""
        replayed = self.order[cut:]
        added = [task_id for task_id in edited if task_id not in self.position]
        self.resource_free = self._free_at(cut)
        del self.order[cut:], self.order_ready[cut:], self.order_makespan[cut:]
        del self.order_resource[cut:]
        self._run_again(graph, replayed + added)

    def _run_again(
        self, graph: TaskGraph, again: Iterable[int], before: dict[int, Before] | None = None
    ) -> None:
        """Runs the event loop on the tasks `again` (old, new or removed ones) after those taken;
        `before` holds what earlier steps of the same update moved, for one `_retrace`."""
        before = {} if before is None else before
        tasks, position, end_of = graph._tasks, self.position, self.end
        again = list(again)
        if self.memory:  # only `_retrace` reads `before`
            old_tasks, start_of = self.tasks, self.start
            for task_id in again:
                if task_id in position:
                    before[task_id] = (old_tasks[task_id], start_of[task_id], end_of[task_id])
                elif task_id not in before:
                    before[task_id] = (None, 0.0, 0.0)
        # per task, at C speed: the event loop sets these anew for the tasks it takes
        self.instant.difference_update(again)
        deque(map(position.pop, again, repeat(None)), maxlen=0)
        for task_id in set(again).difference(tasks):
            for table in self._per_task():
                table.pop(task_id, None)
        candidates = list(filter(tasks.__contains__, again))
        pending: dict[int, int] = {}
        ready_at: dict[int, float] = {}
        queue: list[Queued] = []
        for task_id in candidates:
            waiting, ready = 0, 0.0
            for dep in tasks[task_id].deps:
                if dep not in position:
                    waiting += 1
                elif end_of[dep] > ready:
                    ready = end_of[dep]
            if waiting:
                pending[task_id] = waiting
                ready_at[task_id] = ready
            else:
                queue.append((ready, task_id))
        heapq.heapify(queue)
        self._run(graph, queue, pending, ready_at)
        self._retrace(before)

    def _sparse(self, graph: TaskGraph, edited: set[int], cut: int) -> bool:
        """Re-runs only the tasks an edit moves; False, having changed nothing, where it cannot.

        Without instant tasks (ended when ready) ready times rise strictly along every
        dependency, so tasks are taken in order of (ready, id) and the new order merges
        the old one — tasks whose times stay, walked in place for the resource free times
        they leave — with a queue of *dirty* tasks whose ready time may move: the edited
        ones, the users of a task whose end moved, and old tasks met while one of their
        dependencies is still dirty. A cycle or a new instant task gives up (False).

        The walk stops early, keeping the rest of the old order as it was, once the edit's
        wave has passed: no dirty task left, none taken ahead of its old place, no removed
        task further on, and every resource free at the very time it was in the old run at
        this point (FlexFlow's observation that a change moves only what lies downstream
        of it until the times close up again); from there the old run is the new one.
        """
        tasks, succ, old_order = graph._tasks, graph._succ, self.order
        position, ready_of, start_of, end_of = self.position, self.ready, self.start, self.end
        old_tasks = self.tasks
        free = self._free_at(cut)
        old_free = dict(free)  # each resource's free time in the old run, at `index`
        differs: set[Hashable] = set()  # resources where `free` and `old_free` disagree
        ahead: set[int] = set()  # old tasks taken before the walk reached their old place
        resources = self.order_resource
        removed_at = sorted(
            position[task_id] for task_id in edited if task_id not in tasks and task_id in position
        )
        last_removed = removed_at[-1] if removed_at else -1
        new: dict[int, tuple[float, float, float, float]] = {}  # ready, start, end, free before
        new_end: dict[int, float] = {}
        done: set[int] = set()
        dirty: set[int] = set()
        blocked: dict[int, int] = {}  # old tasks waiting on how many dirty dependencies
        pending: dict[int, int] = {}  # dirty tasks waiting on how many untaken dependencies
        waiters: dict[int, list[int]] = {}
        queue: list[Queued] = []
        taken: list[int] = []
        taken_ready: list[float] = []
        taken_resource: list[Hashable] = []
        index, count = cut, len(old_order)

        def ready_time(deps: tuple[int, ...]) -> float:
            return max((new_end.get(dep, end_of.get(dep, 0.0)) for dep in deps), default=0.0)

        def make_dirty(task_id: int) -> None:
            dirty.add(task_id)
            for user in succ[task_id]:
                blocked[user] = blocked.get(user, 0) + 1
            deps = tasks[task_id].deps
            untaken = [
                dep
                for dep in deps
                # untaken: dirty, new (no old place) or not yet reached by the walk
                if dep not in done and (dep in dirty or position.get(dep, count) >= index)
            ]
            for dep in untaken:
                waiters.setdefault(dep, []).append(task_id)
            if untaken:
                pending[task_id] = len(untaken)
            else:
                heapq.heappush(queue, (ready_time(deps), task_id))

        for task_id in edited:
            if task_id in tasks:
                make_dirty(task_id)

        def pass_old(task_id: int) -> None:
            """The walk reaches old task `task_id`'s place: the old run's resource moves on."""
            resource = old_tasks[task_id].resource
            old_free[resource] = end_of[task_id]
            if free.get(resource, 0.0) == end_of[task_id]:
                differs.discard(resource)
            else:
                differs.add(resource)

        def next_disagreement() -> int:
            """The first old place from `index` on whose task is removed or runs on a
            resource that disagrees with the old run (C-speed scans of `resources`)."""
            stop = count
            after = bisect_left(removed_at, index)
            if after < len(removed_at):
                stop = removed_at[after]
            for resource in differs:
                with suppress(ValueError):
                    stop = resources.index(resource, index, stop)
            return stop

        while len(dirty) < HANDOFF_DIRTY or 2 * len(dirty) < index - cut:
            while index < count:  # the next old task that keeps its ready time
                head = old_order[index]
                if head in dirty or head not in tasks:
                    ahead.discard(head)
                elif blocked.get(head):
                    make_dirty(head)
                else:
                    break
                pass_old(head)
                index += 1
            if not queue and not pending and not ahead:  # nothing dirty left to take
                if not differs and index > last_removed:
                    break  # the wave has passed: the rest is as it was
                skip = next_disagreement()
                if skip > index:  # the old tasks up to there keep their times: taken as a block
                    ids = old_order[index:skip]
                    taken += ids
                    taken_ready += self.order_ready[index:skip]
                    taken_resource += resources[index:skip]
                    passed = dict(
                        zip(resources[index:skip], map(end_of.__getitem__, ids), strict=True)
                    )
                    free.update(passed)
                    old_free.update(passed)
                    index = skip
                    continue
            if index < count and not (
                queue and queue[0] < (ready_of[old_order[index]], old_order[index])
            ):
                task_id = old_order[index]
                ready = ready_of[task_id]
                index += 1
                task = tasks[task_id]  # unedited: the old task
                resource = task.resource
                old_free[resource] = end_of[task_id]
            elif queue:
                ready, task_id = heapq.heappop(queue)
                if position.get(task_id, -1) >= index:
                    ahead.add(task_id)
                task = tasks[task_id]
                resource = task.resource
            else:
                break
            before = free.get(resource, 0.0)
            start = ready if ready >= before else before
            end = free[resource] = start + task.duration
            if end == old_free.get(resource, 0.0):
                differs.discard(resource)
            else:
                differs.add(resource)
            if end == ready:
                return False
            done.add(task_id)
            taken.append(task_id)
            taken_ready.append(ready)
            taken_resource.append(resource)
            moved = end != end_of.get(task_id) or task_id not in position
            if (
                moved
                or task_id in dirty
                or start != start_of[task_id]
                or before != self.free_before[task_id]
            ):
                new[task_id] = (ready, start, end, before)
                new_end[task_id] = end
            for waiter in waiters.pop(task_id, ()):
                pending[waiter] -= 1
                if not pending[waiter]:
                    del pending[waiter]
                    heapq.heappush(queue, (ready_time(tasks[waiter].deps), waiter))
            if task_id in dirty:
                for user in succ[task_id]:
                    blocked[user] -= 1
            if moved:
                for user in succ[task_id]:
                    if user not in dirty:
                        make_dirty(user)
        else:  # most tasks turn dirty: the event loop takes the rest for less
            rest = {task_id for task_id in old_order[index:] if task_id not in done}
            rest.update(task_id for task_id in dirty if task_id not in done)
            self.resource_free = free
            before = self._commit(graph, cut, (taken, taken_ready, taken_resource), new, count)
            self._run_again(graph, rest, before)
            self.handed_off = True
            return True
        if pending:
            return False
        if index < count:  # stopped early: the old run's resources end as they did
            free = {**free, **self.resource_free}
        self.resource_free = free
        self._retrace(self._commit(graph, cut, (taken, taken_ready, taken_resource), new, index))
        return True

    def _commit(
        self,
        graph: TaskGraph,
        cut: int,
        taken: tuple[list[int], list[float], list[Hashable]],
        new: dict[int, tuple[float, float, float, float]],
        rest: int,
    ) -> dict[int, Before]:
        """Stores a sparse re-simulation (the order from `cut` on: the tasks `taken`, with
        their ready times and resources, then the old order from `rest` on; the tasks whose
        times moved); returns the old task, start and end of each task moved or removed,
        for `_retrace`."""
        removed = [task_id for task_id in self.order[cut:rest] if task_id not in graph._tasks]
        before = {
            task_id: (self.tasks[task_id], self.start[task_id], self.end[task_id])
            for task_id in removed
        }
        for task_id, (ready, start, end, free) in new.items():
            if task_id in self.tasks:
                before[task_id] = (self.tasks[task_id], self.start[task_id], self.end[task_id])
            else:
                before[task_id] = (None, 0.0, 0.0)
            self.tasks[task_id] = graph._tasks[task_id]
            self.ready[task_id], self.start[task_id], self.end[task_id] = ready, start, end
            self.free_before[task_id] = free
        for task_id in removed:
            for table in self._per_task():
                del table[task_id]
        self.order[cut:rest], self.order_ready[cut:rest], self.order_resource[cut:rest] = taken
        del self.order_makespan[cut:]
        self._index(cut)
        return before

    def _per_task(self) -> tuple[dict[int, Any], ...]:
        return (self.tasks, self.ready, self.start, self.end, self.free_before, self.position)

    def _run(
        self,
        graph: TaskGraph,
        queue: list[Queued],
        pending: dict[int, int],
        ready_at: dict[int, float],
    ) -> None:
        """The event loop: take the earliest ready task, run it, queue the users it frees.

        `pending` counts each waiting task's untaken dependencies and `ready_at` holds the
        latest end among its taken ones (0.0 when absent), so a freed user's ready time is
        known without reading all its dependencies again (the max is the same float)."""
        tasks, succ = graph._tasks, graph._succ
        taken, ready_of, start_of, end_of = self.tasks, self.ready, self.start, self.end
        free_before, resource_free, instant = self.free_before, self.resource_free, self.instant
        order, order_ready, order_resource = self.order, self.order_ready, self.order_resource
        pop, push = heapq.heappop, heapq.heappush
        first = len(order)
        while queue:
            ready, task_id = pop(queue)
            task = tasks[task_id]
            resource = task.resource
            free = resource_free.get(resource, 0.0)
            start = ready if ready >= free else free
            end = resource_free[resource] = end_of[task_id] = start + task.duration
            if end == ready:
                instant.add(task_id)
            taken[task_id] = task
            ready_of[task_id] = ready
            start_of[task_id] = start
            free_before[task_id] = free
            order.append(task_id)
            order_ready.append(ready)
            order_resource.append(resource)
            for user in succ[task_id]:
                latest = ready_at.get(user, 0.0)
                if end > latest:
                    latest = end
                waiting = pending[user] - 1
                if waiting:
                    pending[user] = waiting
                    ready_at[user] = latest
                else:
                    del pending[user]
                    ready_at.pop(user, None)
                    push(queue, (latest, user))
        self._index(first)
        if pending:
            member = _describe(graph, _cycle_member(graph, pending))
            raise SimulationError(f"the task graph has a cycle through {member}")

    def _index(self, first: int) -> None:
        """Positions and running makespans of the tasks taken from `first` on."""
        taken = self.order[first:]
        makespan = self.order_makespan[first - 1] if first else 0.0
        self.position.update(zip(taken, range(first, first + len(taken)), strict=True))
        running = accumulate(map(self.end.__getitem__, taken), max, initial=makespan)
        next(running)  # the initial value itself
        self.order_makespan += running

    def _retrace(self, before: Mapping[int, Before]) -> None:
        """Moves the memory events of the tasks in `before` (old task, start, end) to the new ones.

        A pool's trace is re-sorted and re-summed only from the earliest event that moved.
        Nothing, when the schedule keeps no memory.
        """
        if not self.memory:
            return
        moved: dict[Pool, list[float]] = {}  # the old times of the events that move
        fresh: dict[Pool, list[MemoryEvent]] = {}
        tasks, start_of, end_of = self.tasks, self.start, self.end
        for task_id, (old, old_start, old_end) in before.items():
            if old is not None:
                for pool, _ in old.free:
                    moved.setdefault(pool, []).append(old_end)
                for pool, _ in old.alloc:
                    moved.setdefault(pool, []).append(old_start)
            task = tasks.get(task_id)
            if task is None:
                continue
            if task.free:
                end = end_of[task_id]
                for index, (pool, nbytes) in enumerate(task.free):
                    fresh.setdefault(pool, []).append((end, 0, task_id, index, -nbytes))
            if task.alloc:
                start = start_of[task_id]
                for index, (pool, nbytes) in enumerate(task.alloc):
                    fresh.setdefault(pool, []).append((start, 1, task_id, index, nbytes))
        for pool in moved.keys() | fresh.keys():
            earliest = min(
                min(moved.get(pool, (math.inf,))), min(fresh.get(pool, [(math.inf,)]))[0]
            )
            trace = self.pools.get(pool) or _PoolTrace([], [], [])
            keep = bisect_left(trace.events, (earliest,))
            tail = [event for event in trace.events[keep:] if event[2] not in before]
            tail += fresh.get(pool, [])
            tail.sort()
            del trace.events[keep:], trace.levels[keep:], trace.peaks[keep:]
            level, peak = (trace.levels[-1], trace.peaks[-1]) if keep else (0, 0)
            levels = list(accumulate((event[4] for event in tail), initial=level))[1:]
            trace.events += tail
            trace.levels += levels
            trace.peaks += list(accumulate(levels, max, initial=peak))[1:]
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


def simulate(graph: TaskGraph, memory: bool = True) -> Timeline:
    """The full simulation (§3.4.2): O((V + E) log V) for V tasks and E dependencies.
    Without `memory`, the pools are not traced and the timeline's `peak` is empty."""
    return _Schedule(graph, memory).timeline()


class DeltaSimulator:
    """Re-simulates a `TaskGraph` after edits, replaying only what they can reach (§3.4.3).

    Every `update()` equals `simulate(graph)` exactly; it is cheaper the later in the
    timeline the earliest edited task sits, and the sooner the times after it close up
    with the old ones.

    Without `memory` the memory pools are not traced (every timeline's `peak` is
    empty): a search that prices time alone saves a third of a large step's update.
    """

    def __init__(self, graph: TaskGraph, memory: bool = True) -> None:
        self._graph = graph
        self._log = graph.watch()
        self._memory = memory
        self._schedule: _Schedule | None = _Schedule(graph, memory)
        self._timeline = self._schedule.timeline()

    def update(self) -> Timeline:
        """The timeline of the graph as it is now; raises SimulationError on a cycle."""
        edited, self._log.ids = self._log.ids, set()
        if self._schedule is not None and not edited:
            return self._timeline
        # a replay that fails (a cycle) leaves no half-updated schedule behind
        schedule, self._schedule = self._schedule, None
        if schedule is None:
            schedule = _Schedule(self._graph, self._memory)
        else:
            schedule.resimulate(self._graph, edited)
        self._schedule = schedule
        self._timeline = schedule.timeline()
        return self._timeline

    @property
    def timeline(self) -> Timeline:
        """The timeline of the last `update()` (or of the constructor's full simulation)."""
        return self._timeline

    @property
    def memory(self) -> bool:
        """Whether the memory pools are traced."""
        return self._memory


def critical_path(graph: TaskGraph, timeline: Timeline) -> list[int]:
    """The tasks the makespan waits on, last first: from the task that ends last, back
    through what each started after (its latest dependency where that ended when it
    started, else the task before it on its resource) to one that started at 0.

    A search that moves what these tasks are for shortens the step; moving anything
    else cannot (FlexFlow's thesis, §3.5, proposes at random; a chain that makes tens of
    proposals on a 3,000-op step cannot afford to). Starts equal the ends they waited
    for exactly (`_Schedule._run` takes the same float), so equality is the test; of
    several tasks ending at that instant on the resource the longest is taken (an
    instant task stands for none of the wait)."""
    if not timeline.end:
        return []
    start, end, tasks = timeline.start, timeline.end, graph._tasks
    ending: dict[tuple[Hashable, float], list[int]] = {}
    for task_id, task in tasks.items():
        ending.setdefault((task.resource, end[task_id]), []).append(task_id)
    task_id: int | None = max(end, key=end.__getitem__)
    path: list[int] = []
    seen: set[int] = set()
    while task_id is not None and task_id not in seen:
        seen.add(task_id)
        path.append(task_id)
        task, at = tasks[task_id], start[task_id]
        if at <= 0.0:
            break
        latest = max(task.deps, key=end.__getitem__, default=None)
        if latest is not None and end[latest] == at:
            task_id = latest
            continue
        before = [other for other in ending.get((task.resource, at), ()) if other not in seen]
        task_id = max(before, key=lambda other: tasks[other].duration, default=None)
    return path
