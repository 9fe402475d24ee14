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

A plan on device groups writes one `parallel.mesh` per group instead of the mesh (which
the module then no longer defines) and its ops in the plan's order, as runs of ops on
one group. A value read on another group is completed where it lies, at the end of its
run, and copied over (`parallel.replicate`) before the run reading it begins; results
leave at the end of their run. So no partial sum waits across another group's ops or
a copy, which split a program into separate computations.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.graph import OPS_BY_NAME, sig_of, tensor_type, to_attr
from tasoc.ir.parallel import COLLECTIVE_BY_KIND, MeshOp, ShardingAttr, meshes, with_sharding
from tasoc.ir.program import entry_function, make_function
from tasoc.ir.shapes import TensorSig, infer
from tasoc.ir.soap import Collective, Config, Mesh, Sharding, ShardingError


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


@dataclass
class _Builder:
    """The ops of the new body, in order, and the collectives among them."""

    meshes: dict[str, Mesh]
    ops: list[Operation] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    _resharded: dict[tuple[SSAValue, Sharding], SSAValue] = field(default_factory=dict)

    def read(self, value: SSAValue, target: Sharding) -> SSAValue:
        """`value` laid out as `target`, through the collectives that take it there
        (from another mesh: from its completed form, itself read once)."""
        key = (value, target)
        if key not in self._resharded:
            source = _sharding(value)
            current = value
            if source.mesh != target.mesh:
                current = self.read(value, Sharding(source.mesh, source.dims))
            for step in moves(_sharding(current), target, sig_of(value.type), self.meshes):
                op = COLLECTIVE_BY_KIND[step.kind].build_on(current, step.result)
                self.ops.append(op)
                self.collectives.append(step)
                current = op.output
            self._resharded[key] = current
        return self._resharded[key]


def _sharding(value: SSAValue) -> Sharding:
    encoding = sig_of(value.type).encoding
    assert isinstance(encoding, ShardingAttr), value
    return encoding.sharding


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
    builder = _Builder({group.name: group for group in groups})
    block = Block(
        arg_types=[tensor_type(with_sharding(a.out.sig, plan.values[a.out])) for a in dag.args]
    )
    values: dict[Node, Sequence[SSAValue]] = {}
    for block_arg, node in zip(block.args, dag.args, strict=True):
        block_arg.name_hint = node.attr("name")
        values[node] = (block_arg,)

    def read(value: Value, target: Sharding) -> SSAValue:
        return builder.read(values[value.node][value.index], target)

    order = plan.order or dag.ops
    for run in _runs(order, plan) if plan.meshes else [list(order)]:
        if plan.meshes:
            _copy_in(run, plan, read)
        for node in run:
            operands = [
                read(v, need)
                for v, need in zip(node.inputs, plan.operands.get(node, ()), strict=True)
            ]
            builder.ops.append(_graph_op(node, operands, plan))
            values[node] = builder.ops[-1].results
        if plan.meshes:
            _send_out(run, dag, plan, read)
    outputs = [read(v, target) for v, target in zip(dag.outputs, plan.outputs, strict=True)]
    block.add_ops(builder.ops)
    function = make_function(
        dag.name,
        block,
        [node.attr("is_param") for node in dag.args],
        outputs,
        arg_attrs=[node.attr("attributes") for node in dag.args],
        res_attrs=dag.result_attributes,
        func_attrs=dag.attributes,
    )
    Rewriter.replace_op(entry_function(module), function)
    body = module.body.block
    if plan.meshes:
        for op in [op for op in body.ops if isinstance(op, MeshOp)]:
            body.erase_op(op)
    for group in reversed(groups):
        if group.name not in meshes(module):
            body.insert_op_before(MeshOp.of(group), body.first_op)  # type: ignore[arg-type]
    return builder.collectives


def _graph_op(node: Node, operands: Sequence[SSAValue], plan: Plan) -> Operation:
    """`node` on its sharded `operands`, typed by inference (constants: by the plan)."""
    attrs = dict(node.attrs)
    planned = [
        with_sharding(sig, plan.values[v]) for sig, v in zip(node.sigs, node.results, strict=True)
    ]
    sigs = infer(node.op, [sig_of(o.type) for o in operands], attrs) if operands else planned
    # The plan's shardings are the rule's: inference must give them back.
    assert planned == list(sigs), node
    return OPS_BY_NAME[node.op].create(
        operands=operands,
        result_types=[tensor_type(sig) for sig in sigs],
        properties={name: to_attr(value) for name, value in attrs.items()},
    )


Read = Callable[[Value, Sharding], SSAValue]


def _copy_in(run: Sequence[Node], plan: Plan, read: Read) -> None:
    """Before a run: the values its ops read from other groups, copied over."""
    for node in run:
        for value, need in zip(node.inputs, plan.operands.get(node, ()), strict=True):
            if plan.values[value].mesh != need.mesh:
                read(value, need)


def _send_out(run: Sequence[Node], dag: Dag, plan: Plan, read: Read) -> None:
    """After a run: the program's results it computes laid out as they leave, and its
    partial sums read after it completed as their readers want them; what other
    groups read, completed (the plan reads partial sums in their run only)."""
    exits: dict[Value, list[int]] = {}
    for index, value in enumerate(dag.outputs):
        exits.setdefault(value, []).append(index)
    consumers = dag.consumers()
    inside = set(run)
    for node in run:
        for value in node.results:
            here = plan.values[value]
            complete = Sharding(here.mesh, here.dims)
            targets = [plan.outputs[index] for index in exits.get(value, ())]
            targets += [
                plan.operands[use.node][use.operand]
                for use in consumers.get(value, ())
                if use.node not in inside and here.unreduced
            ]
            for target in targets:
                read(value, target if target.mesh == here.mesh else complete)
