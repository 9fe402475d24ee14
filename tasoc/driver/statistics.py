"""`tasoc opt --pass-statistics`: one readable block per pass run, after the run.

MLIR's `-mlir-pass-statistics` habit: what each pass did, in a form to read rather
than parse (`--report` is the form to parse). Every block has the op counts and the
pass's wall time, which the driver measures for any pass; a search pass adds what it
wrote under the common report keys of `tasoc.passes.search` (`cost_before`,
`cost_after`, `predicted_speedup`, `measured_speedup`, `search_seconds`, `stopped`,
`seed`), and a line is printed only for the keys present:

    ===-- equality-rewrite ----------------------------------------===
      ops                     148 -> 120
      predicted speedup       1.63x (cost 0.0021 -> 0.0013)
      measured speedup        1.22x
      search time             24.1 s (stopped: saturated)
      seed                    0
      pass time               26.3 s
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from typing import Any

from tasoc.passes.report import PassRecord, RunReport

WIDTH = 64
"""Characters of a block's header line."""

LABEL_WIDTH = 22


def _line(label: str, value: str) -> str:
    return f"  {label:<{LABEL_WIDTH}}  {value}"


def _number(value: float) -> str:
    return f"{value:.3g}"


def _seconds(value: float) -> str:
    if value < 1:
        return f"{value * 1e3:.3g} ms"
    return f"{value:.3g} s" if value < 10 else f"{value:.1f} s"


def _search_lines(section: Mapping[str, Any]) -> Iterator[str]:
    """The lines for the common search keys `section` holds."""
    speedup = section.get("predicted_speedup")
    costs = (
        f"cost {_number(section['cost_before'])} -> {_number(section['cost_after'])}"
        if "cost_before" in section and "cost_after" in section
        else None
    )
    if speedup is not None or costs is not None:
        shown = f"{speedup:.2f}x" if speedup is not None else "-"
        yield _line("predicted speedup", f"{shown} ({costs})" if costs else shown)
    if section.get("measured_speedup") is not None:
        yield _line("measured speedup", f"{section['measured_speedup']:.2f}x")
    stopped = section.get("stopped")
    if "search_seconds" in section:
        reason = f" (stopped: {stopped})" if stopped is not None else ""
        yield _line("search time", _seconds(section["search_seconds"]) + reason)
    elif stopped is not None:
        yield _line("stopped", str(stopped))
    if "seed" in section:
        yield _line("seed", str(section["seed"]))


def format_pass(record: PassRecord) -> str:
    """The block of one pass run (see the module docstring)."""
    header = f"===-- {record.name} "
    lines = [
        header + "-" * max(WIDTH - len(header) - 3, 3) + "===",
        _line("ops", f"{sum(record.ops_before.values())} -> {sum(record.ops_after.values())}"),
        *_search_lines(record.section),
        _line("pass time", _seconds(record.seconds)),
    ]
    return "\n".join(lines)


def format_statistics(report: RunReport) -> str:
    """One block per pass run of `report`, in pipeline order ('' when none ran)."""
    return "\n".join(format_pass(record) for record in report.passes)
