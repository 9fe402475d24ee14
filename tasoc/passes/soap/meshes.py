"""What `soap-shard` plans on: the mesh (an option, or the module's own), the device
counts a profile tries, the machine that prices it, and argument shardings fixed by
hand. Each reader raises ValueError with one line naming the option."""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.cost import machines
from tasoc.cost.machines import Machine
from tasoc.ir.dag import Dag
from tasoc.ir.parallel import ShardingAttr, meshes
from tasoc.ir.soap import Mesh, Sharding

HINT_ATTR = "parallel.sharding"
"""Argument attribute fixing that argument's sharding by hand."""

MESH_NAME = "mesh"
"""The name of the mesh the pass adds when the module has none."""

AXIS_NAMES = {1: ("d",), 2: ("x", "y"), 3: ("x", "y", "z")}
"""Axis names of a mesh given as an option, by its number of axes."""

DeviceCounts = int | str | tuple[int, ...]
"""Option `devices`: `8`, `1-16` (the powers of two in that range) or a list `2,4,8`."""


def parse_mesh(spec: int | str) -> Mesh:
    """The mesh of option `mesh=8` or `mesh=2x4` (ValueError naming the option)."""
    parts = str(spec).split("x")
    if not all(part.isdigit() and int(part) > 0 for part in parts) or len(parts) > 3:
        raise ValueError(
            f"mesh must be a device count or up to three axis sizes such as 8 or 2x4, got {spec!r}"
        )
    sizes = [int(part) for part in parts]
    return Mesh(MESH_NAME, tuple(zip(AXIS_NAMES[len(sizes)], sizes, strict=True)))


def device_counts(spec: DeviceCounts) -> list[int]:
    """The device counts of option `devices` (ValueError naming it): `8`, `1-16` (the
    powers of two from 1 to 16), or a list `2,4,8`."""
    if isinstance(spec, int):
        counts = [spec]
    elif isinstance(spec, tuple):
        counts = list(spec)
    else:
        low, sep, high = spec.partition("-")
        if not (sep and low.isdigit() and high.isdigit() and 0 < int(low) <= int(high)):
            raise ValueError(f"devices must be N, LOW-HIGH or a list such as 2,4,8, got {spec!r}")
        counts = [1 << k for k in range(int(high).bit_length()) if int(low) <= 1 << k <= int(high)]
        if not counts:
            raise ValueError(f"devices={spec} holds no power of two")
    if any(not isinstance(c, int) or c < 1 for c in counts):
        raise ValueError(f"devices must be positive device counts, got {spec!r}")
    return sorted(set(counts))


def devices_text(spec: DeviceCounts | None) -> str:
    """Option `devices` as a user wrote it."""
    return ",".join(map(str, spec)) if isinstance(spec, tuple) else str(spec)


def module_mesh(module: ModuleOp, option: int | str | None, machine: str | None) -> Mesh:
    """The module's mesh (which option `mesh`, if given, must match), else the option's,
    else one axis over all of `machine`'s devices."""
    defined = meshes(module)
    if len(defined) > 1:
        names = ", ".join(f"@{name}" for name in sorted(defined))
        raise ValueError(f"the module defines several meshes ({names}); soap-shard plans on one")
    wanted = None if option is None else parse_mesh(option)
    if defined:
        (mesh,) = defined.values()
        if wanted is not None and wanted.axes != mesh.axes:
            raise ValueError(
                f"mesh={option} disagrees with the module's parallel.mesh @{mesh.name} "
                f"{_axes_text(mesh)}"
            )
        return mesh
    if wanted is None and machine is not None:
        return parse_mesh(machines.machine(machine).size)
    if wanted is None:
        raise ValueError(
            "give mesh=N or mesh=AxB (or machine=, whose devices it then uses): the "
            "module has no parallel.mesh"
        )
    return wanted


def profile_meshes(
    module: ModuleOp,
    objective: str,
    option: int | str | None,
    devices: DeviceCounts | None,
    machine: str | None,
) -> list[Mesh]:
    """One mesh per device count an objective choosing the count tries (`profile`,
    `mini-parallelism`): those of `devices`, else the powers of two up to the
    machine's size."""
    if meshes(module):
        raise ValueError(
            f"objective={objective} chooses the mesh: the module has its own parallel.mesh"
        )
    if option is not None:
        raise ValueError(f"objective={objective} chooses the mesh: give devices=, not mesh=")
    found = machines.machine(machine) if machine else None
    if devices is None:
        if found is None:
            raise ValueError(f"objective={objective} needs machine= or devices=")
        counts = [1 << k for k in range(found.size.bit_length()) if 1 << k <= found.size]
    else:
        counts = device_counts(devices)
    if found is not None and max(counts) > found.size:
        raise ValueError(
            f"devices={devices_text(devices)} asks for {max(counts)} devices, more than "
            f"machine {found.name}'s {found.size}"
        )
    return [parse_mesh(count) for count in counts]


def machine_for(name: str | None, mesh: Mesh) -> Machine:
    """Machine `name` (`cpu-N` for the mesh's N devices by default), which must have a
    device for every device of the mesh."""
    found = machines.machine(name or f"cpu-{mesh.size}")
    if mesh.size > found.size:
        raise ValueError(
            f"the mesh has {mesh.size} devices, more than machine {found.name}'s {found.size}"
        )
    return found


def hints(dag: Dag, mesh: Mesh) -> dict[int, Sharding]:
    """The argument shardings fixed by hand; ValueError for a hint that does not fit
    its argument or the mesh."""
    found = {}
    for index, arg in enumerate(dag.args):
        attr = dict(arg.attr("attributes")).get(HINT_ATTR)
        if attr is None:
            continue
        where = f"argument #{index} (%{arg.attr('name')}): {HINT_ATTR}"
        if not isinstance(attr, ShardingAttr):
            raise ValueError(f"{where} must be a #parallel.sharding, got {attr}")
        sharding = attr.sharding
        if sharding.unreduced:
            raise ValueError(f"{where} holds partial sums; an argument is a complete value")
        try:
            sharding.check(arg.out.sig, mesh)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        found[index] = sharding
    return found


def _axes_text(mesh: Mesh) -> str:
    return "[" + ", ".join(f'"{axis}" = {size}' for axis, size in mesh.axes) + "]"
