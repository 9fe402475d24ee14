"""The contract every search pass keeps: why it stopped, when it must stop, what it
reports, and which seed it uses (DESIGN.md §3).

    deadline = Deadline.after(options.timeout)
    outcome = my_search(start, deadline.share(0.75))   # the rest is left for re-timing
    outcome.write_report(current_report().section(name), resolve_seed(options.seed))

    with search_progress(name, "proposal", budget, deadline) as progress:
        outcome = my_search(start, deadline, progress)   # progress(done, best cost)

A search runs until one of its limits is reached and returns the best it has found,
with the `StopReason` (egg's `StopReason`, from its `Runner`). A `Deadline` is one
point on the monotonic clock; a pass shares it out between its phases (search, then
re-timing; each piece of a split graph) with `share`, so no phase computes times by
hand and no phase can run past the pass's own deadline. A `SearchOutcome` carries the
result and writes the report keys every search pass's section has; other tools
(`tasoc opt --pass-statistics`, the passes' summaries) read those keys by name. A
search reports its progress to a `Progress` callback, which `search_progress` draws as
one bar for every search alike (steps done of the budget, best so far, time left).

A cost model that measures (`cost=measured`, `cost=xla`) spends the search's time too:
a search prices `with charging(cost_model, deadline)`, the model checks the deadline
before each measurement it has not cached and raises `OutOfTime` once it has passed,
and the search stops there with `StopReason.MEASURING`, returning the best graph it
priced (`unpriced`: the input, when not even the input could be priced).

    with charging(cost_model, deadline):
        try:
            cost_before = cost_model.cost(start)
        except OutOfTime:
            return unpriced(start, deadline)
"""

from __future__ import annotations

import math
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any

from tasoc.cost.model import FusedSumCost
from tasoc.passes.progress import progress_bar, shown
from tasoc.passes.report import current_report
from tasoc.passes.summary import format_seconds


class StopReason(StrEnum):
    """Why a search returned: the value is what the report's `stopped` key says."""

    SATURATED = "saturated"
    """Equality saturation: a round changed nothing (or no batch chain could grow)."""
    EXHAUSTED = "exhausted"
    """Backtracking: no graph was left to expand."""
    BUDGET = "budget"
    """The `budget` of graphs expanded was spent."""
    NODE_LIMIT = "node limit"
    """The e-graph reached `node-limit` e-nodes."""
    ROUNDS = "rounds"
    """Equality saturation ran its most rounds."""
    TIMEOUT = "timeout"
    """The deadline passed: the best found so far was returned."""
    PIECES = "pieces searched"
    """A split graph: every piece and every cut was searched in time."""
    CONVERGED = "converged"
    """MCMC: the best strategy did not improve for the last half of the search (§3.5.2)."""
    MEASURING = "timeout while measuring"
    """The deadline passed while the cost model measured what it had not cached (ops,
    regions: `charging`): the best graph priced so far was returned."""


Progress = Callable[[int, float], None]
"""`progress(steps done, a figure)`: how a search reports its progress after each step
(graphs expanded and the best cost, rounds and e-nodes), e.g. to a progress bar."""

PROGRESS_DELAY = 2.0
"""Seconds a search runs before its bar appears: a quick search draws none."""

Clock = Callable[[], float]
"""Seconds on a monotonic clock (`time.monotonic`; tests pass a fake one)."""


@dataclass(frozen=True)
class Deadline:
    """A time by which a search must return, and when its phase began.

    Comparisons read `clock`, so a deadline survives system clock changes. A deadline
    never moves: `share` hands a phase an earlier one, never a later one, which is what
    makes a pass's `timeout` bound every phase together."""

    end: float
    """The time (`clock`) at which the search must stop."""
    start: float
    """The time this deadline was made: `elapsed` counts from here."""
    clock: Clock = time.monotonic

    @classmethod
    def after(cls, seconds: float, clock: Clock = time.monotonic) -> Deadline:
        """The deadline `seconds` from now (`math.inf`: never)."""
        now = clock()
        return cls(now + seconds, now, clock)

    @classmethod
    def never(cls, clock: Clock = time.monotonic) -> Deadline:
        """No deadline: a search stops on its other limits only."""
        return cls.after(math.inf, clock)

    def remaining(self) -> float:
        """Seconds left, 0 once expired."""
        return max(0.0, self.end - self.clock())

    def expired(self) -> bool:
        return self.clock() >= self.end

    def elapsed(self) -> float:
        """Seconds since this deadline (this phase) was made."""
        return self.clock() - self.start

    def wait_for[T](self, work: Callable[[], T]) -> T | None:
        """`work`'s result, or None when the deadline passes first.

        For work that cannot be interrupted (an XLA compile): it runs in a thread while
        this one waits until the deadline, and past it is abandoned — left to finish on
        its own, its result dropped — so a loaded machine, on which a compile takes
        several times as long, makes a pass skip the work, not overrun its timeout. The
        thread is not a daemon: the interpreter waits for it at exit rather than tear
        down a compile in flight (which aborts the process). An exception `work`
        raises is raised here."""
        outcome: list[T] = []
        failure: list[BaseException] = []

        def run() -> None:
            try:
                outcome.append(work())
            except BaseException as err:  # handed to the waiting thread
                failure.append(err)

        worker = threading.Thread(target=run, name="tasoc-deadline-work")
        worker.start()
        left = self.remaining()
        worker.join(left if math.isfinite(left) else None)
        if failure:
            raise failure[0]
        return outcome[0] if outcome else None

    def share(self, fraction: float) -> Deadline:
        """A deadline for a phase starting now: `fraction` (0 < fraction ≤ 1) of the time
        left. Give each of n phases `share(1 / k)` with k the phases still to run, and
        time one phase leaves unused goes to those after it."""
        if not 0.0 < fraction <= 1.0:
            raise ValueError(f"a deadline's share must be in (0, 1], got {fraction}")
        now = self.clock()
        left = max(0.0, self.end - now)
        return Deadline(min(self.end, now + fraction * left), now, self.clock)


@dataclass
class SearchOutcome[T]:
    """What a search returns: the best candidate (a `Dag`, a strategy, a schedule) and
    how it got there."""

    best: T
    cost_before: float
    """The input's predicted cost (seconds, under the pass's cost model)."""
    cost_after: float
    """`best`'s predicted cost."""
    seconds: float
    """Wall time of the search (re-timing included, once the pass has re-timed)."""
    stopped: StopReason
    applied: Counter[str] = field(default_factory=Counter)
    """How often each transformation (a rewrite rule, ...) was applied on the way to
    `best`: empty when `best` is the input."""
    candidates: list[tuple[T, float]] = field(default_factory=list)
    """The cheapest distinct candidates found with their predicted costs, cheapest
    first (`best` among them): what a pass may re-time before choosing."""
    details: dict[str, Any] = field(default_factory=dict)
    """The search's own figures for the report (`graphs_expanded`, `rounds`, ...)."""
    measured_speedup: float | None = None
    """The input's measured time over `best`'s, when re-timing measured both."""

    @property
    def predicted_speedup(self) -> float | None:
        """`cost_before / cost_after`; None when `best` is predicted to cost nothing (or
        infinitely much: `speedup`)."""
        return speedup(self.cost_before, self.cost_after)

    def write_report(self, section: dict[str, Any], seed: int) -> None:
        """Write the keys every search pass's report section has (`cost_before`,
        `cost_after`, `predicted_speedup`, `search_seconds`, `stopped`, `seed`, and
        `measured_speedup` when re-timing measured one), then the search's `details`."""
        section.update(
            cost_before=self.cost_before,
            cost_after=self.cost_after,
            predicted_speedup=self.predicted_speedup,
            search_seconds=round(self.seconds, 3),
            stopped=str(self.stopped),
            seed=seed,
        )
        if self.measured_speedup is not None:
            section["measured_speedup"] = self.measured_speedup
        section.update(self.details)


@contextmanager
def charging(cost_model: object, deadline: Deadline) -> Iterator[None]:
    """Charge the measurements `cost_model` takes inside the block to `deadline` (its
    `budget`, `FusedSumCost.check_budget`): past the deadline, a price that needs a
    new measurement raises `OutOfTime` instead of measuring. The budget before is put
    back on leaving, so a nested phase (polishing, one piece of a split graph) charges
    its own share and its caller's deadline holds again after it. A model that never
    measures (`AnalyticCost`) ignores its budget."""
    if not isinstance(cost_model, FusedSumCost):
        yield
        return
    saved = cost_model.budget
    cost_model.budget = deadline
    try:
        yield
    finally:
        cost_model.budget = saved


def unpriced[T](start: T, deadline: Deadline) -> SearchOutcome[T]:
    """The outcome of a search whose time ran out measuring the input's own cost: the
    input, its cost unknown (NaN: no speedup is predicted), `StopReason.MEASURING`."""
    return SearchOutcome(
        best=start,
        cost_before=math.nan,
        cost_after=math.nan,
        seconds=deadline.elapsed(),
        stopped=StopReason.MEASURING,
    )


def speedup(before: float, after: float) -> float | None:
    """`before / after`, or None when that is no number: `after` is zero or infinite. A
    graph whose ops cancel out, or whose outputs are all constants or folded weights,
    legitimately costs nothing, and under a `memory_limit` no graph may fit (every
    cost infinite), so every ratio of costs or times a search reports goes through
    here. An infinite `before` (a baseline over the memory) is no denominator either."""
    return before / after if 0 < after < math.inf and before < math.inf else None


def resolve_seed(option: int | None) -> int:
    """The seed a pass uses: its own `seed` option when given, else the run's `--seed`
    (`current_report().seed`, 0 outside `tasoc opt`). One rule for every pass, so one
    `--seed` makes a whole pipeline reproducible and a pass's option overrides it."""
    return current_report().seed if option is None else option


@contextmanager
def search_progress(
    name: str,
    unit: str,
    total: int | None,
    deadline: Deadline,
    figure: str = "best",
    show: Callable[[float], str] = format_seconds,
) -> Iterator[Progress | None]:
    """The `Progress` every search reports to: a bar (`progress.progress_bar`, on a
    terminal only) named `name`, of steps (`unit`) done out of `total` (its budget),
    with `figure` (the best cost so far, written by `show`) and the seconds left of
    `deadline`. One helper, so every search's bar reads alike. None where no bar is
    shown, so that a search computes no figure nobody sees."""
    if not shown():
        yield None
        return
    with progress_bar(name, unit, total, delay=PROGRESS_DELAY) as update:

        def progress(done: int, value: float) -> None:
            left = deadline.remaining()
            timing = {"left": f"{left:.0f}s"} if left < math.inf else {}
            update(done, **{figure: show(value)}, **timing)

        yield progress
