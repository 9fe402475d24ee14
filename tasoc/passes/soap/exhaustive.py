"""`search=exhaustive`: every strategy of a small program, depth first, with A*-style
pruning (Jia thesis §3.7.5, where it shows MCMC reaching the optimum).

The ops are assigned configurations in topological order, depth first, each op's
cheapest-compute configurations first; a complete assignment is simulated (delta
simulation: the step's task graph is edited op by op as the walk goes, and a leaf
re-simulates only what changed since the last). A partial assignment is pruned when
a lower bound on every completion's iteration time is no better than the best found:
a device runs its compute tasks one at a time, so the makespan is at least any
device's compute time, which is the assigned ops' compute there plus, for each op
still unassigned, its least compute there over its configurations; and an op finishes
no earlier than its operands' ops plus its own compute, so the makespan is at least
the longest chain of dependent ops, each at its assigned (or least) compute.
Communication only adds to both, so the bound never prunes an optimum; a branch whose
bound reaches the best found is pruned too (it cannot beat it).

The walk is on the whole mesh (data parallel's plan is the starting point); programs
with more than `LIMIT` strategies are refused with one line (use `search=mcmc`).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from tasoc.ir import soap
from tasoc.ir.dag import Node, Value
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, OpRule, Sharding
from tasoc.passes.search import Deadline, Progress, SearchOutcome, StopReason
from tasoc.passes.soap.problem import Best, Limits, SoapProblem, configurations
from tasoc.passes.soap.simulated import SimulatedStrategy, simulation_statistics
from tasoc.sim.parallel import ShardedStep

LIMIT = 1_000_000
"""The most strategies (the product of the ops' configuration counts) searched."""


class TooLargeError(ValueError):
    """A program with more strategies than `LIMIT`; one line."""


def compute_seconds(step: ShardedStep, node: Node, rule: OpRule, config: Config) -> float:
    """Seconds one device of `node`'s mesh computes it in `config`: the step's op cost
    at the local shapes of the operands it reads (complete) and the results they give."""
    mesh = step.mesh_of(node)
    needs, _ = soap.shardings_for(rule, config, mesh.name)
    results, _ = soap.propagate(rule, needs, mesh.name)

    def local(values: Sequence[Value], layouts: Sequence[Sharding]) -> list[TensorSig]:
        return [
            TensorSig(layout.local_shape(v.sig.shape, mesh), v.sig.dtype)
            for v, layout in zip(values, layouts, strict=True)
        ]

    inputs, outputs = local(node.inputs, needs), local(node.results, results)
    return step.op_cost(node, inputs, outputs, step.machine.device)


@dataclass
class Walk:
    """The depth-first walk: the ops, their configurations with each one's compute per
    device, the best leaf so far and the counts."""

    state: SimulatedStrategy
    ops: Sequence[Node]
    choices: Sequence[Sequence[Config]]
    compute: Sequence[Sequence[list[float]]]
    """Per op, per configuration: its compute seconds on each device of the machine."""
    rest: Sequence[list[float]]
    """Per depth: the least compute per device the ops from there on add."""
    operands: Sequence[tuple[int, ...]]
    """Per op, the positions in `ops` of the ops it reads."""
    least: Sequence[float]
    """Per op, its least compute time over its configurations (on its slowest device)."""
    budget: int
    deadline: Deadline
    best: dict[Node, Config]
    best_cost: float
    leaves: int = 0
    pruned: int = 0
    illegal: int = 0
    stopped: StopReason = StopReason.EXHAUSTED
    finish: list[float] = field(default_factory=list)
    """Per op, the earliest it can finish: its operands' ops first, then its compute."""
    progress: Progress | None = None
    """Hears of the strategies simulated and the best cost after each."""

    def visit(self, depth: int, busy: list[float]) -> None:
        if depth == len(self.ops):
            self._leaf()
            return
        compute = self.compute[depth]
        for index in sorted(range(len(compute)), key=lambda i: max(compute[i])):
            if self.stopped != StopReason.EXHAUSTED:
                return
            assigned = [b + c for b, c in zip(busy, compute[index], strict=True)]
            self.finish[depth] = self._ready(depth) + max(compute[index])
            bound = max(
                max(a + r for a, r in zip(assigned, self.rest[depth + 1], strict=True)),
                self._path_bound(depth),
            )
            # No completion can beat the best when the bound reaches it: ties are pruned
            # too, or equal strategies (a split by one dim or another, alike in compute)
            # would be walked exhaustively for nothing.
            if bound >= self.best_cost * (1 - 1e-9):
                self.pruned += 1
                continue
            node, config = self.ops[depth], self.choices[depth][index]
            try:
                if self.state.configs[node] != config:
                    self.state.set(node, config)
            except ValueError:  # a layout a reader cannot reach
                self.illegal += 1
                continue
            self.visit(depth + 1, assigned)

    def _ready(self, op: int) -> float:
        return max((self.finish[i] for i in self.operands[op]), default=0.0)

    def _path_bound(self, depth: int) -> float:
        """The longest chain of dependent ops: the assigned ones in their configuration,
        the rest at their least compute (`finish` beyond `depth` is scratch space)."""
        for op in range(depth + 1, len(self.ops)):
            self.finish[op] = self._ready(op) + self.least[op]
        return max(self.finish)

    def _leaf(self) -> None:
        if self.leaves >= self.budget:
            self.stopped = StopReason.BUDGET
        elif self.deadline.expired():
            self.stopped = StopReason.TIMEOUT
        else:
            self.leaves += 1
            cost = self.state.update()
            if cost < self.best_cost:
                self.best, self.best_cost = dict(self.state.configs), cost
            if self.progress is not None:
                self.progress(self.leaves, self.best_cost)


def search(problem: SoapProblem, starts: Mapping[str, Plan], limits: Limits) -> SearchOutcome[Plan]:
    """The cheapest strategy on the whole mesh (see the module docstring)."""
    program = problem.program
    plan = starts["data-parallel"]
    ops = [node for node in plan.order or program.dag.ops if node in program.rules]
    choices = [configurations(program.rules[node], program.mesh) for node in ops]
    size = math.prod(len(options) for options in choices)
    if size > LIMIT:
        raise TooLargeError(
            f"search=exhaustive searches at most {LIMIT} strategies, this program has {size} "
            f"({len(ops)} ops on {program.mesh.size} devices): use search=mcmc"
        )
    state = problem.simulate(plan)
    start_cost = state.cost
    best = Best(problem)
    best.offer(state, "data-parallel")
    state.normalize()
    devices = problem.machine.size
    compute = []
    for node, options in zip(ops, choices, strict=True):
        per_device = []
        for config in options:
            seconds = compute_seconds(state.step, node, program.rules[node], config)
            on = set(program.mesh.device_ids)
            per_device.append([seconds if d in on else 0.0 for d in range(devices)])
        compute.append(per_device)
    rest = [[0.0] * devices]
    for per_config in reversed(compute):
        least = [min(column) for column in zip(*per_config, strict=True)]
        rest.insert(0, [a + b for a, b in zip(least, rest[0], strict=True)])
    position = {node: i for i, node in enumerate(ops)}
    operands = [
        tuple(sorted({position[v.node] for v in node.inputs if v.node in position})) for node in ops
    ]
    walk = Walk(
        state,
        ops,
        choices,
        compute,
        rest,
        operands,
        [min(max(per_config) for per_config in per_op) for per_op in compute],
        limits.budget,
        limits.deadline,
        dict(state.configs),
        min(start_cost, state.cost),
        progress=limits.progress,
    )
    walk.finish = [0.0] * len(ops)
    walk.visit(0, [0.0] * devices)
    state.move_to(walk.best)
    best.offer(state, "exhaustive")
    best.polish()
    cost, chosen = best.result()
    return SearchOutcome(
        best=chosen,
        cost_before=start_cost,
        cost_after=cost,
        seconds=limits.deadline.elapsed(),
        stopped=walk.stopped,
        details={
            "strategies": size,
            "simulations": walk.leaves,
            "pruned": walk.pruned,
            "illegal_proposals": walk.illegal,
            **simulation_statistics([state], walk.leaves),
        },
    )
