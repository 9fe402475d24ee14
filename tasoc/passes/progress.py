"""Progress bars for long-running passes and commands (tqdm, on a terminal only).

    with progress_bar("equality-rewrite", unit="graph", total=1000, delay=1.0) as update:
        update(done, best="1.2e-3")

The bar goes to stderr, only when stderr is a terminal (logs, pipes and tests stay
clean), and with `delay` only once the work has run that many seconds.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

Update = Callable[..., None]
"""`update(done, total=None, **postfix)`."""


@contextmanager
def progress_bar(
    desc: str, unit: str = "", total: int | None = None, delay: float = 0.0
) -> Iterator[Update]:
    from tqdm import tqdm

    bar: Any = tqdm(
        desc=desc, unit=unit, total=total, delay=delay, leave=False,
        disable=not sys.stderr.isatty(),
    )  # fmt: skip

    def update(done: int, new_total: int | None = None, **postfix: Any) -> None:
        if new_total is not None:
            bar.total = new_total
        bar.n = done
        if postfix:
            bar.set_postfix(postfix, refresh=False)
        bar.refresh()

    try:
        yield update
    finally:
        bar.close()
