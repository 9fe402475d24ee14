"""Worker processes with a hard wall-clock limit per task, for the prover.

z3's `timeout` is soft: z3 polls it between steps, and on some quantified problems
(4-operator rules) one step of e-matching runs for many minutes and gigabytes past it.
The only reliable stop is to kill the process, so `run_tasks` gives each task to a
spawned worker, waits at most `limit_s` for its answer, and otherwise kills that worker,
records the task's fallback answer (for a proof: UNKNOWN) and starts a fresh worker in
its place. A worker that dies (a crash, the kernel's out-of-memory killer) is handled
the same way, and so is a task that raises: its worker's z3 state may be broken.

Workers are spawned, not forked: a forked child would inherit this process's z3 state
(and any threads), which z3 does not support. Each runs `initializer(*initargs)` once
(building the axiom theory) before it reports ready; the limit counts from when a task
is handed over, so the start-up is not charged to the first task.

Ctrl-C belongs to the caller. A terminal sends SIGINT to the whole foreground process
group, workers included; a worker that took it would die with a traceback of its own
beside the caller's one-line message. So workers are born ignoring SIGINT (an ignored
signal stays ignored across the exec that spawning does, and Python keeps it so), and
the caller, on its KeyboardInterrupt, stops them all (`run_tasks`' `finally`).
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from multiprocessing import get_context
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

_READY = "ready"

MAX_JOBS_PER_CORE = 4
"""At most this many workers per available core: z3 is CPU-bound, so more only costs
memory (each worker holds its own axiom theory), and a mistyped `--jobs 100000` must
not start a hundred thousand processes."""


def max_jobs() -> int:
    """The most worker processes `run_tasks` starts on this machine."""
    return MAX_JOBS_PER_CORE * len(os.sched_getaffinity(0))


def check_jobs(jobs: int) -> None:
    """ValueError unless `jobs` is a worker count `run_tasks` accepts (1 to `max_jobs`)."""
    if isinstance(jobs, bool) or not isinstance(jobs, int) or not 1 <= jobs <= max_jobs():
        raise ValueError(
            f"expected 1 to {max_jobs()} worker processes "
            f"({MAX_JOBS_PER_CORE} per available core), got {jobs!r}"
        )


@dataclass(frozen=True)
class Task:
    """`function(*args)` in a worker; `fallback(why)` in the caller when it cannot answer."""

    function: Callable[..., Any]
    args: tuple[Any, ...]
    fallback: Callable[[str], Any]


class WorkerStartError(RuntimeError):
    """A worker died before it was ready: its initializer fails, so no task can run."""


def run_tasks(
    tasks: Sequence[Task],
    initializer: Callable[..., None],
    initargs: tuple[Any, ...],
    jobs: int,
    limit_s: float,
) -> Iterator[Any]:
    """The results of `tasks`, in order, from `jobs` worker processes; a task that does
    not answer within `limit_s` seconds of being handed over gets its fallback."""
    check_jobs(jobs)
    if not 0 < limit_s < float("inf"):  # NaN too: every deadline would be missed at once
        raise ValueError(f"the per-task limit must be a positive number of seconds, got {limit_s}")
    pool = _Pool(initializer, initargs, jobs)
    try:
        yield from pool.run(tasks, limit_s)
    finally:
        pool.close()


def _serve(connection: Connection, initializer: Callable[..., None], initargs: tuple) -> None:
    """A worker's loop: initialize, report ready, answer `(index, function, args)`
    until it is killed. SIGINT is the caller's (module docstring); ignoring it here
    again covers a worker started from a thread, where `_start` cannot set it."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    initializer(*initargs)
    connection.send(_READY)
    while True:
        index, function, args = connection.recv()
        try:
            connection.send((index, True, function(*args)))
        except Exception as error:  # reported to the caller, which replaces this worker
            connection.send((index, False, f"{type(error).__name__}: {error}"))
            return


@contextmanager
def sigint_ignored() -> Iterator[None]:
    """Ignore SIGINT while a worker is started, so that it is born ignoring it (only the
    main thread may change a signal's handler; elsewhere `_serve` sets it a moment
    later)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        yield
    finally:
        signal.signal(signal.SIGINT, previous)


class _Worker:
    def __init__(self, process: BaseProcess, connection: Connection) -> None:
        self.process = process
        self.connection = connection
        self.ready = False
        self.task: int | None = None
        self.deadline = float("inf")

    def stop(self) -> None:
        if self.process.is_alive():
            self.process.kill()
        self.process.join()
        self.connection.close()


class _Pool:
    def __init__(self, initializer: Callable[..., None], initargs: tuple, jobs: int) -> None:
        self._context = get_context("spawn")
        self._initializer = initializer
        self._initargs = initargs
        self._workers = [self._start() for _ in range(jobs)]

    def _start(self) -> _Worker:
        ours, theirs = self._context.Pipe()
        process = self._context.Process(
            target=_serve, args=(theirs, self._initializer, self._initargs), daemon=True
        )
        with sigint_ignored():
            process.start()
        theirs.close()
        return _Worker(process, ours)

    def _replace(self, worker: _Worker) -> None:
        worker.stop()
        self._workers[self._workers.index(worker)] = self._start()

    def run(self, tasks: Sequence[Task], limit_s: float) -> Iterator[Any]:
        waiting = deque(range(len(tasks)))
        answers: dict[int, Any] = {}
        next_index = 0
        while next_index < len(tasks):
            for worker in self._workers:
                if worker.ready and worker.task is None and waiting:
                    worker.task = index = waiting.popleft()
                    worker.deadline = time.monotonic() + limit_s
                    worker.connection.send((index, tasks[index].function, tasks[index].args))
            soonest = min(worker.deadline for worker in self._workers)
            timeout = None if soonest == float("inf") else max(0.0, soonest - time.monotonic())
            readable = set(wait([worker.connection for worker in self._workers], timeout))
            for worker in list(self._workers):
                if worker.connection in readable:
                    self._receive(worker, tasks, answers)
                elif worker.task is not None and time.monotonic() > worker.deadline:
                    answers[worker.task] = tasks[worker.task].fallback(
                        f"no answer in {limit_s:g} s; its worker was stopped"
                    )
                    self._replace(worker)
            while next_index in answers:
                yield answers.pop(next_index)
                next_index += 1

    def _receive(self, worker: _Worker, tasks: Sequence[Task], answers: dict[int, Any]) -> None:
        try:
            message = worker.connection.recv()
        except EOFError:  # the worker died
            if not worker.ready:
                raise WorkerStartError("a prover worker died while starting") from None
            if worker.task is not None:
                worker.process.join()
                answers[worker.task] = tasks[worker.task].fallback(
                    f"its worker died (exit code {worker.process.exitcode})"
                )
            self._replace(worker)
            return
        if message == _READY:
            worker.ready = True
            return
        index, ok, value = message
        answers[index] = value if ok else tasks[index].fallback(value)
        worker.task, worker.deadline = None, float("inf")
        if not ok:
            self._replace(worker)

    def close(self) -> None:
        """Stop every worker, busy or not (an abandoned generator stops them too)."""
        for worker in self._workers:
            worker.stop()
