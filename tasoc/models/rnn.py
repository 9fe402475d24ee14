"""The LSTM models of the zoo: `rnn`, `brnn` (SwapAdvisor) and `rnntc`, `rnnlm`, `nmt` (FlexFlow).

All five unroll the same LSTM cell (Hochreiter & Schmidhuber 1997) over a fixed number
of time steps, with one set of weights per layer shared by every step of that layer,
as the benchmarks do. One step from input `x` and state `(h, c)`:

    z = x @ wx + h @ wh + b               wx: [inputs, 4*hidden], wh: [hidden, 4*hidden]
    i, f, g, o = split(z, 4 equal parts)  (input, forget, candidate, output gates)
    c' = sigmoid(f) * c + sigmoid(i) * tanh(g)
    h' = sigmoid(o) * tanh(c')

That is 14 graph ops per step: 2 matmuls, 3 adds, 1 split, 3 sigmoids, 2 tanhs, 3 muls.
The input and recurrent products are separate matmuls, as in cuDNN's and FlexFlow's
LSTM; merging them (or the matmuls of all steps that read the same input) is left to
the optimizers. The cell has one bias of `4*hidden` (FlexFlow's and cuDNN's two
biases per gate add up to one); the output layers, like every dense layer of
FlexFlow's benchmarks, have none. Sequences start from a zero state, one
`graph.zeros` shared by every layer that starts from it (FlexFlow's zeroed hx/cx).

Sequences are batch-major, `[batch, seq, features]`, and are cut into time steps by
one reshape to `[batch, seq * features]` and one split; outputs are stacked back by
one concat and one reshape. The steps are emitted layer by layer, the order a
framework runs them in, so the program's default schedule keeps one layer's weights
live at a time (what SwapAdvisor's schedule search looks for).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.models.attention import dot_product_attention, linear
from tasoc.models.registry import register, require_positive

GATES = 4
"""An LSTM computes four gate pre-activations per hidden unit: input, forget,
candidate and output, in that order within `z`."""

IDS_DTYPE = "i32"
"""Token ids; i32 because JAX without x64 mode has no i64."""


class LSTMState(NamedTuple):
    """The recurrent state an LSTM step reads and writes: hidden `h` and cell `c`."""

    h: SSAValue
    c: SSAValue


@dataclass(frozen=True, slots=True)
class LSTMWeights:
    """One layer's weights, read by every time step of that layer."""

    w_x: SSAValue
    w_h: SSAValue
    bias: SSAValue
    hidden: int

    @classmethod
    def create(cls, g: GraphBuilder, prefix: str, inputs: int, hidden: int) -> LSTMWeights:
        """Fresh weights `{prefix}_wx`, `{prefix}_wh`, `{prefix}_b` for `inputs` features."""
        return cls(
            w_x=g.param(f"{prefix}_wx", (inputs, GATES * hidden)),
            w_h=g.param(f"{prefix}_wh", (hidden, GATES * hidden)),
            bias=g.param(f"{prefix}_b", (GATES * hidden,)),
            hidden=hidden,
        )


def lstm_step(g: GraphBuilder, w: LSTMWeights, x: SSAValue, state: LSTMState) -> LSTMState:
    """One LSTM step: the new state from input `x` ([batch, inputs]) and `state`."""
    z = g.add(g.add(g.matmul(x, w.w_x), g.matmul(state.h, w.w_h)), w.bias)
    in_gate, forget_gate, candidate, out_gate = g.split(z, axis=-1, sizes=(w.hidden,) * GATES)
    c = g.add(
        g.mul(g.sigmoid(forget_gate), state.c),
        g.mul(g.sigmoid(in_gate), g.tanh(candidate)),
    )
    return LSTMState(g.mul(g.sigmoid(out_gate), g.tanh(c)), c)


def lstm_layer(
    g: GraphBuilder, w: LSTMWeights, xs: list[SSAValue], state: LSTMState
) -> tuple[list[SSAValue], LSTMState]:
    """Run one layer over the steps `xs` from `state`: its hidden states and final state."""
    outputs = []
    for x in xs:
        state = lstm_step(g, w, x, state)
        outputs.append(state.h)
    return outputs, state


def lstm_stack(
    g: GraphBuilder, xs: list[SSAValue], hidden: int, prefixes: list[str], initial: list[LSTMState]
) -> tuple[list[SSAValue], list[LSTMState]]:
    """Stacked layers (weights `{prefix}_...`, one prefix per layer), each starting from
    its `initial` state and reading the hidden states of the layer below.

    Returns the top layer's hidden states and every layer's final state.
    """
    finals = []
    for prefix, state in zip(prefixes, initial, strict=True):
        weights = LSTMWeights.create(g, prefix, shape_of(xs[0])[-1], hidden)
        xs, final = lstm_layer(g, weights, xs, state)
        finals.append(final)
    return xs, finals


def zero_state(g: GraphBuilder, batch: int, hidden: int) -> LSTMState:
    """The all-zero starting state; one `graph.zeros` serves as both h and c."""
    zeros = g.zeros((batch, hidden))
    return LSTMState(zeros, zeros)


def unstack_steps(g: GraphBuilder, sequence: SSAValue) -> list[SSAValue]:
    """[batch, seq, features] -> seq values of [batch, features], one reshape + one split."""
    batch, seq, features = shape_of(sequence)
    flat = g.reshape(sequence, (batch, seq * features))
    return g.split(flat, axis=1, sizes=(features,) * seq)


def stack_steps(g: GraphBuilder, steps: list[SSAValue]) -> SSAValue:
    """seq values of [batch, features] -> [batch, seq, features], one concat + one reshape."""
    batch, features = shape_of(steps[0])
    return g.reshape(g.concat(steps, axis=1), (batch, len(steps), features))


def _embedded_steps(
    g: GraphBuilder, ids: SSAValue, table: str, vocab: int, embed: int
) -> list[SSAValue]:
    """Look token `ids` ([batch, seq]) up in a fresh `[vocab, embed]` table, cut into steps."""
    return unstack_steps(g, g.embedding(ids, g.param(table, (vocab, embed))))


def _layer_names(prefix: str, layers: int) -> list[str]:
    return [f"{prefix}{index}" for index in range(layers)]


# --------------------------------------------------------------------- SwapAdvisor


@register(
    loss="mse",
    source="Hochreiter & Schmidhuber, LSTM (1997); SwapAdvisor's RNN-8-8K "
    "(Huang thesis ch. 5: 8 layers, hidden 8K, batch 256)",
    small={"layers": 2, "hidden": 16, "seq": 4, "batch": 2},
)
def rnn(*, layers: int = 8, hidden: int = 8192, seq: int = 40, batch: int = 256) -> ModuleOp:
    """Stacked LSTM layers over a [batch, seq, hidden] sequence; returns the top layer's states."""
    require_positive(layers=layers, hidden=hidden, seq=seq, batch=batch)
    g = GraphBuilder()
    xs = unstack_steps(g, g.input("x", (batch, seq, hidden)))
    zero = zero_state(g, batch, hidden)
    top, _ = lstm_stack(g, xs, hidden, _layer_names("l", layers), [zero] * layers)
    return g.build(stack_steps(g, top))


@register(
    loss="mse",
    source="Schuster & Paliwal, Bidirectional RNNs (1997); SwapAdvisor's BRNN-4-8K "
    "(Huang thesis ch. 5: 4 layers, hidden 8K, batch 128)",
    small={"layers": 2, "hidden": 16, "seq": 4, "batch": 2},
)
def brnn(*, layers: int = 4, hidden: int = 8192, seq: int = 40, batch: int = 128) -> ModuleOp:
    """Bidirectional LSTM layers; each step's output joins both directions' hidden states."""
    require_positive(layers=layers, hidden=hidden, seq=seq, batch=batch)
    g = GraphBuilder()
    xs = unstack_steps(g, g.input("x", (batch, seq, hidden)))
    zero = zero_state(g, batch, hidden)
    for layer in range(layers):
        inputs = shape_of(xs[0])[-1]
        forward = LSTMWeights.create(g, f"l{layer}_fw", inputs, hidden)
        backward = LSTMWeights.create(g, f"l{layer}_bw", inputs, hidden)
        forward_out, _ = lstm_layer(g, forward, xs, zero)
        backward_out, _ = lstm_layer(g, backward, xs[::-1], zero)
        # The backward sub-layer saw step t at position seq-1-t: re-align before joining.
        xs = [
            g.concat([f, b], axis=-1)
            for f, b in zip(forward_out, reversed(backward_out), strict=True)
        ]
    return g.build(stack_steps(g, xs))


# ------------------------------------------------------------------------ FlexFlow

_FLEXFLOW = "FlexFlow's evaluation (Jia thesis ch. 3, Table 3.3; 40 unrolled steps, batch 64)"


@register(
    loss="softmax-cross-entropy",
    source=f"RNN text classification on Movie Reviews; {_FLEXFLOW}",
    small={"layers": 2, "hidden": 16, "embed": 8, "vocab": 50, "seq": 4, "batch": 2},
)
def rnntc(
    *,
    layers: int = 4,
    hidden: int = 1024,
    embed: int = 1024,
    vocab: int = 18765,
    classes: int = 2,
    seq: int = 40,
    batch: int = 64,
) -> ModuleOp:
    """LSTM text classifier: embedding, LSTM layers, softmax over classes at the last step."""
    require_positive(
        layers=layers,
        hidden=hidden,
        embed=embed,
        vocab=vocab,
        classes=classes,
        seq=seq,
        batch=batch,
    )
    g = GraphBuilder()
    xs = _embedded_steps(g, g.input("ids", (batch, seq), IDS_DTYPE), "embedding", vocab, embed)
    zero = zero_state(g, batch, hidden)
    top, _ = lstm_stack(g, xs, hidden, _layer_names("l", layers), [zero] * layers)
    return g.build(g.softmax(linear(g, top[-1], "classifier", classes), axis=-1))


@register(
    loss="softmax-cross-entropy",
    source=f"Zaremba et al., RNN regularization (2014), Penn Treebank; {_FLEXFLOW}",
    small={"layers": 2, "hidden": 16, "embed": 8, "vocab": 50, "seq": 4, "batch": 2},
)
def rnnlm(
    *,
    layers: int = 2,
    hidden: int = 2048,
    embed: int = 2048,
    vocab: int = 10000,
    seq: int = 40,
    batch: int = 64,
) -> ModuleOp:
    """LSTM language model: embedding, LSTM layers, softmax over the vocabulary at every step."""
    require_positive(layers=layers, hidden=hidden, embed=embed, vocab=vocab, seq=seq, batch=batch)
    g = GraphBuilder()
    xs = _embedded_steps(g, g.input("ids", (batch, seq), IDS_DTYPE), "embedding", vocab, embed)
    zero = zero_state(g, batch, hidden)
    top, _ = lstm_stack(g, xs, hidden, _layer_names("l", layers), [zero] * layers)
    return g.build(g.softmax(linear(g, stack_steps(g, top), "softmax_w", vocab), axis=-1))


@register(
    loss="softmax-cross-entropy",
    source=f"Wu et al., GNMT (2016) with Luong-style attention (2015); {_FLEXFLOW}",
    small={"layers": 2, "hidden": 16, "embed": 8, "vocab": 50, "seq": 4, "batch": 2},
)
def nmt(
    *,
    layers: int = 2,
    hidden: int = 1024,
    embed: int = 1024,
    vocab: int = 20480,
    seq: int = 40,
    batch: int = 64,
) -> ModuleOp:
    """LSTM encoder-decoder with attention on the top decoder layer; next-token softmax."""
    require_positive(layers=layers, hidden=hidden, embed=embed, vocab=vocab, seq=seq, batch=batch)
    g = GraphBuilder()
    source_ids = g.input("src_ids", (batch, seq), IDS_DTYPE)
    target_ids = g.input("tgt_ids", (batch, seq), IDS_DTYPE)
    source = _embedded_steps(g, source_ids, "src_embedding", vocab, embed)
    target = _embedded_steps(g, target_ids, "tgt_embedding", vocab, embed)
    zero = zero_state(g, batch, hidden)
    encoded, final_states = lstm_stack(
        g, source, hidden, _layer_names("enc", layers), [zero] * layers
    )
    # Each decoder layer starts where the encoder layer below it ended (FlexFlow's NMT).
    decoded, _ = lstm_stack(g, target, hidden, _layer_names("dec", layers), final_states)

    # Luong's "general" global attention, for all decoder steps at once: it sits on top
    # of the last decoder layer and feeds nothing back, so the steps are independent.
    # (Bahdanau's additive score, which the thesis cites, would need a tanh over a
    # [batch, seq, seq, hidden] tensor; the multiplicative one is two matmuls.)
    memory = stack_steps(g, encoded)  # [batch, seq, hidden]
    states = stack_steps(g, decoded)
    queries = linear(g, states, "attn_wa", hidden)
    context = dot_product_attention(g, queries, g.transpose(memory, (0, 2, 1)), memory)
    attentional = g.tanh(linear(g, g.concat([context, states], axis=-1), "attn_wc", hidden))
    return g.build(g.softmax(linear(g, attentional, "softmax_w", vocab), axis=-1))
