"""soap-shard's simulated searches (`search=mcmc`, `search=exhaustive`): determinism per
seed, never worse than the named strategies, MCMC reaching the exhaustive optimum,
the report, the one-line errors, and a chosen plan that runs as the reference does."""

from __future__ import annotations

import itertools
import math
import random
import threading
from pathlib import Path
from typing import Any, NoReturn

import pytest
from soap_helpers import assert_runs_as_the_reference, parse, shard, step
from soap_programs import CNN, MLP
from xdsl.dialects.builtin import ModuleOp

from tasoc.cost.machines import machine
from tasoc.driver.sources import build_zoo_model
from tasoc.ir import dag as dag_module
from tasoc.ir.dag import Node
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.models.alexnet import alexnet
from tasoc.passes.search import Deadline, StopReason
from tasoc.passes.soap import SoapShardFailed, SoapShardPass, auto, cost_searches, mcmc
from tasoc.passes.soap import plan as plan_module
from tasoc.passes.soap.cost_searches import FrontierError
from tasoc.passes.soap.meshes import parse_mesh
from tasoc.passes.soap.plan import Prescription, Problem, complete
from tasoc.passes.soap.problem import Best, Limits, SoapProblem, configurations
from tasoc.passes.soap.profile import ONE_DEVICE
from tasoc.passes.soap.searches import baseline_plans
from tasoc.passes.soap.simulated import SimulatedStrategy, copy_plan
from tasoc.passes.soap.strategies import STRATEGIES

WIDE = """
func.func @main(%x: tensor<2x512xf32>, %w1: tensor<512x1024xf32> {graph.param},
                %w2: tensor<1024x256xf32> {graph.param}) -> tensor<2x256xf32> {
  %h = graph.matmul %x, %w1 : tensor<2x1024xf32>
  %r = graph.relu %h : tensor<2x1024xf32>
  %y = graph.matmul %r, %w2 : tensor<2x256xf32>
  func.return %y : tensor<2x256xf32>
}
"""
"""A tiny MLP whose best strategy is neither named one: a batch of 2 and large weights."""


def mlp_step() -> ModuleOp:
    return step(parse(MLP), loss="mse", optimizer="sgd", lr=0.1)


def test_mcmc_is_deterministic_per_seed() -> None:
    module = mlp_step()
    runs = [shard(module, mesh=4, search="mcmc", budget=150, seed=seed)[1] for seed in (3, 3, 4)]
    first, again, other = runs
    assert first["op_configs"] == again["op_configs"]
    assert first["cost_after"] == again["cost_after"]
    assert first["proposals"] == again["proposals"] > 0
    assert first["chains"] == again["chains"]
    assert other["chains"] != first["chains"]  # another seed walks elsewhere


@pytest.mark.parametrize("mesh", [4, "2x2"])
def test_mcmc_is_never_worse_than_any_baseline(mesh: int | str) -> None:
    _, section = shard(mlp_step(), mesh=mesh, search="mcmc", budget=200, seed=0)
    predicted = section["predicted_seconds"]
    assert section["machine"] == "cpu-4"
    assert predicted["plan"] == section["cost_after"] > 0
    assert {"data-parallel", "expert"} <= set(section["baselines"])
    for name in section["baselines"]:
        assert predicted["plan"] <= predicted[name]
        assert section["speedup_over"][name] == pytest.approx(predicted[name] / predicted["plan"])
    assert section["cost_before"] == predicted["data-parallel"]
    assert 0 <= section["acceptance_rate"] <= 1
    assert section["simulations"] >= section["proposals"] - section["illegal_proposals"]
    assert section["stopped"] in {"budget", "converged"}
    assert len(section["memory_per_device"]) == 4
    assert section["peak_memory"]["plan"] > 0


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_mcmc_reaches_the_exhaustive_optimum_of_a_tiny_mlp_on_four_devices(seed: int) -> None:
    module = parse(WIDE)
    _, exact = shard(module, mesh=4, search="exhaustive")
    _, found = shard(module, mesh=4, search="mcmc", budget=400, seed=seed)
    # a batch of 2 does not split over 4: each matmul unsplit, n or k, relu unsplit or d1
    assert exact["stopped"] == "exhausted" and exact["strategies"] == 3 * 2 * 3
    assert exact["simulations"] + exact["pruned"] > 0
    best_named = min(exact["predicted_seconds"][name] for name in exact["baselines"])
    assert exact["cost_after"] < 0.9 * best_named  # the optimum is no named strategy
    assert found["cost_after"] == pytest.approx(exact["cost_after"], rel=1e-9)
    assert found["op_configs"] == exact["op_configs"]


def problem_of(module: ModuleOp, mesh: str) -> Problem:
    dag = dag_module.from_module(module)
    return Problem(dag, parse_mesh(mesh), training_signature(entry_function(module)), {})


def test_a_search_past_its_deadline_returns_the_best_candidate() -> None:
    """A deadline already passed stops every chain at once: the best initial
    candidate (no worse than data parallel and expert) comes back, with `timeout`."""
    problem = problem_of(mlp_step(), "4")
    baselines, _ = baseline_plans(problem)
    expired = Deadline.after(0.0)
    outcome = mcmc.search(SoapProblem(problem, machine("cpu-4")), baselines, Limits(100, expired))
    assert outcome.stopped == StopReason.TIMEOUT
    assert outcome.details["proposals"] == 0
    # no proposal, no simulation to measure: no simulation speeds reported
    for key in ("simulations_per_second", "delta_vs_full", "update_vs_simulate"):
        assert outcome.details[key] is None, key
    times = [chain["start"] for chain in outcome.details["chains"].values()]
    assert outcome.cost_after == min(times)


def test_the_default_search_starts_from_the_greedy_tiling_where_the_ilp_is_too_large(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(cost_searches, "ILP_MAX_VARIABLES", 1)
    _, section = shard(mlp_step(), mesh=4, budget=20, seed=0)
    exact = section["ilp"]
    assert exact["started_from"] and exact["solver"] is None
    assert "search=greedy's tiling instead" in exact["notes"][0]


def test_the_default_search_goes_on_without_the_ilp_when_it_has_no_plan(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An ILP with no answer (infeasible by its estimate, or out of time) leaves MCMC
    its other starts; the report says why."""

    def no_plan(*_: Any) -> NoReturn:
        raise FrontierError("no strategy's estimate fits memory-cap")

    monkeypatch.setattr(auto, "ilp_outcome", no_plan)
    _, section = shard(mlp_step(), mesh=4, budget=20, seed=0)
    assert section["ilp"] == {
        "started_from": False,
        "why_not": "no strategy's estimate fits memory-cap",
    }
    assert "ilp" not in section["chains"] and section["proposals"] == 20


def test_a_memory_cap_no_strategy_meets_names_the_smallest_memory() -> None:
    with pytest.raises(
        SoapShardFailed, match=r"memory-cap=.*smallest per-device memory .* \d+ bytes"
    ):
        shard(mlp_step(), mesh=4, search="mcmc", budget=50, memory_cap=1)


def test_a_memory_cap_excludes_strategies_above_it() -> None:
    """Uncapped, the MLP step is fastest replicated (no collective's latency), which
    holds more per device than data parallel; capped at data parallel's peak memory,
    the plan fits under it."""
    _, free = shard(mlp_step(), mesh=4, search="mcmc", budget=100, seed=0)
    cap = free["peak_memory"]["data-parallel"]
    assert free["peak_memory"]["plan"] > cap
    _, capped = shard(mlp_step(), mesh=4, search="mcmc", budget=100, seed=0, memory_cap=cap)
    assert capped["peak_memory"]["plan"] <= cap
    assert free["cost_after"] < capped["cost_after"] <= capped["predicted_seconds"]["data-parallel"]


def test_exhaustive_refuses_a_program_too_large() -> None:
    module = step(parse(CNN), loss="softmax-cross-entropy", optimizer="sgd", lr=0.1)
    with pytest.raises(
        SoapShardFailed, match=r"search=exhaustive searches at most .* use search=mcmc"
    ):
        SoapShardPass(mesh="2x2x2", search="exhaustive").apply(None, module)  # type: ignore[arg-type]


def test_a_cpu8_plan_runs_as_the_reference(tmp_path: Path) -> None:
    """The plan chosen for cpu-8 under data parallel's memory (so it is sharded, with
    collectives) runs on 8 devices as the numpy reference does."""
    module = step(parse(CNN), loss="softmax-cross-entropy", optimizer="momentum", lr=0.1)
    _, named = shard(module, mesh=8, search="data-parallel")
    cap = named["peak_memory"]["plan"]
    after, section = shard(
        module, mesh=8, machine="cpu-8", search="mcmc", budget=150, seed=1, memory_cap=cap
    )
    assert section["machine"] == "cpu-8"
    assert section["predicted_seconds"]["plan"] <= section["predicted_seconds"]["data-parallel"]
    assert section["peak_memory"]["plan"] <= cap
    assert section["collectives"]
    assert_runs_as_the_reference(after, tmp_path, devices=8)


def test_named_strategies_report_their_simulated_time() -> None:
    _, section = shard(mlp_step(), mesh=4, search="expert")
    predicted: dict[str, Any] = section["predicted_seconds"]
    assert predicted["plan"] == predicted["expert"] > 0
    assert section["speedup_over"]["expert"] == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("mesh", "links"),
    [(4, {"intra-node nvlink"}), (16, {"intra-node nvlink", "inter-node infiniband"})],
)
def test_bytes_per_link_follow_the_machines_topology(mesh: int, links: set[str]) -> None:
    """Data parallel's gradient all-reduces over 4 P100s stay on one node's NVLink;
    over 16 (4 nodes) each also crosses InfiniBand."""
    _, section = shard(mlp_step(), mesh=mesh, machine="p100-cluster", search="data-parallel")
    reduced = section["collectives"]["all_reduce"]["bytes"]
    assert section["bytes_per_link"] == dict.fromkeys(sorted(links), reduced)


def test_exhaustive_pruning_keeps_the_optimum_of_every_strategy() -> None:
    """The lower bound prunes (some strategies are never simulated) yet the optimum is
    that of simulating every strategy one by one."""
    module = parse(WIDE)
    _, exact = shard(module, mesh=4, search="exhaustive")
    problem = problem_of(module, "4")
    start = complete(problem, STRATEGIES["data-parallel"](problem))
    state = SimulatedStrategy.of(problem, start, machine("cpu-4"), None)
    state.normalize()
    ops = list(problem.rules)
    options = [configurations(problem.rules[node], problem.mesh) for node in ops]
    every = [
        state.move_to(dict(zip(ops, configs, strict=True)))
        for configs in itertools.product(*options)
    ]
    assert exact["pruned"] > 0 and exact["simulations"] < len(every) == exact["strategies"]
    assert exact["cost_after"] == pytest.approx(min(every), rel=1e-9)


def test_beta_is_the_inverse_temperature() -> None:
    """A colder chain (larger beta) accepts fewer proposals that make the step slower."""
    rates = [
        shard(mlp_step(), mesh=4, search="mcmc", budget=200, seed=0, beta=beta)[1][
            "acceptance_rate"
        ]
        for beta in (0.5, 20, 1000)
    ]
    assert rates[0] > rates[1] > rates[2]


def alexnet_chain(propagating: float, grouping: float = 0.0) -> mcmc.Chain:
    """A chain from data parallel over a small AlexNet's training step on 8 K80s."""
    module = step(
        alexnet(batch=32, image=64, classes=10, width=0.5),
        loss="softmax-cross-entropy",
        optimizer="sgd",
        lr=0.01,
    )
    problem = problem_of(module, "8")
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    state = SimulatedStrategy.of(problem, plan, machine("k80-cluster"), None)
    choices = {
        node: options
        for node, rule in problem.rules.items()
        if len(options := configurations(rule, problem.mesh)) > 1
    }
    return mcmc.Chain(state, choices, random.Random(0), 20.0, propagating, grouping, guided=0.0)


def test_a_propagating_proposal_moves_the_readers_and_reverts_exactly() -> None:
    """A dense layer split by its output features: its readers (the activation, the
    next layer, the backward ops reading its result) re-choose as completion would,
    and setting them back in reverse restores the simulated step exactly."""
    chain = alexnet_chain(1.0)
    state = chain.state
    before = state.simulator.timeline
    dense = next(node for node in chain.choices if node.op == "matmul")
    plan = copy_plan(state.plan)
    edits = state.edit(dense, *state.choose(dense, [{"n": ("d",)}]))
    followed = chain._propagate([dense])
    assert followed and all(state.configs[edit.node] != edit.config for edit in followed)
    uses = state.step.dag.consumers()
    assert any(use.node is followed[0].node for v in dense.results for use in uses[v])
    moved = state.update()
    state.restore(edits + followed)
    assert state.update() == before.makespan != moved
    assert state.plan == plan
    # rebuilt communication has new task ids; every time is as it was
    assert sorted(state.simulator.timeline.end.values()) == sorted(before.end.values())


def test_propagating_proposals_find_what_one_op_proposals_miss() -> None:
    """From data parallel, the same budget and seed: chains whose proposals also move
    the changed op's readers end faster than FlexFlow's one-op proposals alone."""
    results = []
    for propagating in (0.0, 0.5):
        chain = alexnet_chain(propagating)
        chain.run(150, Deadline.after(60))
        results.append(chain.best_cost)
        assert (chain.propagated > 0) == (propagating > 0)
    alone, propagated = results
    assert propagated < 0.95 * alone


def rnn_chain(grouping: float, guided: float = 0.0, beta: float = 20.0) -> mcmc.Chain:
    """A chain from data parallel over a one-layer LSTM's step (4 steps unrolled) on 8
    K80s, whose weights' gradients are each 4 alike matmuls summed."""
    module = build_zoo_model("rnn?layers=1&hidden=512&seq=4&batch=32&train=sgd&lr=0.01")
    problem = problem_of(module, "8")
    plan = complete(problem, STRATEGIES["data-parallel"](problem))
    posed = SoapProblem(problem, machine("k80-cluster"))
    state = posed.simulate(plan)
    return mcmc.Chain(
        state, posed.space(plan), random.Random(0), beta, grouping=grouping, guided=guided
    )


def rebuilt_time(state: SimulatedStrategy) -> float:
    """`state`'s plan simulated from a step built afresh."""
    return SimulatedStrategy.of(state.problem, copy_plan(state.plan), state.step.machine, None).time


def test_a_chain_prices_partial_sums_and_undoes_exactly() -> None:
    """Data parallel on an LSTM step sums each weight's gradient over the steps as
    partial sums and all-reduces it once. A chain starts from that plan's time (not
    from a form reading every operand complete, which all-reduces at every step), a
    rejected proposal leaves the plan and its simulated time exactly as they were,
    and the edited step simulates as the same plan built afresh does."""
    chain = rnn_chain(0.25, guided=0.5)
    state = chain.state
    start = copy_plan(state.plan)
    assert any(need.unreduced for needs in start.operands.values() for need in needs)
    assert (
        chain.current == SimulatedStrategy.of(state.problem, start, state.step.machine, None).time
    )
    for _ in range(30):
        plan, time, accepted = copy_plan(state.plan), state.time, chain.accepted
        chain._propose()
        if chain.accepted == accepted:
            assert state.plan == plan and state.time == time
        assert rebuilt_time(state) == pytest.approx(state.time, rel=1e-9)
    assert chain.accepted and chain.proposals - chain.accepted - chain.illegal
    assert chain.grouped and chain.guided_proposals


def weight_gradients(chain: mcmc.Chain) -> tuple[Node, ...]:
    """The alike matmuls of a weight's gradient at every step: data parallel leaves
    their results as partial sums (split by the batch, a summed dimension)."""
    values = chain.state.plan.values
    return next(
        chain.alike[node]
        for node in chain.choices
        if node.op == "matmul" and values[node.results[0]].unreduced
    )


def test_a_cold_heat_bath_moves_a_group_to_its_fastest_configuration_exactly() -> None:
    """A group's heat-bath move prices every configuration of its rule (readers
    following): a cold chain takes the fastest, leaves no configuration it tried
    behind, and the step simulates as the same plan built afresh."""
    chain = rnn_chain(0.0, beta=1e9)
    state, group = chain.state, weight_gradients(chain)
    start = state.time
    chain._heat_bath(group)
    assert state.time <= start and chain.current == state.time
    assert rebuilt_time(state) == pytest.approx(state.time, rel=1e-9)
    plan = copy_plan(state.plan)
    for config in chain.choices[group[0]]:
        edits = chain._group_move(group, config)
        if edits is not None:
            assert state.update() >= chain.current
            state.restore(edits)
    assert state.update() == chain.current and state.plan == plan


def test_guided_proposals_charge_partial_sums_to_the_ops_that_make_them() -> None:
    """Data parallel's LSTM step accumulates each weight's gradient as partial sums and
    all-reduces it once: the critical path's ops are charged to the ops that split a
    summed dimension (the batch-split gradient matmuls), never to a linear op reading
    partial sums, and draw every op a guided proposal moves."""
    chain = rnn_chain(0.0, guided=1.0)
    plan = chain.state.plan
    picked = chain._pick()
    nodes, weights = chain._critical  # type: ignore[misc]
    assert picked in nodes and sum(weights) > 0
    assert not any(need.unreduced for node in nodes for need in plan.operands[node])
    makers = [n for n in nodes if any(plan.values[v].unreduced for v in n.results)]
    assert set(makers) & set(weight_gradients(chain))
    assert sum(weights) <= chain.state.time * (1 + 1e-9)


def test_a_chain_goes_back_to_its_best_exactly() -> None:
    """A hot chain accepts proposals worse than its best; going back undoes every one
    accepted since, last first: the best plan and its time, exactly."""
    chain = rnn_chain(0.25, guided=0.5, beta=1e-6)
    while not chain._journal and chain.proposals < 40:
        chain.run(chain.proposals + 1, Deadline.after(300))
    assert chain._journal and chain.current > chain.best_cost
    chain._restart()
    assert chain.current == chain.best_cost and not chain._journal
    assert chain.state.plan == chain.best and chain.state.time == chain.best_cost
    assert rebuilt_time(chain.state) == pytest.approx(chain.best_cost, rel=1e-9)


def test_alike_ops_share_a_rule_and_gather_an_unrolled_layers_steps() -> None:
    chain = rnn_chain(0.25)
    rules = chain.state.problem.rules
    for node, group in chain.alike.items():
        assert node in group and all(rules[member] == rules[node] for member in group)
        assert all(chain.alike[member] is group for member in group)
    matmuls = [node for node in chain.choices if node.op == "matmul"]
    assert max(len(chain.alike[node]) for node in matmuls) >= 4  # one per step


def test_guided_group_moves_reach_what_uniform_proposals_miss() -> None:
    """The same seed from data parallel: chains moving one op (and its readers) at a
    time never leave the start in 150 proposals (3.43 ms): each single change costs a
    resharding against its alike neighbours; moving a uniformly drawn op's alike ops
    with it, a quarter of the time, has not left it after 60 either (1.96 ms after
    150, beta 20, when written). Drawing half the ops from the critical path, each
    with its alike ops, ends at 1.53 ms after 60."""
    best = {}
    for grouping, guided, proposals in ((0.0, 0.0, 150), (0.25, 0.0, 60), (0.25, 0.5, 60)):
        chain = rnn_chain(grouping, guided)
        chain.run(proposals, Deadline.after(300))
        best[grouping, guided] = chain.best_cost
        assert (chain.grouped > 0) == (grouping > 0 or guided > 0)
        assert (chain.guided_proposals > 0) == (guided > 0)
    assert best[0.25, 0.5] < 0.5 * min(best[0.0, 0.0], best[0.25, 0.0])


def test_the_search_halves_its_chains_and_polishes_their_bests() -> None:
    """Successive halving: after the first round only the better half of the chains
    runs on, so the chains' proposals differ, and their sum is the budget; the plan
    written is at most every start's (completed) time."""
    module = build_zoo_model("rnn?layers=1&hidden=512&seq=4&batch=32&train=sgd&lr=0.01")
    problem = problem_of(module, "8")
    baselines, _ = baseline_plans(problem)
    posed = SoapProblem(problem, machine("k80-cluster"))
    outcome = mcmc.search(posed, baselines, Limits(120, Deadline.after(300)))
    chains = outcome.details["chains"]
    proposals = sorted(chain["proposals"] for chain in chains.values())
    assert proposals[0] < proposals[-1]
    assert sum(proposals) == outcome.details["proposals"] <= 120
    assert outcome.cost_after <= min(chain["start"] for chain in chains.values())


def test_starts_priced_by_time_leave_the_search_as_pricing_every_one() -> None:
    """`mcmc._offered` finds the costs (memory checks) of the starts in order of time
    while one could be the best or run a chain: under every cap between the starts'
    peaks, the best (cost, plan, origin) and the chains run are those of pricing
    every start, the costs it finds are theirs, and every start it leaves out costs
    over `POLISHED` times the best (some are left out: the test can fail)."""
    problem = problem_of(mlp_step(), "4")
    rng = random.Random(0)
    starts, _ = baseline_plans(problem)
    for index in range(3):
        plan = mcmc.uniform_plan(problem, lambda rule, mesh: rng.choice(configurations(rule, mesh)))
        if plan is not None:
            starts[f"random-{index}"] = plan
    starts["replicated"] = mcmc.uniform_plan(problem, lambda rule, mesh: {})  # type: ignore[assignment]
    free = SoapProblem(problem, machine("cpu-4"))
    peaks = sorted({free.state_of(plan).memory for plan in starts.values()})
    left_out = 0
    for cap in (*peaks, peaks[0] - 1):  # the least fitting, each next, then none
        posed = SoapProblem(problem, machine("cpu-4"), cap)
        every = {origin: posed.simulate(plan) for origin, plan in starts.items()}
        costs = {origin: state.cost for origin, state in every.items()}
        naive = Best(posed)
        for origin, state in every.items():
            naive.offer(state, origin)
        best = Best(posed)
        found = mcmc._offered(best, {o: posed.simulate(plan) for o, plan in starts.items()})
        assert (best.cost, best.origin, best.plan) == (naive.cost, naive.origin, naive.plan)
        if naive.plan is None:  # the error's figure, read only then
            assert best.smallest_memory == naive.smallest_memory < math.inf
        assert found == {origin: costs[origin] for origin in found}
        assert list(found) == [origin for origin in starts if origin in found]
        for origin in set(starts) - set(found):
            assert costs[origin] > mcmc.POLISHED * naive.cost and origin != "data-parallel"
        left_out += len(starts) - len(found)
    assert left_out > 0


def test_completion_keeps_its_choices_by_all_they_depend_on(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`plan._cheapest` keeps each op's choice by its key (`_cheapest_key`): completing
    the baselines and random plans of an unrolled LSTM step (alike steps, partial sums,
    a mesh of two axes) with the kept answers gives the plans completing each op afresh
    gives, and the kept answers are reused (the key is not the op itself)."""
    module = build_zoo_model("rnn?layers=1&hidden=64&seq=4&batch=16&train=sgd&lr=0.01")
    problem = problem_of(module, "2x4")
    rng = random.Random(0)
    prescriptions = [STRATEGIES[name](problem) for name in ("data-parallel", "megatron", "zero")]
    prescriptions += [
        Prescription(
            configs={
                node: rng.choice(configurations(rule, problem.mesh))
                for node, rule in problem.rules.items()
                if rng.random() < 0.3
            }
        )
        for _ in range(3)
    ]
    plan_module._kept_cheapest.clear()
    kept = [complete(problem, prescription) for prescription in prescriptions]
    assert len(plan_module._kept_cheapest) < sum(len(p.configs) for p in kept) / 2
    monkeypatch.setattr(plan_module, "_cheapest", plan_module._cheapest_of)
    assert [complete(problem, prescription) for prescription in prescriptions] == kept


def test_a_prepared_state_is_handed_out_once_and_never_shared() -> None:
    """`SoapProblem.prepare` makes the state the next `simulate` of that plan object
    hands out (`search=auto` prices its starts while HiGHS solves), taking the state
    `state_of` made of an equal plan where no one has it (the ILP's plan, simulated
    for its outcome); a second equal plan, or a second `simulate`, gets a state of its
    own, since a chain edits the state it is given."""
    problem = problem_of(mlp_step(), "4")
    posed = SoapProblem(problem, machine("cpu-4"), 1 << 40)
    plan = baseline_plans(problem)[0]["data-parallel"]
    read = posed.state_of(plan)
    posed.prepare(plan)
    given = posed.simulate(plan)
    assert given is read
    assert posed.simulate(plan) is not given
    twin = copy_plan(plan)
    posed.prepare(twin)
    assert posed.simulate(twin) not in (given, read)


@pytest.mark.parametrize("search", ["auto", "mcmc", "exhaustive", "ft", "greedy", "ilp"])
def test_a_mesh_of_one_device_is_a_trivial_plan_with_a_note(search: str) -> None:
    """One device: an axis of size 1 splits nothing, so every search's space is the one
    strategy (no proposal, no division by zero in the statistics), the plan has no
    collective, no batch is said to be left unsplit, and a note says why."""
    _, section = shard(mlp_step(), mesh=1, search=search)
    assert section["collectives"] == {} and section["replicated_batch"] == {}
    assert section["notes"] == [ONE_DEVICE]
    assert section.get("proposals", 0) == 0
    for key in ("simulations_per_second", "delta_vs_full", "update_vs_simulate"):
        assert section.get(key) is None
    assert section["predicted_seconds"]["plan"] == section["predicted_seconds"]["data-parallel"]


def test_an_interrupt_while_the_starts_are_priced_does_not_wait_for_the_ilp(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """HiGHS cannot be cut short from Python: `search=auto` solves in a daemon thread,
    so a Ctrl-C taken while the starts are priced leaves the solve running and reaches
    the driver at once (a thread pool joined it first)."""
    release, started = threading.Event(), threading.Event()
    solving: list[threading.Thread] = []

    def solve(*_: object) -> NoReturn:
        solving.append(threading.current_thread())
        started.set()
        release.wait(60)
        raise FrontierError("released")

    class Interrupted:
        place = None

        def prepare(self, _: object) -> NoReturn:
            started.wait(60)  # the solve is under way, as on a real step
            raise KeyboardInterrupt

    monkeypatch.setattr(auto, "timed_model", lambda _: None)
    monkeypatch.setattr(auto, "solve_ilp", solve)
    try:
        with pytest.raises(KeyboardInterrupt):
            limits = Limits(10, Deadline.after(60), 0)
            auto.search_auto(Interrupted(), {"start": None}, limits)  # type: ignore[arg-type]
        assert solving and solving[0].daemon and solving[0].is_alive()
    finally:
        release.set()
