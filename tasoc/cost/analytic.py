"""The analytic cost model: a roofline per kernel on a `Device`, under XLA-style fusion.

An op adds FLOPs / peak of compute and bytes / bandwidth of memory time to its
kernel, the bytes being what it moves once fused (`tasoc.cost.fusion.traffic`), each
divided by the fraction of the roofline its class of kernel reaches on the device
(`Device.efficiency`, by `op_class`); a kernel takes the larger of the two sums plus
one launch. It needs no hardware and is exact about what it counts, so it ranks
graphs well where they differ in FLOPs, traffic or kernel count. It knows one
published fraction per op class, not how close XLA's kernels come to the peak for a
given shape (on the development CPU, 8 to 160 GFLOP/s for ResNet-50's convolutions):
`MeasuredCost` does.
"""

from __future__ import annotations

import functools

from tasoc.cost.devices import CPU, Device, OpClass
from tasoc.cost.fusion import traffic
from tasoc.cost.model import FusedSumCost, Work
from tasoc.ir.dag import Node
from tasoc.ir.graph import OPS_BY_NAME
from tasoc.ir.op_sets import ops_with
from tasoc.ir.traits import Contraction, DataMovement, Elementwise, Fusible


@functools.cache
def op_class(op: str) -> OpClass:
    """The `OpClass` of the `graph` op named `op`, read from its traits, so a new op
    is classed without a list here: a contraction with `strides` is a convolution,
    other contractions GEMMs; element-wise and other fusible maps (inference
    batchnorm) are `elementwise`; data movement is `data_movement`; everything else
    reads rows or windows (`reduction`), as do ops unknown to the dialect."""
    if op in ops_with(Contraction):
        windowed = "strides" in OPS_BY_NAME[op].get_irdl_definition().properties
        return "conv" if windowed else "gemm"
    if op in ops_with(DataMovement):
        return "data_movement"
    if op in ops_with(Elementwise) or op in ops_with(Fusible):
        return "elementwise"
    return "reduction"


def roofline_work(node: Node, fused: int, internal: bool, device: Device) -> Work:
    """(compute seconds, memory seconds) of `node` on `device` in this fusion variant,
    at the fraction of the roofline its class reaches there."""
    flops, moved = traffic(node, fused, internal)
    rate = device.flops_rate(node.sigs[0].dtype, node.op in ops_with(Contraction))
    efficiency = device.efficiency.of(op_class(node.op))
    return flops / (rate * efficiency), moved / (device.mem_bandwidth * efficiency)


def roofline(node: Node, fused: int, internal: bool, device: Device) -> float:
    """Seconds `node` alone takes on `device` in this fusion variant, launch excluded."""
    return max(roofline_work(node, fused, internal, device))


class AnalyticCost(FusedSumCost):
    """Roofline time on `device` (a preset from `tasoc.cost.devices` or your own).

    `fusion=False` prices every op as its own kernel (TASO's sum of standalone
    times); `fold_weights=False` charges ops on weights alone at every run.
    """

    def __init__(
        self,
        device: Device = CPU,
        memory_limit: float | None = None,
        fusion: bool = True,
        fold_weights: bool = True,
    ) -> None:
        super().__init__(device, memory_limit, fusion, fold_weights)

    def op_work(self, node: Node, fused: int, internal: bool) -> Work:
        return roofline_work(node, fused, internal, self.device)

    def describe(self) -> str:
        d = self.device
        return (
            f"analytic roofline on {d.name} ({d.peak_flops / 1e9:.0f} GFLOP/s, "
            f"{d.mem_bandwidth / 1e9:.0f} GB/s, {d.launch_overhead_s * 1e6:g} us/kernel), "
            f"{self._options()}"
        )
