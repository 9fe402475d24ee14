"""The measured op table: what one op adds to a step on this host's XLA:CPU devices,
when several of them run it at once.

A sharded step runs every op on all devices of its mesh at the same moment, and this
host's fake CPU devices (`jax_num_cpu_devices`, or one per `jax.distributed` process
on localhost) share its cores: on a 2-core machine one device alone gets both cores,
two devices running together get one each. So an op's time depends on its
configuration (op, attributes, local operand and result types: TASO's observation,
`tasoc.cost.measured`) *and* on how many devices run at once, and the table keys its
entries by both (`table_key`).

An entry is measured the way a step pays for the op: inside a jitted program, inside
a `shard_map` over that many devices, every device applying it to blocks of the local
shapes. One call of a one-op program is mostly JAX's dispatch (on our 2-core VM, some
140 us over two devices, against a few microseconds for a small op), and subtracting
a separately measured floor left the noise of two large numbers; so `measure` times
a program applying the op `copies_of(node)` times against one applying it once, and
takes the difference per extra application: the op's kernel and its launch inside a
compiled program, the dispatch cancelled. Each copy reads operands of its own (XLA
can neither share nor fuse them) and waits for the copy before (an optimization
barrier), as a step's ops mostly wait on each other; and only the last result leaves
the program (each array a call returns costs it microseconds of its own, which made a
5 KB add measure 28 us per copy over two devices instead of 2 us). The two programs
are timed in turns, a sample of each per round (the mean of enough blocked calls to
last `_MIN_SAMPLE_S`), and an entry is the difference of each one's fastest sample
over `samples` rounds (`fastest_difference`): load from other processes only ever adds
time, so the fastest sample is the one it touched least, where the median of the
rounds' differences (the table's format 2) followed the load. On our shared 2-core VM
a table measured at a load average of 1-3 priced the same ops 1.3x a table measured
in the quiet (docs/benchmarks.md, issue 30), and a search or benchmark reading it
inherited that for as long as the cache file lived.

The table is lazy, measuring an entry on first use, and caches on disk in
`ops-<device>.json` under `cache_dir()` (`measured.TimingFile`: per JAX version,
written atomically). Machines priced with it (`Machine.pricing == "measured"`, the
`local` machine `tasoc machine calibrate` writes) read one table per cache directory
(`shared_table`).

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
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tasoc.cost.measured import TimingFile, cache_dir, one_op_dag, op_key
from tasoc.cost.model import CostError
from tasoc.ir.dag import Dag, Node, to_module
from tasoc.ir.memory import tensor_bytes

_MIN_SAMPLE_S = 0.01
"""A sample repeats a fast call until it lasts this long, so timer resolution stays
small against it; short, since a search may meet a hundred new entries."""

DEFAULT_SAMPLES = 7

TABLE_FORMAT = 3
"""The cache file's format: 3 since an entry is the fastest rounds' difference
(`fastest_difference`; 2, the median difference, followed the machine's load); 2 since
`measure` stopped summing each copy's results (1 charged a memory-bound op a second
read of them)."""

MAX_COPIES = 64
COPIES_BYTES = 2**20
"""`measure` times up to `MAX_COPIES` applications of an op in one program, as many
as keep their operands and results within `COPIES_BYTES` per device."""


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

    if not jax_backends_up():  # never fewer than the process asked for before
        jax.config.update("jax_num_cpu_devices", max(count, make, jax.config.jax_num_cpu_devices))
    devices = jax.devices("cpu")
    if len(devices) < count:
        raise CostError(
            f"measuring an op as {count} devices run it needs {count} JAX CPU devices, and "
            f"JAX already runs on {len(devices)} in this process"
        )
    return devices[:count]


def measure(node: Node, running: int, make: int, samples: int = DEFAULT_SAMPLES) -> float:
    """Seconds one more application of `node`'s op adds to a jitted program in which
    each of `running` CPU devices applies it at once (`shard_map`): a program applying
    it to `copies_of(node)` sets of operands of its types against one applying it once,
    timed in turns, the difference of their fastest rounds (`fastest_difference`) per
    extra application; `make` devices are made when JAX has not started
    (`cpu_devices`)."""
    devices = cpu_devices(running, make)
    copies = copies_of(node)
    dag = one_op_dag(node)
    many, once = (dag_program(dag, devices, n) for n in (copies, 1))
    return max(fastest_difference(many, once, samples), 0.0) / (copies - 1)


def copies_of(node: Node) -> int:
    """How many applications `measure` times together: `MAX_COPIES`, fewer when their
    operands and results would pass `COPIES_BYTES`, never fewer than two."""
    nbytes = sum(tensor_bytes(value.sig) for value in (*node.inputs, *node.results))
    return max(2, min(MAX_COPIES, COPIES_BYTES // max(nbytes, 1)))


def dag_program(dag: Dag, devices: Sequence[Any], copies: int) -> Callable[[], object]:
    """A call of the program applying `dag` (one op's, or calibration's probe step)
    `copies` times, one after another, on every one of `devices` at once, its arguments
    in place, waiting for its result (`copies_body`)."""
    import jax
    import numpy as np
    from jax.sharding import NamedSharding, PartitionSpec

    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax import lower
    from tasoc.backends.jax.lowering import host_argument

    module = to_module(dag)
    one = lower(module)
    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    spec = PartitionSpec("d")
    count = len(one.arg_infos)

    body = copies_body(one.fn, count, copies)
    program = jax.jit(
        jax.shard_map(body, mesh=mesh, in_specs=(spec,) * (count * copies), out_specs=spec)
    )
    with one.precision():
        values = [
            np.stack([host_argument(info, value)] * len(devices))
            for info, value in zip(one.arg_infos, random_inputs(module), strict=True)
        ]
        args = [
            jax.device_put(value, NamedSharding(mesh, spec))
            for _ in range(copies)
            for value in values
        ]

    def call() -> object:
        with one.precision():
            return jax.block_until_ready(program(*args))

    return call


def copies_body(fn: Callable[..., Sequence[Any]], count: int, copies: int) -> Callable[..., Any]:
    """The `shard_map` body `measure` times: `fn` (an op of `count` operands) applied
    `copies` times to blocks of operands of their own (`count` per copy, in order),
    one after another, into one result of one float per device."""
    import jax
    import jax.numpy as jnp

    def body(*blocks: Any) -> Any:
        # Each copy reads operands of its own, so XLA can neither share nor fuse them,
        # and waits for the one before (the barrier ties its operands to what the copy
        # before left), since a step's ops mostly wait on each other: independent
        # copies would run side by side on XLA's threads. Every copy's results pass a
        # barrier whole (so they are made whole, as the op makes them in a step) and
        # one element of each is added into the one result that leaves the program:
        # each returned array costs a call some microseconds of its own, a result
        # nothing reads would be dropped, and summing a result whole read it once more
        # (on our VM a 8 x 256 add measured 9 us so, 4 us without; 1 ms matmuls alike).
        total = jnp.zeros((), jnp.float32)
        for copy in range(copies):
            operands = tuple(block[0] for block in blocks[copy * count : (copy + 1) * count])
            operands, total = jax.lax.optimization_barrier((operands, total))
            for result in jax.lax.optimization_barrier(tuple(fn(*operands))):
                total = total + result.ravel()[0].astype(jnp.float32)
        return total[None]

    return body


def median_call(call: Callable[[], object], samples: int) -> float:
    """Median over `samples` of the mean seconds of `call`, each sample repeating it
    until it lasts `_MIN_SAMPLE_S`, after one call that compiles and one that warms."""
    calls = _calls_per_sample(call)
    return statistics.median(_sample(call, calls) for _ in range(samples))


def median_difference(
    first: Callable[[], object],
    second: Callable[[], object],
    samples: int,
    calls: int | None = None,
) -> float:
    """Median over `samples` rounds of how many seconds a call of `first` takes longer
    than one of `second`, the two sampled in turns in each round (so a spell of load
    hits both), each sample `calls` calls (default: enough to last `_MIN_SAMPLE_S`;
    processes running a collective together must give it, since each would count its
    own, and one would wait for calls the others never make)."""
    counted = [_calls_per_sample(call) for call in (first, second)]  # compiles, warms
    counts = counted if calls is None else [calls, calls]
    differences = []
    for _ in range(samples):
        seconds = [_sample(call, n) for call, n in zip((first, second), counts, strict=True)]
        differences.append(seconds[0] - seconds[1])
    return statistics.median(differences)


def fastest_difference(
    first: Callable[[], object],
    second: Callable[[], object],
    samples: int,
    calls: int | None = None,
) -> float:
    """How many seconds a call of `first` takes longer than one of `second`: the two
    sampled in turns over `samples` rounds (each sample `calls` calls, default enough to
    last `_MIN_SAMPLE_S`, as `median_difference`), the fastest sample of each less the
    fastest of the other. Load from elsewhere only adds time, to one side of a round or
    both, so each side's fastest sample is the one it touched least, and the difference
    of the two is the quiet machine's as soon as each side met one quiet spell; the
    median of the rounds' differences is the load's once most rounds are loaded on one
    side. (Process CPU time is no cure: XLA's worker threads spin and wait under load,
    `cost.xla`.)"""
    counted = [_calls_per_sample(call) for call in (first, second)]  # compiles, warms
    counts = counted if calls is None else [calls, calls]
    fastest = [math.inf, math.inf]
    for _ in range(samples):
        for side, (call, count) in enumerate(zip((first, second), counts, strict=True)):
            fastest[side] = min(fastest[side], _sample(call, count))
    return fastest[0] - fastest[1]


def cpu_difference(
    first: Callable[[], object],
    second: Callable[[], object],
    samples: int,
    calls: int,
    clock: Callable[[], float] = time.process_time,
) -> float:
    """How many seconds of this process's CPU time (all its threads, `clock`) a call of
    `first` takes more than one of `second`: the median over `samples` rounds, the two
    sampled in turns, each sample `calls` calls. Calibration's compute scale compares
    one process of P devices with P processes of one (`calibration.probe_timer`); their
    wall-clock times compare the share of the cores each setup wins from the rest of
    the machine's load (P processes' threads win more: on our VM at a load average of
    8, 0.4-0.5 of one process's time per device, 1.0-1.1 at a load of 0-2), their CPU
    times the work each setup does (0.9-1.05 at the same load of 8). A step saturates
    the cores in both setups (each process's XLA threads spin between kernels), so on a
    quiet machine the ratio of their wall-clock times is that of their CPU times."""
    differences = []
    for _ in range(samples):
        spent = []
        for call in (first, second):
            start = clock()
            for _ in range(calls):
                call()
            spent.append((clock() - start) / calls)
        differences.append(spent[0] - spent[1])
    return statistics.median(differences)


def _calls_per_sample(call: Callable[[], object]) -> int:
    """Calls that make a sample last `_MIN_SAMPLE_S`, counted on a call after one that
    compiles."""
    call()
    start = time.perf_counter()
    call()
    warm = max(time.perf_counter() - start, 1e-9)
    return max(1, min(1000, math.ceil(_MIN_SAMPLE_S / warm)))


def _sample(call: Callable[[], object], calls: int) -> float:
    """Mean seconds of `calls` calls."""
    start = time.perf_counter()
    for _ in range(calls):
        call()
    return (time.perf_counter() - start) / calls


class OpTable:
    """Seconds of ops on this host's CPU devices, measured lazily, cached on disk
    (module docstring)."""

    def __init__(
        self, directory: str | os.PathLike[str] | None = None, samples: int = DEFAULT_SAMPLES
    ) -> None:
        name = device_name()
        self._file = TimingFile(cache_dir(directory) / f"ops-{name}.json", name, TABLE_FORMAT)
        self.path: Path = self._file.path
        self.samples = samples
        self._seconds = self._file.load()

    def seconds(self, node: Node, running: int = 1, make: int = 1) -> float:
        """Seconds `node` (an op at the local shapes one device holds) adds to a jitted
        program while `running` devices run it at once: cached, else measured now
        (`measure`) and written to the cache file. `make` devices are made if JAX has not
        started (a machine's size, so that later lookups with more devices running find
        them)."""
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
