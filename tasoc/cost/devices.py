"""Machine models for the analytic cost model: a roofline plus a per-kernel overhead.

A `Device` holds the handful of numbers a roofline needs. The presets are either
public datasheet figures (the GPUs) or measured on the machine this project is
developed on (the CPU); each preset's docstring says which and where from, so a
reader can judge how far to trust a prediction made with it.
"""

from __future__ import annotations

from dataclasses import dataclass

from tasoc.ir.shapes import DType

_HALF = (DType.F16, DType.BF16)


@dataclass(frozen=True)
class Device:
    """One accelerator as the roofline sees it.

    `peak_flops` is the float32 rate (FLOP/s) of ordinary (non-tensor-core) units,
    since the JAX lowering asks for `Precision.HIGHEST` on float32 contractions;
    `peak_flops_half`, when known, is the dense f16/bf16 rate of matmul/convolution
    units (tensor cores), which half-precision contractions reach. `mem_bandwidth`
    is main-memory bandwidth (bytes/s), `launch_overhead_s` what one more kernel
    costs inside a compiled program, and `memory_bytes` the device's memory.
    """

    name: str
    peak_flops: float
    mem_bandwidth: float
    launch_overhead_s: float
    memory_bytes: float
    peak_flops_half: float | None = None

    def __post_init__(self) -> None:
        for field in ("peak_flops", "mem_bandwidth", "memory_bytes"):
            if not getattr(self, field) > 0:
                raise ValueError(f"device {self.name}: {field} must be positive")
        if self.launch_overhead_s < 0:
            raise ValueError(f"device {self.name}: launch_overhead_s must be non-negative")

    def flops_rate(self, dtype: DType, contraction: bool) -> float:
        """FLOP/s for an op of this element type; only contractions use tensor cores."""
        if contraction and dtype in _HALF and self.peak_flops_half is not None:
            return self.peak_flops_half
        return self.peak_flops


CPU = Device(
    name="cpu",
    peak_flops=150e9,
    mem_bandwidth=25e9,
    launch_overhead_s=1e-6,
    memory_bytes=24e9,
)
"""The 2-core AMD EPYC (Zen 5, AVX-512, 2.6 GHz) VM tasoc is developed on, measured
with JAX 0.12 on XLA:CPU: float32 `Precision.HIGHEST` matmul 1024^3 reaches 172
GFLOP/s and a 3x3 64-channel 56x56 convolution 121 GFLOP/s (the theoretical peak is
2 cores x 64 FLOP/cycle x 2.6 GHz = 333 GFLOP/s); a sum over 64 MiB reads 24 GB/s;
a chain of 256 tiny dot+tanh kernels in one jitted program adds ~0.75 us per
kernel; the VM has 24 GB of memory. Other CPUs differ: use `MeasuredCost` there."""

H100 = Device(
    name="h100",
    peak_flops=67e12,
    mem_bandwidth=3.35e12,
    launch_overhead_s=2e-6,
    memory_bytes=80e9,
    peak_flops_half=989.4e12,
)
"""NVIDIA H100 SXM5 80 GB, from NVIDIA's H100 datasheet: 67 TFLOP/s FP32, 989.4
TFLOP/s dense FP16/BF16 tensor core (1,979 with sparsity), 3.35 TB/s HBM3. The
2 us per kernel is an assumption (CUDA launch latency is a few microseconds, and
XLA's command buffers hide part of it), not a measurement."""

H200 = Device(
    name="h200",
    peak_flops=67e12,
    mem_bandwidth=4.8e12,
    launch_overhead_s=2e-6,
    memory_bytes=141e9,
    peak_flops_half=989.4e12,
)
"""NVIDIA H200 SXM 141 GB, from NVIDIA's H200 datasheet: the H100's compute (67
TFLOP/s FP32, 989.4 TFLOP/s dense FP16/BF16) with 141 GB of HBM3e at 4.8 TB/s.
Launch overhead as for `H100` (assumed)."""

V100 = Device(
    name="v100",
    peak_flops=15.7e12,
    mem_bandwidth=900e9,
    launch_overhead_s=2e-6,
    memory_bytes=16e9,
    peak_flops_half=125e12,
)
"""NVIDIA Tesla V100 SXM2 16 GB, from NVIDIA's V100 datasheet: 15.7 TFLOP/s FP32,
125 TFLOP/s FP16 tensor core, 900 GB/s HBM2, 16 GB (the GPU of TensorOpt's cluster
and of SwapAdvisor's p3.2xlarge). Launch overhead as for `H100` (assumed)."""

P100 = Device(
    name="p100",
    peak_flops=10.6e12,
    mem_bandwidth=732e9,
    launch_overhead_s=2e-6,
    memory_bytes=16e9,
    peak_flops_half=21.2e12,
)
"""NVIDIA Tesla P100 SXM2 16 GB, from NVIDIA's P100 datasheet: 10.6 TFLOP/s FP32,
21.2 TFLOP/s FP16 (packed half2 on the ordinary units: Pascal has no tensor cores),
732 GB/s HBM2, 16 GB (the GPU of FlexFlow's first cluster, Jia thesis §3.7.1).
Launch overhead as for `H100` (assumed)."""

K80 = Device(
    name="k80",
    peak_flops=4.365e12,
    mem_bandwidth=240e9,
    launch_overhead_s=2e-6,
    memory_bytes=12e9,
)
"""One of the two GK210 GPUs of an NVIDIA Tesla K80 board, from NVIDIA's K80
datasheet halved (the board: 8.73 TFLOP/s FP32 with GPU Boost, 480 GB/s GDDR5,
24 GB): 4.37 TFLOP/s, 240 GB/s, 12 GB. FlexFlow's second cluster counts these GPUs
(64 on 16 nodes; "adjacent GPUs are connected by a separate PCI-e switch" is the
board's own switch, Jia thesis §3.7.1). Kepler has no faster half precision.
Launch overhead as for `H100` (assumed)."""

DEVICES: dict[str, Device] = {device.name: device for device in (CPU, H100, H200, V100, P100, K80)}
"""The presets by name."""
