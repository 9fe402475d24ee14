"""The operator properties the rule prover starts from.

They are rules (`tasoc.ir.rules`) in the package file `axioms.rules`: each says that
its source equals its target for all tensors and all values of its `$parameters`
that satisfy its `where` preconditions. Writing them in the rule format, rather than
as z3 formulas, lets the same text be read, reviewed, tested numerically
(`Rule.instantiate` at small shapes, then the reference kernels) and validated
symbolically, exactly like the rules they are used to prove. The prover
(`tasoc.verify.prover`) turns them into quantified formulas.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path

from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import Rule, RuleError

AXIOMS_FILE = "axioms.rules"


def load_axioms(path: str | Path | None = None) -> list[Rule]:
    """The axioms of `path`, or of the built-in `axioms.rules` when None.

    RuleError for a file that does not parse (`parse_rules`) and for an axiom with no
    provenance: every property must say where it comes from, so a reviewer can check
    it against its source.
    """
    if path is None:
        text = resources.files("tasoc.verify").joinpath(AXIOMS_FILE).read_text()
    else:
        text = Path(path).read_text()
    axioms = parse_rules(text)
    for axiom in axioms:
        if not axiom.provenance:
            raise RuleError(f"axiom '{axiom.name}' has no provenance")
    return axioms
