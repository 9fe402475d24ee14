"""The SOAP space of every op: which dims split, what a split needs, what an edge costs.

FlexFlow (Jia thesis §3.3, Table 3.1) parallelizes an operator along its Sample,
Operator, Attribute and Parameter dimensions. tasoc writes each op's parallel
dimensions the way Shardy writes sharding rules: as *factors* of the op's iteration
space, each mapped to the tensor dims it indexes. An op's rule (`OpRule`) is
part of its definition (`OpDef.soap`, `opdef.py`), beside its shape rule, as JAX
registers a primitive's sharding rule beside its shape rule; the verifier, the
strategies, the backends and the cost model all read it.

A *configuration* assigns mesh axes to factors (each axis to one factor at most).
From it follow the shardings of every operand and result:

* a tensor dim indexed by a factor is split by that factor's axes;
* a tensor that a factor does not index is replicated along its axes (a conv weight
  along the batch axes);
* a result that a factor does not index, when the op sums over that factor (a
  matmul's contracting dim, a convolution's input channels, the batch of a weight
  gradient), holds partial sums along its axes: it is *unreduced* there, and an
  explicit `parallel.all_reduce` or `parallel.reduce_scatter` completes it.

Two kinds of factor need more than the local op on local shards, and say so:
`mean` factors are ones the op divides by (a mean over the batch): the local result
is scaled by 1/degree. `synced` factors are ones the op takes statistics over
(batchnorm's batch in training): the local op all-reduces its statistics, which is
the only communication not written as a `parallel` op, and the rule declares it
(`internal_collectives`) so the HLO audit expects it.

Because every factor an op's results carry comes from an operand, the shardings of
the operands determine those of the results (`propagate`): that is the typing rule
of a sharded program, and a mismatch (communication that is not explicit) is a
type error naming the dim. This module is plain Python over plain values
(`Mesh`, `Sharding`); `parallel.py` is the xDSL dialect around it.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from tasoc.ir.opdef import op_def
from tasoc.ir.shapes import ShapeError, TensorSig

FactorKind = Literal["sample", "attribute", "parameter", "reduction"]
"""Table 3.1's dimensions (Operator is a sub-mesh, not a factor) plus FlexFlow's
Reduction degree: a contracting dim whose split leaves partial sums."""


class ShardingError(ShapeError):
    """Operand shardings that do not fit an op's SOAP rule, or a sharding that does
    not fit its tensor or mesh."""


# ------------------------------------------------------------------------ meshes


@dataclass(frozen=True, slots=True)
class Mesh:
    """Named device axes with sizes, on a device group.

    `devices` lists the device ids (indices into the runtime's device list) in mesh
    order, row-major over the axes; None means `0 .. size-1`. A mesh on some of the
    devices is FlexFlow's Operator dimension: ops on it run on that group only.
    """

    name: str
    axes: tuple[tuple[str, int], ...]
    devices: tuple[int, ...] | None = None
    size: int = field(init=False, repr=False, compare=False)
    """The number of devices (made once: searches ask it millions of times)."""
    device_ids: tuple[int, ...] = field(init=False, repr=False, compare=False)
    """`devices`, or `0 .. size-1` when None."""

    def __post_init__(self) -> None:
        size = math.prod(size for _, size in self.axes)
        object.__setattr__(self, "size", size)
        object.__setattr__(
            self, "device_ids", self.devices if self.devices is not None else tuple(range(size))
        )
        names = [axis for axis, _ in self.axes]
        repeated = sorted({axis for axis in names if names.count(axis) > 1})
        if repeated:
            raise ShardingError(f"mesh @{self.name} repeats axis '{repeated[0]}'")
        for axis, size in self.axes:
            if size < 1:
                raise ShardingError(f"mesh @{self.name} has axis '{axis}' of size {size} < 1")
        if self.devices is not None:
            if len(self.devices) != self.size:
                raise ShardingError(
                    f"mesh @{self.name} has {self.size} positions but lists "
                    f"{len(self.devices)} devices"
                )
            if len(set(self.devices)) != len(self.devices) or min(self.devices) < 0:
                raise ShardingError(f"mesh @{self.name} lists a device twice or below 0")

    @property
    def axis_names(self) -> tuple[str, ...]:
        return tuple(axis for axis, _ in self.axes)

    def axis_size(self, axis: str) -> int:
        for name, size in self.axes:
            if name == axis:
                return size
        raise ShardingError(
            f"mesh @{self.name} has no axis '{axis}' (axes: {', '.join(self.axis_names)})"
        )

    def degree(self, axes: Sequence[str]) -> int:
        """How many pieces `axes` split a dim into."""
        return math.prod(self.axis_size(axis) for axis in axes)


# --------------------------------------------------------------------- shardings


@dataclass(frozen=True, slots=True)
class Sharding:
    """How one tensor is laid out on a mesh.

    `dims[d]` are the mesh axes splitting tensor dim d, major to minor (the first
    axis picks the coarsest block); `unreduced` are axes along which the devices hold
    partial sums of the value (a set, kept sorted); every other axis of the mesh
    holds copies (replicated).
    """

    mesh: str
    dims: tuple[tuple[str, ...], ...]
    unreduced: tuple[str, ...] = ()

    def __post_init__(self) -> None:
        # Partial sums along a set of axes: one order (sorted), so that equal layouts
        # compare equal whichever order an op or a user named them in.
        object.__setattr__(self, "unreduced", tuple(sorted(self.unreduced)))
        used = [axis for axes in self.dims for axis in axes] + list(self.unreduced)
        if len(set(used)) != len(used):
            raise ShardingError(f"a mesh axis is used twice in {self}")

    @staticmethod
    def replicated(mesh: str, rank: int) -> Sharding:
        return Sharding(mesh, ((),) * rank)

    @property
    def used_axes(self) -> frozenset[str]:
        return frozenset(itertools.chain(*self.dims, self.unreduced))

    @property
    def is_replicated(self) -> bool:
        return not self.used_axes

    def local_shape(self, shape: Sequence[int], mesh: Mesh) -> tuple[int, ...]:
        return tuple(size // mesh.degree(axes) for size, axes in zip(shape, self.dims, strict=True))

    def check(self, sig: TensorSig, mesh: Mesh) -> None:
        """ShardingError unless this sharding names `mesh`'s axes and divides `sig`."""
        if len(self.dims) != sig.rank:
            raise ShardingError(
                f"sharding {self} has {len(self.dims)} dims for a tensor of rank {sig.rank}"
            )
        if self.mesh != mesh.name:
            raise ShardingError(f"sharding {self} is not on mesh @{mesh.name}")
        for axis in self.used_axes:
            mesh.axis_size(axis)
        for dim, (size, axes) in enumerate(zip(sig.shape, self.dims, strict=True)):
            degree = mesh.degree(axes)
            if size % degree:
                raise ShardingError(
                    f"dim {dim} of size {size} does not split into {degree} pieces "
                    f"(axes {', '.join(axes)}) in {self}"
                )

    def __str__(self) -> str:
        dims = ", ".join("[" + ", ".join(f'"{a}"' for a in axes) + "]" for axes in self.dims)
        text = f"@{self.mesh}, [{dims}]"
        if self.unreduced:
            text += ", unreduced = [" + ", ".join(f'"{a}"' for a in self.unreduced) + "]"
        return f"#parallel.sharding<{text}>"


# --------------------------------------------------------------------- op rules


@dataclass(frozen=True, slots=True)
class Factor:
    """One dimension of an op's iteration space that devices may split."""

    name: str
    size: int
    kind: FactorKind
    mean: bool = False
    """The op divides by this factor's extent (a mean): local results times 1/degree."""
    synced: bool = False
    """The op takes statistics over this factor: when it is split, the local op
    all-reduces them (and its results are not partial sums)."""


@dataclass(frozen=True, slots=True)
class OpRule:
    """An op's parallel dimensions and which tensor dim each indexes.

    `operands[i][d]` / `results[r][d]` name the factor indexing dim d of operand i /
    result r, or None where that dim cannot be split (a softmax's axis, a conv's
    kernel window). `linear` lists groups of operands the op is jointly linear in:
    partial sums may enter through exactly one group (all its operands unreduced
    along the same axes, the others not), and leave as partial sums. `shape_only`
    lists operands the op reads for their shape alone (the x of a mean's gradient):
    their values never reach a result, so no communication can serve them.
    """

    factors: tuple[Factor, ...]
    operands: tuple[tuple[str | None, ...], ...]
    results: tuple[tuple[str | None, ...], ...]
    linear: tuple[tuple[int, ...], ...] = ()
    shape_only: tuple[int, ...] = ()
    by_name: Mapping[str, Factor] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        object.__setattr__(self, "by_name", {f.name: f for f in self.factors})
        for dims in (*self.operands, *self.results):
            for name in dims:
                if name is not None and name not in self.by_name:
                    raise ValueError(f"rule maps a dim to unknown factor '{name}'")


Config = Mapping[str, tuple[str, ...]]
"""A SOAP configuration: mesh axes per factor name (factors not named are unsplit)."""


def rule_of(
    op: str, inputs: Sequence[TensorSig], attrs: Mapping[str, Any], results: Sequence[TensorSig]
) -> OpRule:
    """The SOAP rule of `op` (its `OpDef.soap`) at these types; ShardingError for an op
    without a definition."""
    try:
        definition = op_def(op)
    except KeyError:
        raise ShardingError(f"op '{op}' has no SOAP rule") from None
    return definition.soap(inputs, attrs, results)


# ----------------------------------------------------------------- configurations


def shardings_for(rule: OpRule, config: Config, mesh: str) -> tuple[list[Sharding], list[Sharding]]:
    """The operand and result shardings configuration `config` of `rule` needs."""

    def layout(dims: Sequence[str | None]) -> tuple[tuple[str, ...], ...]:
        return tuple(config.get(name, ()) if name is not None else () for name in dims)

    operands = [Sharding(mesh, layout(dims)) for dims in rule.operands]
    results = []
    for dims in rule.results:
        indexed = set(dims)
        unreduced = tuple(
            axis
            for factor in rule.factors
            if factor.name not in indexed and not factor.synced
            for axis in config.get(factor.name, ())
        )
        results.append(Sharding(mesh, layout(dims), unreduced))
    return operands, results


def configurations(rule: OpRule, mesh: Mesh) -> Iterator[dict[str, tuple[str, ...]]]:
    """Every legal configuration of `rule` on `mesh`: each axis to one factor or none,
    axes of a factor in mesh order, every factor's degree dividing its size. An axis
    of size 1 splits nothing, so it takes no factor (a split over it would be the
    unsplit configuration again, and a search would walk equal strategies).

    Starts with the unsplit configuration; (F+1)^A of them for F factors and A axes
    of two devices or more.
    """
    choices = [None, *(f.name for f in rule.factors)]
    axes = [axis for axis, size in mesh.axes if size > 1]
    for assignment in itertools.product(choices, repeat=len(axes)):
        config: dict[str, tuple[str, ...]] = {}
        for axis, factor in zip(axes, assignment, strict=True):
            if factor is not None:
                config[factor] = (*config.get(factor, ()), axis)
        if all(rule.by_name[name].size % mesh.degree(axes) == 0 for name, axes in config.items()):
            yield config


def internal_collectives(rule: OpRule, config: Config) -> list[tuple[str, tuple[str, ...]]]:
    """The all-reduces the local op runs itself under `config`: one per split synced
    factor, as (factor name, axes)."""
    return [(f.name, config[f.name]) for f in rule.factors if f.synced and config.get(f.name)]


def config_of(
    rule: OpRule, operands: Sequence[Sharding]
) -> tuple[dict[str, tuple[str, ...]], tuple[str, ...]]:
    """The configuration operand shardings imply, and the partial-sum axes they bring in.

    ShardingError, naming the operand and dim, when they are not one configuration:
    a dim split that the op cannot split, one factor split two ways, an axis used by
    two factors, or partial sums where the op is not linear.
    """
    config: dict[str, tuple[str, ...]] = {}
    where: dict[str, str] = {}
    for index, (sharding, dims) in enumerate(zip(operands, rule.operands, strict=True)):
        for dim, (axes, name) in enumerate(zip(sharding.dims, dims, strict=True)):
            here = f"operand #{index} dim {dim}"
            if name is None:
                if axes:
                    raise ShardingError(f"{here} is {_split(axes)} but the op cannot split it")
                continue
            if name in config and config[name] != axes:
                raise ShardingError(
                    f"{here} is {_split(axes)} but {where[name]} is {_split(config[name])}: "
                    f"they index the same '{name}' dim; make them equal with a parallel op first"
                )
            if name not in config:
                config[name], where[name] = axes, here
    owner: dict[str, str] = {}
    for name, axes in config.items():
        for axis in axes:
            if axis in owner:
                raise ShardingError(
                    f"mesh axis '{axis}' splits both the '{owner[axis]}' and the '{name}' dims"
                )
            owner[axis] = name
    unreduced = _partial_sums(rule, operands)
    for axis in unreduced:
        if axis in owner:
            raise ShardingError(f"mesh axis '{axis}' holds partial sums and splits '{owner[axis]}'")
    for index, sharding in enumerate(operands):
        for axis in sharding.used_axes - set(owner) - set(unreduced):
            raise ShardingError(
                f"operand #{index} uses mesh axis '{axis}' that no dim of the op is split by"
            )
    return config, unreduced


def _partial_sums(rule: OpRule, operands: Sequence[Sharding]) -> tuple[str, ...]:
    """The unreduced axes the operands bring, checked against the op's linearity."""
    carrying = tuple(i for i, s in enumerate(operands) if s.unreduced)
    if not carrying:
        return ()
    group = next((g for g in rule.linear if set(carrying) <= set(g)), None)
    unreduced = {operands[i].unreduced for i in carrying}
    if group is None or set(group) != set(carrying) or len(unreduced) > 1:
        accepted = (
            "the op takes them only in operand group "
            + " or ".join(str(list(g)) for g in rule.linear)
            + ", all unreduced along the same axes"
            if rule.linear
            else "the op is not linear in any operand"
        )
        raise ShardingError(
            f"operands {list(carrying)} hold partial sums but {accepted}; all-reduce first"
        )
    return next(iter(unreduced))


def propagate(
    rule: OpRule, operands: Sequence[Sharding], mesh: str
) -> tuple[list[Sharding], dict[str, tuple[str, ...]]]:
    """The result shardings an op's operand shardings imply, with their configuration."""
    config, unreduced = config_of(rule, operands)
    _, results = shardings_for(rule, config, mesh)
    if unreduced:
        results = [Sharding(mesh, r.dims, (*unreduced, *r.unreduced)) for r in results]
    return results, config


def _split(axes: Sequence[str]) -> str:
    return "split by [" + ", ".join(f'"{a}"' for a in axes) + "]" if axes else "not split"


# ------------------------------------------------------------------ communication

CollectiveKind = Literal[
    "all_slice", "all_gather", "all_reduce", "reduce_scatter", "all_to_all", "replicate"
]


@dataclass(frozen=True, slots=True)
class Collective:
    """One explicit communication step: its kind, the sharding it produces, the mesh
    axes it communicates over and the bytes of its operand on each device (what the
    compiled HLO's collective reads)."""

    kind: CollectiveKind
    result: Sharding
    axes: tuple[str, ...]
    bytes: int


def reshard(source: Sharding, target: Sharding, sig: TensorSig, mesh: Mesh) -> list[Collective]:
    """The collectives that turn `source` into `target` on one mesh, in order:
    partial sums completed (reduce-scatter onto a dim the target splits next, else
    all-reduce), axes moved between dims (all-to-all) or gathered (all-gather), then
    new splits taken locally (all-slice). Empty when they are equal.

    ShardingError when the target holds partial sums the source does not (no
    communication creates them) or the shardings are on different meshes.
    """
    return list(_reshard(source, target, sig, mesh))


@functools.lru_cache(maxsize=1 << 16)
def _reshard(
    source: Sharding, target: Sharding, sig: TensorSig, mesh: Mesh
) -> tuple[Collective, ...]:
    """`reshard`, kept: a search's edits ask again and again for the few layouts each
    value moves between (rnnlm's chain at 64 devices: 1,000 per proposal)."""
    if source.mesh != target.mesh:
        raise ShardingError(
            f"{source} and {target} are on different meshes: use parallel.replicate"
        )
    if not set(target.unreduced) <= set(source.unreduced):
        raise ShardingError(f"no collective turns {source} into partial sums {target}")
    steps: list[Collective] = []
    current = source

    def step(kind: CollectiveKind, result: Sharding, axes: tuple[str, ...]) -> None:
        nonlocal current
        local = math.prod(current.local_shape(sig.shape, mesh)) * sig.dtype.itemsize
        steps.append(Collective(kind, result, axes, local))
        current = result

    finish = [a for a in current.unreduced if a not in target.unreduced]
    scatter: dict[int, list[str]] = {}
    for axis in finish:
        dim = next(
            (
                d
                for d, axes in enumerate(target.dims)
                if axes[: len(current.dims[d]) + len(scatter.get(d, [])) + 1]
                == (*current.dims[d], *scatter.get(d, []), axis)
            ),
            None,
        )
        if dim is not None:
            scatter.setdefault(dim, []).append(axis)
    reduced = tuple(a for a in finish if all(a not in axes for axes in scatter.values()))
    kept = tuple(a for a in current.unreduced if a not in finish)
    if reduced:
        step(
            "all_reduce",
            Sharding(
                current.mesh, current.dims, kept + tuple(a for a in finish if a not in reduced)
            ),
            reduced,
        )
    for dim, axes in scatter.items():
        dims = list(current.dims)
        dims[dim] = (*dims[dim], *axes)
        rest = tuple(a for a in current.unreduced if a not in axes)
        step("reduce_scatter", Sharding(current.mesh, tuple(dims), rest), tuple(axes))
    for dim in range(len(current.dims)):
        have, want = current.dims[dim], target.dims[dim]
        keep = _common_prefix(have, want)
        extra = have[keep:]
        if not extra:
            continue
        dims = list(current.dims)
        dims[dim] = have[:keep]
        destination = next(
            (
                d
                for d in range(len(dims))
                if d != dim and target.dims[d][: len(dims[d]) + len(extra)] == (*dims[d], *extra)
            ),
            None,
        )
        if destination is None:
            step("all_gather", Sharding(current.mesh, tuple(dims), current.unreduced), extra)
        else:
            dims[destination] = (*dims[destination], *extra)
            step("all_to_all", Sharding(current.mesh, tuple(dims), current.unreduced), extra)
    if current.dims != target.dims:
        added = tuple(a for d, axes in enumerate(target.dims) for a in axes[len(current.dims[d]) :])
        step("all_slice", Sharding(current.mesh, target.dims, current.unreduced), added)
    assert current == target, (current, target)
    return tuple(steps)


def _common_prefix(a: Sequence[str], b: Sequence[str]) -> int:
    n = 0
    while n < min(len(a), len(b)) and a[n] == b[n]:
        n += 1
    return n


def reshard_bytes(source: Sharding, target: Sharding, sig: TensorSig, mesh: Mesh) -> int:
    """Bytes each device puts into collectives to turn `source` into `target`
    (all-slices are local: zero)."""
    return sum(s.bytes for s in reshard(source, target, sig, mesh) if s.kind != "all_slice")
