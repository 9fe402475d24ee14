"""One device's view of a sharded training step: what `placement` plans on a program
that `soap-shard` wrote (DESIGN.md §8, docs/placement.md "Sharded steps").

Under SPMD every device of a mesh runs the same schedule on blocks of the same sizes,
so one device's memory plan is every device's: the planners (offload-all, Belady, LRU,
the GA, the DP) see the step as the light graph of one device — every op of the
block once, in the block's order (the schedule), each value the block one device
holds (`Sharding.local_shape`), the collectives as ops of their own with their
buffers — and plan it within the per-device capacity like any step. The nodes are
`Node.given`: their types are the local ones the module states, not re-inferred (a
`graph` op's rule speaks of whole tensors), and each keeps its position so that two
equal ops of the block stay two nodes.

Times, on the machine the plan is priced on: a `graph` op takes its time at its local
shapes as the machine prices ops (`shard_seconds`, as soap-shard's simulator prices a
shard, every device of the mesh running at once), a
collective the machine's collective time over the devices that take part
(`Machine.collective_time`), and collectives run on their own stream
(`tasoc.sim.placement`), beside compute and the swaps.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.graph import GraphOp, sig_of
from tasoc.ir.parallel import CollectiveOp, ReplicateOp, meshes, sharding_of
from tasoc.ir.program import (
    arg_infos,
    entry_block,
    entry_function,
    function_attributes,
    result_attributes,
    return_values,
)
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan, ShardedWriter
from tasoc.ir.soap import Collective, Mesh, Sharding
from tasoc.sim.parallel import axis_groups, shard_seconds


@dataclass(frozen=True)
class DeviceView:
    """A sharded step as one device runs it (module docstring)."""

    dag: Dag
    """Every op of `@main`'s block once, in block order; local types."""
    ops: Mapping[Node, Operation]
    """The module's op each node of `dag` stands for."""
    seconds: Mapping[Node, float] | None
    """Each op's time on one device of the machine, None when not priced."""


def device_view(module: ModuleOp, machine: Machine | None) -> DeviceView:
    """The view of `module`'s `@main` (a sharded program) that one device has, priced on
    `machine` when given (ValueError when it has fewer devices than a mesh)."""
    function = entry_function(module)
    block = entry_block(function)
    groups = meshes(module)
    if len(groups) > 1:
        raise ValueError(
            f"the program runs on {len(groups)} device groups "
            f"({', '.join('@' + name for name in groups)}): placement plans one device's "
            "memory where every device runs the same schedule (one mesh)"
        )
    for mesh in groups.values() if machine is not None else ():
        if max(mesh.device_ids) >= machine.size:
            raise ValueError(
                f"mesh @{mesh.name} runs on {mesh.size} devices, and machine {machine.name} "
                f"has {machine.size}: give machine= with as many devices"
            )
    infos = arg_infos(function)
    args = [
        Node.arg(i, info.name, _local(info.sig, groups), info.is_param, info.attributes)
        for i, info in enumerate(infos)
    ]
    values: dict[SSAValue, Value] = {
        block_arg: node.out for block_arg, node in zip(block.args, args, strict=True)
    }
    order: list[Node] = []
    ops: dict[Node, Operation] = {}
    seconds: dict[Node, float] = {}
    for position, op in enumerate(block.ops):
        if isinstance(op, func.ReturnOp):
            continue
        inputs = [values[operand] for operand in op.operands]
        sigs = [_local(sig_of(result.type), groups) for result in op.results]
        node = Node.given(op.name, inputs, sigs, at=position)
        order.append(node)
        ops[node] = op
        if machine is not None:
            seconds[node] = _seconds(op, node, groups, machine)
        values.update(zip(op.results, node.results, strict=True))
    dag = Dag(
        args,
        [values[value] for value in return_values(function)],
        function.sym_name.data,
        attributes=function_attributes(function),
        result_attributes=result_attributes(function),
    ).scheduled(order)
    return DeviceView(dag, ops, seconds if machine is not None else None)


def _local(sig: TensorSig, groups: Mapping[str, Mesh]) -> TensorSig:
    """The block of a value of type `sig` one device holds, without encodings."""
    sharding = sharding_of(sig)
    if sharding is None:
        return TensorSig(sig.shape, sig.dtype)
    return TensorSig(sharding.local_shape(sig.shape, groups[sharding.mesh]), sig.dtype)


def _seconds(op: Operation, node: Node, groups: Mapping[str, Mesh], machine: Machine) -> float:
    """`op`'s time on one device of `machine` (module docstring)."""
    if isinstance(op, CollectiveOp):
        source, target = sig_of(op.input.type), sig_of(op.output.type)
        before, after = sharding_of(source), sharding_of(target)
        assert before is not None and after is not None
        mesh = groups[before.mesh]
        if isinstance(op, ReplicateOp):
            group = sorted({*mesh.device_ids, *groups[after.mesh].device_ids})
        else:
            group = axis_groups(mesh, moved_axes(before, after))[0]
        return machine.collective_time(op.KIND, op.communicated_bytes(mesh), group)
    if not isinstance(op, GraphOp):
        raise ValueError(f"'{op.name}' is neither a graph op nor a collective")
    inputs = [value.sig for value in node.inputs]
    running = max((mesh.size for mesh in groups.values()), default=1)
    return shard_seconds(op.op_name(), op.py_attrs().items(), inputs, node.sigs, machine, running)


def moved_axes(source: Sharding, target: Sharding) -> tuple[str, ...]:
    """The mesh axes a collective from `source` to `target` communicates over: those
    whose role (splitting a dim, holding partial sums, or neither) changes."""

    def roles(sharding: Sharding) -> dict[str, object]:
        placed: dict[str, object] = {axis: "unreduced" for axis in sharding.unreduced}
        for dim, axes in enumerate(sharding.dims):
            placed.update(dict.fromkeys(axes, dim))
        return placed

    before, after = roles(source), roles(target)
    return tuple(sorted(a for a in {*before, *after} if before.get(a) != after.get(a)))


# ------------------------------------------------------------- views of a plan


class _Written(NamedTuple):
    """A value of a plan's program as the view writes it: its node's result, its layout
    and its whole type."""

    value: Value
    sharding: Sharding
    sig: TensorSig


@dataclass
class _ViewSink:
    """`shard_plan.Sink` of one device's view: each op and collective a `Node.given` of
    local types, timed on the machine (module docstring)."""

    mesh: Mesh
    machine: Machine
    order: list[Node] = field(default_factory=list)
    seconds: dict[Node, float] = field(default_factory=dict)

    def op(
        self, node: Node, operands: Sequence[_Written], results: Sequence[Sharding]
    ) -> Sequence[_Written]:
        inputs = [operand.value.sig for operand in operands]
        sigs = [self.local(sig, sharding) for sig, sharding in zip(node.sigs, results, strict=True)]
        given = self._add(f"graph.{node.op}", [o.value for o in operands], sigs)
        self.seconds[given] = shard_seconds(
            node.op, node.attrs, inputs, sigs, self.machine, self.mesh.size
        )
        return [
            _Written(value, sharding, sig)
            for value, sharding, sig in zip(given.results, results, node.sigs, strict=True)
        ]

    def collective(self, value: _Written, step: Collective) -> _Written:
        moved = self.local(value.sig, step.result)
        given = self._add(f"parallel.{step.kind}", [value.value], [moved])
        group = (
            self.mesh.device_ids
            if step.kind == "replicate"
            else axis_groups(self.mesh, step.axes)[0]
        )
        self.seconds[given] = self.machine.collective_time(step.kind, step.bytes, group)
        return _Written(given.out, step.result, value.sig)

    def sharding(self, value: _Written) -> Sharding:
        return value.sharding

    def sig(self, value: _Written) -> TensorSig:
        return value.sig

    def local(self, sig: TensorSig, sharding: Sharding) -> TensorSig:
        """The block of a value of type `sig` laid out by `sharding` on one device."""
        return TensorSig(sharding.local_shape(sig.shape, self.mesh), sig.dtype)

    def _add(self, op: str, inputs: Sequence[Value], sigs: Sequence[TensorSig]) -> Node:
        node = Node.given(op, inputs, sigs, at=len(self.order))
        self.order.append(node)
        return node


def plan_view(dag: Dag, plan: Plan, mesh: Mesh, machine: Machine) -> DeviceView:
    """The view one device has of `dag` sharded as `plan` says on `mesh` — the program
    `write_sharded` would write, without writing it (a search prices thousands of
    plans) — its ops timed on `machine`. ValueError for a plan on device groups: their
    devices do not run one schedule."""
    if plan.meshes:
        raise ValueError("a plan on device groups has no one device's schedule")
    sink = _ViewSink(mesh, machine)
    writer = ShardedWriter.of(dag, plan, mesh, sink)
    args = [
        _Written(
            Node.arg(
                i,
                arg.attr("name"),
                sink.local(arg.out.sig, plan.values[arg.out]),
                arg.attr("is_param"),
                arg.attr("attributes"),
            ).out,
            plan.values[arg.out],
            arg.out.sig,
        )
        for i, arg in enumerate(dag.args)
    ]
    outputs = writer.program(dag, args)
    view = Dag(
        [written.value.node for written in args],
        [written.value for written in outputs],
        dag.name,
        attributes=dag.attributes,
        result_attributes=dag.result_attributes,
    ).scheduled(sink.order)
    return DeviceView(view, {}, sink.seconds)
