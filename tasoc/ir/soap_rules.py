"""The SOAP rule of every `graph` op (what `soap.py` reads), one per shape rule.

Each rule names the op's factors (FlexFlow's Table 3.1: sample, attribute and
parameter dims, plus reduction dims whose split leaves partial sums) and maps each
operand and result dim to the factor indexing it, None where a dim cannot be split
without communication the op does not do (a softmax axis, a convolution window).
docs/parallel.md tabulates them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasoc.ir.shapes import TensorSig
from tasoc.ir.soap import Factor, FactorKind, OpRule, soap_rule

Attrs = Mapping[str, Any]
Results = Sequence[TensorSig]


def _names(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(count))


def _leading(
    out: TensorSig, names: Sequence[str], first: FactorKind = "sample"
) -> tuple[Factor, ...]:
    """Factors for `out`'s dims: the first is `first` (the batch), the rest attributes."""
    return tuple(
        Factor(name, size, first if i == 0 else "attribute")
        for i, (name, size) in enumerate(zip(names, out.shape, strict=True))
    )


def _aligned(sig: TensorSig, out: TensorSig, names: Sequence[str]) -> tuple[str | None, ...]:
    """The factors of `sig`'s dims broadcast against `out` (right-aligned; a size-1
    dim that broadcasts cannot be split)."""
    offset = out.rank - sig.rank
    return tuple(
        None if size == 1 and out.shape[offset + d] != 1 else names[offset + d]
        for d, size in enumerate(sig.shape)
    )


def _elementwise(
    inputs: Sequence[TensorSig], results: Results, linear: tuple[tuple[int, ...], ...]
) -> OpRule:
    out = results[0]
    names = _names("d", out.rank)
    return OpRule(
        _leading(out, names),
        tuple(_aligned(sig, out, names) for sig in inputs),
        tuple(names for _ in results),
        linear,
    )


@soap_rule("add")
def _add(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ((0, 1),))


@soap_rule("mul")
def _mul(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ((0,), (1,)))


@soap_rule("scale")
def _scale(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ((0,), (1,)))


@soap_rule("relu", "sigmoid", "tanh", "gelu", "relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad")
def _pointwise(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ())


@soap_rule("matmul")
def _matmul(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    lhs, rhs = inputs
    (out,) = results
    batch = _names("b", out.rank - 2)
    factors = (
        *(Factor(n, s, "sample") for n, s in zip(batch, out.shape[:-2], strict=True)),
        Factor("m", out.shape[-2], "sample" if not batch else "attribute"),
        Factor("n", out.shape[-1], "parameter"),
        Factor("k", lhs.shape[-1], "reduction"),
    )
    outer = TensorSig(out.shape[:-2], out.dtype)

    def batch_of(sig: TensorSig) -> tuple[str | None, ...]:
        return _aligned(TensorSig(sig.shape[:-2], sig.dtype), outer, batch)

    return OpRule(
        factors,
        ((*batch_of(lhs), "m", "k"), (*batch_of(rhs), "k", "n")),
        ((*batch, "m", "n"),),
        linear=((0,), (1,)),
    )


@soap_rule("conv2d")
def _conv2d(inputs: Sequence[TensorSig], attrs: Attrs, results: Results) -> OpRule:
    x, _ = inputs
    (out,) = results
    groups = attrs["groups"]
    relu = attrs["activation"] == "relu"
    factors = [Factor("n", out.shape[0], "sample"), Factor("o", out.shape[1], "parameter")]
    x_channel: str | None = None
    if groups == 1:
        # Input channels are summed over: split, they leave partial sums, unless a
        # fused relu needs the complete sum first.
        if not relu:
            factors.append(Factor("c", x.shape[1], "reduction"))
            x_channel = "c"
        w_dims: tuple[str | None, ...] = ("o", x_channel, None, None)
    else:
        # Grouped: a split of the output channels along group boundaries splits
        # the input channels with them; only depthwise-style (one channel per group
        # in and out) keeps the two aligned by one factor.
        if groups == x.shape[1] == out.shape[1]:
            x_channel = "o"
        w_dims = ("o" if x_channel else None, None, None, None)
        if x_channel is None:
            factors = factors[:1]
    return OpRule(
        tuple(factors),
        (("n", x_channel, None, None), w_dims),
        (("n", "o" if any(f.name == "o" for f in factors) else None, None, None),),
        linear=((0,), (1,)) if not relu else (),
    )
