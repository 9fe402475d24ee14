"""Helpers for tests of search passes and their contract (`tasoc.passes.search`)."""

from __future__ import annotations


class FakeClock:
    """A monotonic clock that moves only when a test moves it (`now += seconds`), for
    `Deadline`s whose expiry a test decides."""

    def __init__(self, start: float = 0.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now
