"""What a pass says it decided: a few lines a person reads at a glance, after it ran.

A pass gives one by defining a `summary` method (a plugin pass alike; docs/custom-pass.md):

    def summary(self, section: Mapping[str, Any]) -> Summary | None:
        return Summary(f"{section['rules']} rules applied", ("stopped: saturated",))

`section` is what that run of the pass wrote to its report section, so the report
stays the one source of what a pass did and the summary only words it. `tasoc opt`
prints the summaries on stderr once the whole run has succeeded (docs/driver.md):

    soap-shard: mcmc on mesh d=8 (cpu-8): 1.38 ms per step simulated, 2.56x data parallel
      memory per device: peak 2.0 MiB of 32 GiB (fits)
      stopped: budget, after 200 proposals in 2.52 s
    tasoc: warning: soap-shard: ...

The formatting helpers here keep every pass's figures alike: sizes through
`tasoc.ir.limits.format_bytes`, times in ms or s, speedups as `2.56x`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

WARNING_PREFIX = "tasoc: warning: "


@dataclass(frozen=True)
class Summary:
    """One pass run's summary: a headline, detail lines under it, and warnings (what
    the pass decided that the user would not want unawares)."""

    headline: str
    details: tuple[str, ...] = ()
    warnings: tuple[str, ...] = ()

    def lines(self, name: str) -> Iterator[str]:
        """The stderr lines of pass `name`'s summary."""
        yield f"{name}: {self.headline}"
        for detail in self.details:
            yield f"  {detail}"
        for warning in self.warnings:
            yield f"{WARNING_PREFIX}{name}: {warning}"


def summary_of(built: object, section: Mapping[str, Any]) -> Summary | None:
    """The summary pass `built` gives of its run's `section`, None when it gives none.
    `summary` is looked up on the pass, as `verification_pair` is, so that a plugin
    pass needs no base class nor registration to have one."""
    hook = getattr(built, "summary", None)
    return None if hook is None else hook(section)


def format_seconds(value: float) -> str:
    """`0.00138` as `1.38 ms`, `2.5` as `2.5 s`."""
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s" if value < 100 else f"{value:.0f} s"


def format_speedup(value: float | None) -> str:
    """`2.56x`, or `-` when there is no ratio (`search.speedup` gave None)."""
    return "-" if value is None else f"{value:.2f}x"


def stop_line(section: Mapping[str, Any], steps: str | None = None) -> str | None:
    """`stopped: budget, after 200 proposals in 2.52 s` from the common search keys
    (`stopped`, `search_seconds`), `steps` saying what was counted; None when the
    section has no stop reason (no search ran)."""
    stopped = section.get("stopped")
    if stopped is None:
        return None
    after = f", after {steps}" if steps else ""
    took = section.get("search_seconds")
    within = f" in {format_seconds(took)}" if took is not None else ""
    return f"stopped: {stopped}{after}{within}"
