"""What one GNN layer costs on one partition of a graph: measured here, or simulated.

ROC (Jia thesis §4.4) learns its cost model from per-partition times of each layer.
A layer on a partition is the aggregation over the partition's in-edges (each owned
vertex sums its in-neighbours' `d_in` activations: a gather and a segment-sum) and
the dense `d_in x d_out` transform of the owned vertices. Two ways to time it:

- `measured_layer_seconds`: the layer jitted in JAX on this machine's default device,
  the least of a few runs (not the median: the 2-core development machine is shared,
  and the least run is the one other processes disturbed least). The fake CPU
  devices of `cpu-N` share this machine's cores, so each partition's work is timed
  alone (as if it had the cores to itself, which is what a device of its own would
  give it).
- `simulated_layer_seconds`: the layer priced on a device preset by the roofline with
  the preset's per-class efficiencies (`Device.efficiency`): the aggregation as a
  `reduction`-class kernel whose bytes are counted in memory accesses of the device's
  granularity (`Device.access_granularity`: a warp's coalesced 32 floats on a GPU),
  run by run of consecutive neighbours, plus the transform as a `gemm` kernel, each
  with one launch. It needs no GPU, so the partitioner works on GPU presets here.

`layer_timer(spec)` picks: measured on CPU devices (the `cpu` device, `cpu-N`,
measured machines), simulated on every other preset.

This module is below the passes (`tasoc.passes.soap.roc` asks it for times) and runs
JAX only inside `measured_layer_seconds`.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasoc.cost.devices import CPU, DEVICES, Device
from tasoc.ir.graph_data import Csr

FLOAT_BYTES = 4
"""float32 activations and weights."""


@dataclass(frozen=True, eq=False)
class Runs:
    """The runs of consecutively numbered in-neighbours of every vertex of a `Csr`:
    run `i` gives `target[i]` the `length[i]` sources from `first[i]` on (in edge
    order). A run is one contiguous read of activations, which is what coalesced
    (GPU) or cache-line (CPU) memory accesses reward."""

    vertices: int
    target: np.ndarray
    length: np.ndarray

    @classmethod
    def of(cls, graph: Csr) -> Runs:
        """The runs of `graph`: one starts at each row's first edge and wherever a source
        is not its predecessor's successor."""
        indices = graph.indices.astype(np.int64)
        starts = np.ones(graph.edges, dtype=bool)
        starts[1:] = indices[1:] != indices[:-1] + 1
        starts[graph.indptr[:-1][graph.degrees() > 0]] = True
        first = np.flatnonzero(starts)
        length = np.diff(np.append(first, graph.edges))
        return cls(graph.vertices, graph.targets()[first].astype(np.int64), length)

    def per_vertex(self, weights: np.ndarray) -> np.ndarray:
        """Sum of `weights` (one per run) over each vertex's runs (float64, V)."""
        return np.bincount(self.target, weights=weights, minlength=self.vertices)


def subgraph(graph: Csr, vertices: np.ndarray) -> Csr:
    """The in-edges of `vertices` (rows in that order, sources keep their global
    numbers): what the device owning them aggregates over."""
    vertices = np.asarray(vertices, dtype=np.int64)
    degrees = graph.degrees()[vertices]
    indptr = np.zeros(len(vertices) + 1, dtype=np.int64)
    np.cumsum(degrees, out=indptr[1:])
    offsets = np.repeat(graph.indptr[vertices] - indptr[:-1], degrees)
    return Csr(indptr, graph.indices[offsets + np.arange(indptr[-1])])


def simulated_layer_seconds(part: Csr, d_in: int, d_out: int, device: Device) -> float:
    """Seconds one GNN layer takes on `device` for the vertices of `part` (a
    `subgraph`): the roofline of the aggregation and of the transform, each at its
    class's efficiency on the device, plus a launch each."""
    granularity = device.access_granularity
    access = granularity * FLOAT_BYTES
    runs = Runs.of(part)
    rows = part.vertices
    accesses = (
        np.ceil(part.degrees() / granularity).sum()  # the neighbour lists
        + np.ceil(runs.length * d_in / granularity).sum()  # their activations, run by run
        + rows * np.ceil(d_in / granularity)  # the aggregated rows written
    )
    aggregate_bytes = accesses * access + rows * 2 * 8  # plus each row's two offsets
    efficiency = device.efficiency
    aggregate = max(
        part.edges * d_in / (device.peak_flops * efficiency.reduction),
        aggregate_bytes / (device.mem_bandwidth * efficiency.reduction),
    )
    transform = max(
        2.0 * rows * d_in * d_out / (device.peak_flops * efficiency.gemm),
        (rows * d_in + d_in * d_out + rows * d_out)
        * FLOAT_BYTES
        / (device.mem_bandwidth * efficiency.gemm),
    )
    return float(aggregate + transform + 2 * device.launch_overhead_s)


@functools.cache
def _layer_program() -> Callable[..., Any]:
    """The jitted layer: gather the in-neighbours' rows, segment-sum them per owned
    vertex, transform (`rows` is static: the segment count fixes the output shape)."""
    import jax

    def layer(h: Any, sources: Any, segments: Any, w: Any, rows: int) -> Any:
        gathered = jax.ops.segment_sum(
            h[sources], segments, num_segments=rows, indices_are_sorted=True
        )
        return gathered @ w

    return jax.jit(layer, static_argnums=4)


@functools.lru_cache(maxsize=8)
def _activations(vertices: int, d_in: int, d_out: int) -> tuple[Any, Any]:
    """Seeded activations of every vertex and a layer's weights, on the default device
    (kept: every partition of a graph reads the same ones)."""
    import jax

    rng = np.random.default_rng(0)
    h = rng.standard_normal((vertices, d_in), dtype=np.float32)
    w = rng.standard_normal((d_in, d_out), dtype=np.float32)
    return jax.device_put(h), jax.device_put(w)


def measured_layer_seconds(graph: Csr, part: Csr, d_in: int, d_out: int, repeats: int = 5) -> float:
    """Seconds one GNN layer takes here for the vertices of `part` (a `subgraph` of
    `graph`): jitted, compiled and run once first, then the least of `repeats` runs."""
    import jax

    h, w = _activations(graph.vertices, d_in, d_out)
    sources = jax.device_put(part.indices.astype(np.int32))
    segments = jax.device_put(part.targets())
    program = _layer_program()
    program(h, sources, segments, w, part.vertices).block_until_ready()
    samples = []
    for _ in range(repeats):
        start = time.perf_counter()
        program(h, sources, segments, w, part.vertices).block_until_ready()
        samples.append(time.perf_counter() - start)
    return min(samples)


LayerTime = Callable[[Csr, np.ndarray, int, int], float]
"""Seconds of one layer (d_in, d_out) for some vertices of a graph."""


@dataclass(frozen=True)
class LayerTimer:
    """How a machine times a GNN layer on a set of vertices: `measured` here, or
    simulated on `device`."""

    device: Device
    measured: bool
    repeats: int = 5

    def __call__(self, graph: Csr, vertices: np.ndarray, d_in: int, d_out: int) -> float:
        part = subgraph(graph, vertices)
        if self.measured:
            return measured_layer_seconds(graph, part, d_in, d_out, self.repeats)
        return simulated_layer_seconds(part, d_in, d_out, self.device)


def layer_timer(spec: str) -> LayerTimer:
    """The timer of machine `spec`: a device preset's name (`cpu`, `p100`, `v100`, ...)
    or anything `machines.machine` reads. CPU devices and measured machines are timed
    here; every other device is simulated."""
    if spec in DEVICES:
        device, pricing = DEVICES[spec], "analytic"
    else:
        from tasoc.cost.machines import machine

        found = machine(spec)
        device, pricing = found.device, found.pricing
    return LayerTimer(device, measured=device is CPU or pricing == "measured")
