"""`tasoc run --processes P`: one sharded program run as P JAX processes (`jax.distributed`).

A user who outgrows one machine runs tasoc's plans on JAX's multi-controller runtime,
not on a home-made one: every process runs the same program on its own devices, and
JAX's coordinator (in process 0) and its CPU collectives (gloo) join them into one
mesh of P x D devices. Two ways to start a run:

- `--processes P --devices D`: tasoc starts the P processes itself on this machine,
  with the coordinator on a free localhost port (the tests; a rehearsal of a run
  across machines).
- `--processes P --devices D --coordinator HOST:PORT --process-id I`: this machine's
  process of a run across machines, started once on each machine by the user or a
  scheduler.

Either way the JAX work runs in *worker* processes (`tasoc run` itself, marked by
`WORKER_ENV`) that this module supervises, because JAX's distributed runtime fails
from C++: a coordinator that cannot be reached, or a peer that died, aborts the
process with a fatal log and SIGABRT, which no Python `except` can catch. The
supervisor turns a worker's failure into one `tasoc: error:` line, ends the other
workers, and gives up on a worker that has not connected soon after
`--connect-timeout`, so a run never hangs on a missing peer.

Every process draws the same inputs (same seed), lays them out as global arrays
(`jax.make_array_from_callback`: each process fills its own devices' blocks), runs
the program, and gathers the results (`process_allgather`). Each process then holds
the whole outputs and prints and `--check`s them as a one-process run does; the
launcher shows process 0's output.
"""

from __future__ import annotations

import argparse
import os
import re
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from tasoc.driver.errors import PREFIX, DriverError, UsageError, non_negative_int, positive_int

if TYPE_CHECKING:
    import jax

    from tasoc.backends.jax.sharded import ShardedProgram

WORKER_ENV = "TASOC_WORKER_READY"
"""Set in a worker's environment to the file it creates once it has joined the run;
its presence is what makes `tasoc run --processes` a worker rather than a launcher."""

DEFAULT_CONNECT_TIMEOUT = 60
"""Seconds a process waits for all processes to reach the coordinator."""

STARTUP_GRACE = 20.0
"""Seconds a worker gets beyond `--connect-timeout` to start Python and JAX (slow on a
loaded machine), and for JAX to act on its own timeout, before the launcher ends it."""

STOP_GRACE = 2.0
"""Seconds an ended worker gets to exit on SIGTERM before SIGKILL: one blocked in
JAX's C++ runtime does not run Python's signal handlers."""

POLL_SECONDS = 0.05

_FATAL_LOG = re.compile(r"^F\d{4} [\d:.]+\s+\d+ [^\]]*\] (?P<message>.*)$")
"""A fatal line of absl's C++ log, with which JAX's runtime aborts a process."""


@dataclass(frozen=True)
class Cluster:
    """One process's place in a run: the coordinator every process connects to, how
    many processes there are, which one this is, and the CPU devices each makes."""

    coordinator: str
    processes: int
    process_id: int
    devices: int
    connect_timeout: int


def add_arguments(parser: argparse.ArgumentParser) -> None:
    """`tasoc run`'s options for a run as several processes."""
    parser.add_argument(
        "--processes",
        type=positive_int,
        metavar="P",
        help="run a sharded program as P JAX processes of --devices D CPU devices each, "
        "started here unless --coordinator joins this process to a run across machines",
    )
    parser.add_argument(
        "--coordinator",
        metavar="HOST:PORT",
        help="with --processes and --process-id: run only this process of a run whose "
        "process 0 listens on HOST:PORT",
    )
    parser.add_argument(
        "--process-id",
        type=non_negative_int,
        metavar="I",
        help="this process's number in 0 .. P-1 (process 0 runs the coordinator)",
    )
    parser.add_argument(
        "--connect-timeout",
        type=positive_int,
        default=DEFAULT_CONNECT_TIMEOUT,
        metavar="S",
        help=f"seconds to wait for all processes to connect (default: {DEFAULT_CONNECT_TIMEOUT})",
    )


def in_worker() -> bool:
    """Whether this process is a worker that a launcher started (it runs the program)."""
    return WORKER_ENV in os.environ


def refuse_options(args: argparse.Namespace) -> None:
    """UsageError for distributed options that mean nothing as given."""
    if args.processes is None:
        for given, flag in ((args.coordinator, "--coordinator"), (args.process_id, "--process-id")):
            if given is not None:
                raise UsageError(f"{flag} needs --processes P")
        return
    if (args.coordinator is None) != (args.process_id is None):
        raise UsageError(
            "--coordinator and --process-id go together (one process of a run across "
            "machines); without both, --processes starts all processes here"
        )
    if args.process_id is not None and args.process_id >= args.processes:
        raise UsageError(
            f"--process-id {args.process_id} is not below --processes {args.processes}"
        )
    if args.coordinator is not None:
        _check_address(args.coordinator)
    if args.input == "-":
        raise UsageError("--processes needs INPUT as a file or zoo: spec (each process reads it)")
    alone = {
        "--backend numpy": args.backend == "numpy",
        "--steps": args.steps is not None,
        "--bench": bool(args.bench),
        "--check-onnxruntime": args.check_onnxruntime,
        "--report": args.report is not None,
    }
    for flag, given in alone.items():
        if given:
            raise UsageError(f"--processes runs a sharded program once on JAX: not with {flag}")


def _check_address(address: str) -> None:
    """UsageError unless `address` is HOST:PORT: JAX would take a wrong one for a host
    that is not there yet, and wait out the connect timeout."""
    host, colon, port = address.rpartition(":")
    if not colon or not host or not port.isdigit() or not 0 < int(port) < 65536:
        raise UsageError(f"--coordinator expects HOST:PORT, got '{address}'")


def devices_per_process(needed: int, processes: int, devices: int | None) -> int:
    """`--devices`, or the share of the mesh's devices each process makes when it is
    not given; DriverError unless the processes make exactly the mesh's devices."""
    if devices is None:
        if needed % processes:
            raise DriverError(
                f"the program's mesh has {needed} devices, which {processes} processes "
                "cannot share equally; give --devices D with P x D devices in all"
            )
        return needed // processes
    if processes * devices != needed:
        raise DriverError(
            f"the program's mesh has {needed} devices, and --processes {processes} x "
            f"--devices {devices} make {processes * devices}"
        )
    return devices


def start(argv: Sequence[str], args: argparse.Namespace) -> int | None:
    """The part of `tasoc run ARGV` that `--processes` changes: a launcher runs the
    workers and returns the exit status; a worker joins the run and returns None, to
    run the program as `tasoc run` does. Without `--processes`: None, nothing done."""
    refuse_options(args)
    if args.processes is None:
        return None
    if in_worker():
        cluster = Cluster(
            args.coordinator, args.processes, args.process_id, args.devices, args.connect_timeout
        )
        join(cluster)
        return None
    from tasoc.driver.devices import mesh_devices
    from tasoc.driver.onnx_bridge import collect_input_shapes
    from tasoc.driver.sources import load_program
    from tasoc.ir.memory import is_placed
    from tasoc.ir.parallel import is_sharded, meshes

    module = load_program(args.input, collect_input_shapes(args.input_shape)).module
    if not is_sharded(module):
        raise DriverError(f"--processes runs a sharded program; {args.input} is not one")
    if is_placed(module):
        raise DriverError(
            f"--processes runs sharded programs without memory placement; {args.input} is "
            "memory-placed too, which runs in one process only (its runtime mode measures "
            "the devices of its process): run it with --devices N"
        )
    needed = mesh_devices(meshes(module).values())
    return launch(argv, args, devices_per_process(needed, args.processes, args.devices))


# ----------------------------------------------------------------- the launcher


@dataclass(frozen=True)
class _Worker:
    """A started worker and the files it writes: its outputs and its ready mark."""

    process_id: int
    popen: subprocess.Popen[bytes]
    stdout: Path
    stderr: Path
    ready: Path


def launch(argv: Sequence[str], args: argparse.Namespace, devices: int) -> int:
    """Run `tasoc run ARGV` as workers (all P here, or the one `--process-id` given),
    supervise them and show the first one's output; DriverError if any fails."""
    if args.coordinator is None:
        coordinator = f"127.0.0.1:{free_port()}"
        ids = range(args.processes)
    else:
        coordinator, ids = args.coordinator, range(args.process_id, args.process_id + 1)
    cluster = Cluster(coordinator, args.processes, ids[0], devices, args.connect_timeout)
    (out, err), *_ = run_workers(["run", *argv], cluster, ids)
    sys.stdout.write(out)
    for line in err.splitlines():
        if line.startswith("tasoc: note: "):
            print(line, file=sys.stderr)
    return 0


WorkerCommand = Callable[[Sequence[str], Cluster, int], list[str]]
"""The command line of a worker from its words, the run and its process id."""


def run_workers(
    words: Sequence[str],
    cluster: Cluster,
    ids: Sequence[int],
    command: WorkerCommand | None = None,
) -> list[tuple[str, str]]:
    """Run `tasoc WORDS` as the workers `ids` of `cluster` (`worker_command`, or
    `command`'s program: a benchmark timing its calls in every process runs its own
    script), supervise them until all succeed, and return each one's stdout and
    stderr; DriverError, every worker ended, when one fails or does not join in time.
    `tasoc run --processes`, `tasoc machine calibrate --processes` and
    `benchmarks/sim_validate.py` start their workers here."""
    with tempfile.TemporaryDirectory(prefix="tasoc-processes-") as folder:
        workers = [_start(words, cluster, i, Path(folder), command) for i in ids]
        try:
            _supervise(workers, cluster)
        finally:
            for worker in workers:
                _stop(worker.popen)
        return [
            (w.stdout.read_text(errors="replace"), w.stderr.read_text(errors="replace"))
            for w in workers
        ]


def free_port() -> int:
    """A localhost port no one listens on now, for the coordinator of a local run."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def worker_command(words: Sequence[str], cluster: Cluster, process_id: int) -> list[str]:
    """The command line of worker `process_id`: `tasoc WORDS` joined to `cluster`."""
    return [sys.executable, "-m", "tasoc.driver.main", *words, *place_of(cluster, process_id)]


def place_of(cluster: Cluster, process_id: int) -> list[str]:
    """The options that give worker `process_id` its place in `cluster`."""
    return [
        "--coordinator",
        cluster.coordinator,
        "--process-id",
        str(process_id),
        "--devices",
        str(cluster.devices),
    ]


def _start(
    words: Sequence[str],
    cluster: Cluster,
    process_id: int,
    folder: Path,
    command: WorkerCommand | None,
) -> _Worker:
    stdout, stderr = folder / f"{process_id}.out", folder / f"{process_id}.err"
    ready = folder / f"{process_id}.ready"
    with stdout.open("wb") as out, stderr.open("wb") as err:
        popen = subprocess.Popen(
            (command or worker_command)(words, cluster, process_id),
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=err,
            env={**os.environ, WORKER_ENV: str(ready)},
        )
    return _Worker(process_id, popen, stdout, stderr, ready)


def _supervise(workers: Sequence[_Worker], cluster: Cluster) -> None:
    """Wait for every worker to succeed; DriverError at the first failure, or when a
    worker has not joined the run well after the connect timeout.

    A failure is reported once the other workers had `STOP_GRACE` to fail as well: bad
    input fails every process alike, and the message then names the same process (the
    lowest) whichever failed first."""
    deadline = time.monotonic() + cluster.connect_timeout + STARTUP_GRACE
    while True:
        if any(w.popen.poll() not in (None, 0) for w in workers):
            _wait_all(workers, STOP_GRACE)
            failed = [w for w in workers if w.popen.returncode not in (None, 0)]
            raise DriverError(_failure(failed, cluster))
        running = [w for w in workers if w.popen.returncode is None]
        if not running:
            return
        if time.monotonic() > deadline and not all(w.ready.exists() for w in running):
            raise DriverError(_unreachable(running[0].process_id, cluster))
        time.sleep(POLL_SECONDS)


def _wait_all(workers: Sequence[_Worker], seconds: float) -> None:
    """Wait until every worker has exited or `seconds` have passed."""
    until = time.monotonic() + seconds
    while time.monotonic() < until and any(w.popen.poll() is None for w in workers):
        time.sleep(POLL_SECONDS)


def _stop(popen: subprocess.Popen[bytes]) -> None:
    if popen.poll() is not None:
        return
    popen.terminate()
    try:
        popen.wait(STOP_GRACE)
    except subprocess.TimeoutExpired:
        popen.kill()
        popen.wait()


def _unreachable(process_id: int, cluster: Cluster) -> str:
    if process_id == 0:
        return (
            f"not all {cluster.processes} processes reached the coordinator "
            f"{cluster.coordinator} within {cluster.connect_timeout} s"
        )
    return (
        f"could not reach the coordinator {cluster.coordinator} within {cluster.connect_timeout} s"
    )


def _failure(failed: Sequence[_Worker], cluster: Cluster) -> str:
    """One line for the failed workers: a worker's own `tasoc: error:` (the cause; a
    peer of a failed worker only aborts), else what JAX's runtime said as it aborted."""
    logs = {w.process_id: w.stderr.read_text(errors="replace") for w in failed}
    for worker in failed:
        reported = [
            line for line in logs[worker.process_id].splitlines() if line.startswith(PREFIX)
        ]
        if reported:
            return f"process {worker.process_id}: {reported[-1].removeprefix(PREFIX)}"
    worker = failed[0]
    log = logs[worker.process_id]
    if not worker.ready.exists() and "DEADLINE_EXCEEDED" in log:
        return _unreachable(worker.process_id, cluster)
    code = worker.popen.returncode
    ended = (
        f"was killed by {signal.Signals(-code).name}" if code < 0 else f"exited with status {code}"
    )
    return f"process {worker.process_id} {ended}: {_last_words(log)}"


def _last_words(log: str) -> str:
    """What a worker said last: the fatal message of a C++ abort, else its last line."""
    lines = [line.strip() for line in log.splitlines() if line.strip()]
    fatal = next((m["message"] for line in lines if (m := _FATAL_LOG.match(line))), None)
    words = fatal or (lines[-1] if lines else "no output")
    return words if len(words) <= 300 else f"{words[:300]}..."


# ------------------------------------------------------------------- the worker


def join(cluster: Cluster) -> None:
    """Make this worker's CPU devices and join the run (`jax.distributed.initialize`),
    before anything starts JAX's backends; then mark the worker ready."""
    import jax

    try:
        jax.config.update("jax_num_cpu_devices", cluster.devices)
        # gloo is JAX 0.12's default for CPU collectives across processes; a run relies on it.
        jax.config.update("jax_cpu_collectives_implementation", "gloo")
    except RuntimeError as err:  # the backends are already up
        raise DriverError(f"cannot join a run as process {cluster.process_id}: {err}") from None
    _native_stdout_to_stderr()
    jax.distributed.initialize(
        coordinator_address=cluster.coordinator,
        num_processes=cluster.processes,
        process_id=cluster.process_id,
        initialization_timeout=cluster.connect_timeout,
    )
    Path(os.environ[WORKER_ENV]).touch()


def _native_stdout_to_stderr() -> None:
    """Send what C++ writes to stdout (gloo logs each connection there) to stderr, and
    keep Python's `print` on the real stdout, so that stdout holds only tasoc's output."""
    sys.stdout.flush()
    python_stdout = os.dup(1)
    os.dup2(2, 1)
    sys.stdout = open(python_stdout, "w", encoding=sys.stdout.encoding, closefd=True)  # noqa: SIM115


def run_global(program: ShardedProgram, inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """Run `program` on all processes' devices with the same global `inputs` on every
    process; every process gets the whole results, as NumPy arrays of the IR's dtypes."""
    from jax.experimental import multihost_utils

    from tasoc.backends.jax.lowering import host_results

    results = program.fn(*global_arguments(program, inputs))
    gathered = [multihost_utils.process_allgather(result, tiled=True) for result in results]
    return host_results(gathered, program.result_sigs)


def global_arguments(program: ShardedProgram, inputs: Sequence[np.ndarray]) -> list[jax.Array]:
    """The same global `inputs` on every process laid out as `program` takes them, each
    process's devices holding their own blocks (what `program.fn` is called on)."""
    from tasoc.backends.arguments import check_arguments
    from tasoc.backends.jax.lowering import host_argument

    check_arguments(program.arg_infos, inputs)
    return [
        _global_array(host_argument(info, value), sharding)
        for info, value, sharding in zip(
            program.arg_infos, inputs, program.in_shardings, strict=True
        )
    ]


def _global_array(value: np.ndarray, sharding: jax.sharding.Sharding) -> jax.Array:
    """`value` laid out as `sharding` across processes: each fills its own blocks."""
    import jax

    return jax.make_array_from_callback(value.shape, sharding, lambda index: value[index])
