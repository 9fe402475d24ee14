"""Every zoo model at the shapes of its paper: op count, parameters, and whether JAX
and onnxruntime compute the same outputs.

    .venv/bin/python benchmarks/zoo.py [--models a,b] [--memory-limit 8] \
        [--timeout-per-model 600]

For each registered model this builds the default spec (the paper's shapes) and always
reports its op and parameter counts: building is cheap even for the 17 GB RNN. It then
runs the program on the same random arguments (`random_inputs(module, seed=0)`) under
the JAX lowering and, exported with those same weights, under onnxruntime, and compares
the outputs with `compare`'s default tolerances (JAX's outputs as the expected ones).

Running needs memory this machine may not have, so each run is first estimated:

    weight bytes x WEIGHT_COPIES + bytes of every op result

Weights exist up to four times at once (the NumPy arrays, the ONNX initializers, the
copy onnxruntime's session makes, the copy JAX puts on its device); the sum of all
op results bounds the activations either backend holds live (they run one after the
other). A spec whose estimate exceeds `--memory-limit` is reported as skipped, and the
same network at batch 1 (same layer sizes) is run instead when that fits, labelled
`batch=1`. Each run happens in a child process, so a run past `--timeout-per-model`
is stopped and reported, a crash (out of memory included) is a row rather than the
end of the benchmark, and every model starts with the memory of the last one freed.

A model over protobuf's 2 GiB reaches onnxruntime through `inference_session`, which
saves it with external data to a temporary directory first (checked there by path).
Results are recorded in docs/models.md; this script only measures.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import platform
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from xdsl.dialects.builtin import ModuleOp

from tasoc.backends import numpy_dtype
from tasoc.ir import graph as G
from tasoc.ir.program import arg_infos, entry_function
from tasoc.models.registry import ZooModel, build_model, list_models, model_stats

WEIGHT_COPIES = 4
"""How many copies of the weights exist at once during a run (module docstring)."""

GB = 1e9


def estimated_bytes(module: ModuleOp) -> int:
    """Memory a JAX-then-onnxruntime run of `module` needs, by the rule in the docstring."""
    function = entry_function(module)
    weights = sum(
        info.sig.size * numpy_dtype(info.sig.dtype).itemsize
        for info in arg_infos(function)
        if info.is_param
    )
    results = sum(
        sig.size * numpy_dtype(sig.dtype).itemsize
        for op in function.body.block.ops
        for sig in (G.sig_of(r.type) for r in op.results)
    )
    return WEIGHT_COPIES * weights + results


@dataclass
class Agreement:
    """What a child process reports for one run (JSON on its last stdout line)."""

    max_abs_error: float
    max_rel_error: float
    ok: bool
    summary: str
    jax_s: float
    ort_s: float


def run_both(spec: str) -> Agreement:
    """Run `spec` under JAX, then onnxruntime, on the same arguments; compare outputs.

    Imports happen here, in the child, so the parent never holds a JAX runtime.
    """
    from tasoc.backends.arguments import random_inputs
    from tasoc.backends.jax.lowering import lower
    from tasoc.backends.onnx import export_onnx
    from tasoc.backends.onnx.runtime import inference_session
    from tasoc.verify.equivalence import compare

    module = build_model(spec)
    infos = arg_infos(entry_function(module))
    arguments = random_inputs(module, seed=0)

    start = time.perf_counter()
    expected = lower(module)(*arguments)
    jax_s = time.perf_counter() - start

    start = time.perf_counter()
    weights = {i.name: a for i, a in zip(infos, arguments, strict=True) if i.is_param}
    model = export_onnx(module, param_values=weights)
    # The exporter writes activation arguments as graph inputs in argument order.
    input_names = [value.name for value in model.graph.input]
    del weights
    session = inference_session(model)
    del model
    activations = [a for i, a in zip(infos, arguments, strict=True) if not i.is_param]
    del arguments
    actual = session.run(None, dict(zip(input_names, activations, strict=True)))
    ort_s = time.perf_counter() - start

    report = compare(expected, actual)
    return Agreement(
        max_abs_error=max((o.max_abs_error for o in report.outputs), default=0.0),
        max_rel_error=max((o.max_rel_error for o in report.outputs), default=0.0),
        ok=report.ok,
        summary=report.summary(),
        jax_s=jax_s,
        ort_s=ort_s,
    )


@dataclass
class Row:
    model: str
    spec: str
    ops: int
    params: int
    estimate: float
    outcome: str
    """`ran`, or why the spec was not run or did not finish."""
    agreement: Agreement | None = None
    wall_s: float = 0.0


def run_in_child(spec: str, timeout: float) -> tuple[str, Agreement | None, float]:
    """Run `spec` in a fresh interpreter; (outcome, agreement, wall seconds)."""
    start = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", spec],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return f"timed out after {timeout:g} s", None, time.perf_counter() - start
    wall = time.perf_counter() - start
    if done.returncode != 0:
        lines = (done.stderr or "").strip().splitlines()
        why = lines[-1] if lines else f"exit status {done.returncode}"
        if done.returncode < 0:
            why = f"killed by signal {-done.returncode} (out of memory?)"
        return f"failed: {why}", None, wall
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return "ran", Agreement(**result), wall


def rows_for(model: ZooModel, limit: float, timeout: float) -> list[Row]:
    """The default spec's row, plus a batch=1 row when the default does not fit."""
    rows = []
    candidates = [model.spec()]
    if model.defaults.get("batch", 1) != 1:
        candidates.append(model.spec({"batch": 1}))
    for spec in candidates:
        module = build_model(spec)
        stats = model_stats(module)
        need = estimated_bytes(module) / GB
        row = Row(model.name, spec, stats.ops, stats.params, need, "")
        rows.append(row)
        if need > limit:
            row.outcome = f"skipped: needs ~{need:.1f} GB > {limit:g} GB"
            continue
        print(f"running {spec} (~{need:.2f} GB) ...", file=sys.stderr, flush=True)
        row.outcome, row.agreement, row.wall_s = run_in_child(spec, timeout)
        print(f"  {row.outcome} in {row.wall_s:.1f} s", file=sys.stderr, flush=True)
        break
    return rows


def markdown(rows: list[Row]) -> str:
    lines = [
        "| model | spec run | ops | params | est. memory | max abs err | max rel err "
        "| agree? | JAX s | ORT s | total s |",
        "| --- | --- | ---: | ---: | ---: | ---: | ---: | --- | ---: | ---: | ---: |",
    ]
    for row in rows:
        head = f"| {row.model} | `{row.spec}` | {row.ops} | {row.params:,} | {row.estimate:.2f} GB"
        a = row.agreement
        if a is None:
            wall = f"{row.wall_s:.1f}" if row.wall_s else "—"
            lines.append(f"{head} | — | — | {row.outcome} | — | — | {wall} |")
        else:
            verdict = "yes" if a.ok else "**NO**"
            lines.append(
                f"{head} | {a.max_abs_error:.2e} | {a.max_rel_error:.2e} | {verdict} "
                f"| {a.jax_s:.1f} | {a.ort_s:.1f} | {row.wall_s:.1f} |"
            )
    return "\n".join(lines)


def environment() -> str:
    versions = ", ".join(
        f"{name} {version(name)}" for name in ("jax", "jaxlib", "onnxruntime", "onnx", "xdsl")
    )
    return (
        f"{datetime.date.today()}, {platform.machine()}, {os.cpu_count()} CPUs, "
        f"Python {platform.python_version()}, {versions}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help="comma-separated model names (default: all)")
    parser.add_argument("--memory-limit", type=float, default=8.0, help="GB (default 8)")
    parser.add_argument("--timeout-per-model", type=float, default=600.0, help="seconds")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(asdict(run_both(args.child))))
        return
    models = list_models()
    if args.models:
        wanted = set(args.models.split(","))
        unknown = wanted - {m.name for m in models}
        if unknown:
            parser.error(f"unknown models: {', '.join(sorted(unknown))}")
        models = [m for m in models if m.name in wanted]
    rows = [row for m in models for row in rows_for(m, args.memory_limit, args.timeout_per_model)]
    print(environment())
    print(markdown(rows))
    for row in rows:
        if row.agreement is not None and not row.agreement.ok:
            print(f"\n{row.spec}: {row.agreement.summary}")


if __name__ == "__main__":
    main()
