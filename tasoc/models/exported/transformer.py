"""BERT- and GPT-2-style transformers as `torch.onnx.export` (opset 17) writes the
Hugging Face models.

What such exports hold beyond matrix products: embeddings as Gather of a weight by
the ids; position ids from the ids' shape (BERT: a Slice of the `position_ids`
buffer up to `input_ids.size(1)`; GPT-2: `torch.arange` as a Range); every head
split and merge as a Reshape whose target is assembled at run time from `x.size()`
(Shape -> Gather/Slice -> Unsqueeze -> Concat); a Linear on a 3-D input as MatMul
by the transposed weight the exporter folded (`onnx::MatMul_<n>`) plus an Add of
the bias, and GPT-2's Conv1D as `addmm` (Reshape to 2-D, Gemm, Reshape back); the
attention mask as Unsqueeze/Cast/Sub/Mul by a large negative (BERT), the causal
mask as a Slice of the lower-triangular `bias` buffer and a Where (GPT-2, eager), or
as PyTorch's `scaled_dot_product_attention` export, Trilu of an Expand of ones and a
Where to -inf, with the scale computed as 1/Sqrt(Cast(Shape(q)[-1])) (GPT-2,
`attention="sdpa"`); GELU as its Erf form (BERT) or tanh form with Pow (GPT-2);
LayerNormalization, or the ReduceMean/Sub/Pow/ReduceMean/Add/Sqrt/Div chain that
exporters before opset 17 write (`layernorm="decomposed"`).

With `dynamic=True`, batch and sequence are dynamic axes (`batch_size`,
`sequence_length`), as the Hugging Face exporters declare them. Weights are seeded
draws scaled by 1/sqrt(fan-in), so that attention scores and activations stay O(1).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
import onnx

from tasoc.models.exported.writer import FLOAT, INT64, Dim, Writer

INT64_MAX = np.iinfo(np.int64).max

MASK_FILL = -10000.0
"""What BERT adds to masked attention scores: (1 - mask) * -10000, as Hugging Face
wrote it before it moved to the float32 minimum (which overflows to -inf for mask
values other than 0 and 1, such as the random ones `tasoc run` draws)."""


class TextWriter(Writer):
    """A `Writer` with the pieces of Hugging Face transformer exports."""

    def sizes(self, x: str, *indices: int) -> list[str]:
        """`x.size(i)` for each index: a Shape and a Gather of one index, each."""
        return [self.op("Gather", self.op("Shape", x), self.constant(i), axis=0) for i in indices]

    def unsqueezed(self, *scalars: str) -> list[str]:
        return [self.op("Unsqueeze", s, self.constant([0])) for s in scalars]

    def leading_sizes(self, x: str, drop: int) -> str:
        """`x.size()[:-drop]`: a Slice of the shape."""
        shape = self.op("Shape", x)
        return self.op(
            "Slice", shape, self.constant([0]), self.constant([-drop]), self.constant([0])
        )

    def linear(self, x: str, fan_in: int, out: int, name: str) -> str:
        """`nn.Linear` on a 3-D input: MatMul by the folded transposed weight, Add bias."""
        with self.scope(name):
            weight = self.normal((fan_in, out), 1 / math.sqrt(fan_in))
            product = self.op("MatMul", x, self.folded("MatMul", weight))
            return self.op("Add", self.param("bias", self.normal((out,), 0.1)), product)

    def conv1d(self, x: str, fan_in: int, out: int, name: str) -> str:
        """GPT-2's Conv1D: `addmm(bias, x.view(-1, x.size(-1)), weight).view(...)`."""
        with self.scope(name):
            size_out = self.op("Concat", self.leading_sizes(x, 1), self.constant([out]), axis=0)
            (last,) = self.unsqueezed(*self.sizes(x, -1))
            flat = self.op("Concat", self.constant([-1]), last, axis=0)
            flat = self.op("Reshape", x, flat, allowzero=0)
            weight = self.param("weight", self.normal((fan_in, out), 1 / math.sqrt(fan_in)))
            bias = self.param("bias", self.normal((out,), 0.1))
            y = self.op("Gemm", flat, weight, bias, alpha=1.0, beta=1.0)
            return self.op("Reshape", y, size_out, allowzero=0)

    def layernorm(self, x: str, hidden: int, epsilon: float, decomposed: bool, name: str) -> str:
        """`nn.LayerNorm` over the last axis: LayerNormalization, or its decomposition."""
        with self.scope(name):
            weight = self.param("weight", self.uniform((hidden,), 0.8, 1.2))
            bias = self.param("bias", self.normal((hidden,), 0.1))
            if not decomposed:
                return self.op("LayerNormalization", x, weight, bias, axis=-1, epsilon=epsilon)
            mean = self.op("ReduceMean", x, axes=[-1], keepdims=1)
            centered = self.op("Sub", x, mean)
            square = self.op("Pow", centered, self.constant(2.0))
            variance = self.op("ReduceMean", square, axes=[-1], keepdims=1)
            deviation = self.op("Sqrt", self.op("Add", variance, self.constant(epsilon)))
            normalized = self.op("Div", centered, deviation)
            return self.op("Add", self.op("Mul", normalized, weight), bias)

    def gelu_erf(self, x: str) -> str:
        """`F.gelu(x)`: x * 0.5 * (1 + erf(x / sqrt 2)), as the exporter spells it."""
        erf = self.op("Erf", self.op("Div", x, self.constant(math.sqrt(2.0))))
        plus_one = self.op("Add", erf, self.constant(1.0))
        return self.op("Mul", self.op("Mul", x, plus_one), self.constant(0.5))

    def gelu_tanh(self, x: str) -> str:
        """GPT-2's `gelu_new`: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        half = self.op("Mul", x, self.constant(0.5))
        cube = self.op("Pow", x, self.constant(3.0))
        inner = self.op("Add", x, self.op("Mul", cube, self.constant(0.044715)))
        inner = self.op("Mul", inner, self.constant(math.sqrt(2.0 / math.pi)))
        plus_one = self.op("Add", self.op("Tanh", inner), self.constant(1.0))
        return self.op("Mul", half, plus_one)


def _axes(batch: int, seq: int, dynamic: bool) -> list[Dim]:
    return ["batch_size", "sequence_length"] if dynamic else [batch, seq]


# ------------------------------------------------------------------------------ BERT


def bert(
    batch: int = 1,
    seq: int = 128,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    intermediate: int = 3072,
    vocab: int = 30522,
    max_positions: int = 512,
    type_vocab: int = 2,
    layernorm: str = "fused",
    dynamic: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """Hugging Face's `BertModel` (bert-base by default): inputs `input_ids`,
    `attention_mask`, `token_type_ids`; outputs `last_hidden_state` and
    `pooler_output` (tanh of a Linear of the first token, taken by a Gather on axis
    1). `layernorm` is "fused" (LayerNormalization) or "decomposed"."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} must be a multiple of heads {heads}")
    if seq > max_positions:
        raise ValueError(f"seq {seq} is over max_positions {max_positions}")
    decomposed = _decomposed(layernorm)
    w = TextWriter(seed)
    axes = _axes(batch, seq, dynamic)
    ids = w.input("input_ids", INT64, axes)
    mask = w.input("attention_mask", INT64, axes)
    types = w.input("token_type_ids", INT64, axes)
    with w.scope("embeddings"):
        x = _bert_embeddings(w, ids, types, hidden, vocab, max_positions, type_vocab)
        x = w.layernorm(x, hidden, 1e-12, decomposed, "LayerNorm")
    extended = w.op("Unsqueeze", w.op("Unsqueeze", mask, w.constant([1])), w.constant([2]))
    extended = w.op("Cast", extended, to=FLOAT)
    extended = w.op("Mul", w.op("Sub", w.constant(1.0), extended), w.constant(MASK_FILL))
    for index in range(layers):
        with w.scope("encoder", f"layer.{index}"):
            x = _bert_layer(w, x, extended, hidden, heads, intermediate, decomposed)
    with w.scope("pooler"):
        first = w.op("Gather", x, w.constant(0), axis=1)
        with w.scope("dense"):
            weight = w.param("weight", w.normal((hidden, hidden), 1 / math.sqrt(hidden)))
            bias = w.param("bias", w.normal((hidden,), 0.1))
            pooled = w.op("Gemm", first, weight, bias, alpha=1.0, beta=1.0, transB=1)
        with w.scope("activation"):
            pooled = w.op("Tanh", pooled)
    w.output(x, "last_hidden_state", FLOAT, [*axes, hidden])
    w.output(pooled, "pooler_output", FLOAT, [axes[0], hidden])
    return w.model()


def _decomposed(layernorm: str) -> bool:
    if layernorm not in ("fused", "decomposed"):
        raise ValueError(f"layernorm must be 'fused' or 'decomposed', got {layernorm!r}")
    return layernorm == "decomposed"


def _bert_embeddings(
    w: TextWriter, ids: str, types: str, hidden: int, vocab: int, positions: int, type_vocab: int
) -> str:
    """Word + token type + position embeddings; the position ids are
    `self.position_ids[:, 0 : seq_length + 0]`, seq_length = `input_ids.size()[1]`."""
    with w.scope("word_embeddings"):
        words = w.op("Gather", w.param("weight", w.normal((vocab, hidden), 1.0)), ids)
    with w.scope("token_type_embeddings"):
        kinds = w.op("Gather", w.param("weight", w.normal((type_vocab, hidden), 1.0)), types)
    x = w.op("Add", words, kinds)
    (length,) = w.sizes(ids, 1)
    (end,) = w.unsqueezed(w.op("Add", length, w.constant(0)))
    buffer = w.param("position_ids", np.arange(positions, dtype=np.int64).reshape(1, -1))
    start, axis, step = w.constant([0]), w.constant([1]), w.constant([1])
    position_ids = w.op("Slice", buffer, start, end, axis, step)
    with w.scope("position_embeddings"):
        table = w.param("weight", w.normal((positions, hidden), 1.0))
        return w.op("Add", x, w.op("Gather", table, position_ids))


def _bert_layer(
    w: TextWriter, x: str, mask: str, hidden: int, heads: int, intermediate: int, decomposed: bool
) -> str:
    head = hidden // heads
    with w.scope("attention", "self"):
        q, k, v = (w.linear(x, hidden, hidden, name) for name in ("query", "key", "value"))

        def split_heads(t: str, perm: Sequence[int]) -> str:
            # transpose_for_scores: x.size()[:-1] + (heads, head), then a permute
            batch, length = w.unsqueezed(*w.sizes(t, 0), *w.sizes(t, 1))
            target = w.op("Concat", batch, length, w.constant([heads]), w.constant([head]), axis=0)
            return w.op("Transpose", w.op("Reshape", t, target, allowzero=0), perm=list(perm))

        # The key's permute and its transpose(-1, -2) merge into one Transpose.
        q, k, v = (
            split_heads(q, (0, 2, 1, 3)),
            split_heads(k, (0, 2, 3, 1)),
            split_heads(v, (0, 2, 1, 3)),
        )
        scores = w.op("Div", w.op("MatMul", q, k), w.constant(math.sqrt(head)))
        probs = w.op("Softmax", w.op("Add", scores, mask), axis=-1)
        context = w.op("Transpose", w.op("MatMul", probs, v), perm=[0, 2, 1, 3])
        batch, length = w.unsqueezed(*w.sizes(context, 0), *w.sizes(context, 1))
        merged = w.op("Concat", batch, length, w.constant([hidden]), axis=0)
        context = w.op("Reshape", context, merged, allowzero=0)
    with w.scope("attention", "output"):
        y = w.op("Add", w.linear(context, hidden, hidden, "dense"), x)
        x = w.layernorm(y, hidden, 1e-12, decomposed, "LayerNorm")
    with w.scope("intermediate"):
        y = w.linear(x, hidden, intermediate, "dense")
        with w.scope("intermediate_act_fn"):
            y = w.gelu_erf(y)
    with w.scope("output"):
        y = w.op("Add", w.linear(y, intermediate, hidden, "dense"), x)
        return w.layernorm(y, hidden, 1e-12, decomposed, "LayerNorm")


# ----------------------------------------------------------------------------- GPT-2


def gpt2(
    batch: int = 1,
    seq: int = 64,
    hidden: int = 768,
    layers: int = 12,
    heads: int = 12,
    vocab: int = 50257,
    max_positions: int = 1024,
    attention: str = "eager",
    layernorm: str = "fused",
    dynamic: bool = False,
    seed: int = 0,
) -> onnx.ModelProto:
    """Hugging Face's `GPT2LMHeadModel` (gpt2-small by default): input `input_ids`,
    output `logits` (the language-model head shares the token embedding: a MatMul by
    its folded transpose). `attention` is "eager" (the causal `bias` buffer sliced
    and a Where) or "sdpa" (`scaled_dot_product_attention(..., is_causal=True)`)."""
    if hidden % heads:
        raise ValueError(f"hidden {hidden} must be a multiple of heads {heads}")
    if seq > max_positions:
        raise ValueError(f"seq {seq} is over max_positions {max_positions}")
    if attention not in ("eager", "sdpa"):
        raise ValueError(f"attention must be 'eager' or 'sdpa', got {attention!r}")
    decomposed = _decomposed(layernorm)
    w = TextWriter(seed)
    axes = _axes(batch, seq, dynamic)
    ids = w.input("input_ids", INT64, axes)
    with w.scope("transformer"):
        (last,) = w.unsqueezed(*w.sizes(ids, -1))
        flat_ids = w.op("Reshape", ids, w.op("Concat", w.constant([-1]), last, axis=0), allowzero=0)
        (length,) = w.sizes(ids, -1)
        positions = w.op("Range", w.constant(0), length, w.constant(1))
        positions = w.op("Unsqueeze", positions, w.constant([0]))
        with w.scope("wte"):
            embedding = w.normal((vocab, hidden), 1.0)
            tokens = w.op("Gather", w.param("weight", embedding), flat_ids)
        with w.scope("wpe"):
            table = w.param("weight", w.normal((max_positions, hidden), 1.0))
            x = w.op("Add", tokens, w.op("Gather", table, positions))
        for index in range(layers):
            with w.scope(f"h.{index}"):
                x = _gpt2_block(w, x, hidden, heads, max_positions, attention, decomposed)
        x = w.layernorm(x, hidden, 1e-5, decomposed, "ln_f")
        # hidden_states.view(input_shape + (hidden_states.size(-1),))
        (width,) = w.unsqueezed(*w.sizes(x, -1))
        x = w.op("Reshape", x, w.op("Concat", w.op("Shape", ids), width, axis=0), allowzero=0)
    with w.scope("lm_head"):
        logits = w.op("MatMul", x, w.folded("MatMul", np.ascontiguousarray(embedding.T)))
    w.output(logits, "logits", FLOAT, [*axes, vocab])
    return w.model()


def _gpt2_block(
    w: TextWriter, x: str, hidden: int, heads: int, positions: int, attention: str, decomposed: bool
) -> str:
    y = w.layernorm(x, hidden, 1e-5, decomposed, "ln_1")
    with w.scope("attn"):
        y = _gpt2_attention(w, y, hidden, heads, positions, attention)
    x = w.op("Add", y, x)
    y = w.layernorm(x, hidden, 1e-5, decomposed, "ln_2")
    with w.scope("mlp"):
        y = w.conv1d(y, hidden, 4 * hidden, "c_fc")
        with w.scope("act"):
            y = w.gelu_tanh(y)
        y = w.conv1d(y, 4 * hidden, hidden, "c_proj")
    return w.op("Add", x, y)


def _gpt2_attention(
    w: TextWriter, x: str, hidden: int, heads: int, positions: int, attention: str
) -> str:
    head = hidden // heads
    qkv = w.conv1d(x, hidden, 3 * hidden, "c_attn")
    q, k, v = w.node("Split", [qkv, w.constant([hidden] * 3)], outputs=3, axis=2)

    def split_heads(t: str) -> str:
        target = w.op("Concat", w.leading_sizes(t, 1), w.constant([heads, head]), axis=0)
        return w.op("Transpose", w.op("Reshape", t, target, allowzero=0), perm=[0, 2, 1, 3])

    q, k, v = split_heads(q), split_heads(k), split_heads(v)
    if attention == "eager":
        context = _eager_attention(w, q, k, v, positions)
    else:
        context = _sdpa_attention(w, q, k, v)
    context = w.op("Transpose", context, perm=[0, 2, 1, 3])
    merged = w.op("Concat", w.leading_sizes(context, 2), w.constant([hidden]), axis=0)
    context = w.op("Reshape", context, merged, allowzero=0)
    return w.conv1d(context, hidden, hidden, "c_proj")


def _eager_attention(w: TextWriter, q: str, k: str, v: str, positions: int) -> str:
    """GPT2Attention._attn: scores / value.size(-1) ** 0.5, then
    `torch.where(self.bias[:, :, kl - ql : kl, :kl], scores, finfo.min)`."""
    scores = w.op("MatMul", q, w.op("Transpose", k, perm=[0, 1, 3, 2]))
    (head,) = w.sizes(v, -1)
    scores = w.op("Div", scores, w.op("Sqrt", w.op("Cast", head, to=FLOAT)))
    (query_length,) = w.sizes(q, -2)
    (key_length,) = w.sizes(k, -2)
    start, end = w.unsqueezed(w.op("Sub", key_length, query_length), key_length)
    causal = np.tril(np.ones((positions, positions), dtype=np.bool_)).reshape(1, 1, positions, -1)
    mask = w.op("Slice", w.param("bias", causal), start, end, w.constant([2]), w.constant([1]))
    (end,) = w.unsqueezed(key_length)
    mask = w.op("Slice", mask, w.constant([0]), end, w.constant([3]), w.constant([1]))
    fill = w.constant(np.float32(np.finfo(np.float32).min))
    probs = w.op("Softmax", w.op("Where", mask, scores, fill), axis=-1)
    return w.op("MatMul", probs, v)


def _sdpa_attention(w: TextWriter, q: str, k: str, v: str) -> str:
    """`F.scaled_dot_product_attention(q, k, v, is_causal=True)` as PyTorch's opset-14
    symbolic exports it."""
    last = w.op("Slice", w.op("Shape", q), w.constant([-1]), w.constant(np.array([INT64_MAX])))
    scale = w.op("Div", w.constant([1.0]), w.op("Sqrt", w.op("Cast", last, to=FLOAT)))
    scale = w.op("Cast", scale, to=FLOAT)
    target, source = (
        w.op("Slice", w.op("Shape", t), w.constant([-2]), w.constant([-1])) for t in (q, k)
    )
    ones = w.op("Expand", w.constant([1.0]), w.op("Concat", target, source, axis=0))
    lower = w.op("Trilu", ones, upper=0)
    zero = w.constant([0.0])
    mask = w.op("Where", w.op("Equal", lower, zero), w.constant([-np.inf]), zero)
    key_t = w.op("Transpose", k, perm=[0, 1, 3, 2])
    q = w.op("Mul", q, w.op("Sqrt", scale))
    key_t = w.op("Mul", key_t, w.op("Sqrt", scale))
    scores = w.op("Add", w.op("MatMul", q, key_t), mask)
    return w.op("MatMul", w.op("Softmax", scores, axis=-1), v)
