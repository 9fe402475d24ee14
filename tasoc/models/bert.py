"""`zoo:bert`: a stack of BERT encoder layers at the shapes of TASO's evaluation.

TASO benchmarks BERT as 8 attention layers on a 64 x 1024 input with 16 heads
(`examples/bert.py` in jiazhihao/TASO, read for its structure and shapes, not copied).
That script has defects that make its graph something other than attention:
- its final linear layer multiplies the layer's *input* rather than the attention
  output, so the whole attention branch is dead code that any optimizer may delete;
- it multiplies Q by K without transposing K (it type-checks only because the
  sequence length equals the head size, 64), and has no scaling, softmax, residual,
  layer norm or feed-forward block.

This model builds the encoder layer as intended (Devlin et al., "BERT: Pre-training of
Deep Bidirectional Transformers for Language Understanding", 2019; Vaswani et al.,
2017): Q/K/V projections, heads split by reshape/transpose, softmax(Q K^T / sqrt(d))
V, heads merged back, output projection, residual + layer norm, a gelu feed-forward
block of width 4 x hidden, residual + layer norm. Like TASO's graph it starts from
hidden states (no embedding lookup) and has no biases, so every projection is one
`graph.matmul` with a weight, the shape TASO's matmul rewrites look for. The input
is `[batch, seq, hidden]`; matmuls against `[hidden, hidden]` weights broadcast over
the batch.
"""

from __future__ import annotations

import math

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder
from tasoc.models.registry import ZooError, register, require_positive

FFN_EXPANSION = 4
"""Width of the feed-forward block relative to the hidden size, as in BERT."""


class _EncoderLayer:
    """Emits one encoder layer; holds the shapes every layer shares."""

    def __init__(self, g: GraphBuilder, batch: int, seq: int, hidden: int, heads: int) -> None:
        self.g = g
        self.batch, self.seq, self.hidden, self.heads = batch, seq, hidden, heads
        self.head_dim = hidden // heads
        # One scalar for all layers: softmax(Q K^T / sqrt(d)) keeps logits at unit scale.
        self.inv_sqrt_head_dim = g.constant(1.0 / math.sqrt(self.head_dim))

    def _split_heads(self, t: SSAValue, perm: tuple[int, int, int, int]) -> SSAValue:
        """[batch, seq, hidden] -> [batch, seq, heads, head_dim], then permuted by `perm`."""
        per_head = self.g.reshape(t, (self.batch, self.seq, self.heads, self.head_dim))
        return self.g.transpose(per_head, perm)

    def _norm(self, x: SSAValue, prefix: str) -> SSAValue:
        gamma = self.g.param(f"{prefix}_gamma", (self.hidden,))
        beta = self.g.param(f"{prefix}_beta", (self.hidden,))
        return self.g.layernorm(x, gamma, beta, axis=-1)

    def _linear(self, t: SSAValue, weight: str, rows: int, cols: int) -> SSAValue:
        return self.g.matmul(t, self.g.param(weight, (rows, cols)))

    def __call__(self, x: SSAValue, prefix: str) -> SSAValue:
        """The layer's output for input `x`; its weights are named `{prefix}_...`."""
        g, hidden = self.g, self.hidden
        q = self._split_heads(self._linear(x, f"{prefix}_wq", hidden, hidden), (0, 2, 1, 3))
        # K goes straight to [batch, heads, head_dim, seq]: that is K^T for Q @ K^T.
        k_t = self._split_heads(self._linear(x, f"{prefix}_wk", hidden, hidden), (0, 2, 3, 1))
        v = self._split_heads(self._linear(x, f"{prefix}_wv", hidden, hidden), (0, 2, 1, 3))
        scores = g.scale(g.matmul(q, k_t), self.inv_sqrt_head_dim)
        context = g.matmul(g.softmax(scores, axis=-1), v)
        merged = g.reshape(g.transpose(context, (0, 2, 1, 3)), (self.batch, self.seq, hidden))
        attended = self._linear(merged, f"{prefix}_wo", hidden, hidden)
        x = self._norm(g.add(x, attended), f"{prefix}_ln1")

        width = FFN_EXPANSION * hidden
        up = g.gelu(self._linear(x, f"{prefix}_ffn_w1", hidden, width))
        down = self._linear(up, f"{prefix}_ffn_w2", width, hidden)
        return self._norm(g.add(x, down), f"{prefix}_ln2")


@register(
    source="Devlin et al., BERT (NAACL 2019); shapes as in TASO's examples/bert.py, "
    "with its dead attention branch fixed",
    small={"layers": 2, "hidden": 64, "heads": 4, "seq": 16},
)
def bert(
    *, layers: int = 8, hidden: int = 1024, heads: int = 16, seq: int = 64, batch: int = 1
) -> ModuleOp:
    """BERT encoder layers (attention + feed-forward) on [batch, seq, hidden] hidden states."""
    require_positive(layers=layers, hidden=hidden, heads=heads, seq=seq, batch=batch)
    if hidden % heads:
        raise ZooError(f"option 'hidden' ({hidden}) must be divisible by 'heads' ({heads})")
    g = GraphBuilder()
    x = g.input("x", (batch, seq, hidden))
    layer = _EncoderLayer(g, batch, seq, hidden, heads)
    for index in range(layers):
        x = layer(x, f"l{index}")
    return g.build(x)
