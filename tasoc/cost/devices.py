"""Machine models for the analytic cost model: a roofline plus a per-kernel overhead.

A `Device` holds the handful of numbers a roofline needs. The presets are either
public datasheet figures (the GPUs) or measured on the machine this project is
developed on (the CPU); each preset's docstring says which and where from, so a
reader can judge how far to trust a prediction made with it.

A datasheet's peak is what no real kernel reaches, and how far below it a kernel
lands depends on what kind of op it is: in the measurements cited below a large FP32
GEMM reaches about three quarters of a GPU's FLOP peak, a convolution about 60 %, a
streaming element-wise kernel 90 % of the memory bandwidth, a reduction about 75 %.
So each GPU preset carries an `Efficiency`, the achieved fraction of its roofline per
`OpClass`, taken from published measurements that its docstring cites (DESIGN.md §7:
never 100 % of a datasheet's peak).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields
from typing import Literal, get_args

from tasoc.ir.shapes import DType

_HALF = (DType.F16, DType.BF16)

OpClass = Literal["gemm", "conv", "elementwise", "reduction", "data_movement"]
"""What kind of kernel an op runs, for its achieved fraction of the roofline
(`tasoc.cost.analytic.op_class` says which ops are which)."""
OP_CLASSES: tuple[OpClass, ...] = get_args(OpClass)


@dataclass(frozen=True)
class Efficiency:
    """The fraction of the roofline, in (0, 1], that kernels of each `OpClass` reach
    on a device: an op of that class takes max(FLOPs / peak, bytes / bandwidth)
    divided by its fraction. One number per class, not one per bound, because
    published measurements give one achieved rate per kernel (TFLOP/s for a GEMM,
    GB/s for a copy), and it is the bound the class is limited by that it scales.

    `gemm`: matrix products (`matmul`); `conv`: convolutions and their gradients;
    `elementwise`: element-wise maps and what fuses like them (inference batchnorm);
    `reduction`: the other ops that read rows or windows (reductions, softmax,
    normalizations, pooling, losses, their gradients, optimizer updates);
    `data_movement`: copies, transposes, concatenations, gathers.
    """

    gemm: float = 1.0
    conv: float = 1.0
    elementwise: float = 1.0
    reduction: float = 1.0
    data_movement: float = 1.0

    def __post_init__(self) -> None:
        for field in fields(self):
            value = getattr(self, field.name)
            ok = isinstance(value, int | float) and not isinstance(value, bool)
            if not (ok and math.isfinite(value) and 0 < value <= 1):
                raise ValueError(
                    f"efficiency.{field.name} must be a fraction in (0, 1], got {value!r}"
                )

    def of(self, op_class: OpClass) -> float:
        """The fraction for `op_class`."""
        return getattr(self, op_class)

    def as_dict(self) -> dict[str, float]:
        """The fractions by class name, as a machine file writes them."""
        return {name: self.of(name) for name in OP_CLASSES}


CACHE_LINE_FLOATS = 16
"""float32 elements in a 64-byte cache line: a CPU's (and an unspecified device's)
memory-access granularity."""

WARP_FLOATS = 32
"""float32 elements a GPU warp of 32 threads loads in one coalesced access (Jia thesis
Table 4.2's WS, 32 on NVIDIA GPUs)."""

PEAK = Efficiency()
"""Every class at 100 % of the roofline: for a device whose numbers are already
achieved rates (the measured `CPU`), or for comparing with the plain roofline."""


@dataclass(frozen=True)
class Device:
    """One accelerator as the roofline sees it.

    `peak_flops` is the float32 rate (FLOP/s) of ordinary (non-tensor-core) units,
    since the JAX lowering asks for `Precision.HIGHEST` on float32 contractions;
    `peak_flops_half`, when known, is the dense f16/bf16 rate of matmul/convolution
    units (tensor cores), which half-precision contractions reach. `mem_bandwidth`
    is main-memory bandwidth (bytes/s), `launch_overhead_s` what one more kernel
    costs inside a compiled program, and `memory_bytes` the device's memory.
    `efficiency` is the fraction of that roofline each class of kernel reaches.
    `access_granularity` is how many float32 elements one memory access moves (ROC's
    cost model counts accesses in these units, Jia thesis Table 4.2): a GPU warp's
    coalesced load of 32 threads, a CPU's 64-byte cache line of 16 floats.
    `conv_weight_relayout` says that XLA on this device relays out a convolution's
    OIHW weight (to HWIO, a kernel of its own) on every call where the weight is an
    argument of the program (`tasoc.cost.fusion.relaid_out_weights`): XLA:CPU does;
    cuDNN reads OIHW as it is.
    """

    name: str
    peak_flops: float
    mem_bandwidth: float
    launch_overhead_s: float
    memory_bytes: float
    peak_flops_half: float | None = None
    efficiency: Efficiency = PEAK
    access_granularity: int = CACHE_LINE_FLOATS
    conv_weight_relayout: bool = False

    def __post_init__(self) -> None:
        for field in ("peak_flops", "mem_bandwidth", "memory_bytes"):
            if not getattr(self, field) > 0:
                raise ValueError(f"device {self.name}: {field} must be positive")
        if self.launch_overhead_s < 0:
            raise ValueError(f"device {self.name}: launch_overhead_s must be non-negative")
        granularity = self.access_granularity
        if isinstance(granularity, bool) or not isinstance(granularity, int) or granularity < 1:
            raise ValueError(
                f"device {self.name}: access_granularity must be an integer >= 1, "
                f"got {granularity!r}"
            )

    def flops_rate(self, dtype: DType, contraction: bool) -> float:
        """FLOP/s for an op of this element type; only contractions use tensor cores."""
        if contraction and dtype in _HALF and self.peak_flops_half is not None:
            return self.peak_flops_half
        return self.peak_flops


_REDUCTION = 62.671 / 86.4
"""Harris, "Optimizing Parallel Reduction in CUDA" (NVIDIA CUDA SDK whitepaper,
2007): the best of its seven sum-reduction kernels reads 62.671 GB/s of the G80's
86.4 GB/s, 0.73. The only published reduction-versus-peak figure found for these
presets; it is taken for every GPU, so the reduction class is the least certain."""

_VOLTA_ELEMENTWISE = 810.02 / 900
_VOLTA_COPY = 775.57 / 900
"""GPUInspector.jl's V100 SXM2 page (pc2/GPUInspector.jl, docs/src/devices/
v100_sxm2.md, measured on Bielefeld University's cluster, CUDA 11.6): a SAXPY
streams 754.39 GiB/s = 810 GB/s (0.90 of the 900 GB/s datasheet) and a device copy
722.31 GiB/s = 775.6 GB/s (0.86)."""

_PASCAL_GEMM = 8.21 / 10.6
"""Baidu DeepBench's training GEMM results (README, "Training Results"): the Tesla
P100 runs M=5124, N=9124, K=2560 (T, N) in FP32 at 8.21 TFLOP/s, 0.77 of the P100
SXM2's 10.6 TFLOP/s (0.88 if DeepBench's card was the 9.3 TFLOP/s PCIe one; the
lower fraction is taken)."""

_PASCAL_CONV = 0.59
"""Baidu DeepBench's FP32 training convolutions on Pascal GPUs (README at commit
106e5236, "Convolution Results", forward TFLOP/s over each card's boost peak):
TitanXp 6.74/12.15 = 0.55 and 10.68/12.15 = 0.88, Tesla P100 4.26/10.6 = 0.40,
GTX 1080 Ti 7.68/11.34 = 0.68, TitanX Pascal 6.45/10.97 = 0.59; the median, 0.59."""

_VOLTA_CONV = (7.75 / 15.7 + 10.12 / 15.7) / 2
"""Baidu DeepBench's FP32 training convolutions on the Tesla V100 (README at commit
a5a2b60f, "Convolution Results", forward TFLOP/s over 15.7 TFLOP/s): 700x161x1x32
5x20 0.49, 54x54x64x8 3x3 0.64, 224x224x3x16 3x3 0.09, 28x28x192x16 5x5 1.08
(above 1: cuDNN's FFT/Winograd algorithms do fewer FLOPs than the direct count);
the median of the four, 0.57."""

GPU_EFFICIENCY_PASCAL = Efficiency(
    gemm=_PASCAL_GEMM,
    conv=_PASCAL_CONV,
    elementwise=_VOLTA_ELEMENTWISE,
    reduction=_REDUCTION,
    data_movement=_VOLTA_COPY,
)
"""Pascal's GEMM and convolution fractions (DeepBench), with HBM2's streaming and
copy fractions measured on the V100 (no P100 bandwidth measurement was found)."""

GPU_EFFICIENCY_VOLTA = Efficiency(
    gemm=_PASCAL_GEMM,
    conv=_VOLTA_CONV,
    elementwise=_VOLTA_ELEMENTWISE,
    reduction=_REDUCTION,
    data_movement=_VOLTA_COPY,
)
"""The V100's measured convolution and bandwidth fractions. DeepBench's V100 GEMMs
are mixed precision only (27.43 TFLOP/s for M=5124, N=9124, K=2560: 0.22 of the
125 TFLOP/s tensor-core peak), so the FP32 GEMM fraction is Pascal's: Volta's SM
has the same 64 FP32 lanes. One fraction per class serves both precisions, so a
half-precision GEMM is priced optimistically (0.77 of the tensor-core peak where
DeepBench measured 0.22 for that shape)."""

CPU = Device(
    name="cpu",
    peak_flops=150e9,
    mem_bandwidth=25e9,
    launch_overhead_s=1e-6,
    memory_bytes=24e9,
    conv_weight_relayout=True,
)
"""The 2-core AMD EPYC (Zen 5, AVX-512, 2.6 GHz) VM tasoc is developed on, measured
with JAX 0.12 on XLA:CPU: float32 `Precision.HIGHEST` matmul 1024^3 reaches 172
GFLOP/s and a 3x3 64-channel 56x56 convolution 121 GFLOP/s (the theoretical peak is
2 cores x 64 FLOP/cycle x 2.6 GHz = 333 GFLOP/s); a sum over 64 MiB reads 24 GB/s;
a chain of 256 tiny dot+tanh kernels in one jitted program adds ~0.75 us per
kernel; the VM has 24 GB of memory. XLA:CPU relays out every OIHW convolution
weight argument on every call (resnet50: 53 such kernels, half the step's time at
batch 1; docs/benchmarks.md, issue 34). Other CPUs differ: use `MeasuredCost` there."""

H100 = Device(
    name="h100",
    peak_flops=67e12,
    mem_bandwidth=3.35e12,
    launch_overhead_s=2e-6,
    memory_bytes=80e9,
    peak_flops_half=989.4e12,
    efficiency=GPU_EFFICIENCY_VOLTA,
    access_granularity=WARP_FLOATS,
)
"""NVIDIA H100 SXM5 80 GB, from NVIDIA's H100 datasheet: 67 TFLOP/s FP32, 989.4
TFLOP/s dense FP16/BF16 tensor core (1,979 with sparsity), 3.35 TB/s HBM3. The
2 us per kernel is an assumption (CUDA launch latency is a few microseconds, and
XLA's command buffers hide part of it), not a measurement. Efficiency: no
published H100 per-class measurement was found; the V100's fractions
(`GPU_EFFICIENCY_VOLTA`) are assumed."""

H200 = Device(
    name="h200",
    peak_flops=67e12,
    mem_bandwidth=4.8e12,
    launch_overhead_s=2e-6,
    memory_bytes=141e9,
    peak_flops_half=989.4e12,
    efficiency=GPU_EFFICIENCY_VOLTA,
    access_granularity=WARP_FLOATS,
)
"""NVIDIA H200 SXM 141 GB, from NVIDIA's H200 datasheet: the H100's compute (67
TFLOP/s FP32, 989.4 TFLOP/s dense FP16/BF16) with 141 GB of HBM3e at 4.8 TB/s.
Launch overhead and efficiency as for `H100` (assumed)."""

V100 = Device(
    name="v100",
    peak_flops=15.7e12,
    mem_bandwidth=900e9,
    launch_overhead_s=2e-6,
    memory_bytes=16e9,
    peak_flops_half=125e12,
    efficiency=GPU_EFFICIENCY_VOLTA,
    access_granularity=WARP_FLOATS,
)
"""NVIDIA Tesla V100 SXM2 16 GB, from NVIDIA's V100 datasheet: 15.7 TFLOP/s FP32,
125 TFLOP/s FP16 tensor core, 900 GB/s HBM2, 16 GB (the GPU of TensorOpt's cluster
and of SwapAdvisor's p3.2xlarge). Launch overhead as for `H100` (assumed).
Efficiency `GPU_EFFICIENCY_VOLTA`: convolutions 0.57 (DeepBench, V100 FP32), element-wise
0.90 and copies 0.86 of 900 GB/s (GPUInspector.jl, V100 SXM2), FP32 GEMM 0.77
(DeepBench, P100), reductions 0.73 (Harris, G80)."""

P100 = Device(
    name="p100",
    peak_flops=10.6e12,
    mem_bandwidth=732e9,
    launch_overhead_s=2e-6,
    memory_bytes=16e9,
    peak_flops_half=21.2e12,
    efficiency=GPU_EFFICIENCY_PASCAL,
    access_granularity=WARP_FLOATS,
)
"""NVIDIA Tesla P100 SXM2 16 GB, from NVIDIA's P100 datasheet: 10.6 TFLOP/s FP32,
21.2 TFLOP/s FP16 (packed half2 on the ordinary units: Pascal has no tensor cores),
732 GB/s HBM2, 16 GB (the GPU of FlexFlow's first cluster, Jia thesis §3.7.1).
Launch overhead as for `H100` (assumed). Efficiency `GPU_EFFICIENCY_PASCAL`: GEMM
0.77 and convolutions 0.59 (DeepBench, P100 and Pascal GPUs, FP32), element-wise
0.90 and copies 0.86 (the V100's HBM2 measurement), reductions 0.73 (Harris)."""

K80 = Device(
    name="k80",
    peak_flops=4.365e12,
    mem_bandwidth=240e9,
    launch_overhead_s=2e-6,
    memory_bytes=12e9,
    efficiency=GPU_EFFICIENCY_PASCAL,
    access_granularity=WARP_FLOATS,
)
"""One of the two GK210 GPUs of an NVIDIA Tesla K80 board, from NVIDIA's K80
datasheet halved (the board: 8.73 TFLOP/s FP32 with GPU Boost, 480 GB/s GDDR5,
24 GB): 4.37 TFLOP/s, 240 GB/s, 12 GB. FlexFlow's second cluster counts these GPUs
(64 on 16 nodes; "adjacent GPUs are connected by a separate PCI-e switch" is the
board's own switch, Jia thesis §3.7.1). Kepler has no faster half precision.
Launch overhead as for `H100` (assumed). Efficiency: no published per-class
measurement of Kepler was found in the sources searched; Pascal's fractions
(`GPU_EFFICIENCY_PASCAL`) are assumed, which likely flatters the K80's GDDR5."""

DEVICES: dict[str, Device] = {device.name: device for device in (CPU, H100, H200, V100, P100, K80)}
"""The presets by name."""
