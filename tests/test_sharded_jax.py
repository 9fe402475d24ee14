"""Sharded programs lowered to one jitted shard_map (`tasoc.backends.jax.sharded`): each
hand-written program's results equal the numpy reference of its unsharded equal, for
every collective kind, partial sums completed both ways, 2-D meshes, mean and synced
factors and sharded constants; and what the lowering refuses, in one line."""

from __future__ import annotations

import numpy as np
import pytest
from conftest import examples
from hypothesis import given, settings
from hypothesis import strategies as st
from jax.sharding import PartitionSpec
from sharded_programs import GATHER, GRID, LINE, batchnorm, program, t
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.backends.arguments import random_inputs
from tasoc.backends.jax.sharded import ShardedLoweringError, lower_sharded
from tasoc.backends.numpy import run_reference
from tasoc.driver.sources import make_context
from tasoc.ir.dag import from_module
from tasoc.ir.opdef import op_defs
from tasoc.ir.parallel import unsharded
from tasoc.ir.shard_plan import write_sharded
from tasoc.ir.soap import Mesh
from tasoc.verify.equivalence import compare
from tasoc.verify.strategies import EMITTERS, graphs, meshes, shardings


def assert_matches_unsharded(module: ModuleOp, seed: int = 0) -> list[np.ndarray]:
    """Run sharded and the unsharded reference on the same random inputs; compare."""
    inputs = random_inputs(module, seed)
    outputs = lower_sharded(module)(*inputs)
    expected = run_reference(unsharded(module), inputs)
    result = compare(expected, outputs)
    assert result.ok, result.summary()
    return outputs


# ------------------------------------------------------------------ collectives


def test_all_gather_after_a_data_parallel_matmul() -> None:
    assert_matches_unsharded(Parser(make_context(), GATHER).parse_module())


def split_contraction(mesh: str, axes: str, complete: str, result: str) -> ModuleOp:
    """A matmul whose contracting dim is split by `axes`: partial sums, completed by
    `complete` into `result`'s dims."""
    out = t("8x16", result)
    return program(
        mesh,
        {"x": t("8x32", f"[], [{axes}]"), "w": t("32x16", f"[{axes}], []")},
        f"""  %y = graph.matmul %x, %w : {t("8x16", "[], []", unreduced=axes)}
  %z = parallel.{complete} %y : {out}
  func.return %z : {out}""",
        [out],
    )


@pytest.mark.parametrize(
    ("mesh", "axes", "complete", "result"),
    [
        (LINE, '"d"', "all_reduce", "[], []"),
        (LINE, '"d"', "reduce_scatter", '["d"], []'),
        (LINE, '"d"', "reduce_scatter", '[], ["d"]'),
        (GRID, '"x", "y"', "all_reduce", "[], []"),
        (GRID, '"x", "y"', "reduce_scatter", '["x", "y"], []'),
        (GRID, '"y", "x"', "reduce_scatter", '[], ["y", "x"]'),
    ],
)
def test_split_contraction_completed(mesh: str, axes: str, complete: str, result: str) -> None:
    assert_matches_unsharded(split_contraction(mesh, axes, complete, result))


def test_partial_sums_completed_over_one_axis_of_two() -> None:
    # m split by x, k by y: reduce-scatter over y onto the columns.
    out = t("8x16", '["x"], ["y"]')
    module = program(
        GRID,
        {"x": t("8x32", '["x"], ["y"]'), "w": t("32x16", '["y"], []')},
        f"""  %y = graph.matmul %x, %w : {t("8x16", '["x"], []', unreduced='"y"')}
  %z = parallel.reduce_scatter %y : {out}
  func.return %z : {out}""",
        [out],
    )
    assert_matches_unsharded(module)


@pytest.mark.parametrize(
    ("mesh", "source", "target"),
    [
        (LINE, '["d"], []', '[], ["d"]'),
        (LINE, '[], ["d"]', '["d"], []'),
        (GRID, '["x"], ["y"]', '["x", "y"], []'),
        (GRID, '["x", "y"], []', '["x"], ["y"]'),
    ],
)
def test_all_to_all_moves_a_split(mesh: str, source: str, target: str) -> None:
    module = program(
        mesh,
        {"x": t("16x32", source)},
        f"""  %y = parallel.all_to_all %x : {t("16x32", target)}
  %z = graph.relu %y : {t("16x32", target)}
  func.return %z : {t("16x32", target)}""",
        [t("16x32", target)],
    )
    assert_matches_unsharded(module)


@pytest.mark.parametrize(
    ("mesh", "source", "target"),
    [
        (LINE, "[], []", '["d"], []'),
        (GRID, '["x"], []', '["x", "y"], []'),
        (GRID, "[], []", '["y"], ["x"]'),
    ],
)
def test_all_slice_and_all_gather_are_inverse(mesh: str, source: str, target: str) -> None:
    module = program(
        mesh,
        {"x": t("16x32", source)},
        f"""  %y = parallel.all_slice %x : {t("16x32", target)}
  %r = graph.tanh %y : {t("16x32", target)}
  %z = parallel.all_gather %r : {t("16x32", source)}
  func.return %z, %r : {t("16x32", source)}, {t("16x32", target)}""",
        [t("16x32", source), t("16x32", target)],
    )
    assert_matches_unsharded(module)


# ------------------------------------------------------------- factors, constants


@pytest.mark.parametrize(("mesh", "axes"), [(LINE, '"d"'), (GRID, '"x", "y"'), (GRID, '"y"')])
def test_a_mean_over_a_split_dim_is_scaled_by_the_degree(mesh: str, axes: str) -> None:
    module = program(
        mesh,
        {"x": t("16x8", f"[{axes}], []")},
        f"""  %m = graph.reduce %x {{kind = "mean", axes = array<i64: 0>, keepdims = false}}
    : {t("8", "[]", unreduced=axes)}
  %z = parallel.all_reduce %m : {t("8", "[]")}
  func.return %z : {t("8", "[]")}""",
        [t("8", "[]")],
    )
    assert_matches_unsharded(module)


@pytest.mark.parametrize(
    ("mesh", "batch", "channels"), [(LINE, '"d"', ""), (GRID, '"y"', '"x"'), (GRID, '"x", "y"', "")]
)
def test_batchnorm_statistics_over_a_split_batch(mesh: str, batch: str, channels: str) -> None:
    module = batchnorm(mesh, batch, channels)
    inputs = random_inputs(module, 1)
    inputs[0] = inputs[0] * 3 + 5  # statistics far from 0 and 1: a local mean would show
    outputs = lower_sharded(module)(*inputs)
    expected = run_reference(unsharded(module), inputs)
    result = compare(expected, outputs, gradients={3, 4, 5})
    assert result.ok, result.summary()


def test_a_sharded_constant_is_the_devices_block_of_the_whole() -> None:
    # The identity's blocks differ per device: a constant built locally would not.
    split = t("8x8", '["d"], []')
    module = program(
        LINE,
        {"x": split},
        f"""  %i = graph.i_matmul {{size = 8 : i64, dtype = f32}} : {split}
  %y = graph.add %x, %i : {split}
  %z = parallel.all_gather %y : {t("8x8", "[], []")}
  func.return %z : {t("8x8", "[], []")}""",
        [t("8x8", "[], []")],
    )
    assert_matches_unsharded(module)


def test_i64_arguments_and_results_round_trip() -> None:
    module = program(
        LINE,
        {"x": t("16x4", '["d"], []', dtype="i64")},
        f"""  %z = parallel.all_gather %x : {t("16x4", "[], []", dtype="i64")}
  func.return %z : {t("16x4", "[], []", dtype="i64")}""",
        [t("16x4", "[], []", dtype="i64")],
    )
    (out,) = assert_matches_unsharded(module)
    assert out.dtype == np.int64


def test_in_shardings_lay_arguments_out_on_the_mesh() -> None:
    module = split_contraction(GRID, '"x", "y"', "all_reduce", "[], []")
    compiled = lower_sharded(module)
    assert [mesh.shape for mesh in compiled.meshes] == [{"x": 2, "y": 4}]
    assert [s.spec for s in compiled.in_shardings] == [
        PartitionSpec(None, ("x", "y")),
        PartitionSpec(("x", "y"), None),
    ]
    placed = compiled.device_args(random_inputs(module, 0))
    assert placed[0].addressable_shards[0].data.shape == (8, 4)


# ------------------------------------------------------------------------ refused


def test_a_result_left_as_partial_sums_is_refused() -> None:
    partial = t("8x16", "[], []", unreduced='"d"')
    module = program(
        LINE,
        {"x": t("8x32", '[], ["d"]'), "w": t("32x16", '["d"], []')},
        f"""  %y = graph.matmul %x, %w : {partial}
  func.return %y : {partial}""",
        [partial],
    )
    with pytest.raises(ShardedLoweringError, match=r"result #0 holds partial sums along \['d'\]"):
        lower_sharded(module)


def test_a_mesh_larger_than_the_devices_is_refused_with_the_count_to_ask_for() -> None:
    module = program(
        'parallel.mesh @m ["d" = 16]',
        {"x": t("16x4", '["d"], []')},
        f"  func.return %x : {t('16x4', '["d"], []')}",
        [t("16x4", '["d"], []')],
    )
    with pytest.raises(
        ShardedLoweringError, match="needs 16 devices and JAX has 8: run with --devices 16"
    ):
        lower_sharded(module)


# ------------------------------------------------------------ several meshes

GROUPS = 'parallel.mesh @m ["d" = 4]\nparallel.mesh @n ["d" = 2] devices [6, 4]'
"""Two device groups: @m on devices 0-3, @n on devices 6 and 4 (in that order)."""


def on(mesh: str, shape: str, dims: str, unreduced: str = "") -> str:
    return t(shape, dims, unreduced).replace("@m", f"@{mesh}")


def test_a_program_on_two_device_groups_runs_each_part_on_its_devices() -> None:
    # Layer 1 data parallel on @m, its output copied to @n split by columns, layer 2
    # there with the contracting dim split: partial sums completed on @n.
    module = program(
        GROUPS,
        {
            "x": on("m", "8x16", '["d"], []'),
            "w": on("m", "16x8", "[], []"),
            "v": on("n", "8x4", '["d"], []'),
        },
        f"""  %h = graph.matmul %x, %w : {on("m", "8x8", '["d"], []')}
  %r = graph.relu %h : {on("m", "8x8", '["d"], []')}
  %c = parallel.replicate %r : {on("n", "8x8", '[], ["d"]')}
  %p = graph.matmul %c, %v : {on("n", "8x4", "[], []", unreduced='"d"')}
  %y = parallel.all_reduce %p : {on("n", "8x4", "[], []")}
  %z = graph.tanh %r : {on("m", "8x8", '["d"], []')}
  func.return %y, %z : {on("n", "8x4", "[], []")}, {on("m", "8x8", '["d"], []')}""",
        [on("n", "8x4", "[], []"), on("m", "8x8", '["d"], []')],
    )
    assert_matches_unsharded(module)
    compiled = lower_sharded(module)
    y, z = compiled.fn(*compiled.device_args(random_inputs(module, 0)))
    assert {d.id for d in y.sharding.device_set} == {4, 6}
    assert {d.id for d in z.sharding.device_set} == {0, 1, 2, 3}
    assert compiled.device_count == 6


def test_partial_sums_used_across_meshes_are_refused() -> None:
    partial = on("m", "8x4", "[], []", unreduced='"d"')
    module = program(
        GROUPS,
        {"x": on("m", "8x16", '[], ["d"]'), "w": on("m", "16x4", '["d"], []')},
        f"""  %p = graph.matmul %x, %w : {partial}
  %c = parallel.replicate %x : {on("n", "8x16", '["d"], []')}
  %s = graph.relu %c : {on("n", "8x16", '["d"], []')}
  %y = parallel.all_reduce %p : {on("m", "8x4", "[], []")}
  func.return %y, %s : {on("m", "8x4", "[], []")}, {on("n", "8x16", '["d"], []')}""",
        [on("m", "8x4", "[], []"), on("n", "8x16", '["d"], []')],
    )
    with pytest.raises(ShardedLoweringError, match="partial sums on @m is used after ops on"):
        lower_sharded(module)


def test_a_program_on_two_device_groups_donates_nothing() -> None:
    """Donation is per jitted computation; device groups run as several: refused, one
    line, where a program on one mesh donates (its argument then reused)."""
    grouped = program(
        GROUPS,
        {"x": on("m", "8x8", '["d"], []')},
        f"""  %c = parallel.replicate %x : {on("n", "8x8", '["d"], []')}
  %y = graph.relu %c : {on("n", "8x8", '["d"], []')}
  func.return %y : {on("n", "8x8", '["d"], []')}""",
        [on("n", "8x8", '["d"], []')],
    )
    with pytest.raises(ShardedLoweringError, match="on 2 meshes cannot donate its arguments"):
        lower_sharded(grouped, donate=[0])
    single = program(
        'parallel.mesh @m ["d" = 4]',
        {"x": t("8x8", '["d"], []')},
        f"""  %y = graph.relu %x : {t("8x8", '["d"], []')}
  func.return %y : {t("8x8", '["d"], []')}""",
        [t("8x8", '["d"], []')],
    )
    found = lower_sharded(single, donate=[0]).compiled().memory_analysis()
    assert found.alias_size_in_bytes == 8 * 8 * 4 // 4


SHARDABLE = sorted(op_defs().keys() & EMITTERS.keys())


@settings(max_examples=examples(20), deadline=None)
@given(data=st.data(), module=graphs(ops=SHARDABLE, max_ops=5), mesh=meshes(max_devices=8))
def test_random_programs_in_random_configurations_equal_the_unsharded_program(
    data: st.DataObject, module: ModuleOp, mesh: Mesh
) -> None:
    """The issue's property: a random graph, every op in a random legal configuration
    (`shardings()`, collectives where layouts differ), run on JAX devices, equals the
    unsharded program on the reference — the rules, the writer and the lowering at once."""
    dag = from_module(module)
    sharded = module.clone()
    write_sharded(sharded, dag, data.draw(shardings(dag, mesh)), mesh)
    assert_matches_unsharded(sharded)
