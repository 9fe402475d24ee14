"""The `parallel` dialect's Python API (`tasoc.ir.parallel`) and the SOAP engine's
resharding (`tasoc.ir.soap.reshard`): what the lit tests in tests/filecheck/parallel
cannot reach, the plain values behind the IR and the collectives a pass inserts."""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result
from hypothesis import given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.driver.sources import make_context
from tasoc.ir import soap
from tasoc.ir.graph import sig_of
from tasoc.ir.parallel import (
    COLLECTIVE_BY_KIND,
    CollectiveOp,
    MeshOp,
    ShardingAttr,
    check_transition,
    is_sharded,
    meshes,
    sharding_of,
    unsharded,
)
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.soap import Mesh, Sharding, ShardingError
from tasoc.verify.strategies import meshes as mesh_strategy

GRID = Mesh("m", (("x", 2), ("y", 2)))
SIG = TensorSig((8, 4), DType.F32)


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    return module


def on(dims: tuple[tuple[str, ...], ...], unreduced: tuple[str, ...] = ()) -> Sharding:
    return Sharding("m", dims, unreduced)


# ---------------------------------------------------------------- plain values


def test_local_shape_divides_each_dim_by_the_degree_of_its_axes() -> None:
    mesh = Mesh("m", (("x", 2), ("y", 3)))
    assert on((("x", "y"), ())).local_shape((12, 5), mesh) == (2, 5)
    assert on(((), ("y",)), ("x",)).local_shape((12, 6), mesh) == (12, 2)
    assert Sharding.replicated("m", 0).local_shape((), mesh) == ()


@pytest.mark.parametrize(
    ("sharding", "sig", "message"),
    [
        (on((("x",),)), SIG, "has 1 dims for a tensor of rank 2"),
        (Sharding("n", ((), ())), SIG, "is not on mesh @m"),
        (on((("q",), ())), SIG, "mesh @m has no axis 'q' \\(axes: x, y\\)"),
        (on((("x", "y"), ())), TensorSig((6, 4), DType.F32), "dim 0 of size 6 does not split"),
        (on(((), ()), ("q",)), SIG, "has no axis 'q'"),
    ],
)
def test_check_refuses_a_sharding_that_does_not_fit(
    sharding: Sharding, sig: TensorSig, message: str
) -> None:
    with pytest.raises(ShardingError, match=message):
        sharding.check(sig, GRID)


def test_check_accepts_a_fitting_sharding() -> None:
    on((("y", "x"), ()), ("z",)).check(SIG, Mesh("m", (("x", 2), ("y", 2), ("z", 3))))


def test_unreduced_axes_are_a_set() -> None:
    """Partial sums along x and y are one layout whichever order names them: equal,
    one attribute, and nothing to reshard between them."""
    assert on(((),), ("y", "x")) == on(((),), ("x", "y"))
    assert ShardingAttr.of(on(((),), ("y", "x"))) == ShardingAttr.of(on(((),), ("x", "y")))
    sig = TensorSig((8,), DType.F32)
    assert soap.reshard(on(((),), ("y", "x")), on(((),), ("x", "y")), sig, GRID) == []


def test_shardings_and_meshes_refuse_what_names_no_layout() -> None:
    with pytest.raises(ShardingError, match="a mesh axis is used twice"):
        on((("x",), ("x",)))
    with pytest.raises(ShardingError, match="repeats axis 'x'"):
        Mesh("m", (("x", 2), ("x", 2)))
    with pytest.raises(ShardingError, match="axis 'y' of size 0 < 1"):
        Mesh("m", (("x", 2), ("y", 0)))
    with pytest.raises(ShardingError, match="4 positions but lists 2 devices"):
        Mesh("m", (("x", 2), ("y", 2)), (0, 1))


# ----------------------------------------------------------- attributes and ops


@pytest.mark.parametrize(
    "sharding",
    [
        on(((), ())),
        on((("y", "x"), ())),
        on(((), ("x",)), ("y",)),
        Sharding("m", (), ("x", "y")),
    ],
)
def test_sharding_attr_round_trips_through_the_plain_value_and_text(sharding: Sharding) -> None:
    attr = ShardingAttr.of(sharding)
    assert attr.sharding == sharding
    assert str(attr) == str(sharding)
    rank = len(sharding.dims)
    shape = "x".join(["4"] * rank + ["f32"])
    text = f"func.func @f(%a: tensor<{shape}, {sharding}>) {{\n  func.return\n}}"
    (function,) = parse(text).ops
    assert sharding_of(sig_of(function.args[0].type)) == sharding


@pytest.mark.parametrize(
    "mesh",
    [GRID, Mesh("g", (("d", 4),), (3, 2, 1, 0)), Mesh("one", ())],
)
def test_mesh_op_of_round_trips_through_the_plain_mesh_and_text(mesh: Mesh) -> None:
    op = MeshOp.of(mesh)
    op.verify()
    assert op.mesh == mesh
    module = parse(str(ModuleOp([op])))
    assert meshes(module) == {mesh.name: mesh}
    assert is_sharded(module)


SHARDED = """
parallel.mesh @m ["x" = 2, "y" = 2]
func.func @main(%x: tensor<8x4xf32, #parallel.sharding<@m, [["x"], []]>>,
                %w: tensor<4x6xf32, #parallel.sharding<@m, [[], ["y"]]>> {graph.param})
    -> tensor<8x6xf32, #parallel.sharding<@m, [[], []]>> {
  %y = graph.matmul %x, %w : tensor<8x6xf32, #parallel.sharding<@m, [["x"], ["y"]]>>
  %r = graph.relu %y : tensor<8x6xf32, #parallel.sharding<@m, [["x"], ["y"]]>>
  %z = parallel.all_gather %r : tensor<8x6xf32, #parallel.sharding<@m, [[], []]>>
  func.return %z : tensor<8x6xf32, #parallel.sharding<@m, [[], []]>>
}
"""

PLAIN = """
func.func @main(%x: tensor<8x4xf32>, %w: tensor<4x6xf32> {graph.param}) -> tensor<8x6xf32> {
  %y = graph.matmul %x, %w : tensor<8x6xf32>
  %r = graph.relu %y : tensor<8x6xf32>
  func.return %r : tensor<8x6xf32>
}
"""


def test_unsharded_is_the_one_device_program() -> None:
    sharded = parse(SHARDED)
    plain = unsharded(sharded)
    plain.verify()
    assert str(plain) == str(parse(PLAIN))
    assert not is_sharded(plain)
    assert "parallel" not in str(plain)
    assert is_sharded(sharded) and "parallel.all_gather" in str(sharded)  # not changed


# ------------------------------------------------------------------- resharding


def kinds(source: Sharding, target: Sharding, mesh: Mesh = GRID) -> list[tuple[str, tuple]]:
    return [(step.kind, step.axes) for step in soap.reshard(source, target, SIG, mesh)]


RESHARDS = [
    # (source, target, the steps as (kind, axes))
    (on(((), ()), ("x",)), on(((), ())), [("all_reduce", ("x",))]),
    (on(((), ()), ("x",)), on((("x",), ())), [("reduce_scatter", ("x",))]),
    (on((("x",), ())), on(((), ())), [("all_gather", ("x",))]),
    (on((("x",), ())), on(((), ("x",))), [("all_to_all", ("x",))]),
    (on(((), ())), on((("x",), ("y",))), [("all_slice", ("x", "y"))]),
    (on(((), ()), ("x", "y")), on((("x", "y"), ())), [("reduce_scatter", ("x", "y"))]),
    (
        on(((), ()), ("x", "y")),
        on((("y",), ())),
        [("all_reduce", ("x",)), ("reduce_scatter", ("y",))],
    ),
    (
        on((("x",), ("y",))),
        on((("y",), ("x",))),
        [("all_gather", ("x",)), ("all_to_all", ("y",)), ("all_slice", ("x",))],
    ),
    (on((("x", "y"), ())), on((("x",), ("y",))), [("all_to_all", ("y",))]),
    (on((("x",), ())), on((("x",), ())), []),
]


@pytest.mark.parametrize(("source", "target", "expected"), RESHARDS)
def test_reshard_takes_the_expected_steps(
    source: Sharding, target: Sharding, expected: list[tuple[str, tuple]]
) -> None:
    assert kinds(source, target) == expected


@pytest.mark.parametrize(("source", "target", "expected"), RESHARDS)
def test_reshard_steps_are_collectives_the_verifier_accepts(
    source: Sharding, target: Sharding, expected: list[tuple[str, tuple]]
) -> None:
    """Build each step as its `parallel` op after an argument laid out as `source`:
    the module verifies and the last op's type is `target`."""
    arg = f"tensor<8x4xf32, {source}>"
    module = parse(
        f'parallel.mesh @m ["x" = 2, "y" = 2]\n'
        f"func.func @main(%a: {arg}) -> {arg} {{\n  func.return %a : {arg}\n}}"
    )
    function = module.ops.last
    value = function.args[0]
    ret = function.body.block.last_op
    for step in soap.reshard(source, target, SIG, GRID):
        op = COLLECTIVE_BY_KIND[step.kind].build_on(value, step.result)
        function.body.block.insert_op_before(op, ret)
        value = op.output
    ret.operands = [value]
    function.update_function_type()
    module.verify()
    ops = [op for op in function.body.block.ops if isinstance(op, CollectiveOp)]
    assert [op.KIND for op in ops] == [kind for kind, _ in expected]
    assert sharding_of(sig_of(value.type)) == target


def test_reshard_counts_the_bytes_of_each_operand_on_a_device() -> None:
    steps = soap.reshard(on(((), ()), ("x", "y")), on((("y",), ())), SIG, GRID)
    assert [step.bytes for step in steps] == [8 * 4 * 4, 8 * 4 * 4]
    gather = soap.reshard(on((("x", "y"), ())), on(((), ())), SIG, GRID)
    assert [step.bytes for step in gather] == [2 * 4 * 4]
    assert soap.reshard_bytes(on(((), ())), on((("x",), ("y",))), SIG, GRID) == 0


def test_reshard_refuses_what_no_collective_on_one_mesh_does() -> None:
    with pytest.raises(ShardingError, match="no collective turns"):
        soap.reshard(on(((), ())), on(((), ()), ("x",)), SIG, GRID)
    with pytest.raises(ShardingError, match="use parallel\\.replicate"):
        soap.reshard(on(((), ())), Sharding("n", ((), ())), SIG, GRID)


def test_check_transition_names_what_each_kind_does() -> None:
    split, whole = on((("x",), ())), on(((), ()))
    assert check_transition("all_gather", split, whole) is None
    assert "only joins split dims" in str(check_transition("all_gather", whole, split))
    assert "only splits dims further" in str(check_transition("all_slice", split, whole))
    assert "completes partial sums" in str(check_transition("all_reduce", split, split))
    assert "stays on @m" in str(check_transition("replicate", split, whole))
    assert check_transition("replicate", split, Sharding("n", ((), ()))) is None


# ---------------------------------------------------------- the property


@st.composite
def reshard_pairs(draw: st.DrawFn) -> tuple[Sharding, Sharding, TensorSig, Mesh]:
    """A mesh, a tensor, and two shardings of it on that mesh where the target's
    partial sums are among the source's (what `reshard` accepts)."""
    mesh = draw(mesh_strategy(max_devices=8, max_axes=3))
    rank = draw(st.integers(0, 3))

    def layout(allow_unreduced: frozenset[str]) -> Sharding:
        dims: list[list[str]] = [[] for _ in range(rank)]
        unreduced = []
        for axis in draw(st.permutations(mesh.axis_names)):
            choices = [None, *range(rank), *(["partial"] if axis in allow_unreduced else [])]
            where = draw(st.sampled_from(choices))
            if where == "partial":
                unreduced.append(axis)
            elif where is not None:
                dims[where].append(axis)
        return Sharding(mesh.name, tuple(map(tuple, dims)), tuple(unreduced))

    source = layout(frozenset(mesh.axis_names))
    target = layout(frozenset(source.unreduced))
    shape = tuple(
        math.lcm(mesh.degree(a), mesh.degree(b)) * draw(st.integers(1, 2))
        for a, b in zip(source.dims, target.dims, strict=True)
    )
    return source, target, TensorSig(shape, DType.F32), mesh


@settings(max_examples=300, deadline=None)
@given(reshard_pairs())
def test_every_reshard_step_is_a_legal_transition_ending_at_the_target(
    case: tuple[Sharding, Sharding, TensorSig, Mesh],
) -> None:
    source, target, sig, mesh = case
    source.check(sig, mesh)
    target.check(sig, mesh)
    current = source
    steps = soap.reshard(source, target, sig, mesh)
    for step in steps:
        assert check_transition(step.kind, current, step.result) is None, (step, current)
        step.result.check(sig, mesh)
        assert step.bytes == math.prod(current.local_shape(sig.shape, mesh)) * 4
        current = step.result
    assert current == target
    assert (not steps) == (source == target)
    assert len({step.kind for step in steps if step.kind == "all_slice"}) <= 1


@pytest.mark.parametrize(
    ("mesh", "dims", "message"),
    [
        ("nowhere", '"d"', "'func.func' no parallel.mesh @nowhere in the module"),
        ("mesh", '"q"', "mesh @mesh has no axis 'q'"),
    ],
)
def test_a_signature_no_op_touches_is_checked_too(
    tmp_path: Path, tasoc: Callable[..., Result], mesh: str, dims: str, message: str
) -> None:
    """An argument returned untouched is checked by the function's signature check
    (`verify_ir`), since no op's verifier sees it."""
    typ = f"tensor<8xf32, #parallel.sharding<@{mesh}, [[{dims}]]>>"
    source = tmp_path / "sig.mlir"
    source.write_text(
        f'parallel.mesh @mesh ["d" = 4]\n'
        f"func.func @main(%x: {typ}) -> {typ} {{\n  func.return %x : {typ}\n}}\n"
    )
    result = tasoc("opt", str(source))
    assert result.code == 1
    assert result.err.startswith("tasoc: error: ") and message in result.err
    assert result.err.count("\n") == 1


BAD_PROGRAMS = {
    "unknown axis": (
        '%y = graph.relu %x : tensor<8xf32, #parallel.sharding<@mesh, [["q"]]>>',
        '[["q"]]',
        "'graph.relu': mesh @mesh has no axis 'q' (axes: d)",
    ),
    "does not divide": (
        '%y = graph.relu %x : tensor<6xf32, #parallel.sharding<@mesh, [["d"]]>>',
        '[["d"]]',
        "does not split into 4 pieces",
    ),
    "collective on the wrong operand": (
        "%y = parallel.all_reduce %x : tensor<8xf32, #parallel.sharding<@mesh, [[]]>>",
        '[["d"]]',
        "'parallel.all_reduce': all_reduce only completes partial sums",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_PROGRAMS))
def test_bad_sharded_programs_are_one_error_line(
    tmp_path: Path, tasoc: Callable[..., Result], case: str
) -> None:
    body, dims, message = BAD_PROGRAMS[case]
    size = "6" if case == "does not divide" else "8"
    arg = f"tensor<{size}xf32, #parallel.sharding<@mesh, {dims}>>"
    out = body.split(" : ", 1)[1]
    source = tmp_path / "bad.mlir"
    source.write_text(
        f'parallel.mesh @mesh ["d" = 4]\nfunc.func @main(%x: {arg}) -> {out} {{\n'
        f"  {body}\n  func.return %y : {out}\n}}\n"
    )
    output = tmp_path / "out.mlir"
    result = tasoc("opt", str(source), "-o", str(output))
    assert result.code == 1 and not output.exists()
    assert result.err.startswith("tasoc: error: ") and message in result.err
    assert result.err.count("\n") == 1 and "Traceback" not in result.err
