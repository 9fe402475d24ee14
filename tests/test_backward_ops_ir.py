"""The IR side of the backward ops, losses and Adam update (issue 14, docs/autodiff.md):
their shape rules through the builder and `shapes.infer`, the rejected cases and their
messages, a round trip through text and the light graph, and the FLOP counts the cost
models read (`node_stats`) for a node of every op."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest
from xdsl.dialects.builtin import ModuleOp
from xdsl.traits import ConstantLike

from tasoc.cost import DEVICES, AnalyticCost
from tasoc.cost.stats import OpStats, node_stats, sig_bytes
from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.ir.dag import Node, from_module, to_module
from tasoc.ir.op_sets import ops_with
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig, infer

CONV = {"strides": (1, 1), "padding": "same", "groups": 1}
ADAM = {"lr": 1e-3, "beta1": 0.9, "beta2": 0.999, "epsilon": 1e-8}


def sig(*shape: int, dtype: str = "f32") -> TensorSig:
    return TensorSig(tuple(shape), DType(dtype))


# ------------------------------------------------------------- shape inference


@pytest.mark.parametrize("op", ["relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad"])
def test_activation_grads_type_like_their_operand(op: str) -> None:
    g = GraphBuilder()
    y, dy = g.input("y", (2, 3), "bf16"), g.input("dy", (2, 3), "bf16")
    dx = getattr(g, op)(y, dy)
    assert G.sig_of(dx.type) == sig(2, 3, dtype="bf16")


@pytest.mark.parametrize(
    ("x_shape", "w_shape", "strides", "padding", "groups"),
    [
        ((1, 4, 8, 8), (6, 4, 3, 3), (1, 1), "same", 1),
        ((2, 4, 9, 7), (6, 2, 3, 3), (2, 2), "same", 2),  # odd sizes: 'same' pads unevenly
        ((1, 4, 8, 8), (4, 1, 5, 3), (2, 1), "valid", 4),
        ((1, 3, 6, 6), (2, 3, 3, 3), (3, 2), (1, 0, 2, 1), 1),
    ],
)
def test_conv2d_grads_give_back_the_forward_operand_shapes(
    x_shape: tuple[int, ...],
    w_shape: tuple[int, ...],
    strides: tuple[int, int],
    padding: str | tuple[int, ...],
    groups: int,
) -> None:
    g = GraphBuilder()
    x, w = g.input("x", x_shape), g.param("w", w_shape)
    y = g.conv2d(x, w, strides=strides, padding=padding, groups=groups)
    dx = g.conv2d_grad_input(y, w, x_shape, strides=strides, padding=padding, groups=groups)
    dw = g.conv2d_grad_weight(x, y, w_shape[2:], strides=strides, padding=padding, groups=groups)
    assert (shape_of(dx), shape_of(dw)) == (x_shape, w_shape)


def test_window_reduction_and_embedding_grads() -> None:
    g = GraphBuilder()
    x = g.input("x", (2, 3, 7, 7))
    pooled = g.pool2d(x, "max", (3, 3), strides=(2, 2), padding="same")
    assert shape_of(g.pool2d_grad(x, pooled, "max", (3, 3), (2, 2), "same")) == (2, 3, 7, 7)
    reduced = g.reduce(x, "mean", (1, -1), keepdims=False)
    assert shape_of(reduced) == (2, 7)
    assert shape_of(g.reduce_grad(x, reduced, "mean", (1, -1))) == (2, 3, 7, 7)
    ids, updates = g.input("ids", (4, 5), "i64"), g.input("updates", (4, 5, 6), "f16")
    table = g.scatter_add(ids, updates, rows=11)
    assert G.sig_of(table.type) == sig(11, 6, dtype="f16")


def test_normalization_ops_have_three_results() -> None:
    g = GraphBuilder()
    x, gamma = g.input("x", (2, 3, 4)), g.param("gamma", (3, 4))
    assert [shape_of(v) for v in g.layernorm_grad(x, gamma, x, axis=1)] == [
        (2, 3, 4),
        (3, 4),
        (3, 4),
    ]
    scale = g.param("scale", (3,))
    y, mean, var = g.batchnorm_train(x, scale, scale)
    assert [shape_of(v) for v in (y, mean, var)] == [(2, 3, 4), (3,), (3,)]
    assert [shape_of(v) for v in g.batchnorm_grad(x, scale, y)] == [(2, 3, 4), (3,), (3,)]


def test_loss_and_adam_update() -> None:
    g = GraphBuilder()
    logits, labels = g.input("logits", (2, 3, 10)), g.input("labels", (2, 3), "i32")
    losses = g.softmax_cross_entropy(logits, labels)
    assert G.sig_of(losses.type) == sig(2, 3)
    assert shape_of(g.softmax_cross_entropy_grad(logits, labels, losses)) == (2, 3, 10)
    p, step = g.param("p", (5, 2)), g.input("step", ())
    assert [shape_of(v) for v in g.adam_update(p, p, p, p, step, lr=0.1)] == [(5, 2)] * 3
    # a vector of logits: one loss, a scalar
    assert infer("softmax_cross_entropy", [sig(10), sig(dtype="i64")], {}) == [sig()]


# --------------------------------------------------------------- rejected cases

REJECTED = [
    ("relu_grad", [sig(2, 3), sig(3, 2)], {}, "dy must have shape 2x3, got 3x2"),
    ("tanh_grad", [sig(2, 3), sig(2, 3, dtype="f16")], {}, "element types differ"),
    ("gelu_grad", [sig(2, dtype="i32"), sig(2, dtype="i32")], {}, "float element type"),
    (
        "conv2d_grad_input",
        [sig(1, 6, 4, 4), sig(6, 4, 3, 3)],
        {**CONV, "input_shape": (1, 4, 8, 8)},
        r"dy must have the forward conv2d's result shape 1x6x8x8, got 1x6x4x4",
    ),
    (
        "conv2d_grad_input",
        [sig(1, 6, 8, 8), sig(6, 4, 3, 3)],
        {**CONV, "input_shape": (1, 4, 8)},
        "input_shape must have 4 integers",
    ),
    (
        "conv2d_grad_input",
        [sig(1, 6, 8, 8), sig(6, 4, 3, 3)],
        {**CONV, "groups": 3, "input_shape": (1, 4, 8, 8)},
        "forward conv2d: groups=3 must divide",
    ),
    (
        "conv2d_grad_weight",
        [sig(1, 4, 8, 8), sig(1, 6, 6, 6)],
        {**CONV, "padding": "valid", "kernel": (5, 5)},
        "forward conv2d's result shape 1x6x4x4, got 1x6x6x6",
    ),
    (
        "conv2d_grad_weight",
        [sig(1, 4, 8, 8), sig(1, 6, 8, 8)],
        {**CONV, "groups": 0, "kernel": (3, 3)},
        "forward conv2d: groups=0",
    ),
    (
        "conv2d_grad_weight",
        [sig(4, 8, 8), sig(1, 6, 8, 8)],
        {**CONV, "kernel": (3, 3)},
        "must be 4-D",
    ),
    (
        "pool2d_grad",
        [sig(1, 2, 8, 8), sig(1, 2, 8, 8)],
        {"kind": "max", "kernel": (2, 2), "strides": (2, 2), "padding": "valid"},
        "forward pool2d's result shape 1x2x4x4",
    ),
    (
        "reduce_grad",
        [sig(2, 3), sig(2)],
        {"kind": "sum", "axes": (1,), "keepdims": True},
        "forward reduce's result shape 2x1, got 2",
    ),
    (
        "reduce_grad",
        [sig(2, 3, dtype="i32"), sig(2, dtype="i32")],
        {"kind": "sum", "axes": (1,), "keepdims": False},
        "float element type",
    ),
    ("scatter_add", [sig(2, 3), sig(2, 3, 4)], {"rows": 10}, "ids must be i32 or i64, got f32"),
    (
        "scatter_add",
        [sig(2, 3, dtype="i32"), sig(2, 3, 4, dtype="i32")],
        {"rows": 10},
        "updates must have a float",
    ),
    (
        "scatter_add",
        [sig(2, 3, dtype="i32"), sig(3, 2, 4)],
        {"rows": 10},
        r"updates must have the shape of ids \(2x3\) plus a feature axis",
    ),
    ("scatter_add", [sig(2, dtype="i32"), sig(2, 4)], {"rows": -1}, "rows must not be negative"),
    (
        "layernorm_grad",
        [sig(2, 8), sig(4), sig(2, 8)],
        {"axis": -1, "epsilon": 1e-5},
        "forward layernorm: gamma must have shape 8, got 4",
    ),
    (
        "layernorm_grad",
        [sig(2, 8), sig(8), sig(8)],
        {"axis": -1, "epsilon": 1e-5},
        "dy must have the forward layernorm's result shape 2x8, got 8",
    ),
    (
        "batchnorm_train",
        [sig(2, 3, 4), sig(4), sig(3)],
        {"epsilon": 1e-5},
        "scale must have shape 3, got 4",
    ),
    ("batchnorm_train", [sig(3), sig(3), sig(3)], {"epsilon": 1e-5}, "channel dimension"),
    (
        "batchnorm_train",
        [sig(2, 3), sig(3), sig(3)],
        {"epsilon": -1.0},
        "epsilon must be a finite number >= 0",
    ),
    (
        "batchnorm_grad",
        [sig(2, 3, 4), sig(3), sig(2, 3)],
        {"epsilon": 1e-5},
        "dy must have shape 2x3x4, got 2x3",
    ),
    (
        "softmax_cross_entropy",
        [sig(4, 10), sig(4, 10, dtype="i64")],
        {},
        "labels must have shape 4, got 4x10",
    ),
    ("softmax_cross_entropy", [sig(4, 10), sig(4)], {}, "labels must be i32 or i64, got f32"),
    (
        "softmax_cross_entropy",
        [sig(4, 10, dtype="i32"), sig(4, dtype="i32")],
        {},
        "logits must have a float element type, got i32",
    ),
    ("softmax_cross_entropy", [sig(), sig(dtype="i32")], {}, "logits must have rank >= 1"),
    (
        "softmax_cross_entropy_grad",
        [sig(4, 10), sig(4, dtype="i32"), sig(4, 10)],
        {},
        "dloss must have the forward softmax_cross_entropy's result shape 4, got 4x10",
    ),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "lr": 0.0}, "lr must be a finite number > 0"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "lr": -1e-3}, "lr must be"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "lr": math.inf}, "lr must be"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "lr": math.nan}, "lr must be"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "lr": True}, "lr must be"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "beta1": 1.0}, r"beta1 must be .*\[0, 1\)"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "beta2": -0.1}, "beta2 must be"),
    ("adam_update", [sig(3)] * 4 + [sig()], {**ADAM, "epsilon": math.nan}, "epsilon must be"),
    ("adam_update", [sig(3)] * 4 + [sig(1)], ADAM, "step must be a rank-0 f32 tensor, got 1xf32"),
    ("adam_update", [sig(3), sig(3), sig(4), sig(3), sig()], ADAM, "m must have shape 3, got 4"),
    (
        "adam_update",
        [sig(3, dtype="i32")] * 4 + [sig(dtype="i32")],
        ADAM,
        "param must have a float element type",
    ),
    ("adam_update", [sig(3)] * 4, ADAM, "expected 5 operands, got 4"),
]


@pytest.mark.parametrize(("op", "inputs", "attrs", "message"), REJECTED)
def test_inference_rejects(
    op: str, inputs: list[TensorSig], attrs: dict[str, object], message: str
) -> None:
    with pytest.raises(ShapeError, match=message):
        infer(op, inputs, attrs)


def test_the_builder_names_the_op_in_its_error() -> None:
    g = GraphBuilder()
    logits, labels = g.input("logits", (4, 10)), g.input("labels", (4,), "f32")
    with pytest.raises(ShapeError, match=r"^graph\.softmax_cross_entropy: labels must be i32"):
        g.softmax_cross_entropy(logits, labels)


# ------------------------------------------------------------ text and the dag


def every_backward_op() -> ModuleOp:
    g = GraphBuilder()
    x, w = g.input("x", (1, 4, 6, 6)), g.param("w", (4, 2, 3, 3))
    y = g.conv2d(x, w, groups=2)
    relu = g.relu(y)
    outputs = [
        g.relu_grad(relu, y),
        g.sigmoid_grad(relu, y),
        g.tanh_grad(relu, y),
        g.gelu_grad(y, y),
        g.conv2d_grad_input(y, w, (1, 4, 6, 6), groups=2),
        g.conv2d_grad_weight(x, y, (3, 3), groups=2),
        g.pool2d_grad(x, g.pool2d(x, "avg", (2, 2)), "avg", (2, 2)),
        g.reduce_grad(x, g.reduce(x, "max", (2, 3)), "max", (2, 3)),
    ]
    ids, rows = g.input("ids", (3,), "i32"), g.input("rows", (3, 5))
    outputs.append(g.scatter_add(ids, rows, 7))
    gamma, scale = g.param("gamma", (5,)), g.param("scale", (4,))
    outputs.extend(g.layernorm_grad(rows, gamma, rows))
    outputs.extend(g.batchnorm_train(x, scale, scale))
    outputs.extend(g.batchnorm_grad(x, scale, x))
    losses = g.softmax_cross_entropy(rows, ids)
    outputs.append(losses)
    outputs.append(g.softmax_cross_entropy_grad(rows, ids, losses))
    step = g.input("step", ())
    outputs.extend(g.adam_update(rows, rows, rows, rows, step, lr=0.5, beta1=0.0, epsilon=0.0))
    src, dst = g.input("src", (1, 4), "i32"), g.input("dst", (1, 4), "i32")
    weight, dy = g.input("weight", (1, 4)), g.input("dy", (3, 5))
    edges = {"reduce": "sum", "block_rows": 3}
    outputs.append(g.emit(G.AggregateGradOp, rows, src, dst, weight, dy, **edges).results[0])
    outputs.append(g.emit(G.AggregateWeightGradOp, rows, src, dst, dy, **edges).results[0])
    outputs.append(g.emit(G.EdgeSoftmaxGradOp, weight, dst, weight, block_rows=3).results[0])
    return g.build(*outputs)


def test_every_backward_op_round_trips_through_text_and_the_dag() -> None:
    module = every_backward_op()
    module.verify()
    names = {op.name for op in module.walk() if isinstance(op, G.GraphOp)}
    assert {op.name for op in G.GRAPH_OPS[G.GRAPH_OPS.index(G.ReluGradOp) :]} <= names
    text = str(module)
    assert str(to_module(from_module(module))) == text
    assert "lr = 5.000000e-01 : f64, beta1 = 0.000000e+00 : f64" in text


def test_the_analytic_model_prices_a_program_of_every_backward_op() -> None:
    dag = from_module(every_backward_op())
    for device in DEVICES.values():
        fused = AnalyticCost(device, fold_weights=False).cost(dag)
        assert 0 < fused <= AnalyticCost(device, fold_weights=False, fusion=False).cost(dag) < 1


# ------------------------------------------------------------------ FLOP counts


def arg(index: int, *shape: int, dtype: str = "f32") -> Node:
    return Node.arg(index, "x", sig(*shape, dtype=dtype))


def conv_nodes() -> tuple[Node, Node, Node]:
    """conv2d and its two gradients on the same sizes (grouped and strided)."""
    x, w = arg(0, 2, 4, 9, 9), arg(1, 6, 2, 3, 3)
    attrs = {"strides": (2, 2), "padding": "same", "groups": 2}
    conv = Node("conv2d", [x.out, w.out], activation="none", **attrs)
    dy = arg(2, *conv.sigs[0].shape)
    grad_input = Node("conv2d_grad_input", [dy.out, w.out], input_shape=(2, 4, 9, 9), **attrs)
    grad_weight = Node("conv2d_grad_weight", [x.out, dy.out], kernel=(3, 3), **attrs)
    return conv, grad_input, grad_weight


def test_convolution_gradients_cost_the_forward_convolution() -> None:
    conv, grad_input, grad_weight = conv_nodes()
    # 2 * output elements * (input channels per group * kernel area)
    assert node_stats(conv).flops == 2 * (2 * 6 * 5 * 5) * (2 * 3 * 3)
    assert node_stats(grad_input).flops == node_stats(grad_weight).flops == node_stats(conv).flops
    assert node_stats(grad_input).bytes_written == 4 * 2 * 4 * 9 * 9
    assert node_stats(grad_weight).bytes_written == 4 * 6 * 2 * 3 * 3


def test_pool_and_reduce_gradients_cost_their_forward_op() -> None:
    x = arg(0, 1, 3, 8, 8)
    pool_attrs = {"kind": "max", "kernel": (3, 3), "strides": (2, 2), "padding": "valid"}
    pool = Node("pool2d", [x.out], **pool_attrs)
    pool_grad = Node("pool2d_grad", [x.out, arg(1, 1, 3, 3, 3).out], **pool_attrs)
    assert node_stats(pool_grad).flops == node_stats(pool).flops == 3 * 3 * 3 * 9
    reduce_attrs = {"kind": "mean", "axes": (1,), "keepdims": True}
    reduce = Node("reduce", [x.out], **reduce_attrs)
    reduce_grad = Node("reduce_grad", [x.out, arg(1, 1, 1, 8, 8).out], **reduce_attrs)
    assert node_stats(reduce_grad).flops == node_stats(reduce).flops == 3 * 64


def test_scatter_add_reads_ids_and_updates_and_writes_the_table() -> None:
    ids, updates = arg(0, 4, 5, dtype="i64"), arg(1, 4, 5, 6)
    stats = node_stats(Node("scatter_add", [ids.out, updates.out], rows=100))
    assert stats.bytes_read == 8 * 20 + 4 * 120
    assert stats.bytes_written == 4 * 100 * 6
    assert stats.flops == 120


def test_the_loss_counts_every_logit() -> None:
    logits, labels = arg(0, 4, 10), arg(1, 4, dtype="i32")
    stats = node_stats(Node("softmax_cross_entropy", [logits.out, labels.out]))
    assert stats.flops == 5 * 40
    assert (stats.bytes_read, stats.bytes_written) == (4 * 40 + 4 * 4, 4 * 4)


UNARY = ("neg", "exp", "log", "sqrt", "reciprocal", "erf", "abs")
BINARY = ("sub", "div", "pow", "max", "min")
LOGIC = ("and", "or", "xor")


def _example(op: str) -> Node:
    """A small node of `op` (every op of the dialect, forward ones included)."""
    x, w, ids = arg(0, 1, 4, 6, 6), arg(1, 4, 4, 3, 3), arg(2, 2, 3, dtype="i32")
    m, c, s = arg(3, 3, 5), arg(4, 4), arg(5)
    table, five, flags = arg(6, 10, 5), arg(7, 5), arg(8, 3, 5, dtype="i1")
    window = {"kind": "avg", "kernel": (2, 2), "strides": (2, 2), "padding": "valid"}
    reduced = {"kind": "sum", "axes": (1,), "keepdims": False}
    makers: dict[str, Callable[[], Node]] = {
        "add": lambda: Node("add", [m.out, m.out]),
        "mul": lambda: Node("mul", [m.out, m.out]),
        "scale": lambda: Node("scale", [m.out, s.out]),
        "relu": lambda: Node("relu", [m.out]),
        "sigmoid": lambda: Node("sigmoid", [m.out]),
        "tanh": lambda: Node("tanh", [m.out]),
        "gelu": lambda: Node("gelu", [m.out]),
        "transpose": lambda: Node("transpose", [m.out], perm=(1, 0)),
        "matmul": lambda: Node("matmul", [m.out, arg(8, 5, 2).out]),
        "conv2d": lambda: Node("conv2d", [x.out, w.out], activation="relu", **CONV),
        "enlarge": lambda: Node("enlarge", [w.out], kernel=(5, 5)),
        "pool2d": lambda: Node("pool2d", [x.out], **window),
        "concat": lambda: Node("concat", [m.out, m.out], axis=0),
        "split": lambda: Node("split", [m.out], axis=1, sizes=(2, 3)),
        "ones": lambda: Node("ones", shape=(2,), dtype=DType.F32),
        "zeros": lambda: Node("zeros", shape=(2,), dtype=DType.F32),
        "c_pool": lambda: Node("c_pool", channels=4, kernel=(3, 3), dtype=DType.F32),
        "i_conv": lambda: Node("i_conv", channels=4, kernel=(3, 3), dtype=DType.F32),
        "i_matmul": lambda: Node("i_matmul", size=3, dtype=DType.F32),
        "constant": lambda: Node("constant", value=ConstData((1,), DType.F32, (2.0,))),
        "reshape": lambda: Node("reshape", [m.out], shape=(5, 3)),
        "softmax": lambda: Node("softmax", [m.out], axis=-1),
        "reduce": lambda: Node("reduce", [m.out], **reduced),
        "batchnorm": lambda: Node("batchnorm", [x.out, c.out, c.out, c.out, c.out], epsilon=0.1),
        "layernorm": lambda: Node("layernorm", [m.out, five.out, five.out], axis=1, epsilon=0.1),
        "embedding": lambda: Node("embedding", [ids.out, table.out]),
        **{name: (lambda name=name: Node(name, [m.out])) for name in UNARY},
        **{name: (lambda name=name: Node(name, [m.out, five.out])) for name in BINARY},
        "compare": lambda: Node("compare", [m.out, five.out], predicate="le"),
        "not": lambda: Node("not", [flags.out]),
        **{name: (lambda name=name: Node(name, [flags.out, flags.out])) for name in LOGIC},
        "where": lambda: Node("where", [flags.out, m.out, five.out]),
        "cast": lambda: Node("cast", [m.out], to=DType.F16),
        "broadcast": lambda: Node("broadcast", [five.out], shape=(2, 3, 5)),
        "gather": lambda: Node("gather", [table.out, ids.out], axis=-2),
        "relu_grad": lambda: Node("relu_grad", [m.out, m.out]),
        "sigmoid_grad": lambda: Node("sigmoid_grad", [m.out, m.out]),
        "tanh_grad": lambda: Node("tanh_grad", [m.out, m.out]),
        "gelu_grad": lambda: Node("gelu_grad", [m.out, m.out]),
        "conv2d_grad_input": lambda: conv_nodes()[1],
        "conv2d_grad_weight": lambda: conv_nodes()[2],
        "pool2d_grad": lambda: Node("pool2d_grad", [x.out, arg(8, 1, 4, 3, 3).out], **window),
        "reduce_grad": lambda: Node("reduce_grad", [m.out, arg(8, 3).out], **reduced),
        "scatter_add": lambda: Node("scatter_add", [ids.out, arg(8, 2, 3, 5).out], rows=10),
        "layernorm_grad": lambda: Node(
            "layernorm_grad", [m.out, five.out, m.out], axis=1, epsilon=0.1
        ),
        "batchnorm_train": lambda: Node("batchnorm_train", [x.out, c.out, c.out], epsilon=0.1),
        "batchnorm_grad": lambda: Node("batchnorm_grad", [x.out, c.out, x.out], epsilon=0.1),
        "softmax_cross_entropy": lambda: Node(
            "softmax_cross_entropy", [m.out, arg(8, 3, dtype="i64").out]
        ),
        "softmax_cross_entropy_grad": lambda: Node(
            "softmax_cross_entropy_grad", [m.out, arg(8, 3, dtype="i64").out, arg(9, 3).out]
        ),
        "adam_update": lambda: Node("adam_update", [m.out, m.out, m.out, m.out, s.out], **ADAM),
        **_gnn_makers(m),
    }
    assert set(makers) == set(G.OPS_BY_NAME), "every op needs an example here"
    return makers[op]()


def _gnn_makers(x: Node) -> dict[str, Callable[[], Node]]:
    """The GNN ops over `x` ([3, 5]: three vertices) and one block of four edges."""
    src, dst = arg(20, 1, 4, dtype="i32"), arg(21, 1, 4, dtype="i32")
    weight, scores = arg(22, 1, 4), arg(23, 1, 4)
    column = arg(24, 3, 1)
    edges = {"reduce": "mean", "block_rows": 3}
    return {
        "aggregate": lambda: Node("aggregate", [x.out, src.out, dst.out, weight.out], **edges),
        "aggregate_grad": lambda: Node("aggregate_grad", [x.out, src.out, dst.out, x.out], **edges),
        "aggregate_weight_grad": lambda: Node(
            "aggregate_weight_grad", [x.out, src.out, dst.out, x.out], **edges
        ),
        "edge_softmax": lambda: Node("edge_softmax", [scores.out, dst.out], block_rows=3),
        "edge_softmax_grad": lambda: Node(
            "edge_softmax_grad", [scores.out, dst.out, weight.out], block_rows=3
        ),
        "edge_scores": lambda: Node(
            "edge_scores", [column.out, column.out, src.out, dst.out], block_rows=3
        ),
    }


@pytest.mark.parametrize("op", sorted(G.OPS_BY_NAME))
def test_node_stats_prices_every_op(op: str) -> None:
    node = _example(op)
    assert node.op == op
    stats = node_stats(node)
    if op in ops_with(ConstantLike):
        assert stats == OpStats(0, 0, 0)
        return
    assert stats.bytes_written == sum(sig_bytes(s) for s in node.sigs) > 0
    assert stats.bytes_read > 0
    assert stats.flops >= 0
