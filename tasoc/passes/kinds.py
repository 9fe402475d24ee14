"""Program kinds, and the contract by which a pass says which kinds it takes.

Passes compose like MLIR passes, but not in every order: `equality-rewrite`'s rules
hold for unsharded `graph` ops, `placement` plans a training step's memory, and so on
(DESIGN.md §8). Run in a wrong order, a pass would fail deep inside itself, after the
passes before it spent their time, with a message about IR its user never wrote. So
each pass states what it takes, and a whole pipeline is checked before its first pass
runs. A program is some of four kinds, read
off the module by `kinds_of`:

- `graph`: a plain forward program: `@main` carries no training marks
  (`tasoc.ir.training`);
- `training`: a training step: `@main`'s training marks name a loss (what `autodiff`
  writes, with `emit=step` or `emit=gradients`);
- `sharded`: a value of the program has a sharded type (`soap-shard`'s output;
  `tasoc.ir.parallel.carries_shardings`);
- `placed`: a memory-placed program (`placement`'s output; `tasoc.ir.memory.is_placed`).

`graph` and `training` exclude each other; a module without a usable `@main`, or one
whose marks name no loss (a hand-written update loop), is neither. `sharded` and
`placed` go with either, and with each other.

A pass declares a `PassContract` as its class variable `contract`: the kinds it
requires and those it refuses, each with the reason its user reads (which says what to
do instead), and the kinds its output gains and loses. A contract is all it takes to
check a pipeline without running it: `check` says whether a pass takes a program of
given kinds, `after` which kinds its output has, `check_pipeline` walks a pipeline.
`tasoc opt` checks the pipeline before the first pass runs; each of tasoc's passes
also calls `require` first thing in `apply`, for users who call it from Python. A pass
without a contract (a plugin that declares none) is not checked, and what it writes is
unknown, so a pipeline is predicted up to it only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum

from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.memory import is_placed
from tasoc.ir.parallel import carries_shardings
from tasoc.ir.program import ProgramError, entry_function
from tasoc.ir.training import training_signature


class Kind(StrEnum):
    """What a program is, as far as which passes take it goes (module docstring)."""

    GRAPH = "graph"
    TRAINING = "training"
    SHARDED = "sharded"
    PLACED = "placed"


def kinds_of(module: ModuleOp) -> frozenset[Kind]:
    """The kinds `module` is (module docstring).

    A module without a usable `@main` has no role kind rather than an error: xDSL's
    passes run on any IR, and tasoc's fail on such a module with `entry_function`'s
    message. Training marks that contradict each other are a ProgramError, as
    everywhere they are read.
    """
    kinds: set[Kind] = set()
    try:
        function = entry_function(module)
    except ProgramError:
        function = None
    if function is not None:
        signature = training_signature(function)
        if signature is None:
            kinds.add(Kind.GRAPH)
        elif signature.loss is not None:
            kinds.add(Kind.TRAINING)
    if carries_shardings(module):
        kinds.add(Kind.SHARDED)
    if is_placed(module):
        kinds.add(Kind.PLACED)
    return frozenset(kinds)


def describe(kinds: frozenset[Kind]) -> str:
    """`training, sharded`: the kinds in `Kind`'s order, or `none`."""
    return ", ".join(kind for kind in Kind if kind in kinds) or "none"


@dataclass(frozen=True, kw_only=True)
class PassContract:
    """Which programs a pass takes and what its output is, by kind.

    Each reason is what the user reads after `<pass>: `, so it says what is wrong and
    what to do (`the program is sharded; run equality-rewrite before soap-shard`).
    Refusals are checked before requirements, each in the order written, so the first
    reason given is the one reported when several apply.
    """

    requires: Mapping[Kind, str] = field(default_factory=dict)
    """Kinds the program must be, each with the reason given when it is not."""
    refuses: Mapping[Kind, str] = field(default_factory=dict)
    """Kinds the program must not be, each with the reason given when it is."""
    adds: frozenset[Kind] = frozenset()
    """Kinds the pass's output is, whatever its input was."""
    removes: frozenset[Kind] = frozenset()
    """Kinds the pass's output is not, whatever its input was."""


def check(contract: PassContract, kinds: frozenset[Kind]) -> str | None:
    """Why a pass of `contract` refuses a program of `kinds`; None when it takes it."""
    for kind, reason in contract.refuses.items():
        if kind in kinds:
            return reason
    for kind, reason in contract.requires.items():
        if kind not in kinds:
            return reason
    return None


def after(contract: PassContract, kinds: frozenset[Kind]) -> frozenset[Kind]:
    """The kinds of what a pass of `contract` writes from a program of `kinds`."""
    return (kinds - contract.removes) | contract.adds


def require(contract: PassContract, module: ModuleOp, failure: Callable[[str], Exception]) -> None:
    """Raise `failure(reason)` when `contract` refuses `module`: the check a pass makes
    first thing in `apply`. `failure` is the pass's own exception type, whose message
    is `<pass>: <reason>` (`AutodiffFailed`, ...), so the reason reads as the
    driver's."""
    reason = check(contract, kinds_of(module))
    if reason is not None:
        raise failure(reason)


@dataclass(frozen=True)
class Refusal:
    """The first pass of a pipeline that would refuse the program it gets."""

    position: int
    """The pass's position in the pipeline, from 1."""
    name: str
    reason: str
    kinds: frozenset[Kind]
    """The program's kinds where that pass would run."""

    def __str__(self) -> str:
        return (
            f"{self.name}: {self.reason} "
            f"[pipeline position {self.position}, program kinds: {describe(self.kinds)}]"
        )


def check_pipeline(
    passes: Iterable[tuple[str, PassContract | None]], kinds: frozenset[Kind], start: int = 1
) -> Refusal | None:
    """The first of `passes` (name and contract, in order, the first at position
    `start`) that would refuse what the passes before it make of a program of `kinds`.

    The walk stops at a pass without a contract: what it writes is unknown, so the
    passes after it can be checked only once it has run.
    """
    for position, (name, contract) in enumerate(passes, start):
        if contract is None:
            return None
        reason = check(contract, kinds)
        if reason is not None:
            return Refusal(position, name, reason, kinds)
        kinds = after(contract, kinds)
    return None
