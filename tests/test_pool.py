"""The prover's worker pool stops tasks that overrun, crash or raise, and goes on."""

from __future__ import annotations

import os
import time

import pytest

from tasoc.verify.pool import Task, WorkerStartError, run_tasks

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
