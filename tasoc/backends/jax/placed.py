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
  free is nothing: XLA owns the buffers. The schedule's order is kept with optimization
  barriers (`_compiled`, which says what that guarantees and what it cannot), and XLA's
  rematerialization is off (`NO_REMAT`), since recomputing values behind the plan's back
  would make the program hold memory the plan does not know of, and spend time on it.
- **runtime** (`lower_placed(module, "runtime")`): the schedule run op by op from
  Python, the mode that reproduces a schedule exactly (for checking the simulator and
  the replay): each `graph` op is its own compiled call (one per distinct op, operand
  types and attributes), a swap is an asynchronous `jax.device_put` to the other memory
  kind, `memory.free` and a value's last reader delete its array (`Array.delete`), as
  `memory.replay` releases it. After every op the live device bytes are sampled from
  `jax.live_arrays()` (`RuntimeProgram.measure`, `Measured`), which is the replay's
  figure, op by op, when the runtime does what the plan says.

`cuda_placements` is the evidence of what a GPU would run, without one: it cross-lowers
the compiled mode for CUDA and counts the host-memory placements in the StableHLO (the
CPU lowering elides a `device_put` inside a program, since a CPU's two memory kinds are
one memory; the CUDA lowering keeps each as an `annotate_device_placement` call).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass
from typing import Literal, overload

import jax
import numpy as np
from jax import lax
from jax.sharding import SingleDeviceSharding
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.backends.jax.lowering import (
    ShardedArguments,
    Step,
    graph_step,
    jax_dtype,
)
from tasoc.ir.graph import sig_of
from tasoc.ir.memory import (
    FreeOp,
    LiveBytes,
    MoveOp,
    Space,
    SwapInOp,
    in_space,
    release_points,
    space_of,
    tensor_bytes,
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


@dataclass(frozen=True, slots=True)
class _Move:
    """`memory.swap_out` / `memory.swap_in`: the value in `source` copied to `target`
    in the memory space `space`."""

    source: int
    target: int
    space: Space

    @property
    def operands(self) -> tuple[int, ...]:
        return (self.source,)


@dataclass(frozen=True, slots=True)
class _Free:
    """`memory.free`: the value in `slot` ends here (its release is in `releases`)."""

    slot: int

    @property
    def operands(self) -> tuple[int, ...]:
        return (self.slot,)


Entry = Step | _Move | _Free


@dataclass(frozen=True, slots=True)
class _Schedule:
    """`@main` of a placed program, detached from xDSL: `entries[i]` is op `i` of the
    block (values are slots, arguments first), `releases[i]` the slots whose life ends
    once op `i` has run (`memory.release_points`, the replay's rule)."""

    entries: tuple[Entry, ...]
    releases: tuple[tuple[int, ...], ...]
    outputs: tuple[int, ...]
    arg_infos: tuple[ArgInfo, ...]
    arg_spaces: tuple[Space, ...]
    result_sigs: tuple[TensorSig, ...]
    result_spaces: tuple[Space, ...]


def _read(module: ModuleOp) -> _Schedule:
    """The schedule of `module`'s `@main`; PlacedLoweringError for an op that is neither
    a `graph` op with a JAX lowering nor a `memory` op, and for a sharded program."""
    if is_sharded(module):
        raise PlacedLoweringError(
            "a program both sharded and memory-placed is not supported: lower one of the two"
        )
    function = entry_function(module)
    block = entry_block(function)
    slots: dict[SSAValue, int] = {value: index for index, value in enumerate(block.args)}
    entries: list[Entry] = []
    ops = [op for op in block.ops if not isinstance(op, func.ReturnOp)]
    for op in ops:
        if isinstance(op, MoveOp):
            slots[op.output] = len(slots)
            entries.append(_Move(slots[op.input], slots[op.output], op.TARGET))
        elif isinstance(op, FreeOp):
            entries.append(_Free(slots[op.input]))
        else:
            try:
                entries.append(graph_step(op, slots))
            except ValueError as err:
                raise PlacedLoweringError(str(err)) from None
    returned = return_values(function)
    infos = tuple(arg_infos(function))
    return _Schedule(
        entries=tuple(entries),
        releases=tuple(
            tuple(slots[value] for value in values) for values in release_points(function)
        ),
        outputs=tuple(slots[v] for v in returned),
        arg_infos=infos,
        arg_spaces=tuple(space_of(info.sig) for info in infos),
        result_sigs=tuple(sig_of(v.type) for v in returned),
        result_spaces=tuple(space_of(sig_of(v.type)) for v in returned),
    )


def device_sharding(space: Space, device: jax.Device | None = None) -> SingleDeviceSharding:
    """Where a value of `space` lives: the default device (or `device`), in the memory
    kind of `space` (`MEMORY_KINDS`)."""
    return SingleDeviceSharding(device or jax.devices()[0], memory_kind=MEMORY_KINDS[space])


@dataclass(frozen=True)
class PlacedProgram(ShardedArguments):
    """A lowered placed program: each argument and result on the default device, in
    its space's memory kind (`in_shardings`, `out_shardings`)."""


@dataclass(frozen=True)
class CompiledProgram(PlacedProgram):
    """The compiled mode: `fn` is one jitted program (compiled on its first call)."""

    def lowered(self, platform: str | None = None) -> jax.stages.Lowered:
        """The program's StableHLO for this machine, or cross-lowered for `platform`
        ("cuda": what a GPU would be given, without a GPU)."""
        traced = self.fn.trace(*self.abstract_args())  # type: ignore[attr-defined]
        if platform is None:
            return traced.lower()
        return traced.lower(lowering_platforms=(platform,))


@dataclass(frozen=True)
class Measured(LiveBytes):
    """Device memory measured over one runtime run, in the shape of `memory.Replay`:
    `start` bytes live once the arguments are placed, `live[i]` after op `i` ran (its
    results made, nothing it was the last reader of released yet).

    The bytes are those of the live arrays in device memory (`jax.live_arrays()`) that
    were not live before the run: the arrays the run holds, whether it meant to or not.
    Each of the run's values counts the bytes its IR type has, as the replay counts
    them: without x64 mode JAX holds an i64 value as int32, half the bytes, which is
    JAX's doing and not the plan's (`lowering.jax_dtype`); anything else counts its
    own `nbytes`."""


@dataclass(frozen=True)
class RuntimeProgram(PlacedProgram):
    """The runtime mode: `fn` runs the schedule op by op (`measure`, its measurement
    dropped). Like a donated argument, an argument the program frees is the program's:
    its array is deleted at its `memory.free`, so pass a fresh one to each call."""

    measure: Callable[..., tuple[tuple[jax.Array, ...], Measured]]
    consumed: tuple[int, ...]
    """Indices of the arguments the program frees (deletes)."""
    compiled_ops: int
    """Distinct compiled calls the `graph` ops share (one per op, attributes and
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
    for a program that is sharded too.
    """
    schedule = _read(module)
    device = jax.devices()[0]
    in_shardings = tuple(device_sharding(space, device) for space in schedule.arg_spaces)
    out_shardings = tuple(device_sharding(space, device) for space in schedule.result_spaces)
    if mode == "compiled":
        return CompiledProgram(
            fn=_compiled(schedule, device, in_shardings, out_shardings, tuple(donate)),
            arg_infos=schedule.arg_infos,
            result_sigs=schedule.result_sigs,
            in_shardings=in_shardings,
            out_shardings=out_shardings,
        )
    if donate:
        raise PlacedLoweringError(
            "the runtime mode takes no donated arguments: it frees what the program frees"
        )
    runtime = _Runtime(schedule, device)

    def fn(*args: jax.Array) -> tuple[jax.Array, ...]:
        return runtime(args)[0]

    return RuntimeProgram(
        fn=fn,
        arg_infos=schedule.arg_infos,
        result_sigs=schedule.result_sigs,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        measure=lambda *args: runtime(args),
        consumed=tuple(
            entry.slot
            for entry in schedule.entries
            if isinstance(entry, _Free) and entry.slot < len(schedule.arg_infos)
        ),
        compiled_ops=runtime.compiled_ops,
    )


# ------------------------------------------------------------------ compiled mode


def _compiled(
    schedule: _Schedule,
    device: jax.Device,
    in_shardings: tuple[SingleDeviceSharding, ...],
    out_shardings: tuple[SingleDeviceSharding, ...],
    donate: tuple[int, ...],
) -> Callable[..., tuple[jax.Array, ...]]:
    """The schedule as one jitted program whose order XLA must keep.

    XLA schedules a program's instructions itself, in any order its data dependencies
    allow, so the block order would be lost without dependencies that say it. Each op
    therefore reads its operands through an `optimization_barrier` together with the
    results of the last `graph` op before it: a barrier's outputs exist only once all
    its inputs do, and XLA neither looks through nor moves computation across it. The
    barriers form one chain, each with the operands of one op and the results of one
    other (linear in the program's size). What the chain guarantees:

    - `graph` ops run in block order: each starts after the one before it has ended
      (a constant, which reads nothing, is not held back; XLA folds it);
    - a swap does not start before the `graph` op before it has ended, so a swap-in
      cannot be hoisted above where it stands (which would hold its device memory
      longer than planned), nor a swap-out above its place;
    - a swap-in ends before the op it prefetches for starts (it reads its result).

    What it does not guarantee: that a swap starts as soon as it may. The `graph` ops
    after a swap do not wait for it (that would serialize copies with compute, which
    placement overlaps), so XLA may start the copy later, as late as its reader allows
    (a GPU's latency-hiding scheduler starts copies as early as their operands allow).
    Nor does it decide when XLA frees a buffer: `memory.free` lowers to nothing, a value
    dies after its last reader as XLA's buffer assignment sees it, and an argument lives
    through the program (an entry parameter), freed or not. The runtime mode is the
    exact one. Host values may pass through the barriers: XLA's host offloader lets
    optimization barriers, tuples and their elements sit on a host-memory path.
    """
    kinds = {space: device_sharding(space, device) for space in MEMORY_KINDS}
    entries = tuple(entry for entry in schedule.entries if not isinstance(entry, _Free))

    def program(*args: jax.Array) -> tuple[jax.Array, ...]:
        values: dict[int, jax.Array] = dict(enumerate(args))
        last: tuple[int, ...] = ()  # the results of the last graph op so far
        for entry in entries:
            if last and entry.operands:
                held = tuple(dict.fromkeys((*entry.operands, *last)))
                released = lax.optimization_barrier(tuple(values[slot] for slot in held))
                values.update(zip(held, released, strict=True))
            if isinstance(entry, _Move):
                values[entry.target] = jax.device_put(values[entry.source], kinds[entry.space])
            else:
                assert isinstance(entry, Step)
                results = entry.run([values[slot] for slot in entry.operands])
                values.update(zip(entry.results, results, strict=True))
                last = entry.results
        return tuple(values[slot] for slot in schedule.outputs)

    return jax.jit(
        program,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        donate_argnums=donate,
        compiler_options=NO_REMAT,
    )


# ------------------------------------------------------------------- runtime mode


class _Runtime:
    """The schedule run op by op (module docstring): a call of `(args)` returns the
    results and the device memory measured after every op."""

    def __init__(self, schedule: _Schedule, device: jax.Device) -> None:
        self.schedule = schedule
        self.kinds = {space: device_sharding(space, device) for space in MEMORY_KINDS}
        self.device_kind = MEMORY_KINDS["device"]
        # Every distinct op compiled once, before any run: no tracing (nor any array
        # it might make) happens while a run is measured.
        compiled: dict[Hashable, jax.stages.Compiled] = {}
        self.calls: list[Callable[..., Sequence[jax.Array]] | None] = []
        sigs = self._sigs()
        self.ir_bytes = {slot: tensor_bytes(sig) for slot, sig in sigs.items()}
        for entry in schedule.entries:
            if not isinstance(entry, Step):
                self.calls.append(None)
                continue
            inputs = tuple(sigs[slot] for slot in entry.operands)
            key = (entry.name, _hashable(entry.attrs), inputs)
            if key not in compiled:
                compiled[key] = self._compile(entry, inputs)
            self.calls.append(compiled[key])
        self.compiled_ops = len(compiled)

    def _sigs(self) -> dict[int, TensorSig]:
        """Every slot's type (arguments and results of every entry)."""
        sigs = {index: info.sig for index, info in enumerate(self.schedule.arg_infos)}
        for entry in self.schedule.entries:
            if isinstance(entry, Step):
                sigs.update(zip(entry.results, entry.result_sigs, strict=True))
            elif isinstance(entry, _Move):
                sigs[entry.target] = in_space(sigs[entry.source], entry.space)
        return sigs

    def _compile(self, step: Step, inputs: tuple[TensorSig, ...]) -> jax.stages.Compiled:
        device = self.kinds["device"]
        avals = [
            jax.ShapeDtypeStruct(sig.shape, jax_dtype(sig.dtype), sharding=device) for sig in inputs
        ]
        jitted = jax.jit(lambda *xs: step.run(xs), out_shardings=device)
        return jitted.trace(*avals).lower().compile()

    def _device_bytes(self, excluded: set[int], values: dict[int, jax.Array]) -> int:
        """Bytes of the live device-memory arrays but those in `excluded` (ids), each of
        the run's values counted as its IR type says (`_ir_bytes`)."""
        counted = {id(array): self.ir_bytes[slot] for slot, array in values.items()}
        return sum(
            counted.get(id(array), array.nbytes)
            for array in jax.live_arrays()
            if id(array) not in excluded and array.sharding.memory_kind == self.device_kind
        )

    def __call__(self, args: Sequence[jax.Array]) -> tuple[tuple[jax.Array, ...], Measured]:
        schedule = self.schedule
        # What was live before the run (other arrays of the process) is not the run's;
        # holding them keeps their ids from being reused while the run is measured.
        own = {id(arg) for arg in args}
        before = [a for a in jax.live_arrays() if id(a) not in own]
        excluded = {id(a) for a in before}
        values: dict[int, jax.Array] = dict(enumerate(args))
        start = self._device_bytes(excluded, values)
        live = []
        for entry, call, released in zip(
            schedule.entries, self.calls, schedule.releases, strict=True
        ):
            if isinstance(entry, _Move):
                values[entry.target] = jax.device_put(values[entry.source], self.kinds[entry.space])
            elif isinstance(entry, Step):
                assert call is not None
                results = call(*(values[slot] for slot in entry.operands))
                values.update(zip(entry.results, results, strict=True))
            live.append(self._device_bytes(excluded, values))
            for slot in released:
                values.pop(slot).delete()
        del before
        return tuple(values[slot] for slot in schedule.outputs), Measured(start, tuple(live))


def _hashable(attrs: object) -> Hashable:
    """A key equal for equal attribute values (lists and dicts made tuples)."""
    if isinstance(attrs, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in attrs.items()))
    if isinstance(attrs, list | tuple):
        return tuple(_hashable(v) for v in attrs)
    if isinstance(attrs, np.ndarray):
        return (attrs.dtype.str, attrs.shape, attrs.tobytes())
    return attrs  # type: ignore[return-value]


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


def cuda_placements(program: CompiledProgram) -> tuple[Placements, str]:
    """The placements of `program` cross-lowered for CUDA (no GPU needed), and the
    StableHLO text they were counted in."""
    text = program.lowered("cuda").as_text()
    return stablehlo_placements(text), text
