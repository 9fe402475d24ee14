"""A sharding plan on the light graph (`Plan`), and its writing as a sharded program:
the mesh, sharded types and the collectives.

A `Plan` says where every value of a `Dag` lies and how every op is split; searches
(soap-shard's strategies, the hypothesis strategy `shardings()`) make one, and
`write_sharded` turns it into IR. It lives in `ir/` because it is IR-level: the
verifier, the strategies of `verify/` and every pass read it alike.

`@main` is rebuilt from the light graph once, as `dag.to_function` does, with every
argument typed in its planned sharding and each op's result types inferred by
`shapes.infer` from its operands' (the sharded program's typing rule, so the types
are the ones the verifier expects). Where an operand lies otherwise than the op's
configuration reads it, the collectives `soap.reshard` names are inserted before the
op, once per value and target sharding however many ops read it so. Results leave as
the plan says (partial sums completed; a new weight as its argument lies). Argument,
result and function attributes are the dag's, so they survive; only `@main` is
replaced, and the mesh is added when the module has none.

Every collective written moves values that some op reads and that only the devices
holding them know; JAX and XLA remove the others, and the compiled program would then
run fewer collectives than the IR says (docs/decisions.md). So where moving would
communicate, the writer makes instead: an operand read for its shape alone
(`OpRule.shape_only`: the x of a mean's gradient) becomes zeros of the layout read,
and a *local* value (`local_values`: a constant, or computed from constants alone,
like a mean loss's seed gradient) is written where it is read: a constant in the
layout read, an op's result as planned where slices reach the layout read, else
computed whole there and sliced. `free_read` says which reads those are, for the
plan's completion and the simulator, which price them as nothing.

A plan on device groups writes one `parallel.mesh` per group instead of the mesh (which
the module then no longer defines) and its ops in the plan's order, as runs of ops on
one group. A value read on another group is completed where it lies, at the end of its
run, and copied over (`parallel.replicate`) before the run reading it begins; results
leave at the end of their run. So no partial sum waits across another group's ops or
a copy, which split a program into separate computations.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node, Value, function_of
from tasoc.ir.graph import OPS_BY_NAME, sig_of, tensor_type, to_attr
from tasoc.ir.parallel import (
    COLLECTIVE_BY_KIND,
    MeshOp,
    ShardingAttr,
    check_transition,
    meshes,
    with_sharding,
)
from tasoc.ir.program import entry_function
from tasoc.ir.shapes import TensorSig, infer
from tasoc.ir.soap import Collective, Config, Mesh, OpRule, Sharding, ShardingError


@dataclass
class Plan:
    """Where every value lies and how every op is split: what `write_sharded` writes."""

    configs: dict[Node, Config]
    """Each op's configuration (constants have none)."""
    operands: dict[Node, tuple[Sharding, ...]]
    """The shardings each op reads its operands in (resharded from `values` where they differ)."""
    values: dict[Value, Sharding]
    """Every value's sharding as produced (an argument's: as passed in)."""
    outputs: tuple[Sharding, ...]
    """The sharding each result of the program leaves in."""
    notes: list[str] = field(default_factory=list)
    meshes: tuple[Mesh, ...] = ()
    """The device groups when the strategy placed ops on several (empty: one mesh)."""
    order: tuple[Node, ...] | None = None
    """The order to write the ops in (the dag's when None)."""


def completed(sharding: Sharding) -> Sharding:
    """`sharding` with its partial sums completed (the same splits)."""
    return Sharding(sharding.mesh, sharding.dims)


def moves(
    source: Sharding, target: Sharding, sig: TensorSig, meshes: Mapping[str, Mesh]
) -> list[soap.Collective]:
    """The collectives taking a value from `source` to `target`: `soap.reshard` on one
    mesh; across meshes, its partial sums completed where it lies, then one
    `replicate` copying it whole (bytes: all of it) into `target`'s layout."""
    if source.mesh == target.mesh:
        return soap.reshard(source, target, sig, meshes[source.mesh])
    if target.unreduced:
        raise ShardingError(f"no collective turns {source} into partial sums {target}")
    complete_there = completed(source)
    steps = soap.reshard(source, complete_there, sig, meshes[source.mesh])
    return [*steps, soap.Collective("replicate", target, (), sig.size * sig.dtype.itemsize)]


def _rules_of(dag: Dag) -> dict[Node, OpRule]:
    """Each op's SOAP rule (constants, which have no operands, have none)."""
    return {
        node: soap.rule_of(node.op, [v.sig for v in node.inputs], dict(node.attrs), node.sigs)
        for node in dag.ops
        if node.inputs
    }


def local_values(dag: Dag, rules: Mapping[Node, OpRule]) -> frozenset[Value]:
    """The values that depend on no argument of the program: constants, and the
    results of ops reading only such values (operands read for their shape alone
    aside). Every device can make them itself, in any layout, and XLA folds them: a
    collective of one (an all-gather of a broadcast constant) is no communication."""
    local: set[Value] = set()
    for node in dag.ops:
        shape_only = rules[node].shape_only if node.inputs else ()
        if all(v in local for i, v in enumerate(node.inputs) if i not in shape_only):
            local.update(node.results)
    return frozenset(local)


def free_read(value: Value, target: Sharding, local: Collection[Value]) -> bool:
    """Whether `value` is read in `target` without communication wherever it lies: a
    local value read complete, which the writer makes there rather than moving it
    (partial sums cannot be made without communication)."""
    return value in local and not target.unreduced


def _sliced(source: Sharding, target: Sharding) -> bool:
    """Whether `target` is `source` or a block of it: reached by all-slices alone."""
    return source == target or (
        source.mesh == target.mesh and check_transition("all_slice", source, target) is None
    )


class Sink[V](Protocol):
    """Where `ShardedWriter` writes a plan's program: xDSL ops (`write_sharded`), or a
    light view of what one device runs (`tasoc.passes.placement.device_view`). `V` is
    what a written value is there."""

    def op(self, node: Node, operands: Sequence[V], results: Sequence[Sharding]) -> Sequence[V]:
        """`node` written on `operands` laid out as it reads them, its results as
        `results`; the written results."""
        ...

    def collective(self, value: V, step: Collective) -> V:
        """`value` moved by `step`; the moved value."""
        ...

    def sharding(self, value: V) -> Sharding:
        """How a written value is laid out."""
        ...

    def sig(self, value: V) -> TensorSig:
        """A written value's whole type (shape and element type)."""
        ...


@dataclass
class ShardedWriter[V]:
    """Writes a plan's program into a `Sink` (module docstring): each op once, on its
    operands laid out as it reads them, with the collectives taking them there."""

    plan: Plan
    meshes: dict[str, Mesh]
    rules: Mapping[Node, OpRule]
    local: frozenset[Value]
    sink: Sink[V]
    values: dict[Node, Sequence[V]] = field(default_factory=dict)
    """The written results of each node, laid out as the plan says."""
    collectives: list[Collective] = field(default_factory=list)
    _resharded: dict[tuple[V, Sharding], V] = field(default_factory=dict)
    _constants: dict[tuple[Value, Sharding], V] = field(default_factory=dict)
    _whole: dict[tuple[Node, str], Sequence[V]] = field(default_factory=dict)

    @classmethod
    def of(cls, dag: Dag, plan: Plan, mesh: Mesh, sink: Sink[V]) -> ShardedWriter[V]:
        """A writer of `plan` on `mesh` (or on the plan's device groups)."""
        rules = _rules_of(dag)
        groups = plan.meshes or (mesh,)
        return cls(plan, {g.name: g for g in groups}, rules, local_values(dag, rules), sink)

    def program(self, dag: Dag, arguments: Sequence[V]) -> list[V]:
        """Every op of `dag` written, in the plan's order, on `arguments` (laid out as
        the plan passes them in); the outputs, laid out as they leave."""
        for node, argument in zip(dag.args, arguments, strict=True):
            self.values[node] = (argument,)
        order = self.plan.order or dag.ops
        for run in _runs(order, self.plan) if self.plan.meshes else [list(order)]:
            if self.plan.meshes:
                _copy_in(run, self.plan, self)
            for node in run:
                # Local values are written where they are read, in the layouts read.
                if node.results[0] not in self.local:
                    self.write(node)
            if self.plan.meshes:
                _send_out(run, dag, self.plan, self)
        return [
            self.read(v, target) for v, target in zip(dag.outputs, self.plan.outputs, strict=True)
        ]

    def write(self, node: Node) -> Sequence[V]:
        """`node` as the plan says, once: on its operands laid out as it reads them."""
        if node not in self.values:
            operands = [
                self.operand(node, i, need)
                for i, need in enumerate(self.plan.operands.get(node, ()))
            ]
            results = [self.plan.values[v] for v in node.results]
            self.values[node] = self.sink.op(node, operands, results)
        return self.values[node]

    def read(self, value: Value, target: Sharding) -> V:
        """`value` laid out as `target`: moved there, or made there when it is a local
        value read complete (`free_read`)."""
        if not free_read(value, target, self.local):
            return self.move(self.write(value.node)[value.index], target)
        node = value.node
        if not node.inputs:
            key = (value, target)
            if key not in self._constants:
                self._constants[key] = self.sink.op(node, [], [target])[0]
            return self._constants[key]
        if _sliced(self.plan.values[value], target):
            return self.move(self.write(node)[value.index], target)
        return self.move(self._whole_on(node, target.mesh)[value.index], target)

    def operand(self, node: Node, index: int, target: Sharding) -> V:
        """Operand `index` of `node` laid out as `target`; one the op reads for its
        shape alone is zeros of that layout where it lies otherwise than slices reach."""
        value = node.inputs[index]
        if index in self.rules[node].shape_only and not _sliced(self.plan.values[value], target):
            zeros = Node("zeros", (), shape=value.sig.shape, dtype=value.sig.dtype)
            return self.sink.op(zeros, [], [target])[0]
        return self.read(value, target)

    def move(self, value: V, target: Sharding) -> V:
        """`value` laid out as `target`, through the collectives that take it there
        (from another mesh: from its completed form, itself moved once)."""
        key = (value, target)
        if key not in self._resharded:
            source = self.sink.sharding(value)
            current = value
            if source.mesh != target.mesh:
                current = self.move(value, Sharding(source.mesh, source.dims))
            sig = self.sink.sig(value)
            for step in moves(self.sink.sharding(current), target, sig, self.meshes):
                current = self.sink.collective(current, step)
                self.collectives.append(step)
            self._resharded[key] = current
        return self._resharded[key]

    def _whole_on(self, node: Node, mesh: str) -> Sequence[V]:
        """The results of local op `node` computed unsplit on `mesh`, from its
        operands made whole there (the unsplit configuration every rule has)."""
        key = (node, mesh)
        if key not in self._whole:
            operands = [
                self.operand(node, i, Sharding.replicated(mesh, v.sig.rank))
                for i, v in enumerate(node.inputs)
            ]
            results = [Sharding.replicated(mesh, v.sig.rank) for v in node.results]
            self._whole[key] = self.sink.op(node, operands, results)
        return self._whole[key]


@dataclass
class _OpSink:
    """`Sink` of xDSL ops: the new body of `@main`, in order."""

    ops: list[Operation] = field(default_factory=list)

    def op(
        self, node: Node, operands: Sequence[SSAValue], results: Sequence[Sharding]
    ) -> Sequence[SSAValue]:
        self.ops.append(_graph_op(node, operands, results))
        return self.ops[-1].results

    def collective(self, value: SSAValue, step: Collective) -> SSAValue:
        op = COLLECTIVE_BY_KIND[step.kind].build_on(value, step.result)
        self.ops.append(op)
        return op.output

    def sharding(self, value: SSAValue) -> Sharding:
        encoding = sig_of(value.type).encoding
        assert isinstance(encoding, ShardingAttr), value
        return encoding.sharding

    def sig(self, value: SSAValue) -> TensorSig:
        return sig_of(value.type)


def _runs(order: Sequence[Node], plan: Plan) -> list[list[Node]]:
    """`order` cut where the mesh changes (one run for a plan on one mesh)."""
    runs: list[list[Node]] = []
    for node in order:
        mesh = plan.values[node.results[0]].mesh
        if runs and plan.values[runs[-1][0].results[0]].mesh == mesh:
            runs[-1].append(node)
        else:
            runs.append([node])
    return runs


def write_sharded(module: ModuleOp, dag: Dag, plan: Plan, mesh: Mesh) -> list[Collective]:
    """Replace `module`'s `@main` by `dag` sharded as `plan` says, on `mesh` (added to
    the module unless it defines it) or on the plan's device groups (which replace
    it); the collectives inserted, in program order."""
    groups = plan.meshes or (mesh,)
    sink = _OpSink()
    writer = ShardedWriter.of(dag, plan, mesh, sink)
    block = Block(
        arg_types=[tensor_type(with_sharding(a.out.sig, plan.values[a.out])) for a in dag.args]
    )
    for block_arg, node in zip(block.args, dag.args, strict=True):
        block_arg.name_hint = node.attr("name")
    outputs = writer.program(dag, block.args)
    block.add_ops(sink.ops)
    function = function_of(dag, block, outputs)
    Rewriter.replace_op(entry_function(module), function)
    body = module.body.block
    if plan.meshes:
        for op in [op for op in body.ops if isinstance(op, MeshOp)]:
            body.erase_op(op)
    for group in reversed(groups):
        if group.name not in meshes(module):
            body.insert_op_before(MeshOp.of(group), body.first_op)  # type: ignore[arg-type]
    return writer.collectives


def _graph_op(node: Node, operands: Sequence[SSAValue], results: Sequence[Sharding]) -> Operation:
    """`node` on its sharded `operands`, typed by inference (constants: as `results`)."""
    attrs = dict(node.attrs)
    planned = [with_sharding(sig, s) for sig, s in zip(node.sigs, results, strict=True)]
    sigs = infer(node.op, [sig_of(o.type) for o in operands], attrs) if operands else planned
    # The planned shardings are the rule's: inference must give them back.
    assert planned == list(sigs), node
    return OPS_BY_NAME[node.op].create(
        operands=operands,
        result_types=[tensor_type(sig) for sig in sigs],
        properties={name: to_attr(value) for name, value in attrs.items()},
    )


def _copy_in(run: Sequence[Node], plan: Plan, builder: ShardedWriter) -> None:
    """Before a run: the values its ops read from other groups, copied over (local
    ops are written where they are read, and make their operands there)."""
    for node in run:
        if node.results[0] in builder.local:
            continue
        for index, need in enumerate(plan.operands.get(node, ())):
            if plan.values[node.inputs[index]].mesh != need.mesh:
                builder.operand(node, index, need)


def _send_out(run: Sequence[Node], dag: Dag, plan: Plan, builder: ShardedWriter) -> None:
    """After a run: the program's results it computes laid out as they leave, and its
    partial sums read after it completed as their readers want them; what other
    groups read, completed (the plan reads partial sums in their run only). Local
    values are not sent: they are made where they are read."""
    exits: dict[Value, list[int]] = {}
    for index, value in enumerate(dag.outputs):
        exits.setdefault(value, []).append(index)
    consumers = dag.consumers()
    inside = set(run)
    for node in run:
        for value in node.results:
            if value in builder.local:
                continue
            here = plan.values[value]
            complete = Sharding(here.mesh, here.dims)
            targets = [plan.outputs[index] for index in exits.get(value, ())]
            targets += [
                plan.operands[use.node][use.operand]
                for use in consumers.get(value, ())
                if use.node not in inside
                and here.unreduced
                and use.operand not in builder.rules[use.node].shape_only
            ]
            for target in targets:
                builder.read(value, target if target.mesh == here.mesh else complete)
