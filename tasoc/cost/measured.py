"""The measured cost model: each distinct op timed once with JAX, cached on disk.

TASO's observation (thesis §2.6) is that an op's time depends only on its
configuration (op, attributes, operand types; the `graph` dialect has one layout
per tensor, so layout is implied), so each configuration is timed once on the
current JAX device and remembered in `costs-<device>.json`. A one-op program's time
includes JAX's dispatch of a jitted call, which a whole graph pays only once, so
the time of the smallest program (`floor_node`) is subtracted as the dispatch floor;
inside a graph each kernel then pays the device preset's launch overhead instead.

Fusion (`tasoc.cost.fusion`) needs an op's time split into compute and memory: the
measured kernel time is scaled onto the device preset's roofline of the op (the
op's efficiency on this device), and the fused variant's compute and memory
seconds are scaled alike. So a relu fused into a convolution loses the reads of
its operand and then hides under the convolution's compute, as in the analytic
model, while each op keeps the speed measured for it.

On a device that relays out convolution weights per call (`Device.conv_weight_relayout`:
XLA:CPU), a convolution is timed reading its weight laid out (HWIO through a layout
view), and the relayout a step pays for an OIHW weight argument is priced apart as
the transpose XLA runs (`FusedSumCost`), so a graph with its weights laid out once is
priced without it.

Summed op times still misrank some graphs: XLA fuses and schedules across the
whole program, and per-call costs do not add up (on the development CPU one
8x64 @ 64x64 matmul program takes 30 us, a program of two such matmuls 38 us). A
search should re-time its best few candidates as whole programs with
`time_end_to_end` before choosing.

JAX is imported lazily, so importing `tasoc.cost` stays cheap for analytic use.
"""

from __future__ import annotations

import json
import math
import os
import re
import statistics
import tempfile
import time
import warnings
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from tasoc.cost.analytic import roofline, roofline_work
from tasoc.cost.devices import CPU, DEVICES, H100, Device
from tasoc.cost.fusion import CONVOLUTION_WEIGHT, HWIO, OIHW, node_info, plan_fusion
from tasoc.cost.model import CostModel, FusedSumCost, Work
from tasoc.ir.dag import Dag, Node, Value, to_module
from tasoc.ir.shapes import DType, TensorSig

CACHE_ENV = "TASOC_CACHE_DIR"
"""Environment variable naming the cache directory (default ~/.cache/tasoc)."""

_FORMAT = 1


def floor_node() -> Node:
    """The op of the smallest program: its time is JAX's per-call dispatch floor."""
    return Node("relu", [Node.arg(0, "x", TensorSig((1,), DType.F32)).out])


_MIN_SAMPLE_S = 0.02
"""`time_end_to_end` repeats a fast program within one sample until it takes this long,
so timer resolution and scheduling noise stay small against what is measured. (With
1 ms, and the calls per sample calibrated on a call that also compiled, a sample was
one call: single calls of nasrnn ranged 0.7-1.5x of each other on our 2-core machine,
and re-timing chose between graphs by noise.)"""


def cache_dir(override: str | os.PathLike[str] | None = None) -> Path:
    """The measurement cache directory: `override`, else $TASOC_CACHE_DIR, else
    ~/.cache/tasoc."""
    if override is not None:
        return Path(override)
    from_env = os.environ.get(CACHE_ENV)
    return Path(from_env) if from_env else Path.home() / ".cache" / "tasoc"


def current_device() -> tuple[str, Device]:
    """A file-name-safe name of JAX's default device and the preset closest to it.

    CPUs are told apart by core count only (XLA reports every CPU as "cpu"), so a
    cache directory shared between different CPU machines should be set per machine.
    """
    import jax

    device = jax.devices()[0]
    kind = device.device_kind.lower()
    if device.platform == "cpu":
        return f"cpu-{os.cpu_count()}", CPU
    name = re.sub(r"[^a-z0-9]+", "-", kind).strip("-")
    preset = next((d for key, d in DEVICES.items() if key in kind), H100)
    return name, preset


def prices_this_machine(cost_model: CostModel) -> bool:
    """Whether `cost_model` prices the device JAX runs on here (its preset is the one
    `current_device` picks), so that timing candidates on this machine can correct it;
    a model of another device (`analytic-h100` on a CPU host) cannot be."""
    return isinstance(cost_model, FusedSumCost) and cost_model.device == current_device()[1]


def op_key(node: Node) -> str:
    """What identifies a measurement: op, attributes and operand types, as text."""
    attrs = ", ".join(f"{name}={_attr_text(value)}" for name, value in node.attrs)
    operands = ", ".join(str(value.sig) for value in node.inputs)
    return f"{node.op}{{{attrs}}}({operands})"


def _attr_text(value: Any) -> str:
    return repr(str(value)) if isinstance(value, str) else repr(value)


def one_op_dag(node: Node, weight_laid_out: bool = False) -> Dag:
    """A program applying `node`'s op to fresh arguments of its operand types; with
    `weight_laid_out`, a convolution reads its weight through a layout view of an HWIO
    argument (`tasoc.cost.fusion.OIHW`), so XLA relays out nothing per call."""
    args = [Node.arg(i, "x", value.sig) for i, value in enumerate(node.inputs)]
    inputs = [arg.out for arg in args]
    op, position = CONVOLUTION_WEIGHT
    if weight_laid_out and node.op == op:
        sig = node.inputs[position].sig
        hwio = TensorSig(tuple(sig.shape[axis] for axis in HWIO), sig.dtype)
        args[position] = Node.arg(position, "x", hwio)
        inputs[position] = Node("transpose", [args[position].out], perm=OIHW).out
    return Dag(args, Node(node.op, inputs, **dict(node.attrs)).results)


def time_op(node: Node, repeats: int = 10, weight_laid_out: bool = False) -> float:
    """Median seconds of one jitted call of `node`'s op alone on the default JAX
    device (`one_op_dag`), after a warm-up call that compiles it."""
    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax import bench, lower

    module = to_module(one_op_dag(node, weight_laid_out))
    return statistics.median(bench(lower(module), random_inputs(module), repeats))


LAID_OUT_KEY = " [weight HWIO]"
"""Appended to a convolution's `op_key` when `MeasuredCost` times it reading its weight
laid out (its relayout priced apart): a measurement of another program than the
plain key's."""


class TimingFile:
    """Measured seconds by key in one JSON file of the cache directory, for one device
    and JAX version (XLA's kernels change between versions, so a file written by
    another version, or in another format, reads as empty).

    `save` merges what is new into what the file holds now (another process may have
    added some meanwhile) and replaces it atomically, so a reader never sees half a
    file; a file that cannot be written only warns: measuring still works, and only
    the next process measures again.
    """

    def __init__(self, path: Path, device_name: str, fmt: int = _FORMAT) -> None:
        """`fmt`: the format written and read back; a file's owner bumps its own when
        what an entry means changes (how it was measured), so old entries are remeasured."""
        import jax

        self.path = path
        self.device_name = device_name
        self.format = fmt
        self._jax_version = jax.__version__

    def load(self) -> dict[str, float]:
        """The cached seconds; none when the file is missing, unreadable or from another
        JAX version or format."""
        try:
            data = json.loads(self.path.read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict):
            return {}
        if data.get("format") != self.format or data.get("jax") != self._jax_version:
            return {}
        seconds = data.get("seconds")
        return dict(seconds) if isinstance(seconds, dict) else {}

    def save(self, new: dict[str, float]) -> None:
        """Merge `new` into the file and replace it atomically (class docstring)."""
        merged = {**self.load(), **new}
        data = {
            "format": self.format,
            "device": self.device_name,
            "jax": self._jax_version,
            "seconds": dict(sorted(merged.items())),
        }
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with tempfile.NamedTemporaryFile(
                "w", dir=self.path.parent, prefix=self.path.name, suffix=".tmp", delete=False
            ) as handle:
                json.dump(data, handle, indent=1)
            os.replace(handle.name, self.path)
        except OSError as error:  # measuring still works; only the next process re-times
            warnings.warn(f"cannot write the cost cache {self.path}: {error}", stacklevel=3)


class MeasuredCost(FusedSumCost):
    """Op times measured on the current JAX device under the fusion model.

    Measurements live in `<device_cache_dir>/costs-<device>.json` (see `cache_dir`);
    new ones are written back after each `cost` call that made any. A cache written
    by another JAX version is ignored, since XLA's kernels change between versions.
    `device` (default: the preset matching the JAX device) supplies the launch
    overhead and the roofline balance used to price fusion.
    """

    def __init__(
        self,
        device_cache_dir: str | os.PathLike[str] | None = None,
        memory_limit: float | None = None,
        fusion: bool = True,
        fold_weights: bool = True,
        device: Device | None = None,
        repeats: int = 10,
    ) -> None:
        self.device_name, preset = current_device()
        super().__init__(device or preset, memory_limit, fusion, fold_weights)
        self.repeats = repeats
        self._file = TimingFile(
            cache_dir(device_cache_dir) / f"costs-{self.device_name}.json", self.device_name
        )
        self.path = self._file.path
        self._seconds: dict[str, float] = self._file.load()
        self._new: dict[str, float] = {}

    def cost(self, dag: Dag) -> float:
        try:
            return super().cost(dag)
        finally:
            if self._new:
                self._file.save(self._new)
                self._new.clear()

    def op_work(self, node: Node, fused: int, internal: bool) -> Work:
        kernel = max(self._measured(node) - self._dispatch_floor(), 0.0)
        alone = roofline(node, -1, False, self.device)
        if not alone:
            return kernel, 0.0
        compute, memory = roofline_work(node, fused, internal, self.device)
        return compute * kernel / alone, memory * kernel / alone

    def describe(self) -> str:
        return (
            f"measured on {self.device_name} (cache {self.path}, {len(self._seconds)} ops), "
            f"{self.device.launch_overhead_s * 1e6:g} us/kernel, {self._options()}"
        )

    def _measured(self, node: Node) -> float:
        """Seconds of `node`'s one-op program, measured once. Where the device relays
        out convolution weights, a convolution is timed reading its weight laid out:
        the relayout is a kernel priced apart (`FusedSumCost`), as the transpose of
        the weight that XLA runs, and a laid-out convolution does not pay it."""
        laid_out = self.device.conv_weight_relayout and node.op == CONVOLUTION_WEIGHT[0]
        key = op_key(node) + (LAID_OUT_KEY if laid_out else "")
        seconds = self._seconds.get(key)
        if seconds is None:
            self.check_budget()
            seconds = time_op(node, self.repeats, laid_out)
            self._seconds[key] = self._new[key] = seconds
            self.check_budget()
        return seconds

    def _dispatch_floor(self) -> float:
        return self._measured(floor_node())


# --------------------------------------------------------------- end to end


def time_end_to_end(
    dags: Sequence[Dag], repeats: int = 5, fold_weights: bool = True, seed: int = 0
) -> list[float]:
    """Median seconds per run of each whole dag, jitted, on the default JAX device
    (`time_rounds`' samples, each program's median)."""
    return [statistics.median(times) for times in time_rounds(dags, repeats, fold_weights, seed)]


def time_rounds(
    dags: Sequence[Dag], repeats: int = 5, fold_weights: bool = True, seed: int = 0
) -> list[list[float]]:
    """`repeats` samples of seconds per run of each whole dag (one list per dag, in
    round order), jitted, on the default JAX device.

    The programs are timed interleaved (A, B, C, A, B, C, ...) so that drift in the
    machine's speed hits all of them alike, and sample i of every program comes from
    round i, so programs can be compared round by round; each is compiled and warmed
    up first. With `fold_weights`, ops computed from weights alone are evaluated once
    beforehand and passed in as weights, as the cost models assume. Arguments are
    `random_inputs(..., seed)` of each dag.
    """
    runners = [end_to_end_sampler(dag, fold_weights, seed) for dag in dags]
    samples: list[list[float]] = [[] for _ in dags]
    for _ in range(repeats):
        for run, times in zip(runners, samples, strict=True):
            times.append(run())
    return samples


def end_to_end_sampler(dag: Dag, fold_weights: bool = True, seed: int = 0) -> Callable[[], float]:
    """A function timing one sample of `dag` (seconds per call, averaged over enough
    calls to last `_MIN_SAMPLE_S`, counted on a call after the one that compiles),
    jitted and warmed up; what `time_rounds` and benchmarks that interleave their own
    runs call."""
    import jax

    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax import lower

    values = random_inputs(to_module(dag), seed)
    if fold_weights:
        dag, values = preprocessed(dag, values)
    program = lower(to_module(dag))
    args = program.device_args(values)
    jax.block_until_ready(program.fn(*args))  # compiles
    start = time.perf_counter()
    jax.block_until_ready(program.fn(*args))
    warm = max(time.perf_counter() - start, 1e-9)
    calls = max(1, min(100, math.ceil(_MIN_SAMPLE_S / warm)))

    def run() -> float:
        start = time.perf_counter()
        for _ in range(calls):
            jax.block_until_ready(program.fn(*args))
        return (time.perf_counter() - start) / calls

    return run


def preprocessed(dag: Dag, values: Sequence[Any]) -> tuple[Dag, list[Any]]:
    """The step of `dag` that runs on every call, with its arguments: `values` and
    the weight-only values computed from them once, under JAX (`weight_preprocessing`:
    what TASO preprocesses for inference, a laid-out convolution weight among them)."""
    from tasoc.backends.jax import lower

    step, weights = weight_preprocessing(dag)
    if weights is None:
        return dag, list(values)
    return step, [*values, *lower(to_module(weights))(*values)]


def weight_preprocessing(dag: Dag) -> tuple[Dag, Dag | None]:
    """`dag` with every weight-only value that a running op reads (or the program
    returns) turned into a new weight argument, and the dag computing those values
    from the original arguments (None when there are none)."""
    plan = plan_fusion(dag, fuse=False, fold_weights=True)
    read = [v for node in plan.running for v in node.inputs] + list(dag.outputs)
    folded = [
        v for v in dict.fromkeys(read) if v.node not in plan.running and node_info(v.node).computed
    ]
    if not folded:
        return dag, None
    renamed: dict[Value, Value] = {
        value: Node.arg(len(dag.args) + i, "folded", value.sig, is_param=True).out
        for i, value in enumerate(folded)
    }
    for node in plan.running:
        inputs = [renamed.get(v, v) for v in node.inputs]
        rebuilt = Node(node.op, inputs, **dict(node.attrs))
        renamed.update(zip(node.results, rebuilt.results, strict=True))
    args = [*dag.args, *(renamed[v].node for v in folded)]
    outputs = [renamed.get(v, v) for v in dag.outputs]
    return Dag(args, outputs, dag.name), Dag(dag.args, folded, dag.name)
