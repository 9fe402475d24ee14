"""TASO's backtracking search over equal graphs (thesis §2.7, Algorithm 2).

A priority queue holds graphs ordered by predicted cost. The cheapest is taken out,
every match of every rule is applied to it, and each new graph is kept when it costs
less than `alpha` times the best graph found so far: `alpha > 1` lets the search pass
through slightly worse graphs to reach much better ones (TASO's relaxed search,
default 1.05). The search stops when the queue is empty (`exhausted`), when `budget`
graphs have been expanded, or at its deadline (`timeout`; `timeout while measuring`
when a measuring cost model needed a measurement past it), and returns the best graph
found (`tasoc.passes.search`: the stop reasons, the deadline and the outcome are those
of every search pass).

Everything is deterministic: matches come in a fixed order, and ties in the queue are
broken by the order graphs were found. Graphs are `Dag`s, hash-consed, so two paths
to one graph are recognized by `==` and the graph is expanded once.
"""

from __future__ import annotations

import heapq
import itertools
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from tasoc.cost import CostModel, OutOfTime
from tasoc.ir.dag import Dag
from tasoc.ir.rules import Rule
from tasoc.passes.rewrite.apply import apply
from tasoc.passes.rewrite.match import find_matches
from tasoc.passes.search import (
    Deadline,
    Progress,
    SearchOutcome,
    StopReason,
    charging,
    unpriced,
)


@dataclass(frozen=True)
class BacktrackLimits:
    alpha: float = 1.05
    """Keep a new graph when it costs less than alpha x the best cost found."""
    budget: int = 1000
    """Graphs expanded at most."""
    candidates: int = 4
    """How many of the cheapest graphs found the outcome lists (`SearchOutcome.candidates`)."""
    max_ops_growth: float = 1.5
    """Graphs with more than this times the original's ops are not kept (TASO's size
    cap: rules that only grow a graph would otherwise fill the queue)."""


def backtracking_search(
    dag: Dag,
    rules: Sequence[Rule],
    cost_model: CostModel,
    limits: BacktrackLimits = BacktrackLimits(),
    deadline: Deadline | None = None,
    progress: Progress | None = None,
) -> SearchOutcome[Dag]:
    """The cheapest graph equal to `dag` that the search reaches by `deadline` (None:
    no deadline), see the module docstring. The outcome's `details` are
    `graphs_expanded` (taken out of the queue) and `graphs_generated` (produced by rule
    applications; a discarded graph produced again counts again); `applied` counts the
    rules on the path to the best graph. `progress` hears of the graphs expanded and
    the best cost so far, after each expansion.

    `rules` are applied as given: pass both directions (`match.directed`)."""
    deadline = Deadline.never() if deadline is None else deadline
    with charging(cost_model, deadline):
        return _search(dag, rules, cost_model, limits, deadline, progress)


def _search(
    dag: Dag,
    rules: Sequence[Rule],
    cost_model: CostModel,
    limits: BacktrackLimits,
    deadline: Deadline,
    progress: Progress | None,
) -> SearchOutcome[Dag]:
    """`backtracking_search` with the cost model's measurements charged to `deadline`."""
    size_cap = max(dag.num_ops * limits.max_ops_growth, dag.num_ops + 4)
    try:
        cost_before = cost_model.cost(dag)
    except OutOfTime:
        return unpriced(dag, deadline)
    best, best_cost = dag, cost_before
    history: dict[Dag, tuple[str, ...]] = {dag: ()}
    costs: dict[Dag, float] = {dag: cost_before}
    order = itertools.count()
    queue: list[tuple[float, int, Dag]] = [(cost_before, next(order), dag)]
    expanded = generated = 0
    stopped = StopReason.EXHAUSTED
    while queue and stopped is not StopReason.MEASURING:
        if expanded >= limits.budget:
            stopped = StopReason.BUDGET
            break
        if deadline.expired():
            stopped = StopReason.TIMEOUT
            break
        _, _, graph = heapq.heappop(queue)
        expanded += 1
        for match in find_matches(graph, rules):
            new = apply(graph, match)
            if new is None or new in history or new.num_ops > size_cap:
                continue
            generated += 1
            try:
                new_cost = cost_model.cost(new)
            except OutOfTime:
                stopped = StopReason.MEASURING
                break
            if new_cost < best_cost:
                best, best_cost = new, new_cost
            if new_cost < limits.alpha * best_cost or new is best:
                # Only kept graphs are remembered: a discarded one may come back and be
                # costed again (cheap: node costs are cached), but memory stays bounded
                # by the queue, not by every graph ever generated.
                history[new] = (*history[graph], match.rule.name)
                costs[new] = new_cost
                heapq.heappush(queue, (new_cost, next(order), new))
            if deadline.expired():
                break
        if progress is not None:
            progress(expanded, best_cost)
    return SearchOutcome(
        best=best,
        cost_before=cost_before,
        cost_after=best_cost,
        seconds=deadline.elapsed(),
        stopped=stopped,
        applied=Counter(history[best]),
        details={"graphs_expanded": expanded, "graphs_generated": generated},
        candidates=sorted(costs.items(), key=lambda item: item[1])[: limits.candidates],
    )
