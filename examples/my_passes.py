"""A user's own pass for tasoc, written outside tasoc (docs/custom-pass.md).

`fold-transposes` rewrites `transpose(transpose(x))` into one transpose, or into `x`
itself when the two permutations cancel. Run it without installing anything:

    tasoc opt model.mlir --load-pass-plugin examples/my_passes.py -p fold-transposes

The pass converts `@main` to tasoc's light graph (`tasoc.ir.dag`), edits the graph
there, and writes the result back into the module; every other op of the module is
left as it was. The light graph holds `graph` ops on unsharded, unplaced tensors, so
the pass's contract refuses sharded and placed programs: `tasoc opt` then stops a
pipeline that would run it on one before the pipeline's first pass runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp
from xdsl.passes import ModulePass
from xdsl.utils.exceptions import PassFailedException

from tasoc.ir.dag import Dag, Node, Value, from_module, write_back
from tasoc.passes.kinds import Kind, PassContract, require


def compose(inner: tuple[int, ...], outer: tuple[int, ...]) -> tuple[int, ...]:
    """The permutation of `transpose(transpose(x, inner), outer)` as one transpose:
    result dim i is dim `outer[i]` of the inner result, i.e. dim `inner[outer[i]]` of x."""
    return tuple(inner[axis] for axis in outer)


def _folded(node: Node) -> Value | None:
    """What a transpose of a transpose computes, in one step or none; None otherwise."""
    if node.op != "transpose" or node.inputs[0].node.op != "transpose":
        return None
    inner = node.inputs[0].node
    perm = compose(inner.attr("perm"), node.attr("perm"))
    source = inner.inputs[0]
    if perm == tuple(range(len(perm))):
        return source
    return Node("transpose", [source], perm=perm).out


def fold_transposes(graph: Dag, max_folds: int = 1000) -> Dag:
    """`graph` with chains of transposes folded, one fold at a time until none is left
    or `max_folds` were made (each fold shortens a chain by one)."""
    for _ in range(max_folds):
        folds = ((node.out, _folded(node)) for node in graph.ops)
        fold = next(((old, new) for old, new in folds if new is not None), None)
        if fold is None:
            break
        old, new = fold
        graph = graph.replace({old: new})
    return graph


@dataclass(frozen=True)
class FoldTransposesPass(ModulePass):
    """Fold `transpose(transpose(x))` into one transpose, or into `x` when they cancel."""

    name: ClassVar[str] = "fold-transposes"

    contract: ClassVar[PassContract] = PassContract(
        refuses={
            Kind.SHARDED: "the program is sharded; run fold-transposes before soap-shard",
            Kind.PLACED: "the program is placed; run fold-transposes before placement",
        }
    )
    """The programs it takes (docs/custom-pass.md): forward programs and training steps."""

    max_folds: int = 1000
    """Stop after this many folds (`fold-transposes{max-folds=10}`): an option, to show
    how options are declared and checked."""

    def __post_init__(self) -> None:
        if self.max_folds < 1:
            raise ValueError(f"max-folds must be at least 1, got {self.max_folds}")

    def apply(self, ctx: Context, op: ModuleOp) -> None:
        require(self.contract, op, lambda reason: PassFailedException(f"{self.name}: {reason}"))
        graph = from_module(op)
        folded = fold_transposes(graph, self.max_folds)
        if folded != graph:
            write_back(op, folded)
