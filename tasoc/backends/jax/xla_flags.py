"""XLA options tasoc's JAX runs need for correct results, set before JAX starts XLA.

XLA reads `XLA_FLAGS` once, when its first backend starts; this module adds to it at
import, which the package's `__init__` does before anything of tasoc can start JAX. A
flag the user set themselves is left as they set it.

`--xla_cpu_experimental_ynn_fusion_type`: jaxlib 0.12's CPU compiler hands some fused
reductions (a convolution, its bias and ReLU, and the average pool after it, all in
one) to YNNPACK, whose result is NaN in about 2 % of runs of a process whose heap held
NaNs before: 3 of 150 runs of ONNX's light SqueezeNet, 4 of 200 with only that fusion
kind on, none of 150 with it off, none of 200 with only YNNPACK's individual
convolutions on (docs/decisions.md). The reference interpreter is the ground truth, so
the fused reductions stay off; YNNPACK still runs each convolution and dot alone.
"""

from __future__ import annotations

import os

FLAGS_ENV = "XLA_FLAGS"

CORRECTNESS_FLAGS = {
    "xla_cpu_experimental_ynn_fusion_type": "individual_dot,individual_convolution",
}
"""Flag name -> the value tasoc runs XLA with (module docstring)."""


def with_correctness_flags(flags: str) -> str:
    """`flags` (an `XLA_FLAGS` value) with each of `CORRECTNESS_FLAGS` it does not set."""
    added = [f"--{name}={value}" for name, value in CORRECTNESS_FLAGS.items() if name not in flags]
    return " ".join([flags, *added]).strip()


def set_correctness_flags() -> None:
    """Add `CORRECTNESS_FLAGS` to this process's `XLA_FLAGS` (and its children's)."""
    os.environ[FLAGS_ENV] = with_correctness_flags(os.environ.get(FLAGS_ENV, ""))
