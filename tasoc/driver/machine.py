"""`tasoc machine calibrate`: measure this host and write the machine file `local`.

The launcher measures the device and the `intra` link between `--devices N` fake CPU
devices in its own process (`tasoc.cost.calibration`), then, with `--processes P` above
one, the `inter` link between P `jax.distributed` processes of one device each on
localhost, started and supervised as `tasoc run --processes` starts its workers
(`distributed.run_workers`); each worker is `tasoc machine calibrate` itself, marked by
`distributed.WORKER_ENV`, and process 0 prints its measurements as JSON. Each link is
fitted to the median of several rounds of its measurements (`fit_rounds`, the rounds'
spread cited in `sources`), and each collective kind on it to the median of the rounds
of its own (`fit_kinds`: `links.NAME.collectives`). The workers make P devices each and
time calibration's probe step in alternating rounds, in process 0 alone on its P devices
(as the op table times ops, in one process) and in all P at once on one device each, on
CPU time per device: the rounds' median ratio is the compute scale of the processes
(`compute_scales`). The
machine file (`nodes = P`, `devices_per_node = N`, `pricing = "measured"`, `sources`
saying what was measured, when and how) is written to `-o` and to the cache directory's
`local.toml` (`machine=local`), both atomically and only once everything was measured."""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import platform
import socket
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from tasoc.cost.calibration import QUICK, STEP, CollectiveSample, LinkFit, Sizes
from tasoc.cost.devices import Device, OpClass
from tasoc.cost.machines import (
    LOCAL,
    SHARED_MEMORY,
    CollectiveKind,
    CollectivePrice,
    Link,
    Machine,
    local_machine_path,
    machine_to_toml,
    scale_key,
    setup_name,
)
from tasoc.driver import distributed
from tasoc.driver.errors import DriverError, OneLineArgumentParser, positive_int
from tasoc.driver.outputs import Outputs

DEFAULT_DEVICES = 2
"""Fake CPU devices of one process calibrated by default: the `intra` link needs two."""


def machine_command(argv: Sequence[str]) -> int:
    """`tasoc machine SUBCOMMAND ...`: only `calibrate` for now."""
    parser = OneLineArgumentParser(
        prog="tasoc machine", description="Describe this machine to tasoc's simulator."
    )
    commands = parser.add_subparsers(dest="subcommand", metavar="SUBCOMMAND", required=True)
    calibrate = commands.add_parser(
        "calibrate",
        help="measure this host and write a machine file (machine=local)",
        description="Measure this host's device, the links between its fake CPU devices "
        "and between jax.distributed processes on localhost, and its host copies; write a "
        "machine file whose ops are priced with the measured op table.",
    )
    _add_calibrate_arguments(calibrate)
    args = parser.parse_args(argv)
    return calibrate_command(args)


def _add_calibrate_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "-o",
        dest="output",
        metavar="OUT",
        help="the machine file to write (.toml), besides local.toml in the cache directory",
    )
    parser.add_argument(
        "--devices",
        type=positive_int,
        default=DEFAULT_DEVICES,
        metavar="N",
        help=f"fake CPU devices per process (devices_per_node; default {DEFAULT_DEVICES})",
    )
    parser.add_argument(
        "--processes",
        type=positive_int,
        default=1,
        metavar="P",
        help="jax.distributed processes on localhost whose link (inter) is measured "
        "(nodes; default 1: no inter link)",
    )
    parser.add_argument(
        "--port",
        type=positive_int,
        metavar="PORT",
        help="the localhost port of the processes' coordinator (default: a free one)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_int,
        default=distributed.DEFAULT_CONNECT_TIMEOUT,
        metavar="S",
        help="seconds the processes wait for each other "
        f"(default: {distributed.DEFAULT_CONNECT_TIMEOUT})",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="measure at small sizes: a few seconds, rough numbers (tests, a first look)",
    )
    # A worker's place in the run, given by the launcher (distributed.worker_command).
    parser.add_argument("--coordinator", help=argparse.SUPPRESS)
    parser.add_argument("--process-id", type=int, help=argparse.SUPPRESS)


def calibrate_command(args: argparse.Namespace) -> int:
    """Measure and write the machine file; or, in a worker, measure the inter link."""
    sizes = QUICK if args.quick else Sizes()
    if distributed.in_worker():
        return _worker(args, sizes)
    if args.coordinator is not None or args.process_id is not None:
        raise DriverError("--coordinator and --process-id are for the workers calibrate starts")
    if args.output is not None and not args.output.endswith(".toml"):
        raise DriverError(f"-o '{args.output}': a machine file written by calibrate is .toml")
    path = local_machine_path()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
    except OSError as err:
        raise DriverError(
            f"cannot make the cache directory {path.parent}: {err.strerror}"
        ) from None
    local = str(path)
    with Outputs() as outputs:
        staged = [outputs.declare(local, "the local machine file")]
        if args.output is not None and not _same_path(args.output, local):
            staged.append(outputs.declare(args.output, "-o"))
        coordinator = _coordinator(args) if args.processes > 1 else None
        text = _calibrate(args, sizes, coordinator)
        for output in staged:
            assert output is not None
            with output.open() as stream:
                stream.write(text)
    print(f"wrote {args.output or local}" + (f" and {local}" if args.output else ""))
    return 0


def _same_path(given: str, other: str) -> bool:
    return os.path.abspath(given) == os.path.abspath(other)


def _coordinator(args: argparse.Namespace) -> str:
    """The coordinator's localhost address: `--port`, checked free now (a taken port
    would fail in every worker), else a free port."""
    if args.port is None:
        return f"127.0.0.1:{distributed.free_port()}"
    if args.port > 65535:
        raise DriverError(f"--port {args.port} is not a port (1 to 65535)")
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        try:
            probe.bind(("127.0.0.1", args.port))
        except OSError as err:
            raise DriverError(
                f"--port {args.port} is taken on localhost ({err.strerror or err}): give "
                "another, or leave --port out for a free one"
            ) from None
    return f"127.0.0.1:{args.port}"


@dataclass
class _Measured:
    """What calibration measured, filled step by step."""

    devices: list[Any] = field(default_factory=list)
    device: Device | None = None
    host: list[tuple[int, float]] = field(default_factory=list)
    intra: list[list[CollectiveSample]] = field(default_factory=list)
    """Rounds of the collectives between the launcher's devices."""
    inter: list[list[CollectiveSample]] = field(default_factory=list)
    """Rounds of the collectives between the processes."""
    compute: dict[str, list[tuple[float, float]]] = field(default_factory=dict)
    """Rounds of calibration's probe step's seconds, and of each op class's probe op,
    in one process of P devices and in P processes of one
    (`calibration.compute_rounds`)."""
    overheads: tuple[float, float] = (0.0, 0.0)
    """Seconds per call and per array of a jitted call over the devices."""


def _calibrate(args: argparse.Namespace, sizes: Sizes, coordinator: str | None) -> str:
    """Every measurement, with a progress bar; the machine file's text."""
    from tasoc.cost import calibration as cal
    from tasoc.cost.op_table import cpu_devices
    from tasoc.passes.progress import progress_bar

    devices, processes = args.devices, args.processes
    on_host = devices * processes
    got = _Measured()

    def make_devices() -> None:
        got.devices = cpu_devices(devices, devices)

    def device() -> None:
        got.device = cal.measure_device(sizes, on_host)

    def host() -> None:
        got.host = cal.host_samples(sizes.host_bytes, sizes.samples)

    def intra() -> None:
        got.intra = cal.collective_samples(
            got.devices,
            sizes.collective_bytes,
            sizes.link_samples,
            sizes.chain,
            sizes.rounds,
            sizes.chain_compute,
        )

    def overheads() -> None:
        got.overheads = cal.call_overheads(got.devices, sizes.samples)

    def inter() -> None:
        assert coordinator is not None
        got.inter, got.compute = _inter_samples(args, coordinator)

    # The processes first: they are what most often fails (a port, a peer), and then
    # nothing else need be measured.
    steps: list[tuple[str, Callable[[], None]]] = [
        *([("inter", inter)] if coordinator is not None else []),
        ("devices", make_devices),
        ("device", device),
        ("host", host),
        ("call", overheads),
        *([("intra", intra)] if devices > 1 else []),
    ]
    started = time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())
    with progress_bar("calibrating", unit="measurement", total=len(steps)) as update:
        for done, (name, measure) in enumerate(steps):
            update(done, step=name)
            measure()
        update(len(steps))
    assert got.device is not None
    return machine_to_toml(_machine(args, sizes, started, got, got.device))


def _machine(
    args: argparse.Namespace, sizes: Sizes, started: str, got: _Measured, device: Device
) -> Machine:
    """The calibrated machine: links fitted to what was measured, `sources` saying what
    was measured when and how."""
    import jax

    from tasoc.cost.calibration import fit_host, fit_kinds, fit_rounds
    from tasoc.cost.op_table import device_name

    devices, processes = args.devices, args.processes
    host = fit_host(got.host)
    intra = fit_rounds("shared-memory", got.intra, False, device) if got.intra else None
    inter = fit_rounds("loopback", got.inter, True, device) if got.inter else None
    intra_kinds = fit_kinds("shared-memory", got.intra, False, device) if got.intra else ()
    inter_kinds = fit_kinds("loopback", got.inter, True, device) if got.inter else ()
    quick = " --quick" if args.quick else ""
    sources = [
        f"calibrated by 'tasoc machine calibrate{quick}' on {started} on {platform.node()} "
        f"({os.cpu_count()} cores, {platform.machine()}), JAX {jax.__version__} on XLA:CPU, "
        f"{processes} process(es) x {devices} fake CPU device(s), every number a median of "
        f"{sizes.samples} samples",
        f"device: {sizes.matmul}^3 float32 matmul at Precision.HIGHEST "
        f"{device.peak_flops / 1e9:.1f} GFLOP/s; sum over {sizes.stream_bytes / 2**20:g} MiB "
        f"{device.mem_bandwidth / 1e9:.1f} GB/s; a chain of {sizes.kernels} tiny dot+tanh "
        f"kernels {device.launch_overhead_s * 1e6:.2f} us per kernel; the host's memory "
        f"shared by its {devices * processes} device(s)",
        _link_source(
            "intra",
            intra,
            f"chains of {sizes.chain} dependent all_reduce (all_gather) under shard_map over the "
            f"{devices} devices of one process, {_chain_compute(sizes)}, less chains of one, "
            "per extra collective",
            sizes,
        )
        if intra is not None
        else "intra: not measured (one device per process): machines.SHARED_MEMORY",
        *([_kinds_source("intra", intra_kinds, sizes)] if intra_kinds else []),
    ]
    if inter is not None:
        how = (
            f"chains of {sizes.chain} dependent all_reduce (all_gather) over {processes} "
            f"jax.distributed processes of one device each on localhost (gloo), "
            f"{_chain_compute(sizes)}, less chains of one, per extra collective"
        )
        sources.append(_link_source("inter", inter, how, sizes))
        sources.append(_kinds_source("inter", inter_kinds, sizes))
    sources += [
        _host_source(host, sizes.host_bytes),
        f"a step's call: a jitted call over the {devices} device(s) adding one to 1 and to "
        f"32 arrays: {got.overheads[0] * 1e6:.1f} us per call, {got.overheads[1] * 1e6:.2f} "
        "us per array in or out (call_overhead_us, array_overhead_us)",
        'ops: priced with the measured op table of this host (pricing = "measured", '
        f"ops-{device_name()}.json in the cache directory, each op measured on first use)",
    ]
    unscaled = Machine(
        name=LOCAL,
        device=device,
        nodes=processes,
        devices_per_node=devices,
        intra=dataclasses.replace(intra.link, collectives=intra_kinds) if intra else SHARED_MEMORY,
        inter=dataclasses.replace(inter.link, collectives=inter_kinds) if inter else None,
        host=host,
        pricing="measured",
        call_overhead_s=got.overheads[0],
        array_overhead_s=got.overheads[1],
    )
    if not got.compute:
        return dataclasses.replace(unscaled, sources=tuple(sources))
    scales = []
    for name, rounds in got.compute.items():
        scale, how = _compute_scale(rounds, processes, sizes, None if name == STEP else name)
        scales.append(scale)
        sources.append(how)
    return dataclasses.replace(unscaled, sources=tuple(sources), compute_scales=tuple(scales))


def _compute_scale(
    rounds: Sequence[tuple[float, float]],
    processes: int,
    sizes: Sizes,
    op_class: OpClass | None = None,
) -> tuple[tuple[str, float], str]:
    """The compute scale of `processes` processes of one device (`Machine.compute_scales`):
    the median over `rounds` of the probe step's (or `op_class`'s probe op's,
    `calibration.class_probes`) CPU seconds per device there over its CPU seconds per
    device in one process of as many devices (the op table's configuration;
    `calibration.probe_timer`), and the source line saying so, with the rounds'
    quartiles."""
    import statistics

    import numpy as np

    from tasoc.cost.calibration import above_noise

    # a round with a side lost in noise (at the floor) says nothing of the ratio
    kept = [pair for pair in rounds if all(map(above_noise, pair))]
    rounds = kept if len(kept) >= 2 else rounds
    ratios = [together / alone for alone, together in rounds]
    scale = statistics.median(ratios)
    low, high = np.percentile(ratios, [25, 75])
    alone, together = (statistics.median(times) for times in zip(*rounds, strict=True))
    batch, width = sizes.probe
    setup = setup_name(processes, 1)
    probe = f"a probe SGD step of a 2-layer perceptron ({batch} x {width})"
    if op_class is not None:
        setup, probe = scale_key(setup, op_class), f"the {op_class} probe op"
    how = (
        f"compute: {probe} timed as the op table times an op but on CPU time per device "
        f"(a load from elsewhere moves the wall-clock ratio), in {len(rounds)} rounds each "
        f"of one process of {processes} devices (median {alone * 1e3:.3g} ms) then "
        f"{processes} processes of one device at once (median {together * 1e3:.3g} ms): "
        f"compute_scales {setup} = {scale:.3g}, the rounds' median ratio; ratio IQR "
        f"{low:.3g}-{high:.3g}"
    )
    return (setup, scale), how


def _chain_compute(sizes: Sizes) -> str:
    """What each device computes before each collective of the processes' chains, in
    words (`Sizes.chain_compute`)."""
    n = sizes.chain_compute
    return f"each after a {n}^3 matmul on every device" if n else "back to back"


def _link_source(name: str, fit: LinkFit, how: str, sizes: Sizes) -> str:
    shown = ", ".join(f"{n / 1024:g} KiB" for n in sizes.collective_bytes)
    link = fit.link
    return (
        f"{name}: {how}; of {shown} per device, in {fit.rounds} rounds of medians of "
        f"{sizes.link_samples}, fitted to the rounds' median of each to the simulator's "
        f"model: {link.bandwidth / 1e9:.3g} GB/s, {link.latency_s * 1e6:.3g} us latency; "
        f"{fit.spread()}"
    )


def _kinds_source(
    name: str, prices: Sequence[tuple[CollectiveKind, CollectivePrice]], sizes: Sizes
) -> str:
    """The source line of a link's per-kind prices (`calibration.fit_kinds`)."""
    shown = "; ".join(
        f"{kind} {price.bandwidth / 1e9:.3g} GB/s, {price.latency_s * 1e6:.3g} us"
        for kind, price in prices
    )
    return (
        f"{name} per collective kind (links.{name}.collectives; replicate timed as a "
        f"collective-permute): the same chains, each kind fitted alone to the median of "
        f"the {sizes.rounds} rounds of each measurement: {shown}"
    )


def _host_source(link: Link, sizes: Sequence[int]) -> str:
    shown = ", ".join(f"{n / 1024:g} KiB" for n in sizes)
    return (
        "host: jax.device_put and the copy back, less the same of 4 bytes; of "
        f"{shown} per copy, fitted to the simulator's model: {link.bandwidth / 1e9:.3g} "
        f"GB/s, {link.latency_s * 1e6:.3g} us latency"
    )


def _inter_samples(
    args: argparse.Namespace, coordinator: str
) -> tuple[list[list[CollectiveSample]], dict[str, list[tuple[float, float]]]]:
    """The rounds of collectives measured across `--processes` workers, and the rounds
    of the probe step (`calibration.compute_rounds`; process 0's report). Each worker
    makes P devices, so that process 0 alone is a process of P devices, as the op table
    runs ops."""
    processes = args.processes
    cluster = distributed.Cluster(coordinator, processes, 0, processes, args.connect_timeout)
    words = [
        "machine",
        "calibrate",
        "--processes",
        str(args.processes),
        "--connect-timeout",
        str(args.connect_timeout),
        *(["--quick"] if args.quick else []),
    ]
    (out, _), *_ = distributed.run_workers(words, cluster, range(args.processes))
    try:
        report = json.loads(out)
        rounds = [[CollectiveSample(*row) for row in rows] for rows in report["rounds"]]
        compute = {
            str(name): [(float(a), float(b)) for a, b in pairs]
            for name, pairs in report["compute"].items()
        }
        return rounds, compute
    except (ValueError, TypeError, KeyError):
        raise DriverError(f"process 0 reported no measurements: {out[-200:]!r}") from None


def _worker(args: argparse.Namespace, sizes: Sizes) -> int:
    """A worker: join the run, measure the collectives between the processes (the
    first device of each), then the probe step's rounds, and print them (process 0's
    output is what the launcher reads)."""
    import jax
    from jax.experimental import multihost_utils

    from tasoc.cost.calibration import collective_samples, compute_rounds

    if args.coordinator is None or args.process_id is None:
        raise DriverError("a calibrate worker needs --coordinator and --process-id")
    cluster = distributed.Cluster(
        args.coordinator, args.processes, args.process_id, args.devices, args.connect_timeout
    )
    distributed.join(cluster)
    firsts = {}
    for device in sorted(jax.devices(), key=lambda d: d.id):
        firsts.setdefault(device.process_index, device)
    rounds = collective_samples(
        list(firsts.values()),
        sizes.collective_bytes,
        sizes.link_samples,
        sizes.chain,
        sizes.rounds,
        sizes.chain_compute,
    )
    compute = compute_rounds(
        jax.local_devices(), args.process_id == 0, sizes, multihost_utils.sync_global_devices
    )
    rows = [[[s.kind, s.nbytes, s.devices, s.seconds] for s in found] for found in rounds]
    print(json.dumps({"rounds": rows, "compute": compute}))
    return 0
