"""The text format of rule files: `format_rules` writes it, `parse_rules` reads it
back (the grammar is in docs/rules.md).

What a rule is lives in `tasoc.ir.rules`, and so does the text of one rule
(`Rule.__str__`): the proof digest hashes that text, so a rule and its printed form
cannot drift apart. This module adds the file around it (the format line, header
comments) and the parser, which checks every rule it reads (`rules.check_rule`).
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from tasoc.ir.limits import MAX_NESTING
from tasoc.ir.rules import (
    AttrTerm,
    Condition,
    Dim,
    DTypeOf,
    Param,
    Pattern,
    PatternOp,
    Proof,
    ProofStatus,
    Relation,
    Rule,
    RuleError,
    RuleInput,
    ShapeOf,
    check_rule,
)

FORMAT_VERSION = 1
"""The number on a rule file's first line (`// tasoc rules, format 1`)."""


def format_rules(rules: Iterable[Rule], header: Sequence[str] = ()) -> str:
    """The text of a rule file: `header` lines as `//` comments, then one block a rule."""
    lines = [f"// tasoc rules, format {FORMAT_VERSION}"]
    lines += [f"// {line}" if line else "//" for line in header]
    for rule in rules:
        lines.append("")
        lines.append(str(rule))
    return "\n".join(lines) + "\n"


_TOKEN = re.compile(
    r"""(?P<skip>\s+|//[^\n]*)
      | (?P<string>"(?:[^"\\\n]|\\.)*")
      | (?P<number>-?\d+(?:\.\d*)?(?:[eE][-+]?\d+)?)
      | (?P<param>\$[A-Za-z_]\w*)
      | (?P<name>[A-Za-z_][\w.\-]*)
      | (?P<punct>==|!=|[{}()\[\],:=])""",
    re.VERBOSE,
)


@dataclass(frozen=True, slots=True)
class _Token:
    kind: str
    text: str
    line: int


def _tokens(text: str) -> list[_Token]:
    tokens, line, position = [], 1, 0
    while position < len(text):
        match = _TOKEN.match(text, position)
        if match is None:
            raise RuleError(f"line {line}: unexpected character {text[position]!r}")
        kind = match.lastgroup or ""
        if kind != "skip":
            tokens.append(_Token(kind, match.group(), line))
        line += match.group().count("\n")
        position = match.end()
    tokens.append(_Token("end", "", line))
    return tokens


class _Parser:
    """Recursive descent over the grammar in docs/rules.md."""

    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.at = 0
        self.depth = 0
        """How many `[` lists the term being read is inside (`MAX_NESTING` at most:
        the parser recurses once a level, and a hostile file must not exhaust the
        stack)."""

    # ------------------------------------------------------------------ primitives
    @property
    def peek(self) -> _Token:
        return self.tokens[self.at]

    def error(self, message: str) -> RuleError:
        token = self.peek
        found = "end of file" if token.kind == "end" else repr(token.text)
        return RuleError(f"line {token.line}: {message}, found {found}")

    def take(self, text: str) -> _Token:
        if self.peek.text != text or self.peek.kind == "string":
            raise self.error(f"expected '{text}'")
        self.at += 1
        return self.tokens[self.at - 1]

    def accept(self, text: str) -> bool:
        if self.peek.text == text and self.peek.kind != "string":
            self.at += 1
            return True
        return False

    def name(self, what: str) -> str:
        if self.peek.kind != "name":
            raise self.error(f"expected {what}")
        self.at += 1
        return self.tokens[self.at - 1].text

    def integer(self) -> int:
        token = self.peek
        if token.kind != "number" or not re.fullmatch(r"-?\d+", token.text):
            raise self.error("expected an integer")
        self.at += 1
        return int(token.text)

    def string(self) -> str:
        if self.peek.kind != "string":
            raise self.error("expected a string")
        self.at += 1
        return _unquote(self.tokens[self.at - 1].text)

    def names(self, what: str) -> tuple[str, ...]:
        names = [self.name(what)]
        while self.accept(","):
            names.append(self.name(what))
        return tuple(names)

    # --------------------------------------------------------------------- grammar
    def rules(self) -> list[Rule]:
        rules = []
        while self.peek.kind != "end":
            rules.append(self.rule())
        return rules

    def rule(self) -> Rule:
        self.take("rule")
        line = self.peek.line
        name = self.name("a rule name")
        self.take("(")
        inputs = []
        while not self.accept(")"):
            if inputs:
                self.take(",")
            input_name = self.name("an input name")
            self.take(":")
            inputs.append(RuleInput(input_name, self.integer()))
        self.take("{")
        conditions = []
        while self.accept("where"):
            lhs = self.term()
            relation = self.peek.text
            if relation not in {r.value for r in Relation}:
                raise self.error("expected '==', '!=' or 'divides'")
            self.at += 1
            conditions.append(Condition(lhs, Relation(relation), self.term()))
        self.take("src")
        src = self.pattern()
        self.take("tgt")
        tgt = self.pattern()
        provenance = self.string() if self.accept("provenance") else ""
        proof = ProofStatus()
        if self.accept("proof"):
            status = self.name("a proof status")
            if status not in {p.value for p in Proof}:
                raise RuleError(
                    f"line {self.tokens[self.at - 1].line}: unknown proof status '{status}'"
                )
            detail = self.string() if self.peek.kind == "string" else ""
            digest = self.string() if self.accept("digest") else ""
            proof = ProofStatus(Proof(status), detail, digest)
        self.take("}")
        rule = Rule(name, tuple(inputs), src, tgt, tuple(conditions), provenance, proof)
        try:
            check_rule(rule)
        except RuleError as err:
            raise RuleError(f"line {line}: {err}") from None
        return rule

    def pattern(self) -> Pattern:
        self.take("{")
        ops = []
        while not self.accept("return"):
            results = self.names("a result name")
            self.take("=")
            op = self.name("an op name")
            attrs = []
            if self.accept("{"):
                while not self.accept("}"):
                    if attrs:
                        self.take(",")
                    key = self.name("an attribute name")
                    self.take("=")
                    attrs.append((key, self.term()))
            self.take("(")
            operands = () if self.accept(")") else self.names("an operand")
            if operands:
                self.take(")")
            ops.append(PatternOp(results, op, operands, tuple(attrs)))
        outputs = self.names("an output name")
        self.take("}")
        return Pattern(tuple(ops), outputs)

    def term(self) -> AttrTerm:
        token = self.peek
        if token.kind == "number":
            self.at += 1
            return float(token.text) if re.search(r"[.eE]", token.text) else int(token.text)
        if token.kind == "string":
            return self.string()
        if token.kind == "param":
            self.at += 1
            return Param(token.text[1:])
        if self.accept("["):
            if self.depth >= MAX_NESTING:
                raise self.error(f"lists nested deeper than {MAX_NESTING} levels")
            self.depth += 1
            items: list[AttrTerm] = []
            while not self.accept("]"):
                if items:
                    self.take(",")
                items.append(self.term())
            self.depth -= 1
            return tuple(items)
        if token.text in ("true", "false"):
            self.at += 1
            return token.text == "true"
        if token.text in ("dim", "shape", "dtype"):
            self.at += 1
            self.take("(")
            value = self.name("a value name")
            if token.text == "dim":
                self.take(",")
                axis: int | Param
                if self.peek.kind == "param":
                    axis = Param(self.peek.text[1:])
                    self.at += 1
                else:
                    axis = self.integer()
                self.take(")")
                return Dim(value, axis)
            self.take(")")
            return ShapeOf(value) if token.text == "shape" else DTypeOf(value)
        raise self.error("expected an attribute value")


def _unquote(text: str) -> str:
    return re.sub(r"\\(.)", r"\1", text[1:-1])


def parse_rules(text: str) -> list[Rule]:
    """The rules of a rule file's text; RuleError (one line, with the line number) for
    text that does not parse or a rule that is malformed (`check_rule`)."""
    rules = _Parser(text).rules()
    seen: set[str] = set()
    for rule in rules:
        if rule.name in seen:
            raise RuleError(f"rule '{rule.name}' is defined twice")
        seen.add(rule.name)
    return rules
