"""Weight-only subgraphs: the ops an inference run can compute once, ahead of time.

TASO's substitutions often move work onto the weights: fusing two convolutions
concatenates their kernels, turning an average pool into a depth-wise convolution
introduces a constant kernel, and enlarging a kernel pads a weight (thesis §2.9.3,
the grey areas of Fig. 2.8). For inference such ops read only weights
(`{graph.param}` arguments) and constants, so they cost nothing per run: their
results can be computed when the weights are loaded. A cost model that charged them
would reject exactly the rewrites that pay off.

Computing them needs the weights' values, which a pass does not have (they live in a
side file, and passes do not import backends); `weight_only` says which ops they are,
so that the search can leave them out of a graph's cost.
"""

from __future__ import annotations

from tasoc.ir.dag import Dag, Node


def weight_only(dag: Dag) -> frozenset[Node]:
    """The ops of `dag` whose inputs are, transitively, only weights and constants
    (ops with no inputs, such as `ones` or `i_conv`, included)."""
    folded: set[Node] = set()
    for node in dag.ops:  # topological: every input's node is decided before its users
        if all(_fixed(value.node, folded) for value in node.inputs):
            folded.add(node)
    return frozenset(folded)


def _fixed(node: Node, folded: set[Node]) -> bool:
    if node.is_arg:
        return bool(node.attr("is_param"))
    return node in folded
