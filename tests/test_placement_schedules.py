"""Seed schedules (`schedules.py`): each is a topological order of every op, and the
least-memory order holds no more device memory than the step's own."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from placement_helpers import V100, rnn_step
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.placement_plan import PlacementPlan, check_plan
from tasoc.passes.placement.schedules import least_memory, seed_orders
from tasoc.sim.placement import simulate_plan
from tasoc.verify.strategies import graphs


def held(dag: Dag, order: tuple) -> int:
    """The most device bytes `order` holds, nothing moved."""
    return simulate_plan(dag, PlacementPlan(order), V100).peak_bytes


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(max_ops=8))
def test_every_seed_runs_every_op_after_its_operands(module: ModuleOp) -> None:
    dag = dag_module.from_module(module, keep_order=True)
    for order in seed_orders(dag):
        check_plan(dag, PlacementPlan(order))  # PlanError for an op before its operands
        assert sorted(map(id, order)) == sorted(map(id, dag.ops))


def test_the_least_memory_order_holds_less_than_the_rnn_steps_own() -> None:
    dag = dag_module.from_module(rnn_step(), keep_order=True)
    assert held(dag, least_memory(dag)) <= held(dag, tuple(dag.ops))
    assert len(seed_orders(dag)) == 3
