"""Lower a memory-placed program (the `memory` dialect) to JAX on one device.

A placed program says where each value lives and when it moves (`tasoc/ir/memory.py`,
docs/memory.md): host values are tensors typed `#memory.space<host>`, `memory.swap_out`
and `memory.swap_in` copy between the spaces, `memory.free` ends a value, and the block
order is the schedule. JAX has the same two spaces as memory kinds of one device
(`device`, and `pinned_host` for host memory a GPU's copy engines can reach; JAX 0.12's
CPU devices have both), so the lowering is direct. It comes in two modes:

- **compiled** (`lower_placed(module, "compiled")`): one `jax.jit` program for XLA. Host
  arguments and results are laid out in `pinned_host` memory (`in_shardings`,
  `out_shardings`), a swap is `jax.device_put` to the other memory kind inside the
  program (XLA's host offloading turns it into an asynchronous copy on a GPU), and a
  free is nothing: XLA owns the buffers (so is `memory.in_place`: XLA's buffer
  assignment shares a dying operand's buffer with an element-wise result by itself).
  The schedule's order is kept with optimization barriers (`ordered`, which says what
  that guarantees and what it cannot), and XLA's rematerialization is off
  (`NO_REMAT`), since recomputing values behind the plan's back would make the program
  hold memory the plan does not know of, and spend time on it.
- **runtime** (`lower_placed(module, "runtime")`): the schedule run op by op from
  Python, the mode that reproduces a schedule exactly (for checking the simulator and
  the replay): each `graph` op is its own compiled call (one per distinct op, operand
  types and attributes), a swap is an asynchronous `jax.device_put` to the other memory
  kind, `memory.free` and a value's last reader delete its array (`Array.delete`), as
  `memory.replay` releases it. After every op the live device bytes are sampled from
  `jax.live_arrays()` (`RuntimeProgram.measure`, `Measured`), which is the replay's
  figure, op by op, when the runtime does what the plan says.

The schedule detached from xDSL (`read_schedule`), its order-keeping program (`ordered`)
and the op-by-op runtime (`runtime_program`) do not depend on where the values lie: a
sharded program that is placed too runs on them with its values on a mesh
(`joint.py`), each op a shard_map instead of a one-device call.

`cuda_placements` is the evidence of what a GPU would run, without one: it cross-lowers
the compiled mode for CUDA and counts the host-memory placements in the StableHLO (the
CPU lowering elides a `device_put` inside a program, since a CPU's two memory kinds are
one memory; the CUDA lowering keeps each as an `annotate_device_placement` call).
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, overload

import jax
from jax import lax
from jax.sharding import SingleDeviceSharding
from xdsl.dialects import func
from xdsl.dialects.builtin import IntegerAttr, ModuleOp
from xdsl.ir import Operation, SSAValue

from tasoc.backends.jax.lowering import ShardedArguments, graph_step, jax_dtype
from tasoc.ir.graph import sig_of
from tasoc.ir.memory import (
    IN_PLACE_ATTR,
    FreeOp,
    LiveBytes,
    MoveOp,
    Space,
    SwapInOp,
    device_bytes,
    release_points,
    space_of,
)
from tasoc.ir.parallel import is_sharded
from tasoc.ir.program import ArgInfo, arg_infos, entry_block, entry_function, return_values
from tasoc.ir.shapes import TensorSig

Mode = Literal["compiled", "runtime"]

MEMORY_KINDS: dict[Space, str] = {"device": "device", "host": "pinned_host"}
"""The JAX memory kind of each memory space: host values are pinned, which is the host
memory a GPU copies to and from asynchronously (pageable memory would be staged)."""

NO_REMAT = {"xla_disable_hlo_passes": "rematerialization"}
"""XLA options of the compiled mode: XLA's rematerialization pass (`HloRematerialization`,
which GPU compilers run when a program's peak is over the device's memory) off. The
plan decides what lives where; XLA recomputing values to fit would run a program the
plan and its simulation do not describe."""


class PlacedLoweringError(ValueError):
    """A placed program this lowering cannot run (one line)."""


# ------------------------------------------------------------------ the schedule


class Compute(Protocol):
    """An op that computes (a `graph` op, or on a mesh a collective too), detached from
    xDSL: `run` gives its results from its operands' arrays (traced), values are slots."""

    @property
    def operands(self) -> tuple[int, ...]: ...

    @property
    def results(self) -> tuple[int, ...]: ...

    def run(self, inputs: Sequence[jax.Array]) -> list[jax.Array]: ...


@dataclass(frozen=True, slots=True)
class Move:
    """`memory.swap_out` / `memory.swap_in`: the value in `source` copied to `target`
    in the memory space `space`."""

    source: int
    target: int
    space: Space

    @property
    def operands(self) -> tuple[int, ...]:
        return (self.source,)


@dataclass(frozen=True, slots=True)
class Free:
    """`memory.free`: the value in `slot` ends here (its release is in `releases`)."""

    slot: int

    @property
    def operands(self) -> tuple[int, ...]:
        return (self.slot,)


Entry = Compute | Move | Free


@dataclass(frozen=True, slots=True)
class Schedule:
    """`@main` of a placed program, detached from xDSL: `entries[i]` is op `i` of the
    block (values are slots, arguments first), `keys[i]` what makes two computing ops
    one compiled call (None for moves and frees), `releases[i]` the slots whose life
    ends once op `i` has run (`memory.release_points`, the replay's rule), `donated[i]`
    the operand positions whose buffers op `i` writes its result over
    (`memory.in_place`: its compiled call donates them). Every slot
    has its type (`sigs`) and the bytes one device holds of it as the replay counts
    them (`nbytes`: the whole tensor, or its block on a mesh)."""

    entries: tuple[Entry, ...]
    keys: tuple[Hashable | None, ...]
    releases: tuple[tuple[int, ...], ...]
    donated: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]
    arg_infos: tuple[ArgInfo, ...]
    sigs: tuple[TensorSig, ...]
    nbytes: tuple[int, ...]

    @property
    def result_sigs(self) -> tuple[TensorSig, ...]:
        return tuple(self.sigs[slot] for slot in self.outputs)

    @property
    def consumed(self) -> tuple[int, ...]:
        """Indices of the arguments the program frees."""
        return tuple(
            entry.slot
            for entry in self.entries
            if isinstance(entry, Free) and entry.slot < len(self.arg_infos)
        )


MakeCompute = Callable[[Operation, dict[SSAValue, int]], Compute]
"""Builds the `Compute` of an op reading the slots the dict gives its operands, its
results given the next free slots (added to the dict); ValueError for an op it cannot."""


def read_schedule(module: ModuleOp, compute: MakeCompute) -> Schedule:
    """The schedule of `module`'s `@main`, each op that is not a `memory` op made by
    `compute`; PlacedLoweringError for an op it refuses."""
    function = entry_function(module)
    block = entry_block(function)
    slots: dict[SSAValue, int] = {value: index for index, value in enumerate(block.args)}
    owners: list[Operation] = [function] * len(slots)  # the op each slot's mesh is looked up from
    entries: list[Entry] = []
    keys: list[Hashable | None] = []
    donated: list[tuple[int, ...]] = []
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        key: Hashable | None = None
        reused = op.attributes.get(IN_PLACE_ATTR)
        donated.append((reused.value.data,) if isinstance(reused, IntegerAttr) else ())
        if isinstance(op, MoveOp):
            slots[op.output] = len(slots)
            entries.append(Move(slots[op.input], slots[op.output], op.TARGET))
        elif isinstance(op, FreeOp):
            entries.append(Free(slots[op.input]))
        else:
            try:
                entries.append(compute(op, slots))
            except ValueError as err:
                raise PlacedLoweringError(str(err)) from None
            key = (
                op.name,
                tuple(sorted(op.properties.items())),
                tuple(v.type for v in op.operands),
                tuple(r.type for r in op.results),
                donated[-1],
            )
        keys.append(key)
        owners += [op] * len(op.results)
    values = sorted(slots, key=slots.__getitem__)
    sigs = tuple(sig_of(value.type) for value in values)
    return Schedule(
        entries=tuple(entries),
        keys=tuple(keys),
        releases=tuple(
            tuple(slots[value] for value in released) for released in release_points(function)
        ),
        donated=tuple(donated),
        outputs=tuple(slots[v] for v in return_values(function)),
        arg_infos=tuple(arg_infos(function)),
        sigs=sigs,
        nbytes=tuple(device_bytes(op, sig) for op, sig in zip(owners, sigs, strict=True)),
    )


Layout = Callable[[int], jax.sharding.Sharding]
"""Where a lowering puts the value of a slot: its JAX sharding, in the memory kind of
the value's space (`MEMORY_KINDS`)."""

Jitted = Callable[..., Sequence[jax.Array]]
"""A jitted function (it has `trace`): global arrays in, global arrays out."""


def device_sharding(space: Space, device: jax.Device | None = None) -> SingleDeviceSharding:
    """Where a value of `space` lives: the default device (or `device`), in the memory
    kind of `space` (`MEMORY_KINDS`)."""
    return SingleDeviceSharding(device or jax.devices()[0], memory_kind=MEMORY_KINDS[space])


def boundary(
    schedule: Schedule, layout: Layout
) -> tuple[tuple[jax.sharding.Sharding, ...], tuple[jax.sharding.Sharding, ...]]:
    """The shardings of the schedule's arguments and of its results (`layout`'s)."""
    return (
        tuple(layout(slot) for slot in range(len(schedule.arg_infos))),
        tuple(layout(slot) for slot in schedule.outputs),
    )


@dataclass(frozen=True)
class PlacedProgram(ShardedArguments):
    """A lowered placed program: each argument and result laid out where its type says
    (`in_shardings`, `out_shardings`): in its space's memory kind, on the default
    device or, sharded too, on its mesh."""


@dataclass(frozen=True)
class CompiledProgram(PlacedProgram):
    """The compiled mode on one device: `fn` is one jitted program (compiled on its
    first call)."""


@dataclass(frozen=True)
class Measured(LiveBytes):
    """Device memory measured over one runtime run, in the shape of `memory.Replay`:
    `start` bytes live once the arguments are placed, `live[i]` after op `i` ran (its
    results made, nothing it was the last reader of released yet). The figures are one
    device's, the device holding the most among the program's `devices`; `spread` (the
    arguments, then each op) is how many bytes fewer the device holding the least held,
    all zeros when the devices hold alike, as SPMD devices do.

    The bytes are those of the live arrays in device memory (`jax.live_arrays()`) that
    were not live before the run: the arrays the run holds, whether it meant to or not,
    each counted on every device that holds a block of it, its block's bytes. Each of
    the run's values counts the bytes its IR type has, as the replay counts them:
    without x64 mode JAX holds an i64 value as int32, half the bytes, which is JAX's
    doing and not the plan's (`lowering.jax_dtype`); anything else counts its own."""

    devices: int
    spread: tuple[int, ...]


@dataclass(frozen=True)
class RuntimeProgram(PlacedProgram):
    """The runtime mode: `fn` runs the schedule op by op (`measure`, its measurement
    dropped). Like a donated argument, an argument the program frees is the program's:
    its array is deleted at its `memory.free`, so pass a fresh one to each call."""

    measure: Callable[..., tuple[tuple[jax.Array, ...], Measured]]
    """`measure(*args, progress=None)`: the results and the memory measured;
    `progress(done, total)` hears of each entry of the schedule run."""
    consumed: tuple[int, ...]
    """Indices of the arguments the program frees (deletes)."""
    compiled_ops: int
    """Distinct compiled calls the computing ops share (one per op, attributes and
    operand types)."""


@overload
def lower_placed(
    module: ModuleOp, mode: Literal["compiled"], donate: Sequence[int] = ()
) -> CompiledProgram: ...
@overload
def lower_placed(
    module: ModuleOp, mode: Literal["runtime"], donate: Sequence[int] = ()
) -> RuntimeProgram: ...
@overload
def lower_placed(module: ModuleOp, mode: Mode, donate: Sequence[int] = ()) -> PlacedProgram: ...
def lower_placed(module: ModuleOp, mode: Mode, donate: Sequence[int] = ()) -> PlacedProgram:
    """Lower `@main` of a placed `module` on JAX's default device, in `mode` (module
    docstring). `donate` (compiled mode) are argument indices whose buffers the call may
    reuse, as in `lower`: a training loop donates what the step replaces.

    Raises PlacedLoweringError (a ValueError, one line) for an op without a lowering and
    for a program that is sharded too (`joint.lower_joint` runs it on its mesh).
    """
    if is_sharded(module):
        raise PlacedLoweringError(
            "a program both sharded and memory-placed runs on its mesh (joint.lower_joint), "
            "not on one device"
        )
    schedule = read_schedule(module, graph_step)
    device = jax.devices()[0]
    kinds = {space: device_sharding(space, device) for space in MEMORY_KINDS}

    def layout(slot: int) -> SingleDeviceSharding:
        return kinds[space_of(schedule.sigs[slot])]

    if mode == "runtime":
        return runtime_program(
            schedule,
            layout,
            (device,),
            lambda step, donated: jax.jit(
                lambda *xs: step.run(xs), out_shardings=kinds["device"], donate_argnums=donated
            ),
            donate,
        )
    in_shardings, out_shardings = boundary(schedule, layout)
    fn = jax.jit(
        ordered(schedule, lambda x, space: jax.device_put(x, kinds[space])),
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        donate_argnums=tuple(donate),
        compiler_options=NO_REMAT,
    )
    return CompiledProgram(
        fn=fn,
        arg_infos=schedule.arg_infos,
        result_sigs=schedule.result_sigs,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )


# ------------------------------------------------------------------ compiled mode


def ordered(
    schedule: Schedule, move: Callable[[jax.Array, Space], jax.Array]
) -> Callable[..., tuple[jax.Array, ...]]:
    """The schedule as one function to trace, whose order XLA must keep; `move(x,
    space)` copies an array to the memory kind of `space` (a `jax.device_put`).

    XLA schedules a program's instructions itself, in any order its data dependencies
    allow, so the block order would be lost without dependencies that say it. Each op
    therefore reads its operands through an `optimization_barrier` together with the
    results of the last computing op before it: a barrier's outputs exist only once all
    its inputs do, and XLA neither looks through nor moves computation across it. The
    barriers form one chain, each with the operands of one op and the results of one
    other (linear in the program's size). What the chain guarantees:

    - computing ops (`graph` ops, and collectives on a mesh) run in block order: each
      starts after the one before it has ended (a constant, which reads nothing, is not
      held back; XLA folds it);
    - a swap does not start before the computing op before it has ended, so a swap-in
      cannot be hoisted above where it stands (which would hold its device memory
      longer than planned), nor a swap-out above its place;
    - a swap-in ends before the op it prefetches for starts (it reads its result).

    What it does not guarantee: that a swap starts as soon as it may. The ops after a
    swap do not wait for it (that would serialize copies with compute, which placement
    overlaps), so XLA may start the copy later, as late as its reader allows (a GPU's
    latency-hiding scheduler starts copies as early as their operands allow). Nor does
    it decide when XLA frees a buffer: `memory.free` lowers to nothing, a value dies
    after its last reader as XLA's buffer assignment sees it, and an argument lives
    through the program (an entry parameter), freed or not. The runtime mode is the
    exact one. Host values may pass through the barriers: XLA's host offloader lets
    optimization barriers, tuples and their elements sit on a host-memory path.
    """
    entries = tuple(entry for entry in schedule.entries if not isinstance(entry, Free))

    def program(*args: jax.Array) -> tuple[jax.Array, ...]:
        values: dict[int, jax.Array] = dict(enumerate(args))
        last: tuple[int, ...] = ()  # the results of the last computing op so far
        for entry in entries:
            if last and entry.operands:
                held = tuple(dict.fromkeys((*entry.operands, *last)))
                released = lax.optimization_barrier(tuple(values[slot] for slot in held))
                values.update(zip(held, released, strict=True))
            if isinstance(entry, Move):
                values[entry.target] = move(values[entry.source], entry.space)
            else:
                results = entry.run([values[slot] for slot in entry.operands])
                values.update(zip(entry.results, results, strict=True))
                last = entry.results
        return tuple(values[slot] for slot in schedule.outputs)

    return program


# ------------------------------------------------------------------- runtime mode


def runtime_program(
    schedule: Schedule,
    layout: Layout,
    devices: Sequence[jax.Device],
    jitted: Callable[[Compute, tuple[int, ...]], Jitted],
    donate: Sequence[int] = (),
) -> RuntimeProgram:
    """The runtime mode of `schedule` (module docstring): values laid out by `layout`,
    each computing op the compiled call of `jitted(op, donated)` (`donated`: the
    operand positions it writes its result over, `Schedule.donated`), the device memory measured on
    each of `devices` (those the program runs on)."""
    if donate:
        raise PlacedLoweringError(
            "the runtime mode takes no donated arguments: it frees what the program frees"
        )
    runtime = _Runtime(schedule, layout, devices, jitted)
    in_shardings, out_shardings = boundary(schedule, layout)

    def fn(*args: jax.Array) -> tuple[jax.Array, ...]:
        return runtime(args)[0]

    return RuntimeProgram(
        fn=fn,
        arg_infos=schedule.arg_infos,
        result_sigs=schedule.result_sigs,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        measure=lambda *args, progress=None: runtime(args, progress),
        consumed=schedule.consumed,
        compiled_ops=runtime.compiled_ops,
    )


class _Runtime:
    """The schedule run op by op (module docstring): a call of `(args)` returns the
    results and the device memory measured after every op."""

    def __init__(
        self,
        schedule: Schedule,
        layout: Layout,
        devices: Sequence[jax.Device],
        jitted: Callable[[Compute, tuple[int, ...]], Jitted],
    ) -> None:
        self.schedule = schedule
        self.layout = layout
        self.devices = tuple(devices)
        self.device_kind = MEMORY_KINDS["device"]
        # Every distinct op compiled once, before any run: no tracing (nor any array
        # it might make) happens while a run is measured.
        compiled: dict[Hashable, jax.stages.Compiled] = {}
        self.calls: list[jax.stages.Compiled | None] = []
        for entry, key, donated in zip(
            schedule.entries, schedule.keys, schedule.donated, strict=True
        ):
            if isinstance(entry, Move | Free):
                self.calls.append(None)
                continue
            if key not in compiled:
                avals = [
                    jax.ShapeDtypeStruct(
                        schedule.sigs[slot].shape,
                        jax_dtype(schedule.sigs[slot].dtype),
                        sharding=layout(slot),
                    )
                    for slot in entry.operands
                ]
                compiled[key] = jitted(entry, donated).trace(*avals).lower().compile()  # type: ignore[attr-defined]
            self.calls.append(compiled[key])
        self.compiled_ops = len(compiled)

    def _device_bytes(self, excluded: set[int], values: dict[int, jax.Array]) -> tuple[int, int]:
        """The most bytes one device holds in live device-memory arrays but those in
        `excluded` (ids), each of the run's values counted as its IR type says, and
        how many fewer the device holding the least holds (`Measured`)."""
        counted = {id(array): self.schedule.nbytes[slot] for slot, array in values.items()}
        held = dict.fromkeys(self.devices, 0)
        for array in jax.live_arrays():
            if id(array) in excluded or array.sharding.memory_kind != self.device_kind:
                continue
            block = counted.get(id(array))
            if block is None:
                block = math.prod(array.sharding.shard_shape(array.shape)) * array.dtype.itemsize
            for device in array.sharding.device_set & held.keys():
                held[device] += block
        return max(held.values()), max(held.values()) - min(held.values())

    def __call__(
        self,
        args: Sequence[jax.Array],
        progress: Callable[[int, int], None] | None = None,
    ) -> tuple[tuple[jax.Array, ...], Measured]:
        schedule = self.schedule
        # What was live before the run (other arrays of the process) is not the run's;
        # holding them keeps their ids from being reused while the run is measured.
        own = {id(arg) for arg in args}
        before = [a for a in jax.live_arrays() if id(a) not in own]
        excluded = {id(a) for a in before}
        values: dict[int, jax.Array] = dict(enumerate(args))
        start, start_spread = self._device_bytes(excluded, values)
        live, spread = [], [start_spread]
        for done, (entry, call, released) in enumerate(
            zip(schedule.entries, self.calls, schedule.releases, strict=True)
        ):
            if progress is not None:
                progress(done, len(schedule.entries))
            if isinstance(entry, Move):
                values[entry.target] = jax.device_put(
                    values[entry.source], self.layout(entry.target)
                )
            elif not isinstance(entry, Free):
                assert call is not None
                results = call(*(values[slot] for slot in entry.operands))
                values.update(zip(entry.results, results, strict=True))
            held, apart = self._device_bytes(excluded, values)
            live.append(held)
            spread.append(apart)
            for slot in released:
                values.pop(slot).delete()  # a donated one is deleted already: a no-op
        del before
        measured = Measured(start, tuple(live), len(self.devices), tuple(spread))
        return tuple(values[slot] for slot in schedule.outputs), measured


# ---------------------------------------------------------- CUDA cross-lowering


@dataclass(frozen=True, slots=True)
class Placements:
    """Host-memory placements of a program: copies to host memory and to device memory
    (`annotate_device_placement` custom calls in StableHLO, one per swap and one per
    result, as JAX writes a result's memory kind), and the arguments and results laid
    out in host memory."""

    to_host: int
    to_device: int
    host_arguments: int
    host_results: int

    def to_json(self) -> dict[str, int]:
        return {
            "to_host": self.to_host,
            "to_device": self.to_device,
            "host_arguments": self.host_arguments,
            "host_results": self.host_results,
        }


def planned_placements(module: ModuleOp) -> Placements:
    """The placements the compiled mode of `module` must lower to: a copy to host per
    `memory.swap_out` and per host result, a copy to device per `memory.swap_in` and per
    device result, and its host arguments and results."""
    function = entry_function(module)
    ops = list(entry_block(function).ops)
    swap_ins = sum(isinstance(op, SwapInOp) for op in ops)
    swap_outs = sum(isinstance(op, MoveOp) and not isinstance(op, SwapInOp) for op in ops)
    results = [space_of(sig_of(v.type)) for v in return_values(function)]
    arguments = [space_of(info.sig) for info in arg_infos(function)]
    host_results = results.count("host")
    return Placements(
        to_host=swap_outs + host_results,
        to_device=swap_ins + len(results) - host_results,
        host_arguments=arguments.count("host"),
        host_results=host_results,
    )


_PLACEMENT = re.compile(
    r"@annotate_device_placement\(.*_xla_buffer_placement = \"(pinned_host|device)\""
)
_HOST_KIND = re.compile(r'mhlo\.memory_kind = "pinned_host"')


def stablehlo_placements(text: str) -> Placements:
    """The placements in a StableHLO module's text (`Placements`): the annotation calls
    anywhere, the memory kinds in `@main`'s signature."""
    found = [match.group(1) for match in _PLACEMENT.finditer(text)]
    signature = next(line for line in text.splitlines() if "func.func public @main(" in line)
    arguments, _, results = signature.partition(") -> (")
    return Placements(
        to_host=found.count("pinned_host"),
        to_device=found.count("device"),
        host_arguments=len(_HOST_KIND.findall(arguments)),
        host_results=len(_HOST_KIND.findall(results)),
    )


def cuda_placements(program: ShardedArguments) -> tuple[Placements, str]:
    """The placements of `program`, one jitted program (the compiled mode, on one device
    or a mesh), cross-lowered for CUDA (no GPU needed), and the StableHLO text they were
    counted in."""
    text = program.lowered("cuda").as_text()
    return stablehlo_placements(text), text
