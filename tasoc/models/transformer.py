"""`zoo:transformer`: the Transformer benchmark of FlexFlow and TensorOpt.

The layers are those of Vaswani et al. ("Attention Is All You Need", 2017), which
TensorOpt cites for its Transformer: multi-head self-attention and a relu
feed-forward block of width `ffn_expansion * hidden`, each followed by a residual
add and layer norm (post-norm); decoder layers add attention over the encoder's
output between the two. They are built from `tasoc.models.attention`, the pieces
`zoo:bert` uses, so the two differ only in the feed-forward activation (relu here,
gelu there) and the shapes.

Shapes follow FlexFlow's Transformer example (`examples/cpp/Transformer` in
flexflow/FlexFlow, read for its shapes): 12 layers, hidden 1024, 16 heads, sequence
512; the input is hidden states `x: [batch, seq, hidden]` (the example's embedding
lookup is commented out) and a final linear layer maps each position to one value
(the example trains it with MSE on random labels). Batch is 64, FlexFlow's per-GPU
batch. The example's encoder layer is only attention then two dense layers; this one
has the residuals, norms and 4x-wide feed-forward block of the paper.

TensorOpt (Table 1) trains a Transformer of 9.7 GB of parameters without giving its
shapes; 12 layers at `hidden=4096` (12 * 12 * 4096^2 weights, 9.66 GB in f32) is that
size, so `transformer?hidden=4096` stands in for it.

With `decoder_layers > 0` the model is an encoder-decoder: a second input
`y: [batch, seq, hidden]` (target-side hidden states) goes through the decoder layers,
which attend to the last encoder layer's output, and the final linear layer reads the
decoder. Decoder self-attention is not masked: the graph dialect has no op to build
a causal mask short of a `seq x seq` constant in the IR text, and FlexFlow's
encoder-decoder variant has no mask either.
"""

from __future__ import annotations

from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.builder import GraphBuilder
from tasoc.models.attention import TransformerBlocks, linear, require_heads_divide
from tasoc.models.registry import ZooError, register, require_positive


@register(
    loss="mse",
    source="Vaswani et al., Attention Is All You Need (NeurIPS 2017); shapes of FlexFlow's "
    "Transformer example; TensorOpt's Transformer at hidden=4096",
    small={"layers": 2, "decoder_layers": 1, "hidden": 16, "heads": 4, "seq": 6, "batch": 2},
)
def transformer(
    *,
    layers: int = 12,
    decoder_layers: int = 0,
    hidden: int = 1024,
    heads: int = 16,
    ffn_expansion: int = 4,
    seq: int = 512,
    batch: int = 64,
) -> ModuleOp:
    """Transformer encoder stack (or encoder-decoder) on hidden states; one value per position."""
    require_positive(
        layers=layers,
        hidden=hidden,
        heads=heads,
        ffn_expansion=ffn_expansion,
        seq=seq,
        batch=batch,
    )
    if decoder_layers < 0:
        raise ZooError(f"option 'decoder_layers' must be non-negative, got {decoder_layers}")
    require_heads_divide(hidden, heads)
    g = GraphBuilder()
    x = g.input("x", (batch, seq, hidden))
    y = g.input("y", (batch, seq, hidden)) if decoder_layers else None
    blocks = TransformerBlocks(
        g,
        batch=batch,
        hidden=hidden,
        heads=heads,
        ffn_width=ffn_expansion * hidden,
        activation=g.relu,
    )
    for index in range(layers):
        x = blocks.encoder_layer(x, f"enc{index}")
    out = x
    if y is not None:
        for index in range(decoder_layers):
            y = blocks.decoder_layer(y, x, f"dec{index}")
        out = y
    return g.build(linear(g, out, "head", 1))
