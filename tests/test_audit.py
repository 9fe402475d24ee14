"""The HLO audit (`tasoc.backends.jax.audit`): the collectives a compiled sharded program
runs beside those its IR asks for, the HLO text read right, and the verdicts."""

from __future__ import annotations

import pytest
from sharded_programs import GRID, LINE, batchnorm, program, t
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.jax.audit import (
    Asked,
    Found,
    asked_collectives,
    audit,
    hlo_collectives,
    stablehlo_counts,
    verdict,
)
from tasoc.backends.jax.sharded import lower_sharded


def every_kind() -> ModuleOp:
    """A program asking for one collective of each kind on a 2x4 mesh (and a slice)."""
    return program(
        GRID,
        {"x": t("8x32", '["x"], ["y"]'), "w": t("32x16", '["y"], []')},
        f"""  %p = graph.matmul %x, %w : {t("8x16", '["x"], []', unreduced='"y"')}
  %s = parallel.reduce_scatter %p : {t("8x16", '["x"], ["y"]')}
  %a = parallel.all_to_all %s : {t("8x16", '["x", "y"], []')}
  %g = parallel.all_gather %a : {t("8x16", "[], []")}
  %l = parallel.all_slice %g : {t("8x16", '[], ["x"]')}
  %q = graph.matmul %x, %w : {t("8x16", '["x"], []', unreduced='"y"')}
  %r = parallel.all_reduce %q : {t("8x16", '["x"], []')}
  func.return %l, %r : {t("8x16", '[], ["x"]')}, {t("8x16", '["x"], []')}""",
        [t("8x16", '[], ["x"]'), t("8x16", '["x"], []')],
    )


def test_the_ir_asks_for_each_collective_with_its_local_operand_bytes() -> None:
    asked = asked_collectives(every_kind())
    assert asked == [
        Asked("reduce-scatter", ("y",), 4 * 16 * 4, "parallel.reduce_scatter"),
        Asked("all-to-all", ("y",), 4 * 4 * 4, "parallel.all_to_all"),
        Asked("all-gather", ("x", "y"), 1 * 16 * 4, "parallel.all_gather"),
        Asked("all-reduce", ("y",), 4 * 16 * 4, "parallel.all_reduce"),
    ]


def test_a_small_program_compiles_to_the_collectives_it_asks_for() -> None:
    module = every_kind()
    result = audit(module, lower_sharded(module))
    assert result.ok, result.table()
    assert {row.kind: (row.asked, row.found) for row in result.rows} == {
        "all-reduce": (1, 1),
        "all-gather": (1, 1),
        "reduce-scatter": (1, 1),
        "all-to-all": (1, 1),
    }
    assert all(row.asked_bytes == row.found_bytes for row in result.rows)
    assert all(row.cuda == 1 for row in result.rows)
    assert len(result.found) == 4 and all(
        "'y'" in f.replica_groups or "'x'" in f.replica_groups for f in result.found
    )


def test_batchnorm_asks_for_its_statistics_and_the_moments_of_x_once() -> None:
    # batchnorm_train all-reduces x's mean and variance; batchnorm_grad takes the
    # same moments (XLA computes them once) and all-reduces dscale and dbias stacked.
    module = batchnorm(LINE, '"d"')
    asked = asked_collectives(module)
    assert [(a.kind, a.bytes) for a in asked] == [
        ("all-reduce", 16),
        ("all-reduce", 16),
        ("all-reduce", 32),
    ]
    assert audit(module, lower_sharded(module)).ok


def test_the_hlo_reader_counts_tuple_operands_async_pairs_once_and_keeps_groups() -> None:
    hlo = """HloModule m
ENTRY %main {
  %a = f32[4,8]{1,0} parameter(0)
  %b = bf16[16]{0} parameter(1)
  %ar = (f32[4,8]{1,0}, bf16[16]{0}) all-reduce(%a, /*index=1*/%b), channel_id=1, replica_groups={{0,1},{2,3}}, use_global_device_ids=true, to_apply=%sum
  %ags = f32[8,8]{1,0} all-gather-start(%a), channel_id=2, replica_groups=[2,2]<=[4], dimensions={0}
  %agd = f32[8,8]{1,0} all-gather-done(%ags)
  ROOT %cp = f32[4,8]{1,0} collective-permute(%a), channel_id=3, source_target_pairs={{0,1},{1,0}}
}"""  # noqa: E501
    assert hlo_collectives(hlo) == [
        Found("all-reduce", 4 * 8 * 4 + 16 * 2, "{{0,1},{2,3}}"),
        Found("all-gather", 4 * 8 * 4, "[2,2]<=[4]"),
        Found("collective-permute", 4 * 8 * 4, "{{0,1},{1,0}}"),
    ]


def test_stablehlo_counts_each_kind() -> None:
    text = (
        '%0 = "stablehlo.all_reduce"(%a) ... %1 = stablehlo.all_to_all %0 ... stablehlo.all_reduce'
    )
    counts = stablehlo_counts(text)
    assert counts["all-reduce"] == 2 and counts["all-to-all"] == 1 and counts["all-gather"] == 0


def asked(*sizes: int) -> list[Asked]:
    return [Asked("all-reduce", ("d",), size, "test") for size in sizes]


def found(*sizes: int) -> list[Found]:
    return [Found("all-reduce", size, "g") for size in sizes]


@pytest.mark.parametrize(
    ("want", "have", "expected"),
    [
        (asked(100, 100), found(100, 104), "ok"),
        (asked(100, 100), found(100, 120), "XLA changed the bytes"),
        (asked(100, 100), found(200), "XLA combined 2 into 1, the same bytes"),
        (asked(200), found(100, 100), "XLA split 1 into 2, the same bytes"),
        (asked(100), found(100, 50), "XLA added 1 (+50 bytes)"),
        (asked(100, 50), found(100), "XLA removed 1 (-50 bytes)"),
        ([], found(8), "XLA added 1 (+8 bytes)"),
        # one small collective dropped is within the byte tolerance, but no combination
        (asked(1000, 1000, 8), found(1000, 1000), "XLA removed 1 (-8 bytes)"),
    ],
)
def test_verdicts(want: list[Asked], have: list[Found], expected: str) -> None:
    assert verdict(want, have) == expected


def test_all_reduces_run_as_written_and_a_combination_is_reported() -> None:
    # Two gradients all-reduced at the end of a step. Sharded programs compile with
    # XLA's combiners off (AS_WRITTEN), so both run; XLA's default merges them, and
    # the audit names that rather than hiding it.
    partial = t("8x16", "[], []", unreduced='"d"')
    module = program(
        LINE,
        {"x": t("8x32", '[], ["d"]'), "w": t("32x16", '["d"], []'), "v": t("32x16", '["d"], []')},
        f"""  %p = graph.matmul %x, %w : {partial}
  %q = graph.matmul %x, %v : {partial}
  %a = parallel.all_reduce %p : {t("8x16", "[], []")}
  %b = parallel.all_reduce %q : {t("8x16", "[], []")}
  func.return %a, %b : {t("8x16", "[], []")}, {t("8x16", "[], []")}""",
        [t("8x16", "[], []")] * 2,
    )
    sharded = lower_sharded(module)
    result = audit(module, sharded)
    (row,) = result.rows
    assert (row.asked, row.found, row.asked_bytes, row.found_bytes, row.cuda) == (
        2,
        2,
        1024,
        1024,
        2,
    )
    assert row.verdict == "ok" and result.ok
    defaults = sharded.lowered().compile(compiler_options={"xla_disable_hlo_passes": ""})
    combined = hlo_collectives(defaults.as_text())
    assert verdict(asked_collectives(module), combined) == "XLA combined 2 into 1, the same bytes"
