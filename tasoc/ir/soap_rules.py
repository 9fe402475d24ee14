"""The SOAP rule of every `graph` op (what `soap.py` reads), one per shape rule.

Each rule names the op's factors (FlexFlow's Table 3.1: the batch is a `sample`
factor, spatial and sequence dims `attribute` factors, channels and features
`parameter` factors, plus `reduction` factors: contracted dims whose split leaves
partial sums) and maps each operand and result dim to the factor indexing it, None
where a dim cannot be split without communication the op does not do (a softmax
axis, an overlapping convolution window, a table's rows). docs/parallel.md
tabulates them.

A factor no result indexes is summed over by the op, so `_rule` makes it a
`reduction` factor whatever kind the op's dims would otherwise give it (a conv
weight gradient's batch, a matmul's contracting dim): its split leaves partial sums.

A sharded op runs the op's own kernel on each device's local shards, and a few
attributes are written in terms of the global shapes (a reshape's target shape, a
grouped convolution's group count): `local_attrs` gives the attributes the local op
needs, so every backend localizes them the same way.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from tasoc.ir.shapes import TensorSig, window_pads
from tasoc.ir.soap import Factor, OpRule, soap_rule

Attrs = Mapping[str, Any]
Inputs = Sequence[TensorSig]
Results = Sequence[TensorSig]
Dims = tuple[str | None, ...]
Linear = tuple[tuple[int, ...], ...]


def _rule(
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


def _names(prefix: str, count: int) -> tuple[str, ...]:
    return tuple(f"{prefix}{i}" for i in range(count))


def _positional(shape: Sequence[int], names: Sequence[str], **flags: bool) -> list[Factor]:
    """Factors for the dims of a data tensor: the first is the batch (`sample`),
    the rest `attribute` dims (sequence, spatial, heads)."""
    return [
        Factor(name, size, "sample" if i == 0 else "attribute", **flags)
        for i, (name, size) in enumerate(zip(names, shape, strict=True))
    ]


def _aligned(sig: TensorSig, out: TensorSig, names: Sequence[str]) -> Dims:
    """The factors of `sig`'s dims broadcast against `out` (right-aligned; a size-1
    dim that broadcasts cannot be split)."""
    offset = out.rank - sig.rank
    return tuple(
        None if size == 1 and out.shape[offset + d] != 1 else names[offset + d]
        for d, size in enumerate(sig.shape)
    )


def _elementwise(inputs: Inputs, results: Results, linear: Linear) -> OpRule:
    out = results[0]
    names = _names("d", out.rank)
    return _rule(
        _positional(out.shape, names),
        [_aligned(sig, out, names) for sig in inputs],
        [names for _ in results],
        linear,
    )


def _except(sig: TensorSig, unsplit: Sequence[int], prefix: str = "d") -> tuple[list[Factor], Dims]:
    """Positional factors for `sig`'s dims but those in `unsplit`, and its dims."""
    names = _names(prefix, sig.rank)
    factors = [f for d, f in enumerate(_positional(sig.shape, names)) if d not in unsplit]
    dims = tuple(None if d in unsplit else names[d] for d in range(sig.rank))
    return factors, dims


# ------------------------------------------------------------------ element-wise


@soap_rule("add")
def _add(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ((0, 1),))


@soap_rule("mul", "scale")
def _mul(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ((0,), (1,)))


@soap_rule("sub")
def _sub(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # A difference of partial sums is the partial sum of differences, as for add.
    return _elementwise(inputs, results, ((0, 1),))


@soap_rule("neg", "div")
def _linear_in_first(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # -x and x / d are linear in x (for a fixed divisor d).
    return _elementwise(inputs, results, ((0,),))


@soap_rule("broadcast")
def _broadcast(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The dims x has split alike in the result; the dims the broadcast makes (leading
    # ones, stretched size-1 ones) do not: no operand could give their split. Linear.
    (x,), (out,) = inputs, results
    names = _names("d", out.rank)
    x_dims = _aligned(x, out, names)
    kept = set(x_dims) - {None}
    out_dims = tuple(name if name in kept else None for name in names)
    factors = [f for f in _positional(out.shape, names) if f.name in kept]
    return _rule(factors, [x_dims], [out_dims], ((0,),))


@soap_rule("where")
def _where(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # A selection between partial sums (of a complete condition) is the partial sum
    # of the selections.
    return _elementwise(inputs, results, ((1, 2),))


@soap_rule(
    "relu",
    "sigmoid",
    "tanh",
    "gelu",
    "exp",
    "log",
    "sqrt",
    "reciprocal",
    "erf",
    "abs",
    "pow",
    "max",
    "min",
    "compare",
    "not",
    "and",
    "or",
    "xor",
    "cast",
)
def _pointwise(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    return _elementwise(inputs, results, ())


@soap_rule("relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad")
def _pointwise_grad(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dx = f'(y) * dy: linear in dy for a fixed forward value.
    return _elementwise(inputs, results, ((1,),))


@soap_rule("adam_update")
def _adam_update(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # Element-wise over a weight's dims (parameter dims, ZeRO's sharded optimizer);
    # the step counter is a scalar every device holds.
    param = inputs[0]
    names = _names("d", param.rank)
    factors = [
        Factor(name, size, "parameter") for name, size in zip(names, param.shape, strict=True)
    ]
    return _rule(factors, [names] * 4 + [()], [names] * 3)


# ------------------------------------------------------------------------ linear


@soap_rule("matmul")
def _matmul(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
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

    def batch_of(sig: TensorSig) -> Dims:
        return _aligned(TensorSig(sig.shape[:-2], sig.dtype), outer, batch)

    return _rule(
        factors,
        [(*batch_of(lhs), "m", "k"), (*batch_of(rhs), "k", "n")],
        [(*batch, "m", "n")],
        linear=((0,), (1,)),
    )


@soap_rule("transpose")
def _transpose(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    names = _names("d", x.rank)
    return _rule(
        _positional(x.shape, names), [names], [tuple(names[p] for p in attrs["perm"])], ((0,),)
    )


def _window_factors(
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


def _conv(
    x: Sequence[int], w: Sequence[int], out: Sequence[int], attrs: Attrs, sum_channels: bool
) -> tuple[list[Factor], Dims, Dims, Dims]:
    """Factors of a convolution with input shape `x`, weight `w` and output `out`,
    and the dims of x, w, out they index (its gradients reuse them, so the three
    ops split alike).

    Ungrouped, the input channels `c` are summed over (a split leaves partial sums)
    when `sum_channels`; a fused relu needs the complete sum first. Grouped, one
    factor `g` counts groups: a block of whole groups takes its input channels,
    output channels and weights with it (channel c of group g is g*Cg + c).
    """
    spatial, (h, w_) = _window_factors(x[2:], w[2:], attrs["strides"], attrs["padding"], out[2:])
    factors = [Factor("n", x[0], "sample"), *spatial]
    if attrs["groups"] == 1:
        factors.append(Factor("o", w[0], "parameter"))
        c = "c" if sum_channels else None
        if sum_channels:
            factors.append(Factor("c", x[1], "parameter"))
        return factors, ("n", c, h, w_), ("o", c, None, None), ("n", "o", h, w_)
    factors.append(Factor("g", attrs["groups"], "parameter"))
    return factors, ("n", "g", h, w_), ("g", None, None, None), ("n", "g", h, w_)


@soap_rule("conv2d")
def _conv2d(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    x, w = inputs
    relu = attrs["activation"] == "relu"
    factors, x_dims, w_dims, out_dims = _conv(x.shape, w.shape, results[0].shape, attrs, not relu)
    return _rule(factors, [x_dims, w_dims], [out_dims], () if relu else ((0,), (1,)))


@soap_rule("conv2d_grad_input")
def _conv2d_grad_input(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    dy, w = inputs
    factors, x_dims, w_dims, out_dims = _conv(results[0].shape, w.shape, dy.shape, attrs, True)
    return _rule(factors, [out_dims, w_dims], [x_dims], ((0,), (1,)))


@soap_rule("conv2d_grad_weight")
def _conv2d_grad_weight(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    x, dy = inputs
    factors, x_dims, w_dims, out_dims = _conv(x.shape, results[0].shape, dy.shape, attrs, True)
    return _rule(factors, [x_dims, out_dims], [w_dims], ((0,), (1,)))


@soap_rule("enlarge")
def _enlarge(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (w,) = inputs
    factors = [Factor("o", w.shape[0], "parameter"), Factor("i", w.shape[1], "parameter")]
    return _rule(factors, [("o", "i", None, None)], [("o", "i", None, None)], ((0,),))


def _pool(x: TensorSig, out: Sequence[int], attrs: Attrs) -> tuple[list[Factor], Dims]:
    spatial, (h, w) = _window_factors(
        x.shape[2:], attrs["kernel"], attrs["strides"], attrs["padding"], out[2:]
    )
    channels = [Factor("n", x.shape[0], "sample"), Factor("c", x.shape[1], "parameter")]
    return [*channels, *spatial], ("n", "c", h, w)


@soap_rule("pool2d")
def _pool2d(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _pool(inputs[0], results[0].shape, attrs)
    # Average pooling is linear; max pooling is not.
    return _rule(factors, [dims], [dims], ((0,),) if attrs["kind"] == "avg" else ())


@soap_rule("pool2d_grad")
def _pool2d_grad(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # avg spreads dy over each window whatever x holds: x gives only dx's shape.
    x, dy = inputs
    factors, dims = _pool(x, dy.shape, attrs)
    return _rule(factors, [dims, dims], [dims], ((1,),), (0,) if attrs["kind"] == "avg" else ())


# --------------------------------------------------------------------- structure


@soap_rule("concat")
def _concat(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (out,) = results
    factors, dims = _except(out, [attrs["axis"] % out.rank])
    return _rule(factors, [dims] * len(inputs), [dims], (tuple(range(len(inputs))),))


@soap_rule("split")
def _split(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    factors, dims = _except(x, [attrs["axis"] % x.rank])
    return _rule(factors, [dims], [dims] * len(results), ((0,),))


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


@soap_rule("reshape")
def _reshape(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,), (out,) = inputs, results
    pairs = _splittable(x.shape, out.shape)
    names = _names("d", out.rank)
    kinds = _positional(out.shape, names)
    in_dims: list[str | None] = [None] * x.rank
    out_dims: list[str | None] = [None] * out.rank
    for i, j, _ in pairs:
        in_dims[i] = out_dims[j] = names[j]
    factors = [Factor(names[j], size, kinds[j].kind) for _, j, size in pairs]
    return _rule(factors, [tuple(in_dims)], [tuple(out_dims)], ((0,),))


@soap_rule("ones", "zeros", "c_pool", "i_conv", "i_matmul", "constant")
def _constant(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # No operands to take a configuration from: the result is laid out as declared.
    return _rule([], [], [(None,) * sig.rank for sig in results])


# -------------------------------------------------------------------- model ops


@soap_rule("softmax")
def _softmax(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    (x,) = inputs
    factors, dims = _except(x, [attrs["axis"] % x.rank])
    return _rule(factors, [dims], [dims])


def _reduce_factors(x: TensorSig, attrs: Attrs) -> tuple[list[Factor], Dims, Dims]:
    """Factors of reduce (and its gradient): one per dim of x; a reduced dim splits
    for sum and mean (a `mean` factor: the op divides by its extent), not for max,
    min or prod (a local max or product is not a part of the global one that sums).
    Returns the factors and the dims of x and of the reduced value."""
    axes = {a % x.rank for a in attrs["axes"]}
    names = _names("d", x.rank)
    splits = attrs["kind"] in ("sum", "mean")
    mean = attrs["kind"] == "mean"
    factors = [
        Factor(f.name, f.size, f.kind, mean=mean and d in axes)
        for d, f in enumerate(_positional(x.shape, names))
        if d not in axes or splits
    ]
    x_dims = tuple(None if d in axes and not splits else names[d] for d in range(x.rank))
    kept = [None if d in axes else names[d] for d in range(x.rank)]
    reduced = tuple(kept if attrs["keepdims"] else [n for d, n in enumerate(kept) if d not in axes])
    return factors, x_dims, reduced


@soap_rule("reduce")
def _reduce(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, x_dims, out_dims = _reduce_factors(inputs[0], attrs)
    linear = ((0,),) if attrs["kind"] in ("sum", "mean") else ()
    return _rule(factors, [x_dims], [out_dims], linear)


@soap_rule("reduce_grad")
def _reduce_grad(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dx spreads dy over the reduced dims (divided by their extent for a mean), so
    # for sum and mean x gives only dx's shape; for max it needs the global maximum,
    # so max's reduced dims stay unsplit.
    factors, x_dims, dy_dims = _reduce_factors(inputs[0], attrs)
    shape_only = () if attrs["kind"] == "max" else (0,)
    return _rule(factors, [x_dims, dy_dims], [x_dims], ((1,),), shape_only)


def _channels(x: TensorSig, synced: bool) -> tuple[list[Factor], Dims]:
    """Factors of a batch normalization's input (N, C, spatial...): the channel a
    `parameter` factor its per-channel vectors share; the others `synced` when the
    op takes batch statistics over them."""
    names = ("n", "c", *_names("s", x.rank - 2))
    factors = _positional(x.shape, names, synced=synced)
    factors[1] = Factor("c", x.shape[1], "parameter")
    return factors, names


@soap_rule("batchnorm")
def _batchnorm(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _channels(inputs[0], synced=False)
    return _rule(factors, [dims, *[("c",)] * 4], [dims])


@soap_rule("batchnorm_train")
def _batchnorm_train(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims = _channels(inputs[0], synced=True)
    return _rule(factors, [dims, ("c",), ("c",)], [dims, ("c",), ("c",)])


@soap_rule("batchnorm_grad")
def _batchnorm_grad(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dscale and dbias are the statistics dx needs (sums of dy*xhat and dy): the op
    # all-reduces them, so they leave complete. Linear in dy for a fixed x.
    factors, dims = _channels(inputs[0], synced=True)
    return _rule(factors, [dims, ("c",), dims], [dims, ("c",), ("c",)], ((2,),))


def _layer(x: TensorSig, attrs: Attrs) -> tuple[list[Factor], Dims, Dims]:
    """Factors of a layer normalization: the leading dims; the normalized ones
    (from `axis` on, which gamma and beta span) do not split."""
    axis = attrs["axis"] % x.rank
    factors, dims = _except(x, range(axis, x.rank))
    return factors, dims, dims[axis:]


@soap_rule("layernorm")
def _layernorm(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    factors, dims, params = _layer(inputs[0], attrs)
    return _rule(factors, [dims, params, params], [dims])


@soap_rule("layernorm_grad")
def _layernorm_grad(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # dgamma and dbeta sum over the leading dims: split, they are partial sums.
    factors, dims, params = _layer(inputs[0], attrs)
    return _rule(factors, [dims, params, dims], [dims, params, params], ((2,),))


@soap_rule("embedding")
def _embedding(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    ids, table = inputs
    factors, dims = _except(ids, ())
    factors.append(Factor("f", table.shape[1], "parameter"))
    # A table's rows do not split: which rows a device needs depends on the ids.
    return _rule(factors, [dims, (None, "f")], [(*dims, "f")], ((1,),))


@soap_rule("gather")
def _gather(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # Data's other dims and the indices' dims split; the gathered axis does not (which
    # entries a device needs depends on the indices). Linear in the data.
    data, indices = inputs
    axis = attrs["axis"] % data.rank
    factors, data_dims = _except(data, [axis])
    index_factors, index_dims = _except(indices, (), prefix="i")
    factors += [Factor(f.name, f.size, "attribute") for f in index_factors]
    out = (*data_dims[:axis], *index_dims, *data_dims[axis + 1 :])
    return _rule(factors, [data_dims, index_dims], [out], ((0,),))


@soap_rule("scatter_add")
def _scatter_add(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The table gradient sums the updates of every id: split ids leave partial sums.
    ids, updates = inputs
    factors, dims = _except(ids, ())
    factors.append(Factor("f", updates.shape[-1], "parameter"))
    return _rule(factors, [dims, (*dims, "f")], [(None, "f")], ((1,),))


@soap_rule("softmax_cross_entropy", "softmax_cross_entropy_grad")
def _softmax_cross_entropy(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The loss is per example (no mean over the batch: the loss the autodiff pass
    # appends takes that as a separate reduce), so the batch dims are plain sample
    # and attribute factors; the class axis does not split (a log-softmax over it).
    logits = inputs[0]
    factors, dims = _except(logits, [logits.rank - 1])
    batch = dims[:-1]
    if len(inputs) == 2:
        return _rule(factors, [dims, batch], [batch])
    return _rule(factors, [dims, batch, batch], [dims], ((2,),))


# ------------------------------------------------------------- local attributes

LocalAttrsFn = Callable[[Attrs, Sequence[Sequence[int]], Sequence[Sequence[int]]], dict[str, Any]]

LOCAL_ATTRS: dict[str, LocalAttrsFn] = {}
"""Per op whose attributes name global sizes: (attrs, local operand shapes, local
result shapes) -> the attributes of the op on those local shards."""


def _local(*names: str) -> Callable[[LocalAttrsFn], LocalAttrsFn]:
    def register(fn: LocalAttrsFn) -> LocalAttrsFn:
        for name in names:
            LOCAL_ATTRS[name] = fn
        return fn

    return register


def local_attrs(
    op: str,
    attrs: Attrs,
    operands: Sequence[Sequence[int]],
    results: Sequence[Sequence[int]],
) -> dict[str, Any]:
    """The attributes `op` runs with on local shards of the given shapes."""
    fn = LOCAL_ATTRS.get(op)
    return dict(attrs) if fn is None else fn(attrs, operands, results)


@_local("reshape", "broadcast")
def _local_shape(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    return {**attrs, "shape": tuple(results[0])}


def _groups(channels: int, group_channels: int) -> int:
    # Local input channels over the (never split) channels per group of the weight.
    return channels // group_channels if group_channels else 1


@_local("conv2d")
def _local_conv2d(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    x, w = operands
    return {**attrs, "groups": _groups(x[1], w[1])}


@_local("conv2d_grad_input")
def _local_conv2d_grad_input(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    _, w = operands
    (dx,) = results
    return {**attrs, "input_shape": tuple(dx), "groups": _groups(dx[1], w[1])}


@_local("conv2d_grad_weight")
def _local_conv2d_grad_weight(
    attrs: Attrs, operands: Sequence[Sequence[int]], results: Sequence[Sequence[int]]
) -> dict[str, Any]:
    x, _ = operands
    (dw,) = results
    return {**attrs, "groups": _groups(x[1], dw[1])}
