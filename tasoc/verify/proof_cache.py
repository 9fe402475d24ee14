"""Proofs remembered between runs, so that a rule file is proven once per machine.

A rule from any file but the shipped library is proven before it is applied
(docs/rules.md, "Trust"), and proving a file of hundreds of rules takes seconds to
minutes. `prove_with_cache` proves only the rules this cache does not already hold as
proven, and records the new proofs.

What a proof depends on is the key: the SHA-256 of the rule's text without its name,
provenance and proof line (what `rules.rule_digest` hashes, here at full length: a
cache entry makes a rule applicable, so 64 bits, which a birthday search can collide,
are not enough), of the axioms' text and of `prover.prover_fingerprint()` (the
prover's code and z3's version). Editing the axiom file or upgrading the prover or z3
therefore re-proves every rule. Nothing a rule file says about itself (its proof
status, its digest) enters the key or is believed.

Only proven rules are recorded: "unknown" depends on the timeout it was given, and a
refuted rule costs a few milliseconds to refute again. An entry is an empty file
named by its key, written atomically. The folder is `$TASOC_CACHE_DIR/proofs`, else
`$XDG_CACHE_HOME/tasoc/proofs`, else `~/.cache/tasoc/proofs`. It must belong to the
user and be writable by nobody else, since whoever can write into it can make any
rule "proven"; a folder that is not so, or that cannot be created, read or written,
is not used, and proving goes on without it (`ProofCache.problem` says why). The
cache never fails a run.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from tasoc.ir.rule_text import format_rules
from tasoc.ir.rules import Proof, ProofStatus, Rule
from tasoc.verify import prover

CACHE_ENV = "TASOC_CACHE_DIR"
"""Environment variable naming tasoc's cache folder (shared with the measured cost
model's cache, `tasoc.cost.measured`); proofs go in its `proofs` sub-folder."""

FROM_CACHE = "proof cache"
"""The proof detail of a rule whose proof was found in the cache."""


def default_directory() -> Path:
    """Where proofs are cached (module docstring)."""
    if root := os.environ.get(CACHE_ENV):
        return Path(root) / "proofs"
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg else Path.home() / ".cache") / "tasoc" / "proofs"


@dataclass
class ProofCache:
    """Proven rules by key, in `directory`; `directory` None when the cache is not used,
    with `problem` saying why (a cache that fails while in use turns itself off)."""

    directory: Path | None
    theory: str
    """The digest of everything but the rule that a proof depends on (axioms, prover)."""
    problem: str | None = None

    @classmethod
    def open(cls, axioms: Sequence[Rule], directory: Path | None = None) -> ProofCache:
        """The cache for proofs from `axioms`, in `directory` (default:
        `default_directory()`), created if need be; unused if it is not safe or usable."""
        theory = hashlib.sha256(
            f"{prover.prover_fingerprint()}\n{format_rules(axioms)}".encode()
        ).hexdigest()
        folder = directory or default_directory()
        try:
            folder.mkdir(mode=0o700, parents=True, exist_ok=True)
            problem = _unsafe(folder)
        except OSError as error:
            problem = f"cannot create {folder}: {error.strerror or error}"
        if problem is not None:
            return cls(None, theory, problem)
        return cls(folder, theory)

    def key(self, rule: Rule) -> str:
        """The rule's cache key (module docstring)."""
        canonical = replace(rule, name="_", provenance="", proof=ProofStatus())
        return hashlib.sha256(f"{self.theory}\n{canonical}".encode()).hexdigest()

    def holds(self, rule: Rule) -> bool:
        """Whether a proof of exactly this rule, from these axioms, is recorded."""
        if self.directory is None:
            return False
        try:
            return stat.S_ISREG(os.lstat(self.directory / self.key(rule)).st_mode)
        except FileNotFoundError:
            return False
        except OSError as error:
            self._give_up(f"cannot read {self.directory}: {error.strerror or error}")
            return False

    def record(self, rule: Rule) -> None:
        """Remember that `rule` is proven (only a PROVEN rule is recorded)."""
        if self.directory is None or not rule.is_proven:
            return
        try:
            descriptor, temporary = tempfile.mkstemp(dir=self.directory, suffix=".tmp")
            os.close(descriptor)
            os.replace(temporary, self.directory / self.key(rule))
        except OSError as error:
            self._give_up(f"cannot write {self.directory}: {error.strerror or error}")

    def _give_up(self, problem: str) -> None:
        self.directory, self.problem = None, problem


def _unsafe(folder: Path) -> str | None:
    """Why `folder` must not hold proofs, or None: it has to be a folder of this user's
    that no one else may write into."""
    info = os.stat(folder)
    if not stat.S_ISDIR(info.st_mode):
        return f"{folder} is not a folder"
    if info.st_uid != os.getuid():
        return f"{folder} belongs to another user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"{folder} is writable by other users"
    if not os.access(folder, os.R_OK | os.W_OK | os.X_OK):
        return f"{folder} is not readable and writable"
    return None


Progress = Callable[[int, int], None]
"""`progress(done, total)` as proofs end."""


def prove_with_cache(
    rules: Sequence[Rule],
    axioms: Sequence[Rule],
    cache: ProofCache,
    timeout_s: float,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> list[Rule]:
    """Every rule with a proof status from z3 (`prover.prove_rules`), or PROVEN from
    the cache without calling z3; in their order. New proofs are recorded."""
    known = [cache.holds(rule) for rule in rules]
    unknown = [rule for rule, hit in zip(rules, known, strict=True) if not hit]

    def report(done: int, total: int, rule: Rule) -> None:
        if progress is not None:
            progress(done, total)

    proven = iter(prover.prove_rules(unknown, axioms, timeout_s, jobs, report) if unknown else [])
    results = []
    for rule, hit in zip(rules, known, strict=True):
        if hit:
            results.append(rule.with_proof(Proof.PROVEN, FROM_CACHE))
            continue
        checked = next(proven)
        cache.record(checked)
        results.append(checked)
    return results
