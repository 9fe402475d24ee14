"""The rule libraries the equality-rewrite pass applies, and loading them safely.

A rule file is text (`tasoc.ir.rules` format). The shipped library,
`rules/default.rules`, holds the rules `tasoc rules generate` found for the default
operator set, each proven by `tasoc rules verify`; the header of the file records the
command that regenerates it (`make rules`).

Loading is where trust is decided: only rules whose proof status is `proven` *and*
whose proof digest still matches the rule are applied. A rule edited after it was
proven (a tampered file) makes the whole file unusable with a one-line error, since a
file that was changed once may be wrong elsewhere; an unproven rule is skipped and
counted.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from importlib.resources import files
from os import PathLike
from pathlib import Path

from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import Proof, Rule, RuleError

DEFAULT_LIBRARY = "default"
"""The name of the shipped library (`rules=default` in the pass options)."""

REGENERATE = "make rules"
"""The command that regenerates the shipped library (see the Makefile)."""


def library_path(name_or_path: str | PathLike[str] = DEFAULT_LIBRARY) -> Path:
    """The file of a shipped library by name (`default`), or the given path."""
    text = str(name_or_path)
    if "/" not in text and not text.endswith(".rules"):
        shipped = Path(str(files("tasoc.passes.rewrite") / "rules" / f"{text}.rules"))
        if not shipped.is_file():
            raise RuleError(
                f"unknown rule library '{text}' (shipped: {', '.join(shipped_libraries())})"
            )
        return shipped
    return Path(text)


def shipped_libraries() -> list[str]:
    directory = Path(str(files("tasoc.passes.rewrite") / "rules"))
    return sorted(path.stem for path in directory.glob("*.rules"))


@dataclass(frozen=True)
class Library:
    """The rules of one file that may be applied, and what was left out."""

    path: Path
    rules: tuple[Rule, ...]
    """Proven rules whose proof is current: the ones a pass applies."""
    unproven: tuple[Rule, ...]
    """Rules refuted, unknown or unchecked: never applied."""

    def op_counts(self) -> Counter[str]:
        """How many applicable rules mention each op (in either pattern)."""
        counts: Counter[str] = Counter()
        for rule in self.rules:
            counts.update({op.op for pattern in (rule.src, rule.tgt) for op in pattern.ops})
        return counts


def read_rules(path: str | PathLike[str]) -> list[Rule]:
    """All rules of a file, whatever their proof status; RuleError naming the file."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        reason = err.strerror if isinstance(err, OSError) and err.strerror else err
        raise RuleError(f"cannot read rule file '{path}': {reason}") from None
    try:
        return parse_rules(text)
    except RuleError as err:
        raise RuleError(f"{path}: {err}") from None


def load_library(name_or_path: str | PathLike[str] = DEFAULT_LIBRARY) -> Library:
    """The applicable rules of a library (see the module docstring)."""
    path = library_path(name_or_path)
    rules = read_rules(path)
    stale = [
        rule
        for rule in rules
        if rule.proof.status is not Proof.UNCHECKED and not rule.proof_is_current
    ]
    if stale:
        raise RuleError(
            f"{path}: rule '{stale[0].name}' was changed after its proof status was given "
            f"({len(stale)} such rule{'s' if len(stale) > 1 else ''}); the file is not used — "
            f"run 'tasoc rules verify {path}' to prove it again"
        )
    proven = tuple(rule for rule in rules if rule.is_proven)
    unproven = tuple(rule for rule in rules if not rule.is_proven)
    return Library(path, proven, unproven)
