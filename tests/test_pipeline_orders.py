"""Passes compose in any order (issue 28): on random small programs, any sequence of
equality-rewrite, autodiff, soap-shard and placement is either refused in one line
before any pass ran, or writes a program that `--verify-each` found equal to its input
pass by pass and that `tasoc run --check` finds equal to the numpy reference."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error, examples
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from xdsl.dialects.builtin import ModuleOp
from xdsl.printer import Printer

from tasoc.ir.memory import is_placed
from tasoc.ir.opdef import op_defs
from tasoc.ir.parallel import is_sharded
from tasoc.passes.kinds import check_pipeline, kinds_of
from tasoc.passes.registry import TASOC_PASSES, contract_of
from tasoc.verify.strategies import EMITTERS, graphs

Tasoc = Callable[..., Result]

PASSES = {
    "equality-rewrite": "equality-rewrite{timeout=1 retime=0}",
    "autodiff": "autodiff{loss=sum optimizer=sgd}",
    "soap-shard": "soap-shard{mesh=2 search=data-parallel}",
    "placement": "placement{search=offload-all}",
}
"""Each pass with options that keep an example to seconds."""

SENSIBLE = ("equality-rewrite", "autodiff", "soap-shard", "placement")
"""The order the contracts take; a drawn pipeline is any order, or a subsequence of this."""

ORDERS = st.one_of(
    st.lists(st.sampled_from(SENSIBLE), min_size=1, max_size=4),
    st.sets(st.sampled_from(SENSIBLE), min_size=1).map(lambda s: [p for p in SENSIBLE if p in s]),
)

SHARDABLE = sorted(op_defs().keys() & EMITTERS.keys())
"""Ops soap-shard has a rule for: a program of others is refused by soap-shard itself."""


def _text(module: ModuleOp) -> str:
    import io

    stream = io.StringIO()
    Printer(stream=stream).print_op(module)
    return stream.getvalue()


@settings(max_examples=examples(12), suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    graphs(ops=SHARDABLE, max_ops=3, trainable=True),
    ORDERS,
)
def test_any_order_runs_or_is_refused_before_any_pass(
    tasoc: Tasoc, tmp_path_factory: pytest.TempPathFactory, module: ModuleOp, order: list[str]
) -> None:
    folder = tmp_path_factory.mktemp("order")
    source, written, report = folder / "in.mlir", folder / "out.mlir", folder / "r.json"
    source.write_text(_text(module))
    pipeline = ",".join(PASSES[name] for name in order)
    contracts = [(name, contract_of(TASOC_PASSES[name]()())) for name in order]
    refusal = check_pipeline(contracts, kinds_of(module))
    result = tasoc(
        "opt", source, "-p", pipeline, "--verify-each", "-o", written, "--report", report
    )
    if refusal is not None:
        event(f"refused by {refusal.name}")
        assert_one_line_error(result, f"{refusal.name}: ", f"pipeline position {refusal.position}")
        assert not written.exists() and not report.exists()  # nothing ran, nothing written
        return
    if result.code != 0:  # a pass's own refusal of this program (one line), never a crash
        line = assert_one_line_error(result)
        event(f"{line.split(':')[2].strip()} refused the program")
        assert "internal error" not in line, line
        return
    event(f"ran: {' then '.join(order)}")
    _runs_as_the_reference(tasoc, written)


def _runs_as_the_reference(tasoc: Tasoc, path: Path) -> None:
    from xdsl.context import Context

    from tasoc.driver.sources import SourceMap, parse_mlir, register_dialects

    context = Context()
    register_dialects(context)
    module = parse_mlir(context, path.read_bytes(), str(path), SourceMap(), 0, implicit_module=True)
    flags = ["--devices", "2"] if is_sharded(module) else []
    if is_placed(module):
        flags += ["--mode", "runtime"]
    result = tasoc("run", path, "--check", *flags)
    assert result.code == 0, result
    assert "check:" in result.out
