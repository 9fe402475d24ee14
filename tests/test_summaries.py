"""What `tasoc opt` says each pass decided (`passes/summary.py`), and when progress is drawn
(`passes/progress.py`): summaries on stderr once the run succeeded, stdout still IR, `-q`
silent, a failing run's one error line alone; progress only on a terminal off CI."""

from __future__ import annotations

import io
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
from conftest import assert_one_line_error

from tasoc.passes import progress
from tasoc.passes.search import Deadline, search_progress
from tasoc.passes.summary import Summary, format_seconds, summary_of

EXAMPLES = Path(__file__).parent.parent / "examples"

SMALL_STEP = "zoo:alexnet?batch=6&image=63&width=0.125&train=sgd"
"""A training step whose batch of 6 no mesh of 4 devices splits."""


def _summary(err: str, name: str) -> list[str]:
    """The lines of pass `name`'s summary in `err`: its headline and the details under it."""
    lines = err.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{name}: "))
    end = next(
        (i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines)
    )
    return lines[start:end]


def test_equality_rewrite_says_what_it_applied_and_how_it_stopped(tasoc) -> None:
    pipeline = "equality-rewrite{retime=0 timeout=20}"
    result = tasoc("opt", "zoo:nasrnn?hidden=16&length=2", "-p", pipeline)
    assert result.code == 0, result
    assert result.out.startswith("builtin.module")
    headline, *details = _summary(result.err, "equality-rewrite")
    assert ("applied" in headline and "predicted" in headline) or "unchanged" in headline
    assert any(line.startswith("  stopped: ") and " rounds in " in line for line in details)


def test_autodiff_says_loss_optimizer_and_peak_memory(tasoc, tmp_path: Path) -> None:
    pipeline = "autodiff{loss=softmax-cross-entropy optimizer=adam lr=0.01}"
    result = tasoc("opt", EXAMPLES / "classifier.mlir", "-p", pipeline, "-o", tmp_path / "s.mlir")
    assert result.code == 0 and result.out == "", result
    headline, peak = _summary(result.err, "autodiff")
    assert "loss softmax-cross-entropy, optimizer adam (lr 0.01)" in headline
    assert "weight tensors" in headline
    assert peak.startswith("  peak memory ") and "iB" in peak


def test_soap_shard_warns_of_a_slower_plan_and_an_unsplit_batch(tasoc) -> None:
    result = tasoc("opt", SMALL_STEP, "-p", "soap-shard{mesh=4 search=data-parallel}")
    assert result.code == 0, result
    assert result.out.startswith("builtin.module")
    headline, memory, baselines, *_ = _summary(result.err, "soap-shard")
    assert headline.startswith("soap-shard: data-parallel on mesh d=4 (cpu-4): ")
    fastest = re.search(r", [0-9.]+x over ([a-z-]+) \(the fastest baseline\)$", headline)
    assert "per step simulated" in headline and fastest is not None
    assert memory.startswith("  memory per device: peak ") and memory.endswith(": fits")
    assert baselines.startswith("  baselines simulated: data-parallel ")
    assert " expert " in baselines and "; not applying: dlrm-hybrid, layer-wise" in baselines
    warnings = [line for line in result.err.splitlines() if line.startswith("tasoc: warning: ")]
    slower, unsplit = warnings
    best = fastest.group(1)
    assert f"the written plan is slower than {best}" in slower and f"search={best}" in slower
    assert "mesh d=4 cannot split the batch (6)" in unsplit
    assert "ops left replicated (graph.conv2d #0, " in unsplit and "more)" in unsplit


def test_soap_shard_by_default_says_what_the_ilp_gave_and_warns_of_nothing(tasoc) -> None:
    """The default search (auto) writes the best of MCMC's chains, the ILP's plan and
    the baselines among their starts: never a plan slower than a baseline."""
    result = tasoc("opt", SMALL_STEP, "-p", "soap-shard{mesh=4 budget=50 seed=0}")
    assert result.code == 0, result
    lines = _summary(result.err, "soap-shard")
    assert lines[0].startswith("soap-shard: auto on mesh d=4 (cpu-4): ")
    (ilp,) = [line for line in lines if line.startswith("  ilp (")]
    assert "simulated, then MCMC from it and the baselines: the plan written found from " in ilp
    warnings = [line for line in result.err.splitlines() if line.startswith("tasoc: warning: ")]
    assert len(warnings) == 1 and "cannot split the batch (6)" in warnings[0]


def test_soap_shard_search_says_how_it_stopped(tasoc) -> None:
    pipeline = "soap-shard{mesh=2 search=mcmc budget=20 seed=0}"
    result = tasoc("opt", "zoo:alexnet?batch=4&image=63&width=0.125&train=sgd", "-p", pipeline)
    assert result.code == 0, result
    lines = _summary(result.err, "soap-shard")
    assert lines[0].startswith("soap-shard: mcmc on mesh d=2 ")
    assert "over data parallel" in lines[0] and "(the fastest baseline)" in lines[0]
    assert any(line.startswith("  stopped: ") and " proposals in " in line for line in lines)


def test_placement_says_peak_per_device_and_bytes_moved(tasoc, tmp_path: Path) -> None:
    pipeline = "soap-shard{mesh=2 search=expert},placement{search=belady capacity=8MB}"
    step = "zoo:alexnet?batch=4&image=63&width=0.125&train=sgd"
    result = tasoc("opt", step, "-p", pipeline, "-o", tmp_path / "p.mlir")
    assert result.code == 0, result
    headline, moved, simulated, *_ = _summary(result.err, "placement")
    assert headline.startswith("placement: belady: device memory peak ")
    assert "of 7.6 MiB per device (2 devices)" in headline and "without placement" in headline
    assert moved.startswith("  moved ") and " to host and " in moved
    assert "of the ideal's speed" in simulated and "over LRU" in simulated
    assert result.err.index("soap-shard: ") < result.err.index("placement: ")


def test_quiet_prints_no_summary(tasoc) -> None:
    result = tasoc("opt", SMALL_STEP, "-p", "soap-shard{mesh=4}", "-q")
    assert result.code == 0 and result.err == "", result
    assert result.out.startswith("builtin.module")


def test_a_failing_run_prints_its_error_alone(tasoc) -> None:
    """The pass before the failing one completed: its summary is not printed either."""
    pipeline = "soap-shard{mesh=4},placement{search=belady capacity=1000}"
    assert_one_line_error(tasoc("opt", SMALL_STEP, "-p", pipeline), "placement: ")


def test_pass_statistics_keep_their_blocks_before_the_summaries(tasoc) -> None:
    result = tasoc("opt", SMALL_STEP, "-p", "soap-shard{mesh=4}", "--pass-statistics")
    lines = result.err.splitlines()
    assert lines[0].startswith("===-- soap-shard ")
    assert lines.index(_summary(result.err, "soap-shard")[0]) > 0


class _Plugin:
    """A pass from a plugin: `summary` is all it needs."""

    name = "count-ops"

    def summary(self, section: Mapping[str, Any]) -> Summary:
        return Summary(f"{section['ops']} ops", ("seen",), ("too many",))


def test_a_plugin_pass_gives_its_summary() -> None:
    summary = summary_of(_Plugin(), {"ops": 3})
    assert summary is not None
    assert list(summary.lines("count-ops")) == [
        "count-ops: 3 ops",
        "  seen",
        "tasoc: warning: count-ops: too many",
    ]
    assert summary_of(object(), {}) is None


def test_times_read_in_ms_or_s() -> None:
    assert format_seconds(0.00138) == "1.38 ms"
    assert format_seconds(2.5) == "2.5 s"


class _Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


@pytest.mark.parametrize(
    ("ci", "terminal", "drawn"),
    [("", True, True), ("true", True, False), ("1", True, False), ("", False, False)],
)
def test_progress_only_on_a_terminal_off_ci(
    monkeypatch: pytest.MonkeyPatch, ci: str, terminal: bool, drawn: bool
) -> None:
    monkeypatch.setenv("CI", ci)
    stderr = _Terminal() if terminal else io.StringIO()
    monkeypatch.setattr("sys.stderr", stderr)
    assert progress.shown() is drawn
    with search_progress("search", "step", 10, Deadline.never()) as report:
        assert (report is not None) is drawn
    with progress.progress_bar("work", "op", 10) as update:
        update(5, best="1 ms")
    assert ("work" in stderr.getvalue()) is drawn
    with progress.quiet():
        assert not progress.shown()


def test_equality_rewrite_says_why_re_timing_kept_the_input() -> None:
    """The section of a run whose best graph was predicted faster but whose measured
    speedup's interval includes 1: the summary says what it was and why it was not
    kept."""
    from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass

    retimed = [
        {
            "input": True,
            "search_best": False,
            "ops": 230,
            "predicted": 9.28e-4,
            "speedup_interval": None,
        },
        {
            "input": False,
            "search_best": True,
            "ops": 178,
            "predicted": 8.94e-4,
            "speedup_interval": [0.97, 1.04],
        },
    ]
    section = {
        "rules_applied": {},
        "ops_before": 230,
        "retimed": retimed,
        "measured_speedup": 1.0,
        "stopped": "saturated",
        "rounds": 5,
        "search_seconds": 9.2,
    }
    lines = list(EqualityRewritePass().summary(section).lines("equality-rewrite"))
    assert lines[1] == (
        "  re-timed 2 graphs: kept the input; the search's best (178 ops, predicted 1.04x) "
        "measured 0.97-1.04x over 9 paired rounds, not significant"
    )
