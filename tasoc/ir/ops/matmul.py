"""`matmul`: the batched matrix product, its batch dims broadcast.

Its SOAP rule splits the batch, the rows (`m`), the columns (`n`, a parameter
factor) and the contracted dim (`k`, leaving partial sums). The JAX lowering keeps
its own kernel: it asks XLA for float32 accumulation at the highest precision.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    broadcast_shapes,
    fmt_shape,
    same_dtype,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Dims,
    Inputs,
    Results,
    aligned,
    factor_names,
    op_rule,
)

# ------------------------------------------------------------------ typing


def _matmul_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    lhs, rhs = inputs
    dtype = same_dtype(lhs, rhs)
    if lhs.rank < 2 or rhs.rank < 2:
        raise ShapeError(f"operands must have rank >= 2, got {lhs.rank} and {rhs.rank}")
    (m, k), (k2, n) = lhs.shape[-2:], rhs.shape[-2:]
    if k != k2:
        raise ShapeError(
            f"contraction sizes differ: {fmt_shape(lhs.shape)} @ {fmt_shape(rhs.shape)} "
            f"({k} != {k2})"
        )
    batch = broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    return [TensorSig((*batch, m, n), dtype)]


# ---------------------------------------------------------------- SOAP rules
def _matmul_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    lhs, rhs = inputs
    (out,) = results
    batch = factor_names("b", out.rank - 2)
    factors = (
        *(Factor(n, s, "sample") for n, s in zip(batch, out.shape[:-2], strict=True)),
        Factor("m", out.shape[-2], "sample" if not batch else "attribute"),
        Factor("n", out.shape[-1], "parameter"),
        Factor("k", lhs.shape[-1], "reduction"),
    )
    outer = TensorSig(out.shape[:-2], out.dtype)

    def batch_of(sig: TensorSig) -> Dims:
        return aligned(TensorSig(sig.shape[:-2], sig.dtype), outer, batch)

    return op_rule(
        factors,
        [(*batch_of(lhs), "m", "k"), (*batch_of(rhs), "k", "n")],
        [(*batch, "m", "n")],
        linear=((0,), (1,)),
    )


# ------------------------------------------------------------------ kernels


def _matmul(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.matmul(inputs[0], inputs[1])]


def _matmul_flops(inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]) -> int:
    return 2 * results[0].size * inputs[0].shape[-1]


define(OpDef("matmul", (2, 2), _matmul_type, _matmul_soap, _matmul_flops, None, kernel=_matmul))
