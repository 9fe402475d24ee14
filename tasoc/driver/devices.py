"""How many JAX devices a run has: `tasoc run --devices N` makes N CPU devices itself.

JAX fixes its device list when its backends initialize (the first `jax.devices()`, or
the first computation), and a CPU host has one device unless `jax_num_cpu_devices`
says more before that. So the driver sets it as early as it knows the count: from
`--devices`, or from the mesh of a sharded program run without it. Once the backends
are up the count cannot change; a run that then needs more devices than there are
gets a one-line error saying how to ask for them.
"""

from __future__ import annotations

from collections.abc import Iterable

from tasoc.cost.op_table import jax_backends_up
from tasoc.driver.errors import DriverError
from tasoc.ir.soap import Mesh

MAX_DEVICES = 4096
"""The most fake CPU devices `--devices` makes: far beyond any mesh a CPU host can
simulate usefully, small enough that a typo does not exhaust the machine."""


def ensure_devices(count: int) -> None:
    """Make JAX have at least `count` devices: `count` CPU devices when its backends
    are not up yet; DriverError when they are, with fewer, or `count` is out of range."""
    if not 1 <= count <= MAX_DEVICES:
        raise DriverError(f"--devices must be between 1 and {MAX_DEVICES}, not {count}")
    import jax

    if not jax_backends_up():  # never fewer than the process asked for before
        jax.config.update("jax_num_cpu_devices", max(count, jax.config.jax_num_cpu_devices))
        return
    have = jax.device_count()
    if have < count:
        raise DriverError(
            f"JAX already runs on {have} devices and cannot make {count} in this process"
        )


def mesh_devices(meshes: Iterable[Mesh]) -> int:
    """How many devices a program on `meshes` needs (their highest device id + 1)."""
    return max((max(mesh.device_ids) + 1 for mesh in meshes), default=1)


def default_devices(count: int) -> None:
    """`count` CPU devices for a sharded program run without `--devices`, when JAX's
    backends are not up yet (else the lowering says whether there are enough)."""
    import jax

    if count > 1 and not jax_backends_up():
        jax.config.update("jax_num_cpu_devices", min(count, MAX_DEVICES))
