"""The prover's worker pool stops tasks that overrun, crash or raise, and goes on;
its workers leave Ctrl-C to the caller; bad worker counts and limits are refused."""

from __future__ import annotations

import os
import signal
import time

import pytest

from tasoc.verify.pool import Task, WorkerStartError, check_jobs, max_jobs, run_tasks

_state: dict[str, int] = {}


def _init(offset: int) -> None:
    _state["offset"] = offset


def _add(value: int) -> int:
    return value + _state["offset"]


def _sleep(seconds: float) -> str:
    time.sleep(seconds)
    return "woke"


def _die() -> None:
    os._exit(3)


def _raise() -> None:
    raise ValueError("bad rule")


def _fail_to_start() -> None:
    os._exit(1)


def _fallback(why: str) -> str:
    return f"fallback: {why}"


def _task(function, *args) -> Task:  # type: ignore[no-untyped-def]
    return Task(function, args, _fallback)


def test_results_come_in_order_from_initialized_workers() -> None:
    tasks = [_task(_add, value) for value in range(20)]
    assert list(run_tasks(tasks, _init, (100,), jobs=2, limit_s=30)) == list(range(100, 120))


def test_a_task_past_its_limit_gets_its_fallback_and_the_rest_still_run() -> None:
    tasks = [_task(_sleep, 60), _task(_add, 1), _task(_sleep, 0), _task(_add, 2)]
    start = time.monotonic()
    results = list(run_tasks(tasks, _init, (0,), jobs=2, limit_s=3))
    assert time.monotonic() - start < 30
    assert results == ["fallback: no answer in 3 s; its worker was stopped", 1, "woke", 2]


def test_a_dying_or_raising_worker_is_replaced() -> None:
    tasks = [_task(_die), _task(_raise), _task(_add, 5), _task(_add, 6)]
    results = list(run_tasks(tasks, _init, (0,), jobs=1, limit_s=30))
    assert results[0] == "fallback: its worker died (exit code 3)"
    assert results[1] == "fallback: ValueError: bad rule"
    assert results[2:] == [5, 6]


def test_a_worker_that_cannot_start_is_an_error_not_a_hang() -> None:
    with pytest.raises(WorkerStartError):
        list(run_tasks([_task(_add, 1)], _fail_to_start, (), jobs=1, limit_s=30))


def _pid() -> int:
    return os.getpid()


def test_workers_ignore_ctrl_c_which_belongs_to_the_caller() -> None:
    """A terminal's Ctrl-C reaches every process of the group; a worker must neither die
    nor print a traceback of its own."""
    results = run_tasks([_task(_pid), _task(_pid)], _init, (0,), jobs=1, limit_s=30)
    first = next(results)
    os.kill(first, signal.SIGINT)
    assert next(results) == first, "the worker was replaced: SIGINT reached it"


@pytest.mark.parametrize("jobs", [0, -1, max_jobs() + 1, True])
def test_a_worker_count_out_of_range_is_refused(jobs: int) -> None:
    with pytest.raises(ValueError, match=f"expected 1 to {max_jobs()} worker processes"):
        check_jobs(jobs)
    with pytest.raises(ValueError):
        list(run_tasks([_task(_add, 1)], _init, (0,), jobs=jobs, limit_s=30))


@pytest.mark.parametrize("limit_s", [0.0, -1.0, float("inf"), float("nan")])
def test_a_limit_that_is_not_a_positive_number_is_refused(limit_s: float) -> None:
    with pytest.raises(ValueError, match="per-task limit must be a positive number"):
        list(run_tasks([_task(_add, 1)], _init, (0,), jobs=1, limit_s=limit_s))
