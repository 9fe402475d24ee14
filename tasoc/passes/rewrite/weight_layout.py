"""Convolution weights laid out once: `conv2d(x, w)` with a weight-only `w` becomes
`conv2d(x, transpose(transpose(w, HWIO), OIHW))`.

The two transposes cancel, so the graph computes what it did. What changes is where
each runs: the inner one is weight-only, so weight preprocessing (TASO's, thesis
§2.9.3; `tasoc.cost.measured.end_to_end_sampler`) computes it once and hands the step
the weight in HWIO; the outer one is a *layout view* (`tasoc.cost.fusion.layout_views`)
that XLA folds into the convolution's dimension numbers. Under `jax.jit` on the CPU a
convolution reading an OIHW weight argument relays it out (a kernel of its own) on
every call, which the laid-out graph does not (docs/benchmarks.md, issue 34: 19 -> 13
kernels and 1.12x on a chain of six 256-channel convolutions).

This is no rule of a library: it is not a choice between equal graphs that the
e-graph could price op by op (the relayout is a kernel of the whole graph, not of an
e-node, and a transpose pair merges back into `w`'s e-class), but one rewrite that
pays or not as XLA compiles the whole convolution. `equality-rewrite` offers it after
its search and keeps it when its cost model prices it cheaper (on a CPU every model
charges the relayout it saves: `tasoc.cost.fusion.relaid_out_weights`), and
re-timing then confirms it measured.
"""

from __future__ import annotations

from tasoc.cost.fusion import CONVOLUTION_WEIGHT, HWIO, OIHW, layout_views, node_info
from tasoc.ir.dag import Dag, Node, Value

__all__ = ["HWIO", "NAME", "OIHW", "lay_out_conv_weights"]

NAME = "conv-weight-layout"
"""How the rewrite is counted among `rules_applied`."""


def lay_out_conv_weights(dag: Dag) -> tuple[Dag, int]:
    """`dag` with every convolution whose weight is weight-only (a parameter, a
    constant, or computed from those alone) and not laid out yet reading it through
    a layout view of its HWIO copy (module docstring), and how many convolutions
    changed. Convolutions sharing a weight share its copy (nodes are hash-consed)."""
    views = layout_views(dag)
    op, position = CONVOLUTION_WEIGHT
    renamed: dict[Value, Value] = {}
    changed = 0
    for node in dag.ops:
        inputs = [renamed.get(value, value) for value in node.inputs]
        weight = inputs[position] if node.op == op else None
        if weight is not None and weight.node not in views and node_info(weight.node).weight:
            laid_out = Node("transpose", [weight], perm=HWIO)
            inputs[position] = Node("transpose", [laid_out.out], perm=OIHW).out
            changed += 1
        if inputs != list(node.inputs):
            rebuilt = Node(node.op, inputs, **dict(node.attrs))
            renamed.update(zip(node.results, rebuilt.results, strict=True))
    if not changed:
        return dag, 0
    outputs = [renamed.get(value, value) for value in dag.outputs]
    return Dag(dag.args, outputs, dag.name), changed
