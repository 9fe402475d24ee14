"""`cost=xla`: a graph priced as the sum of its fused regions, each timed as XLA runs it.

Summed op times (`MeasuredCost`) and a roofline (`AnalyticCost`) both price ops one by
one and model XLA's fusion on top. This model prices whole *regions* instead: the
ops that run as one kernel (`tasoc.cost.fusion.plan_fusion`: a running op and the
fusible ops that join it), each compiled and timed alone under `jax.jit`, so what XLA
does inside a region (which ops it really fuses, which kernel it picks for a shape, a
transpose folded into a dot) is in the region's time rather than modelled.

The partition imitates XLA's fusion rather than asking XLA for it: reading the
optimized HLO's fusions of a candidate means compiling the candidate (0.2-2 s for a
zoo model on the 2-core development machine), and a search prices thousands of
candidates; the partition costs one pass over the graph. A region that the
partition draws larger or smaller than XLA's kernel is still timed as XLA compiles
it, so a misplaced boundary costs one launch, not a mispriced op.

A region is keyed by a canonical text (`region_key`): its ops in order with their
attributes, each operand written as an earlier member's result or as the n-th
distinct external operand with its type, and which results leave the region —
value names never appear, so equal regions anywhere in any graph share one entry.
Its time is what one more application adds to a jitted program (`measure_region`:
a program applying it several times, each copy on operands of its own and waiting
for the one before, against a program applying it once, timed in turns, as
`tasoc.cost.op_table` times ops; the difference of their fastest samples), so JAX's
per-call dispatch cancels and a region's launch inside a program stays. A graph
costs the sum of its regions' times plus one dispatch floor (the smallest program's
call), which all graphs pay alike.

A convolution's weight relayout (`Device.conv_weight_relayout`) needs no term of its
own here: a region reading its OIHW weight as an argument is timed as XLA compiles
it, relayout kernel included, and a region reading it through a layout view of an
HWIO argument (`fusion.layout_views`: the view is a member of the convolution's
region) without. In a training step the laid-out weight's transpose runs as a region
of its own, so there both forms pay it.

Region times live in `regions-<device>.json` under `cache_dir()` (the directory
`MeasuredCost` and the op table use), tagged with the device, the JAX version and
the format: a file that is corrupt or written for another device, JAX or format is
ignored with one warning line on stderr and rebuilt as regions are measured again.
The cost of one graph is cached per region (by its member nodes), so a candidate
that shares all but a few regions with the graphs before it costs a dictionary
lookup for each old one and a measurement (or a cache-file hit) for each new one.

The e-graph's extraction prices e-nodes one at a time (`FusedSumCost.op_work`); here
that is the analytic roofline of the model's device, and every whole graph the
search compares (the extracted ones, polishing's, the pass's before and after) is
priced by its regions.

When no timing can be taken (JAX has no device), `make_xla_cost` returns the
analytic model of the CPU preset, marked as a fallback with the reason
(`AnalyticFallback`), and the pass says so in its summary.
"""

from __future__ import annotations

import json
import math
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from tasoc.cost.analytic import AnalyticCost, roofline_work
from tasoc.cost.devices import CPU, Device
from tasoc.cost.fusion import FusionPlan, plan_fusion
from tasoc.cost.measured import TimingFile, cache_dir, current_device, floor_node, one_op_dag
from tasoc.cost.model import FusedSumCost, Work, _over_memory
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.memory import tensor_bytes

REGION_FORMAT = 2
"""The region cache file's format (bumped when what an entry means changes): 2 since
`measure_region` takes the fastest rounds' difference (1: the median difference,
which a loaded machine scattered over 0-1.5 ms for one 512 x 512 GEMV region)."""

REGION_SAMPLES = 7
"""Rounds per region measurement (`measure_region`)."""

MAX_REGION_COPIES = 16
REGION_COPIES_BYTES = 2**25
"""`measure_region` times up to `MAX_REGION_COPIES` applications of a region in one
program, as many as keep their operands and results within `REGION_COPIES_BYTES`:
fewer than the op table's 64, since a region of several ops compiles slower, and
more bytes than its 1 MiB, so a region reading a 1 MiB weight is still timed 16
times rather than twice (a difference of two copies was all noise)."""

DISPATCH_KEY = "dispatch"
"""The cache entry of the dispatch floor: seconds of one call of the smallest program."""

WARNING = "tasoc: warning: "


# --------------------------------------------------------------- regions


def kernels(plan: FusionPlan) -> list[tuple[list[Node], list[Value]]]:
    """The running ops of `plan` grouped by kernel, each group in `dag.ops` order with
    the results that leave it (read by a running op of another kernel, or returned by
    the graph), the groups in the order of their first op."""
    kernel_of: dict[Node, int] = {}
    groups: list[list[Node]] = []
    for node, fused in zip(plan.running, plan.fused, strict=True):
        if fused < 0:
            kernel_of[node] = len(groups)
            groups.append([node])
        else:
            kernel = kernel_of[node] = kernel_of[node.inputs[fused].node]
            groups[kernel].append(node)
    leaving = set(plan.dag.outputs)
    for node, kernel in kernel_of.items():
        leaving.update(v for v in node.inputs if kernel_of.get(v.node, kernel) != kernel)
    return [
        (members, [v for node in members for v in node.results if v in leaving])
        for members in groups
    ]


def region_dag(members: Sequence[Node], leaving: Sequence[Value]) -> Dag:
    """The program computing region `members` (in order) from fresh arguments, one per
    distinct external operand in order of first use, and returning `leaving` (the
    members' results read outside the region or returned by the graph)."""
    inside = set(members)
    renamed: dict[Value, Value] = {}
    args: list[Node] = []
    for node in members:
        inputs = []
        for value in node.inputs:
            if value not in renamed:
                if value.node in inside:
                    raise ValueError(f"region members out of order at {node!r}")
                arg = Node.arg(len(args), "x", value.sig)
                args.append(arg)
                renamed[value] = arg.out
            inputs.append(renamed[value])
        rebuilt = Node(node.op, inputs, **dict(node.attrs))
        renamed.update(zip(node.results, rebuilt.results, strict=True))
    return Dag(args, [renamed[value] for value in leaving])


def region_key(region: Dag) -> str:
    """The canonical text of a region program (`region_dag`): ops in order with their
    attributes and operands (`%i.r`: result r of the i-th op; `$j`: argument j, whose
    type is listed first), and the results it returns. Names never appear, so two
    equal regions have one key, and any difference of op, attribute, shape, dtype or
    internal edge gives another."""
    position = {node: i for i, node in enumerate(region.ops)}

    def ref(value: Value) -> str:
        if value.node.is_arg:
            return f"${value.node.attr('index')}"
        return f"%{position[value.node]}.{value.index}"

    args = ", ".join(str(arg.sigs[0]) for arg in region.args)
    body = "; ".join(
        f"{node.op}{{{', '.join(f'{k}={v!r}' for k, v in node.attrs)}}}"
        f"({', '.join(ref(v) for v in node.inputs)})"
        for node in region.ops
    )
    outputs = ", ".join(ref(v) for v in region.outputs)
    return f"({args}) {{{body}}} -> ({outputs})"


def regions(dag: Dag, fusion: bool = True, fold_weights: bool = True) -> list[Dag]:
    """The region programs of `dag` (`region_dag`), one per kernel of its fusion plan."""
    plan = plan_fusion(dag, fusion, fold_weights)
    return [region_dag(members, leaving) for members, leaving in kernels(plan)]


# --------------------------------------------------------------- measuring


def region_copies(region: Dag) -> int:
    """How many applications of `region` `measure_region` times in one program:
    `MAX_REGION_COPIES`, fewer when operands and results would pass
    `REGION_COPIES_BYTES`, never fewer than two."""
    values = [arg.out for arg in region.args] + list(region.outputs)
    nbytes = sum(tensor_bytes(value.sig) for value in values)
    return max(2, min(MAX_REGION_COPIES, REGION_COPIES_BYTES // max(nbytes, 1)))


def measure_region(region: Dag, samples: int = REGION_SAMPLES) -> float:
    """Seconds one more application of `region` adds to a jitted program on JAX's
    default device (module docstring): the program applying it `region_copies` times
    and the one applying it once (`tasoc.cost.op_table.dag_program`) sampled in
    turns, `samples` rounds, and the difference of each one's fastest sample per
    extra copy. The fastest, not the median: load from other processes only adds
    time, and on a shared 2-core machine the median difference of two noisy times
    scattered one GEMV region's entry from 0 to 1.5 ms. (The process's CPU time
    scatters as much under load: XLA's worker threads wait and wake.)"""
    import jax

    from tasoc.cost.op_table import dag_program, fastest_difference

    devices = jax.devices()[:1]
    copies = region_copies(region)
    many, once = (dag_program(region, devices, n) for n in (copies, 1))
    return max(fastest_difference(many, once, samples), 0.0) / (copies - 1)


def measure_dispatch(samples: int = REGION_SAMPLES) -> float:
    """Seconds of one call of the smallest program (`floor_node`) on JAX's default
    device: the per-call cost every graph pays once."""
    import jax

    from tasoc.cost.op_table import _calls_per_sample, _sample, dag_program

    program = dag_program(one_op_dag(floor_node()), jax.devices()[:1], 1)
    calls = _calls_per_sample(program)
    return min(_sample(program, calls) for _ in range(samples))


class RegionFile(TimingFile):
    """The region cache file: a `TimingFile` that also checks the device it was
    written for, and says once, on stderr, when it ignores a file it found."""

    def __init__(self, path: Path, device_name: str) -> None:
        super().__init__(path, device_name, REGION_FORMAT)
        self._warned = False

    def load(self) -> dict[str, float]:
        reason = self.unusable()
        if reason is None:
            return super().load()
        if not self._warned:
            self._warned = True
            print(f"{WARNING}cost=xla: ignoring {self.path} ({reason}); rebuilding it",
                  file=sys.stderr)  # fmt: skip
        return {}

    def unusable(self) -> str | None:
        """Why the file cannot be used (None: it can, or it does not exist yet)."""
        try:
            text = self.path.read_text()
        except FileNotFoundError:
            return None
        except OSError as error:
            return f"unreadable: {error.strerror or error}"
        try:
            data = json.loads(text)
        except ValueError:
            return "corrupt: not JSON"
        if not isinstance(data, dict) or not isinstance(data.get("seconds"), dict):
            return "corrupt: no table of seconds"
        if not all(isinstance(v, int | float) for v in data["seconds"].values()):
            return "corrupt: a time that is not a number"
        for field, mine in (("device", self.device_name), ("jax", self._jax_version),
                            ("format", self.format)):  # fmt: skip
            if data.get(field) != mine:
                return f"written for {field} {data.get(field)!r}, this is {mine!r}"
        return None


class XlaCost(FusedSumCost):
    """A graph's time as the sum of its fused regions' measured times (module
    docstring), infinite over `memory_limit`.

    `device` (default: the preset matching the JAX device) prices single e-nodes for
    the e-graph's extraction (`op_work`: its roofline). `measured` counts the regions
    timed by this instance (not found in the cache file), so tests and benchmarks can
    see the cache work.
    """

    def __init__(
        self,
        device_cache_dir: str | os.PathLike[str] | None = None,
        memory_limit: float | None = None,
        fold_weights: bool = True,
        device: Device | None = None,
        samples: int = REGION_SAMPLES,
    ) -> None:
        self.device_name, preset = current_device()
        super().__init__(device or preset, memory_limit, True, fold_weights)
        self.samples = samples
        self._file = RegionFile(
            cache_dir(device_cache_dir) / f"regions-{self.device_name}.json", self.device_name
        )
        self.path = self._file.path
        self._seconds: dict[str, float] = self._file.load()
        self._new: dict[str, float] = {}
        self._by_members: dict[tuple[Node | Value, ...], float] = {}
        self.measured = 0

    def cost(self, dag: Dag) -> float:
        plan = plan_fusion(dag, True, self.fold_weights)
        if self.memory_limit is not None and _over_memory(plan, self.memory_limit):
            return math.inf
        try:
            total = self._time(DISPATCH_KEY, None)
            for members, leaving in kernels(plan):
                key = (*members, *leaving)
                seconds = self._by_members.get(key)
                if seconds is None:
                    region = region_dag(members, leaving)
                    seconds = self._by_members[key] = self._time(region_key(region), region)
                total += seconds
            return total
        finally:
            if self._new:
                self._file.save(self._new)
                self._new.clear()

    def _time(self, key: str, region: Dag | None) -> float:
        seconds = self._seconds.get(key)
        if seconds is None:
            self.check_budget()
            seconds = measure_dispatch(self.samples) if region is None else (
                measure_region(region, self.samples))  # fmt: skip
            self._seconds[key] = self._new[key] = seconds
            self.measured += 1
            self.check_budget()
        return seconds

    def op_work(self, node: Node, fused: int, internal: bool) -> Work:
        return roofline_work(node, fused, internal, self.device)

    def describe(self) -> str:
        return (
            f"fused regions measured on {self.device_name} (cache {self.path}, "
            f"{len(self._seconds)} entries), {self._options()}"
        )


class AnalyticFallback(AnalyticCost):
    """The analytic model standing in for `cost=xla` where no timing can be taken;
    `reason` says why, and the pass's summary says so."""

    def __init__(
        self, reason: str, memory_limit: float | None = None, fold_weights: bool = True
    ) -> None:
        super().__init__(CPU, memory_limit, fold_weights=fold_weights)
        self.reason = reason

    def describe(self) -> str:
        return f"{super().describe()} (cost=xla fell back: {self.reason})"


def make_xla_cost(
    memory_limit: float | None = None, fold_weights: bool = True
) -> XlaCost | AnalyticFallback:
    """`XlaCost`, or the analytic fallback when JAX cannot time on a device here."""
    try:
        return XlaCost(memory_limit=memory_limit, fold_weights=fold_weights)
    except (ImportError, RuntimeError) as error:
        first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
        return AnalyticFallback(f"timing unavailable: {first}", memory_limit, fold_weights)
