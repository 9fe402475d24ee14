"""The measured op table: what one op takes on this host's XLA:CPU devices, when
several of them run it at once.

A sharded step runs every op on all devices of its mesh at the same moment, and this
host's fake CPU devices (`jax_num_cpu_devices`, or one per `jax.distributed` process
on localhost) share its cores: on a 2-core machine one device alone gets both cores,
two devices running together get one each. So an op's time depends on its
configuration (op, attributes, local operand and result types: TASO's observation,
`tasoc.cost.measured`) *and* on how many devices run at once, and the table keys its
entries by both (`table_key`). An entry is measured the way the step runs it: the op
inside a `shard_map` over that many devices, every device applying it to a block of
the local shapes, jitted; a sample is the mean of enough blocked calls to last
`_MIN_SAMPLE_S`, an entry the median of `samples` samples.

A call's time includes JAX's dispatch of a jitted program over that many devices,
which a whole step pays once, not per op: the
smallest such program (`measured.floor_node`, measured and cached like any entry) is subtracted,
so `OpTable.seconds` is the kernel alone. The table is lazy, measuring an entry on
first use, and caches on disk in `ops-<device>.json` under `cache_dir()`
(`measured.TimingFile`: per JAX version, written atomically). Machines priced with it
(`Machine.pricing == "measured"`, the `local` machine `tasoc machine calibrate`
writes) read one table per cache directory (`shared_table`).

Measuring needs as many JAX CPU devices as run at once: when JAX's backends are not
up yet, the table makes as many as the machine has; when they are up with fewer, a
lookup fails with one line (CostError).
"""

from __future__ import annotations

import functools
import math
import os
import statistics
import time
from collections.abc import Callable
from pathlib import Path

from tasoc.cost.measured import TimingFile, cache_dir, floor_node, one_op_dag, op_key
from tasoc.cost.model import CostError
from tasoc.ir.dag import Node, to_module

_MIN_SAMPLE_S = 0.005
"""A sample repeats a fast call until it lasts this long, so timer resolution stays
small against it; short, since a search may meet a hundred new entries."""

DEFAULT_SAMPLES = 5


def device_name() -> str:
    """The name this host's CPU gets in cache files (as `measured.current_device`
    names it), without starting JAX's backends: CPUs are told apart by core count."""
    return f"cpu-{os.cpu_count()}"


def table_key(node: Node, running: int) -> str:
    """What identifies an entry: op, attributes, operand and result types of the op as
    one device runs it (local shapes), and how many devices run it at once."""
    results = ", ".join(str(sig) for sig in node.sigs)
    return f"{op_key(node)} -> ({results}) x{running}"


def jax_backends_up() -> bool:
    """Whether JAX's backends have started, fixing how many CPU devices there are."""
    from jax._src import xla_bridge  # the one place JAX says whether its backends are up

    return bool(xla_bridge.backends_are_initialized())


def cpu_devices(count: int, make: int) -> list:  # type: ignore[type-arg]
    """`count` of JAX's CPU devices; `make` of them made first when JAX's backends are
    not up yet; CostError when there are fewer than `count`."""
    import jax

    if not jax_backends_up():
        jax.config.update("jax_num_cpu_devices", max(count, make))
    devices = jax.devices("cpu")
    if len(devices) < count:
        raise CostError(
            f"measuring an op as {count} devices run it needs {count} JAX CPU devices, and "
            f"JAX already runs on {len(devices)} in this process"
        )
    return devices[:count]


def measure(node: Node, running: int, make: int, samples: int = DEFAULT_SAMPLES) -> float:
    """Median seconds of one jitted call in which each of `running` CPU devices applies
    `node`'s op to operands of its types at once (`shard_map`); `make` devices are made
    when JAX has not started (`cpu_devices`)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax import lower
    from tasoc.backends.jax.lowering import host_argument

    devices = cpu_devices(running, make)
    module = to_module(one_op_dag(node))
    one = lower(module)
    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    spec = PartitionSpec("d")

    def body(*blocks: jax.Array) -> tuple[jax.Array, ...]:
        return tuple(result[None] for result in one.fn(*(block[0] for block in blocks)))

    count = len(one.arg_infos)
    program = jax.jit(
        jax.shard_map(
            body, mesh=mesh, in_specs=(spec,) * count, out_specs=(spec,) * len(one.result_sigs)
        )
    )
    with one.precision():
        args = [
            jax.device_put(
                np.stack([host_argument(info, value)] * running), NamedSharding(mesh, spec)
            )
            for info, value in zip(one.arg_infos, random_inputs(module), strict=True)
        ]
        return median_call(lambda: jax.block_until_ready(program(*args)), samples)


def median_call(call: Callable[[], object], samples: int, calls: int | None = None) -> float:
    """Median over `samples` of the mean seconds of `call`, each sample repeating it
    `calls` times, by default until it lasts `_MIN_SAMPLE_S`, after one call that
    compiles and one that warms. (Processes running a collective together must give
    `calls`: each would count its own, and one would wait for calls the others never
    make.)"""
    call()
    start = time.perf_counter()
    call()
    warm = max(time.perf_counter() - start, 1e-9)
    if calls is None:
        calls = max(1, min(1000, math.ceil(_MIN_SAMPLE_S / warm)))
    times = []
    for _ in range(samples):
        start = time.perf_counter()
        for _ in range(calls):
            call()
        times.append((time.perf_counter() - start) / calls)
    return statistics.median(times)


class OpTable:
    """Seconds of ops on this host's CPU devices, measured lazily, cached on disk
    (module docstring). `seconds(node, running)` is the kernel alone: the call's
    dispatch floor over as many devices subtracted, never below zero."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, samples: int = DEFAULT_SAMPLES
    ) -> None:
        name = device_name()
        self._file = TimingFile(cache_dir(directory) / f"ops-{name}.json", name)
        self.path: Path = self._file.path
        self.samples = samples
        self._seconds = self._file.load()

    def seconds(self, node: Node, running: int = 1, make: int = 1) -> float:
        """Kernel seconds of `node` (an op at the local shapes one device holds) while
        `running` devices run it at once; `make` devices are made if JAX has not started
        (a machine's size, so that later lookups with more devices running find them)."""
        floor = self.raw(floor_node(), running, make)
        return max(self.raw(node, running, make) - floor, 0.0)

    def raw(self, node: Node, running: int, make: int = 1) -> float:
        """The call's measured seconds, dispatch included: cached, else measured now and
        written to the cache file."""
        key = table_key(node, running)
        seconds = self._seconds.get(key)
        if seconds is None:
            seconds = self._seconds[key] = measure(node, running, make, self.samples)
            self._file.save({key: seconds})
        return seconds


@functools.cache
def _table_at(directory: Path) -> OpTable:
    return OpTable(directory)


def shared_table() -> OpTable:
    """The table of the current cache directory (`cache_dir()`), one per directory in a
    process, so that every search and simulation reads and fills the same."""
    return _table_at(cache_dir())
