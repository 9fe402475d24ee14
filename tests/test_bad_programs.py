"""Programs that ask too much, nest too deep or break a rule xDSL's verifier misses:
each is one `tasoc: error:` line through every command, never an internal error.

Three families (issue 13): sizes over the resource limits (`tasoc.ir.limits`), in text
IR, in the builder and the light graph, and in zoo specs; nesting deeper than
`MAX_NESTING`; and programs that verified but were not programs (attributes of the
wrong kind, a use before a definition, no `@main`, no outputs, recursion).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.context import Context
from xdsl.dialects import builtin, func, test
from xdsl.parser import Parser

from tasoc.driver.errors import DriverError
from tasoc.driver.sources import check_lexable
from tasoc.ir import graph as G
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Node
from tasoc.ir.limits import (
    ARGUMENT_BYTES_ENV,
    MAX_DIM,
    MAX_NESTING,
    MAX_RANK,
    TENSOR_BYTES_ENV,
    LimitError,
    check_shape,
    format_bytes,
)
from tasoc.ir.program import IRRuleError, verify_ir
from tasoc.ir.shapes import DType, ShapeError, SizeLimitError

Tasoc = Callable[..., Result]

RELU = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = graph.relu %x : tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}
"""


def identity(type_: str) -> str:
    """A `@main` returning its argument of `type_`."""
    return f"func.func @main(%x: {type_}) -> {type_} {{\n  func.return %x : {type_}\n}}\n"


def write(tmp_path: Path, text: str, name: str = "bad.mlir") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# ------------------------------------------------------------------------- sizes

HUGE_TYPES = {
    "dim 2^31": "tensor<2147483648xf32>",
    "dim 2^32": "tensor<4294967296xf32>",
    "dim 2^63 - 1": "tensor<9223372036854775807xf32>",
    "dim 2^64": "tensor<18446744073709551616xf32>",
    "each dim fine, product over the limit": "tensor<100000x100000x100000xf32>",
    "rank 65": f"tensor<{'1x' * (MAX_RANK + 1)}f32>",
}


@pytest.mark.parametrize("type_", HUGE_TYPES.values(), ids=HUGE_TYPES.keys())
@pytest.mark.parametrize("command", [["opt"], ["run", "--backend", "numpy"]], ids=" ".join)
def test_a_type_over_the_limits_is_refused_where_it_is_written(
    tasoc: Tasoc, tmp_path: Path, type_: str, command: list[str]
) -> None:
    path = write(tmp_path, identity(type_))
    assert_one_line_error(tasoc(*command, path), f"{path}:1:1:", "'func.func'", "resource limit")


@pytest.mark.parametrize(
    "op",
    [
        "graph.ones {shape = array<i64: 9223372036854775807>, dtype = f32}",
        "graph.zeros {shape = array<i64: 65536, 65536, 65536>, dtype = i64}",
        "graph.i_matmul {size = 4294967296 : i64, dtype = f32}",
    ],
)
def test_an_op_asking_for_a_huge_result_does_not_verify(
    tasoc: Tasoc, tmp_path: Path, op: str
) -> None:
    body = f"  %big = {op} : tensor<1xf32>\n  func.return %big : tensor<1xf32>\n"
    text = f"func.func @main() -> tensor<1xf32> {{\n{body}}}\n"
    path = write(tmp_path, text)
    assert_one_line_error(tasoc("run", "--backend", "numpy", path), f"{path}:2:3:", "over the")


def test_the_tensor_limit_is_read_from_the_environment(
    tasoc: Tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, identity("tensor<16x17xf32>"))  # 1088 bytes, a type no test uses
    monkeypatch.setenv(TENSOR_BYTES_ENV, "1024")
    assert_one_line_error(tasoc("opt", path), "1 KiB", TENSOR_BYTES_ENV)
    monkeypatch.setenv(TENSOR_BYTES_ENV, "2048")
    assert tasoc("run", "--backend", "numpy", path).code == 0


def test_run_refuses_arguments_over_the_limit_before_drawing_them(
    tasoc: Tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = write(tmp_path, RELU)
    monkeypatch.setenv(ARGUMENT_BYTES_ENV, "16")
    assert_one_line_error(
        tasoc("run", "--backend", "numpy", path), "arguments of @main need 24 bytes", "16 bytes"
    )


@pytest.mark.parametrize("value", ["abc", "0", "-5", "1.5e9", ""])
@pytest.mark.parametrize("variable", [TENSOR_BYTES_ENV, ARGUMENT_BYTES_ENV])
def test_a_limit_variable_that_is_not_a_byte_count_is_refused_up_front(
    tasoc: Tasoc, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, variable: str, value: str
) -> None:
    monkeypatch.setenv(variable, value)
    line = assert_one_line_error(tasoc("opt", write(tmp_path, RELU)), variable)
    assert "graph.relu" not in line


def test_the_builder_and_the_light_graph_refuse_huge_tensors() -> None:
    g = GraphBuilder()
    x = g.input("x", (MAX_DIM + 1,))
    with pytest.raises(SizeLimitError, match="dimension 2147483648"):
        g.relu(x)
    with pytest.raises(ShapeError, match=r"graph\.ones: a tensor of 4 EiB is over the limit"):
        Node("ones", shape=(2**20, 2**20, 2**20), dtype=DType.F32)


@settings(max_examples=200, deadline=None)
@given(
    st.lists(st.integers(0, 2**80), max_size=MAX_RANK + 2),
    st.sampled_from([1, 2, 4, 8]),
)
def test_a_size_check_fits_a_short_line_and_raises_only_limit_errors(
    shape: list[int], itemsize: int
) -> None:
    try:
        check_shape(shape, itemsize)
    except LimitError as err:
        assert len(str(err)) < 200 and "\n" not in str(err)
    else:
        assert len(shape) <= MAX_RANK and max(shape, default=0) <= MAX_DIM


def test_byte_counts_print_in_binary_units_however_large() -> None:
    assert format_bytes(1023) == "1023 bytes"
    assert format_bytes(3 * 2**29) == "1.5 GiB"
    assert format_bytes(16 * 2**30) == "16 GiB"
    assert format_bytes(2 ** (31 * 64)).endswith(" EiB")  # past any float


ZOO_MISTAKES = {
    "alexnet?width=inf": "option 'width' expects a finite number, got 'inf'",
    "alexnet?width=nan": "option 'width' expects a finite number, got 'nan'",
    "alexnet?width=-1": "option 'width' must be greater than 0",
    "alexnet?width=1e300": "options too large: dimension 6.4e+301",
    "bert?batch=1e30": "option 'batch' expects an integer, got '1e30'",
    "bert?batch=99999999999999999999": "option 'batch' must be at most 2147483647",
    "bert?batch=2147483647": "options too large: a tensor of",
    "bert?layers=0": "option 'layers' must be positive, got 0",
    "bert?hidden=-3": "option 'hidden' must be positive, got -3",
    "dlrm?rows=2000000000": "options too large",
}


@pytest.mark.parametrize("spec, message", ZOO_MISTAKES.items(), ids=ZOO_MISTAKES.keys())
def test_zoo_options_out_of_bounds_are_one_line(tasoc: Tasoc, spec: str, message: str) -> None:
    assert_one_line_error(tasoc("opt", f"zoo:{spec}"), f"zoo:{spec.partition('?')[0]}", message)


def test_a_zoo_model_whose_arguments_are_over_the_limit_is_not_built(
    tasoc: Tasoc, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(ARGUMENT_BYTES_ENV, str(2**20))
    assert_one_line_error(
        tasoc("opt", "zoo:bert?layers=1&hidden=512"), "zoo:bert: options too large: its arguments"
    )


# ----------------------------------------------------------------------- nesting


def nested(kind: str, depth: int) -> str:
    """A program whose `kind` of construct nests `depth` levels deep."""
    attribute = {
        "arrays": "[" * depth + "]" * depth,
        "dictionaries": "{a = " * depth + "1" + "}" * depth,
        "tuple types": "tuple<" * depth + ">" * depth,
    }
    if kind == "modules":
        return "builtin.module {" * depth + "}" * depth
    if kind == "regions":
        # Each region ends with a terminator, as test.op's verifier asks.
        regions = '"test.op"() ({' * depth + '"test.termop"() : () -> ()}) : () -> ()' * depth
        return RELU.replace("  func.return", f"{regions}\n  func.return")
    return RELU.replace(" {\n", f" attributes {{a = {attribute[kind]}}} {{\n", 1)


NESTING_KINDS = ["modules", "arrays", "dictionaries", "tuple types", "regions"]


@pytest.mark.parametrize("depth", [1_000, 100_000])
@pytest.mark.parametrize("kind", NESTING_KINDS)
@pytest.mark.parametrize("command", [["opt"], ["run", "--backend", "numpy"]], ids=" ".join)
def test_deep_nesting_is_refused_at_its_first_level_too_many(
    tasoc: Tasoc, tmp_path: Path, kind: str, depth: int, command: list[str]
) -> None:
    path = write(tmp_path, nested(kind, depth))
    assert_one_line_error(
        tasoc(*command, path), f"{path}:", f"nesting deeper than {MAX_NESTING} levels"
    )


def deepest_accepted(kind: str) -> int:
    """The most levels of `kind` the bracket scan lets through (a level of regions is
    two brackets, `({`, and the function body around them one more)."""
    depth = MAX_NESTING
    while True:
        try:
            check_lexable(nested(kind, depth), "x")
        except DriverError:
            depth -= 1
        else:
            return depth


@pytest.mark.parametrize("kind", NESTING_KINDS)
def test_the_deepest_nesting_the_scan_accepts_parses_verifies_and_prints(
    tasoc: Tasoc, tmp_path: Path, kind: str
) -> None:
    depth = deepest_accepted(kind)
    assert depth >= MAX_NESTING // 2 - 2
    result = tasoc("opt", "-p", "cse", write(tmp_path, nested(kind, depth)))
    assert result.code == 0, result


def test_brackets_in_strings_and_comments_do_not_nest(tasoc: Tasoc, tmp_path: Path) -> None:
    text = f"// {'(' * 1000}\n" + RELU.replace(
        " {\n", f' attributes {{a = "{"[" * 1000}"}} {{\n', 1
    )
    assert tasoc("opt", write(tmp_path, text)).code == 0


def test_recursion_the_bracket_scan_cannot_see_is_still_one_line(
    tasoc: Tasoc, tmp_path: Path
) -> None:
    negations = "affine_map<(d0) -> (" + "-" * 5_000 + "d0)>"
    path = write(tmp_path, RELU.replace(" {\n", f" attributes {{a = {negations}}} {{\n", 1))
    assert_one_line_error(tasoc("opt", path), f"{path}: nested too deeply to parse")


# ------------------------------------------------------------- attribute kinds

CONV = """func.func @main(%x: tensor<1x2x4x4xf32>, %w: tensor<2x2x3x3xf32>) -> tensor<1x2x4x4xf32> {
  %y = graph.conv2d %x, %w {ATTRS} : tensor<1x2x4x4xf32>
  func.return %y : tensor<1x2x4x4xf32>
}
"""
GOOD_CONV = {
    "strides": "array<i64: 1, 1>",
    "padding": '"same"',
    "activation": '"none"',
    "groups": "1 : i64",
}

BAD_CONV_ATTRIBUTES = {
    "groups = 1.5 : f32": ("groups", "1.5 : f32", "'groups' must be an i64 integer, got 1.5"),
    "groups = 1.5": ("groups", "1.5", "'groups' must be an i64 integer, got 1.5"),
    'groups = "a"': ("groups", '"a"', "'groups' must be an i64 integer, got \"a\""),
    "groups = 1 : i32": ("groups", "1 : i32", "must be an i64 integer, got 1 : i32"),
    "groups = true": ("groups", "true", "must be an i64 integer, got true"),
    "strides of length 1": ("strides", "array<i64: 1>", "strides must be two positive"),
    "strides of i32": ("strides", "array<i32: 1, 1>", "must be array<i64: ...>, got array<i32"),
    "strides a string": ("strides", '"1, 1"', "'strides' must be array<i64: ...>"),
    'padding = "diagonal"': ("padding", '"diagonal"', "padding must be 'same', 'valid' or 4"),
    "padding of 3 integers": ("padding", "array<i64: 1, 1, 1>", "padding must have 4 integers"),
    "padding a number": ("padding", "3 : i64", "'padding' must be a string (\"same\""),
    'activation = "swish"': ("activation", '"swish"', "activation must be 'none' or 'relu'"),
    "activation = 1": ("activation", "1 : i64", "'activation' must be a string, got 1 : i64"),
}


@pytest.mark.parametrize(
    "name, value, message", BAD_CONV_ATTRIBUTES.values(), ids=BAD_CONV_ATTRIBUTES.keys()
)
def test_an_attribute_of_the_wrong_kind_does_not_verify(
    tasoc: Tasoc, tmp_path: Path, name: str, value: str, message: str
) -> None:
    attrs = ", ".join(f"{k} = {value if k == name else v}" for k, v in GOOD_CONV.items())
    path = write(tmp_path, CONV.replace("ATTRS", attrs))
    assert_one_line_error(tasoc("opt", path), f"{path}:2:3:", "'graph.conv2d'", message)


@pytest.mark.parametrize(
    "op, message",
    [
        ('graph.reduce %x {kind = "sum", axes = array<i64: 0>, keepdims = 1 : i64}', "keepdims"),
        ('graph.reduce %x {kind = "prod", axes = array<i64: 0>, keepdims = true}', "kind"),
        ("graph.softmax %x {axis = 1.0}", "'axis' must be an i64 integer"),
        ("graph.layernorm %x, %x, %x {axis = 1 : i64, epsilon = -1.0}", "epsilon must be"),
        ('graph.ones {shape = array<i64: 2, 3>, dtype = "q8"}', "'dtype' must be an element type"),
        ("graph.ones {shape = [2, 3], dtype = f32}", "'shape' must be array<i64: ...>, got [2"),
    ],
)
def test_other_attribute_kinds_are_checked_too(
    tasoc: Tasoc, tmp_path: Path, op: str, message: str
) -> None:
    path = write(tmp_path, RELU.replace("graph.relu %x", op))
    assert_one_line_error(tasoc("opt", path), f"{path}:2:3:", message)


# ---------------------------------------------------------------- program rules

NOT_PROGRAMS = {
    "use before definition": (
        """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %a = "graph.relu"(%b) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  %b = "graph.relu"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  func.return %a : tensor<2x3xf32>
}
""",
        ":2:3: 'graph.relu' uses %b (operand #0) before it is defined",
    ),
    "no @main": (
        RELU.replace("@main", "@forward"),
        "no 'func.func @main' (functions found: @forward)",
    ),
    "two functions, none @main": (
        RELU.replace("@main", "@f") + RELU.replace("@main", "@g"),
        "(functions found: @f, @g)",
    ),
    "an empty @main": ("func.func @main() {\n  func.return\n}\n", "@main returns no values"),
    "@main returning nothing": (
        RELU.replace(") -> tensor<2x3xf32> {", ") {").replace(
            "return %y : tensor<2x3xf32>", "return"
        ),
        "@main returns no values",
    ),
    "@main calling itself": (
        RELU.replace(
            "graph.relu %x : tensor<2x3xf32>",
            "func.call @main(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>",
        ),
        "@main calls itself",
    ),
    "a helper calling itself": (
        RELU.replace(
            "graph.relu %x : tensor<2x3xf32>",
            "func.call @helper(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>",
        )
        + RELU.replace("@main", "@helper").replace(
            "graph.relu %x : tensor<2x3xf32>",
            "func.call @helper(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>",
        ),
        "@helper calls itself (called from @main)",
    ),
    "a declared @main": (
        "func.func private @main(tensor<2x3xf32>) -> tensor<2x3xf32>\n",
        "@main has 0 blocks",
    ),
}
"""Each case: a module that verifies as IR (or not, for the use before definition) and
is not a tasoc program, with what the one error line says."""

COMMANDS = {
    "equality-rewrite": lambda path, out: ["opt", path, "-p", "equality-rewrite"],
    "verify-each cse": lambda path, out: ["opt", "--verify-each", path, "-p", "cse"],
    "run --check": lambda path, out: ["run", "--check", path],
    "run numpy": lambda path, out: ["run", "--backend", "numpy", path],
    "export": lambda path, out: ["opt", path, "-o", out],
}


WITHOUT_OUTPUTS = ("an empty @main", "@main returning nothing")


@pytest.mark.parametrize(
    "case, command",
    [
        (case, command)
        for case in NOT_PROGRAMS
        for command in COMMANDS
        # xDSL's cse is not a tasoc pass; --verify-each then compares no outputs.
        if not (case in WITHOUT_OUTPUTS and command == "verify-each cse")
    ],
)
def test_what_is_not_a_program_is_one_line_through_every_command(
    tasoc: Tasoc, tmp_path: Path, case: str, command: str
) -> None:
    text, message = NOT_PROGRAMS[case]
    out = tmp_path / "out.onnx"
    assert_one_line_error(tasoc(*COMMANDS[command](write(tmp_path, text), out)), message)
    assert not out.exists()


@pytest.mark.parametrize("case", WITHOUT_OUTPUTS)
def test_verify_each_finds_nothing_to_compare_in_a_program_without_outputs(
    tasoc: Tasoc, tmp_path: Path, case: str
) -> None:
    text, _ = NOT_PROGRAMS[case]
    assert tasoc("opt", "--verify-each", write(tmp_path, text), "-p", "cse").code == 0


@pytest.mark.parametrize(
    "op",
    ['"test.op"(%x) : (tensor<2x3xf32>) -> tensor<2x3xf32>', "arith.addf %x, %x : tensor<2x3xf32>"],
)
@pytest.mark.parametrize("command", COMMANDS.values(), ids=COMMANDS.keys())
def test_a_main_with_ops_of_other_dialects_is_one_line_through_every_command(
    tasoc: Tasoc, tmp_path: Path, op: str, command: Callable[[Path, Path], list[str | Path]]
) -> None:
    text = RELU.replace("graph.relu %x : tensor<2x3xf32>", op)
    line = assert_one_line_error(tasoc(*command(write(tmp_path, text), tmp_path / "out.onnx")))
    assert "internal error" not in line


def test_plain_opt_prints_a_module_that_is_ir_but_not_a_program(
    tasoc: Tasoc, tmp_path: Path
) -> None:
    result = tasoc("opt", write(tmp_path, RELU.replace("@main", "@forward")))
    assert result.code == 0 and "func.func @forward" in result.out


def test_a_value_from_an_enclosing_block_may_be_used_after_its_definition_only() -> None:
    ctx = Context(allow_unregistered=True)
    for dialect in (builtin.Builtin, func.Func, test.Test, G.Graph):
        ctx.load_dialect(dialect)
    inner_after = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  "test.op"() ({
    %z = "graph.relu"(%y) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  }) : () -> ()
  %y = graph.relu %x : tensor<2x3xf32>
  func.return %y : tensor<2x3xf32>
}"""
    with pytest.raises(IRRuleError, match="uses %y"):
        verify_ir(Parser(ctx, inner_after).parse_module())
    inner_before = """func.func @main(%x: tensor<2x3xf32>) -> tensor<2x3xf32> {
  %y = graph.relu %x : tensor<2x3xf32>
  "test.op"() ({
    %z = "graph.relu"(%y) : (tensor<2x3xf32>) -> tensor<2x3xf32>
  }) : () -> ()
  func.return %y : tensor<2x3xf32>
}"""
    verify_ir(Parser(ctx, inner_before).parse_module())


def test_reading_a_huge_type_is_a_shape_error() -> None:
    with pytest.raises(ShapeError, match="dimension 1099511627776"):
        G.sig_of(builtin.TensorType(builtin.f32, [2**40]))
