"""Which ops XLA runs as one kernel, what traffic that saves, and what stays live.

Summing standalone op times misranks graphs under XLA: `conv2d -> batchnorm ->
relu` is one kernel there, not three, and the two intermediates never reach memory.
The model here is deliberately simple and local, so one pass over a graph applies it:

* an op *runs* unless it is an argument, a constant (`ConstantLike`: XLA embeds those), or — with
  `fold_weights` — computed from weights and constants alone: TASO preprocesses
  such ops once for inference (thesis §2.9.3), so a concatenation of two weight
  matrices costs nothing per run;
* a fusible op (trait `Fusible`) joins the kernel of the producer of its first
  operand that can take it: a running op whose results feed no other running op and
  no program output. The fused op then reads that operand from registers and
  launches nothing; the producer writes nothing.

Chains fuse transitively (conv -> batchnorm -> relu -> add is one kernel when each
link has a single consumer). One transpose is folded into its consumer: a weight-only
`transpose` read only as convolutions' weights (a *layout view*, `layout_views`) runs
inside their kernel at no cost, since XLA folds it into the convolution's dimension
numbers; its operand is what is preprocessed, so a weight laid out once beforehand
(HWIO, the layout XLA's CPU convolution reads) is not relaid out on every run. A
convolution that reads its OIHW weight as an argument of the step is: XLA:CPU adds
a kernel transposing it to HWIO on every call (`relaid_out_weights`; a cost model
charges it where its device does, `Device.conv_weight_relayout`). Not modelled:
multi-output fusion of siblings, duplicating a cheap producer into several
consumers, and folding other transposes into a contraction's dimension numbers.

Memory follows the op order `dag.ops`: weights (with `fold_weights`, the
preprocessed ones the running ops read) stay resident, program inputs are live
throughout (the caller owns them), and every other tensor lives from the op that
makes it to its last reader, or to the end for outputs. Fused intermediates count
as if written, so the peak is an upper bound.
"""

from __future__ import annotations

import weakref
from dataclasses import dataclass

from xdsl.traits import ConstantLike

from tasoc.cost.stats import node_stats, sig_bytes
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.op_sets import ops_with
from tasoc.ir.traits import Fusible


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """What a fusion plan needs to know about a node, computed once per node.

    `computed` is false for arguments and constants (they never run); `weight` says
    the node depends on weights and constants only; `producers` are the distinct
    nodes its operands come from, in operand order; `out_bytes` its results' size.
    """

    computed: bool
    weight: bool
    fusible: bool
    producers: tuple[Node, ...]
    out_bytes: int


_INFO: weakref.WeakKeyDictionary[Node, NodeInfo] = weakref.WeakKeyDictionary()


def node_info(node: Node) -> NodeInfo:
    """The cached `NodeInfo` of `node` (iterative: deep graphs are fine)."""
    info = _INFO.get(node)
    if info is not None:
        return info
    stack = [node]
    while stack:
        top = stack[-1]
        missing = [v.node for v in top.inputs if v.node not in _INFO]
        if missing:
            stack.extend(missing)
            continue
        stack.pop()
        if top not in _INFO:
            _INFO[top] = _make_info(top)
    return _INFO[node]


def _make_info(node: Node) -> NodeInfo:
    producers = tuple(dict.fromkeys(v.node for v in node.inputs))
    is_param = node.is_arg and bool(node.attr("is_param"))
    weight = is_param or (not node.is_arg and all(_INFO[p].weight for p in producers))
    return NodeInfo(
        computed=not (node.is_arg or node.op in ops_with(ConstantLike)),
        weight=weight,
        fusible=node.op in ops_with(Fusible),
        producers=producers,
        out_bytes=sum(sig_bytes(sig) for sig in node.sigs),
    )


@dataclass(frozen=True, slots=True, eq=False)
class FusionPlan:
    """The running ops of a dag in `dag.ops` order, grouped into XLA kernels.

    `fused[i]` is the operand position whose producer's kernel `ops[i]` joins (-1:
    it starts a kernel of its own); `internal[i]` says its results stay inside a
    kernel (its only consumer fused into it), so they are never written. `views` are
    the running layout views (`layout_views`), which cost nothing where they run.
    """

    dag: Dag
    running: dict[Node, NodeInfo]
    fused: tuple[int, ...]
    internal: tuple[bool, ...]
    views: frozenset[Node] = frozenset()

    @property
    def ops(self) -> tuple[Node, ...]:
        return tuple(self.running)

    def peak_bytes(self) -> int:
        """Peak bytes resident while running the ops in order (module docstring).

        Liveness is tracked per node: a multi-result op's results die together.
        """
        running = self.running
        last_read: dict[Node, int] = {}
        for step, info in enumerate(running.values()):
            for producer in info.producers:
                last_read[producer] = step
        for value in self.dag.outputs:
            last_read[value.node] = len(running)
        freed = [0] * (len(running) + 1)
        resident = live = 0
        for node, step in last_read.items():
            info = running.get(node)
            if info is not None:
                freed[step] += info.out_bytes
            elif (info := node_info(node)).weight:
                resident += info.out_bytes
        for arg in self.dag.args:
            info = node_info(arg)
            live += 0 if info.weight else info.out_bytes
        peak = live
        for step, (node, info) in enumerate(running.items()):
            live += info.out_bytes
            peak = max(peak, live)
            live -= freed[step] + (0 if node in last_read else info.out_bytes)
        return resident + peak


CONVOLUTION_WEIGHT = ("conv2d", 1)
"""The operand a layout view may feed: `conv2d`'s weight."""

HWIO = (2, 3, 1, 0)
"""OIHW -> HWIO: the weight layout XLA's CPU convolution reads."""
OIHW = (3, 2, 0, 1)
"""HWIO -> OIHW, the inverse of `HWIO`: the layout `conv2d` takes its weight in, and
the permutation of a layout view that reads an HWIO copy."""


def layout_views(dag: Dag) -> set[Node]:
    """The weight-only `transpose`s of `dag` that only convolutions read, and only as
    their weight (`CONVOLUTION_WEIGHT`), and that the program does not return: XLA
    folds each into its convolutions' dimension numbers, so it costs nothing where it
    runs, and what it reads is what weight preprocessing hands over (module
    docstring)."""
    views = {
        node
        for node in dag.ops
        if node.op == "transpose" and node_info(node).weight and node_info(node).computed
    }
    if not views:
        return views
    for node in dag.ops:
        for position, value in enumerate(node.inputs):
            if value.node in views and (node.op, position) != CONVOLUTION_WEIGHT:
                views.discard(value.node)
    return views - {value.node for value in dag.outputs}


def plan_fusion(dag: Dag, fuse: bool = True, fold_weights: bool = True) -> FusionPlan:
    """Which ops of `dag` run and which kernel each joins (see the module docstring);
    with `fuse=False` every running op is a kernel of its own (a layout view too)."""
    views = layout_views(dag)
    running = {}
    for node in dag.ops:
        info = node_info(node)
        if node in views or (info.computed and not (fold_weights and info.weight)):
            running[node] = info
    if not fuse:
        return FusionPlan(
            dag, running, (-1,) * len(running), (False,) * len(running), frozenset(views)
        )
    consumers: dict[Node, int] = {}
    for info in running.values():
        for producer in info.producers:
            consumers[producer] = consumers.get(producer, 0) + 1
    returned = {v.node for v in dag.outputs}
    fused_at: dict[Node, int] = {}
    for node, info in running.items():
        weight = node.inputs[1].node if node.op == CONVOLUTION_WEIGHT[0] else None
        if weight in views:  # the convolution joins its layout view's kernel
            fused_at[node] = CONVOLUTION_WEIGHT[1]
        elif info.fusible and node not in views:
            for position, value in enumerate(node.inputs):
                producer = value.node
                alone = consumers.get(producer) == 1 and producer not in returned
                if alone and producer in running:
                    fused_at[node] = position
                    break
    absorbed = {node.inputs[position].node for node, position in fused_at.items()}
    return FusionPlan(
        dag,
        running,
        tuple(fused_at.get(node, -1) for node in running),
        tuple(node in absorbed for node in running),
        frozenset(views),
    )


def relaid_out_weights(plan: FusionPlan) -> list[Value]:
    """The convolution weights XLA:CPU relays out (OIHW -> HWIO, a kernel of its own)
    on every run of `plan`'s step, each once however many convolutions read it (XLA
    shares the copy): those a running convolution reads as an argument of the step —
    a program argument (a parameter or an input; in a training step the weights
    themselves), or a weight-only value weight preprocessing hands over — or through a
    layout view of a layout other than HWIO. Not a weight read through an `OIHW` view
    of its HWIO copy (what `passes/rewrite/weight_layout.py` writes), not a constant
    (XLA lays it out when it compiles), and not the result of an op of the step (XLA
    has the producer write the layout the convolution reads)."""
    op, position = CONVOLUTION_WEIGHT
    weights: dict[Value, None] = {}
    for node in plan.running:
        if node.op != op:
            continue
        weight = node.inputs[position]
        producer = weight.node
        if producer in plan.views:
            if producer.attr("perm") == OIHW:
                continue
        elif producer in plan.running or not (producer.is_arg or node_info(producer).computed):
            continue
        weights[weight] = None
    return list(weights)


def relayout(weight: Value) -> Node:
    """The op XLA runs to relay out a convolution weight (`relaid_out_weights`): its
    transpose to HWIO. A cost model prices it as that op, a kernel of its own; in a
    training step it is the very op a laid-out convolution's weight runs (nodes are
    interned), so there the layout is priced as no gain."""
    return Node("transpose", [weight], perm=HWIO)


def traffic(node: Node, fused: int, internal: bool) -> tuple[int, int]:
    """(FLOPs, bytes moved) of `node` inside a fused kernel: reads of the operand
    taken from the producer's kernel (every use of it) and, for internal results,
    the writes are gone."""
    stats = node_stats(node)
    read = stats.bytes_read
    if fused >= 0:
        producer = node.inputs[fused].node
        read -= sum(sig_bytes(v.sig) for v in node.inputs if v.node is producer)
    written = 0 if internal else stats.bytes_written
    return stats.flops, read + written


def weight_bytes(dag: Dag) -> int:
    """Bytes of the program's weight arguments (`{graph.param}`)."""
    return sum(info.out_bytes for info in map(node_info, dag.args) if info.weight)


def peak_bytes(dag: Dag, fold_weights: bool = True) -> int:
    """Peak bytes resident while running `dag.ops` in order (module docstring)."""
    return plan_fusion(dag, fuse=False, fold_weights=fold_weights).peak_bytes()
