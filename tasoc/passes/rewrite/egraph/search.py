"""`search=egraph`: equality saturation, then ILP extraction (Tensat, MLSys 2021).

    result = egraph_search(dag, directed(rules), cost_model, EGraphLimits(), Deadline.after(30))

The input graph goes into an e-graph, the rules saturate it (`saturate.py`) for at
most `saturation_share` of the deadline's time, and the ILP (`extract.py`) picks the cheapest
graph it holds under per-op costs from the cost model, beside a greedy pick. The
graphs extracted are then priced with the full cost model (fusion and memory
included), and the input stays unless one beats it, so the search never makes a
graph worse by its own measure.

Extraction prices each e-node by itself (with the fusion rule of `extract.py`: an
element-wise op is cheap where it can join its operand's kernel) and adds the prices
up; the cost model's kernels cost max(compute, memory) over their members, and some
rewrites pay off only in combination, reachable only after the first round where
multi-output rules ran (on squeezenet: a pooling split over a concatenation, then two
poolings batched into one). A short backtracking search from the cheapest extracted
graph under the full cost model (`polish_budget` expansions, at most `polish_share`
of the time left) *polishes* it: cheap, since the graph is already good, and it picks
up what the e-graph's prices and rounds miss.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from xdsl.traits import ConstantLike

from tasoc.cost import CostError, CostModel, FusedSumCost, OutOfTime
from tasoc.ir.dag import Dag, Node
from tasoc.ir.op_sets import ops_with
from tasoc.ir.rules import Rule
from tasoc.ir.traits import Fusible
from tasoc.passes.rewrite.backtrack import BacktrackLimits, backtracking_search
from tasoc.passes.rewrite.egraph.egraph import ARGUMENT, PROJECT, ClassId, EGraph, ENode
from tasoc.passes.rewrite.egraph.extract import Pricing, extract, to_dag
from tasoc.passes.rewrite.egraph.saturate import SaturationLimits, saturate
from tasoc.passes.search import (
    Deadline,
    Progress,
    SearchOutcome,
    StopReason,
    charging,
    speedup,
    unpriced,
)

MIN_NODE_COST = 1e-12
"""Every e-node costs at least this (seconds), so greedy extraction has no cycles."""


@dataclass(frozen=True)
class EGraphLimits(SaturationLimits):
    saturation_share: float = 0.7
    """The share of the deadline's time saturation may use; extraction and polishing
    share the rest, extraction taking at most `extraction_share` of it."""
    extraction_share: float = 0.7
    """The share of the time left after saturation the ILP may use."""
    polish_budget: int = 10
    """Graphs the polishing backtracking search expands at most (0: no polishing)."""
    polish_share: float = 0.2
    """The share of the time left after extraction polishing may use at most."""
    polish_alpha: float = BacktrackLimits.alpha
    """The polishing search's `alpha` (backtracking's relaxation)."""


def egraph_search(
    dag: Dag,
    rules: list[Rule],
    cost_model: CostModel,
    limits: EGraphLimits = EGraphLimits(),
    deadline: Deadline | None = None,
    progress: Progress | None = None,
) -> SearchOutcome[Dag]:
    """The cheapest graph equal to `dag` that saturation and extraction find by
    `deadline` (None: no deadline); it stops for the reason saturation stopped. The
    outcome's `details` are saturation's and extraction's figures (`rounds`, `enodes`,
    `extraction`, ...) and polishing's (`polish_expanded`, and `polish_gain`: the
    extracted graph's cost over the polished one's, None when that costs nothing)."""
    if not isinstance(cost_model, FusedSumCost):
        raise CostError("search=egraph needs a cost model that prices single ops")
    deadline = Deadline.never() if deadline is None else deadline
    with charging(cost_model, deadline):
        return _search(dag, rules, cost_model, limits, deadline, progress)


def _search(
    dag: Dag,
    rules: list[Rule],
    cost_model: FusedSumCost,
    limits: EGraphLimits,
    deadline: Deadline,
    progress: Progress | None,
) -> SearchOutcome[Dag]:
    """`egraph_search` with the cost model's measurements charged to `deadline`: where
    its time runs out measuring, the search stops with `StopReason.MEASURING` and
    keeps the candidates priced so far."""
    try:
        cost_before = cost_model.cost(dag)
    except OutOfTime:
        return unpriced(dag, deadline)
    egraph = EGraph()
    roots, _ = egraph.add_dag(dag)
    saturation = saturate(egraph, rules, limits, deadline.share(limits.saturation_share), progress)
    stopped = saturation.stopped
    node_cost = _NodeCosts(egraph, cost_model)
    extraction_deadline = deadline.share(limits.extraction_share)
    priced: dict[Dag, float] = {dag: cost_before}
    methods: dict[Dag, str] = {}
    try:
        extractions = extract(egraph, roots, node_cost.pricing(), extraction_deadline)
        for extraction in extractions:
            candidate = to_dag(egraph, roots, extraction.choice, dag)
            methods.setdefault(candidate, extraction.method)
            priced.setdefault(candidate, cost_model.cost(candidate))
    except OutOfTime:
        stopped = StopReason.MEASURING
    extracted = min(priced, key=priced.__getitem__)
    applied = Counter(saturation.applied)
    details: dict[str, object] = {
        "rounds": saturation.rounds,
        "chain_rounds": saturation.chain_rounds,
        "chain_steps": saturation.chain_steps,
        "matches": saturation.matches,
        "enodes": egraph.num_nodes,
        "eclasses": egraph.num_classes,
        "extraction": methods.get(extracted, _none_cheaper(methods)),
    }
    if limits.polish_budget > 0 and not deadline.expired() and stopped is not StopReason.MEASURING:
        polish = backtracking_search(
            extracted,
            rules,
            cost_model,
            BacktrackLimits(limits.polish_alpha, limits.polish_budget),
            deadline.share(limits.polish_share),
        )
        if polish.stopped is StopReason.MEASURING:
            stopped = StopReason.MEASURING
        priced.update((g, c) for g, c in polish.candidates if g not in priced)
        applied.update(polish.applied)
        details["polish_expanded"] = polish.details.get("graphs_expanded", 0)
        details["polish_gain"] = speedup(priced[extracted], polish.cost_after)
    candidates = sorted(priced.items(), key=lambda item: item[1])
    best, best_cost = candidates[0]
    return SearchOutcome(
        best=best,
        cost_before=cost_before,
        cost_after=best_cost,
        seconds=deadline.elapsed(),
        stopped=stopped,
        applied=applied if best != dag else Counter(),
        candidates=candidates,
        details=details,
    )


def _none_cheaper(methods: dict[Dag, str]) -> str:
    """The `extraction` detail when the input stays cheapest: the first method tried,
    or that none was priced in time."""
    first = next(iter(methods.values()), None)
    return f"none cheaper than the input ({first})" if first else "none priced in time"


_FUSIBLE = ops_with(Fusible)
_NO_KERNEL = ops_with(ConstantLike) | {ARGUMENT, PROJECT}
"""E-node ops that never run a kernel: constants, arguments and result projections."""


class _NodeCosts:
    """What one e-node costs (`FusedSumCost.op_work`), cached: a kernel launch plus its
    roofline when it runs alone; for an op XLA fuses (`Fusible`), its work inside
    its first operand's kernel too (`fused`), which extraction charges only where that
    operand's chosen e-node is computed by a kernel (`joinable`); nothing for
    constants, arguments, projections, and ops on weights alone when the model folds
    them."""

    def __init__(self, egraph: EGraph, cost_model: FusedSumCost) -> None:
        self.egraph = egraph
        self.model = cost_model
        self.weight_only = _weight_only(egraph) if cost_model.fold_weights else set()
        self._alone: dict[ENode, float] = {}
        self._fused: dict[ENode, float | None] = {}

    def pricing(self) -> Pricing:
        return Pricing(self, self)

    def __call__(self, cid: ClassId, enode: ENode) -> float:
        cost = self._alone.get(enode)
        if cost is None:
            cost = self._alone[enode] = self._cost(enode, -1)
        return cost

    def fused(self, enode: ENode) -> float | None:
        if enode not in self._fused:
            fusible = self.model.fusion and enode[0] in _FUSIBLE and not self._free(enode)
            self._fused[enode] = self._cost(enode, 0) if fusible else None
        return self._fused[enode]

    def joinable(self, cid: ClassId, enode: ENode) -> bool:
        """Not given (an argument, a constant, a folded weight), and not one result of
        a multi-result op, whose kernel has other readers (`tasoc.cost.fusion`)."""
        return cid not in self.weight_only and enode[0] not in _NO_KERNEL

    def _free(self, enode: ENode) -> bool:
        op, _, children = enode
        weight_only = all(c in self.weight_only for c in children)
        return op in _NO_KERNEL or weight_only

    def _cost(self, enode: ENode, fused: int) -> float:
        if self._free(enode):
            return MIN_NODE_COST
        op, attrs, children = enode
        node = Node(op, [self.egraph.placeholder(child) for child in children], **dict(attrs))
        launch = self.model.device.launch_overhead_s if fused < 0 else 0.0
        return max(launch + max(self.model.op_work(node, fused, False)), MIN_NODE_COST)


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
