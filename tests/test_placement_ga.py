"""placement's pool-aware swap planning and SwapAdvisor's genetic algorithm
(`placement{search=ga}`, Huang thesis §4.4): the operators keep schedules topological
and allocations valid, a seed gives one plan, pool plans verify with `memory.pool`,
and the pass's plan is never slower than belady's."""

from __future__ import annotations

import functools
import itertools
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from placement_helpers import V100, placed, rnn_step
from xdsl.context import Context
from xdsl.dialects.builtin import IntegerAttr, ModuleOp, i64

from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Dag
from tasoc.ir.memory import CAPACITY_ATTR, Pool, pool_of, replay, tensor_bytes, unplaced
from tasoc.ir.placement_plan import PlacementPlan, SwapIn, SwapOut, write_placed
from tasoc.ir.program import entry_function, verify_ir
from tasoc.ir.training import training_signature
from tasoc.models.registry import get_model
from tasoc.passes.autodiff import AutodiffPass
from tasoc.passes.placement.ga import (
    Allocation,
    GASettings,
    Genome,
    _can_fork,
    ga_search,
    monotone,
    random_search,
    regroup,
)
from tasoc.passes.placement.problem import NoPlanFound, PlacementProblem, SearchLimits
from tasoc.passes.placement.swap_planner import CapacityTooSmall, SwapSettings, plan_swaps
from tasoc.passes.search import Deadline, StopReason
from tasoc.verify.equivalence import equivalent
from tasoc.verify.strategies import capacities, graphs

MB = 2**20


@functools.cache
def rnn_problem(ratio: float = 2.0) -> PlacementProblem:
    """The small RNN step of test_placement_planners at `ratio` times oversubscription."""
    module = rnn_step()
    capacity = int(replay(entry_function(module)).peak_bytes / ratio)
    dag = dag_module.from_module(module, keep_order=True)
    return PlacementProblem.of(dag, training_signature(entry_function(module)), capacity, V100)


def problem_of(module: ModuleOp, capacity: int) -> PlacementProblem:
    return PlacementProblem.of(
        dag_module.from_module(module, keep_order=True), None, capacity, V100
    )


def verified(module: ModuleOp, dag: Dag, plan: PlacementPlan) -> ModuleOp:
    """`plan` written into a copy of `module`, which verifies (the replay within the
    plan's capacity and pool) and computes what `module` computes."""
    copy = module.clone()
    write_placed(copy, dag, plan)
    if plan.capacity is not None:
        copy.attributes[CAPACITY_ATTR] = IntegerAttr(plan.capacity, i64)
    verify_ir(copy)
    assert equivalent(module, unplaced(copy)).ok
    return copy


def limits(budget: int, seed: int = 0) -> SearchLimits:
    return SearchLimits(budget, Deadline.never(), seed)


# ------------------------------------------------------------ pool-aware planning


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=6))
def test_pool_plans_fit_their_pool_or_say_why(data: st.DataObject, module: ModuleOp) -> None:
    """With a pool the planner counts objects per size class: its plans verify with
    `memory.pool` set (the replay counts objects), or it names the op and the class."""
    capacity = data.draw(capacities(module))
    genome = Genome.of(problem_of(module, capacity))
    allocation = genome.random_allocation(random.Random(data.draw(st.integers(0, 99))))
    if allocation is None:
        return  # the floors alone are over the capacity
    dag = dag_module.from_module(module, keep_order=True)
    pool = allocation.pool(genome.sizes)
    try:
        plan = plan_swaps(dag, None, SwapSettings(capacity, pool=pool))
    except CapacityTooSmall as err:
        assert "objects of the memory pool's" in str(err) or "bytes" in str(err)
        return
    assert plan.pool == pool
    assert pool_of(verified(module, dag, plan)) == pool


def test_a_pool_class_short_of_objects_evicts_within_the_class() -> None:
    """Ample bytes, but one size class cut to the objects its ops need at once: the
    planner moves tensors of that class only (SwapAdvisor §4.3.2)."""
    problem = rnn_problem(0.01)  # a hundred times the step's peak: bytes never run out
    genome = Genome.of(problem)
    short = max(range(len(genome.sizes)), key=lambda i: genome.live[i])
    counts = [1 if i == short else 10 * n for i, n in enumerate(genome.live)]
    allocation = genome.fit(tuple(range(len(genome.sizes))), counts)  # floors for `short`
    assert allocation is not None and allocation.counts[short] < genome.live[short]
    pool = allocation.pool(genome.sizes)
    plan = plan_swaps(problem.dag, problem.signature, SwapSettings(problem.capacity, pool=pool))
    moved = {move.value for move in plan.moves() if isinstance(move, SwapIn | SwapOut)}
    assert moved and {pool.size_class(tensor_bytes(v.sig)) for v in moved} == {short}
    assert pool_of(verified(rnn_step(), problem.dag, plan)) == pool


def test_a_tensor_over_the_largest_class_names_its_op() -> None:
    problem = rnn_problem()
    with pytest.raises(CapacityTooSmall, match=r"larger than the memory pool's largest size class"):
        plan_swaps(problem.dag, problem.signature, SwapSettings(10**9, pool=Pool((4,), (100,))))


# ------------------------------------------------------------------ the operators


def test_figure_4_6_crossover_repairs() -> None:
    """The thesis' example: CLS [1, 2, 1, 1] repaired to [1, 2, 2, 2]; CNT_EXT [8, 1, 4, 4]
    regrouped to [8, 3], which a 12 MB capacity repairs to [4, 2]."""
    assert monotone((0, 1, 0, 0)) == (0, 1, 1, 1)
    assert monotone((0, 0, 2, 3)) == (0, 0, 1, 2)
    assert regroup((0, 1, 1, 1), (8, 1, 4, 4)) == (8, 3)
    genome = Genome((MB, 2 * MB, 3 * MB, 4 * MB), (), (), (), (), (), (), (), (1, 1, 1, 1), 12 * MB)
    assert genome.fit((0, 1, 1, 1), (8, 3)) == Allocation((0, 1, 1, 1), (4, 2))
    assert genome.fit((0, 0, 0, 0), (4,)) == Allocation((0, 0, 0, 0), (3,))


def valid(genome: Genome, allocation: Allocation | None) -> bool:
    """CLS starts at 0 and steps by 0 or 1, one count per class, the pool fits."""
    if allocation is None:
        return True
    classes = allocation.classes
    steps = {b - a for a, b in itertools.pairwise(classes)}
    pool = allocation.pool(genome.sizes)
    return (
        classes[0] == 0
        and steps <= {0, 1}
        and len(allocation.counts) == classes[-1] + 1
        and pool.total_bytes <= genome.capacity
        and all(any(n <= size for size in pool.sizes) for n in genome.sizes)
    )


def topological(dag: Dag, schedule: tuple[int, ...]) -> bool:
    assert sorted(schedule) == list(range(len(dag.ops)))
    dag.scheduled(dag.ops[i] for i in schedule)  # ValueError when out of order
    return True


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data(), graphs(max_ops=10))
def test_operators_keep_schedules_topological_and_allocations_valid(
    data: st.DataObject, module: ModuleOp
) -> None:
    capacity = data.draw(capacities(module))
    problem = problem_of(module, capacity)
    genome = Genome.of(problem)
    rng = random.Random(data.draw(st.integers(0, 2**16)))
    probability = data.draw(st.sampled_from([0.0, 0.1, 0.5, 1.0]))
    first = genome.mutate_schedule(genome.default, probability, rng)
    second = genome.mutate_schedule(genome.depth_first, probability, rng)
    assert topological(problem.dag, first) and topological(problem.dag, second)
    children = genome.cross_schedules(first, second, rng)
    assert all(topological(problem.dag, child) for child in children)
    cut = next((i for i in range(len(first)) if children[1][i] != first[i]), len(first))
    assert children[1][:cut] == first[:cut]  # a prefix of one parent, then the other's order
    if probability == 0.0:
        assert genome.mutate_schedule(first, 0.0, rng) == first
    a, b = genome.random_allocation(rng), genome.profile()
    assert all(valid(genome, allocation) for allocation in (a, b, genome.one_class()))
    if a is not None and b is not None:
        assert all(valid(genome, c) for c in genome.cross_allocations(a, b, rng))
        assert valid(genome, genome.mutate_allocation(a, probability, rng))


def test_schedule_crossover_is_figure_4_5() -> None:
    """Five independent ops, CR = 3: a child takes SCH_2[:3] = [1, 2, 3], then ops 0 and
    4 in SCH_1's order; the other SCH_1[:3], then the rest in SCH_2's order."""
    seed = next(s for s in range(100) if random.Random(s).randrange(1, 5) == 3)
    genome = Genome((4,), (), (), (), (), (), ((),) * 5, (0,) * 5, (1,), 4)
    first, second = (0, 1, 2, 3, 4), (1, 2, 3, 4, 0)
    assert genome.cross_schedules(first, second, random.Random(seed)) == (
        (1, 2, 3, 0, 4),
        (0, 1, 2, 3, 4),
    )


# ------------------------------------------------------------------ the search


def test_a_seed_gives_one_plan_whatever_the_workers() -> None:
    """Every random choice is the parent's and an evaluation is a pure function of its
    chromosome: one seed, one plan, in one process or two."""
    problem = rnn_problem()
    runs = [
        ga_search(problem, limits(24, seed=3), GASettings(population=8, workers=workers))
        for workers in (1, 2)
    ]
    assert runs[1].best == runs[0].best
    assert runs[1].details["workers"] == (2 if _can_fork() else 1)
    assert runs[0].stopped is StopReason.BUDGET and runs[0].details["evaluations"] == 24


def test_pool_plans_verify_with_memory_pool() -> None:
    """Without the last stage's byte plans, the GA's plan is a pool plan: the written
    module has `memory.pool`, and the replay holds it."""
    problem = rnn_problem()
    outcome = ga_search(
        problem, limits(40), GASettings(population=8, without_pool=False, workers=1)
    )
    assert outcome.best.pool is not None and outcome.details["pool"] == str(outcome.best.pool)
    module = verified(rnn_step(), problem.dag, outcome.best)
    assert pool_of(module) == outcome.best.pool
    assert problem.simulate(outcome.best).seconds == outcome.cost_after


@pytest.mark.parametrize("mode", ["joint", "schedule", "allocation", "random"])
def test_joint_frozen_and_random_searches_run_on_the_same_budget(mode: str) -> None:
    """The thesis' ablations: `schedule` keeps the profile allocation, `allocation` the
    step's schedule; random search evaluates as many chromosomes."""
    problem = rnn_problem()
    genome = Genome.of(problem)
    ga = GASettings(8, mode="joint" if mode == "random" else mode, without_pool=False, workers=1)
    outcome = (random_search if mode == "random" else ga_search)(problem, limits(24), ga)
    assert outcome.details["evaluations"] == 24
    assert outcome.cost_after <= outcome.cost_before
    verified(rnn_step(), problem.dag, outcome.best)
    if mode == "allocation":
        assert outcome.best.order == problem.dag.ops
    if mode == "schedule":
        assert outcome.best.pool == genome.profile().pool(genome.sizes)  # type: ignore[union-attr]


def test_schedule_only_freezes_a_random_allocation_when_no_seed_fits() -> None:
    """A transformer step's many sizes at 2x: no pool of a class per size fits (each
    class needs what its busiest op holds), nor one of the largest size; schedule-only
    search freezes a random allocation that does."""
    module = get_model("transformer").build(layers=1, hidden=32, seq=8, batch=2)
    AutodiffPass(loss="mse", optimizer="sgd", lr=0.01).apply(Context(), module)
    capacity = replay(entry_function(module)).peak_bytes // 2
    dag = dag_module.from_module(module, keep_order=True)
    problem = PlacementProblem.of(dag, training_signature(entry_function(module)), capacity, V100)
    genome = Genome.of(problem)
    assert genome.profile() is None and genome.one_class() is None
    ga = GASettings(8, mode="schedule", without_pool=False, workers=1)
    outcome = ga_search(problem, limits(24), ga)
    assert outcome.best.pool is not None
    verified(module, dag, outcome.best)


def test_a_search_out_of_time_finds_nothing_and_says_so() -> None:
    with pytest.raises(NoPlanFound, match="none of the 0"):
        ga_search(rnn_problem(), SearchLimits(100, Deadline.after(0), 0))


# ------------------------------------------------------------------ the pass


def test_ga_is_never_slower_than_belady_and_reports_its_search() -> None:
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    copy, section = placed(module, search="ga", capacity=capacity, budget=60, seed=1)
    fractions = section["fraction_of_ideal"]
    assert fractions["ga"] >= fractions["belady"] > fractions["lru"]
    assert section["stopped"] in {"budget", "converged"} and section["seed"] == 1
    assert len(section["best_seconds_per_generation"]) == section["generations"] + 1
    assert set(section["planner_seconds"]) == {"lru", "belady", "ga"}
    assert section["cost_before"] == section["simulated_seconds"]["belady_seconds"]
    verify_ir(copy)
    assert equivalent(module, unplaced(copy)).ok


def test_search_random_is_the_gas_baseline_as_a_planner() -> None:
    """`search=random` (issue 32): random variants of the GA's seeds at its budget,
    never slower than belady's plan, and what it plans computes the step."""
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    copy, section = placed(module, search="random", capacity=capacity, budget=40, seed=1)
    fractions = section["fraction_of_ideal"]
    assert fractions["random"] >= fractions["belady"]
    assert section["evaluations"] <= 40 and "generations" not in section
    verify_ir(copy)
    assert equivalent(module, unplaced(copy)).ok


def test_a_ga_out_of_time_keeps_beladys_plan() -> None:
    module = rnn_step()
    capacity = replay(entry_function(module)).peak_bytes // 2
    _, section = placed(module, search="ga", capacity=capacity, timeout=1e-9)
    assert "belady's plan is kept" in section["notes"][-1]
    assert section["fraction_of_ideal"]["ga"] == section["fraction_of_ideal"]["belady"]


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"budget": 0}, "budget must be at least 1"),
        ({"timeout": 0}, "timeout must be positive"),
        ({"seed": -1}, "seed must not be negative"),
        ({"population": 1}, "population must be at least 2"),
        ({"mutation": 1.5}, "mutation must be at most 1"),
    ],
)
def test_bad_ga_options_fail_when_the_pass_is_built(options: dict, message: str) -> None:
    from tasoc.passes.placement import PlacementPass

    with pytest.raises(ValueError, match=message):
        PlacementPass(search="ga", capacity="1MiB", **options)
