"""Lower a program both sharded and memory-placed to JAX on its mesh (DESIGN.md §8).

A joint program's values are laid out on a mesh (`#parallel.sharding`) and live in
device or host memory (`#memory.space<host, #parallel.sharding<...>>` wraps the
sharding), its block order is the schedule, and its plan is per device: each device
swaps its own block of a value, and under SPMD every device's schedule is the same, so
`memory.replay` counts one device's bytes (`memory.device_bytes`). JAX says the same
with a `NamedSharding(mesh, spec, memory_kind=...)` per value, so this lowering is the
sharded one (`sharded.py`: each computing op a `LocalStep` on local blocks) run on the
placed one's schedule (`placed.py`: `read_schedule`, `ordered`, `runtime_program`):

- **compiled** (`lower_joint(module, "compiled")`): one `jax.jit` of one `shard_map`
  over the mesh. Inside it each device runs its schedule on its blocks: the `graph`
  ops and collectives as `sharded.py` lowers them, a swap as `jax.device_put(x,
  jax.memory.Space.Host)` (or `.Device`) of its own block, the block order kept by
  `placed.ordered`'s barriers, which now order the collectives too. Host arguments
  and results are laid out in `pinned_host` memory on the mesh (`in_shardings`,
  `out_shardings`). XLA compiles it with its collective combiners and its
  rematerialization off (`JOINT_OPTIONS`: `sharded.AS_WRITTEN` and `placed.NO_REMAT`).
  Moving memory inside the shard_map rather than between shard_maps keeps the program
  one SPMD computation, as the plan is one per-device schedule: a swap is a local copy
  that needs no resharding, and the collectives and swaps sit in one barrier chain
  (docs/decisions.md, "Sharded and placed programs compile to one shard_map").
- **runtime** (`lower_joint(module, "runtime")`): the schedule op by op from Python, as
  the one-device runtime mode: each computing op its own compiled shard_map over the
  mesh, a swap a `jax.device_put` of the global array to its `NamedSharding` in the
  other memory kind (every device copies its block), frees and last readers deleting
  arrays. The device memory is measured on every device of the mesh
  (`placed.Measured`: the most any one holds, and how far the others are from it).

In the runtime mode a value of partial sums (`unreduced`) passes between two shard_maps
as a global array whose sharding says it is replicated along the unreduced axes while
each device's buffer holds its own partial sum: JAX hands each device's buffer on as it
is, into the next shard_map and through a copy to the other memory kind of the same
sharding (tests/test_joint_jax.py swaps a data-parallel step's partial sums out and
back and checks its gradients).

A program on several meshes (device groups) is refused: its devices run different
schedules, which one per-device plan and one shard_map cannot say.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal, overload

import jax
from jax.sharding import NamedSharding
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.jax.placed import (
    MEMORY_KINDS,
    NO_REMAT,
    Compute,
    Jitted,
    Mode,
    PlacedLoweringError,
    PlacedProgram,
    RuntimeProgram,
    boundary,
    ordered,
    read_schedule,
    runtime_program,
)
from tasoc.backends.jax.sharded import (
    AS_WRITTEN,
    ShardedProgram,
    check_complete,
    device_mesh,
    local_step,
    map_over,
    partition_spec,
    program_sharding,
)
from tasoc.ir.memory import space_of
from tasoc.ir.parallel import meshes

SPACES = {
    "device": jax.memory.Space.Device,
    "host": jax.memory.Space.Host,
}
"""The JAX memory space of each memory space, as a device's local block is moved inside
a shard_map (the block keeps its place on the mesh; only its memory kind changes)."""

JOINT_OPTIONS = {
    "xla_disable_hlo_passes": ",".join(
        options["xla_disable_hlo_passes"] for options in (AS_WRITTEN, NO_REMAT)
    )
}
"""XLA options of the compiled mode: the sharded lowering's (collectives as written)
and the placed lowering's (no rematerialization) together."""


@overload
def lower_joint(
    module: ModuleOp, mode: Literal["compiled"], donate: Sequence[int] = ()
) -> ShardedProgram: ...
@overload
def lower_joint(
    module: ModuleOp, mode: Literal["runtime"], donate: Sequence[int] = ()
) -> RuntimeProgram: ...
@overload
def lower_joint(
    module: ModuleOp, mode: Mode, donate: Sequence[int] = ()
) -> ShardedProgram | PlacedProgram: ...
def lower_joint(
    module: ModuleOp, mode: Mode, donate: Sequence[int] = ()
) -> ShardedProgram | PlacedProgram:
    """Lower `@main` of a sharded and placed `module` on its mesh, in `mode` (module
    docstring). The compiled mode is a `ShardedProgram` on one mesh (what the HLO
    audit reads); `donate` (compiled mode) are argument indices whose buffers the call
    may reuse, as a training loop donates what the step replaces.

    Raises PlacedLoweringError or ShardedLoweringError (ValueErrors, one line) for a
    program on several meshes, too few devices, partial sums as arguments or results,
    and an op without a lowering.
    """
    found = meshes(module)
    if len(found) != 1:
        raise PlacedLoweringError(
            f"a sharded and memory-placed program on {len(found)} meshes (device groups) "
            "is not supported: its devices run different schedules, and its plan is one "
            "per-device schedule"
        )
    (mesh,) = found.values()
    jax_mesh = device_mesh(mesh)
    schedule = read_schedule(module, lambda op, slots: local_step(op, mesh, slots))
    check_complete(schedule.arg_infos, schedule.result_sigs)
    shardings = {slot: program_sharding(sig) for slot, sig in enumerate(schedule.sigs)}

    def layout(slot: int) -> NamedSharding:
        kind = MEMORY_KINDS[space_of(schedule.sigs[slot])]
        return NamedSharding(jax_mesh, partition_spec(shardings[slot]), memory_kind=kind)

    def alone(step: Compute, donated: tuple[int, ...]) -> Jitted:
        """One op as its own jitted shard_map (the runtime mode's compiled call), one
        parameter per operand: ops that share the call read different values; it writes
        its result over the operands at `donated` (`memory.in_place`)."""
        mapped = map_over(
            lambda *blocks: tuple(step.run(blocks)),
            jax_mesh,
            [shardings[slot] for slot in step.operands],
            [shardings[slot] for slot in step.results],
        )
        return jax.jit(mapped, compiler_options=AS_WRITTEN, donate_argnums=donated)

    if mode == "runtime":
        return runtime_program(schedule, layout, tuple(jax_mesh.devices.flat), alone, donate)
    arguments = range(len(schedule.arg_infos))
    body = map_over(
        ordered(schedule, lambda x, space: jax.device_put(x, SPACES[space])),
        jax_mesh,
        [shardings[slot] for slot in arguments],
        [shardings[slot] for slot in schedule.outputs],
    )
    in_shardings, out_shardings = boundary(schedule, layout)
    fn = jax.jit(
        body,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        donate_argnums=tuple(donate),
        compiler_options=JOINT_OPTIONS,
    )
    return ShardedProgram(
        fn=fn,
        arg_infos=schedule.arg_infos,
        result_sigs=schedule.result_sigs,
        in_shardings=in_shardings,
        out_shardings=out_shardings,
        meshes=(jax_mesh,),
    )
