"""A placement plan on the light graph (`PlacementPlan`), and its writing as a
memory-placed program: host types, swaps, frees and the module's memory attributes.

A plan is the placed program's block as a list (`schedule`): every op of a `Dag` once,
in a topological order, with the moves between them — `SwapOut(v)` copies the device
copy of `v` to host memory, `SwapIn(v)` makes a new device copy from the host copy,
`Release(v)` ends the device copy (`memory.free`) — and the arguments that arrive in
host memory (`host_arguments`; the results that replace them leave there). Planners
(placement's `offload-all`, SwapAdvisor's swap planner, ROC's DP) build one without
touching xDSL, `check_plan` says whether it can run, `release_points` where each
device copy dies (the replay's rule, which the simulator shares), and `write_placed`
turns it into the `memory` dialect (docs/memory.md); `set_figures` records what the
planner measured of it. It lives in `ir/` because it is IR-level, like `shard_plan.py`.

A value may go out and come back several times (evicted again after a swap-in); its
host copy, once made, stays valid (values are immutable), so a second swap-out of the
same value is refused as pointless. Every op reads its operands' current device
copies; a device copy lives from the entry that makes it to its last reader, or to
its `Release` (an argument's: only to its `Release`, as the replay counts it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DictionaryAttr,
    FloatAttr,
    FunctionType,
    IntegerAttr,
    ModuleOp,
    UnitAttr,
    f64,
    i64,
)
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.rewriter import Rewriter

from tasoc.ir.dag import Dag, Node, Value, function_of
from tasoc.ir.graph import OPS_BY_NAME, sig_of, tensor_type, to_attr
from tasoc.ir.memory import (
    CAPACITY_ATTR,
    IN_PLACE_ATTR,
    PLAN_ATTR,
    POOL_ATTR,
    RECOMPUTE_ATTR,
    FreeOp,
    Pool,
    PoolAttr,
    Space,
    SwapInOp,
    SwapOutOp,
    in_space,
)
from tasoc.ir.opdef import op_defs
from tasoc.ir.program import entry_block, entry_function


@dataclass(frozen=True, slots=True)
class SwapOut:
    """Copy the device copy of `value` to host memory (`memory.swap_out`)."""

    value: Value


@dataclass(frozen=True, slots=True)
class SwapIn:
    """Make a new device copy of `value` from its host copy (`memory.swap_in`)."""

    value: Value


@dataclass(frozen=True, slots=True)
class Release:
    """End the device copy of `value` here (`memory.free`)."""

    value: Value


@dataclass(frozen=True, slots=True)
class Recompute:
    """Run `node` again, on the current device copies of its inputs, for new device
    copies of its results (a re-emitted op marked `memory.recompute`): what a plan does
    instead of swapping a result out and back in (Checkmate-style recomputation, beyond
    SwapAdvisor). The node has run before in the schedule; its results' new copies are
    what later entries read, so an earlier copy dies at its last reader before."""

    node: Node


Move = SwapOut | SwapIn | Release
Entry = Node | Move | Recompute
"""One entry of a schedule: an op of the dag (run on device values), a move, or an op
run again."""


@dataclass(frozen=True)
class PlacementPlan:
    """What `write_placed` writes (module docstring): the schedule, the arguments that
    arrive in host memory, and the module attributes of the device memory."""

    schedule: tuple[Entry, ...]
    host_arguments: frozenset[int] = frozenset()
    capacity: int | None = None
    pool: Pool | None = None
    in_place: bool = False
    """An element-wise op writes its result over an operand of its type whose device
    copy dies at it (`in_place_entries`), as XLA's buffer assignment does: the planner
    counted memory so, the simulator prices it so, and `write_placed` marks each such
    op (`memory.in_place`), which the replay and the runtime mode honour."""

    @property
    def order(self) -> tuple[Node, ...]:
        """The ops alone, in the plan's order."""
        return tuple(entry for entry in self.schedule if isinstance(entry, Node))

    def moves(self) -> tuple[Move, ...]:
        return tuple(entry for entry in self.schedule if isinstance(entry, Move))

    def recomputed(self) -> tuple[Node, ...]:
        """The ops run again, once per `Recompute`."""
        return tuple(entry.node for entry in self.schedule if isinstance(entry, Recompute))


class PlanError(ValueError):
    """A plan that cannot run (one line): an op reading a value with no device copy, a
    swap-in with no host copy, an op out of order or missing."""


CopyKey = tuple[int, int]
"""A device copy: (the schedule entry that made it, which of its results); argument i
as it arrived is (-1 - i, 0)."""


@dataclass(frozen=True)
class Copies:
    """Where each value lives along a schedule (`check_plan`), copy by copy:

    - `reads[e]`: the copies entry `e` reads (an op its operands', a swap-out its
      value's), in operand order;
    - `dies[k]`: the entry after which copy `k` dies as the replay counts it (its
      `Release`, else its last reader, else the entry that made it), None when it lives
      to the end (a returned value, an argument never released);
    - `last_read[k]`: its last reader (the entry that made it when none, -1 for an
      argument nobody reads), where a timed run frees it;
    - `value_of[k]`: the value the copy holds."""

    reads: tuple[tuple[CopyKey, ...], ...]
    dies: Mapping[CopyKey, int | None]
    last_read: Mapping[CopyKey, int]
    value_of: Mapping[CopyKey, Value]


def check_plan(dag: Dag, plan: PlacementPlan, spaces: Sequence[Space] | None = None) -> Copies:
    """Check that `plan` runs `dag` (PlanError, naming the first entry that cannot) and
    say where each copy lives. `spaces` are the spaces the outputs leave in (a result
    replacing a host argument leaves on the host); device by default."""
    position: dict[Node, int] = {}
    device: dict[Value, CopyKey] = {}  # value -> its current device copy
    host: set[Value] = set()
    value_of: dict[CopyKey, Value] = {}
    for index, arg in enumerate(dag.args):
        if index in plan.host_arguments:
            host.add(arg.out)
        else:
            device[arg.out] = (-1 - index, 0)
            value_of[(-1 - index, 0)] = arg.out
    last_reader: dict[CopyKey, int] = {}
    released: dict[CopyKey, int] = {}
    reads: list[tuple[CopyKey, ...]] = []
    for i, entry in enumerate(plan.schedule):
        if isinstance(entry, Node | Recompute):
            node = entry if isinstance(entry, Node) else entry.node
            if isinstance(entry, Node) and node in position:
                raise PlanError(f"entry {i}: {node.op} runs twice")
            if isinstance(entry, Recompute) and node not in position:
                raise PlanError(f"entry {i}: recomputes {node.op} before it first runs")
            keys = []
            for value in node.inputs:
                if value not in device:
                    raise PlanError(
                        f"entry {i}: {node.op} reads {_name(value)}, which has no device copy"
                    )
                keys.append(device[value])
                last_reader[device[value]] = i
            reads.append(tuple(keys))
            position.setdefault(node, i)
            for result in node.results:
                device[result] = (i, result.index)
                value_of[(i, result.index)] = result
            continue
        value = entry.value
        if isinstance(entry, SwapOut):
            if value not in device:
                raise PlanError(f"entry {i}: swaps out {_name(value)}, which has no device copy")
            if value in host:
                raise PlanError(f"entry {i}: swaps out {_name(value)} again: its host copy is kept")
            host.add(value)
            last_reader[device[value]] = i
            reads.append((device[value],))
            continue
        reads.append(())
        if isinstance(entry, SwapIn):
            if value not in host:
                raise PlanError(f"entry {i}: swaps in {_name(value)}, which has no host copy")
            device[value] = (i, 0)  # a copy still held dies at its last reader, before
            value_of[(i, 0)] = value
        else:
            if value not in device:
                raise PlanError(f"entry {i}: releases {_name(value)}, which has no device copy")
            released[device.pop(value)] = i
    missing = [node for node in dag.ops if node not in position]
    if missing:
        raise PlanError(f"the schedule leaves out {len(missing)} op(s), {missing[0].op} first")
    wanted = spaces or ["device"] * len(dag.outputs)
    for value, space in zip(dag.outputs, wanted, strict=True):
        if space == "host" and value not in host:
            raise PlanError(f"{_name(value)} leaves in host memory but is never swapped out")
        if space == "device" and value not in device:
            raise PlanError(f"{_name(value)} leaves in device memory but has no device copy there")
    returned = {device[v] for v, s in zip(dag.outputs, wanted, strict=True) if s == "device"}
    dies: dict[CopyKey, int | None] = {}
    last_read: dict[CopyKey, int] = {}
    for key in value_of:
        made = max(key[0], -1)
        last_read[key] = last_reader.get(key, made)
        if key in returned:
            dies[key] = None
        elif key in released:
            dies[key] = released[key]
        elif key[0] < 0:
            dies[key] = None  # an argument: the caller's until released
        else:
            dies[key] = last_read[key]
    return Copies(tuple(reads), dies, last_read, value_of)


def reusable_operands(node: Node) -> tuple[int, ...]:
    """The operand positions of `node` whose buffer its result may take (`OpDef.in_place`:
    an element-wise `graph` op of one result): an operand of the result's type, read
    once by the op, that is not an argument (an argument's copy lives to its `Release`)."""
    definition = op_defs().get(node.op)  # a `graph` op's short name; `parallel.*` has none
    if len(node.results) != 1 or definition is None or not definition.in_place:
        return ()
    sig = node.results[0].sig
    return tuple(
        p
        for p, value in enumerate(node.inputs)
        if value.sig == sig and not value.node.is_arg and node.inputs.count(value) == 1
    )


def in_place_entries(plan: PlacementPlan, copies: Copies) -> dict[int, int]:
    """Per schedule entry of an op whose result takes an operand's buffer (the plan's
    `in_place`), that operand's position: the first of `reusable_operands` whose device
    copy dies at the op, read last there and released by nothing later. Empty for a
    plan without `in_place`."""
    if not plan.in_place:
        return {}
    found: dict[int, int] = {}
    for i, entry in enumerate(plan.schedule):
        if not isinstance(entry, Node | Recompute):
            continue
        node = entry if isinstance(entry, Node) else entry.node
        for p in reusable_operands(node):
            key = copies.reads[i][p]
            if copies.dies[key] == i and copies.last_read[key] == i:
                found[i] = p
                break
    return found


def _name(value: Value) -> str:
    node = value.node
    return f"argument {node.attr('name')}" if node.is_arg else f"{node.op} result #{value.index}"


def output_spaces(dag: Dag, host_arguments: frozenset[int]) -> list[Space]:
    """The space each output of a training step leaves in: a result replacing a host
    argument (`graph.replaces`) leaves on the host, the next step's space."""
    spaces: list[Space] = ["device"] * len(dag.outputs)
    for index, attributes in enumerate(dag.result_attributes):
        for name, attr in attributes:
            replaced = isinstance(attr, IntegerAttr) and attr.value.data in host_arguments
            if name == "graph.replaces" and replaced:
                spaces[index] = "host"
    return spaces


def write_placed(module: ModuleOp, dag: Dag, plan: PlacementPlan) -> None:
    """Replace `module`'s `@main` with `dag` placed as `plan` says (module docstring),
    and set the module's memory attributes; PlanError for a plan that cannot run. The
    module then verifies as a placed program when the plan fits its capacity and pool."""
    spaces = output_spaces(dag, plan.host_arguments)
    reused = in_place_entries(plan, check_plan(dag, plan, spaces))
    types = {}

    def type_of(value: Value, space: Space) -> Attribute:
        key = (value.sig, space)
        if key not in types:
            types[key] = tensor_type(in_space(value.sig, space))
        return types[key]

    block = Block(
        arg_types=[
            type_of(arg.out, "host" if i in plan.host_arguments else "device")
            for i, arg in enumerate(dag.args)
        ]
    )
    device: dict[Value, SSAValue] = {}
    host: dict[Value, SSAValue] = {}
    for index, (arg, block_arg) in enumerate(zip(dag.args, block.args, strict=True)):
        block_arg.name_hint = arg.attr("name")
        (host if index in plan.host_arguments else device)[arg.out] = block_arg
    ops = []
    for index, entry in enumerate(plan.schedule):
        if isinstance(entry, Node | Recompute):
            node = entry if isinstance(entry, Node) else entry.node
            op = OPS_BY_NAME[node.op].create(
                operands=[device[v] for v in node.inputs],
                result_types=[type_of(v, "device") for v in node.results],
                properties={name: to_attr(value) for name, value in node.attrs},
                attributes=recompute_mark(entry) | in_place_mark(reused.get(index)),
            )
            device.update(zip(node.results, op.results, strict=True))
        elif isinstance(entry, SwapOut):
            op = SwapOutOp.build_on(device[entry.value])
            host[entry.value] = op.output
        elif isinstance(entry, SwapIn):
            op = SwapInOp.build_on(host[entry.value])
            device[entry.value] = op.output
        else:
            op = FreeOp.create(operands=[device.pop(entry.value)])
        ops.append(op)
    block.add_ops(ops)
    outputs = [
        (host if space == "host" else device)[value]
        for value, space in zip(dag.outputs, spaces, strict=True)
    ]
    function = function_of(dag, block, outputs)
    Rewriter.replace_op(entry_function(module), function)
    _set_memory_attributes(module, plan)


def write_placed_in(
    module: ModuleOp, dag: Dag, plan: PlacementPlan, ops: Mapping[Node, Operation]
) -> None:
    """Place `module`'s `@main` as `plan` says, where `dag` is a *view* of it whose node
    `n` stands for the op `ops[n]` (one device's view of a sharded step): the ops stay
    the module's own, in the plan's order, each reading its operands' current device
    copies; swaps and frees go between them, host arguments and the results that
    replace them change space, every other type (a sharding) is kept. PlanError for a
    plan that cannot run."""
    spaces = output_spaces(dag, plan.host_arguments)
    reused = in_place_entries(plan, check_plan(dag, plan, spaces))
    function = entry_function(module)
    block = entry_block(function)
    current: dict[Value, SSAValue] = {}  # each value's device copy at this point
    host: dict[Value, SSAValue] = {}
    for index, (arg, block_arg) in enumerate(zip(dag.args, list(block.args), strict=True)):
        if index in plan.host_arguments:
            host_type = tensor_type(in_space(sig_of(block_arg.type), "host"))
            host[arg.out] = Rewriter.replace_value_with_new_type(block_arg, host_type)
        else:
            current[arg.out] = block_arg
    returned = block.last_op
    assert isinstance(returned, func.ReturnOp)
    written: list[Operation] = []
    for index, entry in enumerate(plan.schedule):
        if isinstance(entry, Node | Recompute):
            node = entry if isinstance(entry, Node) else entry.node
            op = ops[node] if isinstance(entry, Node) else ops[node].clone()
            op.attributes.pop(IN_PLACE_ATTR, None)
            op.attributes.update(recompute_mark(entry) | in_place_mark(reused.get(index)))
            for index, value in enumerate(node.inputs):
                op.operands[index] = current[value]
            current.update(zip(node.results, op.results, strict=True))
            written.append(op)
        elif isinstance(entry, SwapOut):
            written.append(moved := SwapOutOp.build_on(current[entry.value]))
            host[entry.value] = moved.output
        elif isinstance(entry, SwapIn):
            written.append(moved := SwapInOp.build_on(host[entry.value]))
            current[entry.value] = moved.output
        else:
            written.append(FreeOp.create(operands=[current.pop(entry.value)]))
    kept = set(written)
    dropped = [op for op in block.ops if op not in kept and op is not returned]
    for op in list(block.ops):
        op.detach()
    for op in reversed(dropped):  # ops no output needs: the view left them out
        op.erase()
    block.add_ops([*written, returned])
    outputs = [
        (host if space == "host" else current)[value]
        for value, space in zip(dag.outputs, spaces, strict=True)
    ]
    returned.operands = outputs
    function.function_type = FunctionType.from_lists(
        [arg.type for arg in block.args], [value.type for value in outputs]
    )
    _set_memory_attributes(module, plan)


def recompute_mark(entry: Entry) -> dict[str, Attribute]:
    """The attributes that mark an op written for `entry` as run again (`Recompute`):
    what `memory.unplaced` folds back into the op's first run."""
    return {RECOMPUTE_ATTR: UnitAttr()} if isinstance(entry, Recompute) else {}


def in_place_mark(operand: int | None) -> dict[str, Attribute]:
    """The attributes that mark an op whose result takes the buffer of its `operand`
    (`in_place_entries`), none when it is None."""
    return {} if operand is None else {IN_PLACE_ATTR: IntegerAttr(operand, i64)}


def _set_memory_attributes(module: ModuleOp, plan: PlacementPlan) -> None:
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


def _slot() -> defaultdict[int, list[Entry]]:
    return defaultdict(list)


@dataclass
class Slots:
    """Moves placed around the ops of an order by position, as planners decide them,
    and the schedule they make: `before[p]` ahead of op p, then op p, `after[p]`, then
    `releases[p]` (position -1: at the start, before any op)."""

    before: defaultdict[int, list[Entry]] = field(default_factory=_slot)
    after: defaultdict[int, list[Entry]] = field(default_factory=_slot)
    releases: defaultdict[int, list[Entry]] = field(default_factory=_slot)
    """After op p's `after` entries: a copy freed once its swap-out has been issued."""

    def schedule(self, order: Sequence[Node]) -> tuple[Entry, ...]:
        schedule: list[Entry] = [*self.after[-1], *self.releases[-1]]
        for p, node in enumerate(order):
            schedule += [*self.before[p], node, *self.after[p], *self.releases[p]]
        return tuple(schedule)


def readers_in_order(dag: Dag) -> dict[Value, list[Node]]:
    """Each value's readers in `dag.ops` order (a reader reading it twice counted once)."""
    readers: dict[Value, list[Node]] = {}
    for node in dag.ops:
        for value in dict.fromkeys(node.inputs):
            readers.setdefault(value, []).append(node)
    return readers


def positions(order: Sequence[Node]) -> dict[Node, int]:
    return {node: i for i, node in enumerate(order)}
