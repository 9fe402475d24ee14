"""Operator and graph cost: what a search pass minimizes.

Three models implement `CostModel` (`cost(dag)` in predicted seconds, `math.inf` over
a memory limit): `AnalyticCost`, a roofline on a `Device` preset,
`MeasuredCost`, op times measured once with JAX and cached on disk, and `XlaCost`,
the graph's fused regions each timed as XLA compiles it, cached on disk. All three
partition graphs by the same model of XLA's fusion (`tasoc.cost.fusion`), because a
sum of standalone op times misranks graphs that XLA compiles into fewer kernels; a
search should still re-time its best few candidates with `time_end_to_end`.

Passes import this package, never a backend: `measured` runs JAX itself, lazily.
"""

from __future__ import annotations

from tasoc.cost.analytic import AnalyticCost, roofline, roofline_work
from tasoc.cost.devices import CPU, DEVICES, H100, H200, Device
from tasoc.cost.fusion import FusionPlan, peak_bytes, plan_fusion, weight_bytes
from tasoc.cost.measured import MeasuredCost, prices_this_machine, time_end_to_end, time_rounds
from tasoc.cost.model import Budget, CostError, CostModel, FusedSumCost, OutOfTime, Work
from tasoc.cost.stats import OpStats, node_stats
from tasoc.cost.xla import AnalyticFallback, XlaCost, make_xla_cost

COST_MODELS = ("analytic", "analytic-h100", "analytic-h200", "measured", "xla")
"""The names `make_cost_model` accepts ("analytic" is the CPU preset)."""


def make_cost_model(
    name: str, memory_limit: float | None = None, fold_weights: bool = True
) -> CostModel:
    """The cost model called `name` (one of `COST_MODELS`); ValueError otherwise.

    A memory limit below a graph's weights is reported by `cost(dag)` (CostError),
    since only the graph tells how large its weights are. `fold_weights=False` charges
    ops on weights alone at every run: a training step's weights change every step,
    so nothing computed from them can be computed once.
    """
    if name == "measured":
        return MeasuredCost(memory_limit=memory_limit, fold_weights=fold_weights)
    if name == "xla":  # the analytic CPU model, marked, where no timing can be taken
        return make_xla_cost(memory_limit, fold_weights)
    presets = {"analytic": CPU, "analytic-h100": H100, "analytic-h200": H200}
    if name not in presets:
        raise ValueError(f"unknown cost model '{name}' (expected {', '.join(COST_MODELS)})")
    return AnalyticCost(presets[name], memory_limit=memory_limit, fold_weights=fold_weights)


__all__ = [
    "COST_MODELS",
    "CPU",
    "DEVICES",
    "H100",
    "H200",
    "AnalyticCost",
    "AnalyticFallback",
    "Budget",
    "CostError",
    "CostModel",
    "Device",
    "FusedSumCost",
    "FusionPlan",
    "MeasuredCost",
    "OpStats",
    "OutOfTime",
    "Work",
    "XlaCost",
    "make_cost_model",
    "make_xla_cost",
    "node_stats",
    "peak_bytes",
    "plan_fusion",
    "prices_this_machine",
    "roofline",
    "roofline_work",
    "time_end_to_end",
    "time_rounds",
    "weight_bytes",
]
