"""Peak device memory in program order (`tasoc.ir.liveness`): figures worked out by
hand on small programs, the split by kind, linear time on a long program, and the one
definition: `peak_memory` is the replay's peak (`memory.replay`), at the same op, on
random training steps and on a zoo model's step as `tasoc run` and `placement` report
it."""

from __future__ import annotations

import gc
import json
import time
from collections.abc import Callable
from pathlib import Path

from autodiff_helpers import training
from conftest import Result, examples
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.driver.sources import load_module, make_context
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.graph import sig_of
from tasoc.ir.limits import format_bytes
from tasoc.ir.liveness import MemorySplit, PeakMemory, peak_memory
from tasoc.ir.memory import replay, tensor_bytes
from tasoc.ir.program import entry_block, entry_function, return_values
from tasoc.verify.strategies import graphs


def parsed(text: str) -> PeakMemory:
    context: Context = make_context()
    return peak_memory(entry_function(Parser(context, text).parse_module()))


STEP = """
func.func @main(%x: tensor<2x3xf32>, %w: tensor<3x4xf32> {graph.param},
                %m: tensor<3x4xf32> {graph.state})
    -> (tensor<f32> {graph.loss}, tensor<3x4xf32> {graph.replaces = 1 : i64},
        tensor<3x4xf32> {graph.replaces = 2 : i64}) {
  %h = graph.matmul %x, %w : tensor<2x4xf32>
  %l = graph.reduce %h {kind = "sum", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
  %g = graph.relu %w : tensor<3x4xf32>
  %m2 = graph.add %m, %g : tensor<3x4xf32>
  %w2 = graph.add %w, %m2 : tensor<3x4xf32>
  func.return %l, %w2, %m2 : tensor<f32>, tensor<3x4xf32>, tensor<3x4xf32>
}
"""


def test_training_step_by_hand() -> None:
    """x 24 B, w and m 48 B each; h 32, l 4, g 48, m2 48, w2 48. Held at each op
    (arguments the whole step, the caller's; a result from its op to its last reader,
    returned ones to the end):
      start  x w m             = 120
      op 0   x w m h           = 152
      op 1   x w m h l         = 156
      op 2   x w m l g         = 172
      op 3   x w m l g m2      = 220   <- peak
      op 4   x w m l m2 w2     = 220
    At op 3: params w 48; state m 48 + m2 (replaces m) 48; saved activations l 4
    (h is dead); gradients g 48 (not an ancestor of the loss); inputs x 24, held
    though nothing reads it after op 0."""
    memory = parsed(STEP)
    assert memory == PeakMemory(
        peak_bytes=220,
        op=3,
        op_name="graph.add",
        split=MemorySplit(params=48, gradients=48, optimizer_state=96, activations=4, inputs=24),
    )
    assert memory.split.total == memory.peak_bytes
    assert memory.describe() == (
        "peak 220 bytes live at op 3 (graph.add): params 48 bytes, gradients 48 bytes, "
        "optimizer state 96 bytes, saved activations 4 bytes, inputs 24 bytes"
    )
    assert memory.to_json()["split_bytes"] == {
        "params": 48,
        "gradients": 48,
        "optimizer_state": 96,
        "activations": 4,
        "inputs": 24,
    }


def test_forward_program_is_activations_params_and_inputs() -> None:
    """No training marks: every result is an activation. x, w, a, b 64 B each, c 4 B:
    op 0 x w a = 192; op 1 x w a b = 256 (the arguments are held though no op reads
    them again); op 2 x w b c = 196."""
    memory = parsed("""
func.func @main(%x: tensor<4x4xf32>, %w: tensor<4x4xf32> {graph.param}) -> tensor<f32> {
  %a = graph.matmul %x, %w : tensor<4x4xf32>
  %b = graph.relu %a : tensor<4x4xf32>
  %c = graph.reduce %b {kind = "sum", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
  func.return %c : tensor<f32>
}
""")
    assert (memory.peak_bytes, memory.op) == (256, 1)
    assert memory.split == MemorySplit(
        params=64, gradients=0, optimizer_state=0, activations=128, inputs=64
    )


def test_an_unused_argument_is_held_and_an_unused_result_only_where_it_is_made() -> None:
    """An argument nothing reads is still the caller's: held the whole step. An unused
    split half lives at its split only. x 32 B + unused 400 B at the start; op 0: both
    halves (16 B each) = 464; op 1: a and c, b gone = 464: the peak is first at op 0."""
    memory = parsed("""
func.func @main(%x: tensor<8xf32>, %unused: tensor<100xf32>) -> tensor<4xf32> {
  %a, %b = graph.split %x {axis = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4xf32>, tensor<4xf32>
  %c = graph.relu %a : tensor<4xf32>
  func.return %c : tensor<4xf32>
}
""")
    assert (memory.peak_bytes, memory.op, memory.op_name) == (464, 0, "graph.split")
    assert memory.split == MemorySplit(
        params=0, gradients=0, optimizer_state=0, activations=32, inputs=432
    )


def test_a_program_without_ops_peaks_at_the_start() -> None:
    memory = parsed("""
func.func @main(%x: tensor<8xf32>) -> tensor<8xf32> {
  func.return %x : tensor<8xf32>
}
""")
    assert (memory.peak_bytes, memory.op, memory.op_name) == (32, None, None)
    assert memory.split.inputs == 32
    assert "at the start" in memory.describe()


def test_linear_time_on_ten_thousand_ops() -> None:
    builder = GraphBuilder()
    value = builder.input("x", [64, 64])
    for _ in range(10_000):
        value = builder.relu(value)
    function = entry_function(builder.build(value))
    # CPU time with the collector held off: what the replay itself costs, not the
    # machine's load or a collection of what earlier tests left on the heap.
    gc.collect()
    gc.disable()
    try:
        start = time.process_time()
        memory = peak_memory(function)
        spent = time.process_time() - start
    finally:
        gc.enable()
    assert spent < 1.0
    # The caller's argument, and at each op its operand and its result: from op 1 on,
    # three 16 KiB tensors.
    assert (memory.peak_bytes, memory.op) == (3 * 64 * 64 * 4, 1)


def held_by_the_rule(function: func.FuncOp) -> list[int]:
    """The device bytes held at the start and while each op runs, straight from the
    rule's words, one position at a time (quadratic; an oracle, not the replay): every
    argument; a result from its op to its last reader, to the end if returned."""
    ops = [op for op in entry_block(function).ops if not isinstance(op, func.ReturnOp)]
    returned = set(return_values(function))
    readers = {op: position for position, op in enumerate(ops)}
    arguments = sum(tensor_bytes(sig_of(a.type)) for a in entry_block(function).args)
    held = [arguments]
    for position in range(len(ops)):
        held.append(arguments)
        for made, op in enumerate(ops[: position + 1]):
            for result in op.results:
                reads = [readers[use.operation] for use in result.uses if use.operation in readers]
                last = len(ops) if result in returned else max([made, *reads])
                if position <= last:
                    held[-1] += tensor_bytes(sig_of(result.type))
    return held


def agree(module: ModuleOp) -> None:
    """`peak_memory` of `module` is its replay's peak at the replay's op, and the
    replay holds what the rule says at every position."""
    function = entry_function(module)
    memory, run = peak_memory(function), replay(function)
    assert (memory.peak_bytes, memory.op) == (run.peak_bytes, run.peak_op)
    assert memory.split.total == memory.peak_bytes
    assert [run.start, *run.live] == held_by_the_rule(function)


@settings(max_examples=examples(60))
@given(
    graphs(max_ops=6, trainable=True),
    st.sampled_from(["sgd", "momentum", "adam"]),
    st.sampled_from(["sum", "mse"]),
)
def test_peak_memory_is_the_replays_peak_on_random_training_steps(
    module: ModuleOp, optimizer: str, loss: str
) -> None:
    """One definition of the peak without placement: the forward program and the
    training step made of it peak where their replays do, with the same bytes, and
    the replay holds what the rule says."""
    agree(module)
    agree(training(module, loss=loss, optimizer=optimizer))


ALEXNET = "zoo:alexnet?batch=2&image=63&width=0.125&train=sgd"


def test_run_and_placement_report_one_peak_for_a_zoo_step(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    """`tasoc run`'s `memory` (and its printed line), the placement pass's
    `unplaced_peak_bytes`, and `tasoc run`'s figure without placement for the placed
    program are one figure for the same step: `peak_memory`'s."""
    expected = peak_memory(entry_function(load_module(ALEXNET)))
    reports = {name: tmp_path / f"{name}.json" for name in ("run", "opt", "placed")}
    placed = tmp_path / "placed.mlir"
    steps = (
        ("run", ALEXNET, "--report", reports["run"]),
        ("opt", ALEXNET, "-p", "placement{search=offload-all}", "--report", reports["opt"],
         "-o", placed),
        ("run", placed, "--report", reports["placed"]),
    )  # fmt: skip
    results = [tasoc(*step) for step in steps]
    assert all(result.code == 0 for result in results), results
    run, opt, placed_run = (json.loads(path.read_text()) for path in reports.values())
    assert run["memory"] == placed_run["memory"] == expected.to_json()
    assert f"memory: {expected.describe()}" in results[0].out
    section = opt["sections"]["placement"]
    assert section["unplaced_peak_bytes"] == expected.peak_bytes > section["peak_bytes"]
    assert placed_run["placement"]["unplaced_peak_bytes"] == expected.peak_bytes
    assert f"; {format_bytes(expected.peak_bytes)} without placement" in results[2].out
