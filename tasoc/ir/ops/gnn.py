"""Graph neural networks: neighbour aggregation over a sparse adjacency, edge softmax,
and their gradients.

A graph enters a program as integer edge arrays (compile-time constants, so that a
partitioner sees them): `src` and `dst` of shape `[P, Eb]`, `P` edge *blocks* of `Eb`
entries. Block `p` holds the in-edges of the target rows `p*B .. p*B + B - 1`
(`B = block_rows`, an attribute), `src[p, e]` is the source's row in the features `x`
(any row of them) and `dst[p, e]` the target's row *within its block*, in `0 .. B-1`;
a negative `dst` marks a padding entry, which nothing reads. An unpartitioned program
has one block (`P = 1`, `B` = the vertex count, `dst` the target's own number).

Why blocks: a vertex partition (ROC, Jia thesis §4.4) gives each device a block of
target rows and their in-edges. With the block as a tensor dim, that is the ordinary
SOAP split of one `sample` factor indexing dim 0 of the edge arrays and of the result:
a device holding blocks `p..q` computes exactly its rows, whatever split of the
factor is chosen, with no property of the data to trust. The source features `x` are
indexed by no factor: every device reads them whole, so a row-split `x` is
all-gathered first (the simulator prices it as the all-gather it is). The halo
(only the rows a device's edges read) would move less on a sparse cut; it is not what
`parallel` can say without per-device index sets, so it is not done here.

Ops:

- `aggregate(x [N, F], src, dst[, weight]) {reduce, block_rows} -> [P*B, F]`: for every
  target row, the `sum`, `mean` or `max` over its in-edges of `weight[e] * x[src[e]]`
  (`weight` 1 when absent). A row without in-edges is 0 for every reduction (never
  NaN or -inf). GCN's `D^-1/2 (A + I) D^-1/2` is a `sum` with per-edge weights, the
  self terms written as edges (`tasoc/models/gnn.py`).
- `aggregate_grad(x, src, dst[, weight], dy) -> dx [N, F]`: the gradient w.r.t. `x`,
  scattered back to the sources (`max`: to the edges that reached the maximum, ties
  sharing it evenly, as JAX's `segment_max` gradient does).
- `aggregate_weight_grad(x, src, dst, dy) -> dweight [P, Eb]`: the gradient of a
  `sum` or `mean` w.r.t. the per-edge weights (GAT's attention).
- `edge_softmax(scores [P, Eb], dst) {block_rows} -> [P, Eb]`: the softmax of the
  scores over each target's in-edges (GAT); padding entries are 0.
- `edge_softmax_grad(y, dst, dy) -> dscores`: `y * (dy - sum over the target's edges
  of y * dy)`.
- `edge_scores(a [N, 1], b [P*B, 1], src, dst) {block_rows} -> [P, Eb]`: every edge's
  `a[src] + b[target]` (0 for padding): GAT's attention logits before the LeakyReLU,
  DGL's `u_add_v`. Its gradients are aggregations (autodiff composes them).

Every kernel is written once, against an array namespace with `segment_sum` and
`segment_max` (NumPy's sort and `reduceat`, JAX's `jax.ops` segment ops). The numpy
reference checks the indices first (`backends/numpy/backward.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    check_forward,
    choice_attr,
    fmt_shape,
    int_attr,
    need_float,
    need_indices,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import Inputs, Results, op_rule

REDUCTIONS = ("sum", "mean", "max")
"""What `aggregate` takes over a target's in-edges."""

# ------------------------------------------------------------------ typing


def _edges(src: TensorSig, dst: TensorSig, weight: TensorSig | None) -> tuple[int, int]:
    """(P, Eb) of checked edge arrays."""
    need_indices(src, "src")
    need_indices(dst, "dst")
    if src.rank != 2 or dst.shape != src.shape:
        raise ShapeError(
            f"src and dst must be [blocks, edges] of one shape, got {fmt_shape(src.shape)} "
            f"and {fmt_shape(dst.shape)}"
        )
    if weight is not None:
        need_float(weight, "weight")
        if weight.shape != src.shape:
            raise ShapeError(
                f"weight must have the edges' shape {fmt_shape(src.shape)}, "
                f"got {fmt_shape(weight.shape)}"
            )
    return src.shape[0], src.shape[1]


def _block_rows(attrs: Attrs) -> int:
    rows = int_attr(attrs, "block_rows")
    if rows < 1:
        raise ShapeError(f"block_rows must be positive, got {rows}")
    return rows


def _features(x: TensorSig, what: str = "x") -> None:
    need_float(x, what)
    if x.rank != 2:
        raise ShapeError(f"{what} must be [rows, features], got {fmt_shape(x.shape)}")


def _aggregate_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, src, dst, *rest = inputs
    weight = rest[0] if rest else None
    _features(x)
    choice_attr(attrs, "reduce", REDUCTIONS)
    blocks, _ = _edges(src, dst, weight)
    if weight is not None and weight.dtype != x.dtype:
        raise ShapeError(f"weight is {weight.dtype} but x is {x.dtype}")
    return [TensorSig((blocks * _block_rows(attrs), x.shape[1]), x.dtype)]


def _aggregate_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    *forward, dy = inputs
    check_forward(_aggregate_type, "aggregate", forward, attrs, dy)
    return [forward[0]]


def _aggregate_weight_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    x, src, dst, dy = inputs
    check_forward(_aggregate_type, "aggregate", (x, src, dst), attrs, dy)
    if attrs["reduce"] == "max":
        raise ShapeError("the weights of a max aggregation are not differentiated")
    return [TensorSig(src.shape, x.dtype)]


def _edge_softmax_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    scores, dst = inputs
    need_float(scores, "scores")
    _edges(dst, dst, scores)
    _block_rows(attrs)
    return [scores]


def _edge_softmax_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    y, dst, dy = inputs
    check_forward(_edge_softmax_type, "edge_softmax", (y, dst), attrs, dy)
    return [y]


def _edge_scores_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    a, b, src, dst = inputs
    _features(a, "a")
    _features(b, "b")
    blocks, _ = _edges(src, dst, None)
    rows = blocks * _block_rows(attrs)
    if a.shape[1] != 1 or b.shape != (rows, 1) or a.dtype != b.dtype:
        raise ShapeError(
            f"a must be [sources, 1] and b [{rows}, 1] of one element type, got "
            f"{fmt_shape(a.shape)} and {fmt_shape(b.shape)}"
        )
    return [TensorSig(src.shape, a.dtype)]


# ---------------------------------------------------------------- SOAP rules
# Factor `p` is the edge blocks (a vertex partition's parts): it indexes dim 0 of the
# edge arrays and the target rows. `f` is the features.


def _blocks(src: TensorSig) -> Factor:
    return Factor("p", src.shape[0], "sample")


def _aggregate_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    x, src, *_ = inputs
    edge = ("p", None)
    factors = [_blocks(src), Factor("f", x.shape[1], "attribute")]
    operands = [(None, "f"), *([edge] * (len(inputs) - 1))]
    # sum and mean are linear in x (for fixed weights); max is not.
    linear = ((0,),) if attrs["reduce"] != "max" else ()
    return op_rule(factors, operands, [("p", "f")], linear)


def _aggregate_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dx sums over every block's edges: a split `p` leaves partial sums (the
    # transpose of the all-gather of x is a reduce-scatter). Linear in dy.
    x, src, *_ = inputs
    edge = ("p", None)
    factors = [_blocks(src), Factor("f", x.shape[1], "attribute")]
    operands = [(None, "f"), *([edge] * (len(inputs) - 2)), ("p", "f")]
    return op_rule(factors, operands, [(None, "f")], ((len(inputs) - 1,),))


def _aggregate_weight_grad_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dweight[e] sums over the features: a split `f` leaves partial sums.
    x, src, _, _ = inputs
    factors = [_blocks(src), Factor("f", x.shape[1], "attribute")]
    operands = [(None, "f"), ("p", None), ("p", None), ("p", "f")]
    return op_rule(factors, operands, [("p", None)], ((3,),))


def _edge_softmax_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    edge = ("p", None)
    linear = ((2,),) if len(inputs) == 3 else ()
    return op_rule([_blocks(inputs[1])], [edge] * len(inputs), [edge], linear)


def _edge_scores_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # a (the sources' scores) is read whole; b's rows are the blocks' targets.
    edge = ("p", None)
    factors = [_blocks(inputs[2])]
    return op_rule(factors, [(None, None), edge, edge, edge], [edge], ((0, 1),))


# ------------------------------------------------------------------ kernels
# Edges are flattened to one list; edge (p, e) goes to segment p*B + dst[p, e], and a
# padding entry (dst < 0) to no segment (segment ops drop ids outside their range).


def _segments(xp: ArrayNamespace, dst: Any, block_rows: int) -> Any:
    """The flat target row of every edge, -1 for padding."""
    blocks = xp.arange(dst.shape[0], dtype=dst.dtype)[:, None] * block_rows
    return xp.where(dst >= 0, dst + blocks, -1).reshape(-1)


def _messages(x: Any, src: Any, weight: Any | None) -> Any:
    """weight[e] * x[src[e]] for every flat edge: [E, F]."""
    gathered = x[src.reshape(-1)]
    return gathered if weight is None else gathered * weight.reshape(-1, 1)


def _counts(xp: ArrayNamespace, segments: Any, rows: int, dtype: Any) -> Any:
    """In-edges of every target row, as a [rows, 1] column of `dtype`."""
    ones = xp.ones((segments.shape[0], 1), dtype)
    return xp.segment_sum(ones, segments, rows)


def _split_inputs(inputs: Sequence[Any]) -> tuple[Any, Any, Any, Any | None]:
    x, src, dst, *rest = inputs
    return x, src, dst, (rest[0] if rest else None)


def _aggregate_rows(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> tuple[Any, ...]:
    """(result, messages, segments, in-edge counts) of an aggregation."""
    x, src, dst, weight = _split_inputs(inputs)
    block_rows = attrs["block_rows"]
    rows = dst.shape[0] * block_rows
    segments = _segments(xp, dst, block_rows)
    messages = _messages(x, src, weight)
    counts = _counts(xp, segments, rows, x.dtype)
    reduce = attrs["reduce"]
    if reduce == "max":
        top = xp.segment_max(messages, segments, rows)
        result = xp.where(counts > 0, top, xp.zeros((), x.dtype))
    else:
        result = xp.segment_sum(messages, segments, rows)
        if reduce == "mean":
            result = result / xp.maximum(counts, xp.ones((), x.dtype))
    return result, messages, segments, counts


def _aggregate(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    return [_aggregate_rows(xp, attrs, inputs)[0]]


def _aggregate_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    *forward, dy = inputs
    x, src, _, weight = _split_inputs(forward)
    out, messages, segments, counts = _aggregate_rows(xp, attrs, forward)
    valid = (segments >= 0)[:, None]
    safe = xp.where(segments >= 0, segments, 0)
    upstream = dy[safe]  # [E, F]: the gradient of each edge's target row
    reduce = attrs["reduce"]
    if reduce == "mean":
        upstream = upstream / xp.maximum(counts, xp.ones((), x.dtype))[safe]
    elif reduce == "max":
        hit = (messages == out[safe]).astype(x.dtype)
        ties = xp.segment_sum(hit, segments, out.shape[0])
        upstream = upstream * hit / xp.maximum(ties, xp.ones((), x.dtype))[safe]
    if weight is not None:
        upstream = upstream * weight.reshape(-1, 1)
    upstream = xp.where(valid, upstream, xp.zeros((), x.dtype))
    return [xp.segment_sum(upstream, src.reshape(-1), x.shape[0])]


def _aggregate_weight_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    x, src, dst, dy = inputs
    segments = _segments(xp, dst, attrs["block_rows"])
    safe = xp.where(segments >= 0, segments, 0)
    upstream = dy[safe]
    if attrs["reduce"] == "mean":
        counts = _counts(xp, segments, dy.shape[0], x.dtype)
        upstream = upstream / xp.maximum(counts, xp.ones((), x.dtype))[safe]
    grad = (x[src.reshape(-1)] * upstream).sum(axis=1)
    return [xp.where(segments >= 0, grad, xp.zeros((), x.dtype)).reshape(src.shape)]


def _edge_softmax(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    scores, dst = inputs
    block_rows = attrs["block_rows"]
    rows = dst.shape[0] * block_rows
    segments = _segments(xp, dst, block_rows)
    flat = scores.reshape(-1, 1)
    top = xp.segment_max(flat, segments, rows)
    safe = xp.where(segments >= 0, segments, 0)
    valid = (segments >= 0)[:, None]
    shifted = xp.where(valid, flat - top[safe], xp.zeros((), scores.dtype))
    exp = xp.where(valid, xp.exp(shifted), xp.zeros((), scores.dtype))
    total = xp.segment_sum(exp, segments, rows)
    # Every valid edge's row has a total >= 1 (its own max term is exp(0)).
    return [(exp / xp.maximum(total[safe], xp.ones((), scores.dtype))).reshape(scores.shape)]


def _edge_softmax_grad(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    y, dst, dy = inputs
    block_rows = attrs["block_rows"]
    segments = _segments(xp, dst, block_rows)
    product = (y * dy).reshape(-1, 1)
    total = xp.segment_sum(product, segments, dst.shape[0] * block_rows)
    safe = xp.where(segments >= 0, segments, 0)
    grad = y.reshape(-1) * (dy.reshape(-1) - total[safe][:, 0])
    return [xp.where(segments >= 0, grad, xp.zeros((), y.dtype)).reshape(y.shape)]


def _edge_scores(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    a, b, src, dst = inputs
    segments = _segments(xp, dst, attrs["block_rows"])
    scores = a[src.reshape(-1), 0] + b[xp.where(segments >= 0, segments, 0), 0]
    return [xp.where(segments >= 0, scores, xp.zeros((), a.dtype)).reshape(src.shape)]


# -------------------------------------------------------------- definitions


def _edge_flops(per_edge_feature: int, features: bool = True) -> Any:
    """FLOPs of `per_edge_feature` operations per edge entry (and feature of x, the
    first operand, when `features`)."""

    def flops(inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]) -> int:
        edges = inputs[1].size
        return per_edge_feature * edges * (inputs[0].shape[1] if features else 1)

    return flops


_GRADIENT = "a gradient op made by autodiff, not differentiated again"

define(
    OpDef(
        "aggregate",
        (3, 4),
        _aggregate_type,
        _aggregate_soap,
        _edge_flops(2),
        None,
        gathers=1,
        domains={"reduce": REDUCTIONS},
        kernel=_aggregate,
    ),
    OpDef(
        "aggregate_grad",
        (4, 5),
        _aggregate_grad_type,
        _aggregate_grad_soap,
        _edge_flops(4),
        _GRADIENT,
        gathers=1,
        domains={"reduce": REDUCTIONS},
        kernel=_aggregate_grad,
    ),
    OpDef(
        "aggregate_weight_grad",
        (4, 4),
        _aggregate_weight_grad_type,
        _aggregate_weight_grad_soap,
        _edge_flops(2),
        _GRADIENT,
        gathers=1,
        domains={"reduce": ("sum", "mean")},
        kernel=_aggregate_weight_grad,
    ),
    OpDef(
        "edge_softmax",
        (2, 2),
        _edge_softmax_type,
        _edge_softmax_soap,
        _edge_flops(6, features=False),
        None,
        kernel=_edge_softmax,
    ),
    OpDef(
        "edge_softmax_grad",
        (3, 3),
        _edge_softmax_grad_type,
        _edge_softmax_soap,
        _edge_flops(4, features=False),
        _GRADIENT,
        kernel=_edge_softmax_grad,
    ),
    OpDef(
        "edge_scores",
        (4, 4),
        _edge_scores_type,
        _edge_scores_soap,
        _edge_flops(1, features=False),
        None,
        kernel=_edge_scores,
    ),
)
