"""Reverse-mode rules: the gradient of each `graph` op's operands from its results'.

`VJP[op](w, node, grads, needed)` gets the node, one gradient per result (None where
no gradient reaches that result: an unused piece of a `split`) and one flag per
operand saying whether the caller wants that operand's gradient, and returns one
gradient per operand (None where not wanted or not defined, as for integer ids).
Each rule makes ordinary `graph` ops with the `StepWriter`, composing forward ops
where XLA fuses the composition anyway (softmax, broadcasting, matmul), and using
the backward ops of docs/autodiff.md where a composition would be wasteful or
impossible (convolution and pooling gradients, scatter-add into an embedding
table, activation derivatives, normalization gradients).

Batch normalization is differentiated in training mode (`batchnorm_train`, batch
statistics): `autodiff` replaces each inference `batchnorm` of the forward program
before differentiating, so no rule for `batchnorm` is needed or given.
"""

from __future__ import annotations

import math
from collections.abc import Callable

from tasoc.ir.dag import Node, Value
from tasoc.ir.ops.reduce import DIFFERENTIABLE_REDUCTIONS
from tasoc.passes.autodiff.writer import StepWriter

Gradients = tuple[Value | None, ...]
Rule = Callable[[StepWriter, Node, Gradients, tuple[bool, ...]], Gradients]

VJP: dict[str, Rule] = {}
"""The reverse-mode rule of each differentiable op, by short name."""


def _rule(*names: str) -> Callable[[Rule], Rule]:
    def register(fn: Rule) -> Rule:
        for name in names:
            VJP[name] = fn
        return fn

    return register


def _only(grads: Gradients) -> Value:
    """The gradient of a one-result op (the caller only asks when one reached it)."""
    (gradient,) = grads
    assert gradient is not None
    return gradient


# ------------------------------------------------------------------ element-wise


@_rule("add")
def _add(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    return tuple(
        w.sum_to(g, x.sig.shape) if want else None
        for x, want in zip(node.inputs, needed, strict=True)
    )


@_rule("mul")
def _mul(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    a, b = node.inputs
    return (
        w.sum_to(w.mul(g, b), a.sig.shape) if needed[0] else None,
        w.sum_to(w.mul(g, a), b.sig.shape) if needed[1] else None,
    )


@_rule("scale")
def _scale(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    x, scalar = node.inputs
    return (
        w.value("scale", g, scalar) if needed[0] else None,
        w.sum_all(w.mul(g, x)) if needed[1] else None,
    )


@_rule("relu", "sigmoid", "tanh")
def _by_output(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """The derivative of relu, sigmoid and tanh is a function of the result, which the
    backward keeps instead of the operand (as frameworks do)."""
    return (w.value(f"{node.op}_grad", node.out, _only(grads)),)


@_rule("gelu")
def _gelu(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.value("gelu_grad", node.inputs[0], _only(grads)),)


@_rule("neg")
def _neg(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.value("neg", _only(grads)),)


@_rule("exp")
def _exp(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.mul(_only(grads), node.out),)


@_rule("log")
def _log(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.value("div", _only(grads), node.inputs[0]),)


@_rule("sqrt")
def _sqrt(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dy / (2 sqrt(x)), from the result."""
    return (w.times(w.value("div", _only(grads), node.out), 0.5),)


@_rule("reciprocal")
def _reciprocal(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """-dy / x^2 = -dy * y^2, from the result."""
    y = node.out
    return (w.value("neg", w.mul(_only(grads), w.mul(y, y))),)


@_rule("erf")
def _erf(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dy * 2/sqrt(pi) * exp(-x^2)."""
    x = node.inputs[0]
    density = w.times(w.value("exp", w.value("neg", w.mul(x, x))), 2 / math.sqrt(math.pi))
    return (w.mul(_only(grads), density),)


def _indicator(w: StepWriter, lhs: Value, rhs: Value, predicate: str) -> Value:
    """1 where `lhs predicate rhs` holds, else 0, in `lhs`'s float type."""
    holds = w.value("compare", lhs, rhs, predicate=predicate)
    return w.value("cast", holds, to=lhs.sig.dtype)


@_rule("abs")
def _abs(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dy * sign(x), 0 at 0 (JAX's rule)."""
    x = node.inputs[0]
    zero = w.scalar(0.0, x.sig.dtype)
    sign = w.value("sub", _indicator(w, x, zero, "gt"), _indicator(w, x, zero, "lt"))
    return (w.mul(_only(grads), sign),)


@_rule("sub")
def _sub(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    a, b = node.inputs
    return (
        w.sum_to(g, a.sig.shape) if needed[0] else None,
        w.sum_to(w.value("neg", g), b.sig.shape) if needed[1] else None,
    )


@_rule("div")
def _div(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """d(a/b) = da / b - db * (a/b) / b, the quotient taken from the result."""
    g = _only(grads)
    a, b = node.inputs
    return (
        w.sum_to(w.value("div", g, b), a.sig.shape) if needed[0] else None,
        w.sum_to(w.value("neg", w.value("div", w.mul(g, node.out), b)), b.sig.shape)
        if needed[1]
        else None,
    )


@_rule("max", "min")
def _extremum(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dy to the operand that is the result; on a tie, half to each (JAX's rule)."""
    g = _only(grads)
    a, b = node.inputs
    wins = "gt" if node.op == "max" else "lt"
    half_tie = w.times(_indicator(w, a, b, "eq"), 0.5)
    share = (
        w.add(_indicator(w, a, b, wins), half_tie),
        w.add(_indicator(w, b, a, wins), half_tie),
    )
    return tuple(
        w.sum_to(w.mul(g, part), x.sig.shape) if want else None
        for x, part, want in zip(node.inputs, share, needed, strict=True)
    )


@_rule("where")
def _where(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dy where each operand was chosen, 0 elsewhere; the condition gets none."""
    g = _only(grads)
    condition, a, b = node.inputs
    zero = w.scalar(0.0, g.sig.dtype)
    return (
        None,
        w.sum_to(w.value("where", condition, g, zero), a.sig.shape) if needed[1] else None,
        w.sum_to(w.value("where", condition, zero, g), b.sig.shape) if needed[2] else None,
    )


@_rule("cast")
def _cast(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """Between floats, dy cast back; a gradient never reaches an integer result, and an
    integer operand wants none."""
    return (w.value("cast", _only(grads), to=node.inputs[0].sig.dtype) if needed[0] else None,)


@_rule("broadcast")
def _broadcast(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.sum_to(_only(grads), node.inputs[0].sig.shape),)


# ------------------------------------------------------------------------ linear


@_rule("transpose")
def _transpose(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    perm = node.attr("perm")
    inverse = sorted(range(len(perm)), key=perm.__getitem__)
    return (w.transpose(_only(grads), inverse),)


@_rule("matmul")
def _matmul(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dA = dY @ B^T and dB = A^T @ dY, summed over the batch dimensions an operand
    was broadcast along. A shared matrix used on a batch (a linear layer applied to
    every position of a sequence) gets its gradient from one 2-D matmul over the
    flattened batch, as JAX's dot_general transpose does, not from a batch of
    products summed afterwards."""
    g = _only(grads)
    a, b = node.inputs
    grad_a = grad_b = None
    if needed[0]:
        grad_a = w.sum_to(w.value("matmul", g, w.swap_last_two(b)), a.sig.shape)
    if needed[1]:
        batch = a.sig.shape[:-2]
        if math.prod(b.sig.shape[:-2]) == 1 and batch and g.sig.shape[:-2] == batch:
            (m, k), n = a.sig.shape[-2:], b.sig.shape[-1]
            rows = math.prod(batch) * m
            flat_a = w.reshape(a, (rows, k))
            flat_g = w.reshape(g, (rows, n))
            grad_b = w.reshape(w.value("matmul", w.swap_last_two(flat_a), flat_g), b.sig.shape)
        else:
            grad_b = w.sum_to(w.value("matmul", w.swap_last_two(a), g), b.sig.shape)
    return grad_a, grad_b


@_rule("conv2d")
def _conv2d(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    if node.attr("activation") == "relu":
        g = w.value("relu_grad", node.out, g)
    x, weight = node.inputs
    window = {name: node.attr(name) for name in ("strides", "padding", "groups")}
    grad_x = grad_w = None
    if needed[0]:
        grad_x = w.value("conv2d_grad_input", g, weight, input_shape=x.sig.shape, **window)
    if needed[1]:
        kernel = weight.sig.shape[2:]
        grad_w = w.value("conv2d_grad_weight", x, g, kernel=kernel, **window)
    return grad_x, grad_w


@_rule("enlarge")
def _enlarge(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """The gradient of a zero-padded kernel is the centre of the padded one's."""
    g = _only(grads)
    for axis, size in ((2, node.inputs[0].sig.shape[2]), (3, node.inputs[0].sig.shape[3])):
        margin = (g.sig.shape[axis] - size) // 2
        if margin:
            g = w.node("split", g, axis=axis, sizes=(margin, size, margin)).results[1]
    return (g,)


@_rule("pool2d")
def _pool2d(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    window = {name: node.attr(name) for name in ("kind", "kernel", "strides", "padding")}
    return (w.value("pool2d_grad", node.inputs[0], _only(grads), **window),)


# --------------------------------------------------------------------- structure


@_rule("concat")
def _concat(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    g = _only(grads)
    if len(node.inputs) == 1:
        return (g,)
    axis = node.attr("axis")
    sizes = tuple(x.sig.shape[axis] for x in node.inputs)
    pieces = w.node("split", g, axis=axis, sizes=sizes).results
    return tuple(piece if want else None for piece, want in zip(pieces, needed, strict=True))


@_rule("split")
def _split(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """Pieces no gradient reached contribute zeros to the concatenation."""
    pieces = [w.zeros(sig) if g is None else g for g, sig in zip(grads, node.sigs, strict=True)]
    if len(pieces) == 1:
        return (pieces[0],)
    return (w.value("concat", *pieces, axis=node.attr("axis")),)


@_rule("reshape")
def _reshape(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    return (w.reshape(_only(grads), node.inputs[0].sig.shape),)


# -------------------------------------------------------------------- model ops


@_rule("softmax")
def _softmax(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """dx = y * (dy - sum(dy * y)) over the softmax axis, in forward ops XLA fuses."""
    y = node.out
    weighted = w.mul(_only(grads), y)
    total = w.value("reduce", weighted, kind="sum", axes=(node.attr("axis"),), keepdims=True)
    return (w.subtract(weighted, w.mul(y, total)),)


@_rule("reduce")
def _reduce(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    reduction = {name: node.attr(name) for name in ("kind", "axes", "keepdims")}
    if reduction["kind"] not in DIFFERENTIABLE_REDUCTIONS:
        raise ValueError(
            f"no gradient is defined for graph.reduce of kind '{reduction['kind']}', "
            "which the loss depends on"
        )
    return (w.value("reduce_grad", node.inputs[0], _only(grads), **reduction),)


@_rule("batchnorm_train")
def _batchnorm_train(
    w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]
) -> Gradients:
    """Only the normalized result reaches the loss; the batch statistics feed the
    running averages, which are not differentiated."""
    g = grads[0]
    if g is None:
        return (None, None, None)
    x, scale, _ = node.inputs
    return tuple(w.node("batchnorm_grad", x, scale, g, epsilon=node.attr("epsilon")).results)


@_rule("layernorm")
def _layernorm(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    x, gamma, _ = node.inputs
    attrs = {name: node.attr(name) for name in ("axis", "epsilon")}
    return tuple(w.node("layernorm_grad", x, gamma, _only(grads), **attrs).results)


@_rule("embedding")
def _embedding(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """Integer ids get no gradient; the table gets each row's gradients added up."""
    ids, table = node.inputs
    return (None, w.value("scatter_add", ids, _only(grads), rows=table.sig.shape[0]))


@_rule("aggregate")
def _aggregate(w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]) -> Gradients:
    """x's gradient scattered back to the sources (`aggregate_grad`); the per-edge
    weights' by `aggregate_weight_grad` (sum and mean; a max's weights are refused);
    the integer edge arrays get none."""
    g = _only(grads)
    x, src, dst, *weight = node.inputs
    attrs = {"reduce": node.attr("reduce"), "block_rows": node.attr("block_rows")}
    dx = w.value("aggregate_grad", *node.inputs, g, **attrs) if needed[0] else None
    dweight = None
    if weight and needed[3]:
        if attrs["reduce"] == "max":
            raise ValueError("the per-edge weights of a max aggregation are not differentiated")
        # d/dw[e] of w[e] * x[src[e]]: the unweighted product with dy.
        dweight = w.value("aggregate_weight_grad", x, src, dst, g, **attrs)
    return (dx, None, None, *([dweight] if weight else []))


@_rule("edge_softmax")
def _edge_softmax(
    w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]
) -> Gradients:
    _, dst = node.inputs
    y = node.results[0]
    grad = w.value("edge_softmax_grad", y, dst, _only(grads), block_rows=node.attr("block_rows"))
    return (grad, None)


@_rule("edge_scores")
def _edge_scores(
    w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]
) -> Gradients:
    """a[src] + b[target] per edge: a's gradient sums each source's edges, b's each
    target's, both aggregations of the edges' dy (as weights) over ones."""
    a, b, src, dst = node.inputs
    g = _only(grads)
    attrs = {"reduce": "sum", "block_rows": node.attr("block_rows")}
    da = w.value("aggregate_grad", a, src, dst, g, w.ones(b.sig), **attrs) if needed[0] else None
    db = w.value("aggregate", w.ones(a.sig), src, dst, g, **attrs) if needed[1] else None
    return (da, db, None, None)


@_rule("softmax_cross_entropy")
def _softmax_cross_entropy(
    w: StepWriter, node: Node, grads: Gradients, needed: tuple[bool, ...]
) -> Gradients:
    logits, labels = node.inputs
    return (w.value("softmax_cross_entropy_grad", logits, labels, _only(grads)), None)
