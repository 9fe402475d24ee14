"""Peak live memory in program order (`tasoc.ir.liveness`): figures worked out by hand
on small programs, the split by kind, and linear time on a long program."""

from __future__ import annotations

import time

from xdsl.context import Context
from xdsl.parser import Parser

from tasoc.driver.sources import make_context
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.liveness import MemorySplit, PeakMemory, peak_memory
from tasoc.ir.program import entry_function


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
    """x 24 B, w and m 48 B each; h 32, l 4, g 48, m2 48, w2 48. Live at each op
    (a value from its definition to its last use, returned ones to the end):
      start  x w m            = 120
      op 0   x w m h          = 152
      op 1   w m h l          = 132
      op 2   w m l g          = 148
      op 3   w m l g m2       = 196   <- peak
      op 4   w l m2 w2        = 148
    At op 3: params w 48; state m 48 + m2 (replaces m) 48; saved activations l 4
    (h is dead); gradients g 48 (not an ancestor of the loss); no inputs."""
    memory = parsed(STEP)
    assert memory == PeakMemory(
        peak_bytes=196,
        op=3,
        op_name="graph.add",
        split=MemorySplit(params=48, gradients=48, optimizer_state=96, activations=4, inputs=0),
    )
    assert memory.split.total == memory.peak_bytes
    assert memory.describe() == (
        "peak 196 bytes live at op 3 (graph.add): params 48 bytes, gradients 48 bytes, "
        "optimizer state 96 bytes, saved activations 4 bytes, inputs 0 bytes"
    )
    assert memory.to_json()["split_bytes"] == {
        "params": 48,
        "gradients": 48,
        "optimizer_state": 96,
        "activations": 4,
        "inputs": 0,
    }


def test_forward_program_is_activations_params_and_inputs() -> None:
    """No training marks: every result is an activation. x, w, a, b 64 B each, c 4 B:
    op 0 x w a = 192; op 1 a b = 128 (x and w are dead after op 0); op 2 b c = 68."""
    memory = parsed("""
func.func @main(%x: tensor<4x4xf32>, %w: tensor<4x4xf32> {graph.param}) -> tensor<f32> {
  %a = graph.matmul %x, %w : tensor<4x4xf32>
  %b = graph.relu %a : tensor<4x4xf32>
  %c = graph.reduce %b {kind = "sum", axes = array<i64: 0, 1>, keepdims = false} : tensor<f32>
  func.return %c : tensor<f32>
}
""")
    assert (memory.peak_bytes, memory.op) == (192, 0)
    assert memory.split == MemorySplit(
        params=64, gradients=0, optimizer_state=0, activations=64, inputs=64
    )


def test_unused_values_live_only_where_they_are_made() -> None:
    """An unused argument is live at the start only; an unused split half only at its
    split. Start: x 32 + unused 400 = 432, more than any op holds, so the peak is at
    the start (op None). x 32 B -> halves 16 B each; only the first is returned."""
    memory = parsed("""
func.func @main(%x: tensor<8xf32>, %unused: tensor<100xf32>) -> tensor<4xf32> {
  %a, %b = graph.split %x {axis = 0 : i64, sizes = array<i64: 4, 4>} : tensor<4xf32>, tensor<4xf32>
  %c = graph.relu %a : tensor<4xf32>
  func.return %c : tensor<4xf32>
}
""")
    assert (memory.peak_bytes, memory.op, memory.op_name) == (432, None, None)
    assert memory.split.inputs == 432
    assert "at the start" in memory.describe()


def test_linear_time_on_ten_thousand_ops() -> None:
    builder = GraphBuilder()
    value = builder.input("x", [64, 64])
    for _ in range(10_000):
        value = builder.relu(value)
    function = entry_function(builder.build(value))
    start = time.perf_counter()
    memory = peak_memory(function)
    assert time.perf_counter() - start < 1.0
    # A chain holds its operand and its result at each op: two 16 KiB tensors.
    assert memory.peak_bytes == 2 * 64 * 64 * 4
