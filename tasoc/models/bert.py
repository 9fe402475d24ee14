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
the batch. The layer is built from the pieces in `tasoc.models.attention`, which
`zoo:transformer` shares.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.builder import GraphBuilder
from tasoc.models.attention import TransformerBlocks, require_heads_divide
from tasoc.models.registry import register, require_positive

FFN_EXPANSION = 4
"""Width of the feed-forward block relative to the hidden size, as in BERT."""


@register(
    loss="mse",
    source="Devlin et al., BERT (NAACL 2019); shapes as in TASO's examples/bert.py, "
    "with its dead attention branch fixed",
    small={"layers": 2, "hidden": 64, "heads": 4, "seq": 16},
)
def bert(
    *, layers: int = 8, hidden: int = 1024, heads: int = 16, seq: int = 64, batch: int = 1
) -> ModuleOp:
    """BERT encoder layers (attention + feed-forward) on [batch, seq, hidden] hidden states."""
    require_positive(layers=layers, hidden=hidden, heads=heads, seq=seq, batch=batch)
    require_heads_divide(hidden, heads)
    g = GraphBuilder()
    x = g.input("x", (batch, seq, hidden))
    blocks = TransformerBlocks(
        g,
        batch=batch,
        hidden=hidden,
        heads=heads,
        ffn_width=FFN_EXPANSION * hidden,
        activation=g.gelu,
    )
    for index in range(layers):
        x = blocks.encoder_layer(x, f"l{index}")
    return g.build(x)
