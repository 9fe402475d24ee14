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

Times, on the machine the plan is priced on: a `graph` op takes the roofline of its
local shapes (`analytic_op_cost`, as soap-shard's simulator prices a shard), a
collective the machine's collective time over the devices that take part
(`Machine.collective_time`), and collectives run on their own stream
(`tasoc.sim.placement`), beside compute and the swaps.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

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
from tasoc.ir.soap import Mesh, Sharding
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
    return shard_seconds(op.op_name(), op.py_attrs().items(), inputs, node.sigs, machine.device)


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
