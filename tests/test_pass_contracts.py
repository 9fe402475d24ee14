"""Program kinds and pass contracts (`tasoc.passes.kinds`): what each kind means, the
pipeline check `tasoc opt` makes before the first pass runs, the same check from
Python, plugin passes with and without a contract, and why `cse` refuses placed
programs while xDSL's passes never touch a memory op."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from conftest import Result, assert_one_line_error
from soap_programs import MLP
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser
from xdsl.passes import ModulePass
from xdsl.printer import Printer
from xdsl.transforms.canonicalize import CanonicalizePass
from xdsl.transforms.common_subexpression_elimination import CommonSubexpressionElimination
from xdsl.transforms.dead_code_elimination import DeadCodeElimination
from xdsl.utils.exceptions import PassFailedException

from tasoc.driver.sources import make_context
from tasoc.ir.memory import SwapInOp
from tasoc.ir.program import IRRuleError, verify_ir
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.kinds import (
    Kind,
    PassContract,
    Refusal,
    after,
    check,
    check_pipeline,
    kinds_of,
)
from tasoc.passes.placement import PlacementPass
from tasoc.passes.registry import (
    TASOC_PASSES,
    XDSL_CONTRACTS,
    XDSL_PASSES,
    PassRegistryError,
    contract_of,
)
from tasoc.passes.rewrite.equality_rewrite import EqualityRewritePass
from tasoc.passes.soap import SoapShardPass

Tasoc = Callable[..., Result]

T = "tensor<64x64xf32>"
H = "tensor<64x64xf32, #memory.space<host>>"

SWAPPED_TWICE = f"""
func.func @main(%x: {T}, %w: {H} {{graph.param}}) -> {T} {{
  %a = memory.swap_in %w : {T}
  %y = graph.matmul %x, %a : {T}
  %b = memory.swap_in %w : {T}
  %z = graph.matmul %y, %b : {T}
  func.return %z : {T}
}}
"""
"""A placed program that swaps one host weight in twice, for two readers."""

FREED_THEN_RECOMPUTED = f"""
func.func @main(%x: {T}) -> {T} {{
  %a = graph.relu %x : {T}
  %y = graph.tanh %a : {T}
  memory.free %a
  %b = graph.relu %x : {T}
  %o = graph.add %y, %b : {T}
  func.return %o : {T}
}}
"""
"""A placed program that frees a value and computes an equal one later."""

MARK_PLACED_PLUGIN = """\
from dataclasses import dataclass
from typing import ClassVar

from xdsl.dialects.builtin import IntegerAttr, i64
from xdsl.passes import ModulePass


@dataclass(frozen=True)
class MarkPlacedPass(ModulePass):
    name: ClassVar[str] = "test-mark-placed"

    def apply(self, ctx, op) -> None:
        op.attributes["memory.capacity"] = IntegerAttr(1 << 40, i64)
"""
"""A plugin pass without a contract whose output is placed (a capacity is a placement)."""

TRAINING_ONLY_PLUGIN = """\
from dataclasses import dataclass
from typing import ClassVar

from xdsl.passes import ModulePass

from tasoc.passes.kinds import Kind, PassContract


@dataclass(frozen=True)
class TrainingOnlyPass(ModulePass):
    name: ClassVar[str] = "test-training-only"
    contract: ClassVar[PassContract] = PassContract(
        requires={Kind.TRAINING: "needs a training step; run autodiff first"}
    )

    def apply(self, ctx, op) -> None:
        raise AssertionError("the driver's check runs before any pass")
"""

BAD_CONTRACT_PLUGIN = """\
from dataclasses import dataclass
from typing import ClassVar

from xdsl.passes import ModulePass


@dataclass(frozen=True)
class BadContractPass(ModulePass):
    name: ClassVar[str] = "test-bad-contract"
    contract: ClassVar[dict] = {"refuses": ["placed"]}

    def apply(self, ctx, op) -> None:
        pass
"""


def parse(text: str) -> ModuleOp:
    module = Parser(make_context(), text).parse_module()
    module.verify()
    verify_ir(module)
    return module


def applied(module: ModuleOp, *passes: ModulePass) -> ModuleOp:
    """A copy of `module` after `passes`, verified."""
    module = module.clone()
    for each in passes:
        each.apply(make_context(), module)
    module.verify()
    verify_ir(module)
    return module


FORWARD = parse(MLP)
STEP = applied(FORWARD, AutodiffPass(loss="mse"))
SHARDED_FORWARD = applied(FORWARD, SoapShardPass(mesh=2))
SHARDED_STEP = applied(STEP, SoapShardPass(mesh=2))
PLACED_STEP = applied(STEP, PlacementPass())

PROGRAMS = {
    "forward": FORWARD,
    "step": STEP,
    "sharded-forward": SHARDED_FORWARD,
    "placed-step": PLACED_STEP,
    "placed-forward": parse(SWAPPED_TWICE),
}


@pytest.fixture
def files(tmp_path: Path) -> dict[str, Path]:
    """Each of `PROGRAMS` as a text file."""
    paths = {}
    for name, module in PROGRAMS.items():
        path = tmp_path / f"{name}.mlir"
        with path.open("w") as stream:
            Printer(stream=stream).print_op(module)
        paths[name] = path
    return paths


# ------------------------------------------------------------------------ kinds


def test_kinds_of_each_program() -> None:
    assert kinds_of(FORWARD) == {Kind.GRAPH}
    assert kinds_of(STEP) == {Kind.TRAINING}
    assert kinds_of(SHARDED_FORWARD) == {Kind.GRAPH, Kind.SHARDED}
    assert kinds_of(SHARDED_STEP) == {Kind.TRAINING, Kind.SHARDED}
    assert kinds_of(PLACED_STEP) == {Kind.TRAINING, Kind.PLACED}
    assert kinds_of(PROGRAMS["placed-forward"]) == {Kind.GRAPH, Kind.PLACED}
    gradients = applied(FORWARD, AutodiffPass(loss="mse", emit="gradients"))
    assert kinds_of(gradients) == {Kind.TRAINING}


def test_a_mesh_alone_is_not_sharded_and_no_main_is_neither_graph_nor_training() -> None:
    # soap-shard takes a module's own mesh as the mesh to plan on.
    assert kinds_of(parse('parallel.mesh @m ["d" = 2]\n' + MLP)) == {Kind.GRAPH}
    assert kinds_of(ModuleOp([])) == frozenset()


def test_check_after_and_a_pipeline_walk() -> None:
    contract = PassContract(
        requires={Kind.TRAINING: "not a step"},
        refuses={Kind.SHARDED: "sharded", Kind.PLACED: "placed"},
        adds=frozenset({Kind.PLACED}),
        removes=frozenset({Kind.GRAPH}),
    )
    assert check(contract, frozenset({Kind.GRAPH})) == "not a step"
    # Refusals come first, in the order written.
    assert check(contract, frozenset({Kind.SHARDED, Kind.PLACED})) == "sharded"
    assert check(contract, frozenset({Kind.TRAINING})) is None
    assert after(contract, frozenset({Kind.GRAPH, Kind.SHARDED})) == {Kind.SHARDED, Kind.PLACED}

    steps = [
        ("autodiff", AutodiffPass.contract),
        ("soap-shard", SoapShardPass.contract),
        ("equality-rewrite", EqualityRewritePass.contract),
    ]
    refusal = check_pipeline(steps, frozenset({Kind.GRAPH}))
    assert refusal == Refusal(
        3,
        "equality-rewrite",
        EqualityRewritePass.contract.refuses[Kind.SHARDED],
        frozenset({Kind.TRAINING, Kind.SHARDED}),
    )
    assert str(refusal).endswith("[pipeline position 3, program kinds: training, sharded]")
    # A pass without a contract ends the walk: what it writes is unknown.
    assert check_pipeline([("plugin", None), *steps], frozenset({Kind.GRAPH})) is None


def test_every_built_in_pass_declares_a_contract() -> None:
    for name, factory in {**TASOC_PASSES, **XDSL_PASSES}.items():
        built = factory()()
        assert isinstance(contract_of(built), PassContract), name
    assert XDSL_CONTRACTS.keys() == XDSL_PASSES.keys()


# ------------------------------------------------------------ the driver's check

REFUSED = [
    # (input, pipeline, the pass refusing, its position, what the reason says)
    ("forward", "autodiff{loss=mse},soap-shard{mesh=2},equality-rewrite", "equality-rewrite", 3,
     "the program is sharded; run equality-rewrite before soap-shard"),
    ("forward", "autodiff{loss=mse},placement,soap-shard{mesh=2}", "soap-shard", 3,
     "the program is placed; run soap-shard before placement"),
    ("forward", "autodiff{loss=mse},placement,equality-rewrite", "equality-rewrite", 3,
     "the program is placed; run equality-rewrite before placement"),
    ("forward", "soap-shard{mesh=2},autodiff", "autodiff", 2,
     "the program is sharded; run autodiff before soap-shard"),
    ("forward", "autodiff,autodiff", "autodiff", 2, "@main is already a training step"),
    ("forward", "placement", "placement", 1, "@main is not a training step"),
    ("forward", "soap-shard{mesh=2},soap-shard{mesh=2}", "soap-shard", 2, "already sharded"),
    ("step", "autodiff", "autodiff", 1, "@main is already a training step"),
    ("sharded-forward", "equality-rewrite", "equality-rewrite", 1, "the program is sharded"),
    ("placed-step", "placement", "placement", 1, "the program is placed already"),
    ("placed-step", "cse", "cse", 1, "the program is placed; run cse before placement"),
    ("placed-step", "dce,canonicalize,soap-shard", "soap-shard", 3, "the program is placed"),
]  # fmt: skip


@pytest.mark.parametrize(("source", "pipeline", "refusing", "position", "reason"), REFUSED)
def test_a_wrong_order_is_one_line_naming_the_pass_and_nothing_is_written(
    tasoc: Tasoc,
    files: dict[str, Path],
    tmp_path: Path,
    source: str,
    pipeline: str,
    refusing: str,
    position: int,
    reason: str,
) -> None:
    out, report = tmp_path / "out.mlir", tmp_path / "report.json"
    result = tasoc("opt", files[source], "-p", pipeline, "-o", out, "--report", report)
    line = assert_one_line_error(result, reason, f"[pipeline position {position}, ")
    assert line.startswith(f"tasoc: error: {refusing}: ")
    assert not out.exists() and not report.exists()


def test_the_check_runs_before_the_first_pass(
    tasoc: Tasoc, files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def must_not_run(self: ModulePass, ctx: object, op: ModuleOp) -> None:
        raise AssertionError(f"{self.name} ran")

    monkeypatch.setattr(AutodiffPass, "apply", must_not_run)
    out, report = tmp_path / "out.mlir", tmp_path / "report.json"
    pipeline = "autodiff{loss=mse},soap-shard{mesh=2 search=data-parallel},equality-rewrite"
    result = tasoc("opt", files["forward"], "-p", pipeline, "-o", out, "--report", report)
    assert_one_line_error(
        result,
        "equality-rewrite: the program is sharded",
        "[pipeline position 3, program kinds: training, sharded]",
    )
    assert not out.exists() and not report.exists()


def test_each_chunk_of_split_input_is_checked(
    tasoc: Tasoc, files: dict[str, Path], tmp_path: Path
) -> None:
    split = tmp_path / "split.mlir"
    split.write_text(
        files["forward"].read_text() + "\n// -----\n" + files["placed-forward"].read_text()
    )
    out = tmp_path / "out.mlir"
    result = tasoc("opt", split, "--split-input-file", "-p", "cse", "-o", out)
    assert_one_line_error(result, "cse: the program is placed", "program kinds: graph, placed")
    assert not out.exists()
    assert tasoc("opt", split, "--split-input-file", "-p", "dce").code == 0


def test_orders_the_contracts_take_run(tasoc: Tasoc, files: dict[str, Path]) -> None:
    pipeline = "equality-rewrite{timeout=2 retime=0},autodiff{loss=mse},soap-shard{mesh=2},cse"
    assert tasoc("opt", files["forward"], "-p", pipeline).code == 0
    assert tasoc("opt", files["placed-step"], "-p", "dce,canonicalize").code == 0


# ----------------------------------------------------------------- from Python

API_REFUSED = [
    (AutodiffPass(), "step", "autodiff: @main is already a training step"),
    (AutodiffPass(), "sharded-forward", "autodiff: the program is sharded"),
    (AutodiffPass(), "placed-forward", "autodiff: the program is placed"),
    # Refusals are reported in the order the contract writes them.
    (AutodiffPass(), "placed-step", "autodiff: @main is already a training step"),
    (SoapShardPass(mesh=2), "placed-step", "soap-shard: the program is placed"),
    (EqualityRewritePass(), "sharded-forward", "equality-rewrite: the program is sharded"),
    (EqualityRewritePass(), "placed-step", "equality-rewrite: the program is placed"),
    (PlacementPass(), "forward", "placement: @main is not a training step"),
    (PlacementPass(), "placed-step", "placement: the program is placed already"),
]


@pytest.mark.parametrize(("refusing", "source", "start"), API_REFUSED)
def test_apply_refuses_with_the_drivers_message(
    tasoc: Tasoc, files: dict[str, Path], refusing: ModulePass, source: str, start: str
) -> None:
    with pytest.raises(PassFailedException) as info:
        refusing.apply(make_context(), PROGRAMS[source].clone())
    message = str(info.value)
    assert message.startswith(start)
    line = assert_one_line_error(tasoc("opt", files[source], "-p", refusing.name))
    assert line.startswith(f"tasoc: error: {message} [pipeline position 1, ")


def test_apply_refuses_a_sharded_program_with_the_passs_own_exception() -> None:
    from tasoc.passes.soap.soap_shard import SoapShardFailed

    with pytest.raises(SoapShardFailed, match=r"^soap-shard: @main is already sharded"):
        SoapShardPass().apply(make_context(), SHARDED_FORWARD.clone())


# ---------------------------------------------------------------------- plugins


def test_a_plugin_pass_without_a_contract_is_not_checked_but_what_follows_it_is(
    tasoc: Tasoc, files: dict[str, Path], tmp_path: Path
) -> None:
    plugin = tmp_path / "mark_placed.py"
    plugin.write_text(MARK_PLACED_PLUGIN)
    load = ("--load-pass-plugin", plugin)
    # Not checked: it runs on a placed program, and on a forward one.
    assert tasoc("opt", files["placed-step"], *load, "-p", "test-mark-placed").code == 0
    assert tasoc("opt", files["forward"], *load, "-p", "test-mark-placed,dce").code == 0
    # What it wrote is checked once it has run.
    result = tasoc("opt", files["forward"], *load, "-p", "test-mark-placed,cse")
    assert_one_line_error(
        result, "cse: the program is placed", "[pipeline position 2, program kinds: graph, placed]"
    )


def test_the_tutorials_example_declares_a_contract(tasoc: Tasoc, files: dict[str, Path]) -> None:
    example = Path(__file__).parent.parent / "examples" / "my_passes.py"
    load = ("--load-pass-plugin", example)
    pipeline = "autodiff{loss=mse},soap-shard{mesh=2},fold-transposes"
    result = tasoc("opt", files["forward"], *load, "-p", pipeline)
    assert_one_line_error(
        result,
        "fold-transposes: the program is sharded; run fold-transposes before soap-shard "
        "[pipeline position 3, program kinds: training, sharded]",
    )
    assert tasoc("opt", files["forward"], *load, "-p", "fold-transposes,autodiff").code == 0


def test_a_plugin_declares_its_contract_as_a_class_variable(
    tasoc: Tasoc, files: dict[str, Path], tmp_path: Path
) -> None:
    plugin = tmp_path / "training_only.py"
    plugin.write_text(TRAINING_ONLY_PLUGIN)
    result = tasoc(
        "opt", files["forward"], "--load-pass-plugin", plugin, "-p", "test-training-only"
    )
    assert_one_line_error(
        result, "test-training-only: needs a training step; run autodiff first [pipeline position 1"
    )
    bad = tmp_path / "bad_contract.py"
    bad.write_text(BAD_CONTRACT_PLUGIN)
    result = tasoc("opt", files["forward"], "--load-pass-plugin", bad, "-p", "test-bad-contract")
    assert_one_line_error(result, "pass 'test-bad-contract': its contract is a dict")


class NamedCse(ModulePass):
    """Test-only: a pass that is not xDSL's cse, under its name."""

    name = "cse"

    def apply(self, ctx: object, op: ModuleOp) -> None:
        pass


class MisdeclaredPass(ModulePass):
    """Test-only: a `contract` that is not a PassContract."""

    name = "test-misdeclared"
    contract = "refuses placed"

    def apply(self, ctx: object, op: ModuleOp) -> None:
        pass


def test_contract_of_reads_the_class_or_the_registry_for_xdsls_own_passes() -> None:
    assert contract_of(CommonSubexpressionElimination()) is XDSL_CONTRACTS["cse"]
    assert contract_of(NamedCse()) is None
    with pytest.raises(PassRegistryError, match="'test-misdeclared': its contract is a str"):
        contract_of(MisdeclaredPass())


# ------------------------------------------------- xDSL's passes and memory ops


def test_no_xdsl_pass_merges_or_drops_a_swap_in() -> None:
    """Memory ops declare no memory effects, so xDSL takes theirs as unknown: two
    swap-ins of one host value stay two (merging them would change the plan)."""
    for xdsl_pass in (CommonSubexpressionElimination(), CanonicalizePass(), DeadCodeElimination()):
        module = applied(parse(SWAPPED_TWICE), xdsl_pass)
        assert sum(isinstance(op, SwapInOp) for op in module.walk()) == 2


def test_cse_would_break_a_placed_program_which_is_why_it_refuses_one() -> None:
    module = parse(FREED_THEN_RECOMPUTED)
    CommonSubexpressionElimination().apply(make_context(), module)
    with pytest.raises(IRRuleError, match=r"reads %a after its memory\.free"):
        verify_ir(module)
