"""Progress on stderr for work that can last seconds: a bar, or one status line.

    with progress_bar("equality-rewrite", unit="graph", total=1000, delay=1.0) as update:
        update(done, best="1.2e-3")
    with status("compiling for 8 devices"):
        program.compile()

Both are drawn only where a person watches (`shown`): stderr is a terminal, `CI` is
not set (CI services set it; their logs are files, where a bar's carriage returns are
noise) and no `quiet()` block is active (`tasoc opt -q`). Logs, pipes and tests stay
clean, and work that is not shown pays nothing for its progress. Neither stays on the
screen once the work is done (`leave=False`): what a command decided is printed after.

Searches draw their bar through `tasoc.passes.search.search_progress`, which adds the
best figure so far and the time left of their deadline.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

Update = Callable[..., None]
"""`update(done, total=None, **postfix)`."""

_QUIET: ContextVar[bool] = ContextVar("tasoc_quiet", default=False)


def on_ci() -> bool:
    """Whether `CI` is set to something true, as CI services set it (`CI=true`)."""
    return os.environ.get("CI", "").lower() not in ("", "0", "false", "no")


def shown() -> bool:
    """Whether progress is drawn now: on a terminal, off CI, outside `quiet()`."""
    return not _QUIET.get() and not on_ci() and sys.stderr.isatty()


@contextmanager
def quiet(silent: bool = True) -> Iterator[None]:
    """No progress is drawn while the block runs (when `silent`): `tasoc opt -q`."""
    token = _QUIET.set(silent or _QUIET.get())
    try:
        yield
    finally:
        _QUIET.reset(token)


def _ignore(done: int, new_total: int | None = None, **postfix: Any) -> None:
    """The `Update` of progress that is not shown."""


@contextmanager
def progress_bar(
    desc: str, unit: str = "", total: int | None = None, delay: float = 0.0
) -> Iterator[Update]:
    """A bar of `done` out of `total` `unit`s, drawn once the work has run `delay`
    seconds and at most ten times a second (tqdm's `mininterval`), however often
    `update` is called: a search may call it after every step."""
    if not shown():
        yield _ignore
        return
    from tqdm import tqdm

    bar: Any = tqdm(desc=desc, unit=unit, total=total, delay=delay, leave=False)

    def update(done: int, new_total: int | None = None, **postfix: Any) -> None:
        if new_total is not None:
            bar.total = new_total
        if postfix:
            bar.set_postfix(postfix, refresh=False)
        bar.update(done - bar.n)  # draws only when `delay` and `mininterval` allow

    try:
        yield update
    finally:
        bar.close()


@contextmanager
def status(message: str) -> Iterator[None]:
    """`message…` on one stderr line while the block runs (a compile, which reports no
    steps), erased after it."""
    if not shown():
        yield
        return
    from tqdm import tqdm

    line: Any = tqdm(desc=f"{message}…", bar_format="{desc} ({elapsed})", leave=False)
    try:
        yield
    finally:
        line.close()
