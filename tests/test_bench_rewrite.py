"""benchmarks/rewrite.py: one real run on a small model, and its parts on made-up data."""

from __future__ import annotations

import json
import math
import re
import subprocess
import sys
from dataclasses import asdict
from types import ModuleType

import pytest
from conftest import BENCHMARKS, load_benchmark

from tasoc.passes.rewrite.equality_rewrite import TIMEOUT_MARGIN_S

SCRIPT = BENCHMARKS / "rewrite.py"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("rewrite")


def table_rows(output: str) -> dict[str, list[str]]:
    """Markdown body rows by search name."""
    rows = [line.strip("|").split(" | ") for line in output.splitlines() if line.startswith("| `")]
    return {cells[1].strip(): [cell.strip() for cell in cells] for cells in rows}


def test_small_model_end_to_end() -> None:
    command = [sys.executable, str(SCRIPT), "--models", "nasrnn", "--small"]
    command += ["--searches", "backtrack,nosuch", "--timeout", "1", "--repeats", "2"]
    command += ["--measure-seconds", "0.5", "--markdown"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "onnxruntime" in done.stdout.splitlines()[0]
    rows = table_rows(done.stdout)
    model, _, ops, predicted, jax, ort, error, search_s, _ = rows["backtrack"]
    assert model == "`nasrnn?hidden=32&length=2`"
    assert ops.startswith("92 → ")
    assert float(predicted) >= 1.0  # the search never returns a graph it predicts slower
    for speedup in (jax, ort):  # a kept input is not timed (`KEPT_INPUT`)
        kept = speedup == "kept input" and ops == "92 → 92"
        assert kept or (speedup.endswith("n=2)") and float(speedup.split()[0]) > 0)
    assert float(error) < 1e-4
    # The pass's timeout bounds it, re-timing included; on a loaded machine the search's
    # share can be spent before it starts, and 0.0 s is then what the table says.
    assert 0 <= float(search_s) < 1 + TIMEOUT_MARGIN_S
    assert rows["nosuch"][2:8] == ["—"] * 6
    failure = rows["nosuch"][8]  # the option error, as `tasoc opt` words it
    assert failure.startswith("error: ") and "equality-rewrite" in failure
    assert "search" in failure and "nosuch" in failure


def test_ratios_pair_up_and_stop_on_time(bench: ModuleType) -> None:
    calls: list[str] = []

    def sampler(name: str, seconds: float):
        return lambda: calls.append(name) or seconds

    speedup = bench.interleaved_speedup(sampler("a", 3.0), sampler("b", 1.5), 50, 0.0)
    assert (speedup.median, speedup.q1, speedup.q3) == (2.0, 2.0, 2.0)
    assert speedup.pairs == bench.MIN_PAIRS
    assert calls[:4] == ["a", "b", "b", "a"]  # each side goes first in turn


def test_a_stopped_child_keeps_what_it_finished(bench: ModuleType) -> None:
    finished = bench.Result(phase="jax", ops_before=10, ops_after=8, predicted=1.25)
    finished.jax = bench.PairedRatio(1.1, 1.0, 1.2, 7)
    output = f"noise\n{json.dumps(asdict(bench.Result()))}\n{json.dumps(asdict(finished))}\n"
    result = bench.last_result(output.encode())
    assert result == finished
    row = bench.Row("m", "backtrack", "timed out after 9 s during jax", result)
    cells = bench.cells(row, markdown=False)
    assert cells[:6] == ["m", "backtrack", "10 → 8", "1.250", "1.100 (1.000-1.200, n=7)", "—"]
    assert cells[-1] == "timed out after 9 s during jax"


def test_unknown_model_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--models", "nosuchnet"], capture_output=True, text=True
    )
    assert done.returncode == 2
    assert "unknown zoo model 'nosuchnet'" in done.stderr


def test_the_notes_say_what_retiming_kept(bench: ModuleType) -> None:
    timed = [
        {"input": True, "search_best": False, "predicted": 4.0},
        {"input": False, "search_best": True, "predicted": 2.0},
    ]
    section = {"cost_before": 4.0, "retimed": timed}
    assert bench.retime_note(section) == "retime kept the input of 2; search predicted 2.000"
    nothing = {"retimed": [], "weight_layout": {"by_prediction": True}}
    assert bench.retime_note(nothing) == "retime measured nothing; layout taken by prediction"
    assert bench.retime_note({}) == ""
    timed.reverse()
    assert bench.retime_note(section).startswith("retime kept the search's best of 2")
    assert bench.retime_note({"cost_before": 4.0}) == ""


# ------------------------------------------------------------------ --suite (issue 34)


def test_suite_smoke_on_a_tiny_exported_model() -> None:
    """One exported ONNX model, imported as a user's file is, through the whole suite row:
    rules, prediction, both backends, the HLO counts, and the goals' summary."""
    command = [sys.executable, str(SCRIPT), "--suite", "--small", "--models"]
    command += ["onnx:squeezenet1_1", "--rules", "default+layout", "--timeout", "1"]
    command += ["--repeats", "2", "--measure-seconds", "0.2", "--markdown"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    assert "shapes: small variants (a smoke test); load average before: " in done.stdout
    assert ", after: " in done.stdout
    header = next(line for line in done.stdout.splitlines() if line.startswith("| model"))
    assert (
        "CPU HLO fusions/kernels/param-only" in header and "CUDA StableHLO ops/dots+convs" in header
    )
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| `onnx:")]
    cells = [cell.strip() for cell in row.strip("|").split(" | ")]
    assert cells[0] == "`onnx:squeezenet1_1?image=64&classes=10`"
    assert cells[1].startswith("117 → ")
    assert re.fullmatch(r"\d+/\d+/\d+ → \d+/\d+/\d+", cells[6]), cells[6]
    assert re.fullmatch(r"\d+/\d+ → \d+/\d+", cells[7]), cells[7]
    fusions, kernels, param_only = map(int, cells[6].split(" → ")[0].split("/"))
    assert 0 < param_only < fusions <= kernels  # squeezenet's 26 conv weights relaid out
    assert float(cells[8]) < 1e-4
    assert "- geomean over jax.jit (1 models): " in done.stdout
    # Laid out and nothing else, the program is the input's under onnxruntime.
    same = cells[5] == "same program"
    assert same or re.fullmatch(r"\d\.\d{3} \(.*, n=\d+\)", cells[5]), cells[5]
    ort = "1 models; 1 same program there, counted 1.000" if same else "1 models"
    assert f"- geomean over onnxruntime ({ort}): " in done.stdout


def test_an_unknown_exported_model_is_a_usage_error() -> None:
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--suite", "--models", "onnx:nosuchnet"],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 2
    assert "unknown exported model 'nosuchnet' (known: " in done.stderr


HLO = """HloModule jit_program, entry_computation_layout={(f32[2]{0})->f32[2]{0}}

%fused_computation (param_0: f32[2]) -> f32[2] {
  %param_0 = f32[2]{0} parameter(0)
  ROOT %add.1 = f32[2]{0} add(f32[2]{0} %param_0, f32[2]{0} %param_0)
}

ENTRY %main.4 (Arg_0.1: f32[2]) -> (f32[2], f32[2]) {
  %Arg_0.1 = f32[2]{0} parameter(0)
  %constant.2 = f32[] constant(1)
  %fusion = f32[2]{0} fusion(f32[2]{0} %Arg_0.1), kind=kLoop, calls=%fused_computation
  %dot.3 = f32[2]{0} dot(f32[2]{0} %fusion, f32[2]{0} %Arg_0.1), lhs_contracting_dims={}
  %bitcast.5 = f32[2]{0} bitcast(f32[2]{0} %dot.3)
  ROOT %tuple.6 = (f32[2]{0}, f32[2]{0}) tuple(f32[2]{0} %fusion, f32[2]{0} %bitcast.5)
}
"""


def test_hlo_counts_read_the_entry_computation(bench: ModuleType) -> None:
    # The fused computation's add is inside the fusion; the entry launches two kernels.
    # The fusion reads only a parameter: work on an argument redone on every call.
    assert bench.cpu_hlo_counts(HLO) == {"fusions": 1, "kernels": 2, "param_only": 1}
    reads_a_result = HLO.replace("fusion(f32[2]{0} %Arg_0.1)", "fusion(f32[2]{0} %dot.3)")
    assert bench.cpu_hlo_counts(reads_a_result)["param_only"] == 0
    stablehlo = "\n".join(
        [
            "%0 = stablehlo.constant dense<1.0> : tensor<f32>",
            "%1 = stablehlo.dot_general %arg0, %arg1, contracting_dims = [1] x [0]",
            "%2 = stablehlo.convolution(%1, %arg2) dim_numbers = [b, f, 0, 1]",
            "%3 = stablehlo.maximum %2, %0 : tensor<2xf32>",
            "return %3 : tensor<2xf32>",
        ]
    )
    assert bench.stablehlo_counts(stablehlo) == {"cuda_ops": 3, "cuda_dots_convs": 2}


def test_the_suite_summary_says_which_goals_were_met(bench: ModuleType) -> None:
    def row(spec: str, jax: float, ort: float | None) -> object:
        result = bench.Result(jax=bench.PairedRatio(jax, jax, jax, 9))
        result.ort = None if ort is None else bench.PairedRatio(ort, ort, ort, 9)
        return bench.Row(spec, "egraph", result=result)

    rows = [row("nasrnn", 1.6, 2.0), row("onnx:bert?layers=2", 0.98, 1.0), bench.Row("x", "e")]
    lines = bench.suite_summary(rows)
    geomean = math.sqrt(1.6 * 0.98)
    assert lines[0] == f"geomean over jax.jit (2 models): {geomean:.3f} (met, goal ≥ 1.1)"
    assert lines[1] == "slowest over jax.jit: onnx:bert?layers=2 0.980 (missed, goal ≥ 0.99)"
    assert lines[2] == "nasrnn over jax.jit: 1.600 (met, goal ≥ 1.5)"
    assert (
        lines[3] == f"geomean over onnxruntime (2 models): {math.sqrt(2.0):.3f} (met, goal ≥ 1.2)"
    )
    assert bench.suite_summary([])[2] == "nasrnn over jax.jit: not measured"


def test_a_row_that_kept_its_input_counts_one_and_says_so(bench: ModuleType) -> None:
    """The pass's input on both sides is not timed (its ratio would be noise): the row
    says `kept input`, the summary counts it 1.000, and a model's figure is the median
    of its runs."""
    kept = bench.Result(kept_input=True)
    faster = [bench.Result(jax=bench.PairedRatio(v, v, v, 9)) for v in (1.2, 1.5, 1.3)]
    rows = [
        bench.Row("squeezenet", "egraph", result=kept, again=[kept, kept]),
        bench.Row("resnet50", "egraph", result=faster[0], again=faster[1:]),
    ]
    assert bench.suite_cells(rows[0], True)[4:6] == ["kept input", "kept input"]
    assert bench.per_run(rows[0]) == "kept input, kept input, kept input"
    assert bench.per_run(rows[1]) == "1.200, 1.500, 1.300"
    lines = bench.suite_summary(rows)
    assert lines[0] == (
        "geomean over jax.jit (2 models; 3 of 6 runs kept input, counted 1.000): "
        f"{math.sqrt(1.3):.3f} (met, goal ≥ 1.1)"
    )
    assert lines[1] == "slowest over jax.jit: squeezenet 1.000 (met, goal ≥ 0.99)"


def test_onnxruntime_is_not_timed_on_one_program_and_counts_one(bench: ModuleType) -> None:
    """Weights transposed twice are folded by onnxruntime into the initializer they came
    from, so it runs the two programs as one (`same_under_ort`); another op is not."""
    from tasoc.backends.arguments import random_inputs
    from tasoc.ir.builder import GraphBuilder

    def program(body: str) -> object:
        g = GraphBuilder()
        x, w = g.input("x", (2, 8)), g.param("w", (8, 8))
        if body == "viewed":
            w = g.transpose(g.transpose(w, (1, 0)), (1, 0))
        y = g.matmul(x, w)
        return g.build(g.relu(y) if body == "relu" else y)

    plain = program("plain")
    arguments = random_inputs(plain, 0)
    assert bench.same_under_ort(plain, program("viewed"), arguments)
    assert not bench.same_under_ort(plain, program("relu"), arguments)
    laid_out = bench.Result(jax=bench.PairedRatio(1.5, 1.4, 1.6, 9), ort_same=True)
    timed = bench.Result(jax=bench.PairedRatio(1.2, 1.1, 1.3, 9))
    timed.ort = bench.PairedRatio(1.44, 1.4, 1.5, 9)
    rows = [bench.Row("vgg19", "egraph", result=laid_out), bench.Row("x", "egraph", result=timed)]
    assert bench.suite_cells(rows[0], True)[5] == "same program"
    assert bench.suite_summary(rows)[3] == (
        "geomean over onnxruntime (2 models; 1 same program there, counted 1.000): "
        f"{math.sqrt(1.44):.3f} (met, goal ≥ 1.2)"
    )


def test_rules_fired_are_listed_most_first(bench: ModuleType) -> None:
    assert bench.top_rules({"b": 2, "a": 2, "c": 5, "d": 1}) == "c x5, a x2, b x2 (+1 more)"
    assert bench.top_rules({}) == "none"
    assert bench.top_rules(None) == "—"


def test_conv_layout_compares_the_same_chain_in_two_layouts() -> None:
    """benchmarks/conv_layout.py: the three layouts compute the same thing, and only
    OIHW weights are relaid out inside the compiled program."""
    command = [sys.executable, str(BENCHMARKS / "conv_layout.py"), "--channels", "8"]
    command += ["--size", "6", "--layers", "3", "--repeats", "2", "--measure-seconds", "0.1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    lines = {line.split(":")[0]: line for line in done.stdout.splitlines()}
    differences = lines["- max abs difference NHWC vs NCHW"].split(": ", 1)[1].split(", ")
    assert [float(d.split()[-1]) < 1e-4 for d in differences] == [True, True]
    counts = {
        layout: json.loads(lines[f"- {layout}"].split("CPU HLO ")[1].replace("'", '"'))
        for layout in ("nchw", "nchw-hwio", "nhwc")
    }
    for laid_out in ("nchw-hwio", "nhwc"):  # the weights' relayouts are gone
        assert counts["nchw"]["param_only"] >= counts[laid_out]["param_only"] + 3  # 3 weights
        assert counts["nchw"]["kernels"] > counts[laid_out]["kernels"]
        speedup = f"- {laid_out} speedup (NCHW/OIHW time / its time, IQR, pairs)"
        assert lines[speedup].endswith("n=2)")


def test_conv_layout_times_a_model_against_itself_with_weights_laid_out() -> None:
    """benchmarks/conv_layout.py --models: one row per model, the same outputs, and the
    laid-out step reading no weight that XLA relays out."""
    command = [sys.executable, str(BENCHMARKS / "conv_layout.py"), "--repeats", "2"]
    command += ["--models", "squeezenet?image=32&width=0.25", "--measure-seconds", "0.1"]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    (row,) = [line for line in done.stdout.splitlines() if line.startswith("| `squeezenet")]
    cells = [cell.strip() for cell in row.strip("|").split("|")]
    assert cells[1] == "26"  # every convolution's weight is a parameter
    before, after = (tuple(map(int, c.split("/"))) for c in cells[2].split(" → "))
    assert after[2] < before[2] and after[1] < before[1]  # param-only relayouts, kernels
    assert float(cells[3]) > 1 and cells[4] == "-"  # analytic charges the relayout; no xla
    assert float(cells[5]) < 1e-4 and cells[6].endswith("n=2)")
