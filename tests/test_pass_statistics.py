"""`tasoc opt --pass-statistics`: the per-pass blocks, and one section per pass run."""

from __future__ import annotations

from pathlib import Path

from tasoc.driver.statistics import format_pass, format_statistics
from tasoc.passes.report import PassRecord, RunReport

SEARCH_SECTION = {
    "cost_before": 2.1e-3,
    "cost_after": 1.3e-3,
    "predicted_speedup": 2.1e-3 / 1.3e-3,
    "measured_speedup": 1.22,
    "search_seconds": 24.1,
    "stopped": "saturated",
    "seed": 3,
    "rules_applied": {"r1": 2},
}


def _record(name: str, seconds: float, section: dict | None = None) -> PassRecord:
    return PassRecord(
        name,
        name,
        seconds,
        {"func.func": 1, "graph.matmul": 146, "func.return": 1},
        {"func.func": 1, "graph.matmul": 118, "func.return": 1},
        section or {},
    )


def test_a_search_pass_block_shows_every_common_key() -> None:
    lines = format_pass(_record("equality-rewrite", 26.3, SEARCH_SECTION)).splitlines()
    assert lines[0].startswith("===-- equality-rewrite ---") and lines[0].endswith("===")
    assert [line.split()[0] for line in lines[1:]] == [
        "ops", "predicted", "measured", "search", "seed", "pass",
    ]  # fmt: skip
    assert lines[1].split()[1:] == ["148", "->", "120"]
    assert "1.62x (cost 0.0021 -> 0.0013)" in lines[2]
    assert lines[3].endswith("1.22x")
    assert lines[4].endswith("24.1 s (stopped: saturated)")
    assert lines[5].endswith(" 3")
    assert lines[6].endswith("26.3 s")


def test_a_pass_without_a_section_shows_ops_and_time() -> None:
    lines = format_pass(_record("cse", 0.0042)).splitlines()
    assert len(lines) == 3
    assert lines[1].split() == ["ops", "148", "->", "120"]
    assert lines[2].split() == ["pass", "time", "4.2", "ms"]


def test_only_the_keys_present_are_printed() -> None:
    section = {"cost_before": 4.0, "cost_after": 2.0, "stopped": "timeout"}
    text = format_pass(_record("my-search", 1.5, section))
    assert "predicted speedup       - (cost 4 -> 2)" in text
    assert "stopped                 timeout" in text
    assert "measured" not in text and "search time" not in text and "seed" not in text


def test_statistics_have_one_block_per_run_in_order() -> None:
    report = RunReport(passes=[_record("cse", 0.1), _record("dce", 0.2), _record("cse", 0.3)])
    headers = [line for line in format_statistics(report).splitlines() if line.startswith("===")]
    assert [header.split()[1] for header in headers] == ["cse", "dce", "cse"]
    assert format_statistics(RunReport()) == ""


def test_a_pass_run_twice_keeps_each_runs_section() -> None:
    report = RunReport()
    for run in (1, 2):
        report.begin_pass("p")
        report.section("p")["run"] = run
        report.end_pass(_record("p", 0.1))
    assert [record.section for record in report.passes] == [{"run": 1}, {"run": 2}]
    assert report.sections == {"p": {"run": 2}}


def test_opt_prints_statistics_on_stderr(tasoc, tmp_path: Path) -> None:
    out = tmp_path / "m.mlir"
    result = tasoc("opt", "zoo:nasrnn?hidden=8&length=2", "-p", "cse,cse", "--pass-statistics",
                   "-o", out)  # fmt: skip
    assert result.code == 0, result
    lines = result.err.splitlines()
    assert [line.split()[1] for line in lines if line.startswith("===")] == ["cse", "cse"]
    assert sum(line.split()[0] == "ops" for line in lines) == 2
    assert result.out == "" and out.read_text().startswith("builtin.module")


def test_equality_rewrite_statistics_show_its_search(tasoc) -> None:
    pipeline = "equality-rewrite{retime=0 timeout=20}"
    # -q: the statistics alone, without the summary printed after them
    result = tasoc(
        "opt", "zoo:nasrnn?hidden=16&length=2", "-p", pipeline, "--pass-statistics", "-q"
    )
    assert result.code == 0, result
    assert result.out.startswith("builtin.module")
    block = result.err.splitlines()
    assert block[0].startswith("===-- equality-rewrite ")
    labels = [line.split()[0] for line in block[1:]]
    assert labels[:2] == ["ops", "predicted"] and "search" in labels and labels[-1] == "pass"
    assert "(stopped: " in result.err
