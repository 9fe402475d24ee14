"""`search=mcmc`: FlexFlow's Metropolis-Hastings search over the SOAP space (Jia
thesis §3.5), priced by the execution simulator (`tasoc.sim`).

A strategy is every op's configuration. The search starts from the plans it is given
(the practitioners' baselines that apply, each plan once, and, from the pass,
Spartan's greedy tiling), every op
replicated (one device's program on each: no communication at all, which wins on
small steps where collectives' latency outweighs the compute they save) and a random
strategy, one chain each, and proposes one change at a time: a random
op takes a random other legal configuration of its rule on its mesh. The proposal is
priced by editing the step's task graph (`ShardedStep.set_config`) and re-simulating
only what the edit touches (`DeltaSimulator.update`), never by rebuilding IR. It is
accepted with eq. 3.1's probability min(1, exp(beta (cost_old - cost_new))), costs in
units of the chain's starting time, so `beta` means the same on every model and
machine: at beta=20 a proposal 5 % slower than the start is accepted with
probability 1/e. A strategy whose per-device peak memory exceeds `memory-cap` costs
infinitely much (infeasible): the chain never moves from a feasible strategy to one.

A chain stops when its share of the `budget` (proposals) is spent, at the deadline,
or when its best has not improved for the second half of its proposals (§3.5.2:
"cannot further improve the best discovered strategy for half of the search time",
counted in proposals so that a seed gives one result whatever the machine's speed;
only the timeout depends on the clock), and for at least `PATIENCE` proposals per
alternative configuration. The search returns the best strategy any chain found:
never worse than any baseline it was given, which are candidates.

What every soap search shares (the problem, the limits, `Best`) is `problem.py`'s;
the strategy being edited op by op is `simulated.py`'s `SimulatedStrategy`.
"""

from __future__ import annotations

import heapq
import math
import random
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasoc.ir.dag import Node
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Mesh, OpRule
from tasoc.passes.search import Deadline, Progress, SearchOutcome, StopReason
from tasoc.passes.soap.plan import PlanError, Prescription, Problem, cheapest_config, complete
from tasoc.passes.soap.problem import Best, Limits, SoapProblem, configurations
from tasoc.passes.soap.simulated import SimulatedStrategy, simulation_statistics
from tasoc.sim.core import paused_gc

PROPAGATING = 0.5
"""The share of proposals that propagate to the changed op's readers (`Chain._propagate`);
the others are FlexFlow's, one op alone."""

PROPAGATION_LIMIT = 256
"""The most readers one propagating proposal re-chooses: a bound on its price (each
costs a few resharding estimates and an edit of the step), not on how far it reaches
in a small step."""

PATIENCE = 4
"""A chain runs at least this many proposals per alternative configuration (of all
ops together) without improving before it stops (a chain stopped by the half-time
rule after a handful of proposals would not have seen most single changes)."""


def uniform_plan(problem: Problem, choose: Callable[[OpRule, Mesh], Config]) -> Plan | None:
    """Every op in the configuration `choose` gives it (a random one, the unsplit one),
    completed; None when completion finds an op its operands cannot reach so."""
    configs = {node: choose(rule, problem.mesh) for node, rule in problem.rules.items()}
    try:
        return complete(problem, Prescription(configs=configs))
    except PlanError:
        return None


@dataclass
class Chain:
    """One Metropolis-Hastings chain from one (normalized) initial strategy."""

    state: SimulatedStrategy
    choices: Mapping[Node, Sequence[Config]]
    """The ops proposals change (those with two configurations or more) and theirs."""
    rng: random.Random
    beta: float
    propagating: float = PROPAGATING
    """The share of proposals that propagate (`_propagate`)."""
    proposals: int = 0
    accepted: int = 0
    illegal: int = 0
    propagated: int = 0
    """Proposals that propagated, and so changed more than their op."""

    def __post_init__(self) -> None:
        step = self.state.step
        self._consumers = step.dag.consumers()
        self._position = {node: i for i, node in enumerate(step.order)}

    def run(
        self, budget: int, deadline: Deadline, progress: Progress | None = None
    ) -> tuple[dict[Node, Config], float, StopReason]:
        """The best configurations this chain found and their cost, and why it stopped;
        `progress` hears of its proposals and best cost after each proposal."""
        ops = list(self.choices)
        patience = PATIENCE * sum(len(options) - 1 for options in self.choices.values())
        scale = self.state.time or 1.0
        current = self.state.cost
        best, best_cost, since_best = dict(self.state.configs), current, 0
        while True:
            if self.proposals >= budget:
                return best, best_cost, StopReason.BUDGET
            if deadline.expired():
                return best, best_cost, StopReason.TIMEOUT
            if not ops or since_best > max(patience, self.proposals // 2):
                return best, best_cost, StopReason.CONVERGED
            if progress is not None:
                progress(self.proposals, best_cost)
            self.proposals += 1
            since_best += 1
            node = self.rng.choice(ops)
            old = self.state.configs[node]
            others = [config for config in self.choices[node] if config != old]
            propagate = self.rng.random() < self.propagating
            try:
                self.state.set(node, self.rng.choice(others))
            except ValueError:  # a layout a reader cannot reach: the step is unchanged
                self.illegal += 1
                continue
            undo = [(node, old), *(self._propagate(node) if propagate else ())]
            self.propagated += len(undo) > 1
            cost = self.state.update()
            if self._accept(current, cost, scale):
                self.accepted += 1
                current = cost
                if cost < best_cost:
                    best, best_cost, since_best = dict(self.state.configs), cost, 0
            else:
                for changed, config in reversed(undo):
                    self.state.set(changed, config)
                current = self.state.update()

    def _propagate(self, node: Node) -> list[tuple[Node, Config]]:
        """After `node` changed: its readers, and theirs in turn (in program order, up
        to `PROPAGATION_LIMIT` of them), re-choose the configuration completion would
        give them now (`cheapest_config`); the readers changed, with their old
        configurations.

        One op's change alone is mostly a change *against* its neighbours, costing
        the communication between them: a dense layer split by features while the
        rest stays data parallel gathers its result back, and its backward ops, which
        read that split, still compute as before. FlexFlow gives an op's forward and
        backward one configuration (its tasks are the op's, both passes); a tasoc
        training step has them as separate ops, which only move together when the
        change propagates."""
        step, problem = self.state.step, self.state.problem
        queue = [
            (self._position[use.node], use.node)
            for v in node.results
            for use in self._consumers.get(v, ())
        ]
        heapq.heapify(queue)
        seen: set[Node] = {node}
        changed: list[tuple[Node, Config]] = []
        while queue and len(changed) < PROPAGATION_LIMIT:
            _, reader = heapq.heappop(queue)
            if reader in seen or reader not in self.choices:
                continue
            seen.add(reader)
            old = self.state.configs[reader]
            try:
                chosen = cheapest_config(
                    problem, step.plan, reader, step.mesh_of(reader), self.choices[reader]
                )
                if chosen == old:
                    continue
                self.state.set(reader, chosen)
            except ValueError:  # no reachable configuration, or a reader cannot follow
                continue
            changed.append((reader, old))
            for value in reader.results:
                for use in self._consumers.get(value, ()):
                    heapq.heappush(queue, (self._position[use.node], use.node))
        return changed

    def _accept(self, current: float, proposed: float, scale: float) -> bool:
        """Eq. 3.1: always when not worse, else with probability exp(beta (old - new))."""
        if proposed <= current:
            return True
        if proposed == math.inf:
            return False
        return self.rng.random() < math.exp(self.beta * (current - proposed) / scale)


def _chain_progress(progress: Progress | None, done: int, best: float) -> Progress | None:
    """A chain's progress as the search's: the proposals of the chains before it
    (`done`) added, and the best cost of any chain so far (`best`)."""
    if progress is None:
        return None
    return lambda proposals, cost: progress(done + proposals, min(best, cost))


@paused_gc()  # steps of 10^5 tasks built and edited: `paused_gc` says why
def search(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits) -> SearchOutcome[Plan]:
    """The best strategy chains from `starts` (data parallel and the other baselines),
    every op replicated and a random strategy find (see the module docstring)."""
    program = problem.program
    rng = random.Random(limits.seed)
    made = {
        "replicated": uniform_plan(program, lambda rule, mesh: {}),
        "random": uniform_plan(program, lambda rule, mesh: rng.choice(configurations(rule, mesh))),
    }
    starts = {**starts, **{name: plan for name, plan in made.items() if plan is not None}}
    best = Best(problem)
    chains: dict[str, dict[str, Any]] = {}
    stops: list[StopReason] = []
    totals = {"proposals": 0, "accepted": 0, "illegal": 0, "propagated": 0}
    states: list[SimulatedStrategy] = []
    for index, (origin, plan) in enumerate(starts.items()):
        left = len(starts) - index
        state = problem.simulate(plan)
        start_cost = state.cost
        best.offer(state, origin)
        deadline = limits.deadline.share(1 / left)
        if not deadline.expired():
            state.normalize()
        chain = Chain(state, problem.space(plan), rng, problem.tuning.beta)
        progress = _chain_progress(limits.progress, totals["proposals"], best.cost)
        configs, cost, stopped = chain.run(
            (limits.budget - totals["proposals"]) // left, deadline, progress
        )
        if cost < best.cost:
            state.move_to(configs)
            best.offer(state, origin)
        stops.append(stopped)
        chains[origin] = {
            "start": start_cost,
            "best": min(cost, start_cost),
            "proposals": chain.proposals,
            "stopped": str(stopped),
        }
        for key in totals:
            totals[key] += getattr(chain, key)
        states.append(state)
    statistics = simulation_statistics(states, totals["proposals"])
    best.polish()
    cost, plan = best.result()
    details = {
        "proposals": totals["proposals"],
        "accepted": totals["accepted"],
        "acceptance_rate": round(totals["accepted"] / max(totals["proposals"], 1), 4),
        "illegal_proposals": totals["illegal"],
        "propagated_proposals": totals["propagated"],
        "simulations": sum(state.updates for state in states),
        **statistics,
        "found_by": best.origin,
        "chains": chains,
    }
    stopped = next(
        (reason for reason in (StopReason.TIMEOUT, StopReason.BUDGET) if reason in stops),
        StopReason.CONVERGED,
    )
    return SearchOutcome(
        best=plan,
        cost_before=chains["data-parallel"]["start"],
        cost_after=cost,
        seconds=limits.deadline.elapsed(),
        stopped=stopped,
        details=details,
    )
