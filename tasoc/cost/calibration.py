"""Measuring this host for `tasoc machine calibrate`: its device, the links between
its fake CPU devices and between `jax.distributed` processes, its host copies.

Each measurement is a median of jitted calls (`op_table.median_call`) less the same
program without the thing measured, so JAX's dispatch of a call is not counted:

- **device**: an n x n x n float32 matmul at `Precision.HIGHEST` (achieved FLOP/s), a
  sum over a large array (memory bandwidth), a chain of tiny dot+tanh kernels in one
  program against a chain of one (what one more kernel costs), and the host's memory
  shared by the devices on it;
- **links**: every collective kind the simulator prices (`all_reduce`, `all_gather`,
  `reduce_scatter`, `all_to_all`, and `replicate` as a collective-permute) under
  `shard_map` over the devices at several sizes, as chains of dependent collectives,
  each after a matmul on every device (what one more collective adds,
  `collective_samples`), since a step's collectives wait on each other and on the
  compute before them (which decides gloo's mode across processes), in several rounds
  spread over the calibration, every size and kind in each; the link's latency and
  bandwidth are fitted to the median over the rounds of each all-reduce and
  all-gather measurement, so that
  `Machine.collective_time` (the model the simulator prices with) best predicts them
  (`fit_link`, least squares of log ratios), and each round's own fit gives the
  spread (`fit_rounds`: one calibration's 4 MiB all-reduces once fitted 2.5 GB/s, the
  next 6.9); each kind's own price is fitted to its measurements alone, each the
  median of the rounds (`fit_kinds`, `Link.collectives`);
- **compute across processes**: a probe training step (`probe_dag`) and one op of
  each op class (`class_probes`) timed the way the op table times an op, by every
  device of a setup at once: in P processes of one device against one process of P
  devices (the op table's own configuration), in alternating rounds
  (`compute_rounds`), whose ratios price the compute of a step across processes, per
  op class (`Machine.compute_scales`);
- **host**: `jax.device_put` of host arrays and their copy back, fitted to
  `Link.time` alike;
- **a step's call**: what a jitted call over the devices costs besides its ops, and
  per array it takes or returns (`Machine.step_overhead`).

JAX is imported lazily; the caller makes the devices (`op_table.cpu_devices`, or
`jax.distributed` for processes) before the first measurement.
"""

from __future__ import annotations

import dataclasses
import math
import os
import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasoc.cost.devices import Device, OpClass
from tasoc.cost.machines import (
    MAX_DEVICE_MEMORY,
    MIN_DEVICE_MEMORY,
    PRICED_KINDS,
    CollectiveKind,
    CollectivePrice,
    Link,
    LinkKind,
    Machine,
)
from tasoc.cost.op_table import (
    MAX_COPIES,
    copies_of,
    cpu_difference,
    dag_program,
    median_call,
    median_difference,
)
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag, from_module

MiB = 2**20


@dataclass(frozen=True)
class Sizes:
    """What calibration measures at: large enough that the time measured is the work,
    small enough that it takes about a minute on a 2-core machine (`QUICK`: a few
    seconds, for tests and a first look)."""

    matmul: int = 1024
    """n of the n x n x n matmul."""
    stream_bytes: int = 64 * MiB
    """Bytes of the array summed."""
    kernels: int = 128
    """Tiny kernels in the chain."""
    collective_bytes: tuple[int, ...] = (4096, 256 * 1024, 4 * MiB)
    """Bytes on each device of a collective's operand."""
    chain: int = 8
    """Dependent collectives in the longer chain of `collective_samples`."""
    chain_compute: int = 192
    """n of the n x n x n matmul each device computes before each collective of a chain
    (`chain_program`; 0: none): a step's collectives wait on compute, and cost more so
    than back to back: several times more for gloo's between processes, some 50 us
    rather than 16 us between the fake devices of one process (measured quiet; at a
    load of 14-19 the matmuls' own variance drowned the latter)."""
    rounds: int = 5
    """Rounds of `collective_samples`, each every size and kind."""
    compute_rounds: int = 15
    """Rounds of `compute_rounds`: a round is short (a second on our VM), and the ratio
    of two processes' time to one's varied 0.4-1.4 between rounds at a load of 10."""
    link_samples: int = 3
    """Samples of each measurement's median in one round."""
    probe: tuple[int, int] = (128, 384)
    """Batch and width of `probe_dag`'s step."""
    op_copies: int = MAX_COPIES
    """At most this many applications of a class probe op timed together
    (`class_probes`; the op table's `copies_of`)."""
    host_bytes: tuple[int, ...] = (64 * 1024, 4 * MiB, 32 * MiB)
    """Bytes of a host copy."""
    samples: int = 7
    """Samples of each median."""


QUICK = Sizes(
    matmul=128,
    stream_bytes=MiB,
    kernels=8,
    collective_bytes=(4096, 64 * 1024),
    chain=3,
    chain_compute=16,
    rounds=2,
    compute_rounds=2,
    link_samples=1,
    probe=(16, 32),
    op_copies=4,
    host_bytes=(64 * 1024, MiB),
    samples=3,
)
"""`--quick`: the same measurements at small sizes, numbers only roughly right."""


COLLECTIVE_CALLS = 10
"""Calls per sample of a collective: fixed, since every process must make as many."""


@dataclass(frozen=True)
class CollectiveSample:
    """One collective measured: its kind, the bytes of its operand on each device, the
    devices taking part, and its median seconds."""

    kind: CollectiveKind
    nbytes: int
    devices: int
    seconds: float


def _floor_call(samples: int) -> float:
    """Median seconds of a call of the smallest jitted program on the default device."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((1,), jnp.float32)
    add = jax.jit(lambda v: v + 1)
    return median_call(lambda: jax.block_until_ready(add(x)), samples)


def _seconds_of(fn: Callable[..., Any], args: Sequence[Any], samples: int) -> float:
    import jax

    jitted = jax.jit(fn)
    return median_call(lambda: jax.block_until_ready(jitted(*args)), samples)


def matmul_flops(n: int, samples: int) -> float:
    """FLOP/s of an n x n x n float32 matmul at `Precision.HIGHEST` on one device."""
    import jax
    import jax.numpy as jnp

    x = jnp.ones((n, n), jnp.float32)
    seconds = _seconds_of(
        lambda a, b: jnp.matmul(a, b, precision=jax.lax.Precision.HIGHEST), (x, x), samples
    )
    return 2 * n**3 / _positive(seconds - _floor_call(samples))


def stream_bandwidth(nbytes: int, samples: int) -> float:
    """Bytes/s of a sum reading `nbytes` of float32 on one device."""
    import jax.numpy as jnp

    x = jnp.ones((nbytes // 4,), jnp.float32)
    seconds = _seconds_of(jnp.sum, (x,), samples)
    return nbytes / _positive(seconds - _floor_call(samples))


def kernel_overhead(count: int, samples: int) -> float:
    """Seconds one more kernel adds to a jitted program: a chain of `count` dependent
    8 x 8 dot+tanh kernels against a chain of one, per extra kernel."""
    import jax.numpy as jnp

    def chain(length: int) -> Callable[[Any], Any]:
        def run(x: Any) -> Any:
            for _ in range(length):
                x = jnp.tanh(x @ x)
            return x

        return run

    x = jnp.full((8, 8), 0.01, jnp.float32)
    long, short = (_seconds_of(chain(length), (x,), samples) for length in (count, 1))
    return max(long - short, 0.0) / (count - 1)


def memory_per_device(devices_on_host: int) -> float:
    """The host's physical memory shared by its devices, within what a machine file
    accepts."""
    total = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    return float(min(max(total / devices_on_host, MIN_DEVICE_MEMORY), MAX_DEVICE_MEMORY))


def measure_device(sizes: Sizes, devices_on_host: int, name: str = "local-cpu") -> Device:
    """This host's device as the roofline sees it (module docstring)."""
    return Device(
        name=name,
        peak_flops=matmul_flops(sizes.matmul, sizes.samples),
        mem_bandwidth=stream_bandwidth(sizes.stream_bytes, sizes.samples),
        launch_overhead_s=kernel_overhead(sizes.kernels, sizes.samples),
        memory_bytes=memory_per_device(devices_on_host),
    )


def collective_samples(
    devices: Sequence[Any],
    sizes: Sequence[int],
    samples: int,
    chain: int,
    rounds: int = 1,
    compute: int = 0,
) -> list[list[CollectiveSample]]:
    """`rounds` rounds of each collective of `COLLECTIVES` over `devices` (one axis,
    `shard_map`) of each size of operand per device, as a step pays for them: a chain
    of `chain` dependent collectives against a chain of one, each program `chain`
    steps long, each step a `compute` x `compute` x `compute` matmul on every device
    (none at 0) then an element-wise one, per extra collective (`chain_program`, the
    median over `samples` of `median_difference`). Each round visits every size and
    kind, so a spell of load or a mode of the processes' link lands in one round, not
    in one size.

    The compute is what decides gloo's mode. Back to back, both processes enter each
    collective within microseconds of each other, and gloo's small collectives took
    75-190 us in the fastest of five rounds on our VM (3 ms in the others); with a
    matmul before each, one process reaches the collective first and sleeps until the
    other's data wakes it, and no round came under 1.2-2.7 ms at the same load (a
    step's collectives always wait on compute: fitted on three saved runs' steps, an
    all-reduce cost 1.0-1.2 ms, docs/benchmarks.md, issue 30 round 6).

    A single collective less a program without it measured near nothing (0.07 us
    fitted, on our VM), while a step paid some 16 us for each one between fake devices
    and some 3 ms across gloo processes: one collective per call overlaps the call's
    own dispatch and the peers' getting in step (we think), which a step pays once; every
    further collective of a chain waits for all devices, as in a step. The first pair
    of programs is measured once before the rounds, and that dropped: a process's first
    collectives set up their rendezvous (some 250 us more on our VM). Works across
    `jax.distributed` processes too (`devices` global; every process makes
    `COLLECTIVE_CALLS` calls per sample)."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    spec = PartitionSpec("d")
    count = len(devices)
    programs = []
    for nbytes in sizes:
        length = max(nbytes // 4 // count, 1) * count  # reduce_scatter, all_to_all split it
        data = np.ones((count * length,), np.float32)
        x = jax.make_array_from_callback(
            data.shape, NamedSharding(mesh, spec), lambda index, d=data: d[index]
        )
        for kind in COLLECTIVES:
            many, one = (
                _call_of(chain_program(kind, n, chain, compute), mesh, x) for n in (chain, 1)
            )
            programs.append((kind, length * 4, many, one))

    def measured(many: Callable[[], object], one: Callable[[], object]) -> float:
        return median_difference(many, one, samples, COLLECTIVE_CALLS) / (chain - 1)

    measured(*programs[0][2:])  # the rendezvous (docstring)
    return [
        [
            CollectiveSample(kind, nbytes, count, _positive(measured(many, one)))
            for kind, nbytes, many, one in programs
        ]
        for _ in range(rounds)
    ]


COLLECTIVES: tuple[CollectiveKind, ...] = PRICED_KINDS
"""The collectives calibration measures: every kind the simulator prices
(`Machine.collective_time`), so that each can be fitted alone (`fit_kinds`); `replicate`
is timed as XLA's collective-permute of the block to the next device."""
LINK_KINDS_FITTED: tuple[CollectiveKind, ...] = ("all_reduce", "all_gather")
"""The collectives the link's own latency and bandwidth are fitted to (`fit_rounds`),
as before kinds were priced alone: those a sharded step mostly makes, so a machine
file read without its per-kind prices prices as it did."""


def chain_program(
    kind: CollectiveKind, collectives: int, steps: int, compute: int = 0
) -> Callable[[Any], Any]:
    """A `shard_map` body of `steps` steps on a block, the first `collectives` of them
    after a collective `kind` over axis "d" on its input, so each collective waits for
    the one before; a block in, a block out (an `all_gather`'s result sliced back to
    the block, a `reduce_scatter`'s tiled back to it; the block's length a multiple of
    the devices). A step is an element-wise op on the block, after (with `compute` > 0)
    a `compute` x `compute` x `compute` matmul of a matrix made from the block's first
    `compute` elements (at most the block's length), whose corner is added into the
    block: the collective after it waits for the matmul, as a step's collectives wait
    for the ops computing their operands."""
    import jax
    import jax.numpy as jnp

    def collective(block: Any) -> Any:
        count = jax.lax.axis_size("d")
        if kind == "all_reduce":
            return jax.lax.psum(block, "d")
        if kind == "reduce_scatter":
            return jnp.tile(jax.lax.psum_scatter(block, "d", tiled=True), count)
        if kind == "all_to_all":
            return jax.lax.all_to_all(block, "d", 0, 0, tiled=True)
        if kind == "replicate":
            return jax.lax.ppermute(block, "d", [(i, (i + 1) % count) for i in range(count)])
        return jax.lax.all_gather(block, "d", tiled=True)[: block.shape[0]]

    def computed(block: Any) -> Any:
        n = min(compute, block.shape[0])
        head = block[:n]
        square = jnp.tanh(jnp.outer(head, head))  # no product XLA can fold
        return block + (square @ square)[0, 0] * 1e-9

    def body(block: Any) -> Any:
        for step in range(steps):
            if compute > 0:
                block = computed(block)
            if step < collectives:
                block = collective(block)
            block = block * 0.5
        return block

    return body


def _call_of(body: Callable[[Any], Any], mesh: Any, x: Any) -> Callable[[], object]:
    """A call of `body` under `shard_map` over `mesh`'s one axis, on `x`, waited for."""
    import jax
    from jax.sharding import PartitionSpec

    spec = PartitionSpec("d")
    program = jax.jit(jax.shard_map(body, mesh=mesh, in_specs=spec, out_specs=spec))
    return lambda: jax.block_until_ready(program(x))


PROBE_COPIES = 3
"""Applications of the probe step in the longer program of `probe_timer`."""
PROBE_CALLS = 3
"""Calls per sample of `probe_timer`: fixed, so processes measuring together do as
much work each and stay together to the end."""


def probe_dag(batch: int, width: int) -> Dag:
    """Calibration's probe: the SGD training step of a two-layer perceptron, `batch`
    rows of `width` features, written out (forward, backward through relu and tanh,
    the two weights updated), as the steps a machine file prices are made of matmuls,
    their transposes and the element-wise ops around them. It is no benchmark's model,
    so a compute scale measured on it is not fitted to the plans it then prices."""
    g = GraphBuilder()
    x, target = g.input("x", (batch, width)), g.input("target", (batch, width))
    w1, w2 = g.param("w1", (width, width)), g.param("w2", (width, width))
    hidden = g.relu(g.matmul(x, w1))
    out = g.tanh(g.matmul(hidden, w2))
    d_out = g.tanh_grad(out, g.sub(out, target))
    d_hidden = g.relu_grad(hidden, g.matmul(d_out, g.transpose(w2, (1, 0))))
    d_w2 = g.matmul(g.transpose(hidden, (1, 0)), d_out)
    d_w1 = g.matmul(g.transpose(x, (1, 0)), d_hidden)
    updated = [g.sub(w, g.scale(d, 0.01)) for w, d in ((w1, d_w1), (w2, d_w2))]
    return from_module(g.build(*updated))


STEP = "step"
"""The key of `probe_dag`'s rounds in `compute_rounds`' result (the others are op
classes, `class_probes`)."""


def class_probes(batch: int, width: int) -> dict[OpClass, Dag]:
    """One op of each `OpClass` (`analytic.op_class`), at the sizes of the probe step:
    a `batch` x `width` by `width` x `width` matmul (gemm), a 3 x 3 convolution of
    `batch` / 16 images of 16 channels of 16 x 16 (conv), an add of two `batch` x
    `width` arrays (elementwise), their sum along rows (reduction) and their transpose
    (data_movement). Each is timed as the op table times an op (`probe_timer`), alone
    and in the processes at once (`compute_rounds`), for the compute scale of its class
    (`Machine.compute_scale`): the processes' XLA threads contend for the cores
    unlike for a GEMM, whose threads split the work, than for a memory-bound op."""

    def one(make: Callable[[GraphBuilder, Any], Any], shape: tuple[int, ...]) -> Dag:
        g = GraphBuilder()
        return from_module(g.build(make(g, g.input("x", shape))))

    rows = (batch, width)
    images = (max(batch // 16, 1), 16, 16, 16)
    return {
        "gemm": one(lambda g, x: g.matmul(x, g.param("w", (width, width))), rows),
        "conv": one(lambda g, x: g.conv2d(x, g.param("w", (16, 16, 3, 3))), images),
        "elementwise": one(lambda g, x: g.add(x, g.input("y", rows)), rows),
        "reduction": one(lambda g, x: g.reduce(x, "sum", (1,)), rows),
        "data_movement": one(lambda g, x: g.transpose(x, (1, 0)), rows),
    }


def probe_timer(
    devices: Sequence[Any], sizes: Sizes, dag: Dag | None = None
) -> Callable[[], float]:
    """A function timing the CPU seconds per device one more application of `dag`
    (default `probe_dag`) adds to a program in which each of `devices` applies it at
    once, as `op_table.measure` times an op (`dag_program`, a program of copies against
    one of one) but on this process's CPU time (`op_table.cpu_difference`, with
    `PROBE_CALLS` calls per sample, so processes timing together do as much work each),
    divided by the devices, so one process of P devices and P processes of one compare
    per device: `op_table.copies_of` applications of a one-op dag, as the table takes
    (at most `sizes.op_copies`), `PROBE_COPIES` of the step; compiled and warm already,
    since compiling takes longer than timing and a process compiling late would leave
    the others timing alone."""
    if dag is None:
        dag, copies = probe_dag(*sizes.probe), PROBE_COPIES
    else:
        (node,) = (value.node for value in dag.outputs)
        copies = min(copies_of(node), sizes.op_copies)
    many, once = (dag_program(dag, devices, n) for n in (copies, 1))
    for call in (many, once, many, once):  # compiled, warm
        call()

    def seconds() -> float:
        difference = cpu_difference(many, once, sizes.samples, PROBE_CALLS)
        return _positive(difference / (copies - 1) / len(devices))

    return seconds


def compute_rounds(
    local: Sequence[Any], first: bool, sizes: Sizes, barrier: Callable[[str], object]
) -> dict[str, list[tuple[float, float]]]:
    """In one of P `jax.distributed` processes of P devices each (`local`, this one's;
    `first`: process 0), `sizes.compute_rounds` rounds of the probe step's seconds
    (`STEP`) and of each op class's probe op (`class_probes`, by class) (a) in one
    process of P devices: process 0 times it on its own devices while the others wait
    at `barrier` (the op table's configuration), and (b) in P processes of one device,
    all timing it on their first device at once, between barriers: (a, b) per round,
    a only in process 0 (0 elsewhere). The two alternate, so a spell of load from
    elsewhere hits a round's pair alike, and the ratio b / a of each round (CPU seconds
    per device, `probe_timer`) is what a step (an op of the class) across the processes
    pays over the table (`Machine.compute_scales`)."""
    dags: dict[str, Dag | None] = {STEP: None, **class_probes(*sizes.probe)}
    alone = {name: probe_timer(local, sizes, dag) for name, dag in dags.items()} if first else {}
    together = {name: probe_timer(local[:1], sizes, dag) for name, dag in dags.items()}
    found: dict[str, list[tuple[float, float]]] = {name: [] for name in dags}
    for round_ in range(sizes.compute_rounds):
        for name in dags:
            barrier(f"tasoc calibrate: {name} alone {round_}")
            seconds = alone[name]() if first else 0.0
            barrier(f"tasoc calibrate: {name} together {round_}")
            found[name].append((seconds, together[name]()))
    return found


def call_overheads(devices: Sequence[Any], samples: int, arrays: int = 32) -> tuple[float, float]:
    """(seconds per call, seconds per array in or out) of a jitted call over `devices`
    (`shard_map`), besides its ops: programs adding one to 1 and to `arrays` arrays of
    one float per device, so the difference is `arrays` - 1 more arrays in and out."""
    import jax
    from jax.sharding import NamedSharding, PartitionSpec

    mesh = jax.sharding.Mesh(np.array(devices), ("d",))
    spec = PartitionSpec("d")
    x = jax.device_put(np.ones((len(devices),), np.float32), NamedSharding(mesh, spec))

    def seconds(count: int) -> float:
        program = jax.jit(
            jax.shard_map(
                lambda *blocks: tuple(block + 1 for block in blocks),
                mesh=mesh,
                in_specs=(spec,) * count,
                out_specs=(spec,) * count,
            )
        )
        args = [x] * count
        return median_call(lambda: jax.block_until_ready(program(*args)), samples)

    one, many = seconds(1), seconds(arrays)
    per_array = max(many - one, 0.0) / (2 * (arrays - 1))
    return max(one - 2 * per_array, 0.0), per_array


def host_samples(sizes: Sequence[int], samples: int) -> list[tuple[int, float]]:
    """(bytes, seconds) of one host copy of each size: `jax.device_put` of a host array
    and `numpy.array` of the result back, halved, less the same of 4 bytes."""
    import jax

    def copy_time(nbytes: int) -> float:
        host = np.ones((max(nbytes // 4, 1),), np.float32)

        def round_trip() -> None:
            np.array(jax.block_until_ready(jax.device_put(host)))

        return median_call(round_trip, samples) / 2

    floor = copy_time(4)
    return [(nbytes, _positive(copy_time(nbytes) - floor)) for nbytes in sizes]


_FLOOR_SECONDS = 1e-7


def above_noise(seconds: float) -> bool:
    """Whether a difference of medians was measured above `_positive`'s floor (below
    it, noise: a probe op of `QUICK`'s sizes can come out there)."""
    return seconds > _FLOOR_SECONDS


def _positive(seconds: float) -> float:
    """A difference of medians as a time: never below 0.1 us (noise can make a small
    one negative, and a fit works on logarithms; `fit_link` leaves such ones out)."""
    return max(seconds, _FLOOR_SECONDS)


def fit_link(
    kind: LinkKind, predicted: Sequence[Callable[[Link], float]], measured: Sequence[float]
) -> Link:
    """The link of `kind` whose latency and bandwidth make `predicted` (each a model of
    one measurement given the link) closest to `measured`: least squares of the log
    ratios, over a grid of latencies (0.1 us to 10 ms) and bandwidths (10 MB/s to
    1 TB/s), refined twice around the best point. Measurements lost in noise (at the
    floor of `_positive`) are left out while two others remain."""
    kept = [i for i, seconds in enumerate(measured) if seconds > _FLOOR_SECONDS]
    if len(kept) >= 2:  # a difference lost in noise says nothing of the link
        predicted = [predicted[i] for i in kept]
        measured = [measured[i] for i in kept]
    latencies, bandwidths = np.logspace(-7, -2, 41), np.logspace(7, 12, 41)
    logs = np.log(np.asarray(measured))
    best: tuple[float, float, float] = (math.inf, 0.0, 1.0)
    for _ in range(3):
        for latency in latencies:
            for bandwidth in bandwidths:
                link = Link(kind, float(bandwidth), float(latency))
                guess = np.log([max(model(link), 1e-12) for model in predicted])
                error = float(np.sum((guess - logs) ** 2))
                if error < best[0]:
                    best = (error, float(latency), float(bandwidth))
        _, latency, bandwidth = best
        step_l = latencies[1] / latencies[0]
        step_b = bandwidths[1] / bandwidths[0]
        latencies = latency * np.logspace(-1, 1, 21, base=step_l)
        bandwidths = bandwidth * np.logspace(-1, 1, 21, base=step_b)
    return Link(kind, best[2], best[1])


@dataclass(frozen=True)
class LinkFit:
    """A link fitted to the median of several rounds of measurements, and the spread of
    the links fitted to each round alone: the quartiles of their bandwidth and latency
    (what one calibration of a single round could have given)."""

    link: Link
    bandwidth_quartiles: tuple[float, float]
    latency_quartiles: tuple[float, float]
    rounds: int

    def spread(self) -> str:
        """The rounds' spread in words, as the machine file's `sources` cite it."""
        (b1, b3), (l1, l3) = self.bandwidth_quartiles, self.latency_quartiles
        return (
            f"{self.rounds} round(s) fitted alone: bandwidth IQR {b1 / 1e9:.3g}-{b3 / 1e9:.3g}"
            f" GB/s, latency IQR {l1 * 1e6:.3g}-{l3 * 1e6:.3g} us"
        )


def fit_rounds(
    kind: LinkKind,
    rounds: Sequence[Sequence[CollectiveSample]],
    across_nodes: bool,
    device: Device,
) -> LinkFit:
    """The link fitted (`fit_collectives`) to each measurement's median over `rounds`
    (rounds of the same measurements, `collective_samples`) of the kinds
    `LINK_KINDS_FITTED`, with the quartiles of the links fitted to each round alone."""
    rounds = [[s for s in found if s.kind in LINK_KINDS_FITTED] for found in rounds]
    medians = [
        dataclasses.replace(same[0], seconds=statistics.median(s.seconds for s in same))
        for same in zip(*rounds, strict=True)
    ]
    alone = [fit_collectives(kind, found, across_nodes, device) for found in rounds]

    def quartiles(values: Sequence[float]) -> tuple[float, float]:
        low, high = np.percentile(values, [25, 75])
        return float(low), float(high)

    return LinkFit(
        fit_collectives(kind, medians, across_nodes, device),
        quartiles([link.bandwidth for link in alone]),
        quartiles([link.latency_s for link in alone]),
        len(rounds),
    )


def fit_kinds(
    kind: LinkKind,
    rounds: Sequence[Sequence[CollectiveSample]],
    across_nodes: bool,
    device: Device,
) -> tuple[tuple[CollectiveKind, CollectivePrice], ...]:
    """Each collective kind's own price on the link (`Link.collectives`): the latency
    and bandwidth `fit_collectives` finds for that kind's measurements alone, each
    measurement its median over `rounds`, as the link's own figures (`fit_rounds`).

    Not the fastest round, as the op table takes an op's: a collective waits for the
    slowest of its devices, and how far they drift apart before it is part of its
    price, not load; each step pays it. Fitted to their fastest rounds, the kinds
    between one process's fake devices came out at 3.5-26 us while the steps paid
    46-87 us a collective, and re-pricing two quiet runs' measured steps on the
    medians instead took the median error from 22.4-25.3 % to 17.0-18.2 %
    (docs/benchmarks.md, issue 30, round 8)."""
    medians = [
        dataclasses.replace(same[0], seconds=statistics.median(s.seconds for s in same))
        for same in zip(*rounds, strict=True)
    ]
    return tuple(
        (collective, CollectivePrice(fitted.bandwidth, fitted.latency_s))
        for collective in PRICED_KINDS
        if (found := [s for s in medians if s.kind == collective])
        for fitted in [fit_collectives(kind, found, across_nodes, device)]
    )


def fit_collectives(
    kind: LinkKind, found: Sequence[CollectiveSample], across_nodes: bool, device: Device
) -> Link:
    """The link the collectives `found` ran over, fitted to `Machine.collective_time`:
    inside one node (`across_nodes` False: the `intra` link of one node of as many
    devices) or between nodes of one device each (the `inter` link)."""

    def model(sample: CollectiveSample) -> Callable[[Link], float]:
        def predict(link: Link) -> float:
            nodes, per_node = (sample.devices, 1) if across_nodes else (1, sample.devices)
            machine = Machine(
                name="fit",
                device=device,
                nodes=nodes,
                devices_per_node=per_node,
                intra=link,
                inter=link if across_nodes else None,
                host=link,
            )
            group = list(range(sample.devices))
            return machine.collective_time(sample.kind, sample.nbytes, group)

        return predict

    return fit_link(kind, [model(s) for s in found], [s.seconds for s in found])


def fit_host(found: Sequence[tuple[int, float]]) -> Link:
    """The host link whose `Link.time` best predicts the host copies `found`."""
    return fit_link(
        "host",
        [lambda link, n=nbytes: link.time(n) for nbytes, _ in found],
        [seconds for _, seconds in found],
    )
