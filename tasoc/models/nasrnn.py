"""`zoo:nasrnn`: the NASNet recurrent cell, unrolled, as in TASO's evaluation.

The cell is the one Zoph & Le found by architecture search ("Neural Architecture
Search with Reinforcement Learning", ICLR 2017). The graph follows the structure of
TASO's benchmark, `examples/nasrnn.py` in jiazhihao/TASO (read, not copied): hidden
size 512, 5 time steps, batch 1; each step computes eight branches
`x @ Wx_i + h @ Wh_i` and folds them through the searched tree of add/mul and
relu/sigmoid/tanh into the next hidden state. The op sequence per step is TASO's, so
the rewrites TASO finds (e.g. merging the eight matmuls that share an input into one
matmul with concatenated weights) are available here too.

Two deliberate departures, both about arguments rather than ops:
- the weights are shared across time steps, as in a real RNN; TASO's script makes
  fresh weights for every step (so its graph has `length` times more parameters,
  with the same ops);
- the initial hidden state `h0` is an input, not a weight: it is run-time state,
  and with `batch > 1` a batch-shaped weight would make no sense.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder
from tasoc.models.registry import register, require_positive

BRANCHES = 8
"""Input/hidden projection pairs per step in the searched cell."""


def _cell(
    g: GraphBuilder, x: SSAValue, h: SSAValue, w_x: list[SSAValue], w_h: list[SSAValue]
) -> SSAValue:
    """One step of the searched cell: the new hidden state from input `x` and state `h`."""
    t = [g.add(g.matmul(x, wx), g.matmul(h, wh)) for wx, wh in zip(w_x, w_h, strict=True)]
    # The first level of the searched tree pairs branches under different activations.
    relu_sig = g.add(g.relu(t[0]), g.sigmoid(t[3]))
    sig_tanh = g.add(g.sigmoid(t[1]), g.tanh(t[2]))
    gate_tanh = g.mul(g.sigmoid(t[4]), g.tanh(t[5]))
    gate_relu = g.mul(g.sigmoid(t[6]), g.relu(t[7]))
    # The second and third levels combine those four into one value.
    left = g.add(g.sigmoid(sig_tanh), g.tanh(gate_tanh))
    right = g.mul(g.tanh(relu_sig), g.tanh(gate_relu))
    return g.tanh(g.mul(g.tanh(left), g.tanh(right)))


@register(
    loss="mse",
    source="Zoph & Le, Neural Architecture Search with Reinforcement Learning (ICLR 2017); "
    "graph structure as in TASO's examples/nasrnn.py",
    small={"hidden": 32, "length": 2},
)
def nasrnn(*, hidden: int = 512, length: int = 5, batch: int = 1) -> ModuleOp:
    """NASNet RNN cell unrolled over `length` steps; returns the last hidden state."""
    require_positive(hidden=hidden, length=length, batch=batch)
    g = GraphBuilder()
    inputs = [g.input(f"x{step}", (batch, hidden)) for step in range(length)]
    state = g.input("h0", (batch, hidden))
    w_x = [g.param(f"wx{i}", (hidden, hidden)) for i in range(BRANCHES)]
    w_h = [g.param(f"wh{i}", (hidden, hidden)) for i in range(BRANCHES)]
    for x in inputs:
        state = _cell(g, x, state, w_x, w_h)
    return g.build(state)
