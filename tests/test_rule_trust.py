"""Which rules equality-rewrite trusts: the shipped library as shipped, every other
file proven with z3 on load (with a proof cache), and rule files read within limits."""

from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path

import pytest
from rewrite_helpers import LIBRARY, tampered_copy
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.builder import GraphBuilder
from tasoc.ir.rule_text import format_rules, parse_rules
from tasoc.ir.rules import Proof, Rule, RuleError
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.rewrite import library as library_module
from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass
from tasoc.passes.rewrite.library import (
    DIGEST_SUFFIX,
    MAX_RULE_FILE_ENV,
    is_shipped,
    library_path,
    load_library,
    read_rules,
)
from tasoc.verify import prover
from tasoc.verify.axioms import load_axioms
from tasoc.verify.proof_cache import CACHE_ENV, FROM_CACHE, ProofCache

DROP_RELU = """rule drop-relu(x: 2) {
  src {
    a = relu(x)
    return a
  }
  tgt {
    return x
  }
}
"""
"""A false rule: it deletes every relu of a matrix."""


@pytest.fixture(autouse=True)
def private_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Every test gets its own empty proof cache (never the user's)."""
    monkeypatch.setenv(CACHE_ENV, str(tmp_path / "cache"))
    return tmp_path / "cache" / "proofs"


@pytest.fixture
def prover_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """How many rules each `prove_rules` call was given (z3's work, not the cache's)."""
    calls: list[int] = []
    original = prover.prove_rules

    def counting(rules, *args, **kwargs):  # type: ignore[no-untyped-def]
        calls.append(len(rules))
        return original(rules, *args, **kwargs)

    monkeypatch.setattr(prover, "prove_rules", counting)
    return calls


def forged_file(tmp_path: Path) -> Path:
    """The issue's forged file: the false rule marked proven, its digest recomputed."""
    forged = parse_rules(DROP_RELU)[0].with_proof(Proof.PROVEN, "z3 1 ms")
    assert forged.is_proven and forged.proof_is_current
    path = tmp_path / "forged.rules"
    path.write_text(format_rules([forged]))
    return path


def true_rule_file(tmp_path: Path) -> Path:
    """A user file with one true rule of the shipped library, renamed, proof line dropped."""
    rule = LIBRARY[0]
    user_rule = Rule(rule.name + "-mine", rule.inputs, rule.src, rule.tgt, rule.preconditions)
    path = tmp_path / "mine.rules"
    path.write_text(format_rules([user_rule]))
    return path


def relu_program() -> ModuleOp:
    g = GraphBuilder()
    x = g.input("x", (8, 8))
    return g.build(g.relu(g.add(g.relu(x), x)))


def rewrite(module: ModuleOp, rules: Path) -> tuple[ModuleOp, dict]:
    """The module after equality-rewrite with `rules` (on a clone), and its report."""
    report = RunReport()
    result = module.clone()
    with reporting(report):
        EqualityRewritePass(search="backtrack", budget=20, retime=0, rules=str(rules)).apply(
            Context(), result
        )
    return result, report.sections["equality-rewrite"]


# ------------------------------------------------------------------ proven on load


def test_a_forged_proven_rule_is_dropped_and_the_program_is_unchanged(tmp_path: Path) -> None:
    module = relu_program()
    after, section = rewrite(module, forged_file(tmp_path))
    assert str(after) == str(module)
    assert section["rules_trust"] == "proven on load"
    assert section["rules_loaded"] == 0 and section["rules_not_proven"] == 1
    assert sum(section["rules_dropped"].values()) == 1
    assert all(reason.startswith("z3: ") for reason in section["rules_dropped"])
    assert "no rule of" in section["note"] and "is proven" in section["note"]


def test_a_true_user_rule_is_proven_once_then_served_from_the_cache(
    tmp_path: Path, private_cache: Path, prover_calls: list[int]
) -> None:
    path = true_rule_file(tmp_path)
    first = load_library(path)
    assert prover_calls == [1]
    assert len(first.rules) == 1 and first.from_cache == 0
    assert first.proof_cache == private_cache and len(os.listdir(private_cache)) == 1
    second = load_library(path)
    assert prover_calls == [1], "the second load called z3"
    assert second.from_cache == 1 and second.rules[0].proof.detail == FROM_CACHE
    assert second.report()["rules_from_proof_cache"] == 1


def test_unproven_rules_of_a_file_are_not_retried_but_dropped_by_reason(
    tmp_path: Path, prover_calls: list[int]
) -> None:
    rules = [LIBRARY[0], LIBRARY[1].with_proof(Proof.UNKNOWN, "timeout")]
    path = tmp_path / "mixed.rules"
    path.write_text(format_rules(rules))
    library = load_library(path)
    assert [rule.name for rule in library.rules] == [rules[0].name]
    assert library.unproven == (rules[1],)
    assert library.dropped == {"marked unknown in the file": 1}
    assert prover_calls == [1]


def test_a_modified_copy_of_the_shipped_library_is_proven_again(tmp_path: Path) -> None:
    path = tampered_copy(tmp_path, keep=4)
    library = load_library(path)
    assert library.trust == "proven on load"
    assert [rule.name for rule in library.rules] == [rule.name for rule in LIBRARY[1:4]]
    assert sum(library.dropped.values()) == 1


def test_the_cache_key_covers_the_rule_the_axioms_and_the_prover() -> None:
    axioms = load_axioms()
    cache = ProofCache(None, "theory")
    rule = LIBRARY[0]
    renamed = Rule("other", rule.inputs, rule.src, rule.tgt, rule.preconditions, "made up")
    assert cache.key(renamed) == cache.key(rule.with_proof(Proof.REFUTED))
    assert cache.key(rule) != cache.key(LIBRARY[1])
    assert ProofCache(None, "another theory").key(rule) != cache.key(rule)
    with_axioms = ProofCache.open(axioms)
    assert ProofCache.open(axioms[:-1]).theory != with_axioms.theory
    assert len(with_axioms.key(rule)) == 64  # a full SHA-256, not the 64-bit digest


def test_a_cache_entry_from_other_axioms_is_not_used(
    tmp_path: Path, prover_calls: list[int]
) -> None:
    path = true_rule_file(tmp_path)
    load_library(path)
    changed = ProofCache.open(load_axioms()[:-1])
    assert not changed.holds(read_rules(path)[0])


# ------------------------------------------------------------ an unusable cache


def test_an_unusable_cache_folder_still_proves_without_caching(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, prover_calls: list[int]
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv(CACHE_ENV, str(blocker))
    path = true_rule_file(tmp_path)
    for _ in range(2):
        library = load_library(path)
        assert len(library.rules) == 1 and library.proof_cache is None
        assert library.cache_problem and "cannot create" in library.cache_problem
        assert library.report()["proof_cache"].startswith("not used: cannot create")
    assert prover_calls == [1, 1]


def test_a_cache_folder_others_may_write_is_not_trusted(tmp_path: Path) -> None:
    folder = tmp_path / "shared"
    folder.mkdir()
    folder.chmod(0o777)
    cache = ProofCache.open(load_axioms(), folder)
    assert cache.directory is None
    assert cache.problem == f"{folder} is writable by other users"


def test_a_cache_that_fails_while_in_use_turns_itself_off(tmp_path: Path) -> None:
    folder = tmp_path / "cache"
    cache = ProofCache.open(load_axioms(), folder)
    assert cache.directory == folder
    shutil.rmtree(folder)
    folder.write_text("")  # no longer a folder: writing into it fails
    cache.record(LIBRARY[0])
    assert cache.directory is None and cache.problem and "cannot write" in cache.problem


# ----------------------------------------------------------- the shipped library


def test_the_recorded_digest_is_the_shipped_files() -> None:
    shipped = library_path()
    recorded = shipped.with_name(shipped.name + DIGEST_SUFFIX).read_text().split()
    assert recorded == [hashlib.sha256(shipped.read_bytes()).hexdigest(), shipped.name], (
        "default.rules changed without 'make rules' recording its SHA-256"
    )
    assert is_shipped(shipped, shipped.read_bytes())
    assert load_library().trust == "shipped"


def test_only_the_packages_own_unchanged_file_is_trusted_as_shipped(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    shipped = library_path()
    content = shipped.read_bytes()
    copy = tmp_path / shipped.name
    copy.write_bytes(content)
    assert not is_shipped(copy, content), "a copy elsewhere is not the shipped file"
    copy.with_name(copy.name + DIGEST_SUFFIX).write_text(
        shipped.with_name(shipped.name + DIGEST_SUFFIX).read_text()
    )
    monkeypatch.setattr(library_module, "_shipped_folder", lambda: tmp_path)
    assert is_shipped(copy, content)
    assert not is_shipped(copy, content + b"\n"), "an edited shipped file is not trusted"
    link = tmp_path / "elsewhere" / "link.rules"
    link.parent.mkdir()
    link.symlink_to(copy)
    assert is_shipped(link, content), "a link to the shipped file is that file"


# ------------------------------------------------------------------- reading limits


@pytest.mark.parametrize("special", ["/dev/zero", "/dev/null", "fifo", "folder"])
def test_rule_files_that_are_not_regular_files_are_refused(tmp_path: Path, special: str) -> None:
    path = Path(special)
    if special == "fifo":
        path = tmp_path / "rules.fifo"
        os.mkfifo(path)  # opening it for reading would block without a writer
    elif special == "folder":
        path = tmp_path
    reason = "Is a directory" if special == "folder" else "not a regular file"
    with pytest.raises(RuleError, match=f"^cannot read rule file '.*': {reason}$"):
        read_rules(path)
    with pytest.raises(RuleError, match=f"^cannot read rule file '.*': {reason}$"):
        library_module.check_rule_file(path)


def test_a_rule_file_over_the_size_limit_is_refused(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "big.rules"
    path.write_text(format_rules(LIBRARY[:2]))
    monkeypatch.setenv(MAX_RULE_FILE_ENV, "100")
    with pytest.raises(RuleError, match=f"larger than the limit of 100 bytes.*{MAX_RULE_FILE_ENV}"):
        read_rules(path)
    monkeypatch.setenv(MAX_RULE_FILE_ENV, str(path.stat().st_size))
    assert len(read_rules(path)) == 2
    monkeypatch.setenv(MAX_RULE_FILE_ENV, "lots")
    with pytest.raises(RuleError, match="must be a positive whole number of bytes, got 'lots'"):
        read_rules(path)


@pytest.mark.parametrize(
    ("rules", "fragment"),
    [
        ("/dev/zero", "rules: cannot read rule file '/dev/zero': not a regular file"),
        ("/nonesuch/my.rules", "rules: no rule file '/nonesuch/my.rules'"),
    ],
)
def test_the_pass_refuses_special_and_missing_rule_files_when_built(
    rules: str, fragment: str
) -> None:
    with pytest.raises(ValueError, match=fragment):
        EqualityRewritePass(rules=rules)
