"""Writing a `Plan` as a sharded program: the mesh, sharded types and the collectives.

`@main` is rebuilt from the light graph once, as `dag.to_function` does, with every
argument typed in its planned sharding and each op's result types inferred by
`shapes.infer` from its operands' (the sharded program's typing rule, so the types
are the ones the verifier expects). Where an operand lies otherwise than the op's
configuration reads it, the collectives `soap.reshard` names are inserted before the
op, once per value and target sharding however many ops read it so. Results leave as
the plan says (partial sums completed; a new weight as its argument lies). Argument,
result and function attributes are the dag's, so they survive; only `@main` is
replaced, and the mesh is added when the module has none.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node
from tasoc.ir.graph import OPS_BY_NAME, sig_of, tensor_type, to_attr
from tasoc.ir.parallel import COLLECTIVE_BY_KIND, MeshOp, ShardingAttr, meshes, with_sharding
from tasoc.ir.program import entry_function, make_function
from tasoc.ir.shapes import infer
from tasoc.ir.soap import Collective, Mesh, Sharding
from tasoc.passes.soap.plan import Plan


@dataclass
class _Builder:
    """The ops of the new body, in order, and the collectives among them."""

    mesh: Mesh
    ops: list[Operation] = field(default_factory=list)
    collectives: list[Collective] = field(default_factory=list)
    _resharded: dict[tuple[SSAValue, Sharding], SSAValue] = field(default_factory=dict)

    def read(self, value: SSAValue, target: Sharding) -> SSAValue:
        """`value` laid out as `target`, through the collectives that take it there."""
        key = (value, target)
        if key not in self._resharded:
            sig = sig_of(value.type)
            current = value
            for step in soap.reshard(_sharding(value), target, sig, self.mesh):
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


def write_sharded(module: ModuleOp, dag: Dag, plan: Plan, mesh: Mesh) -> list[Collective]:
    """Replace `module`'s `@main` by `dag` sharded as `plan` says, on `mesh` (added to
    the module unless it defines it); the collectives inserted, in program order."""
    builder = _Builder(mesh)
    block = Block(
        arg_types=[tensor_type(with_sharding(a.out.sig, plan.values[a.out])) for a in dag.args]
    )
    values: dict[Node, Sequence[SSAValue]] = {}
    for block_arg, node in zip(block.args, dag.args, strict=True):
        block_arg.name_hint = node.attr("name")
        values[node] = (block_arg,)
    for node in dag.ops:
        operands = [
            builder.read(values[v.node][v.index], need)
            for v, need in zip(node.inputs, plan.operands.get(node, ()), strict=True)
        ]
        attrs = dict(node.attrs)
        if operands:
            sigs = infer(node.op, [sig_of(o.type) for o in operands], attrs)
        else:
            sigs = [
                with_sharding(sig, plan.values[v])
                for sig, v in zip(node.sigs, node.results, strict=True)
            ]
        # The plan's shardings are the rule's: inference must give them back.
        assert [
            with_sharding(s, plan.values[v]) for s, v in zip(node.sigs, node.results, strict=True)
        ] == list(sigs), node
        op = OPS_BY_NAME[node.op].create(
            operands=operands,
            result_types=[tensor_type(sig) for sig in sigs],
            properties={name: to_attr(value) for name, value in attrs.items()},
        )
        builder.ops.append(op)
        values[node] = op.results
    outputs = [
        builder.read(values[v.node][v.index], target)
        for v, target in zip(dag.outputs, plan.outputs, strict=True)
    ]
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
    if mesh.name not in meshes(module):
        module.body.block.insert_op_before(MeshOp.of(mesh), module.body.block.first_op)  # type: ignore[arg-type]
    return builder.collectives
