"""`equality-rewrite` on TASO's and Tensat's evaluation models: what the search predicts,
and what JAX and onnxruntime then measure.

    .venv/bin/python benchmarks/rewrite.py [--models a,b] [--searches backtrack,egraph] \
        [--timeout 30] [--cost analytic] [--rules LIB] [--alpha A] [--budget N] [--retime N] \
        [--repeats 20] [--measure-seconds 20] [--memory-limit 8] [--timeout-per-model 600] \
        [--small] [--markdown]
    .venv/bin/python benchmarks/rewrite.py --suite [--shrink] [--models a,onnx:b] [--runs 3] ...

`--suite` (issue 34) runs the whole suite with the e-graph search: the eight zoo models
below and the eleven exported ONNX models of `tasoc.models.exported` (`onnx:NAME`,
written as `torch.onnx.export` writes them and imported as a user's file is), and adds
per row the rules that fired, the compiled HLO's fusion and kernel counts before and
after, and a summary of the issue's goals (geometric means, the slowest row, nasrnn).
`--runs N` runs each model N times, each run searching and measuring anew (the issue
asks for each verdict stable in three runs); the summary takes a model's median run.
A row where the pass returned its input unchanged says `kept input` and is not timed
(`KEPT_INPUT`: both sides would run one program, so the ratio would be noise); the
summary counts it as exactly 1.000 and says how many runs it counted so. Likewise,
where onnxruntime optimizes the two programs into the same graph (`same_under_ort`:
the weight layout, which it undoes at session creation), the row's onnxruntime cell
says `same program` and is not timed there, and the summary counts it 1.000.
`--shrink` runs the ONNX models at `SHRUNK` sizes (2 cores: a full-size BERT or GPT-2
compiles and runs for minutes); the table is then titled as such. A model is named
`onnx:NAME?k=v&...` with the builder's size parameters.

For each model (`MODELS`, built at its paper's shapes) and each search, a child process
runs the pass as `tasoc opt -p 'equality-rewrite{search=S timeout=T cost=C ...}'` does,
through the driver's own `TasocOptMain` (so options are parsed and checked as on the
command line, the result is verified, and the pass writes its section of the driver's
`RunReport`). The row then shows:

- ops before and after, and the search's wall time and why it stopped;
- the *predicted* speedup, `cost_before / cost_after` of the pass's cost model
  (`analytic` is a simulated roofline, not a measurement) for the graph the pass
  returned: where the pass re-timed its candidates (`retime`, on by default when the
  cost model prices this machine), the notes say which one it kept and what the
  search's own best predicted;
- the optimized program's largest absolute output difference from the original under
  JAX on the same random inputs (`verify.equivalence.equivalent`); a difference beyond
  its tolerances marks the row **NO** and makes the exit status 1;
- the *measured* speedup under `jax.jit` and under onnxruntime (both programs exported
  with the same weights, fed the same inputs). The two programs run in alternating
  pairs in one process (original first in even pairs, optimized first in odd ones, so
  neither always runs warm), and the figure is the median of the per-pair ratios
  original / optimized with their interquartile range: drift in the machine's speed
  between pairs cancels out of each ratio. A sample repeats a fast program until it
  takes `SAMPLE_S`; onnxruntime's idle threads do not spin (`ort_session`). Weight-only
  ops are computed once beforehand on both sides, as the cost model assumes: JAX by
  `tasoc.cost.measured`'s weight folding, onnxruntime by its constant folding of
  initializers. Pairs stop at `--repeats`, or once a backend has measured for
  `--measure-seconds` (after at least `MIN_PAIRS`).

Each (model, search) runs in its own child with `--timeout-per-model`, so a crash, an
out-of-memory kill or a timeout is a row (with what the child finished before it), and
a search the pass does not know is a row `error: ...`. A run is first estimated at
`RUN_COPIES` times `benchmarks/zoo.py`'s estimate (zoo models only) (two programs, each through both
backends); a model over `--memory-limit` runs at batch 1 instead when it has a larger
batch (the model column shows the spec that ran), or is skipped. `--small` runs each
model's small variant instead (a smoke test). Results are recorded in docs/benchmarks.md;
this script only measures.

The HLO columns (`--suite`): XLA compiles for the machine it runs on, and this jaxlib
has only a CPU backend, so fusions are counted in the CPU compile (`fusion`
instructions, and kernels: the entry computation's instructions other than
parameters, constants, tuples and bitcasts; and param-only: the fusions that read only
parameters, i.e. work on the weights that XLA redoes on every call, mostly convolution
weights relaid out). For CUDA the program is cross-lowered
(`lower(lowering_platforms=("cuda",))`), which gives the StableHLO a GPU compile
would start from, not its fusions (`Lowered.compile()` of that lowering compiles for
the CPU here): its op count and its dots and convolutions are shown.
"""

from __future__ import annotations

import argparse
import datetime
import json
import math
import os
import platform
import re
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from importlib.metadata import version
from pathlib import Path
from typing import TYPE_CHECKING, Any

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from paired import PairedRatio
from xdsl.dialects.builtin import ModuleOp
from zoo import GB, estimated_bytes

from tasoc.models.registry import SCHEME, ZooModel, build_model, get_model, model_stats

if TYPE_CHECKING:
    import onnx
    import onnxruntime

MODELS = (
    "bert",
    "nasrnn",
    "resnext50",
    "nasnet_a",
    "resnet50",
    "inception_v3",
    "squeezenet",
    "vgg19",
)
"""The models of TASO's (Jia's thesis §2.9) and Tensat's evaluations, by zoo name."""

ONNX_SCHEME = "onnx:"
"""Prefix of an exported ONNX model's name (`tasoc.models.exported.EXPORTED_MODELS`)."""

ONNX_MODELS = (
    "alexnet",
    "zfnet",
    "vgg16",
    "resnet18",
    "resnet50",
    "squeezenet1_1",
    "googlenet",
    "densenet121",
    "shufflenet_v2",
    "bert",
    "gpt2",
)
"""The eleven exported models docs/benchmarks.md checks at full size ("Full-size
exported models")."""

SHRUNK: dict[str, dict[str, int]] = {
    **{name: {"image": 112} for name in ONNX_MODELS if name not in ("bert", "gpt2")},
    "vgg16": {"image": 112, "pool": 3},
    "bert": {"layers": 2},
    "gpt2": {"layers": 2},
}
"""`--shrink`'s sizes: half the images' side (VGG's adaptive pooling then to 3x3, which
divides its 3x3 features), two of the transformers' twelve layers."""

SMALL_ONNX: dict[str, dict[str, int]] = {
    **{name: {"image": 64, "classes": 10} for name in ONNX_MODELS if name not in ("bert", "gpt2")},
    "vgg16": {"image": 64, "classes": 10, "pool": 1},
    "bert": {"layers": 1, "hidden": 64, "heads": 2, "intermediate": 128, "vocab": 100},
    "gpt2": {"layers": 1, "hidden": 64, "heads": 2, "vocab": 100},
}
"""`--small`'s sizes for the exported models (a smoke test)."""

SUITE_GOALS = {"geomean_jax": 1.10, "slowest_jax": 0.99, "nasrnn_jax": 1.5, "geomean_ort": 1.2}
"""Issue 34's goals: geomean over `jax.jit`, no row below, nasrnn, geomean over onnxruntime."""

PASS = "equality-rewrite"
SEED = 0
"""Seed of the random inputs every measurement and check uses."""

RUN_COPIES = 2
"""A run holds two programs (original and optimized), each as `zoo.py` runs one."""

MIN_PAIRS = 5
"""A backend measures at least this many pairs, however long they take."""

KEPT_INPUT = "kept input"
"""The speedup cells of a row whose program is its input (`Result.kept_input`). Such a
row is not timed: both sides would run one program, and the ratio would be the
machine's noise (0.94-1.05 under `jax.jit` at load 5-15, docs/benchmarks.md, issue
34). The goals' summary counts it as exactly 1 and says how many rows it counted so."""

SAME_UNDER_ORT = "same program"
"""The onnxruntime cell of a row whose two programs onnxruntime optimizes into one graph
(`same_under_ort`): the weight layout, which it undoes (it constant-folds both
transposes into the initializer and lays the weights out itself), was the third
round's 0.78x on vgg19 at load 13-21, one program timed against itself
(docs/benchmarks.md, issue 34, fourth round). Counted 1 in the summary, as
`KEPT_INPUT` is."""

SAMPLE_S = 0.02
"""A sample repeats a fast program until it takes this long: on a machine shared with
other work, a 1 ms sample (`time_end_to_end`'s) is often one preempted time slice."""


# ------------------------------------------------------------------ in the child


@dataclass
class Result:
    """What a child found; printed as a JSON line when each phase starts and at the end,
    so a child stopped midway still reports what it finished and where it was."""

    phase: str = "search"
    ops_before: int | None = None
    ops_after: int | None = None
    predicted: float | None = None
    search_s: float | None = None
    stopped: str = ""
    kept: str = ""
    """What re-timing kept, when the pass re-timed candidates (`retime_note`)."""
    max_abs_error: float | None = None
    agree: bool | None = None
    jax: PairedRatio | None = None
    ort: PairedRatio | None = None
    rules: dict[str, int] | None = None
    """The pass's `rules_applied`: how often each rule fired on the way to its result."""
    hlo: dict[str, list[int]] | None = None
    """With `--suite`: `hlo_counts` of the original and the optimized program."""
    kept_input: bool | None = None
    """The pass returned its input unchanged (the two programs' text is equal): nothing
    is timed, and the row's speedup is 1 by construction (`KEPT_INPUT`)."""
    ort_same: bool | None = None
    """onnxruntime optimizes both exported programs into the same graph
    (`same_under_ort`): it is not timed there, and its ratio is 1 (`SAME_UNDER_ORT`)."""
    error: str | None = None

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Result:
        result = cls(**data)
        result.jax = PairedRatio(**data["jax"]) if data["jax"] else None
        result.ort = PairedRatio(**data["ort"]) if data["ort"] else None
        return result


def onnx_sizes(spec: str) -> tuple[str, dict[str, int | float]]:
    """The exported model's name and builder sizes of `onnx:NAME?k=v&...`."""
    name, _, query = spec.removeprefix(ONNX_SCHEME).partition("?")
    sizes: dict[str, int | float] = {}
    for item in filter(None, query.split("&")):
        key, _, value = item.partition("=")
        sizes[key] = int(value) if value.lstrip("-").isdigit() else float(value)
    return name, sizes


def onnx_spec(name: str, sizes: dict[str, int]) -> str:
    query = "&".join(f"{key}={value}" for key, value in sizes.items())
    return f"{ONNX_SCHEME}{name}{'?' + query if query else ''}"


def load_original(spec: str, folder: Path) -> tuple[str, ModuleOp]:
    """The driver's INPUT for `spec` and the program it reads: a zoo model, or an
    exported ONNX model written to a file in `folder` and imported as a user's is."""
    if not spec.startswith(ONNX_SCHEME):
        from tasoc.driver.sources import build_zoo_model

        return f"{SCHEME}{spec}", build_zoo_model(spec)
    import onnx

    from tasoc.backends.onnx.importer import import_onnx
    from tasoc.models.exported import EXPORTED_MODELS

    name, sizes = onnx_sizes(spec)
    path = folder / f"{name}.onnx"
    onnx.save(EXPORTED_MODELS[name](**sizes), path)
    return str(path), import_onnx(path)[0]


def optimize(spec: str, pipeline: str) -> tuple[ModuleOp, ModuleOp, dict[str, Any]]:
    """The model, the model after `pipeline`, and the pass's report section (with
    `seconds`, the pass's wall time as the driver measured it)."""
    import tempfile

    from tasoc.driver.opt import TasocOptMain
    from tasoc.passes.report import reporting

    with tempfile.TemporaryDirectory() as folder:
        source, original = load_original(spec, Path(folder))
        driver = TasocOptMain([source, "-p", pipeline])
    optimized = original.clone()
    with reporting(driver.report):
        driver.pipeline.apply(driver.ctx, optimized)
    section = driver.report.section(PASS)
    return original, optimized, {**section, "seconds": driver.report.passes[0].seconds}


def interleaved_speedup(
    original: Callable[[], float], optimized: Callable[[], float], pairs: int, seconds: float
) -> PairedRatio:
    """Alternate the two samplers (each returns seconds per call) for `pairs` pairs, or
    until `seconds` have passed after at least `MIN_PAIRS`; see the module docstring."""
    ratios: list[float] = []
    start = time.perf_counter()
    for index in range(pairs):
        if index >= MIN_PAIRS and time.perf_counter() - start > seconds:
            break
        if index % 2:
            new, old = optimized(), original()
        else:
            old, new = original(), optimized()
        ratios.append(old / new)
    return PairedRatio.of(ratios)


def jax_speedup(original: ModuleOp, optimized: ModuleOp, pairs: int, seconds: float) -> PairedRatio:
    # `time_end_to_end` returns each program's median, not the pairs: use its sampler.
    from tasoc.cost.measured import end_to_end_sampler
    from tasoc.ir.dag import from_module

    samplers = [
        lengthened(end_to_end_sampler(from_module(m), fold_weights=True, seed=SEED))
        for m in (original, optimized)
    ]
    return interleaved_speedup(*samplers, pairs, seconds)


def timed(call: Callable[[], object]) -> Callable[[], float]:
    """A sampler of one call's seconds, after two warm-up calls."""
    call()
    call()

    def sample() -> float:
        start = time.perf_counter()
        call()
        return time.perf_counter() - start

    return sample


def lengthened(sample: Callable[[], float]) -> Callable[[], float]:
    """`sample` averaged over as many samples as take `SAMPLE_S`, so that one sample of a
    fast program spans several scheduler time slices."""
    count = max(1, min(1000, math.ceil(SAMPLE_S / max(sample(), 1e-9))))
    return lambda: statistics.fmean(sample() for _ in range(count))


def ort_session(model: onnx.ModelProto) -> onnxruntime.InferenceSession:
    """A CPU session whose idle threads do not spin: two sessions live in one process, and
    the spinning threads of the one just run would take cores from the other (on a busy
    2-core machine that doubles the interquartile range)."""
    import onnxruntime

    from tasoc.backends.onnx.runtime import inference_session

    options = onnxruntime.SessionOptions()
    options.add_session_config_entry("session.intra_op.allow_spinning", "0")
    return inference_session(model, options=options)


def exported(module: ModuleOp, arguments: list[Any]) -> tuple[onnx.ModelProto, dict[str, Any]]:
    """`module` exported with `arguments`' weights, and its feeds: the activations (the
    exporter makes activation arguments the inputs, in order)."""
    from tasoc.backends.onnx import export_onnx
    from tasoc.ir.program import arg_infos, entry_function

    infos = arg_infos(entry_function(module))
    weights = {i.name: a for i, a in zip(infos, arguments, strict=True) if i.is_param}
    model = export_onnx(module, param_values=weights)
    activations = [a for i, a in zip(infos, arguments, strict=True) if not i.is_param]
    return model, dict(zip((value.name for value in model.graph.input), activations, strict=True))


def ort_call(module: ModuleOp, arguments: list[Any]) -> Callable[[], object]:
    """One onnxruntime run of `module` exported with `arguments`' weights."""
    model, feeds = exported(module, arguments)
    session = ort_session(model)
    return lambda: session.run(None, feeds)


def ort_optimized(model: onnx.ModelProto) -> onnx.ModelProto:
    """The graph onnxruntime runs for `model`: what a session optimizes it into when it
    is created (constant folding, fusions, its own weight layouts), as it saves it."""
    import tempfile

    import onnx
    import onnxruntime

    from tasoc.backends.onnx.runtime import ERRORS_ONLY, inference_session

    with tempfile.TemporaryDirectory() as folder:
        options = onnxruntime.SessionOptions()
        options.log_severity_level = ERRORS_ONLY  # it warns that the file is host-specific
        options.optimized_model_filepath = str(Path(folder) / "optimized.onnx")
        inference_session(model, options=options)
        return onnx.load(options.optimized_model_filepath)


def ort_canonical(model: onnx.ModelProto) -> tuple[object, ...]:
    """`model`'s graph without its names: each node's op, domain, attributes and inputs,
    an input named by its position among the graph's inputs, an initializer by its
    shape and the hash of its bytes, an intermediate by the node and result making it;
    then the outputs likewise. Two graphs with the same form compute the same thing
    the same way."""
    import hashlib

    from onnx import helper, numpy_helper

    names: dict[str, object] = {
        value.name: ("input", k) for k, value in enumerate(model.graph.input)
    }
    for init in model.graph.initializer:
        digest = hashlib.sha256(numpy_helper.to_array(init).tobytes()).hexdigest()
        names[init.name] = ("initializer", tuple(init.dims), digest)
    nodes = []
    for index, node in enumerate(model.graph.node):
        inputs = tuple(names.get(name, ("unknown", name)) if name else None for name in node.input)
        attributes = sorted((a.name, repr(helper.get_attribute_value(a))) for a in node.attribute)
        nodes.append((node.op_type, node.domain, inputs, tuple(attributes)))
        names.update((name, ("node", index, k)) for k, name in enumerate(node.output))
    return tuple(nodes), tuple(names.get(value.name) for value in model.graph.output)


def same_under_ort(original: ModuleOp, optimized: ModuleOp, arguments: list[Any]) -> bool:
    """Whether onnxruntime optimizes the two programs, exported with the same weights,
    into the same graph (`ort_canonical`), so that timing them against each other there
    would measure only the machine's noise (`SAME_UNDER_ORT`)."""
    forms = [ort_canonical(ort_optimized(exported(m, arguments)[0])) for m in (original, optimized)]
    return forms[0] == forms[1]


def ort_speedup(original: ModuleOp, optimized: ModuleOp, pairs: int, seconds: float) -> PairedRatio:
    from tasoc.backends.arguments import random_inputs

    arguments = random_inputs(original, SEED)
    samplers = [lengthened(timed(ort_call(m, arguments))) for m in (original, optimized)]
    return interleaved_speedup(*samplers, pairs, seconds)


HLO_NOT_KERNELS = frozenset({"parameter", "constant", "tuple", "get-tuple-element", "bitcast"})
"""Instructions of an entry computation that launch no kernel."""

HLO_INSTRUCTION = re.compile(r"^\s*(?:ROOT\s+)?\S+\s*=\s*.*?\s([a-z][a-z0-9_-]*)\(")
"""An HLO instruction line; group 1 is its opcode (the first `word(` after `=`: a
result type holds no such word)."""

HLO_OPERAND = re.compile(r"%[\w.\-]+")

STABLEHLO_OP = re.compile(r"\bstablehlo\.([a-z_]+)")


def cpu_hlo_counts(hlo: str) -> dict[str, int]:
    """`fusions` and `kernels` of the entry computation of compiled HLO text, and
    `param_only`: the fusions that read nothing but parameters, which XLA runs on every
    call although their inputs are the weights (on a CPU, mostly a convolution weight's
    relayout from OIHW to the layout its kernel wants)."""
    entry = hlo[hlo.index("\nENTRY") :].split("\n}", 1)[0].splitlines()[1:]
    instructions = [(line, match[1]) for line in entry if (match := HLO_INSTRUCTION.match(line))]
    params = {line.split("=", 1)[0].split()[-1] for line, op in instructions if op == "parameter"}

    def reads_params_only(line: str) -> bool:
        operands = HLO_OPERAND.findall(line.split(" fusion(", 1)[1].split(")", 1)[0])
        return bool(operands) and all(operand in params for operand in operands)

    fusions = [line for line, op in instructions if op == "fusion"]
    return {
        "fusions": len(fusions),
        "kernels": sum(op not in HLO_NOT_KERNELS for _, op in instructions),
        "param_only": sum(reads_params_only(line) for line in fusions),
    }


def stablehlo_counts(text: str) -> dict[str, int]:
    """`ops` (constants and returns left out) and `dots_convs` of StableHLO text."""
    ops = [match[1] for line in text.splitlines() if (match := STABLEHLO_OP.search(line))]
    return {
        "cuda_ops": sum(op not in ("constant", "return") for op in ops),
        "cuda_dots_convs": sum(op in ("dot_general", "dot", "convolution") for op in ops),
    }


def hlo_counts(module: ModuleOp) -> dict[str, int]:
    """What XLA makes of `module` (module docstring): the CPU compile's fusions and
    kernels, and the StableHLO cross-lowered for CUDA."""
    import jax

    from tasoc.backends.jax import lower
    from tasoc.backends.jax.lowering import jax_dtype

    program = lower(module)
    abstract = [
        jax.ShapeDtypeStruct(i.sig.shape, jax_dtype(i.sig.dtype)) for i in program.arg_infos
    ]
    traced = program.fn.trace(*abstract)  # type: ignore[attr-defined]
    cpu = cpu_hlo_counts(traced.lower().compile().as_text())
    return {**cpu, **stablehlo_counts(traced.lower(lowering_platforms=("cuda",)).as_text())}


def error_line(error: Exception) -> str:
    from tasoc.driver.errors import describe, one_line

    return describe(error) or f"{type(error).__name__}: {one_line(str(error))}"


def retime_note(section: dict[str, Any]) -> str:
    """Which graph the pass's re-timing kept, and what the search alone predicted: the
    predicted speedup column is the kept graph's."""
    timed = section.get("retimed")
    if not timed:
        if timed is None:
            return ""
        layout = section.get("weight_layout", {})
        return "retime measured nothing" + (
            "; layout taken by prediction" if layout.get("by_prediction") else ""
        )
    kept = timed[0]
    which = "the input" if kept["input"] else "the search's best"
    if not kept["input"] and not kept["search_best"]:
        which = "a runner-up"
    note = f"retime kept {which} of {len(timed)}"
    best = next((t for t in timed if t["search_best"]), None)
    if best is not None:
        note += f"; search predicted {section['cost_before'] / best['predicted']:.3f}"
    return note


def run_child(spec: str, pipeline: str, pairs: int, seconds: float, hlo: bool = False) -> None:
    """Search, check and measure `spec`, printing a `Result` line at each phase; with
    `hlo`, count both programs' HLO (`hlo_counts`) first."""
    from tasoc.verify.equivalence import equivalent

    result = Result()

    def start(phase: str) -> None:
        result.phase = phase
        print(json.dumps(asdict(result)), flush=True)

    try:
        start("search")
        original, optimized, section = optimize(spec, pipeline)
        result.ops_before = model_stats(original).ops
        result.ops_after = model_stats(optimized).ops
        result.predicted = section.get("predicted_speedup", 1.0)
        result.search_s = section.get("search_seconds", section["seconds"])
        stopped = section.get("stopped")
        result.stopped = f"stopped: {stopped}" if stopped else section.get("note", "")
        result.kept = retime_note(section)
        result.rules = section.get("rules_applied") or {}
        if hlo:
            start("hlo")
            counts = [hlo_counts(module) for module in (original, optimized)]
            result.hlo = {key: [c[key] for c in counts] for key in counts[0]}
        start("check")
        check = equivalent(original, optimized, seed=SEED, backend="jax")
        result.max_abs_error = max((o.max_abs_error for o in check.outputs), default=0.0)
        result.agree = check.ok
        result.kept_input = str(original) == str(optimized)
        if result.kept_input:  # one program on both sides: its ratio is the machine's noise
            result.phase = "done"
            print(json.dumps(asdict(result)), flush=True)
            return
        start("jax")
        result.jax = jax_speedup(original, optimized, pairs, seconds)
        start("onnxruntime")
        from tasoc.backends.arguments import random_inputs

        result.ort_same = same_under_ort(original, optimized, random_inputs(original, SEED))
        if not result.ort_same:
            result.ort = ort_speedup(original, optimized, pairs, seconds)
        result.phase = "done"
    except Exception as error:
        result.error = error_line(error)
    print(json.dumps(asdict(result)), flush=True)


# ----------------------------------------------------------------- in the parent


@dataclass
class Row:
    """One line of the table: a (spec, search) and what its child reported."""

    spec: str
    search: str
    outcome: str = ""
    """Empty when the child finished, else why not (skipped, timed out, killed)."""
    result: Result | None = None
    again: list[Result | None] | None = None
    """With `--runs N`: the N - 1 runs after the first (search and measurements anew)."""

    def verdicts(self) -> list[float | None]:
        """Each run's `jax.jit` speedup: its median, 1.0 where the pass kept its input
        (`KEPT_INPUT`), None where it was not measured."""
        return [jax_verdict(result) for result in (self.result, *(self.again or ()))]


def jax_verdict(result: Result | None) -> float | None:
    """A run's `jax.jit` speedup (`Row.verdicts`)."""
    if result is None:
        return None
    if result.kept_input:
        return 1.0
    return result.jax.median if result.jax else None


def pass_pipeline(args: argparse.Namespace, search: str) -> str:
    """The `-p` text for `search` with the options given on the command line."""
    options = {
        "search": search,
        "timeout": args.timeout,
        "cost": args.cost,
        "alpha": args.alpha,
        "budget": args.budget,
        "retime": args.retime,
        "rules": None if args.rules is None else f'"{args.rules}"',  # quoted: `+`, `/`
    }
    text = " ".join(f"{key}={value}" for key, value in options.items() if value is not None)
    return f"{PASS}{{{text}}}"


def fitting_spec(model: ZooModel, small: bool, limit: float) -> tuple[str, str]:
    """(spec to run, '') or (the default spec, why it is skipped): the paper's shapes,
    else batch 1 when that fits `limit` GB (module docstring)."""
    if small:
        return model.spec(dict(model.small)), ""
    candidates = [model.spec()]
    if model.defaults.get("batch", 1) != 1:
        candidates.append(model.spec({"batch": 1}))
    need = 0.0
    for spec in candidates:
        need = RUN_COPIES * estimated_bytes(build_model(spec)) / GB
        if need <= limit:
            return spec, ""
    return candidates[0], f"skipped: needs ~{need:.1f} GB > {limit:g} GB"


def last_result(stdout: str | bytes | None) -> Result | None:
    text = stdout.decode(errors="replace") if isinstance(stdout, bytes) else stdout or ""
    lines = [line for line in text.splitlines() if line.startswith("{")]
    return Result.from_json(json.loads(lines[-1])) if lines else None


def run_row(spec: str, search: str, args: argparse.Namespace) -> Row:
    """One child for (spec, search), stopped after `--timeout-per-model` seconds."""
    command = [sys.executable, __file__, "--child", spec, "--pipeline", pass_pipeline(args, search)]
    command += ["--repeats", str(args.repeats), "--measure-seconds", str(args.measure_seconds)]
    command += ["--hlo"] if args.suite else []
    print(f"{spec} {search} ...", file=sys.stderr, flush=True)
    start = time.perf_counter()
    try:
        done = subprocess.run(
            command, capture_output=True, text=True, timeout=args.timeout_per_model
        )
    except subprocess.TimeoutExpired as stopped:
        result = last_result(stopped.stdout)
        during = f" during {result.phase}" if result else ""
        row = Row(spec, search, f"timed out after {args.timeout_per_model:g} s{during}", result)
    else:
        row = Row(spec, search, result=last_result(done.stdout))
        if done.returncode != 0:
            lines = done.stderr.strip().splitlines()
            why = lines[-1] if lines else f"exit status {done.returncode}"
            if done.returncode < 0:
                why = f"killed by signal {-done.returncode} (out of memory?)"
            row.outcome = f"failed: {why}"
    print(f"  {row.outcome or 'done'} in {time.perf_counter() - start:.1f} s", file=sys.stderr)
    return row


def cells(row: Row, markdown: bool) -> list[str]:
    """The table cells of `row` (see `header`); what did not happen is '—'."""
    r = row.result or Result()

    def shown(value: object, form: str = "") -> str:
        return "—" if value is None else format(value, form)

    ops = "—" if r.ops_before is None else f"{r.ops_before} → {r.ops_after}"
    error = "—" if r.max_abs_error is None else f"{r.max_abs_error:.1e}"
    if r.agree is False:
        error = f"**NO** {error}"
    failure = ""
    if r.error:
        failure = f"error: {r.error}" if r.phase == "search" else f"error ({r.phase}): {r.error}"
    notes = [r.stopped, r.kept, failure, row.outcome]
    kept = KEPT_INPUT if r.kept_input else None
    return [
        f"`{row.spec}`" if markdown else row.spec,
        row.search,
        ops,
        shown(r.predicted, ".3f"),
        kept or shown(r.jax),
        kept or (SAME_UNDER_ORT if r.ort_same else shown(r.ort)),
        error,
        shown(r.search_s, ".1f"),
        "; ".join(note for note in notes if note),
    ]


def header(cost: str) -> list[str]:
    predicted = "simulated" if cost.startswith("analytic") else "cost model"
    return [
        "model",
        "search",
        "ops",
        f"predicted speedup ({cost}, {predicted})",
        "JAX speedup (IQR, pairs)",
        "ORT speedup (IQR, pairs)",
        "max abs err",
        "search s",
        "notes",
    ]


def exported_spec(name: str, args: argparse.Namespace) -> str:
    """The spec of exported model `name` at the sizes `--small` or `--shrink` asks for."""
    if args.small:
        return onnx_spec(name, SMALL_ONNX[name])
    return onnx_spec(name, SHRUNK[name] if args.shrink else {})


def shapes_title(args: argparse.Namespace) -> str:
    if args.small:
        return "small variants (a smoke test)"
    if args.shrink:
        return "zoo models at their papers' shapes; ONNX models shrunk (`SHRUNK`)"
    return "papers' shapes; ONNX models full size"


def load_average() -> str:
    return " ".join(f"{value:.2f}" for value in os.getloadavg())


def top_rules(rules: dict[str, int] | None, count: int = 3) -> str:
    """The rules that fired most, `name x n`, and how many others did."""
    if not rules:
        return "—" if rules is None else "none"
    ranked = sorted(rules.items(), key=lambda item: (-item[1], item[0]))
    shown = ", ".join(f"{name} x{n}" for name, n in ranked[:count])
    return shown + (f" (+{len(ranked) - count} more)" if len(ranked) > count else "")


def before_after(hlo: dict[str, list[int]] | None, *keys: str) -> str:
    """`a/b → c/d` for the counts `keys` of the original and the optimized program."""
    if hlo is None:
        return "—"
    old, new = ("/".join(str(hlo[key][side]) for key in keys) for side in (0, 1))
    return f"{old} → {new}"


def suite_header(cost: str) -> list[str]:
    return [
        "model",
        "ops",
        "rules fired",
        f"predicted ({cost}, simulated)",
        "jax.jit speedup (IQR, pairs)",
        "ORT speedup (IQR, pairs)",
        "CPU HLO fusions/kernels/param-only",
        "CUDA StableHLO ops/dots+convs",
        "max abs err",
        "search s",
        "notes",
        "jax.jit per run",
    ]


def suite_cells(row: Row, markdown: bool) -> list[str]:
    """A `--suite` row: `cells`' columns with the rules fired and the HLO counts."""
    model, _, ops, predicted, jax, ort, error, search_s, notes = cells(row, markdown)
    r = row.result or Result()
    return [
        model,
        ops,
        top_rules(r.rules),
        predicted,
        jax,
        ort,
        before_after(r.hlo, "fusions", "kernels", "param_only"),
        before_after(r.hlo, "cuda_ops", "cuda_dots_convs"),
        error,
        search_s,
        notes,
        per_run(row),
    ]


def per_run(row: Row) -> str:
    """Each run's `jax.jit` verdict (`Row.verdicts`): `1.912`, `kept input` or `—`."""
    runs = (row.result, *(row.again or ()))
    return ", ".join(
        KEPT_INPUT if r is not None and r.kept_input else "—" if v is None else f"{v:.3f}"
        for r, v in zip(runs, row.verdicts(), strict=True)
    )


def geomean(values: list[float]) -> float:
    return math.exp(statistics.fmean(math.log(v) for v in values))


def verdict(value: float | None, goal: float) -> str:
    if value is None:
        return "not measured"
    return f"{value:.3f} ({'met' if value >= goal else 'missed'}, goal ≥ {goal})"


def suite_summary(rows: list[Row]) -> list[str]:
    """The issue's goals against the medians measured (`SUITE_GOALS`): a model's
    `jax.jit` figure is the median of its runs' (`Row.verdicts`: 1.0 where the pass
    kept its input), onnxruntime's the first run's (a kept input, or one program there,
    `SAME_UNDER_ORT`, counts 1.0 too)."""
    jax: dict[str, float] = {}
    runs = kept = 0
    for row in rows:
        measured = [v for v in row.verdicts() if v is not None]
        if measured:
            jax[row.spec] = statistics.median(measured)
            results = (row.result, *(row.again or ()))
            runs += len(measured)
            kept += sum(r is not None and bool(r.kept_input) for r in results)
    ort = [
        1.0 if row.result.kept_input or row.result.ort_same else row.result.ort.median
        for row in rows
        if row.result and (row.result.ort or row.result.kept_input or row.result.ort_same)
    ]
    same = sum(bool(row.result and row.result.ort_same) for row in rows)
    slowest = min(jax, key=jax.__getitem__) if jax else None
    nasrnn = next((value for spec, value in jax.items() if spec.split("?")[0] == "nasrnn"), None)
    counted = f"; {kept} of {runs} runs {KEPT_INPUT}, counted 1.000" if kept else ""
    lines = [
        f"geomean over jax.jit ({len(jax)} models{counted}): "
        + verdict(geomean(list(jax.values())) if jax else None, SUITE_GOALS["geomean_jax"]),
        f"slowest over jax.jit: {slowest or '—'} "
        + verdict(jax[slowest] if slowest else None, SUITE_GOALS["slowest_jax"]),
        "nasrnn over jax.jit: " + verdict(nasrnn, SUITE_GOALS["nasrnn_jax"]),
        f"geomean over onnxruntime ({len(ort)} models"
        + (f"; {same} {SAME_UNDER_ORT} there, counted 1.000" if same else "")
        + "): "
        + verdict(geomean(ort) if ort else None, SUITE_GOALS["geomean_ort"]),
    ]
    return lines


def table(rows: list[list[str]], markdown: bool) -> str:
    """Markdown (ready to paste) or plain aligned columns."""
    if markdown:
        separator = [
            "---" if cell in ("model", "search", "rules fired", "notes") else "---:"
            for cell in rows[0]
        ]
        return "\n".join(f"| {' | '.join(row)} |" for row in [rows[0], separator, *rows[1:]])
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            for line in info:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def environment(argv: list[str]) -> list[str]:
    versions = ", ".join(
        f"{name} {version(name)}" for name in ("jax", "jaxlib", "onnxruntime", "onnx", "xdsl")
    )
    return [
        f"{datetime.date.today()}, {cpu_name()} ({platform.machine()}, "
        f"{len(os.sched_getaffinity(0))} cores), Python {platform.python_version()}, {versions}",
        f"command: benchmarks/rewrite.py {' '.join(argv)}",
    ]


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", help=f"comma-separated (default: {','.join(MODELS)})")
    parser.add_argument("--searches", default="backtrack,egraph", help="comma-separated")
    parser.add_argument(
        "--timeout", type=float, default=30.0, help="seconds the pass may take, re-timing included"
    )
    parser.add_argument("--cost", default="analytic", help="the pass's cost model")
    parser.add_argument("--alpha", type=float, help="the pass's alpha (default: the pass's)")
    parser.add_argument("--budget", type=int, help="the pass's budget (default: the pass's)")
    parser.add_argument(
        "--retime",
        type=int,
        help="candidates the pass re-times end to end (default: the pass's; 0: none)",
    )
    parser.add_argument(
        "--rules", help="the pass's rule library (default: the pass's; e.g. default+layout)"
    )
    parser.add_argument("--repeats", type=int, default=20, help="A/B pairs per backend at most")
    parser.add_argument(
        "--runs", type=int, default=1, help="runs per model, each searching and measuring anew"
    )
    parser.add_argument(
        "--measure-seconds", type=float, default=20.0, help="measuring time per backend"
    )
    parser.add_argument("--memory-limit", type=float, default=8.0, help="GB (default 8)")
    parser.add_argument("--timeout-per-model", type=float, default=600.0, help="seconds")
    parser.add_argument("--small", action="store_true", help="run the small variants")
    parser.add_argument("--markdown", action="store_true", help="a markdown table")
    parser.add_argument(
        "--suite",
        action="store_true",
        help="the zoo models and the exported ONNX models, e-graph search, HLO counts",
    )
    parser.add_argument("--shrink", action="store_true", help="ONNX models at `SHRUNK` sizes")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--pipeline", help=argparse.SUPPRESS)
    parser.add_argument("--hlo", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.repeats < 1:
        parser.error("--repeats must be positive")
    if args.runs < 1:
        parser.error("--runs must be positive")
    if args.child:
        return args
    default = [*MODELS, *(ONNX_SCHEME + name for name in ONNX_MODELS)] if args.suite else MODELS
    names = args.models.split(",") if args.models else list(default)
    if args.suite and "--searches" not in argv:
        args.searches = "egraph"
    try:
        args.models = [model_or_exported(name) for name in names]
    except ValueError as err:
        parser.error(str(err))
    return args


def model_or_exported(name: str) -> ZooModel | str:
    """A zoo model, or the name of an exported ONNX model (`onnx:NAME`); ValueError
    for neither."""
    if not name.startswith(ONNX_SCHEME):
        return get_model(name)
    from tasoc.models.exported import EXPORTED_MODELS

    exported = name.removeprefix(ONNX_SCHEME)
    if exported not in EXPORTED_MODELS:
        known = ", ".join(sorted(EXPORTED_MODELS))
        raise ValueError(f"unknown exported model '{exported}' (known: {known})")
    return exported


def main() -> None:
    argv = sys.argv[1:]
    args = parse_args(argv)
    if args.child:
        run_child(args.child, args.pipeline, args.repeats, args.measure_seconds, args.hlo)
        return
    load_before = load_average()
    rows: list[Row] = []
    for model in args.models:
        if isinstance(model, str):
            spec, skipped = exported_spec(model, args), ""
        else:
            spec, skipped = fitting_spec(model, args.small, args.memory_limit)
        for search in args.searches.split(","):
            if skipped:
                rows.append(Row(spec, search, skipped))
                continue
            row = run_row(spec, search, args)
            row.again = [run_row(spec, search, args).result for _ in range(args.runs - 1)]
            rows.append(row)
    lines = environment(argv)
    if args.suite:
        loads = f"load average before: {load_before}, after: {load_average()}"
        lines.append(f"shapes: {shapes_title(args)}; {loads}")
    print("\n".join(f"- {line}" if args.markdown else line for line in lines))
    print()
    if args.suite:
        body = [suite_cells(row, args.markdown) for row in rows]
        print(table([suite_header(args.cost), *body], args.markdown))
        print()
        print("\n".join(f"- {line}" for line in suite_summary(rows)))
    else:
        body = [cells(row, args.markdown) for row in rows]
        print(table([header(args.cost), *body], args.markdown))
    if any(row.result and row.result.agree is False for row in rows):
        sys.exit(1)


if __name__ == "__main__":
    main()
