"""The light immutable graph (`tasoc.ir.dag`): interning, immutability, pickling,
substitution, typing, and the round trip with xDSL modules."""

from __future__ import annotations

import copy
import gc
import pickle

import pytest
from hypothesis import given, settings
from xdsl.context import Context
from xdsl.dialects import arith, builtin, func
from xdsl.parser import Parser

from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag, Node, Use, Value, from_module, to_module
from tasoc.ir.program import ProgramError
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import graphs

CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


def sig(*shape: int, dtype: str = "f32") -> TensorSig:
    return TensorSig(tuple(shape), DType(dtype))


def parse(text: str) -> builtin.ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, arith.Arith, G.Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def conv_relu() -> tuple[Dag, dict[str, Node]]:
    """relu(conv2d(x, w)) with an unused bias weight, and its nodes by name."""
    x = Node.arg(0, "x", sig(1, 3, 8, 8))
    w = Node.arg(1, "w", sig(4, 3, 3, 3), is_param=True)
    b = Node.arg(2, "b", sig(4), is_param=True)
    conv = Node("conv2d", [x.out, w.out], **CONV)
    relu = Node("relu", [conv.out])
    return Dag([x, w, b], [relu.out]), {"x": x, "w": w, "b": b, "conv": conv, "relu": relu}


def relu_chain(length: int) -> Dag:
    x = Node.arg(0, "x", sig(2, 2))
    value = x.out
    for _ in range(length):
        value = Node("relu", [value]).out
    return Dag([x], [value])


# ----------------------------------------------------------------- interning


def test_structurally_equal_nodes_are_one_object() -> None:
    dag, n = conv_relu()
    again, m = conv_relu()
    assert m["relu"] is n["relu"] and m["conv"] is n["conv"]
    assert again == dag and hash(again) == hash(dag)
    assert Node("relu", [n["conv"].out]) is n["relu"]
    assert Node("sigmoid", [n["conv"].out]) is not n["relu"]
    strided = Node("conv2d", [n["x"].out, n["w"].out], **{**CONV, "strides": (2, 2)})
    assert strided is not n["conv"] and strided.sigs == (sig(1, 4, 4, 4),)


def test_attributes_in_any_order_or_as_lists_are_canonical() -> None:
    _, n = conv_relu()
    shuffled = Node(
        "conv2d",
        [n["x"].out, n["w"].out],
        groups=1,
        activation="none",
        padding="same",
        strides=[1, 1],
    )
    assert shuffled is n["conv"]
    assert [name for name, _ in shuffled.attrs] == ["strides", "padding", "activation", "groups"]


@pytest.mark.parametrize(
    ("first", "second"),
    [
        ({"value": ConstData((), DType.F32, (0.0,))}, {"value": ConstData((), DType.F32, (-0.0,))}),
        ({"shape": (2,), "dtype": DType.F32}, {"shape": (2,), "dtype": "f32"}),
    ],
    ids=["signed-zero", "dtype-vs-string"],
)
def test_values_python_calls_equal_but_ir_prints_differently_stay_apart(
    first: dict[str, object], second: dict[str, object]
) -> None:
    op = "constant" if "value" in first else "ones"
    assert first == second  # Python's == cannot tell them apart ...
    assert Node(op, **first) is not Node(op, **second)  # ... interning can.


def test_int_and_float_epsilon_are_different_nodes() -> None:
    x, gamma, beta = (Node.arg(i, n, sig(2, 3)) for i, n in enumerate("xgb"))
    operands = [x.out, gamma.out, beta.out]
    assert Node("layernorm", operands, axis=0, epsilon=1.0) is not Node(
        "layernorm", operands, axis=0, epsilon=1
    )


def test_dropped_nodes_are_forgotten_and_rebuilt_equal() -> None:
    text = str(to_module(conv_relu()[0]))
    gc.collect()
    rebuilt, n = conv_relu()
    assert str(to_module(rebuilt)) == text
    assert n["relu"].inputs == (n["conv"].out,)


# -------------------------------------------------------------- immutability


def test_nodes_and_dags_cannot_be_changed() -> None:
    dag, n = conv_relu()
    with pytest.raises(AttributeError):
        n["relu"].op = "sigmoid"  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del n["relu"].inputs
    with pytest.raises(AttributeError):
        dag.outputs = ()  # type: ignore[misc]
    with pytest.raises(AttributeError):
        del dag.ops
    with pytest.raises(AttributeError):
        n["relu"].extra = 1  # type: ignore[attr-defined]
    assert copy.deepcopy(dag) is dag and copy.copy(n["conv"]) is n["conv"]


# ------------------------------------------------------------------- pickling


def test_pickle_round_trip_reinterns() -> None:
    dag, n = conv_relu()
    assert pickle.loads(pickle.dumps(dag)) == dag
    assert pickle.loads(pickle.dumps(n["relu"])) is n["relu"]
    assert pickle.loads(pickle.dumps(n["relu"].out)) == n["relu"].out


def test_pickle_after_the_originals_are_gone() -> None:
    data = pickle.dumps(conv_relu()[0])
    gc.collect()
    restored = pickle.loads(data)
    assert restored == conv_relu()[0]
    assert [a.attr("name") for a in restored.args] == ["x", "w", "b"]


def test_deep_graphs_need_no_recursion() -> None:
    """A chain far deeper than Python's recursion limit: order, pickle, convert."""
    dag = relu_chain(30_000)
    assert dag.num_ops == 30_000
    assert pickle.loads(pickle.dumps(dag)) == dag
    module = to_module(dag)
    assert from_module(module) == dag


# -------------------------------------------------------------- substitution


def test_replace_rebuilds_only_downstream_nodes() -> None:
    dag, n = conv_relu()
    enlarged = Node("enlarge", [n["w"].out], kernel=(5, 5))
    new = dag.replace({n["w"].out: enlarged.out})
    assert dag.ops == (n["conv"], n["relu"])  # the original is untouched
    assert [node.op for node in new.ops] == ["enlarge", "conv2d", "relu"]
    new_conv = new.ops[1]
    assert new_conv.inputs == (n["x"].out, enlarged.out) and new_conv.attrs == n["conv"].attrs
    assert new.output_sigs == dag.output_sigs
    assert dag.replace({}) == dag
    assert dag.replace({n["conv"].out: n["conv"].out}) == dag


def test_replace_can_reuse_the_value_it_replaces() -> None:
    dag, n = conv_relu()
    doubled = Node("add", [n["conv"].out, n["conv"].out])
    new = dag.replace({n["conv"].out: doubled.out})
    assert [node.op for node in new.ops] == ["conv2d", "add", "relu"]
    assert new.outputs[0].node.inputs == (doubled.out,)


def test_replace_an_output() -> None:
    dag, n = conv_relu()
    new = dag.replace({n["relu"].out: n["conv"].out})
    assert new.ops == (n["conv"],)


def test_ill_typed_substitution_fails_loudly() -> None:
    dag, n = conv_relu()
    five_channels = Node.arg(0, "x", sig(1, 5, 8, 8))
    with pytest.raises(ShapeError, match=r"graph\.conv2d"):
        dag.replace({n["x"].out: five_channels.out})
    bigger = Node("concat", [n["conv"].out, n["conv"].out], axis=1)
    with pytest.raises(ShapeError, match="changes a result"):
        dag.replace({n["relu"].out: bigger.out})


def test_replace_rejects_foreign_values_and_arguments() -> None:
    dag, n = conv_relu()
    stranger = Node.arg(0, "y", sig(1, 3, 8, 8))
    with pytest.raises(KeyError):
        dag.replace({stranger.out: n["x"].out})
    with pytest.raises(ValueError, match="not one of the dag's arguments"):
        dag.replace({n["x"].out: stranger.out})


def test_consumers_lists_every_use() -> None:
    dag, n = conv_relu()
    doubled = dag.replace({n["conv"].out: Node("add", [n["conv"].out, n["conv"].out]).out})
    uses = doubled.consumers()
    add = doubled.ops[1]
    assert uses[n["conv"].out] == (Use(add, 0), Use(add, 1))
    assert uses[n["x"].out] == (Use(n["conv"], 0),)
    assert doubled.outputs[0] not in uses
    assert n["b"].out not in uses


# --------------------------------------------------------------------- typing


def test_ill_typed_nodes_fail_with_shape_error() -> None:
    a = Node.arg(0, "a", sig(1, 2))
    b = Node.arg(1, "b", sig(3, 4))
    with pytest.raises(ShapeError, match=r"graph\.add: shapes 1x2 and 3x4"):
        Node("add", [a.out, b.out])
    with pytest.raises(ShapeError, match="expected 1 operands"):
        Node("relu", [a.out, b.out])
    with pytest.raises(ShapeError, match="unknown op"):
        Node("frobnicate", [a.out])
    with pytest.raises(ShapeError, match="attributes"):
        Node("softmax", [a.out])
    with pytest.raises(ShapeError, match="attributes"):
        Node("relu", [a.out], axis=0)
    with pytest.raises(ShapeError, match="names result 1"):
        Node("relu", [Value(a, 1)])
    with pytest.raises(TypeError, match="must be a Value"):
        Node("relu", [a])  # type: ignore[list-item]
    with pytest.raises(ValueError, match=r"Node\.arg"):
        Node("arg")


def test_multi_result_split() -> None:
    x = Node.arg(0, "x", sig(2, 6))
    split = Node("split", [x.out], axis=1, sizes=(2, 4))
    assert split.sigs == (sig(2, 2), sig(2, 4))
    with pytest.raises(ValueError, match="2 results"):
        _ = split.out
    first, second = split.results
    swapped = Node("concat", [second, first], axis=1)
    dag = Dag([x], [swapped.out, first])
    text = str(to_module(dag))
    assert "%0, %1 = graph.split %x" in text
    assert "graph.concat %1, %0" in text
    assert "func.return %2, %0" in text
    assert from_module(parse(text)) == dag


# ------------------------------------------------------------ arguments, dags


def test_arguments_names_params_and_order_survive() -> None:
    x = Node.arg(0, "x", sig(2))
    w1 = Node.arg(1, "w", sig(2), is_param=True)
    w2 = Node.arg(2, "w", sig(2), is_param=True)
    unused = Node.arg(3, "unused", sig(7))
    assert w1 is not w2  # same name, different positions
    total = Node("add", [Node("mul", [x.out, w1.out]).out, w2.out])
    dag = Dag([x, w1, w2, unused], [total.out])
    module = to_module(dag)
    text = str(module)
    assert "@main(%x: tensor<2xf32>, %w: tensor<2xf32> {graph.param}, %w_1" in text
    assert "%unused: tensor<7xf32>)" in text
    assert from_module(parse(text)) == dag


def test_dag_checks_its_arguments() -> None:
    x = Node.arg(0, "x", sig(2))
    y = Node.arg(1, "y", sig(2))
    added = Node("add", [x.out, y.out]).out
    with pytest.raises(ValueError, match=r"args\[0\]"):
        Dag([y, x], [added])
    with pytest.raises(ValueError, match="not one of the dag's arguments"):
        Dag([x], [added])
    with pytest.raises(ValueError, match="at least one output"):
        Dag([x, y], [])
    with pytest.raises(ValueError, match="Invalid"):
        Node.arg(0, "9lives", sig(2))
    with pytest.raises(ValueError, match="_<digits>"):
        Node.arg(0, "w_1", sig(2))


def test_topological_order_is_deterministic_and_valid() -> None:
    dag, _ = conv_relu()
    for node in dag.ops:
        earlier = dag.ops[: dag.ops.index(node)]
        assert all(v.node.is_arg or v.node in earlier for v in node.inputs)
    assert to_module(dag).is_structurally_equivalent(to_module(conv_relu()[0]))


def test_position_is_each_ops_index_in_the_topological_order() -> None:
    dag, n = conv_relu()
    assert dag.position() == {n["conv"]: 0, n["relu"]: 1}
    assert dag.position() is dag.position()  # computed once per dag
    assert n["x"] not in dag.position()  # arguments have none
    graph = relu_chain(30)
    position = graph.position()
    assert sorted(position.values()) == list(range(30))
    assert all(
        v.node.is_arg or position[v.node] < position[node]
        for node in graph.ops
        for v in node.inputs
    )


def test_replace_keeps_the_function_and_result_attributes() -> None:
    dag, n = conv_relu()
    attributed = Dag(
        dag.args,
        dag.outputs,
        attributes=(("sym_visibility", builtin.StringAttr("private")),),
        result_attributes=[(("my.res", builtin.UnitAttr()),)],
    )
    new = attributed.replace({n["relu"].out: n["conv"].out})
    assert (new.attributes, new.result_attributes) == (
        attributed.attributes,
        attributed.result_attributes,
    )
    assert Dag(dag.args, dag.outputs, result_attributes=[()]).result_attributes == ()
    with pytest.raises(ValueError, match="result attribute sets"):
        Dag(dag.args, dag.outputs, result_attributes=[*attributed.result_attributes, ()])


# ---------------------------------------------------------------- conversion


def residual_module(duplicate: bool) -> builtin.ModuleOp:
    g = GraphBuilder()
    x = g.input("x", (1, 4, 5, 5))
    w = g.param("w", (4, 4, 3, 3))
    y = g.relu(g.conv2d(x, w))
    skip = g.relu(x)
    other = g.relu(x) if duplicate else g.sigmoid(x)
    g.tanh(y)  # dead: no output uses it
    return g.build(g.add(g.add(y, skip), other))


def test_identical_ops_merge_and_dead_ops_vanish() -> None:
    merged = from_module(residual_module(duplicate=True))
    distinct = from_module(residual_module(duplicate=False))
    assert [n.op for n in merged.ops] == ["conv2d", "relu", "relu", "add", "add"]
    assert [n.op for n in distinct.ops] == ["conv2d", "relu", "relu", "add", "sigmoid", "add"]
    final = merged.outputs[0].node
    skip = final.inputs[0].node.inputs[1]
    assert final.inputs[1] == skip  # both relu(x) are one value
    module = to_module(merged)
    module.verify()
    assert str(module).count("graph.relu") == 2 and "graph.tanh" not in str(module)


def test_from_module_rejects_what_it_cannot_represent() -> None:
    wrong_type = parse(
        """
        func.func @main(%x: tensor<2xf32>) -> tensor<3xf32> {
          %y = "graph.relu"(%x) : (tensor<2xf32>) -> tensor<3xf32>
          func.return %y : tensor<3xf32>
        }
        """
    )
    with pytest.raises(ShapeError, match="result #0 has type 3xf32, inference says 2xf32"):
        from_module(wrong_type)
    foreign = parse(
        """
        func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {
          %y = arith.addf %x, %x : tensor<2xf32>
          func.return %y : tensor<2xf32>
        }
        """
    )
    with pytest.raises(ProgramError, match=r"'arith\.addf' cannot be represented"):
        from_module(foreign)


def test_function_name_is_kept_and_only_main_converts() -> None:
    g = GraphBuilder()
    x = g.input("x", (3,))
    dag = from_module(g.build(g.relu(x)))
    assert dag.name == "main"
    forward = Dag(dag.args, dag.outputs, "forward")
    assert "func.func @forward" in str(to_module(forward))
    assert forward != dag  # the name is part of the identity
    with pytest.raises(ProgramError, match=r"no 'func\.func @main'"):
        from_module(to_module(forward))


@settings(max_examples=40, deadline=None)
@given(graphs(max_ops=10, dtypes=("f32", "f16", "bf16")))
def test_round_trip_through_modules_and_text(module: builtin.ModuleOp) -> None:
    dag = from_module(module)
    rebuilt = to_module(dag)
    assert from_module(rebuilt) == dag
    assert equivalent(module, rebuilt).ok
    reparsed = parse(str(rebuilt))
    reparsed.verify()
    assert from_module(reparsed) == dag
    assert from_module(parse(str(module))) == dag
    assert pickle.loads(pickle.dumps(dag)) == dag
    assert dag.num_ops <= sum(1 for _ in module.walk()) - 3  # module, func, return
