"""The training step and machine placement's planner tests plan on, and `placed`, a
placed copy of a program with the pass's report section."""

from __future__ import annotations

from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement import PlacementPass
from tasoc.passes.report import RunReport, reporting

V100 = machine("v100-swapadvisor")


def rnn_step() -> ModuleOp:
    module = get_model("rnn").build(layers=2, hidden=64, seq=6, batch=4)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    return module


def placed(module: ModuleOp, **options: object) -> tuple[ModuleOp, dict]:
    copy = module.clone()
    with reporting(RunReport()) as report:
        PlacementPass(**options).apply(Context(), copy)  # type: ignore[arg-type]
    return copy, report.section("placement")
