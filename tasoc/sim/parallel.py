"""The task graph of a sharded training step (Jia thesis §3.4.1), kept editable op by op.

`ShardedStep(dag, plan, machine)` turns a `Plan` (every op's SOAP configuration and
every value's sharding, `tasoc.ir.shard_plan`) into a `TaskGraph` whose simulated
makespan is the step's predicted iteration time:

* **compute**: per op with operands, one task per device of its mesh on resource
  `("device", d)` (mesh device ids index the machine's devices), lasting the op at its
  *local* shapes (the shard each device holds) as the machine prices it
  (`MachineOpCost`: a roofline, or this host's measured table); an op whose configuration
  splits a synced factor (batchnorm's batch in training) is followed by the all-reduce
  of its statistics, on which its results then wait;
* **communication**: every collective `moves` puts on an edge, as the plan's writer
  inserts them (one chain per value and target layout, shared by the readers that want
  that layout, and for each program result not produced as it must leave); none
  where the writer moves nothing: an operand read for its shape alone, which the op
  does not wait for, and a value that depends on no argument read complete
  (`shard_plan.free_read`), which readers take as if sliced. A
  collective is modelled as one task per participating device on `("net", d)` (on
  `("device", d)` where the machine's collectives block compute,
  `Machine.collectives_block_compute`: XLA:CPU's run on the device's executor), all of
  the collective's duration `machine.collective_time(kind, bytes, group)`, each
  depending on the value on *every* device of its group: a collective is a barrier.
  A collective over some mesh axes runs as one collective per group of devices that
  differ only along those axes. A `replicate` is one transfer between two device
  groups: a task on each device of both, waiting on the whole source group. An
  `all_slice` is local (each device keeps a block): no task, no buffer;
* **dependencies** follow the data: a task waits on the last task that made the value
  it reads on the devices it reads it from.

Memory lives beside time, in one pool `("mem", d)` per device: arguments (params,
optimizer state, inputs) are allocated at time 0 by a task per device (on `("args", d)`,
lasting the machine's `step_overhead`: a call's dispatch, before any op reading them
starts; zero on the presets) and kept; constants, which XLA embeds, cost nothing; a compute task
allocates its results' local bytes, a collective task the local bytes of the layout it
makes (communication buffers); a buffer is freed at the end of its last reader in
program order (a buffer only collectives read: their last), a result nothing reads at
the end of its own task; program results are kept, and a new param or state leaves in
its argument's buffer (donated, as a training loop donates them: `lower_sharded(...,
donate=)`). The pools are the timeline's view, with compute and communication
overlapped as the timeline prices them.

A device's peak memory, `memory()` (what soap-shard checks against a device's
capacity and reports), is XLA's view instead: the bytes `compiled.memory_analysis()`
gives the step compiled as one SPMD program, which come from XLA's sequential schedule
and its buffers, not from the timeline: the device's tasks in the order XLA's CPU
scheduler runs their HLO (`sequence`: a FIFO topological sort of the fused program,
independent work of one depth together), each temporary live from its writer to its
last reader in that order, arguments and program results held throughout, no buffer
for what XLA never writes (`fused_away`: reshapes, transposes folded into matmuls,
fused element-wise chains, outer products, a training batchnorm's normalized output,
a sum's or a mean's gradient, `BROADCAST_GRADIENTS`; cheap ops recomputed in
element-wise readers, `duplicated_into`), a `scatter_add`
written over zeros made at the start (`made_at_start`), a copy of each weight updated
in place that an op the update does not wait for still reads, from the start to the
update (XLA's copy insertion),
temporaries placed one at a time in donated weights' buffers as XLA's buffer
assignment places them (`_outside_donated`), an element-wise result written over a
dying operand of its size, the copies of arguments convolutions read in their own
layout (`CONVOLUTIONS`), an activation convolutions read in several layouts, a buffer
per layout (`CONVOLUTION_LAYOUTS`), a softmax's exponent (`EXPONENTIATING`), a max-pooling's
argmax (`argmax_of`), a minor-dimension gather's copies of its operand and its
result, instructions a wave before and after it (`gathered_minor`),
an all-to-all's slices of its operand and its tuple of received blocks (`sequence`,
`TUPLE_ENTRY_BYTES`), and the rest packed into one heap as XLA's heap simulator packs
it, lives timed on its clock of allocations and frees (`_packed`). It is split into
liveness's kinds (`tasoc.ir.liveness`) plus communication buffers; docs/benchmarks.md
("Per-device memory: the simulator against XLA") has how it compares with XLA's.

`set_config(node, config)` is the one-op proposal of MCMC (§3.5.2): the op's result
shardings follow from the configuration, the layouts its operands are read in and its
results' readers read change, and only the tasks that depend on those edges are edited
(the class docstring), so `DeltaSimulator.update()` re-simulates little. The `Plan` is
edited alongside and stays what `write_sharded` writes.

The simulator breaks ties between tasks ready at the same time by task id, and ids only
grow, so an edited graph must order its tasks as a graph built afresh would, or the two
would schedule differently. Compute tasks keep their ids (replaced in place). The
collectives hanging off one producer (all arguments and constants count as one, being
ready at once) form a group that is always rebuilt whole and in one canonical order; the
tasks of two groups tie only when two producers end at the same instant.
"""

from __future__ import annotations

import bisect
import collections
import copy
import dataclasses
import functools
import heapq
import itertools
import math
from collections.abc import Callable, Collection, Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, NamedTuple, Protocol

import numpy as np

from tasoc.cost.devices import Device
from tasoc.cost.fusion import plan_fusion
from tasoc.cost.machines import Machine, MachineError
from tasoc.ir import dag as dag_module
from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.liveness import value_kinds
from tasoc.ir.op_sets import ops_with
from tasoc.ir.parallel import ShardingAttr
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan, completed, free_read, local_values, moves
from tasoc.ir.soap import Config, Mesh, OpRule, Sharding
from tasoc.ir.soap_rules import local_attrs
from tasoc.ir.training import TrainingSignature, training_signature
from tasoc.ir.traits import Fusible
from tasoc.sim.core import Task, TaskGraph, paused_gc


class OpCost(Protocol):
    """Seconds `node` takes on one device when it holds operands of `local_inputs` and
    makes results of `local_results` (the shards of a sharded op)."""

    def __call__(
        self,
        node: Node,
        local_inputs: Sequence[TensorSig],
        local_results: Sequence[TensorSig],
        device: Device,
    ) -> float: ...


def shard_seconds(
    op: str,
    attrs: Iterable[tuple[str, Any]],
    local_inputs: Sequence[TensorSig],
    local_results: Sequence[TensorSig],
    machine: Machine,
    running: int,
    fused: int = -1,
) -> float:
    """Seconds one device of `machine` takes for the `graph` op `op` with its (global)
    attributes `attrs` at these local shapes, while `running` devices run at once, as
    the machine prices ops (`Machine.op_seconds`: the roofline, or measured; `fused`
    the operand whose producer's kernel it joins, -1 for none)."""
    local = _local_op(op, attrs, local_inputs, local_results)
    return machine.op_seconds(local, running, fused)


@dataclass(frozen=True)
class MachineOpCost:
    """The `OpCost` of `machine`'s own pricing (`shard_seconds`), with `running` of its
    devices running at once: what a step, a cost graph and a device view price ops with
    unless told otherwise, so that every search prices a shard alike. Hashable by value,
    so `_priced` shares its entries between steps on one machine.

    With `fused_in`, an op that XLA's fusion (`tasoc.cost.fusion.plan_fusion` of that
    program) puts in its producer's kernel is priced as fused (`Machine.op_seconds`);
    `machine_op_cost` gives it to measured machines only (why there)."""

    machine: Machine
    running: int
    fused_in: Dag | None = None

    def __call__(
        self,
        node: Node,
        local_inputs: Sequence[TensorSig],
        local_results: Sequence[TensorSig],
        device: Device,
    ) -> float:
        fused = -1 if self.fused_in is None else fused_operands(self.fused_in).get(node, -1)
        return _shard_seconds(
            node.op,
            node.attrs,
            tuple(local_inputs),
            tuple(local_results),
            self.machine,
            self.running,
            fused,
        )


@functools.lru_cache(maxsize=1 << 16)
def _shard_seconds(
    op: str,
    attrs: tuple[tuple[str, Any], ...],
    local_inputs: tuple[TensorSig, ...],
    local_results: tuple[TensorSig, ...],
    machine: Machine,
    running: int,
    fused: int,
) -> float:
    """`shard_seconds`, kept by its arguments, all values: an unrolled layer's 40
    steps, and alike ops of every start of a search, are one op at one set of local
    shapes (`_priced` keeps its answers by op, and a 64-device RNN step's starts priced
    10,000 shards, the local op made anew for each)."""
    return shard_seconds(op, attrs, local_inputs, local_results, machine, running, fused)


def machine_op_cost(machine: Machine, running: int, dag: Dag) -> MachineOpCost:
    """How `dag`'s ops are priced on `machine` with `running` devices at once: fused as
    XLA fuses them on a measured machine, whose table times each op as a kernel of its
    own with its operands and results in memory (a step's reshapes, transposes and
    element-wise ops mostly vanish into their producers' kernels); each op its own
    kernel on an analytic one, as FlexFlow prices each op's task (and every preset's
    plans stay as they were)."""
    return MachineOpCost(machine, running, dag if machine.pricing == "measured" else None)


@functools.lru_cache(maxsize=16)
def fused_operands(dag: Dag) -> dict[Node, int]:
    """Each op of `dag` that joins its producer's kernel, and the operand that producer
    makes (`plan_fusion`, weights not folded: a training step updates them)."""
    plan = plan_fusion(dag, fold_weights=False)
    return {node: at for node, at in zip(plan.ops, plan.fused, strict=True) if at >= 0}


def local_node(
    node: Node, local_inputs: Sequence[TensorSig], local_results: Sequence[TensorSig]
) -> Node:
    """`node` as one device runs it: on operands of the local shapes, with the
    attributes that name global sizes localized (`soap_rules.local_attrs`)."""
    return _local_op(node.op, node.attrs, local_inputs, local_results)


def _local_op(
    op: str,
    attrs: Iterable[tuple[str, Any]],
    local_inputs: Sequence[TensorSig],
    local_results: Sequence[TensorSig],
) -> Node:
    operands = [Node.arg(i, "shard", sig).out for i, sig in enumerate(local_inputs)]
    localized = local_attrs(
        op,
        dict(attrs),  # type: ignore[arg-type]
        [s.shape for s in local_inputs],
        [s.shape for s in local_results],
    )
    return Node(op, operands, **localized)


@dataclass(frozen=True)
class MemoryBreakdown:
    """Bytes one device holds at its peak, by what they are (`tasoc.ir.liveness`'s
    kinds, plus the buffers collectives make)."""

    params: int = 0
    optimizer_state: int = 0
    inputs: int = 0
    activations: int = 0
    gradients: int = 0
    communication: int = 0

    @property
    def total(self) -> int:
        return (
            self.params
            + self.optimizer_state
            + self.inputs
            + self.activations
            + self.gradients
            + self.communication
        )


FUSIBLE = ops_with(Fusible)
"""Ops XLA's loop fusion computes inside their readers' kernels (`fused_away`)."""


def made_at_start(node: Node) -> bool:
    """Whether XLA computes `node` by updating a buffer it fills with a constant, made
    as an instruction of its own: a broadcast zero that depends on nothing, so XLA's
    BFS schedule (`ShardedStep.sequence`) makes it among the first instructions, and
    the op writes its result over it, in place (dlrm's `wrapped_scatter` at the offset
    of the zeros' `copy.38` as that dies): one buffer from the step's start. Zeros of
    one shape are one broadcast (XLA's common-subexpression elimination), which copy
    insertion copies for each op writing over it, so where several are of one size,
    the broadcast is held beside its copies while BFS makes them (dlrm's
    `wrapped_broadcast.9{}:37-61` beside `copy.38` ... `copy.45`, made at 54-61: nine
    1.28 MB buffers at once, XLA's peak for the replicated plan). A
    `scatter_add` (the gradient of an embedding table, zeros with the rows added in:
    dlrm's eight tables, 10 MB of XLA's temporaries through the whole forward and
    backward) and a max-pooling's gradient (JAX's select-and-scatter, which XLA's CPU
    compiler runs as a scatter of `dy` at the forward's argmax into zeros of the
    input's shape: alexnet's `wrapped_broadcast`s, live from the step's start)."""
    return node.op == "scatter_add" or (node.op == "pool2d_grad" and node.attr("kind") == "max")


INDEX_BYTES = 4
"""The bytes of an s32 index (`argmax_of`)."""

TUPLE_ENTRY_BYTES = 8
"""The bytes of an entry of a tuple's table: XLA's all-to-all returns a tuple of one
buffer per device of its group (dlrm's expert plan: `all-to-all.6{0}`..`{7}`, 256 bytes
each, and `all-to-all.6{}`, the table of 8 pointers, 64 bytes), so a received block is
a buffer of its own, and the tuple's buffers come and go together on the heap
simulator's clock (`_event_times`)."""


def gathered_minor(operand: Sharding, result: Sharding, local: TensorSig) -> bool:
    """Whether an all-gather from `operand` to `result` (of local signature `local`)
    gathers a dimension after one of more than one element: XLA's layout assignment
    makes a collective gather along its result's most major dimension, so it gathers
    in a layout with that dimension first and copies the result back into the
    row-major layout its readers take, a second buffer of the result's size (the
    transformer's expert plan: `all_gather.63 = f32[8,64,512]{1,0,2}`, gathered along
    dimension 2, then `copy_bitcast_fusion.18 = f32[512,512]`, 1 MB each, live
    together at XLA's peak). A reader computed element by element takes the
    gathered layout as it is (the copy is made only for a dot or a reduction, or for
    a program result, which leaves row-major: candle_uno's MCMC plan gathers its
    updated 1.3 MB weight as `all_gather.11 = f32[1282,256]{0,1}` and copies it into
    the donated argument, `wrapped_copy`).

    The copy is an instruction of its own, which XLA's BFS schedule runs a wave after
    the all-gather, and the readers wait for it (`ShardedStep._sequence`): the
    gathered buffer lives until the copy, the copy until its last reader (the
    transformer's MCMC plan: `all_gather.6{}:77-79`, `wrapped_copy{}:79-239`). The
    operand is copied too, into the layout the all-gather gathers in, a wave before
    it, unless its producer writes it so (`ShardedStep._written_gathered`)."""
    gathered = [d for d, (a, b) in enumerate(zip(operand.dims, result.dims, strict=True)) if a != b]
    return any(size > 1 for size in local.shape[: min(gathered, default=0)])


def argmax_of(node: Node, writer: Node | None = None) -> bool:
    """Whether `node` is a max-pooling's gradient (reading `writer`'s result as the
    pooled input, where given), which XLA's CPU compiler computes from an argmax it
    finds as soon as the input exists, not from the input: a variadic reduce-window
    over the input and one s32 index array per dimension of the input's shape, those
    made at the start (`wrapped_iota`, `.1`, `.2` and a broadcast: alexnet's ILP plan,
    `wrapped_iota{}:14-50`), giving one s32 index per dimension of each output
    (`concatenate_bitcast_fusion.2{}:58-145`), held until the gradient scatters `dy`
    there (`made_at_start`). The input is no longer read by the gradient."""
    if node.op != "pool2d_grad" or node.attr("kind") != "max":
        return False
    return writer is None or node.inputs[0].node is writer


CONVOLUTIONS = frozenset({"conv2d", "conv2d_grad_input", "conv2d_grad_weight"})
"""Ops XLA's CPU compiler runs on channels-last operands (NHWC images, HWIO kernels:
the layout its convolution kernels take), where an argument lies row-major as the IR
writes it (NCHW, OIHW) and keeps that layout: each argument a convolution reads is
copied into the layout each kind of convolution reads it in (a weight twice: HWIO for
the forward, HWOI for the input gradient; the images for the forward and the weight
gradient), a copy that depends on the argument (or on the weight's own copy, `memory`)
alone, so BFS makes it in its first wave after the arguments, held until the last
convolution of that kind reading it (alexnet's ILP plan: 0.8 MB
of `transpose_copy_fusion`s and `bitcast_copy_fusion`s of weights and images at XLA's
peak), but a kernel whose layout there is its own (`kernel_in_place`). An activation
read in one layout costs no more: its producer writes that layout; read in several,
it is a buffer per layout (`CONVOLUTION_LAYOUTS`)."""

CONVOLUTION_LAYOUTS: dict[tuple[str, int], tuple[int, int, int, int]] = {
    ("conv2d", 0): (0, 2, 3, 1),
    ("conv2d", 1): (2, 3, 1, 0),
    ("conv2d_grad_input", 0): (0, 2, 3, 1),
    ("conv2d_grad_input", 1): (2, 3, 0, 1),
    ("conv2d_grad_weight", 0): (1, 2, 3, 0),
    ("conv2d_grad_weight", 1): (2, 3, 0, 1),
}
"""The order, major to minor, of the dimensions of each convolution operand (NCHW
for an activation, OIHW for a kernel) as XLA's CPU compiler lays it out for that
operand: the image of a forward convolution and the `dy` of an input gradient
channels-last (NHWC), the `x` of a weight gradient as CHWN and its `dy` as HWNC (the
batch is what a weight gradient sums over: its images are the channels, its kernel's
input features the batch), a kernel as HWIO for the forward and HWOI for the input
gradient. An activation that convolutions read in two of
these layouts is two buffers, each made by its producer (a loop fusion per layout,
the batchnorm gradient or the relu recomputed in each) or copied, and each held
until its last reader (`_relaid_for_convolutions`). An argument is copied into
each layout but a kernel's own (`CONVOLUTIONS`, `kernel_in_place`).
One bottleneck on 8 devices, 2 samples of 32x32 each: every batchnorm gradient
feeding a 1x1 convolution is written twice, `subtract_multiply_fusion.2 =
f32[2,32,32,16]` for the input gradient and `transpose_copy_fusion.4 =
f32[32,32,2,16]` for the weight gradient, both live at XLA's peak in the backward,
as are the relus' CHWN copies (`transpose_copy_fusion.5 = f32[4,32,32,2]`) held from
the forward for the weight gradients."""

EXPONENTIATING = frozenset({"softmax", "softmax_cross_entropy", "softmax_cross_entropy_grad"})
"""Ops whose kernel materializes `exp(x - max x)`, the size of their first operand
`x`, beside their result: a reduction reads it (the sum of a softmax or a log-sum-exp,
which XLA's CPU compiler splits into a reduce-window and a reduce reading a buffer),
so loop fusion cannot compute it inside its readers (rnnlm's loss and its gradient:
`subtract_exponential_fusion` and `.1`, 512 KB each of gathered logits, at XLA's
peak; the transformer's attention softmax). A temporary while the op runs."""


@dataclass(frozen=True)
class PeakBounds:
    """The largest device's peak bytes lies in [`low`, `high`] (`ShardedStep.peak_bounds`);
    `high` is infinite where a device is known over the cap asked about."""

    low: int
    high: float

    def over(self, cap: int) -> bool:
        """Whether the peak exceeds `cap` (the bounds were made to tell it for `cap`)."""
        return self.low > cap

    @property
    def exact(self) -> int | None:
        """The peak where the bounds meet, else None."""
        return self.low if self.low == self.high else None


class Beside(NamedTuple):
    """An instruction XLA adds beside a collective in its schedule
    (`ShardedStep._sequence`): `BEFORE` it, reading its operand (an all-to-all's
    slices, an all-gather's copy of its operand), or `AFTER` it, copying its result."""

    side: str
    task: int


BEFORE, AFTER = "before", "after"
"""`Beside.side`."""

Temp = tuple[float, int, int, str]
"""A temporary: its first and last position in `ShardedStep.sequence`, bytes, kind."""


KINDS = tuple(MemoryBreakdown.__dataclass_fields__)
"""The kinds of bytes, in `MemoryBreakdown`'s order."""

Key = Hashable
"""A task's name independent of its id: ("op", node, device) for compute, ("res",
device) for the arguments, ("grp", producer, index) for a group's collectives."""


Bytes = tuple[tuple[str, int], ...]
"""Bytes by kind (`KINDS`)."""


class _Spec(NamedTuple):
    """A task with its dependencies named by key, and what its bytes are."""

    resource: Hashable
    duration: float
    deps: tuple[Key, ...]
    alloc: Bytes
    free: Bytes
    name: str
    parts: int = 1
    """An all-to-all's blocks, one per device of its group: XLA slices its operand into
    that many buffers and returns a tuple of as many (`ShardedStep._sequence`,
    `TUPLE_ENTRY_BYTES`)."""


@dataclass
class _Buffer:
    """One value's local block on one device: its writer, the task after which it is
    readable, its bytes and kind, and whether it outlives the step."""

    device: int
    writer: Key | None
    ready: Key | None
    nbytes: int
    kind: str
    kept: bool
    chain_readers: list[Key] = field(default_factory=list)
    compute_readers: list[Node] = field(default_factory=list)
    relaid: int = 0
    """The bytes XLA gathers it in before copying it into the layout its readers read
    and the program returns (`gathered_minor`), 0 where it does not: its local bytes,
    those of a result written into a donated argument too (`nbytes` 0 there)."""
    parts: int = 1
    """How many buffers XLA makes of it: an all-to-all's result is a tuple of one
    block per device of its group, each a buffer of its own (`TUPLE_ENTRY_BYTES`)."""
    operand: _Buffer | None = None
    """What the collective making it reads on its device, where it is `relaid`
    (`ShardedStep._written_gathered`)."""
    result: int = 0
    """Which result of its writer's op it holds (`fused_away` asks of one result of
    an op of several, `COMPUTED_IN_READERS`)."""


Producer = Node
"""What a group of communication hangs off: an op, or a source (an argument or a
constant: a node without operands), each its own group, so an edit of an op reading
one argument rebuilds that argument's group alone."""


@dataclass
class _Group:
    """The communication hanging off one producer (an op, an argument or a constant):
    its statistics all-reduce, and the collectives of every layout its results are
    read or leave in. Built and rebuilt as a whole, so its tasks keep one order."""

    producer: Producer
    specs: dict[Key, _Spec]
    ready: dict[tuple[Value, Sharding], dict[int, _Buffer]]
    """Where each (value, layout) is readable on each device."""
    compute_frees: dict[tuple[Node, int], list[tuple[str, int]]]
    """Buffers of this group's values a compute task frees (its last reader)."""
    buffers: list[_Buffer] = field(default_factory=list)
    """Every buffer of the group's values and collectives (`ShardedStep.memory`)."""


class ShardedStep:
    """The task graph of `dag` sharded as `plan` on `machine` (module docstring).

    `mesh` is the plan's one mesh when it has no device groups (`plan.meshes`), as
    `write_sharded` takes it; `signature` the training roles (read from the dag's
    attributes when None). Mesh device ids must be devices of the machine.

    A one-op change (`set_config`) edits: the op's compute tasks (replaced in place);
    the communication groups of its operands' producers and its own (rebuilt when what
    they must communicate changed: removed, and added anew in their canonical order);
    the compute tasks reading a group whose tasks, readable layouts or frees changed
    (replaced in place, when their task differs); and the argument tasks when an input
    now lies otherwise. Nothing else is touched.
    """

    @paused_gc()  # some 10^5 tasks and specs: see `paused_gc`
    def __init__(
        self,
        dag: Dag,
        plan: Plan,
        machine: Machine,
        op_cost: OpCost | None = None,
        *,
        mesh: Mesh | None = None,
        signature: TrainingSignature | None = None,
        collapse: bool = True,
    ) -> None:
        if not plan.meshes and mesh is None:
            raise ValueError("a plan on one mesh needs that mesh (mesh=...)")
        self.dag, self.plan, self.machine = dag, plan, machine
        self.meshes = {m.name: m for m in (plan.meshes or (mesh,))}  # type: ignore[union-attr]
        running = len({d for group in self.meshes.values() for d in group.device_ids})
        self.op_cost: OpCost = op_cost or machine_op_cost(machine, running, dag)
        """How ops are priced: the machine's own pricing with every device of the step
        running at once (`machine_op_cost`), unless given."""
        for group in self.meshes.values():
            if max(group.device_ids) >= machine.size:
                raise MachineError(
                    f"mesh @{group.name} uses device {max(group.device_ids)} but machine "
                    f"{machine.name} has {machine.size} devices"
                )
        self.order = tuple(plan.order or dag.ops)
        self._position = {node: i for i, node in enumerate(self.order)}
        self.rules, self._local = _rules_and_local(dag)
        self._consumers = dag.consumers()
        self._exits: dict[Value, list[int]] = {}
        for index, value in enumerate(dag.outputs):
            self._exits.setdefault(value, []).append(index)
        signature = signature or training_signature(dag_module.to_function(dag))
        self._replaces = dict(signature.replaces) if signature else {}
        self._kind = value_kinds(dag, signature)
        self._free = _free_values(dag, signature)
        self.stands_for = _device_classes(self.meshes.values(), machine, collapse)
        """Each simulated device and the devices whose tasks it stands for (itself alone
        when the step is not collapsed; `_device_classes`)."""
        self._devices = sorted(self.stands_for)
        self._collective_times: dict[tuple[object, ...], float] = {}
        self._ranks: dict[Key, tuple[int, int, int]] = {}
        self._heaps: dict[int, tuple[list[tuple[str, int]], _Heap]] = {}
        """`_heap` by device, as of the last edit (`set_config` and `derived` drop it)."""
        """`_program_rank` by key, which only the program fixes (`_sequence`)."""

        self.graph = TaskGraph()
        self._ids: dict[Key, int] = {}
        self._specs: dict[int, _Spec] = {}
        """Each task's spec: its allocs and frees by kind (the graph's tasks have them by
        pool), and what an edit compares before making a task anew."""
        self._groups: dict[Producer, _Group] = {}
        self._groups_made = _groups_of(
            (dag, machine, tuple(self.meshes.values()), self.order, signature, collapse)
        )
        """Groups made by every step of this context, by `_group_key`."""
        self._sources = [*self.dag.args, *(node for node in self.order if not node.inputs)]
        """The arguments, then the constants: the producers of no op, first in a graph
        built afresh."""
        self._source_index = {node: index for index, node in enumerate(self._sources)}
        for device in self._devices:
            self._add(("res", device), self._resident_spec(device))
        for producer in (*self._sources, *(node for node in self.order if node.inputs)):
            group = self._groups[producer] = self._group(producer)
            if producer.inputs:
                for device, spec in self._compute_specs(producer).items():
                    self._add(("op", producer, device), spec)
            for key, spec in group.specs.items():
                self._add(key, spec)

    # ------------------------------------------------------------------ editing

    def derived(self, plan: Plan, most: int) -> ShardedStep | None:
        """The step of `plan` made from this one by editing the ops whose configuration
        or operand layouts differ (`set_config`, readers first) on a copy, its tasks then
        numbered as a step built afresh from `plan` numbers them (`_renumbered`): the
        same tasks, ids and so simulation as `ShardedStep(dag, plan, ...)`. A search's
        starts differ little (rnnlm's ZeRO and DLRM plans from data parallel in 4-8 of
        3,030 ops) and a build of thousands of ops costs what some 60 edits do. None
        where `plan` lies on other meshes or in another order, more than `most` ops
        differ, or the edits do not arrive at `plan` (one passes through a layout a
        reader cannot read)."""
        mine = self.plan
        if plan.meshes != mine.meshes or plan.order != mine.order:
            return None
        relaid = [
            arg.out for arg in self.dag.args if plan.values.get(arg.out) != mine.values.get(arg.out)
        ]
        if any(value not in plan.values for value in relaid):
            return None
        touched = {  # an argument laid out otherwise: its readers, and its update's op
            use.node for value in relaid for use in self._consumers.get(value, ())
        } | {
            self.dag.outputs[index].node
            for index, argument in self._replaces.items()
            if self.dag.args[argument].out in relaid and self.dag.outputs[index].node.inputs
        }
        differing = (
            node
            for node in self.order
            if node.inputs
            and (
                node in touched
                or plan.operands.get(node) != mine.operands.get(node)
                or plan.configs.get(node) != mine.configs.get(node)
            )
        )
        changed = list(itertools.islice(differing, most + 1))  # a far plan: no further
        if len(changed) > most:
            return None
        twin = copy.copy(self)  # groups are replaced whole by an edit, never changed: shared
        twin.plan = dataclasses.replace(
            mine,
            configs=dict(mine.configs),
            operands=dict(mine.operands),
            values=dict(mine.values),
            notes=list(plan.notes),
        )
        twin.graph = self.graph.copy()
        twin._heaps = {}
        twin._ids, twin._specs, twin._groups = (
            dict(self._ids),
            dict(self._specs),
            dict(self._groups),
        )
        twin.plan.values.update((value, plan.values[value]) for value in relaid)
        try:
            for node in reversed(changed):
                twin.set_config(node, plan.configs[node], plan.operands[node])
        except ValueError:  # a layout some reader cannot read on the way
            return None
        if relaid:
            twin._heaps = {}
            for device in twin._devices:
                twin._update(("res", device), twin._resident_spec(device))
        edited = twin.plan
        if (edited.configs, edited.operands, edited.values, edited.outputs) != (
            plan.configs,
            plan.operands,
            plan.values,
            plan.outputs,
        ):
            return None
        twin._renumbered()
        return twin

    def _renumbered(self) -> None:
        """The graph made anew from the specs in the order a step built afresh adds
        them (the arguments' tasks, then per producer its compute tasks and its group's
        collectives), so ids, and the simulator's ties, are a fresh step's."""
        self._heaps = {}

        def rank(key: Key) -> tuple[int, int, int, int]:
            kind, *rest = key  # type: ignore[misc]
            if kind == "res":
                return (*self._program_rank(key), self._devices.index(rest[0]))
            if kind == "op":
                devices = self._simulated(self.mesh_of(rest[0]).device_ids)
                return (*self._program_rank(key), devices.index(rest[1]))
            return (*self._program_rank(key), 0)

        specs = [(key, self._specs[self._ids[key]]) for key in sorted(self._ids, key=rank)]
        self.graph, self._ids, self._specs = TaskGraph(), {}, {}
        for key, spec in specs:
            self._add(key, spec)

    def set_config(
        self, node: Node, config: Config, operands: Sequence[Sharding] | None = None
    ) -> None:
        """Give `node` configuration `config` (on its mesh): its operands are read in
        `operands` (by default complete, in the layouts the configuration needs; partial
        sums where the op is linear in them), its results lie as they follow from them
        (`soap.propagate`), inputs it reads first lie as it reads them, and program
        results leave as before (a new weight as its argument lies, any other result
        completed). ShardingError, the step unchanged, when the configuration does not
        fit the op, `operands` are not `config`'s, or a reader needs partial sums its
        results no longer hold."""
        self._heaps = {}
        mesh = self.mesh_of(node)
        rule = self.rules[node]
        needs, _ = soap.shardings_for(rule, config, mesh.name)
        if operands is not None:
            if [o.dims for o in operands] != [n.dims for n in needs]:
                raise soap.ShardingError(f"operand layouts {operands} are not those of {config}")
            needs = list(operands)
        for value, need in zip(node.inputs, needs, strict=True):
            need.check(value.sig, mesh)
            if need.unreduced:  # partial sums its producer must still leave
                moves(self.plan.values[value], need, value.sig, self.meshes)
        results, _ = soap.propagate(rule, needs, mesh.name)
        relaid = {
            value: need
            for value, need in zip(node.inputs, needs, strict=True)
            if value in self._free and self._first_reader(value) is node
        }
        changed = dict(zip(node.results, results, strict=True)) | relaid
        for value, sharding in changed.items():
            for use in self._values_read(value):
                need = self.plan.operands[use.node][use.operand]
                if use.node is not node and not free_read(value, need, self._local):
                    moves(sharding, need, value.sig, self.meshes)

        plan = self.plan
        plan.configs[node] = dict(config)
        plan.operands[node] = tuple(needs)
        plan.values.update(changed)
        outputs = list(plan.outputs)
        for value in changed:
            for index in self._exits.get(value, ()):
                outputs[index] = self._exit(index)
        plan.outputs = tuple(outputs)
        self._rebuild(node, relaid)

    def _rebuild(self, node: Node, relaid: Mapping[Value, Sharding]) -> None:
        """Rebuild the groups `node`'s edges belong to, then update the compute tasks
        that read what changed in them; the old tasks of a changed group go last, once
        nothing depends on them."""
        producers = dict.fromkeys([*(self._producer(v) for v in node.inputs), node])
        old_ids: list[int] = []
        readers = dict.fromkeys([node])
        for producer in producers:
            before = self._groups[producer]
            after = self._groups[producer] = self._group(producer)
            renamed = after.specs != before.specs
            if renamed:
                old_ids += [self._ids.pop(key) for key in before.specs]
                for key, spec in after.specs.items():
                    self._add(key, spec)
            for value in _moved_values(before, after, renamed):
                readers.update((use.node, None) for use in self._consumers.get(value, ()))
            for key in before.compute_frees.keys() | after.compute_frees.keys():
                if before.compute_frees.get(key) != after.compute_frees.get(key):
                    readers[key[0]] = None
        for reader in readers:
            for device, spec in self._compute_specs(reader).items():
                self._update(("op", reader, device), spec)
        if relaid:
            for device in self._devices:
                self._update(("res", device), self._resident_spec(device))
        for task_id in reversed(old_ids):
            self.graph.remove(task_id)
            del self._specs[task_id]

    def _add(self, key: Key, spec: _Spec) -> None:
        task = self._task(spec)
        task_id = self.graph.add(task)
        self._ids[key] = task_id
        self._specs[task_id] = spec

    def _update(self, key: Key, spec: _Spec) -> None:
        task_id = self._ids[key]
        if spec == self._specs[task_id] and self.graph[task_id].deps == tuple(
            map(self._ids.__getitem__, spec.deps)
        ):
            return  # the same task (an edit re-specs every reader; most stay as they were)
        task = self._task(spec)
        if self.graph[task_id] != task:
            self.graph.replace(task_id, task)
        self._specs[task_id] = spec

    def _task(self, spec: _Spec) -> Task:
        pool = ("mem", spec.resource[1])  # type: ignore[index]
        return Task(
            spec.resource,
            spec.duration,
            tuple(map(self._ids.__getitem__, spec.deps)),
            _pooled(pool, spec.alloc),
            _pooled(pool, spec.free),
            spec.name,
        )

    # ------------------------------------------------------------------ memory

    def memory(self) -> dict[int, MemoryBreakdown]:
        """Per device, the bytes XLA's buffer assignment gives it, by kind: what
        `compiled.memory_analysis()` reports as arguments + outputs - aliased +
        temporaries, for the step compiled as one SPMD program with its replaced
        weights donated. The task graph's timeline plays no part: XLA's figure is that
        of its own sequential schedule, whatever overlap of compute and communication
        the timeline prices.

        * arguments are held throughout, and so are program results not written into
          a donated argument: XLA gives each output an allocation of its own;
        * every other buffer (an op's result, a collective's) is a temporary, live
          from the task making it to the last task reading it in XLA's order
          (`sequence`: a BFS over the program as XLA fuses it), both included (an
          op's operands and results coexist); a `made_at_start` op writes over
          zeros made at the start, one broadcast per size copied for each;
        * XLA never writes what it fuses away (`fused_away`), and computes a cheap
          element-wise op again inside its element-wise readers
          (`duplicated_into`), whose operands then live until those readers;
        * a weight (or state) written in place while an op its update does not wait
          for still reads it (the backward's `dx = dy @ W^T`) is copied first: XLA's
          copy insertion keeps the old value in a copy that depends on nothing, so BFS
          makes it at the start, and every reader, the update too, reads the copy;
        * a donated argument's buffer holds temporaries between its last read (its
          copy) and its update, one at a time, as XLA's buffer assignment gives them
          (`_outside_donated`: other weights' copies, gradients, activations);
        * an element-wise op writes its result over an operand of its size that it
          reads for the last time (`_share_dying_operands`);
        * an argument a convolution reads is copied into the convolution's layout
          (`CONVOLUTIONS`), an activation convolutions read in several layouts is a
          buffer per layout (`CONVOLUTION_LAYOUTS`); a softmax's exponent is a buffer while it runs
          (`EXPONENTIATING`); a max-pooling's gradient reads an argmax found in the
          forward (`argmax_of`); an all-gather along a minor dimension is copied
          row-major for a dot or a program result, and its operand into the
          gathered layout where its producer does not write that, each copy an
          instruction of its own, a wave after the all-gather and before it
          (`gathered_minor`, `_sequence`);
        * an all-to-all reads its operand as one slice per device of its group, made a
          wave before it (an element-wise producer read by it alone computed inside
          them, `_fused`), and returns a tuple of one buffer per block
          (`TUPLE_ENTRY_BYTES`);
        * the temporaries left are packed into one heap as XLA's heap simulator packs
          them (`_packed`, lives timed on its clock of allocations and frees,
          `_event_times`), whose gaps can make it more than the most bytes live at
          once; the kinds are those live at the peak, the gaps counted as the kind at
          the heap's top (docs/benchmarks.md, "Per-device memory: the simulator
          against XLA")."""
        split = {}
        for device in self._devices:
            fixed, temporaries = self._heap(device)
            best = dict.fromkeys(KINDS, 0)
            live = temporaries.live
            for kind, nbytes in (*fixed, *live):
                best[kind] += nbytes
            heap, top = temporaries.packed()
            if top is not None:  # the heap's gaps, counted as what lies at its top
                best[top] += heap - sum(nbytes for _, nbytes in live)
            split.update(dict.fromkeys(self.stands_for[device], MemoryBreakdown(**best)))
        return dict(sorted(split.items()))

    def peak_bounds(self, cap: int) -> PeakBounds:
        """Bounds on `peak_memory` just tight enough to tell whether it exceeds `cap`
        (what a search's memory check asks, `SimulatedStrategy.cost`), exact where
        they meet: per device its held bytes plus bounds on its heap (`_heap_bounds`),
        stopping at the first device over `cap`. About half a memory replay's work on
        a step near its cap, none of its figures changed
        (`tests/test_sim_memory_check.py`)."""
        low, high = 0, 0.0
        for device in self._devices:
            fixed, temporaries = self._heap(device)
            held = sum(nbytes for _, nbytes in fixed)
            heap_low, heap_high = temporaries.bounds(cap - held)
            low, high = max(low, held + heap_low), max(high, held + heap_high)
            if low > cap:
                return PeakBounds(low, math.inf)
        return PeakBounds(low, high)

    def _heap(self, device: int) -> tuple[list[tuple[str, int]], _Heap]:
        """`_buffers_of(device)`, its temporaries as a `_Heap`, kept until the next edit:
        a check by bounds and a full replay of one step share what each found."""
        if device not in self._heaps:
            fixed, temps = self._buffers_of(device)
            self._heaps[device] = (fixed, _Heap(temps))
        return self._heaps[device]

    def _buffers_of(self, device: int) -> tuple[list[tuple[str, int]], list[Temp]]:
        """`device`'s buffers held throughout as (kind, bytes), and its temporaries as
        (first, last position in `sequence`, bytes, kind) (`memory`), but those XLA
        places in a donated argument's buffer (`_outside_donated`)."""
        fixed, made = self._made(device)
        fused, (before, after) = self._fused_on(made), self._relaid(made)
        order = self._sequence(device, fused, before, after)
        position: dict[int, int] = {}
        # where XLA's instructions beside a collective run (`_sequence`), by the
        # collective's id: those reading its operand (an all-to-all's slices, an
        # all-gather's copy of it), and an all-gather's copy of its result
        sliced: dict[int, int] = {}
        copies: dict[int, int] = {}
        for i, entry in enumerate(order):
            if isinstance(entry, int):
                position[entry] = i
            else:
                (sliced if entry.side == BEFORE else copies)[entry.task] = i
        at = {key: position[task_id] for key, task_id in self._ids.items() if task_id in position}
        copied = {  # ops also computed inside some readers' loops (`duplicated_into`)
            buffer.writer[1]: inside  # type: ignore[index]
            for buffer in made
            if buffer.writer[0] == "op"
            and buffer.writer[1] not in fused  # type: ignore[index]
            and (
                inside := duplicated_into(
                    buffer.writer[1], buffer.compute_readers, self._elementwise
                )
            )  # type: ignore[index]
        }

        @functools.cache
        def last_read(node: Node) -> int:
            """Where a reader `node` last needs its operands: its own task, or, fused
            into its readers, theirs (and those it is duplicated into); both for an op
            one of whose results its readers compute (`COMPUTED_IN_READERS`)."""
            if node in fused:
                buffer = fused[node]
                slices = (sliced[self._ids[key]] for key in buffer.chain_readers)
                runs = [at[("op", node, device)]] if node.op in COMPUTED_IN_READERS else []
                return max([*runs, *map(last_read, buffer.compute_readers), *slices])
            return max([at[("op", node, device)], *map(last_read, copied.get(node, ()))])

        @functools.cache
        def unfused(node: Node) -> tuple[Node, ...]:
            """`node`, or where XLA fuses it away (`fused_away`) the readers it is
            computed in, theirs in turn (after `node` itself where it still runs for
            its other results, `COMPUTED_IN_READERS`); and those it is duplicated
            into. Each once: fusions fan out and meet again (an LSTM's fused cell
            chain listed 2,582 readers per `split` result before)."""
            if node in fused:
                runs = (node,) if node.op in COMPUTED_IN_READERS else ()
                inside = map(unfused, fused[node].compute_readers)
                readers = itertools.chain(runs, *inside)
            else:
                readers = itertools.chain((node,), *map(unfused, copied.get(node, ())))
            return tuple(dict.fromkeys(readers))

        temps = []
        written: dict[Node, int] = {}  # an op's result: its index in temps
        read: dict[Node, list[int]] = {}  # the temporaries each unfused op reads
        zeros: dict[int, int] = {}  # `made_at_start` ops by the bytes of their result
        aliased: set[int] = set()  # temporaries written in place over a copy of zeros
        for buffer in made:
            writer = buffer.writer
            if writer[1] in fused and fused[writer[1]] is buffer:  # type: ignore[index]
                continue
            start = at[writer]  # type: ignore[index]
            if writer[0] == "grp" and self._ids[writer] in before:  # its operand's copy
                assert buffer.operand is not None
                temps.append((sliced[self._ids[writer]], start, buffer.operand.nbytes, buffer.kind))
            if buffer.kept:  # a result gathered, then copied into its own (`_relaid`)
                temps.append((start, copies[self._ids[writer]], buffer.relaid, buffer.kind))
                continue
            made_from = 0 if writer[0] == "op" and made_at_start(writer[1]) else start  # type: ignore[index]
            if not made_from:
                zeros[buffer.nbytes] = zeros.get(buffer.nbytes, 0) + 1
                aliased.add(len(temps))
            inside = copied.get(writer[1], ()) if writer[0] == "op" else ()  # type: ignore[index]
            compute = [
                node
                for node in buffer.compute_readers
                if node not in inside and not (writer[0] == "op" and argmax_of(node, writer[1]))  # type: ignore[index]
            ]
            # an all-to-all reads its operand in the slices made for it (`sequence`)
            readers = [sliced.get(self._ids[key], at[key]) for key in buffer.chain_readers]
            readers += map(last_read, compute)
            for reader in itertools.chain.from_iterable(map(unfused, compute)):
                read.setdefault(reader, []).append(len(temps))
            if writer[0] == "op" and len(writer[1].results) == 1:  # type: ignore[index]
                written[writer[1]] = len(temps)  # type: ignore[index]
            end = max(readers, default=start)
            if writer[0] == "grp" and self._ids[writer] in after:  # read in its copy
                copy = copies[self._ids[writer]]
                temps.append((copy, max(end, copy), buffer.nbytes, buffer.kind))
                end = copy
            if buffer.parts > 1:  # a tuple: a buffer per block, and the tuple's table
                block = (made_from, end, buffer.nbytes // buffer.parts, buffer.kind)
                temps += [block] * buffer.parts
                cut = (sliced[self._ids[writer]], start, block[2], buffer.kind)
                temps += [cut] * buffer.parts  # the operand's slices (`sequence`)
                temps.append((made_from, end, TUPLE_ENTRY_BYTES * buffer.parts, buffer.kind))
            else:
                temps.append((made_from, end, buffer.nbytes, buffer.kind))
                if writer[0] == "op":  # its other layouts for convolutions
                    value = writer[1].results[buffer.result]  # type: ignore[index]
                    temps += [
                        (start, last, buffer.nbytes, buffer.kind)
                        for last in self._relaid_for_convolutions(value, compute, last_read)
                    ]
        temps += [  # one zero-filled broadcast per size, copied for each op writing in place
            (0, 1, nbytes, "gradients") for nbytes, count in zeros.items() if count > 1
        ]
        for node in self.dag.ops:
            if node.op in EXPONENTIATING and ("op", node, device) in at:
                position, x = at[("op", node, device)], node.inputs[0]
                nbytes = self._local_bytes(x, self.plan.operands[node][0])
                temps.append((position, position, nbytes, self._kind[node.results[0]]))
            elif argmax_of(node) and ("op", node, device) in at:
                x, dy = zip(node.inputs, self.plan.operands[node], strict=True)
                mesh = self.mesh_of(node)
                found = min(
                    (
                        last_read(use.node)
                        for use in self._values_read(x[0])
                        if use.node is not node
                    ),
                    default=at[("op", node, device)],
                )
                rank = len(x[0].sig.shape)
                for first, last, value in ((0, found, x), (found, at[("op", node, device)], dy)):
                    indices = math.prod(_local_sig(value[0].sig, value[1], mesh).shape)
                    temps.append((first, last, rank * indices * INDEX_BYTES, "gradients"))
        _share_dying_operands(temps, written, read, self._elementwise, aliased)
        donated: list[_Donated] = []
        arguments = {arg.out: index for index, arg in enumerate(self.dag.args)}
        for argument, update in sorted(self._updated_in_place(), key=lambda p: arguments[p[0]]):
            ready = self._groups[argument.node].ready
            buffer = ready[(argument, self.plan.values[argument])].get(device)
            if buffer is None:
                continue
            before = ancestors(update)
            readers = list(itertools.chain.from_iterable(map(unfused, buffer.compute_readers)))
            late = [reader for reader in readers if reader is not update and reader not in before]
            written_at = at[("op", update, device)]
            if late:  # XLA's copy of the old weight: see the docstring of `memory`
                read_to = (arguments[argument] + 1) / (len(arguments) + 1)
                temps.append((read_to, last_read(update), buffer.nbytes, buffer.kind))
            else:
                read_to = max(
                    [*map(last_read, readers), *(at[key] for key in buffer.chain_readers)],
                    default=0,
                )
            shared = frozenset(
                index for index in read.get(update, ()) if temps[index][2] == buffer.nbytes
            )
            donated.append(_Donated(buffer.nbytes, read_to, written_at, shared))
        for arg in self.dag.args:
            # per layout and sharding read: its last reader
            relaid: dict[tuple[tuple[int, ...], Sharding], int] = {}
            for use in self._values_read(arg.out):
                reader, sharding = use.node, self.plan.operands[use.node][use.operand]
                if reader.op not in CONVOLUTIONS or ("op", reader, device) not in at:
                    continue
                shape = sharding.local_shape(arg.out.sig.shape, self.meshes[sharding.mesh])
                order = CONVOLUTION_LAYOUTS.get((reader.op, use.operand))
                if order is not None and not kernel_in_place(reader, use.operand, shape):
                    need = (order, sharding)
                    relaid[need] = max(relaid.get(need, 0), last_read(reader))
            temps += [
                (1, end, self._local_bytes(arg.out, layout), self._kind[arg.out])
                for (_, layout), end in relaid.items()
            ]
        # `last_read` and `unfused` call themselves through this frame's cells: a cycle
        # holding this step and every dict above, freed only by the cyclic collector
        # (which a search pauses, `paused_gc`): emptying the cells frees them now.
        last_read = unfused = None  # type: ignore[assignment]
        return fixed, _outside_donated(temps, donated)

    def _made(self, device: int) -> tuple[list[tuple[str, int]], list[_Buffer]]:
        """`device`'s buffers held throughout as (kind, bytes), and the buffers its ops
        and collectives make, but the arguments and constants (`_buffers_of`): the
        program's results among them only where XLA gathers one before copying it
        into the result (`gathered_minor`), the gathered buffer a temporary."""
        fixed = list(self._resident_spec(device).alloc)
        made: list[_Buffer] = []
        for group in self._groups.values():
            for buffer in group.buffers:
                writer = buffer.writer
                if buffer.device != device or writer is None or writer[0] == "res":  # type: ignore[index]
                    continue  # a constant (XLA embeds it) or an argument (held: above)
                if buffer.kept:
                    fixed.append((buffer.kind, buffer.nbytes))
                if not buffer.kept or buffer.relaid:  # a result gathered, then copied
                    made.append(buffer)
        return fixed, made

    def _relaid_for_convolutions(
        self, value: Value, readers: Iterable[Node], last_read: Callable[[Node], int]
    ) -> list[int]:
        """Where each buffer XLA makes of `value` for its convolution `readers` beside
        the one the step holds anyway is last read: one per layout they read it in
        (`CONVOLUTION_LAYOUTS`) but the layout read last, whose buffer is the value's
        own (live to its last reader)."""
        groups = convolution_layouts(value, readers)
        return sorted(max(map(last_read, group)) for group in groups)[:-1]

    def _relaid(self, made: Iterable[_Buffer]) -> tuple[set[int], set[int]]:
        """The ids of the all-gathers among the writers of `made` that gather along a
        minor dimension (`gathered_minor`) and for which XLA copies, in two sets:
        those whose operand it copies into the layout it gathers in first, where
        the operand's producer does not write it so (`_written_gathered`), and
        those whose result it copies into row-major, for a reader that is not
        element-wise (a dot, a reduction) or to leave the program."""
        before, after = set(), set()
        for buffer in made:
            if not buffer.relaid:
                continue
            if buffer.operand is not None and not self._written_gathered(buffer.operand):
                before.add(self._ids[buffer.writer])
            if buffer.kept or not all(map(self._elementwise, buffer.compute_readers)):
                after.add(self._ids[buffer.writer])
        return before, after

    def _written_gathered(self, operand: _Buffer) -> bool:
        """Whether XLA's layout assignment has the producer of an all-gather's
        `operand` write it in the layout the all-gather gathers in (the gathered
        dimension major), so that no copy comes before the all-gather: an op
        computed as a loop (element-wise, a transpose) read by that all-gather alone
        (candle_uno's MCMC plan updates its largest weight as
        `dynamic-slice_add_fusion = f32[1282,32]{0,1}` for `all_gather.11`), an
        embedding lookup among them (`SELECTED`). An argument keeps its layout, and
        an op read by others too (alexnet's expert plan: `wrapped_copy.4 =
        f32[8,128]{0,1}` of a gradient a dot also reads) or writing row-major (a dot)
        is copied."""
        writer = operand.writer
        if writer is None or writer[0] != "op":  # type: ignore[index]
            return False
        node = writer[1]  # type: ignore[index]
        return (
            not operand.compute_readers
            and len(operand.chain_readers) == 1
            and (self._elementwise(node) or node.op in SELECTED)
        )

    def _fused_on(self, made: Iterable[_Buffer]) -> dict[Node, _Buffer]:
        """The ops among the writers of `made` that XLA never writes (`_fused`), with
        their buffer."""
        return {buffer.writer[1]: buffer for buffer in made if self._fused(buffer)}  # type: ignore[index]

    def _updated_in_place(self) -> list[tuple[Value, Node]]:
        """Each argument written in place by the op making its new value (a donated
        weight or state), with that op."""
        pairs = []
        for result, argument in self._replaces.items():
            made = self.dag.outputs[result]
            if not made.node.is_arg and self._donated(made, self.plan.outputs[result]):
                pairs.append((self.dag.args[argument].out, made.node))
        return pairs

    def _fused(self, buffer: _Buffer) -> bool:
        """Whether the op making `buffer` never writes it (`fused_away`, its readers'
        and its own element-wise kind at their local shapes): read by compute on this
        device alone (a collective needs the buffer), or, element-wise, by all-to-alls
        alone, whose slices of their operand compute it (XLA fuses a producer into
        those slices, which are loops: alexnet's expert plan scales a gradient inside
        `multiply_slice_fusion`..`.7`, the all-to-all's operands, and never writes
        it; `sequence`)."""
        writer = buffer.writer
        if writer is None or writer[0] != "op":  # type: ignore[index]
            return False
        node = writer[1]  # type: ignore[index]
        if buffer.chain_readers:
            return (
                not buffer.compute_readers
                and len(node.results) == 1
                and self._elementwise(node)
                and all(self._specs[self._ids[key]].parts > 1 for key in buffer.chain_readers)
            )
        return fused_away(node.results[buffer.result], buffer.compute_readers, self._elementwise)

    def _elementwise(self, node: Node) -> bool:
        """`computed_elementwise` on the local shapes `node` reads on a device (only a
        matmul's depend on them)."""
        if node.op != "matmul":
            return computed_elementwise(node)
        mesh = self.mesh_of(node)
        operands = zip(node.inputs, self.plan.operands[node], strict=True)
        return computed_elementwise(node, [_local_sig(v.sig, need, mesh) for v, need in operands])

    def peak_memory(self) -> int:
        """The largest device's peak bytes (`memory`)."""
        return max((b.total for b in self.memory().values()), default=0)

    def sequence(self, device: int) -> list[int]:
        """The ids of `device`'s tasks (arguments, compute, collectives) in the order
        XLA's CPU compiler runs their HLO: its default scheduler (the concurrency-
        optimized `BFSMemoryScheduler`, `xla_cpu_enable_concurrency_optimized_scheduler`)
        is Kahn's topological sort with a FIFO queue, starting from the instructions
        without operands in program order and queueing an instruction's users, in
        program order, as their last operand is scheduled. It knows nothing of sizes:
        independent work at one depth runs together (every layer's weight gradient
        before any update, say), which is what sets the peak.

        Program order is the canonical order of a graph built afresh (the arguments,
        then per op its compute task and its group's collectives), not task ids, which
        edits renumber; dependencies on other devices' tasks are XLA's collectives'
        own, met inside the instruction, and left out.

        An op XLA never writes (`fused_away`) is no instruction of its own: its
        readers' fusions compute it, so it takes no place in the queue and is
        scheduled as soon as its operands are (a chain of element-wise ops, an
        update's scale and add, runs in one wave, not one wave per op: candle_uno's
        ILP plan held its weight gradients three waves longer than XLA does). An op
        of which XLA computes one result in its readers (`COMPUTED_IN_READERS`)
        still runs for the others, in a wave of its own.

        An all-to-all runs one wave after its operand is ready: XLA feeds it the
        operand's blocks as slices, one instruction each (dlrm's expert plan:
        `multiply_slice_fusion.16`..`.23` in the wave of the scaled embedding
        gradients, `all-to-all.6` after their all-reduces). An all-gather along a
        minor dimension may be one wave later likewise, behind the copy of its
        operand, and its readers one wave later, behind the copy of its result
        (`gathered_minor`). The places of the slices and copies in the order are
        left out here; `_buffers_of` reads them (`_sequence`)."""
        made = self._made(device)[1]
        before, after = self._relaid(made)
        order = self._sequence(device, self._fused_on(made), before, after)
        return [task_id for task_id in order if isinstance(task_id, int)]

    def _sequence(
        self, device: int, fused: Collection[Node], before: Collection[int], after: Collection[int]
    ) -> list[int | Beside]:
        """`sequence` with the ops XLA fuses away given, and the instructions XLA adds
        beside a collective in their place, as (`BEFORE` or `AFTER`, the collective's
        id) (`Beside`): an all-to-all's slices of its operand, and the copy of the
        operand of an all-gather in `before` into the layout it gathers in, a wave
        before the collective, which runs a wave later; the copy of the result of an
        all-gather in `after` (`gathered_minor`), a wave after it, which its readers
        then wait for (XLA's `wrapped_copy` of a gathered weight, an instruction of
        its own: candle_uno's MCMC plan). An element-wise reader of such a result,
        which reads the gathered layout in XLA, waits for the copy here too: a
        simplification, one wave late for such a reader."""
        inside = {
            self._ids[("op", node, device)] for node in fused if node.op not in COMPUTED_IN_READERS
        }
        ranks = self._ranks
        rank = {
            task_id: ranks[key] if key in ranks else ranks.setdefault(key, self._program_rank(key))
            for key, task_id in self._ids.items()
        }
        mine = sorted(
            (i for i in self._specs if self.graph[i].resource[1] == device),  # type: ignore[index]
            key=rank.__getitem__,
        )
        users: dict[int, list[int]] = {i: [] for i in mine}
        waiting: dict[int, int] = {}
        for task_id in mine:
            deps = {self._ids[key] for key in self._specs[task_id].deps}
            deps &= users.keys()
            waiting[task_id] = len(deps)
            for dep in deps:
                users[dep].append(task_id)
        led = {i for i in mine if self._specs[i].parts > 1}.union(before)
        queue: collections.deque[int | Beside] = collections.deque()
        queue.extend(i for i in mine if not waiting[i])
        order: list[int | Beside] = []
        while queue:
            now = [queue.popleft()]
            while now:  # the task, then at once the fused ops it readies
                entry = now.pop()
                order.append(entry)
                if isinstance(entry, int):
                    task_id = entry
                    if task_id in after:  # its copy a wave later, its readers after that
                        queue.append(Beside(AFTER, task_id))
                        continue
                elif entry.side == BEFORE:  # the collective a wave later
                    queue.append(entry.task)
                    continue
                else:
                    task_id = entry.task
                ready = []
                for user in users[task_id]:
                    waiting[user] -= 1
                    if not waiting[user]:
                        if user in led:
                            queue.append(Beside(BEFORE, user))
                        else:
                            (ready if user in inside else queue).append(user)
                now += reversed(ready)
        return order

    def _program_rank(self, key: Key) -> tuple[int, int, int]:
        """Where a task comes in a graph built afresh: the arguments' task, then for
        each producer in program order its compute task and its group's collectives
        (the sources' groups first, in `_sources` order)."""
        kind, *rest = key  # type: ignore[misc]
        sources = self._source_index
        if kind == "res":
            return (-len(sources) - 1, 0, 0)
        producer = rest[0]
        position = (
            sources[producer] - len(sources) if producer in sources else self._position[producer]
        )
        return (position, 0, 0) if kind == "op" else (position, 1, rest[1])

    # ------------------------------------------------------------------ tasks

    def _resident_spec(self, device: int) -> _Spec:
        alloc = [
            (self._kind[arg.out], self._local_bytes(arg.out, self.plan.values[arg.out]))
            for arg in self.dag.args
            if device in self._devices_of(self.plan.values[arg.out])
        ]
        arrays = len(self.dag.args) + len(self.dag.outputs)
        overhead = self.machine.step_overhead(arrays)  # the call's dispatch, before any op
        return _Spec(("args", device), overhead, (), _summed(alloc), (), "arguments")

    def _compute_specs(self, node: Node) -> dict[int, _Spec]:
        """`node`'s compute task on each device of its mesh."""
        plan = self.plan
        producers = [self._producer(value) for value in node.inputs]
        groups = [self._groups[producer] for producer in producers]
        own = [self._groups[producer] for producer in dict.fromkeys([*producers, node])]
        alloc = _summed(
            (self._kind[value], self._local_bytes(value, plan.values[value]))
            for value in node.results
            if not self._donated(value, plan.values[value])
        )
        duration, name = self._duration(node), f"{node.op} #{self._position[node]}"
        shape_only = self.rules[node].shape_only
        operands = [
            group.ready[(value, need)]
            for index, (group, value, need) in enumerate(
                zip(groups, node.inputs, plan.operands[node], strict=True)
            )
            if index not in shape_only
        ]
        specs = {}
        for device in self._simulated(self.mesh_of(node).device_ids):
            deps = []
            for readable in operands:
                buffer = readable.get(device)
                if buffer is not None and buffer.ready is not None:
                    deps.append(buffer.ready)
            frees = [entry for g in own for entry in g.compute_frees.get((node, device), ())]
            specs[device] = _Spec(
                ("device", device), duration, tuple(deps), alloc, _summed(frees), name
            )
        return specs

    def _duration(self, node: Node) -> float:
        plan = self.plan
        return _shard_duration(
            self.op_cost,
            node,
            tuple(plan.operands[node]),
            tuple(plan.values[v] for v in node.results),
            self.mesh_of(node),
            self.machine.device,
        )

    def _group(self, producer: Producer) -> _Group:
        """The communication of `producer`'s values (`_made_group`), the one made
        before for what it depends on where there is one (`_group_key`): a group is
        never changed once made, and a search asks again and again for the same few
        (a rejected proposal's undoing rebuilds what it had; starts share most)."""
        key = self._group_key(producer)
        made = self._groups_made.get(key)
        if made is None:
            if len(self._groups_made) >= GROUPS_KEPT:
                self._groups_made.clear()
            made = self._groups_made[key] = self._made_group(producer)
        return made

    def _group_key(self, producer: Producer) -> Hashable:
        """All of the plan `_made_group` reads for `producer`'s group: its
        configuration (its statistics' all-reduces), and per value its layout, the
        layouts it leaves the program in and those its readers read it in on their
        meshes. The rest is the step's context (`_groups_of`)."""
        plan = self.plan
        config = plan.configs[producer] if producer.inputs else {}
        return (
            producer,
            tuple(config.items()),
            tuple(
                (
                    plan.values[value],
                    tuple(plan.outputs[index] for index in self._exits.get(value, ())),
                    tuple(
                        (plan.operands[use.node][use.operand], self.mesh_of(use.node).name)
                        for use in self._values_read(value)
                    ),
                )
                for value in self._values_of(producer)
            ),
        )

    def _made_group(self, producer: Producer) -> _Group:
        """The communication of `producer`'s values (the arguments' and constants' for
        None), from scratch, in canonical order: the statistics all-reduce, then per
        value the layouts it is read in (by first reader), then those it leaves in;
        and where each buffer is freed."""
        plan = self.plan
        group = _Group(producer, {}, {}, {})
        stats = self._statistics(group) if producer.inputs else {}
        buffers = group.buffers
        for value in self._values_of(producer):
            here = plan.values[value]
            kept = value.node.is_arg or self._kept(value, here)
            nbytes, kind = self._local_bytes(value, here), self._kind[value]
            if self._donated(value, here):
                nbytes = 0  # written into its argument's buffer
            produced = {}
            for device in self._simulated(self._devices_of(here)):
                writer: Key | None = None
                ready: Key | None = None
                if producer.inputs:
                    writer = ("op", producer, device)
                    ready = stats.get(device, writer)
                elif value.node.is_arg:
                    writer = ready = ("res", device)
                produced[device] = _Buffer(
                    device, writer, ready, nbytes, kind, kept, result=value.index
                )
            buffers += produced.values()
            group.ready[(value, here)] = produced
            for target in self._targets(value):
                buffers += self._chain(group, value, target)
            for use in self._values_read(value):
                need = plan.operands[use.node][use.operand]
                reading = self.mesh_of(use.node).device_ids
                for device, buffer in group.ready[(value, need)].items():
                    if device in reading:
                        buffer.compute_readers.append(use.node)
        for buffer in buffers:
            if not buffer.kept and buffer.writer is not None:
                self._free_after_last_reader(group, buffer)
        return group

    def _free_after_last_reader(self, group: _Group, buffer: _Buffer) -> None:
        """Free `buffer` at the end of its last compute reader in program order, else
        of the last collective reading it, else of its own writer (nothing reads it)."""
        entry = (buffer.kind, buffer.nbytes)
        if buffer.compute_readers:
            last = max(buffer.compute_readers, key=self._position.__getitem__)
            group.compute_frees.setdefault((last, buffer.device), []).append(entry)
            return
        freer = buffer.chain_readers[-1] if buffer.chain_readers else buffer.writer
        if freer in group.specs:
            spec = group.specs[freer]
            group.specs[freer] = spec._replace(free=(*spec.free, entry))
        else:
            group.compute_frees.setdefault((group.producer, buffer.device), []).append(entry)  # type: ignore[arg-type]

    def _statistics(self, group: _Group) -> dict[int, Key]:
        """The all-reduces of the producer's statistics (one per split synced factor,
        over the statistics it makes: its results the factor does not index), after
        its compute; each device's last one."""
        node = group.producer
        assert node is not None
        rule, mesh = self.rules[node], self.mesh_of(node)
        last: dict[int, Key] = {d: ("op", node, d) for d in self._simulated(mesh.device_ids)}
        for factor, axes in soap.internal_collectives(rule, self.plan.configs[node]):
            nbytes = sum(
                self._local_bytes(value, self.plan.values[value])
                for value, dims in zip(node.results, rule.results, strict=True)
                if factor not in dims
            )
            name = f"all_reduce of {node.op} #{self._position[node]} statistics"
            members = axis_groups(mesh, axes)
            last = self._collective(group, "all_reduce", nbytes, members, dict(last), name, {})
        return last

    def _chain(self, group: _Group, value: Value, target: Sharding) -> list[_Buffer]:
        """The collectives taking `value` to `target` (once per layout in the group, as
        the writer inserts them once per value and target); the buffers they make."""
        if (value, target) in group.ready:
            return []
        made: list[_Buffer] = []
        source = self.plan.values[value]
        if free_read(value, target, self._local):
            group.ready[(value, target)] = group.ready[(value, source)]
            return made
        if source.mesh != target.mesh:
            made += self._chain(group, value, completed(source))
            source = completed(source)
        current = group.ready[(value, source)]
        held = self._devices_of(source)  # every device holding the value, simulated or not
        steps = moves(source, target, value.sig, self.meshes)
        operand = source  # the layout each step reads
        for number, step in enumerate(steps):
            operand, reads = step.result, operand
            if step.kind == "all_slice":
                continue
            last = number == len(steps) - 1
            mesh = self.meshes[step.result.mesh]
            if step.kind == "replicate":
                members = [sorted({*held, *mesh.device_ids})]
            else:
                members = axis_groups(mesh, step.axes)
            nbytes = self._local_bytes(value, step.result)
            kept = last and self._kept(value, target)
            alloc = 0 if last and self._donated(value, target) else nbytes
            ready_on = {d: buffer.ready for d, buffer in current.items()}
            name = f"{step.kind} of {self._describe(value)}"
            keys = self._collective(
                group,
                step.kind,
                step.bytes,
                members,
                ready_on,
                name,
                {d: alloc for d in mesh.device_ids},
            )
            for device, buffer in current.items():
                buffer.chain_readers.append(keys[device])
            relaid = (
                nbytes
                if step.kind == "all_gather"
                and gathered_minor(reads, step.result, _local_sig(value.sig, step.result, mesh))
                else 0
            )
            current = {
                d: _Buffer(
                    d,
                    keys[d],
                    keys[d],
                    alloc,
                    "communication",
                    kept,
                    relaid=relaid,
                    parts=group.specs[keys[d]].parts,
                    operand=current.get(d) if relaid else None,
                )
                for d in self._simulated(mesh.device_ids)
            }
            held = mesh.device_ids
            made += current.values()
        group.ready[(value, target)] = current
        return made

    def _collective(
        self,
        group: _Group,
        kind: soap.CollectiveKind,
        nbytes: int,
        members: Sequence[Sequence[int]],
        ready_on: Mapping[int, Key | None],
        name: str,
        alloc: Mapping[int, int],
    ) -> dict[int, Key]:
        """One collective per group of devices in `members`: a task on each of them
        simulated, waiting on the value on every device of its group (on every device
        holding it, for a replicate, whose one group spans both device groups); the keys
        by device. A group with no simulated device is left out (`_device_classes`)."""
        keys: dict[int, Key] = {}
        for devices in members:
            simulated = self._simulated(devices)
            if not simulated:
                continue
            duration = self._collective_time(kind, nbytes, tuple(devices))
            waits = devices if kind != "replicate" else list(ready_on)
            deps = tuple(k for k in (ready_on.get(d) for d in waits) if k is not None)
            parts = len(devices) if kind == "all_to_all" else 1
            for device in simulated:
                key = ("grp", group.producer, len(group.specs))
                held = alloc.get(device, 0)
                allocated = (("communication", held),) if held else ()
                group.specs[key] = _Spec(
                    (self._collective_stream, device), duration, deps, allocated, (), name, parts
                )
                keys[device] = key
        return keys

    @property
    def _collective_stream(self) -> str:
        """The resource kind a device's collective tasks run on (module docstring)."""
        return "device" if self.machine.collectives_block_compute else "net"

    def _collective_time(
        self, kind: soap.CollectiveKind, nbytes: int, members: tuple[int, ...]
    ) -> float:
        key = (kind, nbytes, members)
        if key not in self._collective_times:
            self._collective_times[key] = self.machine.collective_time(kind, nbytes, members)
        return self._collective_times[key]

    # ------------------------------------------------------------------ plan facts

    def ops_of_tasks(self) -> dict[int, Node]:
        """Each task's op, by task id: the op it computes, or the op whose results its
        communication moves (a group's collectives). The arguments' tasks and the
        groups of sources (arguments, constants) have none. What a critical path
        (`core.critical_path`) is made of, by op: what a search can move."""
        return {
            task_id: key[1]
            for key, task_id in self._ids.items()
            if key[0] in ("op", "grp") and key[1].inputs  # type: ignore[index]
        }

    def mesh_of(self, node: Node) -> Mesh:
        """The mesh `node` runs on (its configurations are that mesh's)."""
        return self.meshes[self.plan.values[node.results[0]].mesh]

    def _devices_of(self, sharding: Sharding) -> tuple[int, ...]:
        return self.meshes[sharding.mesh].device_ids

    def _simulated(self, devices: Iterable[int]) -> list[int]:
        """Those of `devices` that have tasks of their own (all of them, uncollapsed)."""
        stands_for = self.stands_for
        return [device for device in devices if device in stands_for]

    def _local_bytes(self, value: Value, sharding: Sharding) -> int:
        return shard_bytes(value.sig, sharding, self.meshes[sharding.mesh])

    def _producer(self, value: Value) -> Producer:
        return value.node

    def _values_of(self, producer: Producer) -> list[Value]:
        return list(producer.results)

    def _first_reader(self, value: Value) -> Node:
        return min((use.node for use in self._consumers[value]), key=self._position.__getitem__)

    def _values_read(self, value: Value) -> list[dag_module.Use]:
        """The uses of `value` that read its values (not its shape alone)."""
        return [
            use
            for use in self._consumers.get(value, ())
            if use.operand not in self.rules[use.node].shape_only
        ]

    def _targets(self, value: Value) -> list[Sharding]:
        """The layouts `value` is read in or leaves in, other than its own: readers'
        first (in program order), then the program results'."""
        here = self.plan.values[value]
        uses = sorted(self._values_read(value), key=lambda u: self._position[u.node])
        wanted = [self.plan.operands[use.node][use.operand] for use in uses]
        wanted += [self.plan.outputs[index] for index in self._exits.get(value, ())]
        return [t for t in dict.fromkeys(wanted) if t != here]

    def _exit(self, index: int) -> Sharding:
        """As `plan.complete` decides it: the argument's layout for a result replacing
        one, else the result completed."""
        replaced = self._replaces.get(index)
        if replaced is not None:
            return self.plan.values[self.dag.args[replaced].out]
        return completed(self.plan.values[self.dag.outputs[index]])

    def _kept(self, value: Value, layout: Sharding) -> bool:
        """Whether `value` laid out as `layout` is a result of the program (kept to the end)."""
        exits = self._exits.get(value)
        return exits is not None and any(self.plan.outputs[i] == layout for i in exits)

    def _donated(self, value: Value, layout: Sharding) -> bool:
        """Whether `value` in `layout` is written into a donated argument's buffer."""
        return any(
            index in self._replaces and self.plan.outputs[index] == layout
            for index in self._exits.get(value, ())
        )

    def _describe(self, value: Value) -> str:
        node = value.node
        if node.is_arg:
            return f"%{node.attr('name')}"
        return f"{node.op} #{self._position[node]}"


# ---------------------------------------------------------------------- helpers


def _moved_values(before: _Group, after: _Group, renamed: bool) -> set[Value]:
    """The values whose readers must be looked at again after a group was rebuilt: a
    layout of theirs became readable after another task, or somewhere else, or after
    a task of the group when its tasks were made anew (`renamed`: new ids)."""
    moved = set()
    for layout in before.ready.keys() | after.ready.keys():
        old, new = before.ready.get(layout, {}), after.ready.get(layout, {})
        old_ready = {d: b.ready for d, b in old.items()}
        new_ready = {d: b.ready for d, b in new.items()}
        if old_ready != new_ready or (
            renamed and any(key is not None and key[0] == "grp" for key in new_ready.values())  # type: ignore[index]
        ):
            moved.add(layout[0])
    return moved


GROUPS_KEPT = 1 << 15
"""The most groups `_groups_of` keeps per context before it starts again: a few times
a step's producers (3,000 to 6,000 ops), some hundreds of proposals' new groups."""


@functools.lru_cache(maxsize=4)
def _groups_of(context: Hashable) -> dict[Hashable, _Group]:
    """The groups made by every step of one context (the dag, the machine, the meshes,
    the order of ops, the training roles, whether devices are collapsed): what a
    group depends on besides the plan's few entries its key holds
    (`ShardedStep._group_key`)."""
    return {}


@functools.lru_cache(maxsize=16)
def _rules_and_local(dag: Dag) -> tuple[Mapping[Node, OpRule], frozenset[Value]]:
    """Each op's SOAP rule (constants have none) and the values every device makes
    itself (`local_values`): the dag's alone, so every step a search builds of it
    shares them (3,000 rules of an RNN step are a tenth of a build)."""
    rules = {
        node: soap.rule_of(node.op, [v.sig for v in node.inputs], dict(node.attrs), node.sigs)
        for node in dag.ops
        if node.inputs
    }
    return rules, local_values(dag, rules)


@functools.lru_cache(maxsize=1 << 16)
def _shard_duration(
    op_cost: OpCost,
    node: Node,
    operands: tuple[Sharding, ...],
    results: tuple[Sharding, ...],
    mesh: Mesh,
    device: Device,
) -> float:
    """`node`'s compute task's seconds reading `operands` and making `results` on
    `mesh` (`_priced` at the local shapes), kept across steps and edits: every start of
    a search, and every proposal's readers re-specced, ask again for the same few
    layouts of each op, and the local shapes cost more than the lookup."""
    local_in = tuple(
        _local_sig(v.sig, need, mesh) for v, need in zip(node.inputs, operands, strict=True)
    )
    local_out = tuple(
        _local_sig(v.sig, layout, mesh) for v, layout in zip(node.results, results, strict=True)
    )
    return _priced(op_cost, node, local_in, local_out, device)


@functools.lru_cache(maxsize=1 << 16)
def _priced(
    op_cost: OpCost,
    node: Node,
    local_inputs: tuple[TensorSig, ...],
    local_results: tuple[TensorSig, ...],
    device: Device,
) -> float:
    """`op_cost` of one shard, kept across steps: a search builds a step per chain and
    per candidate, all of the same ops, and an edit flips an op between a few shapes."""
    return op_cost(node, local_inputs, local_results, device)


@functools.lru_cache(maxsize=1 << 16)
def shard_bytes(sig: TensorSig, sharding: Sharding, mesh: Mesh) -> int:
    """Bytes of one device's block (the same shapes recur layer after layer and edit
    after edit)."""
    return math.prod(sharding.local_shape(sig.shape, mesh)) * sig.dtype.itemsize


@functools.lru_cache(maxsize=1 << 16)
def _local_sig(sig: TensorSig, sharding: Sharding, mesh: Mesh) -> TensorSig:
    return TensorSig(sharding.local_shape(sig.shape, mesh), sig.dtype)


@functools.lru_cache(maxsize=1 << 12)
def axis_groups(mesh: Mesh, axes: tuple[str, ...]) -> list[list[int]]:
    """The devices of `mesh` that communicate together over `axes`: those whose
    positions differ only along them (row-major positions, mesh device ids)."""
    groups: dict[tuple[int, ...], list[int]] = {}
    sizes = [range(size) for _, size in mesh.axes]
    for device, coords in zip(mesh.device_ids, itertools.product(*sizes), strict=True):
        rest = tuple(c for (axis, _), c in zip(mesh.axes, coords, strict=True) if axis not in axes)
        groups.setdefault(rest, []).append(device)
    return list(groups.values())


def _device_classes(
    meshes: Collection[Mesh], machine: Machine, collapse: bool
) -> dict[int, tuple[int, ...]]:
    """Which devices one device's tasks can stand for, exactly.

    Every op runs on all devices of its mesh, each shard of the same local shape, and a
    collective over some mesh axes runs once per group of devices differing only
    along them. So the devices of one mesh run the same tasks, of the same lengths, in
    the same order, and their timelines and memory are identical (by induction over
    the order tasks are taken), provided nothing tells them apart: every two meshes'
    device sets are equal or disjoint (no task covers part of a mesh), and every
    group a collective can run over on a mesh has the same shape on the machine
    (`Machine.group_shape`, all a collective's time depends on), so all groups of one
    collective take equally long. Then each mesh's devices are simulated as one, its
    smallest id, and the task graph shrinks by the mesh's size: what makes a search
    at 64 devices as fast as at 4. Otherwise, or without `collapse`, each device is
    its own.
    """
    sets = {frozenset(mesh.device_ids) for mesh in meshes}
    alone = {device: (device,) for devices in sets for device in devices}
    if not collapse or sum(map(len, sets)) != len(alone):  # two sets overlap
        return alone
    for mesh in meshes:
        for count in range(1, len(mesh.axes) + 1):
            for axes in itertools.combinations(mesh.axis_names, count):
                shapes = {machine.group_shape(group) for group in axis_groups(mesh, axes)}
                if len(shapes) > 1:
                    return alone
    return {min(devices): tuple(sorted(devices)) for devices in sets}


DIVIDED = frozenset({"softmax"})
"""Ops whose result XLA never writes as such: it keeps a softmax's `exp(x - max x)`
(`EXPONENTIATING`) and its sum, and each reader divides inside its own loop, so a
transpose of the result is a loop of its own, written, which no dot can fold (the
transformer's attention: `copy_bitcast_fusion.1`, the probabilities transposed for
the gradient of the values, 64 KB held from the forward to the backward beside the
exponent)."""


COMPUTED_IN_READERS: dict[str, int] = {"batchnorm_train": 0}
"""Ops of several results one of which (by index) XLA computes element by element from
the op's input and its other results, inside each reader's loop: a training
batchnorm's normalized output `(x - mean) * rsqrt(var + eps) * scale + bias`, of its
input and its batch statistics (JAX's kernel, `backends/jax/backward.py`). The op still
runs, as the reductions making its statistics; where every reader of that result is
element-wise, the result is never written and its readers read the op's input, which
lives until they run (`fused_away`). ResNet-50 data parallel on 2 CPU devices, 4
samples each: the stem's relu of the normalized convolution is one loop,
`transpose_copy_fusion.259 = fusion(param.275, copy.1183, add_rsqrt_fusion.52,
ynn_fusion.153, psum.2240)` (the bias, a copy of the scale, 1/sqrt(var + eps), the
convolution, the all-reduced mean), and the relu's gradient `broadcast_select_fusion`
reads the convolution `ynn_fusion.153` and the statistics again: no buffer of the
normalized output, where the simulator held one per batchnorm from the forward to the
backward (ResNet-101 at 64 samples a device: 4.2 of its 12.8 GB, docs/benchmarks.md
"ResNet-101 on K80s, traced")."""


def fused_away(
    value: Value, readers: Collection[Node], elementwise: Callable[[Node], bool] | None = None
) -> bool:
    """Whether XLA never writes `value`, an op's result, its `readers` reading the op's
    operands instead, which then live until those readers run
    (`ShardedStep._buffers_of`):

    * a `reshape` of a row-major array is a bitcast: the same buffer;
    * a `transpose` read only by matmuls is folded into their dimension numbers
      (XLA's transpose folding: `dot(x, transpose(w))` contracts w's other dim),
      unless it transposes a softmax (`DIVIDED`), whose division it computes;
    * an op XLA computes element by element (`elementwise`, at global shapes when
      None) whose readers are all such ops, or batchnorm gradients
      (`FUSING_REDUCTIONS`), is computed inside each reader's loop (XLA's loop
      fusion; a collective, a contraction or another reduction reads a materialized
      operand);
    * the result of an op of several that XLA computes element by element
      (`COMPUTED_IN_READERS`: a training batchnorm's normalized output) whose readers
      are all such ops likewise.

    Otherwise only an op of one result that something reads."""
    node = value.node
    if not readers:
        return False
    pointwise = elementwise or computed_elementwise
    if value.index == COMPUTED_IN_READERS.get(node.op):
        return all(map(pointwise, readers))
    if len(node.results) != 1:
        return False
    ops = {reader.op for reader in readers}
    if node.op == "reshape":
        return True
    if node.op == "transpose" and ops == {"matmul"}:
        return node.inputs[0].node.op not in DIVIDED
    return pointwise(node) and all(r.op in FUSING_REDUCTIONS or pointwise(r) for r in readers)


FUSING_REDUCTIONS = frozenset({"batchnorm_grad"})
"""Ops whose reductions take an element-wise producer into their own loops, so that
it is never written where its other readers are element-wise too (`fused_away`): a
batchnorm gradient's sums over the batch and the image of `dy` and `dy * x_hat`, and
its element-wise result, each compute the relu gradient `dy` is. One bottleneck on 8
devices: `select_reduce_fusion = f32[16] fusion(ynn_fusion, ...)` reads the pooled
gradient (`ynn_fusion = f32[2,16]`), the convolution's output and the statistics,
and no buffer holds the last relu's gradient; six bottlenecks: XLA 705,660 B a device,
simulated 708,348 B (+0.4 %), 732,284 B (+3.8 %) with each relu gradient a batchnorm
gradient reads written (docs/benchmarks.md, "Per-device memory: batchnorm networks
against XLA"). Other reductions (`reduce`) keep reading a written operand: not
traced here."""


CHEAP = frozenset(
    {
        "abs",
        "add",
        "broadcast",
        "cast",
        "compare",
        "max",
        "min",
        "mul",
        "neg",
        "relu",
        "relu_grad",
        "scale",
        "sub",
        "where",
        "and",
        "or",
        "not",
        "xor",
    }
)
"""Element-wise ops XLA's instruction fusion does not count as expensive
(`InstructionFusion::IsExpensive`: a divide, a power, a square root and the
transcendental functions are; adds, multiplies, comparisons and selects are not), so
it duplicates them into every reader that can fuse them (`duplicated_into`)."""


RELAYOUTS = frozenset({"reshape", "transpose"})
"""Ops `fused_away` treats as views of their operand's buffer (a bitcast, a transpose
folded into a dot), not as loops computing it."""


def duplicated_into(
    node: Node, readers: Collection[Node], elementwise: Callable[[Node], bool] | None = None
) -> tuple[Node, ...]:
    """The `readers` that compute `node` inside their own loop although another reader
    needs its result written: XLA's instruction fusion duplicates a cheap element-wise
    producer (`CHEAP`) into each element-wise consumer, which then reads the
    producer's operands, not its result, and keeps the producer for the consumers that
    cannot fuse it (a contraction, a reduction). A transformer's relu, read by the
    next matmul and the weight gradient (written: `broadcast_maximum_fusion.1`) and by
    its gradient (`compare_select_fusion`, which reads the matmul's result
    `ynn_fusion.26` and computes `max(x, 0)` itself): the relu's input lives until the
    gradient, its output until the last matmul reading it. Empty where `node` is not
    such a producer, or `fused_away` (no reader needs it written). A reshape or a
    transpose reading it reads its buffer (a bitcast, a dot's operand)."""
    pointwise = elementwise or computed_elementwise
    if len(node.results) != 1 or node.op not in CHEAP or not pointwise(node):
        return ()
    inside = tuple(r for r in readers if r.op not in RELAYOUTS and pointwise(r))
    return inside if len(inside) < len(readers) else ()


def computed_elementwise(node: Node, operands: Sequence[TensorSig] | None = None) -> bool:
    """Whether XLA computes `node` element by element, a loop its readers' loops can
    take in (`fused_away`), on operands of the shapes `operands` (its own when None):
    a `Fusible` op, or a matmul contracting a dimension of size 1. That is an outer
    product, which XLA's algebraic simplifier rewrites as a multiply of two broadcasts
    (checked: `a.T @ b` of (1, m) and (1, n) compiles to one loop fusion, of (2, m)
    and (2, n) to a dot); rnnlm's data-parallel step, one sample per device, has its
    weight gradients so, each a sum over time steps of such products that XLA
    computes in one loop without ever writing a product."""
    if node.op in FUSIBLE:
        return True
    if node.op in BROADCAST_GRADIENTS:
        return node.attr("kind") in BROADCAST_GRADIENTS[node.op]
    sigs = operands if operands is not None else [value.sig for value in node.inputs]
    return node.op == "matmul" and sigs[0].shape[-1] == 1


BROADCAST_GRADIENTS: dict[str, frozenset[str]] = {"reduce_grad": frozenset({"sum", "mean"})}
"""Gradients that are `dy` broadcast back over the reduced axes (scaled, for a mean),
by their kinds: XLA computes a broadcast inside each loop reading it, so where its
readers are element-wise it is never written (`fused_away`) and they read `dy`
itself. A global average pooling's gradient, `f32[2,16,16,16]` per device for six
bottlenecks on 8 devices: XLA's fusions of the relu's and the batchnorm's gradients
read the pooled gradient `f32[2,16]` (one bottleneck: `psum.235`, the operand of
`transpose_copy_fusion.1` and `subtract_multiply_fusion.3`) and broadcast it in their
loops, no buffer of the broadcast; the simulator held the broadcast from the loss's
gradient to the first block's gradient (XLA 705,660 B a device; simulated 708,348 B,
+0.4 %, 739,708 B, +4.8 %, with the broadcast held)."""


def convolution_layouts(value: Value, readers: Iterable[Node]) -> list[list[Node]]:
    """The convolutions among `readers` of `value` grouped by the layout they read it
    in (`CONVOLUTION_LAYOUTS`): one group per buffer XLA makes of it."""
    groups: dict[tuple[int, ...], list[Node]] = {}
    for node in dict.fromkeys(readers):
        for index, operand in enumerate(node.inputs):
            order = CONVOLUTION_LAYOUTS.get((node.op, index))
            if order is not None and operand == value:
                groups.setdefault(order, []).append(node)
    return list(groups.values())


def kernel_in_place(node: Node, index: int, shape: Sequence[int]) -> bool:
    """Whether convolution `node` reads its operand `index`, a kernel of local `shape`
    (OIHW), without a copy: where the layout it wants (`CONVOLUTION_LAYOUTS`) lists
    the dimensions larger than 1 in the kernel's own order, a bitcast. A 1x1 kernel
    for an input gradient (HWOI): ResNet-50's `bitcast.282 = f32[1,1,64,64]` of the
    copy of its `f32[64,64,1,1]` (its 17 `copy_reverse_fusion`s, the input
    gradients' copies, are all of 3x3 kernels). An image
    is copied even so (alexnet's ILP plan, one image a device: `bitcast_copy_fusion.8
    = f32[3,127,127,1]` of the images' `f32[1,3,127,127]`)."""
    if (node.op, index) not in KERNELS:
        return False
    order = CONVOLUTION_LAYOUTS[(node.op, index)]
    return [d for d in order if shape[d] > 1] == [d for d in range(4) if shape[d] > 1]


KERNELS = frozenset({("conv2d", 1), ("conv2d_grad_input", 1)})
"""The (op, operand) of `CONVOLUTION_LAYOUTS` that are kernels (`kernel_in_place`)."""


@functools.lru_cache(maxsize=1 << 12)
def ancestors(node: Node) -> frozenset[Node]:
    """The ops `node` depends on (its operands' makers, and theirs)."""
    seen: set[Node] = set()
    stack = [value.node for value in node.inputs]
    while stack:
        top = stack.pop()
        if top not in seen and not top.is_arg:
            seen.add(top)
            stack.extend(value.node for value in top.inputs)
    return frozenset(seen)


def _share_dying_operands(
    temps: list[Temp],
    written: Mapping[Node, int],
    read: Mapping[Node, list[int]],
    elementwise: Callable[[Node], bool],
    aliased: Collection[int] = (),
) -> None:
    """Hand an element-wise op's result the buffer of an operand it reads for the last
    time, of its size, as XLA's buffer assignment does (a loop fusion may write its
    output over an operand it reads element by element, `CanShareOperandBufferWithUser`):
    that operand's temporary in `temps` then ends just before the op, whose result
    takes over its bytes (candle_uno's expert plan: the scaled 1.3 MB gradient of the
    largest weight written over the matmul's result). The operands are those
    `read` says the op's kernel reads (through the ops fused into it); `written` is
    each op's result in `temps`.

    An operand in `aliased` is never handed on: its buffer holds two values already
    (a `made_at_start` op's copy of the zeros, then its result written in place), and
    XLA's heap simulator shares no buffer of several values with a user
    (`HeapSimulator::RunComputation`: "We don't support sharing an aliased buffer"):
    dlrm's scaled embedding gradients (`broadcast_multiply_fusion.1 =
    fusion(wrapped_scatter.7)`) each take a buffer of their own."""
    taken: set[int] = set(aliased)
    for node, index in written.items():
        start, _, nbytes, _ = temps[index]
        if not elementwise(node):
            continue
        for operand in read.get(node, ()):
            first, last, size, kind = temps[operand]
            if last == start and size == nbytes and first < start and operand not in taken:
                temps[operand] = (first, start - 1, size, kind)
                taken.add(operand)
                break


SELECTED = frozenset({"embedding"})
"""Ops XLA computes as a loop although they are not element-wise: an embedding lookup
is a gather whose rows out of range a select fills (`jnp.take(..., mode="fill")`),
fused into one loop that writes any layout (rnnlm's ILP plan:
`broadcast_select_fusion.1 = f32[8,8,16]{1,0,2}`, written in the layout
`all_gather.18` gathers in, `ShardedStep._written_gathered`)."""


class _Donated(NamedTuple):
    """A donated argument's buffer on one device (`ShardedStep._buffers_of`): its
    bytes, the position of its old value's last read (its copy's, where XLA copies it),
    the position of the update writing the new value there, and the temporaries (by
    index) the update reads element by element at its size, which it may write over."""

    nbytes: int
    read_to: float
    written_at: int
    shared: frozenset[int]


def _outside_donated(temps: list[Temp], donated: Sequence[_Donated]) -> list[Temp]:
    """`temps` but those XLA's buffer assignment places in a donated argument's buffer,
    as its `BufferAssigner` does before it packs what is left into the heap of
    temporaries: it visits buffers by decreasing size (ties in program order) and
    gives each the smallest existing allocation (the later argument first among equal
    sizes) that is large enough and holds no value whose life overlaps its own, at
    offset 0 — one value at a time. A donated argument's buffer holds the old weight
    until its last read (its copy, where XLA copies it: `memory`) and the new one from
    its update on; in between it takes temporaries: other weights' copies, gradients,
    all-reduces' results, activations (candle_uno's data parallel step: `param.32`'s
    buffer holds `copy.41`, the copy of the next weight, then a gradient; the
    transformer's: `param.34`'s holds `copy.105`, an all-reduce's result and the
    update). A temporary the update reads for the last time at its size may end where
    the update starts (the update writes over it)."""
    if not donated:
        return temps
    held = [_Lives() for _ in donated]  # what each holds besides its old and new value
    order = sorted(range(len(donated)), key=lambda i: (donated[i].nbytes, -i))
    sizes = [donated[i].nbytes for i in order]
    outside = []
    shared = frozenset().union(*(one.shared for one in donated))
    failed = None  # a temporary no buffer took, while no buffer has taken one since
    keys = [(-nbytes, start) for start, _, nbytes, _ in temps]
    for index in sorted(range(len(temps)), key=keys.__getitem__):
        start, end, nbytes, _ = temps[index]
        if failed == temps[index][:3] and index not in shared:
            outside.append(temps[index])  # an equal one's answer (an all-to-all's blocks)
            continue
        for i in order[bisect.bisect_left(sizes, nbytes) :]:  # those it fits in, smallest first
            one = donated[i]
            last = end - 1 if end == one.written_at and index in one.shared else end
            if last >= one.written_at or (one.read_to >= start and last >= 0):
                continue  # it overlaps the old value (until `read_to`) or the new
            if not held[i].overlaps(start, last):
                held[i].add(start, last)
                failed = None
                break
        else:
            outside.append(temps[index])
            failed = None if index in shared else temps[index][:3]
    return outside


class _Lives:
    """Lives (first, last position, both included) of values one buffer holds, none
    overlapping another: kept sorted by first, so their lasts are sorted too and
    an overlap test is one bisection (`_outside_donated`). A life ending before it
    starts (a temporary the update writes over, ending where it starts) is kept
    aside and tested one by one."""

    def __init__(self) -> None:
        self.firsts: list[float] = []
        self.lasts: list[float] = []
        self.odd: list[tuple[float, float]] = []

    def overlaps(self, first: float, last: float) -> bool:
        """Whether [first, last] overlaps a life held: the latest starting by `last`
        is the one ending latest among those."""
        at = bisect.bisect_right(self.firsts, last) - 1
        if at >= 0 and self.lasts[at] >= first:
            return True
        return any(not (last < start or end < first) for start, end in self.odd)

    def add(self, first: float, last: float) -> None:
        if last < first:
            self.odd.append((first, last))
            return
        at = bisect.bisect_right(self.firsts, first)
        self.firsts.insert(at, first)
        self.lasts.insert(at, last)


def _most_live(temps: Sequence[Temp]) -> list[tuple[str, int]]:
    """The (kind, bytes) of the temporaries live together where the most bytes are:
    (first, last, bytes, kind) intervals of positions, both ends included."""
    events = sorted(
        [(start, 0, i) for i, (start, _, _, _) in enumerate(temps)]
        + [(end, 1, i) for i, (_, end, _, _) in enumerate(temps)]
    )  # at one position, every start before any end
    held = most = 0
    peak = -1
    for number, (_, ending, index) in enumerate(events):
        held += -temps[index][2] if ending else temps[index][2]
        if held > most:
            most, peak = held, number
    live: dict[int, None] = {}
    for _, ending, index in events[: peak + 1]:
        if ending:
            del live[index]
        else:
            live[index] = None
    return [(temps[i][3], temps[i][2]) for i in live]


def _packed(temps: Sequence[Temp]) -> tuple[int, str | None]:
    """The size of the heap XLA packs `temps` into, and the kind of the temporary at
    its top (None without temporaries). XLA's buffer assignment places the temporaries
    left after `_outside_donated` with its heap simulator's
    `GlobalDecreasingSizeBestFitHeap`, twice — buffers in decreasing size (then
    decreasing life), and in decreasing life (then size) — each placed over its life
    in the smallest gap between those placed before that fits it, or on top; and
    keeps the smaller heap (`ChooseBestHeapAlgorithm`). Its gaps can make the heap
    more than the most bytes ever live: dlrm's expert plan, whose eight embedding
    gradients, their scaled copies and all-reduces end and start interleaved, takes
    16.7 MB of heap for 11.6 MB live.

    A life is measured on the heap simulator's own clock (`_event_times`), which
    ticks once per allocation and once per free, not once per instruction: that
    decides which of two buffers of one size is placed first."""
    return _Heap(temps).packed()


def _spatial(temp: Temp) -> tuple[float, float, float]:
    """`_packed`'s first order: decreasing size, then decreasing life, then first."""
    return (-temp[2], temp[0] - temp[1], temp[0])


def _temporal(temp: Temp) -> tuple[float, float, float]:
    """`_packed`'s second order: decreasing life, then decreasing size, then first."""
    return (temp[0] - temp[1], -temp[2], temp[0])


class _Heap:
    """A device's temporaries and what is found of the heap XLA packs them into
    (`_packed`), each part once: the bytes live at once, each of the two packings."""

    def __init__(self, temps: Sequence[Temp]) -> None:
        self.temps = temps
        self._live: list[tuple[str, int]] | None = None
        self._timed: list[Temp] | None = None
        self._fits: dict[Callable[[Temp], tuple[float, float, float]], tuple[int, str]] = {}

    @property
    def live(self) -> list[tuple[str, int]]:
        """`_most_live` of the temporaries."""
        if self._live is None:
            self._live = _most_live(self.temps)
        return self._live

    def fit(self, order: Callable[[Temp], tuple[float, float, float]]) -> tuple[int, str]:
        """The best-fit packing in `order` (`_spatial`, `_temporal`), lives on the heap
        simulator's clock (`_event_times`)."""
        if order not in self._fits:
            if self._timed is None:
                self._timed = _event_times(self.temps)
            self._fits[order] = _best_fit(sorted(self._timed, key=order), ticked=True)
        return self._fits[order]

    def packed(self) -> tuple[int, str | None]:
        """`_packed`: the smaller packing (the first of equal ones), None without
        temporaries."""
        if not self.temps:
            return 0, None
        return min(self.fit(_spatial), self.fit(_temporal), key=lambda fit: fit[0])

    def bounds(self, room: int) -> tuple[int, float]:
        """Bounds (low, high) on the heap that tell whether it exceeds `room`, exact
        where they meet, at the least cost: the heap is the smaller of two best-fit
        packings, so at least the most bytes live at once (a sort: over `room`, no
        packing is done) and at most either packing (the first within `room`: the
        second is not done); else both, the heap itself. Over `room`, `high` is
        infinite."""
        if not self.temps:
            return 0, 0 if room >= 0 else math.inf
        live = sum(nbytes for _, nbytes in self.live)
        if live > room:
            return live, math.inf
        first = self.fit(_spatial)[0]
        if first <= room:
            return live, first
        heap = self.packed()[0]
        return heap, heap if heap <= room else math.inf


def _heap_bounds(temps: Sequence[Temp], room: int) -> tuple[int, float]:
    """`_Heap.bounds` of `temps`."""
    return _Heap(temps).bounds(room)


def _event_times(temps: Sequence[Temp]) -> list[Temp]:
    """`temps` with their positions replaced by the heap simulator's clock: XLA's
    `HeapSimulator` replays the schedule position by position, allocating the buffers
    defined there (by first, then last position, then id: here the order in `temps`)
    and then freeing those whose life ends there, and its best-fit heap stamps each
    allocation and free with a counter that ticks once per event
    (`GlobalDecreasingSizeBestFitHeap::Alloc`, `Free`). The order of lives — which of
    two buffers of one size it places first — is in those ticks: a span of the
    schedule where many small buffers come and go is long, one of few large
    instructions is short. In dlrm's expert plan the eight all-reduces of the
    embedding gradients span 10 instructions and 40 ticks, the scaled gradients
    feeding them 24 instructions and 26 ticks, so XLA places the all-reduces first
    and the scaled gradients find no slot but on top (XLA's dump replayed this way
    gives its heap within 0.01 %; on instruction positions, 23 % less). Overlap is
    unchanged: a free at a position comes after every allocation there, as both ends
    of a position interval are included."""
    order = sorted(range(len(temps)), key=lambda i: (temps[i][0], temps[i][1], i))
    events = sorted((temps[i][end], end, rank, i) for rank, i in enumerate(order) for end in (0, 1))
    ticks = {(i, end): tick for tick, (_, end, _, i) in enumerate(events)}
    return [(ticks[i, 0], ticks[i, 1], size, kind) for i, (_, _, size, kind) in enumerate(temps)]


def _best_fit(temps: Sequence[Temp], ticked: bool = False) -> tuple[int, str]:
    """The heap of `temps` placed in this order, each in the smallest gap that fits it
    among those placed before whose lives overlap its own (else on top), and the kind
    at its top (`_packed`). Blocks placed at one offset are sorted by offset alone:
    of several starting at one offset only the first can open a gap (the others'
    start under its top), and its gap is the same whichever comes first.

    `ticked`: the lives are on the heap simulator's clock (`_event_times`), every first
    and last a tick of its own; then a run of equal blocks (`_run`: an all-to-all's 64
    blocks at 64 devices, most of a step's temporaries on some plans) is placed at
    once, the same offsets as one by one (`_placed_together`), for one look at the
    blocks placed before instead of one per block."""
    firsts = np.fromiter((temp[0] for temp in temps), float, len(temps))
    lasts = np.fromiter((temp[1] for temp in temps), float, len(temps))
    lows, highs = np.empty(len(temps), np.int64), np.empty(len(temps), np.int64)
    top, kind = 0, temps[0][3]
    count = 0
    while count < len(temps):
        first, last, nbytes, _ = temps[count]
        run = _run(temps, count) if ticked else 1
        overlap = ((lasts[:count] >= first) & (firsts[:count] <= last)).nonzero()[0]
        if run > 1:
            offsets = _placed_together(lows[overlap], highs[overlap], nbytes, run)
        else:
            offsets = [_placed(lows[overlap], highs[overlap], nbytes)]
        for offset in offsets:
            lows[count], highs[count] = offset, offset + nbytes
            if offset + nbytes > top:
                top, kind = offset + nbytes, temps[count][3]
            count += 1
    return top, kind


def _placed(low: np.ndarray, high: np.ndarray, nbytes: int) -> int:
    """The offset of a block of `nbytes` among placed blocks (`low`, `high`, in the
    order placed) whose lives overlap its own (`_best_fit`): the lowest of the smallest
    gap that fits it, else on top of them."""
    if not low.size:
        return 0
    gaps, below, top = _gaps(low, high)
    smallest = np.where(gaps >= nbytes, gaps, _NO_GAP).argmin()
    if gaps[smallest] >= nbytes:  # the smallest gap that fits, the lowest of equals
        return int(below[smallest])
    return top


def _gaps(low: np.ndarray, high: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """The placed blocks (`low`, `high`, in the order placed) by offset: the gap below
    each, the top of those below it (where a block put in that gap lies), and the top
    of them all."""
    by_low = low.argsort(kind="stable")
    low, high = low[by_low], high[by_low]
    tops = np.maximum.accumulate(high)
    below = np.concatenate((_ZERO, tops[:-1]))
    return low - below, below, int(tops[-1])


def _run(temps: Sequence[Temp], at: int) -> int:
    """How many blocks from `at` on form a run `_placed_together` places at once: of
    one size (not 0), the j-th living from the first's first + j to its last + j, all
    overlapping one another. On the heap simulator's clock (ticks of their own) no
    other block starts or ends among a run's ticks, so every block placed before
    overlaps all of a run's blocks or none, and they meet the same gaps."""
    first, last, nbytes, _ = temps[at]
    if not nbytes:
        return 1
    end = at + 1
    while (
        end < len(temps)
        and temps[end][2] == nbytes
        and temps[end][0] == first + (end - at)
        and temps[end][1] == last + (end - at)
        and temps[end][0] < last
    ):
        end += 1
    return end - at


def _placed_together(low: np.ndarray, high: np.ndarray, nbytes: int, run: int) -> list[int]:
    """The offsets `_placed` gives `run` blocks of `nbytes` placed one after another,
    each overlapping the blocks placed before (`low`, `high`) and the run's blocks
    before it. A block put in a gap lies at its bottom: that gap shrinks by `nbytes`
    and keeps its place among the gaps (the block's own gap below it is 0, too small
    for the next); a block on top raises the top. So the gaps that fit are a heap
    by (size, place), and the top a counter."""
    if low.size:
        gaps, below, end = _gaps(low, high)
        fitting = [(int(gaps[i]), int(i), int(below[i])) for i in (gaps >= nbytes).nonzero()[0]]
        heapq.heapify(fitting)
    else:
        fitting, end = [], 0
    offsets = []
    for _ in range(run):
        if fitting:
            gap, place, bottom = heapq.heappop(fitting)
            offsets.append(bottom)
            if gap - nbytes >= nbytes:
                heapq.heappush(fitting, (gap - nbytes, place, bottom + nbytes))
        else:
            offsets.append(end)
            end += nbytes
    return offsets


_ZERO = np.zeros(1, np.int64)
"""The top below the lowest block (`_best_fit`)."""

_NO_GAP = np.iinfo(np.int64).max
"""A gap too small, in `_best_fit`'s search for the smallest that fits."""


def _summed(entries: Iterable[tuple[str, int]]) -> tuple[tuple[str, int], ...]:
    """Bytes by kind, in `KINDS` order, without zeros."""
    total: dict[str, int] = {}
    for kind, nbytes in entries:
        if nbytes:
            total[kind] = total.get(kind, 0) + nbytes
    if len(total) < 2:  # most tasks allocate or free one kind, or none
        return tuple(total.items())
    return tuple((kind, total[kind]) for kind in KINDS if kind in total)


def _pooled(
    pool: Hashable, entries: tuple[tuple[str, int], ...]
) -> tuple[tuple[Hashable, int], ...]:
    if not entries:
        return ()
    total = sum(n for _, n in entries)
    return ((pool, total),) if total else ()


def _free_values(dag: Dag, signature: TrainingSignature | None) -> frozenset[Value]:
    """Values laid out as their first reader wants them (`plan.complete`): inputs and
    labels without a sharding fixed by hand, and constants."""
    fixed = set(signature.params + signature.state) if signature else set()
    free = {
        arg.out
        for i, arg in enumerate(dag.args)
        if i not in fixed
        and not arg.attr("is_param")
        and not any(isinstance(a, ShardingAttr) for _, a in arg.attr("attributes"))
    }
    free.update(v for node in dag.ops if not node.inputs for v in node.results)
    return frozenset(free)
