"""The shipped rule library and `tasoc rules`: every shipped rule proven and numerically
true at several shapes, tampered files proven again, malformed ones refused, and the
commands with their option ranges and Ctrl-C."""

from __future__ import annotations

import itertools
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
from conftest import assert_one_line_error
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from rewrite_helpers import tampered_copy

from tasoc.backends.numpy import run_reference
from tasoc.ir import dag
from tasoc.ir.rule_text import format_rules
from tasoc.ir.rules import Rule
from tasoc.models.registry import build_model
from tasoc.passes.rewrite.library import library_path, load_library, read_rules
from tasoc.passes.rewrite.match import directed, find_matches
from tasoc.verify import prover
from tasoc.verify.instances import instances

LIBRARY = load_library()
SHIPPED = library_path()


def test_the_shipped_library_is_proven_and_current() -> None:
    rules = read_rules(SHIPPED)
    assert len(rules) == len(LIBRARY.rules) >= 250
    assert all(rule.is_proven and rule.proof_is_current for rule in rules)
    assert any(rule.preconditions for rule in rules)  # shape-guarded rules are kept
    assert any(len(rule.src.outputs) > 1 for rule in rules)  # and multi-output ones
    header = SHIPPED.read_text().splitlines()[:4]
    assert any("tasoc rules generate --max-ops 3" in line for line in header)


def test_the_library_fuses_bert_projections_sharing_an_input() -> None:
    """The broadcast-matmul fusion (two matmuls of a rank-3 x by rank-2 weights ==
    one matmul of the concatenated weights, split) is shipped, proven, and matches
    every pair of a small BERT's Q/K/V projections."""
    sides = [{"matmul": 2}, {"concat": 1, "matmul": 1, "split": 1}]
    fusions = [
        rule
        for rule in LIBRARY.rules
        if sorted(i.rank for i in rule.inputs) == [2, 2, 3]
        and sorted((rule.src.op_counts(), rule.tgt.op_counts()), key=len) == sides
    ]
    assert fusions and all(rule.is_proven for rule in fusions)
    bert = dag.from_module(build_model("bert?layers=1&hidden=64&heads=4&seq=16"))
    fused = {
        frozenset(value.node.attr("name") for value in match.inputs.values() if value.sig.rank == 2)
        for match in find_matches(bert, directed(fusions))
        if len(match.outputs) == 2
    }
    pairs = itertools.combinations(("l0_wq", "l0_wk", "l0_wv"), 2)
    assert fused == {frozenset(pair) for pair in pairs}


def some_instances(rule: Rule, count: int = 40) -> list[object]:
    """The first instances of `rule` with dims up to 3, from every parameter binding."""
    return list(itertools.islice(instances(rule, bound=3), count))


@given(st.data())
@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
def test_every_shipped_rule_holds_numerically(data: st.DataObject) -> None:
    rule = data.draw(st.sampled_from(LIBRARY.rules), label="rule")
    found = some_instances(rule)
    assert found, f"{rule.name} has no instance with dims up to 3"
    instance = data.draw(st.sampled_from(found), label="instance")
    src, tgt = rule.instantiate(dict(instance.shapes), dict(instance.params))
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16), label="seed"))
    args = [rng.uniform(-1, 1, node.sigs[0].shape).astype(np.float32) for node in src.args]
    expected = run_reference(dag.to_module(src), args)
    for left, right in zip(expected, run_reference(dag.to_module(tgt), args), strict=True):
        np.testing.assert_allclose(left, right, rtol=1e-4, atol=1e-5)


# ----------------------------------------------------------------------- bad files


def test_a_tampered_library_is_proven_again_and_its_false_rule_listed_as_dropped(
    tmp_path: Path, tasoc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TASOC_CACHE_DIR", str(tmp_path / "cache"))
    path = tampered_copy(tmp_path, keep=3)
    result = tasoc("rules", "list", path)
    assert result.code == 0, result
    assert "2 proven rules applied, 1 not proven (never applied)" in result.out
    assert "proven on load, 0 from the proof cache" in result.out
    assert "dropped, z3: " in result.out


def test_listing_with_an_unusable_proof_cache_says_so_in_a_note(
    tmp_path: Path, tasoc, monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "not-a-folder"
    blocker.write_text("")
    monkeypatch.setenv("TASOC_CACHE_DIR", str(blocker))
    result = tasoc("rules", "list", tampered_copy(tmp_path, keep=2))
    assert result.code == 0, result
    assert result.err.startswith("tasoc: note: proofs are not cached: cannot create")
    assert len(result.err.splitlines()) == 1


@pytest.mark.parametrize(
    ("text", "fragments"),
    [
        ("rule broken(x: 2) { src { return x }", ["broken.rules: line 1", "expected 'tgt'"]),
        ("\x00\xff", ["broken.rules", "unexpected character"]),
    ],
)
def test_malformed_rule_files_are_one_line_errors(
    tmp_path: Path, tasoc, text: str, fragments: list[str]
) -> None:
    path = tmp_path / "broken.rules"
    path.write_text(text)
    assert_one_line_error(tasoc("rules", "list", path), *fragments)
    assert_one_line_error(tasoc("rules", "verify", path), *fragments)


def test_missing_files_and_unknown_libraries(tasoc, tmp_path: Path) -> None:
    assert_one_line_error(tasoc("rules", "list", tmp_path / "none.rules"), "cannot read")
    assert_one_line_error(tasoc("rules", "list", "nonesuch"), "unknown rule library 'nonesuch'")


# ------------------------------------------------------------------------ commands


def test_list_shows_counts_by_operator(tasoc) -> None:
    result = tasoc("rules", "list")
    assert result.code == 0, result
    assert f"{len(LIBRARY.rules)} proven rules applied" in result.out
    assert "rules by operator:" in result.out
    assert "matmul" in result.out and "conv2d" in result.out


def test_generate_verify_round_trip(tasoc, tmp_path: Path) -> None:
    out = tmp_path / "fuse.rules"
    result = tasoc(
        "rules", "generate", "--max-ops", "3", "--ops", "matmul,concat,split", "--verify",
        "--jobs", "1", "-o", out,
    )  # fmt: skip
    assert result.code == 0, result
    assert "final rules" in result.out and f"rules to {out}" in result.out
    rules = read_rules(out)
    assert rules and all(rule.is_proven for rule in rules)
    assert any(len(rule.src.outputs) == 2 for rule in rules)  # the shared-input fusion
    verified = tasoc("rules", "verify", out, "--jobs", "1")
    assert verified.code == 0, verified
    assert f"{len(rules)} rules: {len(rules)} proven" in verified.out


def test_verify_fails_on_a_false_rule(tasoc, tmp_path: Path) -> None:
    path = tmp_path / "false.rules"
    path.write_text(
        "rule commuted(x: 2, y: 2) {\n  src {\n    a = matmul(x, y)\n    return a\n  }\n"
        "  tgt {\n    a = matmul(y, x)\n    return a\n  }\n}\n"
    )
    out = tmp_path / "checked.rules"
    result = tasoc("rules", "verify", path, "--jobs", "1", "--timeout", "2", "-o", out)
    assert_one_line_error(result, "1 of 1 rules", "not proven", "commuted")
    assert "commuted: unknown" in result.out or "commuted: refuted" in result.out
    assert not out.exists()


@pytest.mark.parametrize(
    ("args", "fragment"),
    [
        (["generate", "--max-ops", "0"], "expected a positive integer"),
        (["generate", "--max-ops", "99"], "expected 1 to 5 ops"),
        (["generate", "--max-ops", "2", "--ops", "softmax"], "--ops"),
        (["frobnicate"], "invalid choice"),
        *(
            ([action, *file, "--timeout", text], f"from 0.001 to 3600, got '{text}'")
            for action, file in (("verify", ["r.rules"]), ("axioms", []))
            for text in ("inf", "1e308", "0", "-1", "nan", "soon")
        ),
        *(
            (["verify", "r.rules", "--jobs", text], f"got {text}")
            for text in ("0", "-1", str(10**9))
        ),
        (["generate", "--max-ops", "2", "--jobs", "many"], "expected a number of processes"),
    ],
)
def test_bad_options_are_one_line_errors(tasoc, args: list[str], fragment: str) -> None:
    assert_one_line_error(tasoc("rules", *args), fragment)


def test_a_one_rule_file_is_proven_in_a_worker_that_can_be_stopped(
    tmp_path: Path, tasoc, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In this process only z3's soft timeout would apply, and some proofs overrun it by
    minutes: even one rule with `--jobs 1` goes to a worker with a hard limit."""
    handed_over: list[tuple[int, float]] = []
    original = prover.run_tasks

    def spy(tasks, initializer, initargs, jobs, limit_s):  # type: ignore[no-untyped-def]
        handed_over.append((len(tasks), limit_s))
        return original(tasks, initializer, initargs, jobs, limit_s)

    monkeypatch.setattr(prover, "run_tasks", spy)
    path = tmp_path / "one.rules"
    path.write_text(format_rules(LIBRARY.rules[:1]))
    result = tasoc("rules", "verify", path, "--jobs", "1", "--timeout", "2")
    assert result.code == 0, result
    assert handed_over == [(1, prover.hard_limit(2.0))]


def test_axioms_are_listed_with_their_sources(tasoc) -> None:
    result = tasoc("rules", "axioms")
    assert result.code == 0, result
    assert "TASO Table 2.2" in result.out and "axioms" in result.out.splitlines()[-1]


def _workers(parent: int) -> list[int]:
    """The prover workers `parent` has spawned (Linux's /proc)."""
    try:
        children = Path(f"/proc/{parent}/task/{parent}/children").read_text().split()
    except OSError:
        return []
    return [int(pid) for pid in children if b"spawn_main" in _proc(int(pid), "cmdline")]


def _cpu_seconds(pid: int) -> float:
    fields = _proc(pid, "stat").rsplit(b")", 1)[-1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _proc(pid: int, name: str) -> bytes:
    try:
        return Path(f"/proc/{pid}/{name}").read_bytes()
    except OSError:
        return b""


@pytest.mark.parametrize(
    "command",
    [
        ["rules", "verify", "copy.rules", "--jobs", "2", "-o", "out.rules"],
        ["rules", "axioms", "--validate", "--bound", "3", "--jobs", "2"],
    ],
    ids=["verify", "axioms-validate"],
)
def test_ctrl_c_during_parallel_rule_work_is_one_line_and_writes_nothing(
    tmp_path: Path, command: list[str]
) -> None:
    """A terminal's Ctrl-C reaches the whole process group: workers and all."""
    shutil.copy(SHIPPED, tmp_path / "copy.rules")
    start = time.monotonic()
    process = subprocess.Popen(
        [sys.executable, "-m", "tasoc.driver.main", *command], cwd=tmp_path,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, start_new_session=True,
    )  # fmt: skip
    try:
        while not (
            len(workers := _workers(process.pid)) == 2
            and all(_cpu_seconds(pid) > 0.5 for pid in workers)
        ):
            assert process.poll() is None and time.monotonic() - start < 12, "no workers"
            time.sleep(0.05)
        os.killpg(process.pid, signal.SIGINT)
        _, err = process.communicate(timeout=10)
    finally:
        if process.poll() is None:
            os.killpg(process.pid, signal.SIGKILL)
    assert process.returncode == 130
    assert err.decode().splitlines() == ["tasoc: error: interrupted"]
    assert sorted(path.name for path in tmp_path.iterdir()) == ["copy.rules"]
    assert time.monotonic() - start < 15
