"""`search=egraph`: equality saturation, then ILP extraction (Tensat, MLSys 2021).

    result = egraph_search(dag, directed(rules), cost_model, EGraphLimits(), timeout_s=30)

The input graph goes into an e-graph, the rules saturate it (`saturate.py`) for at
most `saturation_share` of the time, and the ILP (`extract.py`) picks the cheapest
graph it holds under per-op costs from the cost model, in the time left, beside a
greedy pick. The graphs extracted are then priced with the full cost model (fusion
and memory included), and the input stays unless one beats it, so the search never
makes a graph worse by its own measure.
"""

from __future__ import annotations

import time
from collections import Counter
from dataclasses import dataclass

from tasoc.cost import CostError, CostModel, FusedSumCost
from tasoc.cost.stats import FREE_OPS, FUSIBLE_OPS
from tasoc.ir.dag import Dag, Node
from tasoc.ir.rules import Rule
from tasoc.passes.rewrite.egraph.egraph import ARGUMENT, PROJECT, ClassId, EGraph, ENode
from tasoc.passes.rewrite.egraph.extract import extract, to_dag
from tasoc.passes.rewrite.egraph.saturate import Progress, SaturationLimits, saturate
from tasoc.passes.rewrite.search import SearchResult

MIN_NODE_COST = 1e-12
"""Every e-node costs at least this (seconds), so greedy extraction has no cycles."""


@dataclass(frozen=True)
class EGraphLimits(SaturationLimits):
    saturation_share: float = 0.7
    """The share of the timeout saturation may use; extraction gets the rest."""


def egraph_search(
    dag: Dag,
    rules: list[Rule],
    cost_model: CostModel,
    limits: EGraphLimits = EGraphLimits(),
    timeout_s: float = 30.0,
    progress: Progress | None = None,
) -> SearchResult:
    """The cheapest graph equal to `dag` that saturation and extraction find."""
    if not isinstance(cost_model, FusedSumCost):
        raise CostError("search=egraph needs a cost model that prices single ops")
    start = time.perf_counter()
    cost_before = cost_model.cost(dag)
    egraph = EGraph()
    roots, _ = egraph.add_dag(dag)
    deadline = start + timeout_s * limits.saturation_share
    saturation = saturate(egraph, rules, limits, deadline, progress)
    node_cost = _NodeCosts(egraph, cost_model)
    time_left = start + timeout_s - time.perf_counter()
    extractions = extract(egraph, roots, node_cost, time_left)
    priced: dict[Dag, float] = {dag: cost_before}
    methods: dict[Dag, str] = {}
    for extraction in extractions:
        candidate = to_dag(egraph, roots, extraction.choice, dag.args, dag.name)
        priced.setdefault(candidate, cost_model.cost(candidate))
        methods.setdefault(candidate, extraction.method)
    candidates = sorted(priced.items(), key=lambda item: item[1])
    best, best_cost = candidates[0]
    return SearchResult(
        best=best,
        cost_before=cost_before,
        cost_after=best_cost,
        seconds=time.perf_counter() - start,
        stopped=saturation.stopped,
        applied=saturation.applied if best != dag else Counter(),
        candidates=candidates,
        details={
            "rounds": saturation.rounds,
            "matches": saturation.matches,
            "enodes": egraph.num_nodes,
            "eclasses": egraph.num_classes,
            "extraction": methods.get(
                best, f"none cheaper than the input ({extractions[0].method})"
            ),
        },
    )


class _NodeCosts:
    """What one e-node costs (`FusedSumCost.op_work`), cached per e-node: a kernel
    launch plus its roofline, or for an op XLA fuses (`FUSIBLE_OPS`) whose first
    operand is computed by a kernel, its work inside that kernel, as it usually runs;
    nothing for constants, arguments, projections, and ops on weights alone when the
    model folds them."""

    def __init__(self, egraph: EGraph, cost_model: FusedSumCost) -> None:
        self.egraph = egraph
        self.model = cost_model
        self.weight_only = _weight_only(egraph) if cost_model.fold_weights else set()
        self._cache: dict[ENode, float] = {}

    def __call__(self, cid: ClassId, enode: ENode) -> float:
        cost = self._cache.get(enode)
        if cost is None:
            cost = self._cache[enode] = max(self._cost(enode), MIN_NODE_COST)
        return cost

    def _runs(self, cid: ClassId) -> bool:
        """Whether class `cid` is computed by a kernel that a fusible reader can join:
        not given (an argument, a constant, a folded weight), and not one result of
        a multi-result op, whose kernel has other readers (`tasoc.cost.fusion`)."""
        if cid in self.weight_only:
            return False
        given = (ARGUMENT, PROJECT, *FREE_OPS)
        return all(op not in given for op, _, _ in self.egraph.classes[cid])

    def _cost(self, enode: ENode) -> float:
        op, attrs, children = enode
        if op in (ARGUMENT, PROJECT) or all(c in self.weight_only for c in children):
            return 0.0
        if op in FREE_OPS:
            return 0.0
        inputs = [self.egraph.placeholder(child) for child in children]
        node = Node(op, inputs, **dict(attrs))
        if self.model.fusion and op in FUSIBLE_OPS and self._runs(children[0]):
            return max(self.model.op_work(node, 0, False))
        return self.model.device.launch_overhead_s + max(self.model.op_work(node, -1, False))


def _weight_only(egraph: EGraph) -> set[ClassId]:
    """Classes computable from weights and constants alone (thesis §2.9.3: folded
    before inference), to a fixed point."""
    known: set[ClassId] = set()
    changed = True
    while changed:
        changed = False
        for cid, (op, attrs, children) in egraph.items():
            if cid in known:
                continue
            if op == ARGUMENT:
                if attrs[0][1].attr("is_param"):
                    known.add(cid)
                    changed = True
            elif all(child in known for child in children):
                known.add(cid)
                changed = True
    return known
