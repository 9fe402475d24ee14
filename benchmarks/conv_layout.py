"""What XLA's CPU compile does with convolution weights that are parameters, and what a
layout rewrite XLA does not apply would gain: one chain of convolutions, NCHW/OIHW (the
layout tasoc's `conv2d` and ONNX use) against the same chain NHWC/HWIO.

    .venv/bin/python benchmarks/conv_layout.py [--channels 256] [--size 14] [--layers 6] \
        [--repeats 20] [--measure-seconds 10]
    .venv/bin/python benchmarks/conv_layout.py --models resnet50,inception_v3,squeezenet,vgg19 \
        [--xla-cache DIR] [--repeats 20] [--measure-seconds 10]

With `--models`, each model (a zoo name, or `onnx:NAME?image=112` as `rewrite.py`
takes it) against itself with its convolution weights laid out once
(`tasoc.passes.rewrite.weight_layout`), both run as `rewrite.py` runs them (weight-only
ops preprocessed, `jax.jit`, interleaved pairs): the convolutions laid out, the CPU
compile's fusions / kernels / fusions reading only parameters of each step, what the
analytic model and (with `--xla-cache`) `cost=xla` predict, the largest difference of
the outputs, and the measured speedup (median and IQR of the per-pair ratios).

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

LAYOUTS = {
    "nchw": ("NCHW", "OIHW", "NCHW"),
    "nchw-hwio": ("NCHW", "HWIO", "NCHW"),
    "nhwc": ("NHWC", "HWIO", "NHWC"),
}
"""`lax.conv_general_dilated`'s dimension numbers of each program: `nchw-hwio` keeps
the activations as tasoc's `conv2d` has them and lays out only the weights (HWIO, as
`conv2d{weight_layout="hwio"}` takes them), which separates the weights' relayout
from the activations'."""


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


def model_rows(names: list[str], args: argparse.Namespace) -> None:
    """One markdown row per model (module docstring, `--models`)."""
    import tempfile

    from rewrite import hlo_counts, jax_speedup, load_original

    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax import lower
    from tasoc.cost import CPU, AnalyticCost, XlaCost
    from tasoc.cost.measured import preprocessed
    from tasoc.ir.dag import from_module, to_module
    from tasoc.passes.rewrite.weight_layout import lay_out_conv_weights

    models = [AnalyticCost(CPU)] + ([XlaCost(args.xla_cache)] if args.xla_cache else [])
    print(f"- load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print()
    print("| model | convolutions laid out | CPU HLO fusions/kernels/param-only | "
          "predicted analytic | predicted xla | max abs err | jax.jit speedup (IQR, pairs) "
          "| load after |")  # fmt: skip
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in names:
        with tempfile.TemporaryDirectory() as folder:
            _, module = load_original(name, Path(folder))
        dag = from_module(module)
        laid_out, count = lay_out_conv_weights(dag)
        values = random_inputs(module, seed=0)
        steps = [preprocessed(graph, values) for graph in (dag, laid_out)]
        counts = [hlo_counts(to_module(step)) for step, _ in steps]
        outputs = [lower(to_module(step))(*step_values) for step, step_values in steps]
        error = max(
            float(np.abs(np.asarray(a, np.float64) - np.asarray(b, np.float64)).max())
            for a, b in zip(*outputs, strict=True)
        )
        predicted = [f"{m.cost(dag) / m.cost(laid_out):.3f}" for m in models] + ["-"]
        speedup = jax_speedup(module, to_module(laid_out), args.repeats, args.measure_seconds)
        hlo = " → ".join(f"{c['fusions']}/{c['kernels']}/{c['param_only']}" for c in counts)
        load = f"{os.getloadavg()[0]:.1f}"
        print(f"| `{name}` | {count} | {hlo} | {predicted[0]} | {predicted[1]} | "
              f"{error:.1e} | {speedup} | {load} |", flush=True)  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--channels", type=int, default=256)
    parser.add_argument("--size", type=int, default=14)
    parser.add_argument("--layers", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=20, help="pairs at most")
    parser.add_argument("--measure-seconds", type=float, default=10.0)
    parser.add_argument("--models", help="comma-separated models (module docstring)")
    parser.add_argument("--xla-cache", help="cost=xla's region cache directory")
    args = parser.parse_args()
    if args.models:
        model_rows(args.models.split(","), args)
        return
    rng = np.random.default_rng(0)
    c, s = args.channels, args.size
    x = rng.standard_normal((1, c, s, s), np.float32)
    weights = []
    for _ in range(args.layers):
        weights += [rng.standard_normal((c, c, 3, 3), np.float32) * 0.02, np.zeros(c, np.float32)]
    nhwc_weights = [w.transpose(2, 3, 1, 0) if w.ndim == 4 else w for w in weights]
    inputs = {
        "nchw": (x, *weights),
        "nchw-hwio": (x, *nhwc_weights),
        "nhwc": (x.transpose(0, 2, 3, 1), *nhwc_weights),
    }
    programs = {layout: chain(layout) for layout in LAYOUTS}
    out = {layout: np.asarray(programs[layout](*inputs[layout])) for layout in LAYOUTS}
    error = float(np.abs(out["nhwc"].transpose(0, 3, 1, 2) - out["nchw"]).max())
    error_hwio = float(np.abs(out["nchw-hwio"] - out["nchw"]).max())
    print(f"- load average before: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")
    print(f"- chain: {args.layers} x relu(conv3x3 + b), {c} channels, {s}x{s}, batch 1")
    print(f"- max abs difference NHWC vs NCHW: {error:.1e}, NCHW/HWIO vs NCHW: {error_hwio:.1e}")
    for layout in LAYOUTS:
        compiled = programs[layout].trace(*inputs[layout]).lower().compile().as_text()
        print(f"- {layout}: CPU HLO {cpu_hlo_counts(compiled)}")
    samplers = {}
    for layout in LAYOUTS:
        arguments = [jax.device_put(a) for a in inputs[layout]]
        fn = programs[layout]
        samplers[layout] = lengthened(timed(lambda f=fn, a=arguments: f(*a).block_until_ready()))
    for layout in ("nchw-hwio", "nhwc"):
        speedup = interleaved_speedup(
            samplers["nchw"], samplers[layout], args.repeats, args.measure_seconds
        )
        print(f"- {layout} speedup (NCHW/OIHW time / its time, IQR, pairs): {speedup}")
    print(f"- load average after: {' '.join(f'{v:.2f}' for v in os.getloadavg())}")


if __name__ == "__main__":
    main()
