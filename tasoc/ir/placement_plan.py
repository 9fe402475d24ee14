"""A placement plan on the light graph (`PlacementPlan`), and its writing as a
memory-placed program: host types, swaps, frees and the module's memory attributes.

A plan says in what order the ops run, which arguments live in host memory and which
values go to host memory between two of their readers; planners (placement's
`offload-all`, and the swap planners after it) make one on a `Dag` whose op order is
the schedule, and `write_placed` turns it into the `memory` dialect (docs/memory.md);
`set_figures` records what the planner measured of it. It lives in `ir/` because it is
IR-level, like `shard_plan.py`.

`@main` is rebuilt from the light graph once (`dag.to_function`, ops in the plan's
order), then edited locally, each edit where the plan puts it:

* a host argument gets the host type and one `memory.swap_in` before the op named in
  `HostArgument.swap_in_before`; its readers read the copy. A result that replaces it
  (`graph.replaces`) is swapped out right after the op that makes it, so it leaves in
  the space its argument came in — the next step's.
* an `Offload` swaps its value out right after the op named in `swap_out_after` (the
  start of the step for an argument, when None), swaps it back in before the op named
  in `swap_in_before`, and the readers from `readers_from` on read the copy. The device
  copy then dies at its last earlier reader (or at the swap-out); an argument's, which
  the caller would hold, ends in a `memory.free` there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    f64,
    i64,
)
from xdsl.ir import Operation, OpResult, SSAValue
from xdsl.rewriter import InsertPoint, Rewriter

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.graph import sig_of, tensor_type
from tasoc.ir.memory import (
    CAPACITY_ATTR,
    PLAN_ATTR,
    POOL_ATTR,
    FreeOp,
    Pool,
    PoolAttr,
    SwapInOp,
    SwapOutOp,
    in_space,
)
from tasoc.ir.program import entry_block, entry_function, return_values
from tasoc.ir.training import training_signature


@dataclass(frozen=True, slots=True)
class HostArgument:
    """Argument `index` arrives in host memory and is swapped in before `swap_in_before`
    (an op at or before its first reader)."""

    index: int
    swap_in_before: Node


@dataclass(frozen=True, slots=True)
class Offload:
    """`value` spends the time between two of its readers in host memory: swapped out
    after `swap_out_after` (None: at the start, for an argument), swapped in before
    `swap_in_before`, read from the host copy by `readers_from` and every reader after
    it. In the schedule: swap_out_after < readers before readers_from <= ... and
    swap_in_before <= readers_from."""

    value: Value
    swap_out_after: Node | None
    swap_in_before: Node
    readers_from: Node


@dataclass(frozen=True)
class PlacementPlan:
    """What `write_placed` writes: the schedule, host arguments, offloads, and the
    module attributes of the device memory (capacity, pool)."""

    order: tuple[Node, ...]
    host_arguments: tuple[HostArgument, ...] = ()
    offloads: tuple[Offload, ...] = ()
    capacity: int | None = None
    pool: Pool | None = None


def write_placed(module: ModuleOp, dag: Dag, plan: PlacementPlan) -> None:
    """Replace `module`'s `@main` with `dag` run in `plan.order`, placed as `plan` says
    (module docstring), and set the module's memory attributes. The module then
    verifies as a placed program when the plan fits its capacity and pool."""
    scheduled = dag.scheduled(plan.order)
    function = dag_module.to_function(scheduled)
    block = entry_block(function)
    ops = [op for op in block.ops if not isinstance(op, func.ReturnOp)]
    op_of = dict(zip(scheduled.ops, ops, strict=True))
    position = {op: i for i, op in enumerate(ops)}
    values: dict[Value, SSAValue] = {
        arg.out: a for arg, a in zip(dag.args, block.args, strict=True)
    }
    for node, op in op_of.items():
        values.update(zip(node.results, op.results, strict=True))

    signature = training_signature(function)
    replaces = signature.replaces if signature else ()
    for host in plan.host_arguments:
        replacing = [result for result, argument in replaces if argument == host.index]
        _place_on_host(function, host.index, op_of[host.swap_in_before], replacing)
    for offload in plan.offloads:
        value = values[offload.value]
        after = None if offload.swap_out_after is None else op_of[offload.swap_out_after]
        _offload(value, after, op_of[offload.swap_in_before], op_of[offload.readers_from], position)
    _retype(function)
    Rewriter.replace_op(entry_function(module), function)
    _set_attributes(module, plan)


def _place_on_host(
    function: func.FuncOp, index: int, swap_in_before: Operation, replacing: Sequence[int]
) -> None:
    argument = entry_block(function).args[index]
    host = Rewriter.replace_value_with_new_type(
        argument, tensor_type(in_space(sig_of(argument.type), "host"))
    )
    readers = list(host.uses)
    swap_in = SwapInOp.build_on(host)
    swap_in.output.name_hint = host.name_hint
    Rewriter.insert_op(swap_in, InsertPoint.before(swap_in_before))
    ret = _return(function)
    for use in readers:
        if use.operation is not ret:
            use.operation.operands[use.index] = swap_in.output
    for result in replacing:
        new = ret.operands[result]
        if new is host:
            continue  # returned as it came: on the host already
        swap_out = SwapOutOp.build_on(new)
        where = (
            InsertPoint.after(new.op)
            if isinstance(new, OpResult)
            else InsertPoint.at_start(entry_block(function))
        )
        Rewriter.insert_op(swap_out, where)
        ret.operands[result] = swap_out.output


def _offload(
    value: SSAValue,
    swap_out_after: Operation | None,
    swap_in_before: Operation,
    readers_from: Operation,
    position: Mapping[Operation, int],
) -> None:
    block = swap_in_before.parent_block()
    assert block is not None
    swap_out = SwapOutOp.build_on(value)
    where = (
        InsertPoint.at_start(block) if swap_out_after is None else InsertPoint.after(swap_out_after)
    )
    Rewriter.insert_op(swap_out, where)
    swap_in = SwapInOp.build_on(swap_out.output)
    Rewriter.insert_op(swap_in, InsertPoint.before(swap_in_before))
    start = position[readers_from]
    earlier: list[Operation] = [swap_out]
    for use in list(value.uses):
        reader = use.operation
        if reader in position and position[reader] >= start:
            reader.operands[use.index] = swap_in.output
        elif reader in position:
            earlier.append(reader)
    if not isinstance(value.owner, Operation):  # an argument: the caller's until freed
        last = max(earlier, key=lambda op: position.get(op, -1))
        Rewriter.insert_op(FreeOp.create(operands=[value]), InsertPoint.after(last))


def _return(function: func.FuncOp) -> func.ReturnOp:
    last = entry_block(function).last_op
    assert isinstance(last, func.ReturnOp)
    return last


def _retype(function: func.FuncOp) -> None:
    block = entry_block(function)
    function.function_type = FunctionType.from_lists(
        [a.type for a in block.args], [v.type for v in return_values(function)]
    )


def _set_attributes(module: ModuleOp, plan: PlacementPlan) -> None:
    for name in (CAPACITY_ATTR, POOL_ATTR, PLAN_ATTR):
        module.attributes.pop(name, None)
    if plan.capacity is not None:
        module.attributes[CAPACITY_ATTR] = IntegerAttr(plan.capacity, i64)
    if plan.pool is not None:
        module.attributes[POOL_ATTR] = PoolAttr.of(plan.pool)


def set_figures(module: ModuleOp, figures: Mapping[str, int | float]) -> None:
    """Record a plan's figures (peak bytes, bytes moved, simulated times) as the
    module's `memory.plan`, sorted by name: integers as i64, the rest as f64."""
    module.attributes[PLAN_ATTR] = DictionaryAttr(
        {
            name: IntegerAttr(value, i64) if isinstance(value, int) else FloatAttr(value, f64)
            for name, value in sorted(figures.items())
        }
    )


def readers_in_order(dag: Dag) -> dict[Value, list[Node]]:
    """Each value's readers in `dag.ops` order (a reader reading it twice counted once)."""
    readers: dict[Value, list[Node]] = {}
    for node in dag.ops:
        for value in dict.fromkeys(node.inputs):
            readers.setdefault(value, []).append(node)
    return readers


def positions(order: Sequence[Node]) -> dict[Node, int]:
    return {node: i for i, node in enumerate(order)}
