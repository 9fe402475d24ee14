"""The fast paths of pricing a plan give what the full path gives: a step derived from
another by editing the ops that differ (`ShardedStep.derived`) is task for task the
step built afresh, a search's state is reused for the written plan only where it is
one, the durations kept across steps are those computed, and the report's pictures are
described only when read."""

from __future__ import annotations

import dataclasses
import random

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.program import entry_function
from tasoc.ir.shard_plan import Plan
from tasoc.ir.training import training_signature
from tasoc.passes.figures import ShardingMapFigure
from tasoc.passes.report import RunReport
from tasoc.passes.search import Deadline
from tasoc.passes.soap import mcmc
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Problem
from tasoc.passes.soap.problem import SoapProblem
from tasoc.passes.soap.searches import baseline_plans
from tasoc.passes.soap.simulated import SimulatedStrategy, copy_plan
from tasoc.sim.core import Task, simulate
from tasoc.sim.parallel import ShardedStep

K80 = machine("k80-cluster")


def lstm_problem() -> tuple[SoapProblem, dict[str, Plan]]:
    """A one-layer LSTM's training step (4 steps unrolled) on 8 K80s, capped by the
    device's memory (so memory is traced), and its baselines."""
    module = build_zoo_model("rnn?layers=1&hidden=512&seq=4&batch=32&train=sgd&lr=0.01")
    dag = dag_module.from_module(module)
    program = Problem(dag, parse_mesh("8"), training_signature(entry_function(module)), {})
    baselines, _ = baseline_plans(program)
    return SoapProblem(program, K80, int(K80.device.memory_bytes)), baselines


def built(problem: SoapProblem, plan: Plan) -> ShardedStep:
    program = problem.program
    return ShardedStep(
        program.dag, copy_plan(plan), K80, mesh=program.mesh, signature=program.signature
    )


def tasks(step: ShardedStep) -> list[tuple[int, Task]]:
    return [(task_id, step.graph[task_id]) for task_id in step.graph.ids()]


def assert_as_built(step: ShardedStep, fresh: ShardedStep) -> None:
    """The same tasks under the same ids, so the same simulation and memory."""
    assert tasks(step) == tasks(fresh)
    assert simulate(step.graph).end == simulate(fresh.graph).end
    assert step.memory() == fresh.memory()
    assert step.plan == fresh.plan


def test_a_step_derived_from_another_is_the_step_built_afresh() -> None:
    """Each baseline from data parallel's step, and from a step a chain has edited
    (its ids no longer a build's): where the edits reach the plan, the step is the
    one a build makes, id for id; where they do not (another mesh, too many ops),
    there is none. Every step's communication groups, kept across steps and edits
    (`ShardedStep._group`), are those made afresh for its plan."""
    problem, baselines = lstm_problem()
    base = built(problem, baselines["data-parallel"])
    derived = {name: base.derived(plan, 10**6) for name, plan in baselines.items()}
    for name, step in derived.items():
        if step is not None:
            assert_as_built(step, built(problem, baselines[name]))
    assert sum(step is not None for step in derived.values()) >= 3
    data_parallel = baselines["data-parallel"]
    reordered = tuple(reversed(problem.program.dag.ops))
    assert base.derived(dataclasses.replace(data_parallel, order=reordered), 10**6) is None
    assert base.derived(baselines["megatron"], 0) is None  # more edits than allowed
    assert tasks(base) == tasks(built(problem, baselines["data-parallel"]))  # untouched

    state = problem.simulate(baselines["data-parallel"])
    # FlexFlow's proposals alone: a guided group move can leave a plan from which
    # `derived`'s readers-first edits back to data parallel pass through a reader
    # of partial sums its producer does not leave yet (None: the step is built)
    chain = mcmc.Chain(state, problem.space(state.plan), random.Random(1), 20.0, guided=0.0)
    chain.run(12, Deadline.after(600))
    assert chain.accepted
    for plan in (state.plan, baselines["data-parallel"], baselines["zero"]):
        step = state.step.derived(plan, 10**6)
        assert step is not None
        assert_as_built(step, built(problem, plan))
    # the communication groups kept across steps and edits are those made afresh
    for step in (state.step, *filter(None, derived.values())):
        for producer, group in step._groups.items():
            assert group == step._made_group(producer)


def test_the_written_plans_state_is_a_searchs_only_where_it_is_as_built() -> None:
    problem, baselines = lstm_problem()
    plan = baselines["zero"]
    state = problem.simulate(baselines["data-parallel"])
    zero = problem.simulate(plan)
    assert zero.pristine and problem.state_of(plan) is zero
    fresh = SimulatedStrategy.of(problem.program, plan, K80, problem.memory_cap)
    assert zero.priced() == fresh.priced()
    assert tasks(zero.step) == tasks(fresh.step)

    node = next(iter(problem.space(plan)))
    edits = zero.edit(node, *zero.choose(node, [c for c in problem.space(plan)[node][:1]]))
    zero.resimulate()
    zero.restore(edits)
    zero.resimulate()
    assert zero.plan == plan and not zero.pristine
    again = problem.state_of(plan)
    assert again is not zero and again is not state
    assert again.priced() == fresh.priced()
    assert tasks(again.step) == tasks(fresh.step)


def test_a_figure_given_as_a_function_is_made_once_when_read() -> None:
    report = RunReport()
    made: list[int] = []

    def figure() -> ShardingMapFigure:
        made.append(1)
        return ShardingMapFigure("map", (), (), (), ())

    report.figure("map", figure)
    assert not made
    assert report.figures["map"].title == "map"
    assert dict(report.figures.items())["map"] is report.figures.get("map")
    assert len(made) == 1
