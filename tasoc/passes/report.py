"""The run report: what each pass of a `tasoc opt` run did, written to `--report`.

It lives beside the passes (which write to it) rather than in the driver (which
reads it), so that passes never import the driver:

    from tasoc.passes.report import current_report

    report = current_report()              # the active `tasoc opt` run, or a scratch one
    seed = report.seed                     # `--seed N`
    report.section("equality-rewrite").update(cost_before=c0, cost_after=c1)

`tasoc opt --report R.json` writes `RunReport.to_json()`; the format is in docs/driver.md.
"""

from __future__ import annotations

import math
from collections.abc import Callable, ItemsView, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from tasoc.passes.figures import Figure


@dataclass
class PassRecord:
    """What one pass of the pipeline did, as the driver measured it."""

    name: str
    """The pass's name (`cse`)."""
    spec: str
    """The pass with its options as in a pipeline (`canonicalize`, `cse`, `x{k=v}`)."""
    seconds: float
    """Wall time of the pass alone (verification and checks excluded)."""
    ops_before: dict[str, int]
    """Op counts by op name (`graph.matmul`) before the pass."""
    ops_after: dict[str, int]
    """Op counts by op name after the pass."""
    section: dict[str, Any] = field(default_factory=dict)
    """What this run of the pass wrote to its report section (empty if nothing): a pass
    run twice in one pipeline has one record per run, each with its own section."""


class Figures(dict[str, Figure]):
    """The pictures asked for, by file stem: each a `Figure`, or a function making it,
    called (once) when the picture is first read. Describing a picture can cost what a
    search's last second buys (soap-shard's sharding map and timeline of a 3,000-op
    step on 64 devices: about a second of CPU), and a run without `--plots` never
    reads one."""

    def __getitem__(self, name: str) -> Figure:
        figure = super().__getitem__(name)
        if callable(figure):
            figure = figure()
            super().__setitem__(name, figure)
        return figure

    def get(self, name: str, default: Any = None) -> Any:  # type: ignore[override]
        try:
            return self[name]
        except KeyError:
            return default

    def items(self) -> ItemsView[str, Figure]:  # type: ignore[override]
        for name in list(self.keys()):
            self[name]  # made now, if it is still a function
        return super().items()


@dataclass
class RunReport:
    """The record of one `tasoc opt` run; passes add their own sections.

    The driver fills `input`, `pipeline`, `seed` and `passes`; a pass puts what it
    decided (costs before/after, search statistics, ...) under `section(its name)`,
    which the driver also files with the pass's record.
    Everything stored must be JSON-serializable (numbers, strings, lists, dicts).
    """

    input: str = ""
    pipeline: str = ""
    seed: int = 0
    passes: list[PassRecord] = field(default_factory=list)
    sections: dict[str, dict[str, Any]] = field(default_factory=dict)
    figures: Figures = field(default_factory=Figures, repr=False)
    """Pictures the passes asked for, by file stem (`figure`); drawn by `--plots DIR`,
    not part of the JSON."""

    def section(self, name: str) -> dict[str, Any]:
        """The dict a pass called `name` writes to, created empty on first use."""
        return self.sections.setdefault(name, {})

    def figure(self, name: str, figure: Figure | Callable[[], Figure]) -> None:
        """Ask for a picture, drawn as `DIR/<name>.png` by `tasoc opt --plots DIR`
        (the latest figure of a name wins); a function making it is called only when
        the picture is read (`Figures`)."""
        self.figures[name] = figure

    def begin_pass(self, name: str) -> None:
        """Start a fresh section for a run of pass `name` (the driver calls this before
        each pass): without it, a pass run twice in one pipeline would write its second
        run's figures over its first's. `sections` keeps each pass's latest run; every
        run's own section goes into its PassRecord (`end_pass`)."""
        self.sections.pop(name, None)

    def end_pass(self, record: PassRecord) -> None:
        """Record a finished pass, with the section its run wrote."""
        record.section = self.sections.get(record.name, {})
        self.passes.append(record)

    def to_json(self) -> dict[str, Any]:
        """The report as plain JSON data (the `--report` file's content). JSON has no
        infinity or NaN (a cost is infinite when no graph fits a memory limit), so a
        non-finite number is written as the string `"inf"`, `"-inf"` or `"nan"`."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "figures"}
        data["passes"] = [asdict(record) for record in self.passes]
        return _finite(data)


def _finite(value: Any) -> Any:
    """`value` with every non-finite float inside it replaced by its name."""
    if isinstance(value, float) and not math.isfinite(value):
        return str(value)
    if isinstance(value, dict):
        return {key: _finite(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(item) for item in value]
    return value


_ACTIVE_REPORT: ContextVar[RunReport | None] = ContextVar("tasoc_run_report", default=None)


def current_report() -> RunReport:
    """The report of the running `tasoc opt`; a fresh scratch report outside one.

    Returning a scratch report rather than None lets a pass write unconditionally,
    whether the driver or a Python user is running it.
    """
    return _ACTIVE_REPORT.get() or RunReport()


@contextmanager
def reporting(report: RunReport) -> Iterator[RunReport]:
    """Make `report` the one `current_report()` returns while the block runs."""
    token = _ACTIVE_REPORT.set(report)
    try:
        yield report
    finally:
        _ACTIVE_REPORT.reset(token)
