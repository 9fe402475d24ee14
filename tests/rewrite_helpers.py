"""What the rewrite tests share: the shipped library read both ways, a few of its rules
by role, small graph builders, the numeric check that a rewrite kept the results, and
a copy of the library with one proven rule edited."""

from __future__ import annotations

from pathlib import Path

from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy import run_reference
from tasoc.ir import dag
from tasoc.ir.dag import Dag, Node
from tasoc.ir.rule_text import format_rules
from tasoc.ir.rules import Rule
from tasoc.ir.shapes import DType, TensorSig
from tasoc.passes.rewrite.library import library_path, load_library
from tasoc.passes.rewrite.match import Match, directed, find_matches
from tasoc.verify.equivalence import compare

LIBRARY = load_library().rules
RULES = directed(LIBRARY)
BY_NAME = {rule.name: rule for rule in RULES}

MATMUL_FUSION = BY_NAME["g3-0197.rev"]
"""matmul(z, x), matmul(z, y) -> split(matmul(z, concat(x, y))): two outputs."""
ADD_COMMUTES = BY_NAME["g3-0001"]
"""add(x, y) -> add(y, x) on matrices."""


def sig(*shape: int) -> TensorSig:
    return TensorSig(tuple(shape), DType.F32)


def arg(index: int, name: str, *shape: int, param: bool = False) -> Node:
    return Node.arg(index, name, sig(*shape), is_param=param)


def matches(graph: Dag, rule: Rule) -> list[Match]:
    return list(find_matches(graph, [rule]))


def module_of(graph: Dag) -> ModuleOp:
    module = dag.to_module(graph)
    module.verify()
    return module


def assert_equal(before: Dag, after: Dag) -> None:
    """`after` computes what `before` does on one set of random inputs (the reference
    interpreter)."""
    module = module_of(before)
    arguments = random_inputs(module, seed=0)
    check = compare(run_reference(module, arguments), run_reference(module_of(after), arguments))
    assert check.ok, check.summary()


def tampered_copy(tmp_path: Path, keep: int | None = None) -> Path:
    """A copy of the shipped library (its first `keep` rules, or all) whose first rule
    has one op swapped for another but keeps its proof status and digest."""
    text = library_path().read_text() if keep is None else format_rules(LIBRARY[:keep])
    block = format_rules([LIBRARY[0]]).split("\n", 2)[2]
    assert block in text
    edited = block
    for old, new in (("add(", "mul("), ("mul(", "add("), ("matmul(", "add(")):
        if old in block:
            edited = block.replace(old, new, 1)
            break
    assert edited != block
    path = tmp_path / "tampered.rules"
    path.write_text(text.replace(block, edited))
    return path
