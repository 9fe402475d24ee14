"""Recomputation beside swapping (`placement{recompute=on}`): for each saved activation,
keep it, swap it, or release it and run its op again where the backward pass reads it.

SwapAdvisor only swaps. Checkmate (Jain et al., MLSys 2020) chooses per value between
keeping and recomputing; here the swap planner makes the third choice too. Which values
may be recomputed is decided before the scan, by price: a saved activation is a
candidate when its op is a `graph` op without side effects or randomness (xDSL's
`Pure`: a second run gives the first run's values) of the forward pass (so is a
forward value a saved one is rebuilt from, a link of the chain; an op of several
results, batchnorm's, makes them all again), and running the op
again costs at most `ratio` times what swapping its result costs on the host link (out
and back in). The swap planner then recomputes a candidate instead of swapping it
wherever its op's inputs can be had — kept, swapped, or recomputed in turn, a chain
such as convolution, batchnorm, relu (`swap_planner` module docstring).

The ratio is not guessed: `RULES` are tried, each plan priced on the one simulator
(`PlacementProblem.simulate`), beside the plan without recomputation, and the fastest
wins — so `recompute=on` never makes the step slower than the swap planner alone. Each
plan has its prefetch windows tuned (`prefetch.py`). Cost: that tuning once per rule.
A rule is one threshold for every value; the pass then chooses value by value between
swapping and recomputing from the fastest rule's plan (`joint.py`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace

from xdsl.traits import Pure

from tasoc.ir.dag import Value
from tasoc.ir.graph import OPS_BY_NAME
from tasoc.ir.liveness import value_kinds
from tasoc.ir.memory import tensor_bytes
from tasoc.ir.placement_plan import PlacementPlan
from tasoc.passes.placement.joint import Joint
from tasoc.passes.placement.prefetch import Tuned, tuned_plan
from tasoc.passes.placement.problem import PlacementProblem
from tasoc.passes.placement.swap_planner import (
    RECOMPUTE_DEPTH,
    CapacityTooSmall,
    NoCopyLeft,
    OutOfTime,
    SwapSettings,
)
from tasoc.passes.search import Deadline
from tasoc.sim.placement import PlacedSimulation


@dataclass(frozen=True)
class Rule:
    """Which values may be recomputed: those whose op costs at most `ratio` times their
    swap (out and back in), of ops of one result only unless `several`, in chains at
    most `depth` ops deep."""

    ratio: float
    several: bool
    depth: int = RECOMPUTE_DEPTH


RULES = (
    Rule(0.1, True, 6),
    Rule(1.0, True, 6),
    Rule(0.1, False),
    Rule(0.1, True),
    Rule(1.0, False),
)
"""The rules priced, the likelier winner first (the pass's timeout may leave time for
one): cheap ops only, or ops about as dear as their swap (10, nearly everything,
never won on issue 32's models and cost a third more); with ops of several results
(batchnorm: nasnet 2x 84 -> 92 %, 4x 63 -> 79 %) or without (their chains of
convolution, batchnorm, relu cost compute: inception_v4 4x 98.9 against 94.3 %).
Chains may be 6 ops deep in the first two (nasnet 4x at ratio 1 on its own schedule:
84.2 % against 78.8 at 4 and 79.1 at 8). Cheap ops 6 deep came first in issue 32's
fourth round: nasnet's plans at ratio 1 spent all their time over ideal running
convolutions again (2x: 31.7 ms, 149 of them) while the link idled; at 0.1 fewer
convolutions qualify and more is swapped (own schedule: 2x 91.5 -> 93.6 %, 4x 85.5
-> 87.0 %)."""


def recomputable(problem: PlacementProblem) -> list[Value]:
    """The forward values whose op may run again (module docstring): each a result of
    a `Pure` graph op of the forward pass. Saved activations among them are what a plan
    releases; the others are links of a chain run again to rebuild one."""
    found = []
    for value, kind in value_kinds(problem.dag, problem.signature).items():
        node = value.node
        if kind != "activations" or node.is_arg:
            continue
        op = OPS_BY_NAME.get(node.op.removeprefix("graph."))  # a device view's full name
        if op is not None and op.has_trait(Pure):
            found.append(value)
    return found


def saved_activations(problem: PlacementProblem) -> set[Value]:
    """The forward values a backward op (one not of the forward pass) reads."""
    kinds = value_kinds(problem.dag, problem.signature)
    return {
        value
        for node in problem.dag.ops
        if any(kinds[result] != "activations" for result in node.results)
        for value in node.inputs
        if kinds[value] == "activations"
    }


def candidates(problem: PlacementProblem, rule: Rule) -> frozenset[Value]:
    """The values that may be recomputed by `rule` (module docstring)."""

    def allowed(value: Value) -> bool:
        if not rule.several and len(value.node.results) > 1:
            return False
        swap = 2 * problem.machine.host.time(tensor_bytes(value.sig))
        return swap > 0 and problem.seconds[value.node] <= rule.ratio * swap

    return frozenset(value for value in recomputable(problem) if allowed(value))


@dataclass(frozen=True)
class Recomputed:
    """The fastest recomputing plan found, its simulation and the rule that made it."""

    plan: PlacementPlan
    simulated: PlacedSimulation
    rule: Rule
    candidates: int
    settings: SwapSettings
    """The swap planner's settings that made `plan` (its tuned windows and the set of
    values that may run again)."""
    joint: Joint | None = None
    """What the joint choice of swapping and recomputing did to the rule's plan
    (`joint.py`), when it ran."""

    @property
    def tuned(self) -> Tuned:
        return Tuned(self.plan, self.simulated, self.settings)


def plan_recomputing(
    problem: PlacementProblem,
    settings: SwapSettings,
    rules: Sequence[Rule] = RULES,
    deadline: Deadline | None = None,
) -> Recomputed | None:
    """The fastest of the swap planner's plans under `settings` recomputing by each of
    `rules` (module docstring), those planned before `deadline`; None when no saved
    activation may be recomputed, no plan fits or none was done in time."""
    best: Recomputed | None = None
    if not saved_activations(problem) & set(recomputable(problem)):
        return None
    tried: set[tuple[frozenset[Value], int]] = set()
    for rule in rules:
        chosen = candidates(problem, rule)
        if not chosen or (chosen, rule.depth) in tried:
            continue
        tried.add((chosen, rule.depth))
        try:
            tried_settings = replace(settings, recompute=chosen, recompute_depth=rule.depth)
            found = tuned_plan(problem, tried_settings, deadline, False)
        except (CapacityTooSmall, NoCopyLeft):  # no room for a chain, or no copy left
            continue
        except OutOfTime:
            break
        if best is None or found.simulated.seconds < best.simulated.seconds:
            best = Recomputed(found.plan, found.simulated, rule, len(chosen), found.settings)
    return best
