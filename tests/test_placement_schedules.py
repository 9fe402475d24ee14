"""Seed schedules (`schedules.py`): each is a topological order of every op, the
least-memory order holds no more device memory than the step's own, and the
least-peak order holds at most what every other seed holds at its busiest op."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from placement_helpers import V100, rnn_step
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.placement_plan import PlacementPlan, check_plan
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.schedules import (
    depth_first,
    depth_first_reversed,
    held_peak,
    least_memory,
    least_peak,
    seed_orders,
    waiting_aware,
)
from tasoc.sim.placement import simulate_plan
from tasoc.verify.strategies import graphs


def held(dag: Dag, order: tuple) -> int:
    """The most device bytes `order` holds, nothing moved."""
    return simulate_plan(dag, PlacementPlan(order), V100).peak_bytes


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_ops=8))
def test_every_seed_runs_every_op_after_its_operands(module: ModuleOp) -> None:
    dag = dag_module.from_module(module, keep_order=True)
    for order in [*seed_orders(dag), waiting_aware(dag)]:
        check_plan(dag, PlacementPlan(order))  # PlanError for an op before its operands
        assert sorted(map(id, order)) == sorted(map(id, dag.ops))


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_ops=10))
def test_the_least_peak_order_holds_at_most_every_other_seed(module: ModuleOp) -> None:
    """By construction: it starts from the lowest of the other seeds and keeps a move
    only when the peak falls."""
    dag = dag_module.from_module(module, keep_order=True)
    lowest = held_peak(dag, least_peak(dag))
    for other in (depth_first, depth_first_reversed, least_memory, waiting_aware):
        assert lowest <= held_peak(dag, other(dag))


def test_the_least_memory_order_holds_less_than_the_rnn_steps_own() -> None:
    dag = dag_module.from_module(rnn_step(), keep_order=True)
    assert held(dag, least_memory(dag)) <= held(dag, tuple(dag.ops))
    assert len(seed_orders(dag)) >= 3


def test_a_brnn_step_holds_less_in_the_least_peak_order_than_in_least_memorys() -> None:
    """The least-memory greedy runs each step's weight-gradient product as soon as it
    can, though the sum reading it waits (module docstring); the waiting-aware start
    does not."""
    module = get_model("brnn").build(layers=2, hidden=64, seq=8, batch=4)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    dag = dag_module.from_module(module, keep_order=True)
    assert held_peak(dag, least_peak(dag)) < held_peak(dag, least_memory(dag))
