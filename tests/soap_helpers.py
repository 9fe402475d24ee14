"""How soap-shard's tests parse, shard and train programs, and run a sharded one on
several devices against the numpy reference."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.driver.sources import make_context, verify_module
from tasoc.ir.graph import sig_of
from tasoc.ir.parallel import CollectiveOp, sharding_of
from tasoc.ir.program import entry_block, entry_function
from tasoc.ir.soap import Sharding
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.report import RunReport, reporting
from tasoc.passes.soap import SoapShardPass


def parse(text: str) -> ModuleOp:
    return Parser(make_context(), text).parse_module()


def shard(module: ModuleOp, **options: Any) -> tuple[ModuleOp, dict[str, Any]]:
    """A sharded copy of `module` (verified) and the pass's report section."""
    sharded = module.clone()
    with reporting(RunReport()) as report:
        SoapShardPass(**options).apply(make_context(), sharded)
    verify_module(sharded)
    return sharded, report.sections["soap-shard"]


def step(module: ModuleOp, **options: Any) -> ModuleOp:
    trained = module.clone()
    AutodiffPass(**options).apply(make_context(), trained)
    return trained


def assert_runs_as_the_reference(module: ModuleOp, folder: Path, devices: int) -> None:
    """`tasoc run --devices N --check` of `module` in a fresh process (which makes its
    own devices) matches the numpy reference of the unsharded program."""
    program = folder / "sharded.mlir"
    program.write_text(str(module))
    tasoc = Path(sys.executable).parent / "tasoc"
    run = subprocess.run(
        [tasoc, "run", program, "--devices", str(devices), "--check"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stderr
    assert "equivalent to the numpy reference" in run.stdout + run.stderr


def argument_shardings(module: ModuleOp) -> list[Sharding | None]:
    return [sharding_of(sig_of(arg.type)) for arg in entry_block(entry_function(module)).args]


def collectives(module: ModuleOp) -> list[CollectiveOp]:
    return [op for op in module.walk() if isinstance(op, CollectiveOp)]


def sharding(*dims: tuple[str, ...], unreduced: tuple[str, ...] = ()) -> Sharding:
    """A layout on the `mesh` the pass adds: axes per dim, and partial sums' axes."""
    return Sharding("mesh", tuple(dims), unreduced)
