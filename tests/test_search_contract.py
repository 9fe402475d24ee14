"""The contract every search pass keeps (`tasoc.passes.search`): stop reasons, a
deadline shared out between phases, the report keys an outcome writes, the seed rule."""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st
from search_helpers import FakeClock

from tasoc.passes.report import RunReport, reporting
from tasoc.passes.search import Deadline, SearchOutcome, StopReason, resolve_seed


def test_stop_reasons_read_as_the_report_writes_them() -> None:
    assert [str(reason) for reason in StopReason] == [
        "saturated", "exhausted", "budget", "node limit", "rounds", "timeout", "pieces searched",
        "converged", "timeout while measuring",
    ]  # fmt: skip
    assert StopReason("node limit") is StopReason.NODE_LIMIT


def test_a_deadline_counts_down_on_its_clock() -> None:
    clock = FakeClock(start=100.0)
    deadline = Deadline.after(10, clock)
    clock.now += 4
    assert deadline.remaining() == 6 and deadline.elapsed() == 4 and not deadline.expired()
    clock.now += 6
    assert deadline.expired() and deadline.remaining() == 0
    clock.now += 1
    assert deadline.remaining() == 0 and deadline.elapsed() == 11


def test_a_share_is_a_fraction_of_the_time_left_and_starts_now() -> None:
    clock = FakeClock(start=100.0)
    deadline = Deadline.after(10, clock)
    clock.now += 2
    phase = deadline.share(0.25)
    assert phase.remaining() == 2 and phase.elapsed() == 0
    clock.now += 3  # the phase overran: the rest of the deadline is still its own
    assert phase.expired() and deadline.remaining() == 5


def test_time_a_phase_leaves_unused_goes_to_the_next() -> None:
    clock = FakeClock(start=100.0)
    deadline = Deadline.after(12, clock)
    shares = []
    for left in (3, 2, 1):  # three phases, each an equal share of what is left
        phase = deadline.share(1 / left)
        shares.append(phase.remaining())
        clock.now += phase.remaining() / 2
    assert shares == [4, 5, 7.5]


@given(
    seconds=st.floats(0, 1e6),
    spent=st.floats(0, 2e6),
    fraction=st.floats(1e-6, 1.0),
)
def test_a_share_never_ends_after_its_deadline(
    seconds: float, spent: float, fraction: float
) -> None:
    clock = FakeClock(start=100.0)
    deadline = Deadline.after(seconds, clock)
    clock.now += spent
    phase = deadline.share(fraction)
    assert phase.end <= deadline.end
    assert phase.remaining() <= deadline.remaining()


@pytest.mark.parametrize("fraction", [0.0, -0.5, 1.5, math.nan])
def test_a_share_outside_zero_to_one_is_refused(fraction: float) -> None:
    with pytest.raises(ValueError, match="share must be in"):
        Deadline.after(1).share(fraction)


def test_no_deadline_never_expires_and_neither_do_its_shares() -> None:
    never = Deadline.never()
    assert not never.expired() and never.remaining() == math.inf
    assert never.share(0.5).remaining() == math.inf


def outcome(**changes: object) -> SearchOutcome[str]:
    fields: dict[str, object] = {
        "best": "better",
        "cost_before": 3.0,
        "cost_after": 2.0,
        "seconds": 1.23456,
        "stopped": StopReason.BUDGET,
        "details": {"graphs_expanded": 5},
    }
    fields.update(changes)
    return SearchOutcome(**fields)  # type: ignore[arg-type]


def test_an_outcome_writes_the_keys_every_search_pass_reports() -> None:
    section: dict[str, object] = {"search": "backtrack"}
    outcome().write_report(section, seed=4)
    assert section == {
        "search": "backtrack",
        "cost_before": 3.0,
        "cost_after": 2.0,
        "predicted_speedup": 1.5,
        "search_seconds": 1.235,
        "stopped": "budget",
        "seed": 4,
        "graphs_expanded": 5,
    }


def test_the_measured_speedup_is_written_only_when_one_was_measured() -> None:
    section: dict[str, object] = {}
    outcome(measured_speedup=1.25).write_report(section, seed=0)
    assert section["measured_speedup"] == 1.25


def test_a_free_best_has_no_predicted_speedup() -> None:
    section: dict[str, object] = {}
    outcome(cost_after=0.0).write_report(section, seed=0)
    assert section["predicted_speedup"] is None


def test_the_seed_is_the_pass_option_else_the_runs_seed() -> None:
    assert resolve_seed(None) == 0  # outside `tasoc opt`: a scratch report's
    with reporting(RunReport(seed=7)):
        assert resolve_seed(None) == 7
        assert resolve_seed(3) == 3
        assert resolve_seed(0) == 0


def test_the_seed_of_tasoc_opt_reaches_a_pass(tasoc, tmp_path: Path) -> None:
    report = tmp_path / "r.json"
    result = tasoc(
        "opt", "zoo:nasrnn?hidden=8&length=2", "-p", "equality-rewrite{retime=0 timeout=5}",
        "--seed", "5", "--report", report, "-o", tmp_path / "o.mlir",
    )  # fmt: skip
    assert result.code == 0, result
    assert json.loads(report.read_text())["sections"]["equality-rewrite"]["seed"] == 5


def test_work_waited_for_until_the_deadline_is_abandoned_past_it() -> None:
    """`wait_for` returns the work's result, None when the deadline comes first (the
    work finishing on its own), and raises what the work raised."""
    release = threading.Event()
    assert Deadline.after(5).wait_for(lambda: 42) == 42
    assert Deadline.never().wait_for(lambda: "done") == "done"
    start = time.monotonic()
    assert Deadline.after(0.2).wait_for(lambda: release.wait(10)) is None
    assert time.monotonic() - start < 5
    release.set()
    with pytest.raises(ZeroDivisionError):
        Deadline.after(5).wait_for(lambda: 1 // 0)
