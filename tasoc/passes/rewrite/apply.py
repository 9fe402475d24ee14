"""Applying a match: put a rule's target where its source was found.

The target pattern is built on the match's bound inputs and parameters (shape terms
evaluated at the bound shapes, `rules.build_pattern`), and the dag's uses of the
matched outputs are redirected to the target's outputs (`Dag.replace`). The matched
nodes that nothing reads any more drop out of the new dag, and target nodes equal to
existing ones are the existing ones (hash-consing), so common subexpressions are
shared without a separate pass.

An application is refused (None) when it would not give an equal, valid program:

* the target does not type-check on the bound values (a rule holds for all shapes
  where both sides type-check, not everywhere its source does);
* a target output's type differs from the matched output's (the program around it
  was typed for the old one);
* it would create a cycle (thesis §2.7, Fig. 2.6): a bound input depends on a
  matched output, so the target would read a value computed from its own result.
  Fusing the two matmuls of `matmul(A, relu(matmul(A, B)))` is the thesis's example.
"""

from __future__ import annotations

from tasoc.ir.dag import Dag, Node
from tasoc.ir.rules import RuleError, build_pattern
from tasoc.ir.shapes import ShapeError
from tasoc.passes.rewrite.match import Match


def apply(dag: Dag, match: Match) -> Dag | None:
    """`dag` with `match`'s source replaced by its rule's target, or None where that
    is refused (see the module docstring). `match` must come from `find_matches` on
    this dag."""
    rule = match.rule
    try:
        built = build_pattern(rule, rule.tgt, match.inputs, match.params)
    except (RuleError, ShapeError):
        return None
    new = tuple(built[name] for name in rule.tgt.outputs)
    if any(old.sig != value.sig for old, value in zip(match.outputs, new, strict=True)):
        return None
    if creates_cycle(dag, match):
        return None
    mapping = {old: value for old, value in zip(match.outputs, new, strict=True) if old != value}
    return dag.replace(mapping) if mapping else dag


def creates_cycle(dag: Dag, match: Match) -> bool:
    """Whether a bound input of `match` is computed from one of its outputs' nodes.

    Walks back from the inputs, but only through nodes after the earliest matched
    output in `dag.ops` (a topological order): nothing before it can depend on it.
    """
    targets = {value.node for value in match.outputs}
    position = dag.position()
    earliest = min(position.get(node, -1) for node in targets)
    stack: list[Node] = [value.node for value in match.inputs.values()]
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in targets:
            return True
        if node in seen or position.get(node, -1) <= earliest:
            continue
        seen.add(node)
        stack.extend(value.node for value in node.inputs)
    return False
