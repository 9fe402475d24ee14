"""Property tests of `fold-transposes` with tasoc's public strategies (docs/custom-pass.md).

    pytest examples/test_my_passes.py

`graphs()` draws random well-typed programs; `equivalent` runs the program before and
after the pass on the same random inputs with the numpy reference interpreter.
"""

from __future__ import annotations

from hypothesis import given, settings
from my_passes import FoldTransposesPass
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.dag import from_module
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import graphs

OPS = ["transpose", "relu", "add", "matmul"]
"""Transposes, and ops around them for the folds to keep in place."""


def fold(module: ModuleOp) -> ModuleOp:
    """The pass applied to a copy (a pass edits its module in place)."""
    folded = module.clone()
    FoldTransposesPass().apply(Context(), folded)
    folded.verify()
    return folded


@settings(max_examples=60, deadline=None)
@given(graphs(ops=OPS, max_ops=8))
def test_folding_keeps_the_results(module: ModuleOp) -> None:
    assert equivalent(module, fold(module)).ok


@settings(max_examples=60, deadline=None)
@given(graphs(ops=["transpose"], min_ops=2, max_ops=6))
def test_no_transpose_reads_a_transpose_after_folding(module: ModuleOp) -> None:
    graph = from_module(fold(module))
    for node in graph.ops:
        assert not (node.op == "transpose" and node.inputs[0].node.op == "transpose")
