"""Lower a sharded program (the `parallel` dialect) to one jitted `jax.shard_map`.

A sharded program already says everything a device does: each `graph` op computes on
its operands' local shards, and every communication is an explicit `parallel`
collective. So the lowering is shard_map's own model, one to one: `@main` becomes one
function on local blocks, mapped over a `jax.sharding.Mesh` built from the module's
`parallel.mesh` (device ids index `jax.devices()`, axis names are the mesh's), with
each argument's and result's `PartitionSpec` read from its sharding. Inside it:

- a `graph` op runs its single-device JAX kernel (`lowering.JAX_KERNELS`) on its local
  operands, with the attributes written in global sizes made local
  (`soap_rules.local_attrs`: a reshape's target shape); an op without operands (a
  constant) is built whole and cut to the device's block;
- a split `mean` factor (an op that divides by an extent it now sees only part of)
  scales the local results by 1/degree, which turns them into the partial sums the
  SOAP rule types them as;
- a split `synced` factor (batchnorm's batch statistics) runs a kernel of this module
  that psums the statistics itself (`SYNCED_LOWERINGS`): the only communication not
  written as a `parallel` op, declared by `soap.internal_collectives`;
- each collective is the `jax.lax` collective of the same name over the mesh axes it
  moves, `tiled`, several axes on one dim passed as one tuple (major to minor, as
  `Sharding` orders them); `all_slice` is a local slice at `lax.axis_index`.

A program on several meshes (device groups, FlexFlow's Operator dimension) runs as one
such shard_map per run of consecutive ops on one mesh, in program order, joined by
`parallel.replicate`'s copies between meshes (`jax.device_put` onto the target's
`NamedSharding`): JAX runs each computation on its own devices.

The values are checked against the IR at trace time (each local result's shape), and
the program refuses what it cannot run faithfully: results left as partial sums,
arguments given as partial sums, partial sums used across meshes, integer means split
across devices.

A program placed too (`memory` swaps between the ops) runs its ops as `LocalStep`s
(`local_step`) in the placed lowering's schedule, mapped over its mesh with `map_over`
(`joint.py`).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.sharding import NamedSharding, PartitionSpec
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import Operation, SSAValue

from tasoc.backends.jax.lowering import (
    JAX_KERNELS,
    JaxKernel,
    ShardedArguments,
    check_results,
    jax_dtype,
)
from tasoc.backends.numpy.kernels import in_float32
from tasoc.ir import soap
from tasoc.ir.graph import GraphOp, sig_of
from tasoc.ir.parallel import CollectiveOp, ReplicateOp, check_transition, meshes, sharding_of
from tasoc.ir.program import ArgInfo, arg_infos, entry_function, return_values
from tasoc.ir.shapes import TensorSig
from tasoc.ir.soap import Mesh, Sharding
from tasoc.ir.soap_rules import local_attrs

LocalFn = Callable[[Sequence[jax.Array]], list[jax.Array]]
"""What one op does on one device: local operand blocks in, local result blocks out."""


AS_WRITTEN = {
    "xla_disable_hlo_passes": ",".join(
        (
            "cpu-all-reduce-combiner",
            "all-reduce-combiner",
            "all-gather-combiner",
            "reduce-scatter-combiner",
        )
    )
}
"""XLA options every sharded program compiles with: XLA's collective combiners off, so
the program runs the collectives the IR says, one for one. Which collectives to batch
together (as PyTorch's gradient buckets do) is a decision of the plan, priced by the
simulator; XLA merging them behind the plan's back would make the IR, the simulator
and the audit describe a program that does not run (docs/decisions.md)."""


class ShardedLoweringError(ValueError):
    """A sharded program this lowering cannot run (or not on the devices there are)."""


# ------------------------------------------------------------- synced statistics


@dataclass(frozen=True, slots=True)
class SyncedLowering:
    """The lowering of an op whose `synced` factors are split: `build(axes, degree)`
    gives the kernel that all-reduces its statistics over `axes` (`degree` devices).

    What the HLO audit expects of it: the per-channel moments of its first operand
    (`MOMENTS`: two all-reduces, mean then variance), which XLA computes once for all
    the ops that take them of the same value (batchnorm_train and its batchnorm_grad),
    then its own all-reduces, `statistics[i]` per-channel vectors in the i-th."""

    build: Callable[[tuple[str, ...], int], JaxKernel]
    statistics: tuple[int, ...] = ()


MOMENTS = (1, 1)
"""Per-channel vectors in each all-reduce of `_global_moments`: the mean, the variance."""


SYNCED_LOWERINGS: dict[str, SyncedLowering] = {}
"""Lowering by op short name of the ops with `synced` factors."""


def _channel_layout(x: jax.Array) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Batchnorm's statistics axes (all but the channel axis 1) and its broadcast shape."""
    return (0, *range(2, x.ndim)), (1, x.shape[1]) + (1,) * (x.ndim - 2)


def _global_moments(
    x: jax.Array, axes: tuple[str, ...], count: int
) -> tuple[jax.Array, jax.Array, jax.Array]:
    """Per-channel mean and biased variance over the whole (sharded) batch, two-pass
    as the reference computes them, and the centred local block."""
    reduce_axes, shape = _channel_layout(x)
    mean = lax.psum(jnp.sum(x, axis=reduce_axes), axes) / count
    centred = x - mean.reshape(shape)
    var = lax.psum(jnp.sum(centred * centred, axis=reduce_axes), axes) / count
    return mean, var, centred


def _batchnorm_train(axes: tuple[str, ...], degree: int) -> JaxKernel:
    def kernel(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
        x, scale, bias = inputs
        _, shape = _channel_layout(x)
        count = degree * math.prod(x.shape) // x.shape[1]
        mean, var, centred = _global_moments(x, axes, count)
        y = centred * lax.rsqrt(var.reshape(shape) + attrs["epsilon"]) * scale.reshape(shape)
        return [y + bias.reshape(shape), mean, var]

    return in_float32(kernel)


def _batchnorm_grad(axes: tuple[str, ...], degree: int) -> JaxKernel:
    """The closed form of batchnorm's gradient, with its batch sums all-reduced."""

    def kernel(attrs: Mapping[str, Any], inputs: Sequence[jax.Array]) -> list[jax.Array]:
        x, scale, dy = inputs
        reduce_axes, shape = _channel_layout(x)
        count = degree * math.prod(x.shape) // x.shape[1]
        _, var, centred = _global_moments(x, axes, count)
        inv_std = lax.rsqrt(var + attrs["epsilon"]).reshape(shape)
        xhat = centred * inv_std
        local = jnp.stack([jnp.sum(dy, axis=reduce_axes), jnp.sum(dy * xhat, axis=reduce_axes)])
        dbias, dscale = lax.psum(local, axes)
        dx = (scale.reshape(shape) * inv_std / count) * (
            count * dy - dbias.reshape(shape) - xhat * dscale.reshape(shape)
        )
        return [dx, dscale, dbias]

    return in_float32(kernel)


SYNCED_LOWERINGS["batchnorm_train"] = SyncedLowering(_batchnorm_train)
SYNCED_LOWERINGS["batchnorm_grad"] = SyncedLowering(_batchnorm_grad, (2,))


# ------------------------------------------------------------------- graph ops


def _block_of(array: jax.Array, sharding: Sharding, mesh: Mesh) -> jax.Array:
    """This device's block of a whole (replicated) array laid out as `sharding`."""
    for dim, axes in enumerate(sharding.dims):
        if axes:
            size = array.shape[dim] // mesh.degree(axes)
            array = lax.dynamic_slice_in_dim(array, lax.axis_index(axes) * size, size, dim)
    return array


def _graph_op(op: GraphOp, mesh: Mesh) -> LocalFn:
    """The local computation of one `graph` op (see the module doc)."""
    name, attrs = op.op_name(), op.py_attrs()
    in_sigs = [sig_of(v.type) for v in op.operands]
    out_sigs = [sig_of(r.type) for r in op.results]
    out_shardings = [program_sharding(sig) for sig in out_sigs]
    if name not in JAX_KERNELS:
        raise ShardedLoweringError(f"no JAX lowering for op '{op.name}'")
    kernel = JAX_KERNELS[name]
    if not op.operands:
        return lambda inputs: [
            _block_of(whole, sharding, mesh)
            for whole, sharding in zip(kernel(attrs, []), out_shardings, strict=True)
        ]
    rule = soap.rule_of(name, in_sigs, attrs, out_sigs)
    _, config = soap.propagate(rule, [program_sharding(sig) for sig in in_sigs], mesh.name)
    attrs = local_attrs(
        name,
        attrs,
        [program_sharding(sig).local_shape(sig.shape, mesh) for sig in in_sigs],
        [
            sharding.local_shape(sig.shape, mesh)
            for sig, sharding in zip(out_sigs, out_shardings, strict=True)
        ],
    )
    synced = soap.internal_collectives(rule, config)
    if synced:
        if name not in SYNCED_LOWERINGS:
            raise ShardedLoweringError(
                f"'{op.name}' splits its statistics over devices and has no sharded lowering"
            )
        axes = tuple(axis for _, factor_axes in synced for axis in factor_axes)
        kernel = SYNCED_LOWERINGS[name].build(axes, mesh.degree(axes))
    divided = [config[f.name] for f in rule.factors if f.mean and config.get(f.name)]
    if not divided:
        return lambda inputs: kernel(attrs, inputs)
    if any(not np.issubdtype(jax_dtype(sig.dtype), np.floating) for sig in out_sigs):
        raise ShardedLoweringError(f"'{op.name}': an integer mean split across devices")
    scale = 1 / math.prod(mesh.degree(axes) for axes in divided)
    return lambda inputs: [r * np.asarray(scale, r.dtype) for r in kernel(attrs, inputs)]


# ------------------------------------------------------------------ collectives


def _added(source: Sharding, target: Sharding) -> list[tuple[int, tuple[str, ...]]]:
    """(dim, axes) for each dim `target` splits further than `source`."""
    return [
        (dim, t[len(s) :])
        for dim, (s, t) in enumerate(zip(source.dims, target.dims, strict=True))
        if len(t) > len(s)
    ]


def _slice(x: jax.Array, source: Sharding, target: Sharding, mesh: Mesh) -> jax.Array:
    for dim, axes in _added(source, target):
        size = x.shape[dim] // mesh.degree(axes)
        x = lax.dynamic_slice_in_dim(x, lax.axis_index(axes) * size, size, dim)
    return x


def _gather(x: jax.Array, source: Sharding, target: Sharding) -> jax.Array:
    for dim, axes in _added(target, source):
        x = lax.all_gather(x, axes, axis=dim, tiled=True)
    return x


def _reduce(x: jax.Array, source: Sharding, target: Sharding) -> jax.Array:
    finished = tuple(a for a in source.unreduced if a not in target.unreduced)
    return lax.psum(x, finished)


def _reduce_scatter(x: jax.Array, source: Sharding, target: Sharding) -> jax.Array:
    for dim, axes in _added(source, target):
        x = lax.psum_scatter(x, axes, scatter_dimension=dim, tiled=True)
    return x


def _all_to_all(x: jax.Array, source: Sharding, target: Sharding) -> jax.Array:
    ((gathered, moved),) = _added(target, source)
    ((split, _),) = _added(source, target)
    return lax.all_to_all(x, moved, split_axis=split, concat_axis=gathered, tiled=True)


def _collective(op: CollectiveOp, mesh: Mesh) -> LocalFn:
    """A collective on one mesh (`parallel.replicate` moves between meshes: `_Move`)."""
    source, target = (
        program_sharding(sig_of(op.input.type)),
        program_sharding(sig_of(op.output.type)),
    )
    problem = check_transition(op.KIND, source, target)
    if problem:
        raise ShardedLoweringError(f"'{op.name}': {problem}")
    moves: dict[str, Callable[[jax.Array], jax.Array]] = {
        "all_slice": lambda x: _slice(x, source, target, mesh),
        "all_gather": lambda x: _gather(x, source, target),
        "all_reduce": lambda x: _reduce(x, source, target),
        "reduce_scatter": lambda x: _reduce_scatter(x, source, target),
        "all_to_all": lambda x: _all_to_all(x, source, target),
    }
    move = moves[op.KIND]
    return lambda inputs: [move(inputs[0])]


# ------------------------------------------------------------------ the program


def program_sharding(sig: TensorSig) -> Sharding:
    """The sharding of a value of a sharded program, which every value has."""
    sharding = sharding_of(sig)
    if sharding is None:
        raise ShardedLoweringError(f"a value of type {sig} has no sharding in a sharded program")
    return sharding


def partition_spec(sharding: Sharding) -> PartitionSpec:
    """The `PartitionSpec` of a (complete) sharding: its dims' axes, major to minor."""
    return PartitionSpec(*(axes if axes else None for axes in sharding.dims))


def device_mesh(mesh: Mesh) -> jax.sharding.Mesh:
    """`mesh` on JAX's devices, or on the CPU's when the default platform (a single
    GPU) has fewer than `--devices` made there; ShardedLoweringError naming the count
    it needs."""
    needed = max(mesh.device_ids) + 1
    devices = jax.devices()
    if len(devices) < needed:
        devices = max(devices, jax.devices("cpu"), key=len)
    if needed > len(devices):
        raise ShardedLoweringError(
            f"mesh @{mesh.name} needs {needed} devices and JAX has {len(devices)}: "
            f"run with --devices {needed}"
        )
    grid = np.array([devices[i] for i in mesh.device_ids]).reshape([s for _, s in mesh.axes])
    return jax.sharding.Mesh(grid, mesh.axis_names)


@dataclass(frozen=True, slots=True)
class LocalStep:
    """One op of `@main` on one device (a `graph` op or a collective on one mesh):
    values are slots in a flat list. Shared by `lower_sharded` and the lowering of a
    sharded program that is also placed (`joint.py`), which interleaves steps with moves."""

    what: str
    local: LocalFn
    operands: tuple[int, ...]
    results: tuple[int, ...]
    local_sigs: tuple[TensorSig, ...]

    def run(self, inputs: Sequence[jax.Array]) -> list[jax.Array]:
        """The op on (traced) local blocks; each result's local shape is checked at
        trace time (`check_results`)."""
        results = self.local(inputs)
        check_results(self.what, self.local_sigs, results)
        return results


def local_step(op: Operation, mesh: Mesh, slots: dict[SSAValue, int]) -> LocalStep:
    """`op`, a `graph` op or a collective on `mesh` (not `parallel.replicate`, which
    leaves it), as a `LocalStep` reading the slots `slots` gives its operands; its
    results take the next free slots, which are added to `slots`.
    ShardedLoweringError for any other op."""
    if isinstance(op, GraphOp):
        local = _graph_op(op, mesh)
    elif isinstance(op, CollectiveOp) and not isinstance(op, ReplicateOp):
        local = _collective(op, mesh)
    else:
        raise ShardedLoweringError(f"no JAX lowering for op '{op.name}'")
    results = tuple(range(len(slots), len(slots) + len(op.results)))
    local_sigs = tuple(
        TensorSig(program_sharding(sig).local_shape(sig.shape, mesh), sig.dtype)
        for sig in (sig_of(r.type) for r in op.results)
    )
    step = LocalStep(op.name, local, tuple(slots[v] for v in op.operands), results, local_sigs)
    slots.update(zip(op.results, results, strict=True))
    return step


Values = dict[int, jax.Array]
"""Global arrays by slot, as the parts of a program on several meshes pass them on."""


@dataclass(frozen=True, slots=True)
class _Segment:
    """Consecutive ops on one mesh, as one jitted shard_map from global arrays (the
    `inputs` slots) to global arrays (the `outputs` slots)."""

    fn: Callable[..., tuple[jax.Array, ...]]
    inputs: tuple[int, ...]
    outputs: tuple[int, ...]

    def __call__(self, values: Values) -> None:
        values.update(zip(self.outputs, self.fn(*(values[i] for i in self.inputs)), strict=True))


@dataclass(frozen=True, slots=True)
class _Move:
    """`parallel.replicate`: a global value copied onto another mesh's devices."""

    source: int
    target: int
    sharding: NamedSharding

    def __call__(self, values: Values) -> None:
        values[self.target] = jax.device_put(values[self.source], self.sharding)


@dataclass(frozen=True)
class ShardedProgram(ShardedArguments):
    """A lowered sharded program. `fn` takes global `jax.Array`s laid out as
    `in_shardings` and returns them laid out as `out_shardings` (in `@main` order;
    build them with `device_args`, or `jax.make_array_from_callback` in a
    multi-process run): on one mesh the jitted shard_map itself, on several the
    shard_map of each mesh's segment in turn, joined by copies between meshes."""

    meshes: tuple[jax.sharding.Mesh, ...] = ()

    @property
    def device_count(self) -> int:
        """The devices the program runs on, over all its meshes."""
        return len({device for mesh in self.meshes for device in mesh.devices.flat})

    def lowered(self, platform: str | None = None) -> jax.stages.Lowered:
        """The StableHLO of a program on one mesh, for this machine or cross-lowered
        for `platform` ("cuda": what a GPU run would be given, without a GPU)."""
        if len(self.meshes) != 1:
            raise ShardedLoweringError(
                f"a program on {len(self.meshes)} meshes runs as several computations; "
                "only a program on one mesh lowers to one"
            )
        return super().lowered(platform)

    def compiled(self) -> jax.stages.Compiled:
        """The program compiled by XLA for this machine's devices (one mesh)."""
        return self.lowered().compile()


def _mesh_of(op: Operation, found: Mapping[str, Mesh]) -> Mesh:
    """The mesh an op runs on: its results' (a constant's), else its operands'."""
    value = op.results[0] if op.results else op.operands[0]
    return found[program_sharding(sig_of(value.type)).mesh]


def check_complete(infos: Sequence[ArgInfo], result_sigs: Sequence[TensorSig]) -> None:
    """ShardedLoweringError for an argument or a result that holds partial sums: a
    caller passes and receives complete values (each device's block of the value)."""
    for info in infos:
        if program_sharding(info.sig).unreduced:
            raise ShardedLoweringError(
                f"argument '{info.name}' holds partial sums ({info.sig}): pass complete values"
            )
    for index, sig in enumerate(result_sigs):
        unreduced = program_sharding(sig).unreduced
        if unreduced:
            raise ShardedLoweringError(
                f"result #{index} holds partial sums along {list(unreduced)}: "
                "complete it (parallel.all_reduce) before returning it"
            )


def lower_sharded(module: ModuleOp, donate: Sequence[int] = ()) -> ShardedProgram:
    """Lower `@main` of a sharded `module` to jitted shard_maps (compiled on first call):
    one for a program on one mesh; one per run of consecutive ops on one mesh, joined
    by `parallel.replicate`'s copies, for a program on several device groups.

    `donate` are argument indices whose buffers a program on one mesh may reuse for
    its results, as `lower` donates them: a training loop donates the params and state
    a step replaces (each new weight leaves laid out as its argument, so XLA writes it
    in place). The simulator's memory model (`tasoc.sim.parallel`) assumes so. A
    program on several meshes takes no donation (ShardedLoweringError): its arguments
    pass through segments jitted apart.

    Raises ShardedLoweringError (a ValueError, one line) for what cannot run: too few
    devices for a mesh, partial sums as arguments or results or across meshes, an op
    without a JAX lowering.
    """
    found = meshes(module)
    function = entry_function(module)
    block = function.body.block
    infos = tuple(arg_infos(function))
    returned = return_values(function)
    result_sigs = tuple(sig_of(v.type) for v in returned)
    check_complete(infos, result_sigs)
    jax_meshes = {name: device_mesh(mesh) for name, mesh in found.items()}
    slots = {value: index for index, value in enumerate(block.args)}
    shardings = {index: program_sharding(info.sig) for index, info in enumerate(infos)}
    runs: list[tuple[Mesh, list[LocalStep]] | _Move] = []
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        if isinstance(op, ReplicateOp):
            slots[op.output] = len(slots)
            target = shardings[slots[op.output]] = program_sharding(sig_of(op.output.type))
            named = NamedSharding(jax_meshes[target.mesh], partition_spec(target))
            runs.append(_Move(slots[op.input], slots[op.output], named))
            continue
        mesh = _mesh_of(op, found)
        step = local_step(op, mesh, slots)
        for slot, result in zip(step.results, op.results, strict=True):
            shardings[slot] = program_sharding(sig_of(result.type))
        last = runs[-1] if runs else None
        if isinstance(last, tuple) and last[0] == mesh:
            last[1].append(step)
        else:
            runs.append((mesh, [step]))
    outputs = tuple(slots[v] for v in returned)
    in_shardings = tuple(
        NamedSharding(jax_meshes[shardings[i].mesh], partition_spec(shardings[i]))
        for i in range(len(infos))
    )
    out_shardings = tuple(
        NamedSharding(jax_meshes[shardings[i].mesh], partition_spec(shardings[i])) for i in outputs
    )
    if len(runs) == 1 and isinstance(runs[0], tuple):
        mesh, steps = runs[0]
        inputs = tuple(range(len(infos)))
        fn = _segment(steps, inputs, outputs, shardings, jax_meshes[mesh.name], tuple(donate))
    elif donate:
        raise ShardedLoweringError(
            f"a program on {len(jax_meshes)} meshes cannot donate its arguments"
        )
    else:
        fn = _joined(runs, outputs, shardings, jax_meshes)
    return ShardedProgram(
        fn=fn,
        meshes=tuple(jax_meshes.values()),
        arg_infos=infos,
        result_sigs=result_sigs,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
    )


def _segment(
    steps: Sequence[LocalStep],
    inputs: tuple[int, ...],
    outputs: tuple[int, ...],
    shardings: Mapping[int, Sharding],
    mesh: jax.sharding.Mesh,
    donate: tuple[int, ...] = (),
) -> Callable[..., tuple[jax.Array, ...]]:
    """The jitted shard_map of `steps` on `mesh`, from the `inputs` slots to the
    `outputs` slots (global arrays, laid out as `shardings` says); the `donate`
    positions of `inputs` donated."""

    def local(*args: jax.Array) -> tuple[jax.Array, ...]:
        values: Values = dict(zip(inputs, args, strict=True))
        for step in steps:
            results = step.run([values[i] for i in step.operands])
            values.update(zip(step.results, results, strict=True))
        return tuple(values[i] for i in outputs)

    mapped = map_over(local, mesh, [shardings[i] for i in inputs], [shardings[i] for i in outputs])
    return jax.jit(mapped, compiler_options=AS_WRITTEN, donate_argnums=donate)


def map_over(
    local: Callable[..., tuple[jax.Array, ...]],
    mesh: jax.sharding.Mesh,
    inputs: Sequence[Sharding],
    outputs: Sequence[Sharding],
) -> Callable[..., tuple[jax.Array, ...]]:
    """`local`, a function of each device's blocks, as a shard_map over `mesh`: from
    global arrays laid out as `inputs` to global arrays laid out as `outputs`."""
    return jax.shard_map(
        local,
        mesh=mesh,
        in_specs=tuple(partition_spec(s) for s in inputs),
        out_specs=tuple(partition_spec(s) for s in outputs),
        check_vma=False,
    )


def _joined(
    runs: Sequence[tuple[Mesh, list[LocalStep]] | _Move],
    outputs: tuple[int, ...],
    shardings: Mapping[int, Sharding],
    jax_meshes: Mapping[str, jax.sharding.Mesh],
) -> Callable[..., tuple[jax.Array, ...]]:
    """A program on several meshes: each run of steps on one mesh a `_Segment`, whose
    inputs are the values it uses from before it and whose outputs the values used
    after it (complete values only: partial sums do not leave their segment)."""
    used_later: set[int] = set(outputs)
    parts: list[_Segment | _Move] = []
    for run in reversed(runs):
        if isinstance(run, _Move):
            parts.append(run)
            used_later.add(run.source)
            continue
        mesh, steps = run
        defined = {slot for step in steps for slot in step.results}
        inputs = tuple(
            dict.fromkeys(i for step in steps for i in step.operands if i not in defined)
        )
        produced = tuple(sorted(defined & used_later))
        for slot in produced:
            if shardings[slot].unreduced:
                raise ShardedLoweringError(
                    f"a value holding partial sums on @{mesh.name} is used after ops on "
                    "another mesh: complete it first"
                )
        parts.append(
            _Segment(
                _segment(steps, inputs, produced, shardings, jax_meshes[mesh.name]),
                inputs,
                produced,
            )
        )
        used_later.update(inputs)
    parts.reverse()

    def program(*args: jax.Array) -> tuple[jax.Array, ...]:
        values: Values = dict(enumerate(args))
        for part in parts:
            part(values)
        return tuple(values[i] for i in outputs)

    return program
