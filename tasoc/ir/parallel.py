"""The `parallel` dialect: programs whose values are laid out on device meshes.

Modelled on Shardy/GSPMD and FlexFlow's parallel operators (docs/parallel.md):

    parallel.mesh @mesh ["d" = 8]
    func.func @main(%x: tensor<16x64xf32, #parallel.sharding<@mesh, [["d"], []]>>,
                    %w: tensor<64x10xf32, #parallel.sharding<@mesh, [[], []]>>) -> ... {
      %y = graph.matmul %x, %w : tensor<16x10xf32, #parallel.sharding<@mesh, [["d"], []]>>
      %z = parallel.all_gather %y : tensor<16x10xf32, #parallel.sharding<@mesh, [[], []]>>
      ...

* `parallel.mesh @name ["axis" = size, ...] (devices [ids])?` names device axes; with
  `devices` it is a device group (FlexFlow's Operator dimension: ops on it run there).
* `#parallel.sharding<@mesh, [[axes of dim 0], ...], unreduced = [axes]>` is a tensor
  type's encoding: which mesh axes split which dim; `unreduced` axes hold partial
  sums (a set: parsed in any order, kept sorted); every other axis of the mesh holds
  copies.
* A `graph` op on sharded values computes on each device's shards: its operands'
  shardings must be one configuration of the op's SOAP rule (`soap.py`), and its
  results' shardings are the ones that configuration gives. So all communication is
  explicit, in the collectives below, each written with its result type only (the
  operand's type is its definition's):
  `all_slice` (FlexFlow's Repartition: split further, no communication),
  `all_gather` (Combine), `all_reduce` (Reduction: complete partial sums),
  `reduce_scatter`, `all_to_all` (move a split from one dim to another) and
  `replicate` (copy a value onto another mesh / device group).

The verifier checks that shardings name a mesh of the module and its axes, divide
the dims they split, that each collective does what its name says, and (through the
hooks in `encodings.py`) that every `graph` op's shardings follow its rule.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence
from dataclasses import replace
from typing import ClassVar, Self, cast

from xdsl.dialects import func
from xdsl.dialects.builtin import (
    ArrayAttr,
    DenseArrayBase,
    ModuleOp,
    StringAttr,
    SymbolNameConstraint,
    TensorType,
    i64,
)
from xdsl.ir import Attribute, Dialect, Operation, ParametrizedAttribute, SSAValue
from xdsl.irdl import (
    IRDLOperation,
    irdl_attr_definition,
    irdl_op_definition,
    opt_prop_def,
    prop_def,
    traits_def,
)
from xdsl.parser import AttrParser, Parser
from xdsl.printer import Printer
from xdsl.traits import Pure, SymbolOpInterface
from xdsl.utils.exceptions import VerifyException

from tasoc.ir import soap
from tasoc.ir.conversion import ConversionOp
from tasoc.ir.encodings import CHECK, LOCAL_SHAPE, PROPAGATE, layout_of, without_layout
from tasoc.ir.graph import sig_of, tensor_type
from tasoc.ir.program import map_types
from tasoc.ir.shapes import DType, ShapeError, TensorSig
from tasoc.ir.soap import CollectiveKind, Mesh, Sharding, ShardingError

# --------------------------------------------------------------------- attributes


@irdl_attr_definition
class ShardingAttr(ParametrizedAttribute):
    """`#parallel.sharding<@mesh, [["x"], []], unreduced = ["y"]>`: see the module doc."""

    name = "parallel.sharding"

    mesh: StringAttr
    dims: ArrayAttr[ArrayAttr[StringAttr]]
    unreduced: ArrayAttr[StringAttr]

    @classmethod
    def parse_parameters(cls, parser: AttrParser) -> Sequence[Attribute]:
        parser.parse_punctuation("<")
        mesh = parser.parse_symbol_name()
        parser.parse_punctuation(",")

        def axes() -> ArrayAttr[StringAttr]:
            names = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE, lambda: StringAttr(parser.parse_str_literal())
            )
            return ArrayAttr(names)

        dims = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, axes)
        unreduced: ArrayAttr[StringAttr] = ArrayAttr(())
        if parser.parse_optional_punctuation(","):
            parser.parse_keyword("unreduced")
            parser.parse_punctuation("=")
            unreduced = ArrayAttr(sorted(axes().data, key=lambda axis: axis.data))
        parser.parse_punctuation(">")
        return (mesh, ArrayAttr(dims), unreduced)

    def print_parameters(self, printer: Printer) -> None:
        printer.print_string(str(self.sharding).removeprefix("#parallel.sharding"))

    def verify(self) -> None:
        try:
            self.sharding  # noqa: B018 - building it checks that no axis is used twice
        except ShardingError as err:
            raise VerifyException(str(err)) from None

    @property
    def sharding(self) -> Sharding:
        return _sharding(self)

    def __hash__(self) -> int:
        # xDSL hashes an attribute's parameters on every call, and these are nested
        # arrays of strings hashed at every use of a sharded type (`sig_of`'s cache,
        # `_sharding`'s): computed once, verifying a sharded program costs about what
        # verifying a plain one does (benchmarks/parallel.py).
        cached = self.__dict__.get("_hash")
        if cached is None:
            cached = hash((self.mesh, self.dims, self.unreduced))
            object.__setattr__(self, "_hash", cached)
        return cached

    @staticmethod
    def of(sharding: Sharding) -> ShardingAttr:
        return _attr(sharding)


@functools.cache
def _sharding(attr: ShardingAttr) -> Sharding:
    return Sharding(
        attr.mesh.data,
        tuple(tuple(a.data for a in dim.data) for dim in attr.dims.data),
        tuple(a.data for a in attr.unreduced.data),
    )


@functools.cache
def _attr(sharding: Sharding) -> ShardingAttr:
    def names(axes: Sequence[str]) -> ArrayAttr[StringAttr]:
        return ArrayAttr(StringAttr(a) for a in axes)

    return ShardingAttr(
        StringAttr(sharding.mesh),
        ArrayAttr(names(axes) for axes in sharding.dims),
        names(sharding.unreduced),
    )


def sharding_of(sig: TensorSig) -> Sharding | None:
    """The sharding of a tensor type, None for a plain (unsharded) one; also under an
    encoding that wraps it (a host memory space: `#memory.space<host, #parallel...>`)."""
    encoding = sig.encoding
    if isinstance(encoding, ShardingAttr):
        return encoding.sharding
    wrapped = layout_of(encoding, ShardingAttr)
    return None if wrapped is None else wrapped.sharding


def with_sharding(sig: TensorSig, sharding: Sharding | None) -> TensorSig:
    """`sig` laid out by `sharding` (None: unsharded), as a device value."""
    return TensorSig(sig.shape, sig.dtype, None if sharding is None else ShardingAttr.of(sharding))


# ----------------------------------------------------------------------------- mesh


@irdl_op_definition
class MeshOp(IRDLOperation):
    """`parallel.mesh @mesh ["x" = 2, "y" = 4] (devices [0, 1, ...])?`"""

    name = "parallel.mesh"

    sym_name = prop_def(SymbolNameConstraint())
    axes = prop_def(ArrayAttr[StringAttr])
    shape = prop_def(DenseArrayBase.constr(i64))
    devices = opt_prop_def(DenseArrayBase.constr(i64))

    traits = traits_def(SymbolOpInterface())

    @staticmethod
    def of(mesh: Mesh) -> MeshOp:
        properties: dict[str, Attribute] = {
            "sym_name": StringAttr(mesh.name),
            "axes": ArrayAttr(StringAttr(a) for a in mesh.axis_names),
            "shape": DenseArrayBase.from_list(i64, [s for _, s in mesh.axes]),
        }
        if mesh.devices is not None:
            properties["devices"] = DenseArrayBase.from_list(i64, mesh.devices)
        return MeshOp.create(properties=properties)

    @property
    def mesh(self) -> Mesh:
        return _mesh(self.sym_name, self.axes, self.shape, self.devices)

    @classmethod
    def parse(cls, parser: Parser) -> Self:
        name = parser.parse_symbol_name()

        def axis() -> tuple[str, int]:
            axis_name = parser.parse_str_literal()
            parser.parse_punctuation("=")
            return axis_name, parser.parse_integer(allow_boolean=False, allow_negative=False)

        axes = parser.parse_comma_separated_list(parser.Delimiter.SQUARE, axis)
        devices = None
        if parser.parse_optional_keyword("devices"):
            devices = parser.parse_comma_separated_list(
                parser.Delimiter.SQUARE,
                lambda: parser.parse_integer(allow_boolean=False, allow_negative=False),
            )
        properties: dict[str, Attribute] = {
            "sym_name": name,
            "axes": ArrayAttr(StringAttr(a) for a, _ in axes),
            "shape": DenseArrayBase.from_list(i64, [s for _, s in axes]),
        }
        if devices is not None:
            properties["devices"] = DenseArrayBase.from_list(i64, devices)
        op = cls.create(properties=properties)
        op.attributes |= parser.parse_optional_attr_dict()
        return op

    def print(self, printer: Printer) -> None:
        printer.print_string(" ")
        printer.print_symbol_name(self.sym_name.data)
        axes = ", ".join(f'"{a}" = {s}' for a, s in self.mesh.axes)
        printer.print_string(f" [{axes}]")
        if self.devices is not None:
            ids = ", ".join(map(str, self.devices.get_values()))
            printer.print_string(f" devices [{ids}]")
        printer.print_op_attributes(self.attributes)

    def verify_(self) -> None:
        if len(self.axes.data) != len(self.shape.get_values()):
            raise VerifyException("'parallel.mesh': axes and shape differ in length")
        try:
            self.mesh  # noqa: B018 - building it checks the axes and devices
        except ShardingError as err:
            raise VerifyException(f"'parallel.mesh': {err}") from None


@functools.cache
def _mesh(
    name: StringAttr,
    axes: ArrayAttr[StringAttr],
    shape: DenseArrayBase,
    devices: DenseArrayBase | None,
) -> Mesh:
    sizes = cast(tuple[int, ...], shape.get_values())
    return Mesh(
        name.data,
        tuple((a.data, s) for a, s in zip(axes.data, sizes, strict=True)),
        None if devices is None else cast(tuple[int, ...], devices.get_values()),
    )


def meshes(module: ModuleOp) -> dict[str, Mesh]:
    """The meshes a module defines, by name."""
    return {op.mesh.name: op.mesh for op in module.ops if isinstance(op, MeshOp)}


def lookup_mesh(op: Operation, name: str) -> Mesh:
    """The mesh `name` as seen from `op` (in the nearest enclosing module); ShardingError
    when no mesh has that name.

    Not `SymbolTable.lookup_symbol`, which builds attributes per call: this runs for
    every op of a sharded program, and a module holds a handful of top-level ops.
    """
    module = op if isinstance(op, ModuleOp) else op.parent_op()
    while module is not None and not isinstance(module, ModuleOp):
        module = module.parent_op()
    if module is not None:
        for candidate in module.ops:
            if isinstance(candidate, MeshOp) and candidate.sym_name.data == name:
                return candidate.mesh
    raise ShardingError(f"no parallel.mesh @{name} in the module")


def check_values(op: Operation, sigs: Sequence[TensorSig], *, one_mesh: bool) -> Mesh | None:
    """Check every sharded type in `sigs` against its mesh; the mesh when all share one.

    A plain value beside sharded ones is refused: a sharded op runs on a mesh, and
    every value it touches says how it lies there.
    """
    found: dict[str, Mesh] = {}
    for sig in sigs:
        sharding = sharding_of(sig)
        if sharding is None:
            raise ShardingError(f"value of type {sig} has no sharding beside sharded ones")
        mesh = found.get(sharding.mesh) or lookup_mesh(op, sharding.mesh)
        found[mesh.name] = mesh
        problem = _misfit(sharding, sig.shape, sig.dtype, mesh)
        if problem is not None:
            raise ShardingError(problem)
    if one_mesh and len(found) > 1:
        raise ShardingError(
            "values are on different meshes "
            + ", ".join(f"@{m}" for m in sorted(found))
            + ": move them with parallel.replicate first"
        )
    return next(iter(found.values()), None)


@functools.cache
def _misfit(sharding: Sharding, shape: tuple[int, ...], dtype: DType, mesh: Mesh) -> str | None:
    """Why `sharding` does not fit a tensor on `mesh` (None when it does); cached, as a
    program repeats few layouts over many values."""
    try:
        sharding.check(TensorSig(shape, dtype), mesh)
    except ShardingError as err:
        return str(err)
    return None


def _check_op(op: Operation, sigs: Sequence[TensorSig]) -> None:
    """The module-level check of a `graph` op's values, or of a function's signature
    (whose arguments and results may lie on several meshes)."""
    if isinstance(op, func.FuncOp):
        sigs = [sig for sig in sigs if isinstance(sig.encoding, ShardingAttr)]
    try:
        check_values(op, sigs, one_mesh=not isinstance(op, func.FuncOp))
    except ShardingError as err:
        raise VerifyException(f"'{op.name}': {err}") from None


def _propagate(
    op: str, inputs: Sequence[TensorSig], attrs: dict, results: list[TensorSig]
) -> list[TensorSig]:
    """The results of `op` laid out as its operands' shardings imply (`soap.propagate`).

    Memoized on everything the answer depends on: a program repeats the same op on the
    same layouts many times, and this runs once per op each time a module verifies.
    """
    try:
        key = (op, tuple(inputs), tuple(attrs.items()), tuple(results))
        hash(key)
    except TypeError:  # an attribute value that does not hash: compute it
        return _propagated(op, tuple(inputs), attrs, tuple(results))
    return list(_propagate_cached(key))


@functools.lru_cache(maxsize=1 << 16)
def _propagate_cached(key: tuple) -> tuple[TensorSig, ...]:
    op, inputs, attrs, results = key
    return tuple(_propagated(op, inputs, dict(attrs), results))


def _propagated(
    op: str, inputs: Sequence[TensorSig], attrs: dict, results: Sequence[TensorSig]
) -> list[TensorSig]:
    operands = [sharding_of(sig) for sig in inputs]
    for index, (sig, sharding) in enumerate(zip(inputs, operands, strict=True)):
        if sharding is None:
            raise ShardingError(f"operand #{index} has no sharding beside sharded operands")
        if len(sharding.dims) != sig.rank:
            raise ShardingError(
                f"operand #{index}: sharding {sharding} has {len(sharding.dims)} dims "
                f"for a tensor of rank {sig.rank}"
            )
    present = cast(list[Sharding], operands)
    names = {s.mesh for s in present}
    if len(names) > 1:
        raise ShardingError(
            "operands are on different meshes "
            + ", ".join(f"@{m}" for m in sorted(names))
            + ": move them with parallel.replicate first"
        )
    rule = soap.rule_of(op, inputs, attrs, results)
    shardings, _ = soap.propagate(rule, present, present[0].mesh)
    return [with_sharding(r, s) for r, s in zip(results, shardings, strict=True)]


def _local_shape(op: Operation, sig: TensorSig) -> tuple[int, ...]:
    """The block of a sharded value one device holds (`encodings.LOCAL_SHAPE`)."""
    sharding = sharding_of(sig)
    assert sharding is not None
    return sharding.local_shape(sig.shape, lookup_mesh(op, sharding.mesh))


PROPAGATE[ShardingAttr] = _propagate
CHECK[ShardingAttr] = _check_op
LOCAL_SHAPE[ShardingAttr] = _local_shape


# --------------------------------------------------------------------- collectives


class CollectiveOp(ConversionOp):
    """A communication op: one sharded operand, one result of the same shape and
    element type laid out differently. Written `%r = parallel.<kind> %x : <type>`."""

    KIND: ClassVar[CollectiveKind]

    traits = traits_def(Pure())

    @classmethod
    def build_on(cls, value: SSAValue, result: Sharding) -> Self:
        sig = sig_of(value.type)
        return cls.create(operands=[value], result_types=[tensor_type(with_sharding(sig, result))])

    def verify_(self) -> None:
        try:
            source, target = sig_of(self.input.type), sig_of(self.output.type)
            for end, sig in (("operand", source), ("result", target)):
                if sig.encoding is not None and not isinstance(sig.encoding, ShardingAttr):
                    raise ShardingError(
                        f"{end} {sig} is not a device value: collectives move device "
                        "values (swap it in first)"
                    )
            if (source.shape, source.dtype) != (target.shape, target.dtype):
                raise ShardingError(
                    f"result {with_sharding(target, None)} differs from operand "
                    f"{with_sharding(source, None)} beyond its layout"
                )
            check_values(self, [source, target], one_mesh=self.KIND != "replicate")
            explain = check_transition(self.KIND, sharding_of(source), sharding_of(target))  # type: ignore[arg-type]
        except (ShardingError, ShapeError) as err:
            raise VerifyException(f"'{self.name}': {err}") from None
        if explain:
            raise VerifyException(f"'{self.name}': {explain}")

    def communicated_bytes(self, mesh: Mesh) -> int:
        """Bytes of the operand on each device, the size the HLO collective reads."""
        sig = sig_of(self.input.type)
        sharding = sharding_of(sig)
        assert sharding is not None
        local = sharding.local_shape(sig.shape, mesh)
        return sig.dtype.itemsize * math.prod(local)


def _extends(longer: Sequence[str], shorter: Sequence[str]) -> bool:
    return tuple(longer[: len(shorter)]) == tuple(shorter)


def check_transition(kind: CollectiveKind, source: Sharding, target: Sharding) -> str | None:
    """Why `kind` cannot turn `source` into `target` (None when it can)."""
    pairs = list(zip(source.dims, target.dims, strict=True))
    said = f"{source} into {target}"
    if kind == "replicate":
        if source.mesh == target.mesh:
            return f"replicate copies onto another mesh; {said} stays on @{source.mesh}"
        if source.unreduced or target.unreduced:
            return f"replicate moves complete values only, not partial sums: {said}"
        return None
    if kind == "all_slice":
        ok = source.unreduced == target.unreduced and all(_extends(t, s) for s, t in pairs)
        return (
            None if ok and source != target else f"all_slice only splits dims further, not {said}"
        )
    if kind == "all_gather":
        ok = source.unreduced == target.unreduced and all(_extends(s, t) for s, t in pairs)
        return None if ok and source != target else f"all_gather only joins split dims, not {said}"
    if kind == "all_reduce":
        ok = source.dims == target.dims and set(target.unreduced) < set(source.unreduced)
        return None if ok else f"all_reduce only completes partial sums, not {said}"
    if kind == "reduce_scatter":
        finished = set(source.unreduced) - set(target.unreduced)
        added = [a for s, t in pairs for a in t[len(s) :]]
        ok = (
            set(target.unreduced) < set(source.unreduced)
            and all(_extends(t, s) for s, t in pairs)
            and sorted(added) == sorted(finished)
        )
        return None if ok else f"reduce_scatter splits dims by the axes it completes, not {said}"
    # all_to_all: one block of axes leaves the end of one dim for the end of another
    changed = [d for d, (s, t) in enumerate(pairs) if s != t]
    if source.unreduced == target.unreduced and len(changed) == 2:
        first, second = changed
        for src, dst in ((first, second), (second, first)):
            s_from, t_from = source.dims[src], target.dims[src]
            s_to, t_to = source.dims[dst], target.dims[dst]
            moved = s_from[len(t_from) :]
            if moved and _extends(s_from, t_from) and t_to == (*s_to, *moved):
                return None
    return f"all_to_all moves the last axes of one dim to the end of another, not {said}"


@irdl_op_definition
class AllSliceOp(CollectiveOp):
    name = "parallel.all_slice"
    KIND: ClassVar[CollectiveKind] = "all_slice"


@irdl_op_definition
class AllGatherOp(CollectiveOp):
    name = "parallel.all_gather"
    KIND: ClassVar[CollectiveKind] = "all_gather"


@irdl_op_definition
class AllReduceOp(CollectiveOp):
    name = "parallel.all_reduce"
    KIND: ClassVar[CollectiveKind] = "all_reduce"


@irdl_op_definition
class ReduceScatterOp(CollectiveOp):
    name = "parallel.reduce_scatter"
    KIND: ClassVar[CollectiveKind] = "reduce_scatter"


@irdl_op_definition
class AllToAllOp(CollectiveOp):
    name = "parallel.all_to_all"
    KIND: ClassVar[CollectiveKind] = "all_to_all"


@irdl_op_definition
class ReplicateOp(CollectiveOp):
    name = "parallel.replicate"
    KIND: ClassVar[CollectiveKind] = "replicate"


COLLECTIVES: tuple[type[CollectiveOp], ...] = (
    AllSliceOp,
    AllGatherOp,
    AllReduceOp,
    ReduceScatterOp,
    AllToAllOp,
    ReplicateOp,
)
COLLECTIVE_BY_KIND: dict[str, type[CollectiveOp]] = {op.KIND: op for op in COLLECTIVES}

Parallel = Dialect("parallel", [MeshOp, *COLLECTIVES], [ShardingAttr])


# ------------------------------------------------------------------ whole programs


MACHINE_ATTR = "parallel.machine"
"""Module attribute soap-shard writes: the machine (a preset, `cpu-N` or a machine
file) its plan was simulated on, which `placement` prices a sharded step on unless
told otherwise."""


def machine_of(module: ModuleOp) -> str | None:
    """The machine a sharded program was planned on (`MACHINE_ATTR`), None if unsaid."""
    attr = module.attributes.get(MACHINE_ATTR)
    return attr.data if isinstance(attr, StringAttr) else None


def is_sharded(module: ModuleOp) -> bool:
    """Whether the module defines a mesh (a program of the `parallel` dialect)."""
    return any(isinstance(op, MeshOp) for op in module.ops)


def carries_shardings(module: ModuleOp) -> bool:
    """Whether a value of the module has a sharded type: a program that was sharded.

    Narrower than `is_sharded`: a module whose `parallel.mesh` is all it has of the
    dialect (and argument hints, which are attributes) is one `soap-shard` plans on
    that mesh, not one it sharded already.
    """
    for op in module.walk():
        block_args = (arg for region in op.regions for block in region.blocks for arg in block.args)
        for value in (*op.results, *block_args):
            if isinstance(value.type, TensorType) and isinstance(value.type.encoding, ShardingAttr):
                return True
    return False


def unsharded(module: ModuleOp) -> ModuleOp:
    """A copy of `module` as the one-device program it is equal to: collectives
    dropped (each is the identity on the logical value), shardings removed, meshes
    gone, and the module attributes of the plan (`parallel.*`). The reference a sharded
    program is checked against."""
    copy = module.clone()
    for name in [n for n in copy.attributes if n.startswith("parallel.")]:
        del copy.attributes[name]
    for op in list(copy.walk()):
        if isinstance(op, CollectiveOp):
            op.output.replace_all_uses_with(op.input)
            op.detach()
            op.erase()
        elif isinstance(op, MeshOp):
            op.detach()
            op.erase()
    map_types(copy, _plain)
    return copy


def _plain(type_: Attribute) -> Attribute:
    """`type_` without its sharding, wherever it is (under a memory space too)."""
    if not isinstance(type_, TensorType) or sharding_of(sig := sig_of(type_)) is None:
        return type_
    encoding = sig.encoding
    if isinstance(encoding, ShardingAttr):
        return TensorType(type_.element_type, type_.get_shape())
    return tensor_type(replace(sig, encoding=without_layout(encoding, ShardingAttr)))
