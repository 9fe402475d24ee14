"""What the SOAP rules of `graph` ops are written with, and `local_attrs`.

Each op's SOAP rule (what `soap.py` reads) is part of its definition (`OpDef.soap`,
in its family's module under `tasoc/ir/ops/`), beside its shape rule. Each rule
names the op's factors (FlexFlow's Table 3.1: the batch is a `sample` factor,
spatial and sequence dims `attribute` factors, channels and features `parameter`
factors, plus `reduction` factors: contracted dims whose split leaves partial sums)
and maps each operand and result dim to the factor indexing it, None where a dim
cannot be split without communication the op does not do (a softmax axis, an
overlapping convolution window, a table's rows). docs/parallel.md tabulates them.

A factor no result indexes is summed over by the op, so `op_rule` makes it a
`reduction` factor whatever kind the op's dims would otherwise give it (a conv
weight gradient's batch, a matmul's contracting dim): its split leaves partial sums.

A sharded op runs the op's own kernel on each device's local shards, and a few
attributes are written in terms of the global shapes (a reshape's target shape, a
grouped convolution's group count): the op's `OpDef.local_attrs` gives the attributes
the local op needs, and `local_attrs` here applies it, so every backend localizes them
the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from tasoc.ir.opdef import op_def
from tasoc.ir.shapes import TensorSig, window_pads
from tasoc.ir.soap import Factor, OpRule

Attrs = Mapping[str, Any]
Inputs = Sequence[TensorSig]
Results = Sequence[TensorSig]
Dims = tuple[str | None, ...]
Linear = tuple[tuple[int, ...], ...]


def op_rule(
    factors: Sequence[Factor],
    operands: Sequence[Dims],
    results: Sequence[Dims],
    linear: Linear = (),
    shape_only: tuple[int, ...] = (),
) -> OpRule:
    """An OpRule whose factors that no result indexes (and that are not synced:
    those the op all-reduces itself) are `reduction` factors."""
    indexed = {name for dims in results for name in dims}
    kinds: list[Factor] = [
        f
        if f.name in indexed or f.synced
        else Factor(f.name, f.size, "reduction", f.mean, f.synced)
        for f in factors
    ]
    return OpRule(tuple(kinds), tuple(operands), tuple(results), linear, shape_only)


def factor_names(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(count))


def positional(shape: Sequence[int], names: Sequence[str], **flags: bool) -> list[Factor]:
    """Factors for the dims of a data tensor: the first is the batch (`sample`),
    the rest `attribute` dims (sequence, spatial, heads)."""
    return [
        Factor(name, size, "sample" if i == 0 else "attribute", **flags)
        for i, (name, size) in enumerate(zip(names, shape, strict=True))
    ]


def aligned(sig: TensorSig, out: TensorSig, names: Sequence[str]) -> Dims:
    """The factors of `sig`'s dims broadcast against `out` (right-aligned; a size-1
    dim that broadcasts cannot be split)."""
    offset = out.rank - sig.rank
    return tuple(
        None if size == 1 and out.shape[offset + d] != 1 else names[offset + d]
        for d, size in enumerate(sig.shape)
    )


def elementwise_rule(inputs: Inputs, results: Results, linear: Linear) -> OpRule:
    out = results[0]
    names = factor_names("d", out.rank)
    return op_rule(
        positional(out.shape, names),
        [aligned(sig, out, names) for sig in inputs],
        [names for _ in results],
        linear,
    )


def all_but(sig: TensorSig, unsplit: Sequence[int], prefix: str = "d") -> tuple[list[Factor], Dims]:
    """Positional factors for `sig`'s dims but those in `unsplit`, and its dims."""
    names = factor_names(prefix, sig.rank)
    factors = [f for d, f in enumerate(positional(sig.shape, names)) if d not in unsplit]
    dims = tuple(None if d in unsplit else names[d] for d in range(sig.rank))
    return factors, dims


def window_factors(
    in_hw: Sequence[int],
    kernel: Sequence[int],
    strides: Sequence[int],
    padding: str | Sequence[int],
    out_hw: Sequence[int],
) -> tuple[list[Factor], Dims]:
    """Attribute factors for the spatial dims of a 2-D window op, where they split.

    A spatial dim splits with no halo exchange only when its windows tile it
    exactly: kernel == stride, no padding, and no rows left over. Its factor then
    counts output positions; the input dim is `kernel` times as long, so a block of
    output rows reads exactly its own block of input rows.
    """
    top, left, bottom, right = window_pads(
        padding, (in_hw[0], in_hw[1]), (kernel[0], kernel[1]), (strides[0], strides[1])
    )
    factors: list[Factor] = []
    dims: list[str | None] = []
    for name, size, k, s, pads, out in zip(
        ("h", "w"), in_hw, kernel, strides, (top + bottom, left + right), out_hw, strict=True
    ):
        tiles = k == s and pads == 0 and size == out * k
        dims.append(name if tiles else None)
        if tiles:
            factors.append(Factor(name, out, "attribute"))
    return factors, tuple(dims)


def local_attrs(
    op: str,
    attrs: Attrs,
    operands: Sequence[Sequence[int]],
    results: Sequence[Sequence[int]],
) -> dict[str, Any]:
    """The attributes `op` runs with on local shards of the given shapes."""
    fn = op_def(op).local_attrs
    return dict(attrs) if fn is None else fn(attrs, operands, results)
