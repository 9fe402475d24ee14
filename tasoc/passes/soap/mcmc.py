"""`search=mcmc`: FlexFlow's Metropolis-Hastings search over the SOAP space (Jia
thesis §3.5), priced by the execution simulator (`tasoc.sim`).

A strategy is every op's configuration. The search starts from the plans it is given
(the practitioners' baselines that apply, each plan once, and, from the pass,
Spartan's greedy tiling), every op
replicated (one device's program on each: no communication at all, which wins on
small steps where collectives' latency outweighs the compute they save) and a random
strategy (these two only where the plans given leave time to simulate them: a
3,000-op step at 64 devices may spend its whole timeout on the others), one chain
each, and proposes one change at a time: a random
op takes a random other legal configuration of its rule on its mesh (FlexFlow's
proposal), or an op drawn from the simulated critical path moves with every op alike
to it, drawn over their configurations by their times (`Chain._pick`,
`Chain._heat_bath`). Every op moved reads its operands as completion would (partial
sums where its producers leave them and it is linear in them: a chain prices the
plans it would write, not a normalized form of them). The proposal is priced by
editing the step's task graph
(`SimulatedStrategy.edit`, `ShardedStep.set_config`) and re-simulating only what the
edit touches (`DeltaSimulator.update`), never by rebuilding IR. It is
accepted with eq. 3.1's probability min(1, exp(beta (cost_old - cost_new))), costs in
units of the chain's starting time, so `beta` means the same on every model and
machine: at beta=100 (the default) a proposal 1 % slower than the start is accepted
with probability 1/e. A strategy whose per-device peak memory exceeds `memory-cap` costs
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

from tasoc.ir.dag import Node
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Mesh, OpRule
from tasoc.passes.search import Deadline, Progress, SearchOutcome, StopReason
from tasoc.passes.soap.plan import PlanError, Prescription, Problem, complete
from tasoc.passes.soap.problem import Best, Limits, SoapProblem, configurations
from tasoc.passes.soap.simulated import (
    Edit,
    SimulatedStrategy,
    copy_plan,
    simulation_statistics,
)
from tasoc.sim.core import critical_path, paused_gc

PROPAGATING = 0.5
"""The share of proposals that propagate to the changed op's readers (`Chain._propagate`);
the others are FlexFlow's, one op alone."""

PROPAGATION_LIMIT = 256
"""The most readers one propagating proposal re-chooses: a bound on its price (each
costs a few resharding estimates and an edit of the step), not on how far it reaches
in a small step."""

GROUPING = 0.25
"""The share of the uniformly drawn proposals that move every op alike to the chosen
one together (`Chain.alike`), their readers following, drawn over the group's
configurations by their times (`Chain._heat_bath`; every guided proposal does); the
others move the chosen op alone (and, when they propagate, its readers) to a random
other configuration."""

GUIDED = 0.75
"""The share of proposals whose op is drawn from the simulated critical path, each op
weighted by the time its tasks (its compute and its results' communication) take on
it (`Chain._pick`), and moved with its alike ops; the others draw it uniformly, as
FlexFlow does. Only what the critical path waits on can shorten the step, and a
chain on a 3,000-op step makes tens of proposals, not thousands: under the pass's
defaults on a loaded 2-core machine the whole search on rnnlm made 5-16 over its
chains, and at 0.5 two seeds of three missed the move that takes it to the ILP's
plan, at 0.75 none of three (docs/benchmarks.md, issue 31 round 6)."""

POLISHED = 2.0
"""A start more than this factor slower than the best start runs no chain (it is a
candidate as it is; data parallel's always runs), and a chain's best is completed
again (`Best.polish`) when it is within this factor of the best chain's: a chain
keeps the partial sums its ops may read, but completion may find more (a reader
whose producer changed later in the chain), so the chains are compared as the
plans completion writes from their configurations too."""

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


def alike_ops(
    choices: Mapping[Node, Sequence[Config]], state: SimulatedStrategy
) -> dict[Node, tuple[Node, ...]]:
    """Each op with its alike ops: those of the same SOAP rule (op, shapes and factors)
    on the same mesh, so of the same legal configurations.

    A training step repeats its layers' ops: an RNN unrolled 40 steps computes each
    weight's gradient as 40 alike matmuls summed by 39 alike adds, a ResNet's blocks
    repeat alike convolutions. A better plan moves them together (the ILP's plan of
    rnnlm on 16 GPUs splits all 160 weight-gradient matmuls by the weight's features
    instead of the batch), which one op's change at a time cannot reach: each single
    step costs a resharding against its neighbours, and the chain rejects it."""
    rules = state.problem.rules
    groups: dict[tuple[object, str], list[Node]] = {}
    for node in choices:
        groups.setdefault((rules[node], state.step.mesh_of(node).name), []).append(node)
    alike = {}
    for group in map(tuple, groups.values()):
        alike.update(dict.fromkeys(group, group))
    return alike


@dataclass
class Chain:
    """One Metropolis-Hastings chain from one initial strategy (a completed plan)."""

    state: SimulatedStrategy
    choices: Mapping[Node, Sequence[Config]]
    """The ops proposals change (those with two configurations or more) and theirs."""
    rng: random.Random
    beta: float
    propagating: float = PROPAGATING
    """The share of proposals that propagate (`_propagate`)."""
    grouping: float = GROUPING
    """The share of proposals that move an op's alike ops with it (`alike`)."""
    guided: float = GUIDED
    """The share of proposals whose op the critical path draws (`_pick`)."""
    restart: int | None = None
    """Go back to the best (`_restart`) after this many proposals without improving on
    it; None: never. Off by default: on AlexNet's step (8 K80s, 150 proposals) going
    back every 8 or 32 proposals lost the 5 % that wandering found
    (`test_propagating_proposals_find_what_one_op_proposals_miss`), and on rnnlm's a
    chain at beta 100 does not drift from its best in the tens of proposals it makes."""
    proposals: int = 0
    accepted: int = 0
    illegal: int = 0
    propagated: int = 0
    """Proposals that propagated, and so changed more than their op."""
    grouped: int = 0
    """Proposals that moved a group of alike ops."""
    guided_proposals: int = 0
    """Proposals whose op the critical path drew."""

    def __post_init__(self) -> None:
        step = self.state.step
        self._consumers = step.dag.consumers()
        self._position = {node: i for i, node in enumerate(step.order)}
        self.alike = alike_ops(self.choices, self.state)
        self._ops = list(self.choices)
        self._patience = PATIENCE * sum(len(options) - 1 for options in self.choices.values())
        self._scale = self.state.time or 1.0
        self.current = self.state.cost
        self.best, self.best_cost, self._since_best = copy_plan(self.state.plan), self.current, 0
        self.converged = not self._ops
        self._critical: tuple[list[Node], list[float]] | None = None
        self._journal: list[list[Edit]] = []
        """The edits of every proposal accepted since the best (`_restart`)."""
        """The ops on the critical path and their time on it, as of the state now
        (`_pick`; dropped when a proposal is accepted)."""

    def run(self, until: int, deadline: Deadline, progress: Progress | None = None) -> StopReason:
        """Propose until the chain has made `until` proposals (BUDGET), the deadline
        (TIMEOUT) or convergence (CONVERGED, for good); a chain stopped otherwise
        resumes where it was (`search`'s rounds). `best` and `best_cost` are the best
        it has found; `progress` hears of its proposals and best cost after each."""
        while True:
            if self.converged:
                return StopReason.CONVERGED
            if self.proposals >= until:
                return StopReason.BUDGET
            if deadline.expired():
                return StopReason.TIMEOUT
            if self._since_best > max(self._patience, self.proposals // 2):
                self.converged = True
                continue
            if progress is not None:
                progress(self.proposals, self.best_cost)
            if self.restart and self._journal and self._since_best % self.restart == 0:
                self._restart()
            self.proposals += 1
            self._since_best += 1
            self._propose()

    def _propose(self) -> None:
        """One proposal: an op the critical path draws (`guided` of the time, `_pick`)
        with its alike ops, drawn over their configurations (`_heat_bath`: an op on
        the path moved alone mostly pays a resharding against its alike neighbours);
        else a uniform op, with its alike ops `grouping` of the time, else alone
        (`_one_op`, FlexFlow's)."""
        node = self._pick()
        if node is None:
            node = self.rng.choice(self._ops)
            if self.rng.random() >= self.grouping:
                self._one_op(node)
                return
        self._heat_bath(self.alike[node])

    def _one_op(self, node: Node) -> None:
        """FlexFlow's proposal: `node` to a random other configuration, its readers
        following `propagating` of the time; accepted by eq. 3.1, else undone."""
        old = self.state.configs[node]
        config = self.rng.choice([other for other in self.choices[node] if other != old])
        propagate = self.rng.random() < self.propagating
        moved, undo = self._move((node,), config)
        if not moved:  # a layout a reader cannot reach: the step is unchanged
            self.illegal += 1
            return
        if propagate:
            followed = self._propagate(moved)
            self.propagated += bool(followed)
            undo += followed
        self.state.resimulate()
        accepted, cost = self._accepted()
        if accepted:
            self._accept(cost, undo)
        else:  # undone: the step is the one `current` priced (delta simulation is exact)
            self.state.restore(undo)
            self.state.resimulate()

    def _pick(self) -> Node | None:
        """`guided` of the time, the op a proposal moves drawn from the simulated
        critical path (`core.critical_path`), each op by the time its tasks take on
        it, compute and the communication of its results alike, charged to the ops
        that made the partial sums it reads (`_partial_sum_makers`); else None (the
        proposal draws uniformly, as FlexFlow does). On data parallel's rnnlm step
        (16 P100s) the weight gradients' matmuls, their accumulation and its
        all-reduce are 46 % of the path, which the ILP's plan removes by splitting
        the matmuls by the weight's features; a uniform draw finds them one time in
        19."""
        if not self.guided or self.rng.random() >= self.guided:
            return None
        if self._critical is None:
            step = self.state.step
            op_of, graph = step.ops_of_tasks(), step.graph
            weights: dict[Node, float] = {}
            for task_id in critical_path(graph, self.state.simulator.timeline):
                node = op_of.get(task_id)
                if node is None:
                    continue
                makers = [op for op in self._partial_sum_makers(node) if op in self.choices]
                for maker in makers:
                    share = graph[task_id].duration / len(makers)
                    weights[maker] = weights.get(maker, 0.0) + share
            self._critical = (list(weights), list(weights.values()))
        nodes, weights = self._critical
        if not nodes or not sum(weights) > 0.0:
            return None
        self.guided_proposals += 1
        return self.rng.choices(nodes, weights)[0]

    def _partial_sum_makers(self, node: Node) -> list[Node]:
        """The ops whose split of a summed dimension made the partial sums `node` reads
        (through the linear ops that carry them on), else `node` itself: who a
        critical task of `node` is charged to (`_pick`). Data parallel's LSTM step
        leaves each weight's gradient matmuls split by the batch, and the adds that
        accumulate their partial sums, the collective that reduces them at the end,
        wait on that split: moving an add cannot remove them, moving the matmuls can."""
        operands = self.state.plan.operands
        makers: list[Node] = []
        seen, stack = {node}, [node]
        while stack:
            op = stack.pop()
            read = [
                value.node
                for value, need in zip(op.inputs, operands.get(op, ()), strict=False)
                if need.unreduced
            ]
            if not read:
                makers.append(op)
            for producer in read:
                if producer not in seen:
                    seen.add(producer)
                    stack.append(producer)
        return makers

    def _accept(self, cost: float, undo: list[Edit]) -> None:
        """The proposal just simulated, at `cost`, is the chain's state now; `undo`
        (its edits) is kept until the chain finds a better best, so that `_restart`
        can go back to it."""
        self.accepted += 1
        self.current = cost
        self._critical = None
        if cost < self.best_cost:
            self.best, self.best_cost, self._since_best = copy_plan(self.state.plan), cost, 0
            self._journal = []
        else:
            self._journal.append(undo)

    def _restart(self) -> None:
        """Back to the best state the chain found (its accepted proposals since then
        undone, last first: exactly that state and time), once it has gone `restart`
        proposals without improving on it. Accepting worse proposals
        (eq. 3.1) lets a chain leave a local minimum, but one that drifted away from
        its best spends the proposals it has left there."""
        for undo in reversed(self._journal):
            self.state.restore(undo)
        self._journal = []
        self.state.resimulate()
        self.current, self._critical = self.best_cost, None

    def _heat_bath(self, group: Sequence[Node]) -> None:
        """Every op of `group` in each configuration of their rule, readers following
        (`_move`, `_propagate`), each priced by its time; one of them or the state as
        it is drawn with probability proportional to exp(-beta time) (costs in units
        of the chain's start, as eq. 3.1): a heat-bath move over the group (Gibbs
        sampling of its configuration). The memory cap is checked on the one drawn
        (over it: undone; with swapping priced, its stall must pass eq. 3.1 too).

        A group is where one op's change cannot reach: moving 160 weight-gradient
        matmuls from data parallel's batch split to the weight's features (rnnlm on
        16 P100s) is 279 -> 215 ms, moving them to {} 859 ms and to the rows 339 ms;
        a random configuration would find the good one a third of the time, this
        every time it draws the group, at the price of one edit and update per
        configuration."""
        state = self.state
        options: list[tuple[Config | None, float]] = [(None, state.time)]  # None: as it is
        applied: tuple[Config | None, list[Edit]] = (None, [])  # what the step holds now
        for config in self.choices[group[0]]:
            state.restore(applied[1])
            edits = self._group_move(group, config)
            applied = (config, edits or [])
            if edits is not None:
                state.resimulate()
                options.append((config, state.time))
        if len(options) == 1:  # every configuration illegal or already the group's
            self.illegal += 1
        else:
            self.grouped += 1
        least = min(time for _, time in options)
        config, time = self.rng.choices(
            options,
            [math.exp(-self.beta * (time - least) / self._scale) for _, time in options],
        )[0]
        if applied[0] != config or not applied[1]:
            state.restore(applied[1])
            applied = (config, [] if config is None else self._group_move(group, config) or [])
            state.resimulate()
        if config is None:
            return
        cost = state.cost
        if cost == time or (
            cost < math.inf
            and self.rng.random() < math.exp(-self.beta * (cost - time) / self._scale)
        ):
            self._accept(cost, applied[1])
        else:  # over the cap (or its swapping's stall refused): undone
            state.restore(applied[1])
            state.resimulate()

    def _group_move(self, group: Sequence[Node], config: Config) -> list[Edit] | None:
        """Every op of `group` in `config` and their readers following (`_move`,
        `_propagate`), unsimulated; the edits made, or None where no op moved."""
        moved, edits = self._move(group, config)
        if not moved:
            return None
        return edits + self._propagate(moved)

    def _move(self, group: Sequence[Node], config: Config) -> tuple[list[Node], list[Edit]]:
        """Every op of `group` in `config`, reading its operands as completion would,
        where it is not and its readers can follow; the ops moved, and every edit made
        (the readers that had to read complete what they read partial among them)."""
        moved: list[Node] = []
        edits: list[Edit] = []
        for node in group:
            if self.state.configs[node] == config:
                continue
            try:
                edits += self.state.edit(node, *self.state.choose(node, [config]))
            except ValueError:  # a layout a reader cannot reach: this op is unchanged
                continue
            moved.append(node)
        return moved, edits

    def _propagate(self, nodes: Sequence[Node]) -> list[Edit]:
        """After `nodes` changed: their readers, and theirs in turn (in program order,
        up to `PROPAGATION_LIMIT` of them), re-choose the configuration and operand
        layouts completion would give them now (`SimulatedStrategy.choose`); the edits
        made.

        One op's change alone is mostly a change *against* its neighbours, costing
        the communication between them: a dense layer split by features while the
        rest stays data parallel gathers its result back, and its backward ops, which
        read that split, still compute as before. FlexFlow gives an op's forward and
        backward one configuration (its tasks are the op's, both passes); a tasoc
        training step has them as separate ops, which only move together when the
        change propagates."""
        state = self.state
        queue = [
            (self._position[use.node], use.node)
            for node in nodes
            for v in node.results
            for use in self._consumers.get(v, ())
        ]
        heapq.heapify(queue)
        seen: set[Node] = set(nodes)
        edits: list[Edit] = []
        changed = 0
        while queue and changed < PROPAGATION_LIMIT:
            _, reader = heapq.heappop(queue)
            if reader in seen or reader not in self.choices:
                continue
            seen.add(reader)
            try:
                config, operands = state.choose(reader, self.choices[reader])
                if config == state.configs[reader] and operands == state.plan.operands[reader]:
                    continue
                edits += state.edit(reader, config, operands)
            except ValueError:  # no reachable configuration, or a reader cannot follow
                continue
            changed += 1
            for value in reader.results:
                for use in self._consumers.get(value, ()):
                    heapq.heappush(queue, (self._position[use.node], use.node))
        return edits

    def _accepted(self) -> tuple[bool, float]:
        """Eq. 3.1 for the proposal just simulated, and its cost: always when not worse,
        else with probability exp(beta (current - cost)), costs in units of the chain's
        start. The cost is the time, or more over the memory cap (infinite, or the
        time with swapping's stall), so a proposal its time alone rejects is rejected
        without the memory replay the cost needs; one uniform draw, made only when a
        cost is worse and finite, decides both tests (the same chain in law)."""
        draw: list[float] = []

        def passes(cost: float) -> bool:
            if cost <= self.current:
                return True
            if cost == math.inf:
                return False
            if not draw:
                draw.append(self.rng.random())
            return draw[0] < math.exp(self.beta * (self.current - cost) / self._scale)

        time = self.state.time
        if not passes(time):
            return False, time
        cost = self.state.cost
        return cost == time or passes(cost), cost


def _chain_progress(progress: Progress | None, done: int, best: float) -> Progress | None:
    """A chain's progress as the search's: the proposals of the chains before it
    (`done`) added, and the best cost of any chain so far (`best`)."""
    if progress is None:
        return None
    return lambda proposals, cost: progress(done + proposals, min(best, cost))


def _halving(chains: Mapping[str, Chain], limits: Limits) -> dict[str, StopReason]:
    """Run the chains by successive halving: rounds in which every chain still in
    runs its share of the round's proposals, after which the better half (by best
    cost) goes on; ceil(log2 n) rounds share the budget and the time alike. Starts
    differ by 10x (every op replicated against the ILP's plan), and a chain's worth
    shows in its first proposals, so the budget goes to the chains that can win
    instead of 1/n to each (Jamieson and Talwalkar, 2016, on budgets over arms). Why
    each chain last stopped, by origin."""
    stops: dict[str, StopReason] = {}
    active = sorted(chains, key=lambda origin: chains[origin].best_cost)
    rounds = max(1, math.ceil(math.log2(max(len(active), 1))))
    spent = 0
    for round_index in range(rounds):
        left = rounds - round_index
        budget = (limits.budget - spent) // left
        deadline = limits.deadline.share(1 / left)
        for index, origin in enumerate(active):
            chain, share = chains[origin], budget // (len(active) - index)
            before = chain.proposals
            progress = _chain_progress(
                limits.progress, spent, min(c.best_cost for c in chains.values())
            )
            stops[origin] = chain.run(
                chain.proposals + share, deadline.share(1 / (len(active) - index)), progress
            )
            spent += chain.proposals - before
            budget -= chain.proposals - before
        if limits.deadline.expired():
            break
        running = [origin for origin in active if not chains[origin].converged]
        running.sort(key=lambda origin: chains[origin].best_cost)
        active = running[: math.ceil(len(running) / 2)] if round_index < rounds - 1 else running
    return stops


def _offered(best: Best, simulated: Mapping[str, SimulatedStrategy]) -> dict[str, float]:
    """The starts that may be the best or run a chain offered to `best`, and their
    costs, in the starts' order; the others are left unpriced (`search` prices them after
    the chains, for the report).

    A start's cost is its time, or more over the memory cap (infinite, or the time
    with swapping's stall), and telling whether it is over is a memory check: a
    replay of the step's buffers, a tenth of a second or more on a 3,000-op step at
    64 devices. The costs are found in order of time, and only for a start whose time
    is at most `POLISHED` times the least cost found so far (data parallel's always).
    That leaves `best` as offering every start in order would:

    * a start left out costs at least its time, over `POLISHED` times a cost found
      (the least only falls, `POLISHED` > 1), so the least cost is among those
      found, and offering these in the starts' order keeps the same first start of
      least cost (`Best.offer` keeps the first of equal costs);
    * a start left out is over `POLISHED` times the best's cost, so `search` would
      have run no chain from it;
    * `Best`'s smallest memory, the figure of the error when no start fits, is read
      only when none does, and then no cost is finite and none is left out.

    `test_starts_priced_by_time_leave_the_search_as_pricing_every_one` checks it."""
    costs: dict[str, float] = {}
    least = math.inf
    for origin in sorted(simulated, key=lambda origin: simulated[origin].time):
        if simulated[origin].time > POLISHED * least and origin != "data-parallel":
            continue
        costs[origin] = simulated[origin].cost
        least = min(least, costs[origin])
    costs = {origin: costs[origin] for origin in simulated if origin in costs}
    for origin in costs:
        best.offer(simulated[origin], origin)
    return costs


@paused_gc()  # steps of 10^5 tasks built and edited: `paused_gc` says why
def search(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits) -> SearchOutcome[Plan]:
    """The best strategy chains from `starts` (data parallel and the other baselines),
    every op replicated and a random strategy find (see the module docstring)."""
    program = problem.program
    rng = random.Random(limits.seed)
    starts = dict(starts)
    simulated = {origin: problem.simulate(plan) for origin, plan in starts.items()}
    if not limits.deadline.expired():  # out of time, the starts given are candidates enough
        made = {
            "replicated": uniform_plan(program, lambda rule, mesh: {}),
            "random": uniform_plan(
                program, lambda rule, mesh: rng.choice(configurations(rule, mesh))
            ),
        }
        for origin, plan in made.items():
            if plan is not None:
                starts[origin], simulated[origin] = plan, problem.simulate(plan)
    best = Best(problem)
    starting = _offered(best, simulated)
    chains: dict[str, Chain] = {}
    for origin, state in simulated.items():
        if origin not in starting or (
            starting[origin] > POLISHED * best.cost and origin != "data-parallel"
        ):
            continue  # hopeless: its chain would be dropped after the first round
        # the report's figures of a start, before its chain edits it (a start without
        # a chain stays as built: the report prices it from there, after the search)
        problem.remember(starts[origin], state)
        chains[origin] = Chain(state, problem.space(starts[origin]), rng, problem.tuning.beta)
    stops = _halving(chains, limits)
    lowest = min(chain.best_cost for chain in chains.values())
    for origin, chain in chains.items():
        if chain.best_cost > POLISHED * lowest:
            continue
        if chain.best_cost < starting[origin]:
            best.offer(problem.simulate(chain.best), origin)
            best.polish(chain.best, origin)
    for origin, state in simulated.items():  # the hopeless starts' too, for the report
        if origin not in starting:  # (`_offered`): never edited, so priced as they began
            starting[origin] = state.cost
    starting = {origin: starting[origin] for origin in simulated}
    states = [chain.state for chain in chains.values()]
    totals = {
        key: sum(getattr(chain, key) for chain in chains.values())
        for key in ("proposals", "accepted", "illegal", "propagated", "grouped", "guided_proposals")
    }
    statistics = simulation_statistics(states, totals["proposals"])
    cost, plan = best.result()
    details = {
        "proposals": totals["proposals"],
        "accepted": totals["accepted"],
        "acceptance_rate": round(totals["accepted"] / max(totals["proposals"], 1), 4),
        "illegal_proposals": totals["illegal"],
        "propagated_proposals": totals["propagated"],
        "grouped_proposals": totals["grouped"],
        "guided_proposals": totals["guided_proposals"],
        "simulations": sum(state.updates for state in states),
        **statistics,
        "found_by": best.origin,
        "chains": {
            origin: {
                "start": cost,
                "best": min(cost, chains[origin].best_cost),
                "proposals": chains[origin].proposals,
                "stopped": str(stops[origin]),
            }
            if origin in chains
            else {"start": cost, "best": cost, "proposals": 0, "stopped": "not run"}
            for origin, cost in starting.items()
        },
    }
    stopped = next(
        (reason for reason in (StopReason.TIMEOUT, StopReason.BUDGET) if reason in stops.values()),
        StopReason.CONVERGED,
    )
    return SearchOutcome(
        best=plan,
        cost_before=starting["data-parallel"],
        cost_after=cost,
        seconds=limits.deadline.elapsed(),
        stopped=stopped,
        details=details,
    )
