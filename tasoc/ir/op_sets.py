"""The short names of the `graph` ops that carry a trait, as the light graph spells
them (`"matmul"`, the key of `dag.Node.op`).

Search code tests op names in hot loops, so it keeps the answer as a constant
(`FREE = ops_with(ConstantLike)`) and tests membership in a frozenset; the trait on
the op class stays the one place the fact is written.
"""

from __future__ import annotations

import functools

from xdsl.traits import OpTrait

from tasoc.ir.graph import OPS_BY_NAME


@functools.cache
def ops_with(trait: type[OpTrait]) -> frozenset[str]:
    """The short names of the `graph` ops whose class carries `trait`."""
    return frozenset(name for name, op in OPS_BY_NAME.items() if op.has_trait(trait))
