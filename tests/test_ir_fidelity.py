"""The light graph keeps what a pass did not search (`tasoc.ir.dag`): tensor encodings,
argument, result and function attributes survive the round trip; `write_back` replaces
`@main` and nothing else of a module; what a dag cannot hold exactly is refused with
one line, through the API and the command line; backends refuse encoded tensors."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import StringAttr, TensorType
from xdsl.ir import Block, Region
from xdsl.parser import Parser
from xdsl.utils.exceptions import VerifyException

from tasoc.ir import graph as G
from tasoc.ir.dag import Dag, Node, from_module, to_module, write_back
from tasoc.ir.program import ProgramError, entry_function
from tasoc.ir.shapes import DType, ShapeError, TensorSig

HOST = StringAttr("host")
"""An encoding xDSL parses without a dialect: `tensor<4xf32, "host">`, standing in for
`#memory.space<host>` or a sharding."""

MATMULS = """
builtin.module attributes {my.module = 7 : i64} {
  func.func @helper(%a: tensor<4xf32>) -> tensor<4xf32> {
    func.return %a : tensor<4xf32>
  }
  "my.mesh"() {sym_name = "mesh"} : () -> ()
  func.func private @main(%x0: tensor<1x256xf32, "host"> {my.attr = 1 : i64},
                          %x1: tensor<1x256xf32, "host">,
                          %x2: tensor<1x256xf32, "host">,
                          %w: tensor<256x256xf32, "host"> {graph.param, my.attr = 2 : i64})
      -> (tensor<1x256xf32, "host"> {my.res = "a"}, tensor<1x256xf32, "host">,
          tensor<1x256xf32, "host">) attributes {my.fn} {
    %0 = graph.matmul %x0, %w : tensor<1x256xf32, "host">
    %1 = graph.matmul %x1, %w : tensor<1x256xf32, "host">
    %2 = graph.matmul %x2, %w : tensor<1x256xf32, "host">
    func.return %0, %1, %2 : tensor<1x256xf32, "host">, tensor<1x256xf32, "host">,
                             tensor<1x256xf32, "host">
  }
  func.func private @decl(tensor<4xf32>) -> tensor<4xf32>
}
"""
"""Three matmuls by one weight (which equality-rewrite batches into one), every tensor
encoded, foreign argument, result, function and module attributes, and module-level
ops beside `@main`: a helper function, an unregistered op and a declaration."""


def parse(text: str) -> builtin.ModuleOp:
    ctx = Context(allow_unregistered=True)
    for dialect in (builtin.Builtin, func.Func, G.Graph):
        ctx.load_dialect(dialect)
    module = Parser(ctx, text).parse_module()
    module.verify()
    return module


def outside_main(module: builtin.ModuleOp) -> list[str]:
    """Every module-level op but `@main`, printed, and the module's attributes."""
    main = entry_function(module)
    return [str(module.attributes)] + [str(op) for op in module.ops if op is not main]


def signature(module: builtin.ModuleOp) -> tuple[str, ...]:
    """What `@main` says beyond its body: type, argument and result attributes, its own."""
    main = entry_function(module)
    return (
        str(main.function_type),
        str(main.arg_attrs),
        str(main.res_attrs),
        str(main.sym_visibility),
        str(main.attributes),
        str([arg.name_hint for arg in main.body.block.args]),
    )


# ------------------------------------------------------------------ round trip


def test_round_trip_keeps_encodings_and_every_attribute_of_main() -> None:
    module = parse(MATMULS)
    dag = from_module(module)
    assert {value.sig.encoding for value in dag.outputs} == {HOST}
    x0, _, _, w = dag.args
    assert x0.attr("attributes") == (("my.attr", builtin.IntegerAttr(1, 64)),)
    assert w.attr("is_param") and w.attr("attributes") == (("my.attr", builtin.IntegerAttr(2, 64)),)
    assert dict(dag.attributes) == {
        "sym_visibility": StringAttr("private"),
        "my.fn": builtin.UnitAttr(),
    }
    assert dag.result_attributes[0] == (("my.res", StringAttr("a")),)
    rebuilt = to_module(dag)
    assert signature(rebuilt) == signature(module)
    assert str(entry_function(rebuilt)) == str(entry_function(module))
    assert from_module(rebuilt) == dag
    assert from_module(parse(str(rebuilt))) == dag


def test_attributes_and_encodings_are_part_of_identity_and_survive_pickling() -> None:
    dag = from_module(parse(MATMULS))
    assert pickle.loads(pickle.dumps(dag)) == dag
    plain = Dag(dag.args, dag.outputs, dag.name)
    assert plain != dag and plain.with_outputs(dag.outputs) == plain
    assert dag.with_outputs(dag.outputs) == dag
    sig = TensorSig((2,), DType.F32)
    assert Node.arg(0, "x", sig) is not Node.arg(0, "x", TensorSig((2,), DType.F32, HOST))
    assert Node.arg(0, "x", sig) is not Node.arg(0, "x", sig, attributes={"my.attr": HOST})
    with pytest.raises(ValueError, match="is_param"):
        Node.arg(0, "x", sig, attributes={G.PARAM_ATTR: builtin.UnitAttr()})


def test_an_op_takes_its_operands_common_encoding_and_mixed_encodings_are_refused() -> None:
    host = Node.arg(0, "x", TensorSig((2, 3), DType.F32, HOST))
    plain = Node.arg(1, "y", TensorSig((2, 3), DType.F32))
    relu = Node("relu", [host.out])
    assert relu.out.sig == TensorSig((2, 3), DType.F32, HOST)
    assert str(relu.out.sig) == '2x3xf32, "host"'
    assert Node("transpose", [host.out], perm=(1, 0)).out.sig.encoding == HOST
    assert Node("zeros", shape=(2, 3), dtype=DType.F32).out.sig.encoding is None
    with pytest.raises(ShapeError, match="different tensor encodings"):
        Node("add", [host.out, plain.out])


def test_the_verifier_checks_encodings_as_inference_does() -> None:
    block = Block(arg_types=[TensorType(builtin.f32, [4], HOST)])
    (x,) = block.args
    assert G.ReluOp.create_typed([x]).results[0].type == TensorType(builtin.f32, [4], HOST)
    forgetful = G.ReluOp.create(operands=[x], result_types=[TensorType(builtin.f32, [4])])
    with pytest.raises(VerifyException, match="do not match"):
        forgetful.verify()


# ------------------------------------------------------------------ write back


def test_write_back_replaces_main_only_and_in_place() -> None:
    module = parse(MATMULS)
    before = outside_main(module)
    order = [op.name for op in module.ops]
    dag = from_module(module)
    first = dag.outputs[0]
    doubled = dag.replace({first: Node("add", [first, first]).out})
    write_back(module, doubled)
    module.verify()
    assert outside_main(module) == before
    assert [op.name for op in module.ops] == order
    assert from_module(module) == doubled
    assert str(module).count("graph.add") == 1


# ------------------------------------------------------------------- refusals


def refused(text: str) -> str:
    with pytest.raises(ProgramError) as info:
        from_module(parse(text))
    message = str(info.value)
    assert "\n" not in message
    return message


def test_foreign_ops_are_refused_by_name_even_when_the_short_name_is_a_graph_op() -> None:
    message = refused(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = "other.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
        """
    )
    assert "'other.relu' cannot be represented" in message


def test_discardable_op_attributes_are_refused() -> None:
    message = refused(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = graph.relu %x {my.note = 1 : i64} : tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
        """
    )
    assert "'graph.relu' has attributes a dag cannot hold: my.note" in message


def test_a_body_of_several_blocks_is_refused() -> None:
    message = refused(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          func.return %x : tensor<4xf32>
        ^other:
          func.return %x : tensor<4xf32>
        }
        """
    )
    assert "@main has 2 blocks" in message


def test_a_graph_op_with_a_region_is_refused() -> None:
    module = parse(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = graph.relu %x : tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
        """
    )
    relu = next(op for op in entry_function(module).body.block.ops if isinstance(op, G.ReluOp))
    relu.add_region(Region())
    with pytest.raises(ProgramError, match=r"'graph\.relu' has regions"):
        from_module(module)


# -------------------------------------------------------------- command line


@pytest.fixture
def matmuls(tmp_path: Path) -> Path:
    path = tmp_path / "matmuls.mlir"
    path.write_text(MATMULS)
    return path


@pytest.mark.parametrize("options", ["", "search=backtrack", "split-size=2"])
def test_equality_rewrite_changes_main_body_only(
    tasoc: Callable[..., Result], matmuls: Path, options: str
) -> None:
    """Each search (and the split, which splices pieces back) keeps the rest."""
    pipeline = f"equality-rewrite{{retime=0 {options}}}"
    result = tasoc("opt", matmuls, "--allow-unregistered-dialect", "-p", pipeline)
    assert result.code == 0, result
    before, after = parse(MATMULS), parse(result.out)
    assert outside_main(after) == outside_main(before)
    assert signature(after) == signature(before)
    ops = [op.name for op in entry_function(after).body.block.ops]
    assert ops.count("graph.matmul") < 3 and "graph.concat" in ops  # the rewrite happened
    assert all(
        value.sig.encoding == HOST for node in from_module(after).ops for value in node.results
    )


def test_the_command_line_refuses_what_a_dag_cannot_hold_in_one_line(
    tasoc: Callable[..., Result], tmp_path: Path
) -> None:
    path = tmp_path / "foreign.mlir"
    path.write_text(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = "other.relu"(%x) : (tensor<4xf32>) -> tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
        """
    )
    result = tasoc("opt", path, "--allow-unregistered-dialect", "-p", "equality-rewrite")
    assert_one_line_error(result, "'other.relu' cannot be represented in a dag")
    path.write_text(
        """
        func.func @main(%x: tensor<4xf32>) -> tensor<4xf32> {
          %y = graph.relu %x {my.note = 1 : i64} : tensor<4xf32>
          func.return %y : tensor<4xf32>
        }
        """
    )
    result = tasoc("opt", path, "-p", "equality-rewrite")
    assert_one_line_error(result, "'graph.relu' has attributes a dag cannot hold")


ENCODED = """
func.func @main(%x: tensor<2x2xf32, "host">) -> tensor<2x2xf32, "host"> {
  %y = graph.relu %x : tensor<2x2xf32, "host">
  func.return %y : tensor<2x2xf32, "host">
}
"""


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        (["run", "--backend", "numpy"], "the numpy reference interpreter does not support"),
        (["run", "--backend", "jax"], "the JAX lowering does not support"),
        (["opt", "-o", "out.onnx"], "ONNX export does not support"),
    ],
)
def test_backends_refuse_encoded_tensors_in_one_line(
    tasoc: Callable[..., Result], tmp_path: Path, command: list[str], fragment: str
) -> None:
    path = tmp_path / "encoded.mlir"
    path.write_text(ENCODED)
    args = [tmp_path / arg if arg.endswith(".onnx") else arg for arg in command[1:]]
    result = tasoc(command[0], path, *args)
    assert_one_line_error(result, fragment, 'tensor<2x2xf32, "host">')
