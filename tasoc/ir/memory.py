"""The `memory` dialect: programs whose values live in device or host memory.

A memory-placed program says where every tensor lives and when it moves
(SwapAdvisor, Huang thesis ch. 4; ROC, Jia thesis §4.5; docs/memory.md):

    module attributes {memory.capacity = 1048576 : i64,
                       memory.pool = #memory.pool<[4096 x 16, 65536 x 8]>} {
      func.func @main(%x: tensor<64x64xf32>, %w: tensor<64x64xf32, #memory.space<host>>) -> ... {
        %wd = memory.swap_in %w : tensor<64x64xf32>
        %y = graph.matmul %x, %wd : tensor<64x64xf32>
        %yh = memory.swap_out %y : tensor<64x64xf32, #memory.space<host>>
        memory.free %x
        ...

* `#memory.space<host>` is a tensor type's encoding: the value lives in host memory.
  A sharded value keeps its layout under its space, `#memory.space<host,
  #parallel.sharding<...>>` (the space wraps the other encoding: `encodings.WRAPPED`),
  and a move changes the space alone.
  Device memory is the default and has no encoding (one spelling per type, so equal
  types compare equal). `graph` ops read and write device values only; a host value is
  read by `memory.swap_in`, `memory.free` and `func.return` alone.
* `memory.swap_out %x` copies a device value to host memory, `memory.swap_in %h`
  copies a host value back, for the first op of the schedule that reads its result
  (the op it prefetches for, `prefetch_target`); both change the space and nothing
  else. `memory.free %x` ends a value's life: no op reads it afterwards.
* The order of the ops in `@main`'s block is the schedule: a swap starts where it
  stands, so a swap-in written three ops before its reader overlaps those three ops.
* An op marked `{memory.recompute}` runs again where the plan recomputes a value
  instead of swapping it (its earlier copy was freed); it must be `Pure`.
* Module attributes: `memory.capacity` (device bytes), `memory.pool` (size classes
  and object counts, SwapAdvisor §4.3.1: every device tensor takes one object of the
  smallest class that holds it) and `memory.plan` (the planner's figures: simulated,
  ideal and baseline times, bytes moved), which the verifier leaves alone.

Device memory over the schedule (`replay`), per device: a value of a sharded program
takes its block's bytes (`device_bytes`), every device of a mesh holding blocks of one
size, so one device's replay, and `memory.capacity`, is every device's. A value takes
device memory from the op that makes it (a swap-in from where it starts, so in-flight
swap-ins count) to its last reader, a returned value to the end. An argument is the
caller's: it holds device memory for the whole step unless a `memory.free` releases
it. The verifier replays the
schedule against the capacity and the pool (`check_placed`, registered in
`program.PROGRAM_CHECKS`) and names the first op over either. Run on a program without
placement, the replay is the step's peak device memory without placement
(`liveness.peak_memory` is this replay with each value's kind; docs/memory.md).
"""

from __future__ import annotations

import itertools
import math
from collections import Counter
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import ClassVar, Literal, Self

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    DenseArrayBase,
    IntegerAttr,
    ModuleOp,
    NoneAttr,
    StringAttr,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, BlockArgument, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    operand_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure
from xdsl.utils.exceptions import VerifyException

from tasoc.ir.conversion import ConversionOp
from tasoc.ir.encodings import PROPAGATE, REWRAPPED, WRAPPED, check_op, device_shape
from tasoc.ir.graph import defined_value, sig_of, tensor_type
from tasoc.ir.limits import bytes_and_size
from tasoc.ir.opdef import op_def, op_defs
from tasoc.ir.program import (
    PROGRAM_CHECKS,
    IRRuleError,
    ProgramError,
    entry_block,
    entry_function,
    map_types,
    return_values,
)
from tasoc.ir.shapes import ShapeError, TensorSig
from tasoc.ir.training import training_signature

Space = Literal["device", "host"]

CAPACITY_ATTR = "memory.capacity"
"""Module attribute: the device memory a placed program must fit in, bytes (i64)."""
POOL_ATTR = "memory.pool"
"""Module attribute: the device memory pool, a `#memory.pool<...>`."""
PLAN_ATTR = "memory.plan"
"""Module attribute: the planner's figures, a dictionary of numbers (docs/memory.md)."""
RECOMPUTE_ATTR = "memory.recompute"
"""Op attribute (unit): the op runs again on its inputs' current device copies, for new
device copies of results that were released instead of swapped out (recomputation). Only
an op without side effects or randomness (xDSL's `Pure`) may carry it: a second run
must give the first run's values. `unplaced` folds it into the first run."""
IN_PLACE_ATTR = "memory.in_place"
"""Op attribute (i64): the op's result is written over the device buffer of this operand
(its index), which dies at the op — XLA's buffer sharing of an element-wise op's
operand with its result, and JAX's donated buffer (the runtime mode donates it). Only
an element-wise op (`OpDef.in_place`) of one result may carry it, naming an operand of
the result's type that the op reads once and whose life ends there
(`release_points`); the replay then counts the result in the operand's bytes, not
beside them. `unplaced` drops it."""

# --------------------------------------------------------------------- attributes


@irdl_attr_definition
class SpaceAttr(ParametrizedAttribute):
    """`#memory.space<host>`: the tensor lives in host memory (module docstring).

    `#memory.space<host, #parallel.sharding<...>>`: a sharded tensor whose blocks live
    in each device's host memory; the space wraps the value's other encoding (its
    layout), which a swap keeps (DESIGN.md §8: both encodings on one tensor type)."""

    name = "memory.space"

    space: StringAttr
    layout: Attribute
    """The encoding the value has besides its space (`NoneAttr()` when none)."""

    def __init__(self, space: str, layout: Attribute | None = None) -> None:
        super().__init__(StringAttr(space), NoneAttr() if layout is None else layout)

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        at = parser.pos
        space = parser.parse_identifier()
        if space == "device":
            parser.raise_error(
                "device memory is the default: write the tensor type without an encoding", at
            )
        if space != "host":
            parser.raise_error(f"unknown memory space '{space}' (expected host)", at)
        layout: Attribute = NoneAttr()
        if parser.parse_optional_punctuation(","):
            layout = parser.parse_attribute()
        parser.parse_punctuation(">")
        return (StringAttr(space), layout)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(f"<{self.space.data}")
        if self.inner is not None:
            printer.print_string(", ")
            printer.print_attribute(self.inner)
        printer.print_string(">")

    def verify(self) -> None:
        if self.space.data != "host":
            raise VerifyException(
                f"memory space '{self.space.data}' is not an encoding: host is, device "
                "memory is the default"
            )
        if isinstance(self.layout, SpaceAttr):
            raise VerifyException("a memory space cannot wrap another memory space")

    @property
    def inner(self) -> Attribute | None:
        """The wrapped encoding, None when the value has no other."""
        return None if isinstance(self.layout, NoneAttr) else self.layout


HOST = SpaceAttr("host")


def space_of(sig: TensorSig) -> Space:
    return "host" if isinstance(sig.encoding, SpaceAttr) else "device"


def layout_encoding(sig: TensorSig) -> Hashable | None:
    """The encoding of `sig` besides its memory space (its sharding, say)."""
    encoding = sig.encoding
    return encoding.inner if isinstance(encoding, SpaceAttr) else encoding


def in_space(sig: TensorSig, space: Space) -> TensorSig:
    """`sig` in `space`, its other encoding (a sharding) kept."""
    layout = layout_encoding(sig)
    if space == "device":
        return TensorSig(sig.shape, sig.dtype, layout)
    return TensorSig(sig.shape, sig.dtype, HOST if layout is None else SpaceAttr("host", layout))  # type: ignore[arg-type]


def _refuse_host(
    op: str, inputs: Sequence[TensorSig], attrs: object, results: list[TensorSig]
) -> list[TensorSig]:
    """Compute ops read device values only: the `PROPAGATE` rule of host values."""
    for index, sig in enumerate(inputs):
        if space_of(sig) == "host":
            raise ShapeError(
                f"operand #{index} ({sig}) is in host memory; compute ops read device "
                "values only (memory.swap_in it first)"
            )
    return results


PROPAGATE[SpaceAttr] = _refuse_host
WRAPPED[SpaceAttr] = lambda space: space.inner
REWRAPPED[SpaceAttr] = lambda space, inner: SpaceAttr(space.space.data, inner)


@dataclass(frozen=True, slots=True)
class Pool:
    """A device memory pool: `counts[i]` objects of `sizes[i]` bytes (sizes ascending)."""

    sizes: tuple[int, ...]
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        if len(self.sizes) != len(self.counts) or not self.sizes:
            raise ValueError("a memory pool needs one object count per size class, and a class")
        if any(s < 1 for s in self.sizes) or any(c < 1 for c in self.counts):
            raise ValueError("a memory pool's sizes and object counts must be positive")
        if any(a >= b for a, b in itertools.pairwise(self.sizes)):
            raise ValueError("a memory pool's size classes must be strictly ascending")

    @property
    def total_bytes(self) -> int:
        return sum(s * c for s, c in zip(self.sizes, self.counts, strict=True))

    def size_class(self, nbytes: int) -> int | None:
        """The index of the smallest class that holds `nbytes`, None if none does."""
        for index, size in enumerate(self.sizes):
            if nbytes <= size:
                return index
        return None

    def __str__(self) -> str:
        classes = ", ".join(f"{s} x {c}" for s, c in zip(self.sizes, self.counts, strict=True))
        return f"#memory.pool<[{classes}]>"


@irdl_attr_definition
class PoolAttr(ParametrizedAttribute):
    """`#memory.pool<[4096 x 16, 65536 x 8]>`: size classes (bytes) and object counts."""

    name = "memory.pool"

    sizes: DenseArrayBase
    counts: DenseArrayBase

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")

        def size_class() -> tuple[int, int]:
            size = parser.parse_integer(allow_boolean=False, allow_negative=False)
            parser.parse_keyword("x")
            return size, parser.parse_integer(allow_boolean=False, allow_negative=False)

        classes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, size_class)
        parser.parse_punctuation(">")
        return (
            DenseArrayBase.from_list(i64, [s for s, _ in classes]),
            DenseArrayBase.from_list(i64, [c for _, c in classes]),
        )

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(str(self.pool).removeprefix("#memory.pool"))

    def verify(self) -> None:
        try:
            self.pool  # noqa: B018 - building it checks the classes
        except ValueError as err:
            raise VerifyException(str(err)) from None

    @property
    def pool(self) -> Pool:
        return Pool(tuple(self.sizes.get_values()), tuple(self.counts.get_values()))  # type: ignore[arg-type]

    @staticmethod
    def of(pool: Pool) -> PoolAttr:
        return PoolAttr(
            DenseArrayBase.from_list(i64, pool.sizes), DenseArrayBase.from_list(i64, pool.counts)
        )


# ----------------------------------------------------------------------------- ops


class MoveOp(ConversionOp):
    """A copy between memory spaces: one operand, one result of the same shape and
    element type in the other space. Written `%r = memory.<kind> %x : <result type>`.

    Not Pure, and no memory-effect trait: a move allocates device memory at a point of
    the schedule, so xDSL, taking its effects as unknown, never merges two (two
    swap-ins of one host value stay two) nor drops one; `memory.free` likewise."""

    SOURCE: ClassVar[Space]
    TARGET: ClassVar[Space]

    @classmethod
    def build_on(cls, value: SSAValue) -> Self:
        sig = in_space(sig_of(value.type), cls.TARGET)
        return cls.create(operands=[value], result_types=[tensor_type(sig)])

    def verify_(self) -> None:
        try:
            source, target = sig_of(self.input.type), sig_of(self.output.type)
        except ShapeError as err:
            raise VerifyException(f"'{self.name}': {err}") from None
        if space_of(source) != self.SOURCE:
            raise VerifyException(f"'{self.name}': {self._wrong_source(source)}")
        check_op(self, (source, target))
        if in_space(source, self.TARGET) != target:
            raise VerifyException(
                f"'{self.name}' moves {source} to {self.TARGET} memory, so its result is "
                f"{in_space(source, self.TARGET)}, not {target}: a move changes only the space"
            )

    def _wrong_source(self, source: TensorSig) -> str:
        raise NotImplementedError

    @property
    def nbytes(self) -> int:
        """Bytes one device moves (its block of a sharded value)."""
        return device_bytes(self, sig_of(self.input.type))


@irdl_op_definition
class SwapOutOp(MoveOp):
    """`%h = memory.swap_out %x : tensor<..., #memory.space<host>>`: device to host."""

    name = "memory.swap_out"
    SOURCE: ClassVar[Space] = "device"
    TARGET: ClassVar[Space] = "host"

    def _wrong_source(self, source: TensorSig) -> str:
        return f"swaps out {_shown(self.input)} ({source}), which is in host memory already"


@irdl_op_definition
class SwapInOp(MoveOp):
    """`%d = memory.swap_in %h : tensor<...>`: host to device, for the first op that
    reads its result (`prefetch_target`), starting where it stands in the schedule."""

    name = "memory.swap_in"
    SOURCE: ClassVar[Space] = "host"
    TARGET: ClassVar[Space] = "device"

    def _wrong_source(self, source: TensorSig) -> str:
        return (
            f"swaps in {_shown(self.input)} ({source}), which is in device memory: only a "
            "value swapped out (or born on the host) can be swapped in"
        )

    @property
    def prefetch_target(self) -> Operation | None:
        """The op this swap-in prefetches for: the first op after it in the block that
        reads its result (None when nothing does)."""
        readers = {use.operation for use in self.output.uses}
        op = self.next_op
        while op is not None:
            if op in readers:
                return op
            op = op.next_op
        return None


@irdl_op_definition
class FreeOp(IRDLOperation):
    """`memory.free %x`: `%x` ends here; nothing reads it afterwards (an argument's
    device memory is released here, the caller's otherwise)."""

    name = "memory.free"

    input = operand_def(TensorType)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        operand = parser.parse_unresolved_operand()
        attributes = parser.parse_optional_attr_dict()
        return cls.create(operands=[defined_value(parser, operand)], attributes=attributes)

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_operand(self.input)
        printer.print_op_attributes(self.attributes)


Memory = Dialect("memory", [SwapOutOp, SwapInOp, FreeOp], [SpaceAttr, PoolAttr])

MEMORY_OPS = (SwapOutOp, SwapInOp, FreeOp)


def _shown(value: SSAValue) -> str:
    return f"%{value.name_hint}" if value.name_hint else "a value"


def tensor_bytes(sig: TensorSig) -> int:
    return sig.size * sig.dtype.itemsize


def device_bytes(op: Operation, sig: TensorSig) -> int:
    """Bytes of the block of a value of type `sig` one device holds, in the module of
    `op`: the whole tensor, or its shard when it is sharded (every device of a mesh
    holds a block of one size, so one device's replay is every device's)."""
    return math.prod(device_shape(op, sig)) * sig.dtype.itemsize


# ------------------------------------------------------------------ the schedule


@dataclass(frozen=True)
class LiveBytes:
    """Device bytes over a schedule: `start` before its first op (the device
    arguments), `live[i]` while op `i` runs (its operands and results included)."""

    start: int
    live: tuple[int, ...]

    @property
    def peak_bytes(self) -> int:
        return max((self.start, *self.live))

    @property
    def peak_op(self) -> int | None:
        """The position of the first op at the peak, None when the arguments are it."""
        peak = self.peak_bytes
        return next((i for i, b in enumerate(self.live) if b == peak), None)


@dataclass(frozen=True)
class Replay(LiveBytes):
    """The device bytes the schedule of `ops` holds (`replay`); bytes are pool objects
    where there is a pool."""

    ops: tuple[Operation, ...]
    split: tuple[Mapping[Hashable, int], ...] = ()
    """With `replay(kind=...)`: the bytes held of each kind at the start, then while
    each op runs (the parts of `start`, then of each of `live`); empty without."""

    @property
    def peak_split(self) -> Mapping[Hashable, int]:
        """The bytes of each kind held at the peak (at `peak_op`, or at the start when
        it is None): what makes up `peak_bytes`. Needs `replay(kind=...)`."""
        at = self.peak_op
        return self.split[0 if at is None else at + 1]


def is_placed(module: ModuleOp) -> bool:
    """Whether `module` is a memory-placed program: a memory op, a host value or a
    memory module attribute anywhere."""
    if any(name.startswith("memory.") for name in module.attributes):
        return True
    for op in module.walk():
        if isinstance(op, MEMORY_OPS) or {RECOMPUTE_ATTR, IN_PLACE_ATTR} & op.attributes.keys():
            return True
        if isinstance(op, func.FuncOp) and any(
            _is_host(t) for t in (*op.function_type.inputs.data, *op.function_type.outputs.data)
        ):
            return True
    return False


def _is_host(type_: Attribute) -> bool:
    return isinstance(type_, TensorType) and isinstance(type_.encoding, SpaceAttr)


def capacity_of(module: ModuleOp) -> int | None:
    attr = module.attributes.get(CAPACITY_ATTR)
    return attr.value.data if isinstance(attr, IntegerAttr) else None


def pool_of(module: ModuleOp) -> Pool | None:
    attr = module.attributes.get(POOL_ATTR)
    return attr.pool if isinstance(attr, PoolAttr) else None


def release_points(function: func.FuncOp) -> tuple[tuple[SSAValue, ...], ...]:
    """Per op of `function`'s block (`func.return` excluded), the values whose life
    ends once it has run: a result after its last reader (where it is made when
    nothing reads it), unless returned; an argument at its `memory.free` only. Values
    of both spaces: the replay counts the device ones, the runtime mode deletes all.

    IRRuleError, at the op, for a value read after its `memory.free` (or freed twice)
    and for a returned value freed.
    """
    ops = [op for op in entry_block(function).ops if not isinstance(op, func.ReturnOp)]
    returned = set(return_values(function))
    last_use: dict[SSAValue, int] = {}
    freed: set[SSAValue] = set()
    releases: list[list[SSAValue]] = [[] for _ in ops]
    for position, op in enumerate(ops):
        for operand in op.operands:
            if operand in freed:
                raise IRRuleError(op, f"reads {_shown(operand)} after its memory.free")
            last_use[operand] = position
        if isinstance(op, FreeOp):
            if op.input in returned:
                raise IRRuleError(op, f"frees {_shown(op.input)}, which @main returns")
            freed.add(op.input)
            if isinstance(op.input, BlockArgument):
                releases[position].append(op.input)
    for position, op in enumerate(ops):
        for result in op.results:
            if result not in returned:
                releases[last_use.get(result, position)].append(result)
    return tuple(tuple(values) for values in releases)


def replay(
    function: func.FuncOp,
    pool: Pool | None = None,
    capacity: int | None = None,
    kind: Callable[[SSAValue], Hashable] | None = None,
) -> Replay:
    """Replay `function`'s schedule: the device bytes held while each op runs, each
    value from the op that makes it (arguments: from the start) to its
    `release_points`. With `kind` (what each value is), the bytes are also split by
    kind at every position (`Replay.split`), so that a split of the peak
    (`liveness.peak_memory`) is this replay's peak by construction, not a second
    account of the same lives.

    IRRuleError, at the op, for what `release_points` refuses, a tensor no size class
    of `pool` holds, a size class out of objects, and more than `capacity` bytes held
    — each naming the bytes.
    """
    block = entry_block(function)
    ops = tuple(op for op in block.ops if not isinstance(op, func.ReturnOp))
    releases = release_points(function)
    held = _Held(pool, capacity, kind)
    for argument in block.args:
        if space_of(sig_of(argument.type)) == "device":
            held.take(argument, function, "an argument")
    start = held.bytes
    live = []
    split = [] if kind is None else [dict(held.by_kind)]
    for op, released in zip(ops, releases, strict=True):
        reused = reused_operand(op, released)
        if reused is not None and reused in held.sizes:
            held.give(reused)  # the result takes its buffer
        for result in op.results:
            if space_of(sig_of(result.type)) == "device":
                held.take(result, op, "a result")
        live.append(held.bytes)
        if kind is not None:
            split.append(dict(held.by_kind))
        for value in released:
            if value in held.sizes:
                held.give(value)
    return Replay(start, tuple(live), ops, tuple(split))


def reused_operand(op: Operation, released: Sequence[SSAValue]) -> SSAValue | None:
    """The operand whose buffer `op`'s result takes (`IN_PLACE_ATTR`), None without the
    mark; `released` are the values whose life ends at `op` (`release_points`).
    IRRuleError for a mark the op may not carry (`IN_PLACE_ATTR`)."""
    attr = op.attributes.get(IN_PLACE_ATTR)
    if attr is None:
        return None
    if not isinstance(attr, IntegerAttr) or not 0 <= attr.value.data < len(op.operands):
        raise IRRuleError(op, f"{IN_PLACE_ATTR} must name one of its operands (i64), got {attr}")
    name = op.name.removeprefix("graph.")
    if op.name == name or name not in op_defs() or not op_def(name).in_place:
        raise IRRuleError(op, f"is marked {IN_PLACE_ATTR}, but it is not an element-wise op")
    operand = op.operands[attr.value.data]
    if len(op.results) != 1 or operand.type != op.results[0].type:
        raise IRRuleError(
            op, f"is marked {IN_PLACE_ATTR}, but {_shown(operand)} is not of its result's type"
        )
    if list(op.operands).count(operand) > 1 or operand not in released:
        raise IRRuleError(
            op,
            f"is marked {IN_PLACE_ATTR}, but {_shown(operand)} does not die at it "
            "(read again later, returned, freed later, or read twice by it)",
        )
    return operand


class _Held:
    """Device memory in use during a replay: bytes, objects per size class, and bytes
    per kind of value when the replay is given a `kind`."""

    def __init__(
        self, pool: Pool | None, capacity: int | None, kind: Callable[[SSAValue], Hashable] | None
    ) -> None:
        self.pool = pool
        self.capacity = capacity
        self.kind = kind
        self.bytes = 0
        self.objects: Counter[int] = Counter()
        self.by_kind: Counter[Hashable] = Counter()
        self.sizes: dict[SSAValue, tuple[int, int | None]] = {}

    def take(self, value: SSAValue, op: Operation, what: str) -> None:
        nbytes = device_bytes(op, sig_of(value.type))
        size_class = None
        if self.pool is not None:
            size_class = self.pool.size_class(nbytes)
            if size_class is None:
                raise IRRuleError(
                    op,
                    f"has {what} of {bytes_and_size(nbytes)} ({_shown(value)}), larger than "
                    f"the memory pool's largest size class ({bytes_and_size(self.pool.sizes[-1])})",
                )
            if self.objects[size_class] == self.pool.counts[size_class]:
                raise IRRuleError(
                    op,
                    f"needs a {self.pool.sizes[size_class]}-byte pool object for "
                    f"{_shown(value)} ({nbytes} bytes), but all "
                    f"{self.pool.counts[size_class]} of that size class are in use",
                )
            self.objects[size_class] += 1
            nbytes = self.pool.sizes[size_class]
        self.bytes += nbytes
        self.sizes[value] = (nbytes, size_class)
        if self.kind is not None:
            self.by_kind[self.kind(value)] += nbytes
        if self.capacity is not None and self.bytes > self.capacity:
            raise IRRuleError(
                op,
                f"holds {bytes_and_size(self.bytes)} of device memory with {_shown(value)}, "
                f"over the capacity of {bytes_and_size(self.capacity)}",
            )

    def give(self, value: SSAValue) -> None:
        nbytes, size_class = self.sizes.pop(value)
        self.bytes -= nbytes
        if size_class is not None:
            self.objects[size_class] -= 1
        if self.kind is not None:
            self.by_kind[self.kind(value)] -= nbytes


def check_placed(module: ModuleOp) -> None:
    """The module-level rules of a placed program (IRRuleError at the first broken):
    memory module attributes well formed, the pool within the capacity, each result
    that replaces an argument in the argument's space (where the next step reads it),
    and the schedule's replay (`replay`) within capacity and pool."""
    if not is_placed(module):
        return
    capacity_attr = module.attributes.get(CAPACITY_ATTR)
    if capacity_attr is not None and (
        not isinstance(capacity_attr, IntegerAttr) or capacity_attr.value.data < 1
    ):
        raise IRRuleError(
            module, f"{CAPACITY_ATTR} must be a positive byte count (i64), got {capacity_attr}"
        )
    pool_attr = module.attributes.get(POOL_ATTR)
    if pool_attr is not None and not isinstance(pool_attr, PoolAttr):
        raise IRRuleError(module, f"{POOL_ATTR} must be a #memory.pool<...>, got {pool_attr}")
    capacity, pool = capacity_of(module), pool_of(module)
    if capacity is not None and pool is not None and pool.total_bytes > capacity:
        raise IRRuleError(
            module,
            f"the memory pool takes {bytes_and_size(pool.total_bytes)}, over the capacity "
            f"of {bytes_and_size(capacity)}",
        )
    try:
        function = entry_function(module)
    except ProgramError as err:
        raise IRRuleError(module, f"is a placed program, but {err}") from None
    try:
        training_signature(function)  # a replacing result leaves in its argument's space
    except ProgramError as err:
        raise IRRuleError(function, str(err)) from None
    for op in entry_block(function).ops:
        if RECOMPUTE_ATTR in op.attributes and not op.has_trait(Pure):
            raise IRRuleError(
                op,
                f"is marked {RECOMPUTE_ATTR}, but it may have side effects or randomness "
                "(it is not Pure): a second run need not give the first run's values",
            )
    replay(function, pool, capacity)


PROGRAM_CHECKS.append(check_placed)


# ------------------------------------------------------------------ whole programs


def moves(function: func.FuncOp) -> Iterator[MoveOp]:
    for op in entry_block(function).ops:
        if isinstance(op, MoveOp):
            yield op


def moved_bytes(function: func.FuncOp) -> dict[str, int]:
    """Bytes swapped out and in by one run of the schedule."""
    totals = {"swap_out": 0, "swap_in": 0}
    for op in moves(function):
        totals["swap_out" if isinstance(op, SwapOutOp) else "swap_in"] += op.nbytes
    return totals


def unplaced(module: ModuleOp) -> ModuleOp:
    """A copy of `module` as the program without placement it equals: moves dropped
    (each is the identity on the value), frees dropped, ops run again folded into their
    first run, host spaces removed, memory
    module attributes gone. The reference a placed program is checked against."""
    copy = module.clone()
    for op in list(copy.walk()):
        op.attributes.pop(IN_PLACE_ATTR, None)
        if isinstance(op, MoveOp):
            op.output.replace_all_uses_with(op.input)
        if isinstance(op, MEMORY_OPS):
            op.detach()
            op.erase()
    _fold_recomputed(copy)
    for name in [n for n in copy.attributes if n.startswith("memory.")]:
        del copy.attributes[name]
    map_types(copy, _plain)
    return copy


def _fold_recomputed(module: ModuleOp) -> None:
    """Replace each op marked `memory.recompute` (its moves already dropped) by the
    first op that runs the same on the same operands: the value it recomputes. One
    without such an op stays, unmarked: it is then an op like any other."""
    first: dict[Hashable, Operation] = {}
    for op in list(module.walk()):
        key = (op.name, tuple(op.operands), tuple(sorted(op.properties.items())))
        if RECOMPUTE_ATTR not in op.attributes:
            first.setdefault(key, op)
            continue
        del op.attributes[RECOMPUTE_ATTR]
        if key in first:
            for result, earlier in zip(op.results, first[key].results, strict=True):
                result.replace_all_uses_with(earlier)
            op.detach()
            op.erase()
        else:
            first[key] = op


def _plain(type_: Attribute) -> Attribute:
    if _is_host(type_):
        assert isinstance(type_, TensorType)
        return tensor_type(in_space(sig_of(type_), "device"))
    return type_


def host_arguments(function: func.FuncOp) -> tuple[int, ...]:
    """Indices of `function`'s arguments that live in host memory."""
    return tuple(
        index
        for index, argument in enumerate(entry_block(function).args)
        if isinstance(argument, BlockArgument) and _is_host(argument.type)
    )
