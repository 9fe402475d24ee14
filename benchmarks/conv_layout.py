"""What XLA's CPU compile does with convolution weights that are parameters, and what a
layout rewrite XLA does not apply would gain: one chain of convolutions, NCHW/OIHW (the
layout tasoc's `conv2d` and ONNX use) against the same chain NHWC/HWIO.

    .venv/bin/python benchmarks/conv_layout.py [--channels 256] [--size 14] [--layers 6] \
        [--repeats 20] [--measure-seconds 10]

Each layer is `relu(conv(x, w) + b)` (3x3, same padding), as an imported ONNX Conv with
its bias and Relu is. The NHWC program gets its input and weights already transposed,
as a layout pass that folds weight transposes (weights are known) would give them. The
script checks both give the same result, counts the CPU compile's kernels
(`rewrite.cpu_hlo_counts`: the fusions that read only parameters are the weights'
relayouts, redone on every call), and times the two in interleaved pairs (median and
IQR of the per-pair ratios NCHW / NHWC, as `rewrite.py` does).
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import jax
import numpy as np
from rewrite import cpu_hlo_counts, interleaved_speedup, lengthened, timed

LAYOUTS = {"nchw": ("NCHW", "OIHW", "NCHW"), "nhwc": ("NHWC", "HWIO", "NHWC")}
"""`lax.conv_general_dilated`'s dimension numbers of each program."""


def chain(layout: str) -> Callable[..., Any]:
    """`relu(conv(x, w) + b)` over each (w, b) in turn, jitted, in `layout`."""
    numbers = LAYOUTS[layout]
    channel_axis = numbers[0].index("C")

    def program(x: jax.Array, *weights: jax.Array) -> jax.Array:
        for w, b in zip(weights[::2], weights[1::2], strict=True):
            shape = [1, 1, 1, 1]
            shape[channel_axis] = b.shape[0]
            y = jax.lax.conv_general_dilated(x, w, (1, 1), "SAME", dimension_numbers=numbers)
            x = jax.nn.relu(y + b.reshape(shape))
        return x

    return jax.jit(program)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--size", type=int, default=14)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=20, help="pairs at most")
    parser.add_argument("--measure-seconds", type=float, default=10.0)
    args = parser.parse_args()
    rng = np.random.default_rng(0)
    c, s = args.channels, args.size
    x = rng.standard_normal((1, c, s, s), np.float32)
    weights = []
    for _ in range(args.layers):
        weights += [rng.standard_normal((c, c, 3, 3), np.float32) * 0.02, np.zeros(c, np.float32)]
    nhwc_weights = [w.transpose(2, 3, 1, 0) if w.ndim == 4 else w for w in weights]
    inputs = {"nchw": (x, *weights), "nhwc": (x.transpose(0, 2, 3, 1), *nhwc_weights)}
    programs = {layout: chain(layout) for layout in LAYOUTS}
    out = {layout: np.asarray(programs[layout](*inputs[layout])) for layout in LAYOUTS}
    error = float(np.abs(out["nhwc"].transpose(0, 3, 1, 2) - out["nchw"]).max())
    print(f"- load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"- chain: {args.layers} x relu(conv3x3 + b), {c} channels, {s}x{s}, batch 1")
    print(f"- max abs difference NHWC vs NCHW: {error:.1e}")
    for layout in LAYOUTS:
        compiled = programs[layout].trace(*inputs[layout]).lower().compile().as_text()
        print(f"- {layout}: CPU HLO {cpu_hlo_counts(compiled)}")
    samplers = []
    for layout in LAYOUTS:
        arguments = [jax.device_put(a) for a in inputs[layout]]
        fn = programs[layout]
        samplers.append(lengthened(timed(lambda f=fn, a=arguments: f(*a).block_until_ready())))
    speedup = interleaved_speedup(*samplers, args.repeats, args.measure_seconds)
    print(f"- NHWC speedup (NCHW time / NHWC time, IQR, pairs): {speedup}")
    print(f"- load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
