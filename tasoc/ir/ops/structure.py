"""Layout ops: transpose, broadcast, concat, split and reshape.

They move elements without arithmetic (0 FLOPs; the cost model counts their bytes)
and are linear, so a split operand passes its partial sums through. A reshape's and
a broadcast's `shape` attribute names the global shape, so on local shards they run
with the local result shape (`local_attrs`).
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    axis_index,
    fmt_shape,
    int_attr,
    ints_attr,
    same_dtype,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    aligned,
    all_but,
    factor_names,
    op_rule,
    positional,
)

# ------------------------------------------------------------------ typing


def _transpose_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    perm = ints_attr(attrs, "perm")
    if sorted(perm) != list(range(x.rank)):
        raise ShapeError(f"perm {list(perm)} is not a permutation of {x.rank} dimensions")
    return [TensorSig(tuple(x.shape[p] for p in perm), x.dtype)]


def _broadcast_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    shape = ints_attr(attrs, "shape")
    lead = len(shape) - x.rank
    if (
        min(shape, default=0) < 0
        or lead < 0
        or any(d not in (1, shape[lead + i]) for i, d in enumerate(x.shape))
    ):
        raise ShapeError(f"cannot broadcast {fmt_shape(x.shape)} to {fmt_shape(shape)}")
    return [TensorSig(shape, x.dtype)]


def _concat_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    dtype = same_dtype(*inputs)
    rank = inputs[0].rank
    axis = axis_index(int_attr(attrs, "axis"), rank)
    for sig in inputs:
        off_axis = [d for i, d in enumerate(sig.shape) if i != axis]
        if sig.rank != rank or off_axis != [d for i, d in enumerate(inputs[0].shape) if i != axis]:
            raise ShapeError(
                f"operand {fmt_shape(sig.shape)} does not match "
                f"{fmt_shape(inputs[0].shape)} off axis {axis}"
            )
    shape = list(inputs[0].shape)
    shape[axis] = sum(s.shape[axis] for s in inputs)
    return [TensorSig(tuple(shape), dtype)]


def _split_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    axis = axis_index(int_attr(attrs, "axis"), x.rank)
    sizes = ints_attr(attrs, "sizes")
    # Zero-size pieces are legal (ONNX allows them): empty tensors.
    if min(sizes, default=0) < 0:
        raise ShapeError(f"sizes {list(sizes)} must not be negative")
    if not sizes or sum(sizes) != x.shape[axis]:
        raise ShapeError(
            f"sizes {list(sizes)} do not sum to dimension {axis} of size {x.shape[axis]}"
        )
    results = []
    for size in sizes:
        shape = list(x.shape)
        shape[axis] = size
        results.append(TensorSig(tuple(shape), x.dtype))
    return results


def _reshape_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    (x,) = inputs
    shape = ints_attr(attrs, "shape")
    if min(shape, default=0) < 0 or math.prod(shape) != x.size:
        raise ShapeError(
            f"cannot reshape {fmt_shape(x.shape)} ({x.size} elements) to {fmt_shape(shape)}"
        )
    return [TensorSig(shape, x.dtype)]


# ---------------------------------------------------------------- SOAP rules
def _transpose_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    names = factor_names("d", x.rank)
    return op_rule(
        positional(x.shape, names), [names], [tuple(names[p] for p in attrs["perm"])], ((0,),)
    )


def _broadcast_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The dims x has split alike in the result; the dims the broadcast makes (leading
    # ones, stretched size-1 ones) do not: no operand could give their split. Linear.
    (x,), (out,) = inputs, results
    names = factor_names("d", out.rank)
    x_dims = aligned(x, out, names)
    kept = set(x_dims) - {None}
    out_dims = tuple(name if name in kept else None for name in names)
    factors = [f for f in positional(out.shape, names) if f.name in kept]
    return op_rule(factors, [x_dims], [out_dims], ((0,),))


def _concat_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (out,) = results
    factors, dims = all_but(out, [attrs["axis"] % out.rank])
    return op_rule(factors, [dims] * len(inputs), [dims], (tuple(range(len(inputs))),))


def _split_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    factors, dims = all_but(x, [attrs["axis"] % x.rank])
    return op_rule(factors, [dims], [dims] * len(results), ((0,),))


def _splittable(source: Sequence[int], target: Sequence[int]) -> list[tuple[int, int, int]]:
    """The (source dim, target dim, factor size) triples a reshape can split alike.

    Both shapes are walked in step, size-1 dims skipped; equal sizes pair up (size:
    theirs), and otherwise dims are taken into a block until the two sides' products
    meet (a merge or a split of dims, `B x S <-> B*S`). Of a block, the two leading
    dims pair up with the gcd of their sizes: in row-major order, k blocks of the
    leading dim on either side are the same k ranges of the block's elements whenever
    k divides both, so a batch merged with a sequence stays split by the batch. The
    other dims of a block cannot split (their blocks are not contiguous). An empty
    tensor maps nothing.
    """
    if 0 in source or 0 in target:
        return []
    pairs: list[tuple[int, int, int]] = []
    i = j = 0
    while i < len(source) and j < len(target):
        if source[i] == target[j]:
            pairs.append((i, j, source[i]))
            i, j = i + 1, j + 1
        elif source[i] == 1:
            i += 1
        elif target[j] == 1:
            j += 1
        else:
            common = math.gcd(source[i], target[j])
            if common > 1:
                pairs.append((i, j, common))
            left, right = source[i], target[j]
            i, j = i + 1, j + 1
            while left != right:  # the products meet: both shapes have the same size
                if left < right:
                    left, i = left * source[i], i + 1
                else:
                    right, j = right * target[j], j + 1
    return pairs


def _reshape_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,), (out,) = inputs, results
    pairs = _splittable(x.shape, out.shape)
    names = factor_names("d", out.rank)
    kinds = positional(out.shape, names)
    in_dims: list[str | None] = [None] * x.rank
    out_dims: list[str | None] = [None] * out.rank
    for i, j, _ in pairs:
        in_dims[i] = out_dims[j] = names[j]
    factors = [Factor(names[j], size, kinds[j].kind) for _, j, size in pairs]
    return op_rule(factors, [tuple(in_dims)], [tuple(out_dims)], ((0,),))


def _local_shape(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    return {**attrs, "shape": tuple(results[0])}


# ------------------------------------------------------------------ kernels


def _transpose(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.transpose(inputs[0], attrs["perm"])]


def _concat(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.concatenate(list(inputs), axis=attrs["axis"])]


def _split(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    cuts = list(itertools.accumulate(attrs["sizes"]))[:-1]
    return list(xp.split(inputs[0], cuts, axis=attrs["axis"]))


def _reshape(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [xp.reshape(inputs[0], attrs["shape"])]


# -------------------------------------------------------------- definitions

define(
    OpDef("transpose", (1, 1), _transpose_type, _transpose_soap, 0, None, kernel=_transpose),
    # NumPy's broadcast is a read-only view, which the reference copies.
    OpDef("broadcast", (1, 1), _broadcast_type, _broadcast_soap, 0, None, local_attrs=_local_shape),
    OpDef("concat", (1, None), _concat_type, _concat_soap, 0, None, kernel=_concat),
    OpDef("split", (1, 1), _split_type, _split_soap, 0, None, kernel=_split),
    OpDef(
        "reshape",
        (1, 1),
        _reshape_type,
        _reshape_soap,
        0,
        None,
        local_attrs=_local_shape,
        kernel=_reshape,
    ),
)
