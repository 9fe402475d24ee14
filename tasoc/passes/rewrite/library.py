"""The rule libraries the equality-rewrite pass applies, and which of their rules it trusts.

A rule file is text (`tasoc.ir.rules` format). The shipped library,
`rules/default.rules`, holds the rules `tasoc rules generate` found for the default
operator set, each proven by `tasoc rules verify`; the header of the file records the
command that regenerates it (`make rules`), which also records the file's SHA-256
beside it (`default.rules.sha256`).

Loading is where trust is decided (docs/rules.md, "Trust"):

* The shipped library is applied as it stands, its proofs taken from the file, only
  when it *is* the file the installed package ships: its resolved path is the
  package's, and its content hashes to the recorded SHA-256. A copy of it elsewhere,
  or an edited one, is any other file.
* In any other file, what a rule says of its proof (status, digest) is not believed:
  a digest is a checksum anyone can recompute, not a proof. Each rule the file gives
  as proven or unchecked is proven with z3 from the axioms before it is applied
  (`tasoc.verify.proof_cache.prove_with_cache`: a proof is remembered per rule, so
  only the first run pays), `PROOF_TIMEOUT_S` per rule. Rules z3 does not prove are
  dropped and counted by reason. Rules the file itself marks refuted or unknown are
  dropped without a try (`tasoc rules verify` retries them).

Proving is a precondition of the pass, not part of its search, so it is not charged to
the pass's `timeout` (`Library.proved_now`); each proof has its own hard limit
(`prover.hard_limit`). Reading and parsing a library is charged: it is parsed once a
process (`_parsed`).

Shipped libraries combine with `+` (`default+layout`): the rules of each, loaded as above
(`load_library`), applied together; a rule both hold is applied once (`match.directed`
drops duplicates up to renaming).

A rule file is read only if it is a regular file of at most `max_rule_file_bytes()`
(64 MiB unless `TASOC_MAX_RULE_FILE_BYTES` says otherwise): `rules=/dev/zero` would
otherwise read until memory runs out, and a FIFO would block.
"""

from __future__ import annotations

import functools
import hashlib
import os
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from os import PathLike
from pathlib import Path
from typing import Any, Literal

from tasoc.ir.limits import LimitError, bytes_and_size, bytes_from_env, irregular_file, open_regular
from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import Proof, Rule, RuleError
from tasoc.passes.progress import progress_bar

DEFAULT_LIBRARY = "default"
"""The name of the shipped library (`rules=default` in the pass options)."""

REGENERATE = "make rules"
"""The command that regenerates the shipped library (see the Makefile)."""

COMBINE = "+"
"""Joins shipped library names into one library (`default+layout`)."""

DIGEST_SUFFIX = ".sha256"
"""A shipped library's recorded SHA-256 is in the file of its name plus this suffix, in
`sha256sum`'s format (`make rules` writes it)."""

PROOF_TIMEOUT_S = 10.0
"""z3's timeout per rule when a rule file is proven on load (`tasoc rules verify`'s
default)."""

MAX_RULE_FILE_BYTES = 64 * 2**20
"""The largest rule file read: the 4-operator library of 3,539 rules is about 2 MB."""
MAX_RULE_FILE_ENV = "TASOC_MAX_RULE_FILE_BYTES"
"""Environment variable that raises (or lowers) `MAX_RULE_FILE_BYTES`, in bytes."""


def library_path(name_or_path: str | PathLike[str] = DEFAULT_LIBRARY) -> Path:
    """The file of a shipped library by name (`default`), or the given path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith(".rules"):
        shipped = _shipped_folder() / f"{text}.rules"
        if not shipped.is_file():
            raise RuleError(
                f"unknown rule library '{text}' (shipped: {', '.join(shipped_libraries())})"
            )
        return shipped
    return Path(text)


def library_paths(spec: str | PathLike[str] = DEFAULT_LIBRARY) -> list[Path]:
    """The files of `spec`: shipped library names joined by `COMBINE` (`default+layout`),
    one name, or one path (a path is never split: a file may have `+` in its name)."""
    text = str(spec)
    names = text.split(COMBINE)
    if len(names) > 1 and all(
        name and "/" not in name and not name.endswith(".rules") for name in names
    ):
        return [library_path(name) for name in names]
    return [library_path(text)]


def check_library(spec: str | PathLike[str]) -> None:
    """RuleError unless every file of `spec` (`library_paths`) passes `check_rule_file`."""
    for path in library_paths(spec):
        check_rule_file(path)


def shipped_libraries() -> list[str]:
    return sorted(path.stem for path in _shipped_folder().glob("*.rules"))


def _shipped_folder() -> Path:
    return Path(str(files("tasoc.passes.rewrite") / "rules"))


# ------------------------------------------------------------------------- reading


def max_rule_file_bytes() -> int:
    """`MAX_RULE_FILE_BYTES`, or the positive integer `TASOC_MAX_RULE_FILE_BYTES` gives."""
    try:
        return bytes_from_env(MAX_RULE_FILE_ENV, MAX_RULE_FILE_BYTES)
    except LimitError as err:
        raise RuleError(str(err)) from None


def check_rule_file(path: str | PathLike[str]) -> None:
    """RuleError unless `path` is a rule file that `read_rules` will read: it exists, is
    a regular file (after symbolic links) and is not larger than the limit."""
    try:
        info = os.stat(path)
    except OSError as err:
        if isinstance(err, FileNotFoundError):
            raise RuleError(f"no rule file '{path}'") from None
        raise RuleError(f"cannot read rule file '{path}': {err.strerror or err}") from None
    problem = irregular_file(info.st_mode)
    if problem is not None:
        raise RuleError(f"cannot read rule file '{path}': {problem}")
    limit = max_rule_file_bytes()
    if info.st_size > limit:
        raise RuleError(_too_large(path, limit))


def _too_large(path: str | PathLike[str], limit: int) -> str:
    return (
        f"rule file '{path}' is larger than the limit of {bytes_and_size(limit)} "
        f"(set {MAX_RULE_FILE_ENV} to raise it)"
    )


def _read_bytes(path: str | PathLike[str]) -> bytes:
    """The content of a rule file (`check_rule_file`'s conditions, checked on the open
    file: a path swapped for a FIFO after a check must not block the read)."""
    try:
        handle = open_regular(path)
    except OSError as err:
        raise RuleError(f"cannot read rule file '{path}': {err.strerror or err}") from None
    limit = max_rule_file_bytes()
    with handle:
        if os.fstat(handle.fileno()).st_size > limit:
            raise RuleError(_too_large(path, limit))
        try:
            content = handle.read(limit + 1)
        except OSError as err:
            raise RuleError(f"cannot read rule file '{path}': {err.strerror or err}") from None
    if len(content) > limit:  # it grew since the check
        raise RuleError(_too_large(path, limit))
    return content


@functools.lru_cache(maxsize=8)
def _parsed(content: bytes) -> tuple[Rule, ...]:
    """The rules of `content`, parsed once a process: the shipped library takes half a
    second to parse, which every pass and test that loads it would pay again (rules are
    frozen, so sharing them is safe)."""
    return tuple(parse_rules(content.decode("utf-8")))


def _parse(path: str | PathLike[str], content: bytes) -> list[Rule]:
    try:
        return list(_parsed(content))
    except UnicodeDecodeError as err:
        raise RuleError(f"cannot read rule file '{path}': {err}") from None
    except RuleError as err:
        raise RuleError(f"{path}: {err}") from None


def read_rules(path: str | PathLike[str]) -> list[Rule]:
    """All rules of a file, whatever their proof status; RuleError naming the file."""
    return _parse(path, _read_bytes(path))


# ------------------------------------------------------------------------- trusting


def is_shipped(path: Path, content: bytes) -> bool:
    """Whether `path`, read as `content`, is a library the installed package ships,
    unchanged since `make rules` recorded its SHA-256."""
    resolved = path.resolve()
    if resolved.parent != _shipped_folder().resolve() or resolved.suffix != ".rules":
        return False
    recorded = resolved.with_name(resolved.name + DIGEST_SUFFIX)
    try:
        expected = recorded.read_text(encoding="ascii").split()[0]
    except (OSError, UnicodeDecodeError, IndexError):
        return False
    return hashlib.sha256(content).hexdigest() == expected


@dataclass(frozen=True)
class Library:
    """The rules of one file that may be applied, and what was left out and why."""

    path: Path
    rules: tuple[Rule, ...]
    """Proven rules: the ones a pass applies."""
    unproven: tuple[Rule, ...]
    """Rules refuted, unknown or not tried: never applied."""
    trust: Literal["shipped", "proven on load"]
    """Whose proofs were believed: the shipped file's, or z3's in this process."""
    dropped: Mapping[str, int] = field(default_factory=dict)
    """How many rules were left out, by reason."""
    from_cache: int = 0
    """Rules whose proof came from the proof cache."""
    proof_cache: Path | None = None
    """The proof cache's folder, when one was used."""
    cache_problem: str | None = None
    """Why no proof cache was used (`proof_cache.ProofCache.problem`)."""

    @property
    def proved_now(self) -> bool:
        """Whether loading ran z3 on some rule (not every proof came from the file or the
        proof cache): time the pass does not charge to its search (module docstring)."""
        if self.trust != "proven on load":
            return False
        refused = sum(count for reason, count in self.dropped.items() if reason.startswith("z3: "))
        return self.from_cache < len(self.rules) + refused

    def op_counts(self) -> Counter[str]:
        """How many applicable rules mention each op (in either pattern)."""
        counts: Counter[str] = Counter()
        for rule in self.rules:
            counts.update({op.op for pattern in (rule.src, rule.tgt) for op in pattern.ops})
        return counts

    def report(self) -> dict[str, Any]:
        """The library's keys in a pass's run report (docs/rewrite.md)."""
        keys: dict[str, Any] = {
            "rules": str(self.path),
            "rules_loaded": len(self.rules),
            "rules_not_proven": len(self.unproven),
            "rules_trust": self.trust,
        }
        if self.trust == "proven on load":
            keys.update(
                rules_from_proof_cache=self.from_cache,
                rules_dropped=dict(sorted(self.dropped.items())),
                proof_cache=str(self.proof_cache or f"not used: {self.cache_problem}"),
            )
        return keys


def load_library(
    name_or_path: str | PathLike[str] = DEFAULT_LIBRARY,
    *,
    cache_dir: Path | None = None,
    jobs: int | None = None,
) -> Library:
    """The applicable rules of a library (see the module docstring); proofs of a file
    that is not the shipped library are cached in `cache_dir` (default:
    `proof_cache.default_directory()`) and run on `jobs` processes. Shipped libraries
    joined by `COMBINE` load one by one and are `combined`."""
    paths = library_paths(name_or_path)
    if len(paths) > 1:
        parts = [load_library(path, cache_dir=cache_dir, jobs=jobs) for path in paths]
        return combined(Path(str(name_or_path)), parts)
    path = paths[0]
    content = _read_bytes(path)
    rules = _parse(path, content)
    if is_shipped(path, content):
        current = [rule.is_proven and rule.proof_is_current for rule in rules]
        return Library(
            path,
            tuple(rule for rule, ok in zip(rules, current, strict=True) if ok),
            tuple(rule for rule, ok in zip(rules, current, strict=True) if not ok),
            "shipped",
        )
    return _prove_on_load(path, rules, cache_dir, jobs)


def combined(name: Path, parts: list[Library]) -> Library:
    """One library of `parts`' rules, named `name`: shipped when every part is, its
    drops and cache hits summed."""
    dropped: Counter[str] = Counter()
    for part in parts:
        dropped.update(part.dropped)
    shipped = all(part.trust == "shipped" for part in parts)
    return Library(
        name,
        tuple(rule for part in parts for rule in part.rules),
        tuple(rule for part in parts for rule in part.unproven),
        "shipped" if shipped else "proven on load",
        dict(dropped),
        sum(part.from_cache for part in parts),
        next((part.proof_cache for part in parts if part.proof_cache), None),
        next((part.cache_problem for part in parts if part.cache_problem), None),
    )


def _prove_on_load(
    path: Path, rules: list[Rule], cache_dir: Path | None, jobs: int | None
) -> Library:
    from tasoc.verify.axioms import load_axioms
    from tasoc.verify.proof_cache import FROM_CACHE, ProofCache, prove_with_cache

    axioms = load_axioms()
    cache = ProofCache.open(axioms, cache_dir)
    claimed = {Proof.PROVEN, Proof.UNCHECKED}
    tried = [rule for rule in rules if rule.proof.status in claimed]
    not_tried = [rule for rule in rules if rule.proof.status not in claimed]
    with progress_bar(f"proving {path.name}", "rule", total=len(tried), delay=1.0) as update:
        checked = prove_with_cache(
            tried, axioms, cache, PROOF_TIMEOUT_S, jobs, lambda done, total: update(done)
        )
    proven = tuple(rule for rule in checked if rule.is_proven)
    failed = [rule for rule in checked if not rule.is_proven]
    dropped = Counter(f"marked {rule.proof.status.value} in the file" for rule in not_tried)
    dropped.update(f"z3: {rule.proof.status.value}" for rule in failed)
    return Library(
        path,
        proven,
        (*not_tried, *failed),
        "proven on load",
        dropped,
        sum(rule.proof.detail == FROM_CACHE for rule in proven),
        cache.directory,
        cache.problem,
    )
