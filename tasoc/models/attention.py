"""Attention and feed-forward pieces shared by the zoo's models.

`zoo:bert`, `zoo:transformer` and the attention layer of `zoo:nmt` all compute
softmax(Q K^T) V; the first two also share multi-head projections, the position-wise
feed-forward block and post-norm residuals (Vaswani et al., "Attention Is All You
Need", 2017). Writing them once keeps the models' graphs the same op for op where
the papers agree, so a rewrite found on one applies to the others.

Every projection is a bias-free `graph.matmul` against a `[rows, cols]` weight that
broadcasts over the batch: the form TASO's matmul rewrites (e.g. merging the Q/K/V
projections that share an input) look for, and the form of FlexFlow's benchmarks,
whose dense layers have no bias. The same `linear`, `mlp_weights` and `relu_mlp` build the
multi-layer perceptrons of `zoo:dlrm` and `zoo:candle_uno` and the output layers
of the RNN models. Weights are named `{prefix}_...` so a model's layers are told
apart in the program's arguments.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.models.registry import ZooError

Activation = Callable[[SSAValue], SSAValue]


def require_heads_divide(hidden: int, heads: int) -> None:
    """Raise ZooError unless the `hidden` option splits evenly into `heads` heads."""
    if hidden % heads:
        raise ZooError(f"option 'hidden' ({hidden}) must be divisible by 'heads' ({heads})")


def linear(g: GraphBuilder, x: SSAValue, weight: str, cols: int) -> SSAValue:
    """`x @ weight`, with a fresh `[x's last dim, cols]` weight named `weight`."""
    return g.matmul(x, g.param(weight, (shape_of(x)[-1], cols)))


def mlp_weights(g: GraphBuilder, inputs: int, widths: Sequence[int], prefix: str) -> list[SSAValue]:
    """Fresh weights `{prefix}_w0`, `{prefix}_w1`, ... for bias-free linear layers of
    `widths` on `inputs` features; kept apart from `relu_mlp` so that one set can
    serve several inputs (Uno's shared drug encoders)."""
    rows = [inputs, *widths[:-1]]
    return [
        g.param(f"{prefix}_w{index}", (fan_in, width))
        for index, (fan_in, width) in enumerate(zip(rows, widths, strict=True))
    ]


def relu_mlp(g: GraphBuilder, x: SSAValue, weights: Sequence[SSAValue]) -> SSAValue:
    """`x` through linear layers with `weights`, each followed by relu."""
    for weight in weights:
        x = g.relu(g.matmul(x, weight))
    return x


def dot_product_attention(
    g: GraphBuilder, q: SSAValue, k_t: SSAValue, v: SSAValue, scale: SSAValue | None = None
) -> SSAValue:
    """softmax(q @ k_t [* scale]) @ v, the softmax over the last (key) axis.

    `k_t` is K already transposed (`[..., d, keys]`), so callers choose the cheapest
    way to get it there (a head split can permute straight to K^T).
    """
    scores = g.matmul(q, k_t)
    if scale is not None:
        scores = g.scale(scores, scale)
    return g.matmul(g.softmax(scores, axis=-1), v)


class TransformerBlocks:
    """Emits multi-head attention, feed-forward and residual-norm sublayers.

    Holds what all layers of one model share: the builder, batch, hidden size, heads,
    the feed-forward width and activation, and one `graph.constant` 1/sqrt(head_dim)
    (emitted when the blocks are made, before any layer) that scales every layer's
    attention logits to unit variance.
    """

    def __init__(
        self,
        g: GraphBuilder,
        *,
        batch: int,
        hidden: int,
        heads: int,
        ffn_width: int,
        activation: Activation,
    ) -> None:
        self.g = g
        self.batch, self.hidden, self.heads = batch, hidden, heads
        self.head_dim = hidden // heads
        self.ffn_width = ffn_width
        self.activation = activation
        self.inv_sqrt_head_dim = g.constant(1.0 / math.sqrt(self.head_dim))

    def norm(self, x: SSAValue, prefix: str) -> SSAValue:
        """Layer norm over the hidden axis with weights `{prefix}_gamma`, `{prefix}_beta`."""
        gamma = self.g.param(f"{prefix}_gamma", (self.hidden,))
        beta = self.g.param(f"{prefix}_beta", (self.hidden,))
        return self.g.layernorm(x, gamma, beta, axis=-1)

    def _split_heads(self, t: SSAValue, perm: tuple[int, int, int, int]) -> SSAValue:
        """[batch, seq, hidden] -> [batch, seq, heads, head_dim], then permuted by `perm`."""
        seq = shape_of(t)[1]
        per_head = self.g.reshape(t, (self.batch, seq, self.heads, self.head_dim))
        return self.g.transpose(per_head, perm)

    def attention(self, queries: SSAValue, memory: SSAValue, prefix: str) -> SSAValue:
        """Multi-head attention of `queries` over `memory`, output-projected.

        Self-attention passes the same value twice; cross-attention passes the
        decoder's states and the encoder's output. Weights: `{prefix}_wq/wk/wv/wo`.
        """
        g, hidden = self.g, self.hidden
        q = self._split_heads(linear(g, queries, f"{prefix}_wq", hidden), (0, 2, 1, 3))
        # K goes straight to [batch, heads, head_dim, seq]: that is K^T for Q @ K^T.
        k_t = self._split_heads(linear(g, memory, f"{prefix}_wk", hidden), (0, 2, 3, 1))
        v = self._split_heads(linear(g, memory, f"{prefix}_wv", hidden), (0, 2, 1, 3))
        context = dot_product_attention(g, q, k_t, v, self.inv_sqrt_head_dim)
        seq = shape_of(queries)[1]
        merged = g.reshape(g.transpose(context, (0, 2, 1, 3)), (self.batch, seq, hidden))
        return linear(g, merged, f"{prefix}_wo", hidden)

    def feed_forward(self, x: SSAValue, prefix: str) -> SSAValue:
        """activation(x @ `{prefix}_w1`) @ `{prefix}_w2`, `ffn_width` wide inside."""
        up = self.activation(linear(self.g, x, f"{prefix}_w1", self.ffn_width))
        return linear(self.g, up, f"{prefix}_w2", self.hidden)

    def residual_norm(self, x: SSAValue, sublayer_out: SSAValue, prefix: str) -> SSAValue:
        """layernorm(x + sublayer(x)): the post-norm residual of BERT and Vaswani et al."""
        return self.norm(self.g.add(x, sublayer_out), prefix)

    def encoder_layer(self, x: SSAValue, prefix: str) -> SSAValue:
        """Self-attention then feed-forward, each with a residual and layer norm."""
        x = self.residual_norm(x, self.attention(x, x, prefix), f"{prefix}_ln1")
        return self.residual_norm(x, self.feed_forward(x, f"{prefix}_ffn"), f"{prefix}_ln2")

    def decoder_layer(self, y: SSAValue, memory: SSAValue, prefix: str) -> SSAValue:
        """Self-attention, attention over the encoder's `memory`, then feed-forward."""
        y = self.residual_norm(y, self.attention(y, y, f"{prefix}_self"), f"{prefix}_ln1")
        y = self.residual_norm(y, self.attention(y, memory, f"{prefix}_cross"), f"{prefix}_ln2")
        return self.residual_norm(y, self.feed_forward(y, f"{prefix}_ffn"), f"{prefix}_ln3")
