"""Where passes are registered: tasoc's own, the xDSL ones `tasoc opt` offers, and
those installed packages add through the `tasoc.passes` entry-point group.

Every table maps a pipeline name to a factory returning the pass class, in xDSL's
`get_all_passes` idiom: a factory imports its pass on first use, so `tasoc opt`
starts fast whatever the passes it could run import (z3, JAX, ...).

A package adds a pass without forking tasoc by declaring an entry point whose name is
the pass's pipeline name and whose object is its `ModulePass` subclass:

    [project.entry-points.'tasoc.passes']
    fold-transposes = "my_package.passes:FoldTransposesPass"

(docs/custom-pass.md). A pass file that is not installed is loaded with
`tasoc opt --load-pass-plugin` (`tasoc.driver.plugins`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from importlib.metadata import EntryPoint, entry_points

from xdsl.passes import ModulePass

from tasoc.passes.kinds import Kind, PassContract

PassFactory = Callable[[], type[ModulePass]]

ENTRY_POINT_GROUP = "tasoc.passes"
"""The entry-point group installed packages declare their passes in."""


class PassRegistryError(ValueError):
    """A pass that cannot be registered: a name clash, or an entry point that is not a
    pass. The message is one line naming the pass."""


def _lazy_pass(module: str, class_name: str) -> PassFactory:
    """A factory importing the pass class on first use."""
    return lambda: getattr(importlib.import_module(module), class_name)


TASOC_PASSES: dict[str, PassFactory] = {
    "autodiff": _lazy_pass("tasoc.passes.autodiff", "AutodiffPass"),
    "equality-rewrite": _lazy_pass("tasoc.passes.rewrite.equality_rewrite", "EqualityRewritePass"),
    "placement": _lazy_pass("tasoc.passes.placement", "PlacementPass"),
    "soap-shard": _lazy_pass("tasoc.passes.soap", "SoapShardPass"),
}
"""tasoc's own passes, by pipeline name: what the xDSL universe entry point
(`tasoc.universe`) offers `xdsl-opt`. A new pass joins here."""

XDSL_PASSES: dict[str, PassFactory] = {
    "canonicalize": _lazy_pass("xdsl.transforms.canonicalize", "CanonicalizePass"),
    "cse": _lazy_pass(
        "xdsl.transforms.common_subexpression_elimination", "CommonSubexpressionElimination"
    ),
    "dce": _lazy_pass("xdsl.transforms.dead_code_elimination", "DeadCodeElimination"),
}
"""The passes of xDSL that mean something on `graph` programs (xDSL ships ~200)."""

XDSL_CONTRACTS: dict[str, PassContract] = {
    "canonicalize": PassContract(),
    "cse": PassContract(
        refuses={
            Kind.PLACED: "the program is placed; run cse before placement (merging two equal "
            "ops would keep one value alive past the swaps and frees the placement planned)"
        }
    ),
    "dce": PassContract(),
}
"""The contracts (`tasoc.passes.kinds`) of `XDSL_PASSES`, which are not tasoc's classes
to declare them on. What the passes do to tasoc programs today: dce drops unused ops
without side effects; canonicalize does the same, since no tasoc op has canonicalization
patterns or folders; cse also merges equal ops without side effects. None of them
changes a program's kinds. None of them touches a memory op: `memory` ops declare no memory
effects, so xDSL takes theirs as unknown and never drops or merges one. Merging two
equal `graph` ops of a placed program, though, moves the later one's readers to the
earlier value, whose device memory the plan gave back or swapped out before them
(a `memory.free` then has readers after it, or the replayed peak outgrows the plan), so
cse refuses placed programs. Collectives are Pure: two equal ones of one value are one
value, so cse takes sharded programs."""


def contract_of(pass_: ModulePass) -> PassContract | None:
    """The contract of `pass_`: its class's `contract`, the registry's for one of
    `XDSL_PASSES`, or None for a pass that declares none (not checked). A `contract`
    that is not a PassContract is a PassRegistryError rather than ignored: a pass that
    means to be checked and is not would run on programs it refuses."""
    declared = getattr(type(pass_), "contract", None)
    if declared is None:
        xdsl = XDSL_PASSES.get(pass_.name)
        return XDSL_CONTRACTS[pass_.name] if xdsl is not None and xdsl() is type(pass_) else None
    if not isinstance(declared, PassContract):
        raise PassRegistryError(
            f"pass '{pass_.name}': its contract is a {type(declared).__name__}, "
            f"not a tasoc.passes.kinds.PassContract"
        )
    return declared


def _checked(entry_point: EntryPoint) -> PassFactory:
    """A factory loading `entry_point` on first use and checking it is the pass it
    claims to be: a `ModulePass` subclass whose `name` is the entry point's name."""

    def load() -> type[ModulePass]:
        where = (
            f"entry point '{entry_point.name}' ({entry_point.value}) of group {ENTRY_POINT_GROUP}"
        )
        try:
            loaded = entry_point.load()
        except Exception as err:  # any failure of a third-party import is the plugin's
            raise PassRegistryError(
                f"{where} cannot be loaded: {type(err).__name__}: {err}"
            ) from None
        if not (isinstance(loaded, type) and issubclass(loaded, ModulePass)):
            raise PassRegistryError(f"{where} is not a ModulePass subclass")
        if getattr(loaded, "name", None) != entry_point.name:
            raise PassRegistryError(
                f"{where} names {loaded.__name__}, whose pass name is "
                f"'{getattr(loaded, 'name', None)}'; the two must be equal"
            )
        return loaded

    return load


def installed_passes() -> dict[str, PassFactory]:
    """The passes installed packages declare in the `tasoc.passes` entry-point group.

    Only names are read here; a pass is imported (and checked) when a pipeline uses it.
    """
    return {point.name: _checked(point) for point in entry_points(group=ENTRY_POINT_GROUP)}


def get_all_passes() -> dict[str, PassFactory]:
    """Every pass `tasoc opt -p` accepts: xDSL's chosen few, tasoc's own and the
    installed ones. An installed pass may not take a built-in pass's name
    (PassRegistryError): a pipeline would silently run another pass than documented."""
    passes = {**XDSL_PASSES, **TASOC_PASSES}
    for name, factory in installed_passes().items():
        if name in passes:
            raise PassRegistryError(
                f"the installed pass '{name}' (entry point group {ENTRY_POINT_GROUP}) "
                f"has the name of a built-in pass"
            )
        passes[name] = factory
    return passes
