"""The `graph` dialect: typing rules, verifiers, builder, text round trip."""

from __future__ import annotations

import io
from collections.abc import Callable
from unittest import mock

import pytest
from hypothesis import given, settings
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.irdl.declarative_assembly_format import FormatProgram
from xdsl.parser import Parser
from xdsl.printer import Printer
from xdsl.utils.exceptions import ParseError, VerifyException

from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder, shape_of
from tasoc.ir.program import arg_infos, entry_function, return_values
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig, infer, window_pads
from tasoc.verify.strategies import graphs


def sig(*shape: int, dtype: str = "f32") -> TensorSig:
    return TensorSig(tuple(shape), DType(dtype))


def parse(text: str) -> builtin.ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, G.Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


CONV = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "expected"),
    [
        ("add", [sig(2, 1, 4), sig(3, 1)], {}, [sig(2, 3, 4)]),
        ("mul", [sig(5), sig(5)], {}, [sig(5)]),
        ("scale", [sig(2, 3), sig()], {}, [sig(2, 3)]),
        ("transpose", [sig(2, 3, 4)], {"perm": (2, 0, 1)}, [sig(4, 2, 3)]),
        ("matmul", [sig(7, 2, 3), sig(3, 5)], {}, [sig(7, 2, 5)]),
        ("conv2d", [sig(1, 4, 9, 9), sig(8, 2, 3, 3)], {**CONV, "groups": 2}, [sig(1, 8, 9, 9)]),
        (
            "conv2d",
            [sig(1, 3, 10, 10), sig(4, 3, 3, 3)],
            {**CONV, "strides": (2, 2), "padding": "valid"},
            [sig(1, 4, 4, 4)],
        ),
        (
            "conv2d",
            [sig(1, 3, 5, 5), sig(4, 3, 3, 3)],
            {**CONV, "padding": (1, 1, 0, 0)},
            [sig(1, 4, 4, 4)],
        ),
        ("enlarge", [sig(4, 3, 1, 1)], {"kernel": (3, 3)}, [sig(4, 3, 3, 3)]),
        (
            "pool2d",
            [sig(1, 2, 7, 7)],
            {"kind": "max", "kernel": (3, 3), "strides": (2, 2), "padding": "same"},
            [sig(1, 2, 4, 4)],
        ),
        ("concat", [sig(1, 2, 3), sig(1, 5, 3)], {"axis": 1}, [sig(1, 7, 3)]),
        ("split", [sig(4, 6)], {"axis": -1, "sizes": (1, 5)}, [sig(4, 1), sig(4, 5)]),
        ("ones", [], {"shape": (2, 2), "dtype": DType.BF16}, [sig(2, 2, dtype="bf16")]),
        ("c_pool", [], {"channels": 3, "kernel": (3, 3), "dtype": DType.F32}, [sig(3, 1, 3, 3)]),
        ("i_conv", [], {"channels": 3, "kernel": (3, 3), "dtype": DType.F32}, [sig(3, 3, 3, 3)]),
        ("i_matmul", [], {"size": 4, "dtype": DType.F16}, [sig(4, 4, dtype="f16")]),
        ("constant", [], {"value": ConstData((2,), DType.F32, (1.0, 2.0))}, [sig(2)]),
        ("reshape", [sig(2, 3, 4)], {"shape": (6, 4)}, [sig(6, 4)]),
        ("softmax", [sig(2, 3)], {"axis": -1}, [sig(2, 3)]),
        ("reduce", [sig(2, 3, 4)], {"kind": "mean", "axes": (0, 2), "keepdims": False}, [sig(3)]),
        ("reduce", [sig(2, 3)], {"kind": "sum", "axes": (1,), "keepdims": True}, [sig(2, 1)]),
        ("batchnorm", [sig(1, 3, 2, 2)] + [sig(3)] * 4, {"epsilon": 1e-5}, [sig(1, 3, 2, 2)]),
        (
            "layernorm",
            [sig(2, 4, 8), sig(4, 8), sig(4, 8)],
            {"axis": 1, "epsilon": 1e-5},
            [sig(2, 4, 8)],
        ),
        ("embedding", [sig(2, 5, dtype="i64"), sig(100, 16)], {}, [sig(2, 5, 16)]),
    ],
)
def test_inference(
    op: str, inputs: list[TensorSig], attrs: dict, expected: list[TensorSig]
) -> None:
    assert infer(op, inputs, attrs) == expected


@pytest.mark.parametrize(
    ("op", "inputs", "attrs", "message"),
    [
        ("add", [sig(2, 3), sig(4, 3)], {}, "not broadcastable"),
        ("add", [sig(2), sig(2, dtype="f16")], {}, "element types differ"),
        ("add", [sig(2)], {}, "expected 2 operands, got 1"),
        ("scale", [sig(2, 3), sig(1)], {}, "rank 0"),
        ("relu", [sig(2, dtype="i32")], {}, "float element type"),
        ("transpose", [sig(2, 3)], {"perm": (0, 0)}, "not a permutation"),
        ("matmul", [sig(2, 3), sig(4, 5)], {}, "contraction sizes differ"),
        ("matmul", [sig(3), sig(3, 5)], {}, "rank >= 2"),
        ("conv2d", [sig(1, 4, 8, 8), sig(8, 4, 3, 3)], {**CONV, "groups": 3}, "must divide"),
        ("conv2d", [sig(1, 4, 8, 8), sig(8, 3, 3, 3)], CONV, "input channels"),
        (
            "conv2d",
            [sig(1, 3, 8, 8), sig(8, 3, 3, 3)],
            {**CONV, "activation": "tanh"},
            "activation",
        ),
        ("conv2d", [sig(1, 3, 8, 8), sig(8, 3, 3, 3)], {**CONV, "padding": "full"}, "padding"),
        ("conv2d", [sig(1, 3, 2, 2), sig(8, 3, 3, 3)], {**CONV, "padding": "valid"}, "larger"),
        ("enlarge", [sig(4, 3, 3, 3)], {"kernel": (4, 4)}, "symmetrically"),
        (
            "pool2d",
            [sig(1, 2, 4, 4)],
            {"kind": "min", "kernel": (2, 2), "strides": (2, 2), "padding": "valid"},
            "kind",
        ),
        ("concat", [sig(1, 2, 3), sig(2, 2, 3)], {"axis": 1}, "off axis"),
        ("concat", [sig(1, 2)], {"axis": 2}, "out of range"),
        ("split", [sig(4, 6)], {"axis": 1, "sizes": (2, 2)}, "do not sum"),
        ("i_conv", [], {"channels": 2, "kernel": (2, 2), "dtype": DType.F32}, "odd"),
        ("reshape", [sig(2, 3)], {"shape": (4, 2)}, "cannot reshape"),
        ("reduce", [sig(2, 3)], {"kind": "sum", "axes": (1, 1), "keepdims": False}, "distinct"),
        ("batchnorm", [sig(1, 3, 2, 2), sig(4), sig(3), sig(3), sig(3)], {"epsilon": 0.1}, "scale"),
        ("layernorm", [sig(2, 8), sig(4), sig(8)], {"axis": -1, "epsilon": 0.1}, "gamma"),
        ("embedding", [sig(2, 5), sig(100, 16)], {}, "i32 or i64"),
    ],
)
def test_inference_rejects(op: str, inputs: list[TensorSig], attrs: dict, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        infer(op, inputs, attrs)


@pytest.mark.parametrize(
    ("in_hw", "kernel", "strides", "pads"),
    [
        ((7, 7), (3, 3), (1, 1), (1, 1, 1, 1)),
        ((8, 8), (3, 3), (2, 2), (0, 0, 1, 1)),  # odd total: the extra row goes bottom/right
        ((5, 6), (1, 1), (1, 1), (0, 0, 0, 0)),
    ],
)
def test_same_padding(in_hw, kernel, strides, pads) -> None:
    assert window_pads("same", in_hw, kernel, strides) == pads


def small_program() -> builtin.ModuleOp:
    g = GraphBuilder()
    x = g.input("x", (1, 3, 8, 8))
    w = g.param("w", (4, 3, 3, 3))
    y = g.conv2d(x, w, activation="relu")
    a, b = g.split(y, axis=1, sizes=(1, 3))
    z = g.concat([b, a], axis=1)
    s = g.scale(z, 0.5)
    return g.build(g.reduce(s, "max", axes=(2, 3)))


def test_builder_program_shape() -> None:
    module = small_program()
    module.verify()
    function = entry_function(module)
    infos = arg_infos(function)
    assert [(i.name, i.is_param) for i in infos] == [("x", False), ("w", True)]
    (out,) = return_values(function)
    assert shape_of(out) == (1, 4)
    assert "{graph.param}" in str(module)


def test_builder_reports_op_on_error() -> None:
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    with pytest.raises(ShapeError, match=r"graph\.matmul: contraction sizes differ"):
        g.matmul(x, x)


def test_text_round_trip_is_identical() -> None:
    text = str(small_program())
    again = parse(text)
    again.verify()
    assert str(again) == text


def test_verifier_rejects_wrong_result_type() -> None:
    g = GraphBuilder()
    x = g.input("x", (2, 3))
    w = g.param("w", (3, 4))
    good = g.matmul(x, w).owner
    wrong = G.MatmulOp.create(
        operands=[x, w], result_types=[G.tensor_type(sig(2, 5))], properties={}
    )
    good.verify()
    with pytest.raises(VerifyException, match=r"'graph\.matmul': result types 2x5xf32 .* 2x4xf32"):
        wrong.verify()


def test_verifier_rejects_missing_attribute() -> None:
    text = str(small_program()).replace('activation = "relu", ', "", 1)
    module = parse(text)
    with pytest.raises(VerifyException, match="property 'activation' expected"):
        module.verify()


def test_attribute_codec_round_trip() -> None:
    values = [
        3,
        -1,
        2.5,
        True,
        "same",
        (1, 2, 3),
        DType.BF16,
        ConstData((2,), DType.F32, (1.0, -2.0)),
    ]
    for value in values:
        decoded = G.from_attr(G.to_attr(value))
        assert decoded == value
        assert type(decoded) is type(value)


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("w_1", "ends in '_<digits>'.*'w1'"),
        ("1w", "not a valid IR identifier"),
        ("x", "used twice"),
    ],
)
def test_builder_rejects_argument_names_the_ir_cannot_keep(name: str, message: str) -> None:
    g = GraphBuilder()
    g.input("x", (2,))
    with pytest.raises(ValueError, match=message):
        g.param(name, (2,))


def test_properties_print_in_declared_order_whatever_the_keyword_order() -> None:
    g = GraphBuilder()
    x = g.input("x", (1, 2, 4, 4))
    a = g.emit(G.Pool2dOp, x, padding="valid", strides=(2, 2), kernel=(2, 2), kind="max")
    b = g.emit(G.Pool2dOp, x, kind="max", kernel=(2, 2), strides=(2, 2), padding="valid")
    assert str(a).split("=", 1)[1] == str(b).split("=", 1)[1]
    with pytest.raises(ShapeError, match="unknown attribute"):
        g.emit(G.ReluOp, x, alpha=0.1)


def test_attributes_of_repeated_values_are_shared_but_never_across_kinds() -> None:
    assert G.to_attr((1, 1)) is G.to_attr((1, 1))
    assert G.to_attr("same") is G.to_attr("same")
    assert G.from_attr(G.to_attr(True)) is True
    assert G.from_attr(G.to_attr(1)) == 1 and G.from_attr(G.to_attr(1)) is not True
    assert G.to_attr(DType.F32) != G.to_attr("f32")
    assert str(G.to_attr(-0.0)).startswith("-0.0")
    assert str(G.to_attr(0.0)).startswith("0.0")


# ------------------------------------------------------------------- text forms

OLDER_FORMAT = "operands attr-dict `:` functional-type(operands, results)"
"""How graph ops with operands printed before the short form: every operand type
written out (constants printed `attr-dict : type($result)`, as they still do)."""
CONSTANT_FORMAT = "attr-dict `:` type($result)"


def print_generic(module: builtin.ModuleOp) -> str:
    stream = io.StringIO()
    Printer(stream=stream, print_generic_format=True).print_op(module)
    return stream.getvalue()


def print_older_form(module: builtin.ModuleOp) -> str:
    """The module in the older text form, printed by xDSL's own declarative format so
    that the text does not come from the code under test."""
    programs: dict[type[G.GraphOp], FormatProgram] = {}

    def print_op(op: G.GraphOp, printer: Printer) -> None:
        if type(op) not in programs:
            definition = op.get_irdl_definition()
            form = OLDER_FORMAT if definition.operands else CONSTANT_FORMAT
            programs[type(op)] = FormatProgram.from_str(form, definition)
        programs[type(op)].print(printer, op)

    with mock.patch.object(G.GraphOp, "print", print_op):
        return str(module)


TEXT_FORMS: dict[str, Callable[[builtin.ModuleOp], str]] = {
    "short": str,
    "generic": print_generic,
    "older functional-type": print_older_form,
}


@pytest.mark.parametrize("form", TEXT_FORMS)
@settings(max_examples=25, deadline=None)
@given(module=graphs(dtypes=[DType.F32, DType.BF16]))
def test_every_text_form_parses_back_to_the_same_program(
    form: str, module: builtin.ModuleOp
) -> None:
    text = TEXT_FORMS[form](module)
    reparsed = parse(text)
    reparsed.verify()
    assert str(reparsed) == str(module)


def test_short_form_writes_result_types_only() -> None:
    g = GraphBuilder()
    x = g.input("x", (4, 6))
    left, right = g.split(x, 1, (2, 4))
    module = g.build(g.matmul(g.transpose(left, (1, 0)), right))
    lines = [line.strip() for line in str(module).splitlines() if "graph." in line]
    assert lines == [
        "%0, %1 = graph.split %x {axis = 1 : i64, sizes = array<i64: 2, 4>} "
        ": tensor<4x2xf32>, tensor<4x4xf32>",
        "%2 = graph.transpose %0 {perm = array<i64: 1, 0>} : tensor<2x4xf32>",
        "%3 = graph.matmul %2, %1 : tensor<2x4xf32>",
    ]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("%0 = graph.relu %y : tensor<2xf32>", "use of undefined value %y"),
        ("%0 = graph.relu %x#1 : tensor<2xf32>", "use of undefined value %x#1"),
        ("%0 = graph.add %x, %x : (tensor<2xf32>) -> tensor<2xf32>", "lists 1"),
        ("%0 = graph.relu %x : (tensor<3xf32>) -> tensor<2xf32>", "used with type tensor<3xf32>"),
        ("%0 = graph.relu %x : tensor<2xf32>, tensor<2xf32>", "has 2 results"),
    ],
)
def test_malformed_graph_op_text_is_a_parse_error(body: str, message: str) -> None:
    text = f"func.func @main(%x: tensor<2xf32>) -> tensor<2xf32> {{\n  {body}\n"
    text += "  func.return %0 : tensor<2xf32>\n}\n"
    with pytest.raises(ParseError, match=message):
        parse(text)
