"""Extraction: the cheapest graph an e-graph holds, by integer linear programming.

Each e-node gets a cost (`NodeCost`: what running it alone costs; nothing for
arguments, result projections and ops computed from weights alone), and extraction
chooses one e-node per needed class so that the chosen e-nodes' total cost is least
(Tensat §4.2, after egg's extraction):

    minimize    Σ cost(n) x_n            x_n ∈ {0, 1}: e-node n is chosen
    subject to  Σ_{n ∈ r} x_n ≥ 1        for each output class r
                Σ_{m ∈ c} x_m ≥ x_n      for each e-node n and each child class c

Cycles are broken before (`acyclic`), so any feasible choice is a graph. A shared
class is paid for once, so the ILP sees the common subexpressions that the greedy
extractor double-counts.

Fusion (`FusionCost`): an element-wise e-node costs less when it joins the kernel of
its first operand, which it can only when the e-node chosen for that operand is
computed by a kernel (not an argument, a constant, a folded weight or one result of
a multi-result op). Which it is depends on the choice, so the ILP gets, per fusible
e-node n with first operand class c, a continuous y_n ≥ 0 charged the difference:

    cost(n) = fused(n) x_n + (alone(n) - fused(n)) y_n,
    y_n ≥ x_n - Σ_{m ∈ c, m joinable} x_m

which is exactly "pay the launch unless the operand's chosen e-node can be joined".
Pricing every e-node as if it ran alone, or as if always fused, misranks graphs
that differ only in what feeds an element-wise op.

scipy's `milp` (HiGHS) solves it by the search's deadline; the greedy bottom-up choice
(`greedy`) is returned beside it, and alone when the ILP proves nothing in time. The
costs are a sum over e-nodes, not the fused model of `tasoc.cost`: the search
re-prices every extracted graph with the full model.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

import numpy as np
from scipy.optimize import Bounds, LinearConstraint, milp
from scipy.sparse import coo_array

from tasoc.ir.dag import Dag, Node, Value
from tasoc.passes.rewrite.egraph.egraph import ARGUMENT, PROJECT, ClassId, EGraph, ENode
from tasoc.passes.search import Deadline

NodeCost = Callable[[ClassId, ENode], float]
"""What an e-node costs running as its own kernel (or nothing, for what runs no kernel)."""


class FusionCost(Protocol):
    """The fusion side of e-node costs (module docstring)."""

    def fused(self, enode: ENode) -> float | None:
        """What `enode` costs inside its first operand's kernel; None if it never joins."""
        ...

    def joinable(self, cid: ClassId, enode: ENode) -> bool:
        """Whether a fusible reader of class `cid` can join the kernel of `enode`."""
        ...


@dataclass(frozen=True)
class Pricing:
    """How extraction prices a choice: `node_cost` per e-node, lowered by `fusion`."""

    node_cost: NodeCost
    fusion: FusionCost | None = None

    def fused(self, enode: ENode) -> float | None:
        """`enode`'s fused cost where that is cheaper than running alone, else None."""
        if self.fusion is None or not enode[2]:
            return None
        return self.fusion.fused(enode)

    def cost(self, cid: ClassId, enode: ENode, choice: Mapping[ClassId, ENode]) -> float:
        """`enode`'s cost when the classes it reads are computed as `choice` says."""
        fused = self.fused(enode)
        if fused is not None and self.fusion is not None:
            operand = enode[2][0]
            if operand in choice and self.fusion.joinable(operand, choice[operand]):
                return fused
        return self.node_cost(cid, enode)


Choice = dict[ClassId, ENode]

ILP_SCALE = 1e6
"""What the greedy choice costs in the ILP's objective. Costs are seconds, often
microseconds in all, below HiGHS's absolute gap and feasibility tolerances (1e-6 and
1e-7), under which it called choices up to 1% off the optimum "optimal"."""


@dataclass(frozen=True)
class Extraction:
    choice: Choice
    cost: float
    """The chosen e-nodes' summed cost (`Pricing.cost`)."""
    method: str
    """`ilp (optimal)`, `ilp (time limit)` or `greedy (...)` with why the ILP was not used."""


Classes = Mapping[ClassId, Sequence[ENode]]
"""The e-nodes extraction may choose from, per class."""


def acyclic(egraph: EGraph, roots: Sequence[ClassId]) -> dict[ClassId, list[ENode]]:
    """The classes the outputs can depend on, each with the e-nodes that extraction may
    choose: cycles broken by dropping, on each, its youngest e-node (`EGraph.ages`).

    An e-graph can hold cycles (a weight equal to the concat of the two halves of a
    split of itself). The input graph's e-nodes (age 0) have none, so every cycle has a
    younger e-node and dropping those never loses the input graph: extraction stays
    feasible. Tensat filters cycles during saturation instead; pruning once after it
    keeps saturation simple, and the ILP free of ordering constraints, which made it
    time out on every model with cycles."""
    roots = [egraph.find(root) for root in roots]
    classes = {cid: list(egraph.classes[cid]) for cid in _reachable(egraph, roots)}
    finished: set[ClassId] = set()
    while (cycle := _find_cycle(roots, classes, finished)) is not None:
        cid, enode = max(cycle, key=lambda pair: (egraph.ages.get(pair[1], 0), pair[0]))
        classes[cid].remove(enode)
    return _extractable(classes)


def _reachable(egraph: EGraph, roots: Sequence[ClassId]) -> list[ClassId]:
    seen: dict[ClassId, None] = {}
    stack = [egraph.find(root) for root in reversed(roots)]
    while stack:
        cid = stack.pop()
        if cid in seen:
            continue
        seen[cid] = None
        for enode in egraph.classes[cid]:
            stack.extend(child for child in enode[2] if child not in seen)
    return list(seen)


def _find_cycle(
    roots: Sequence[ClassId], classes: Classes, finished: set[ClassId]
) -> list[tuple[ClassId, ENode]] | None:
    """The (class, e-node) steps of one cycle among `classes`, or None. Classes in
    `finished` are known to reach no cycle, and those found so are added: dropping
    e-nodes never puts one back on a cycle, so the set carries over between calls."""
    for root in roots:
        if root in finished:
            continue
        path: list[tuple[ClassId, ENode]] = []
        on_path: dict[ClassId, int] = {root: 0}
        stack = [(root, iter([(enode, child) for enode in classes[root] for child in enode[2]]))]
        while stack:
            cid, edges = stack[-1]
            edge = next(edges, None)
            if edge is None:
                stack.pop()
                del on_path[cid]
                finished.add(cid)
                if path:
                    path.pop()
                continue
            enode, child = edge
            if child in on_path:
                return [*path[on_path[child] :], (cid, enode)]
            if child in finished:
                continue
            path.append((cid, enode))
            on_path[child] = len(path)
            stack.append(
                (child, iter([(e, grandchild) for e in classes[child] for grandchild in e[2]]))
            )
    return None


def _extractable(classes: Classes) -> dict[ClassId, list[ENode]]:
    """`classes` without the e-nodes that read a class left with no e-node to choose."""
    alive: set[ClassId] = set()
    changed = True
    while changed:
        changed = False
        for cid, nodes in classes.items():
            if cid not in alive and any(all(c in alive for c in n[2]) for n in nodes):
                alive.add(cid)
                changed = True
    return {
        cid: [n for n in nodes if all(c in alive for c in n[2])]
        for cid, nodes in classes.items()
        if cid in alive
    }


def greedy(classes: Classes, pricing: Pricing | NodeCost) -> Choice:
    """egg's bottom-up extraction: each class takes its e-node of least tree cost (own
    cost, given its operands' current choices, plus its children's), to a fixed point.
    Costs must be positive, so that a chosen e-node's children cost strictly less and
    the choice has no cycle."""
    pricing = _pricing(pricing)
    best: dict[ClassId, float] = {}
    choice: Choice = {}
    changed = True
    while changed:
        changed = False
        for cid, nodes in classes.items():
            for enode in nodes:
                children = enode[2]
                if not all(child in best for child in children):
                    continue
                own = pricing.cost(cid, enode, choice)
                total = own + sum(best[child] for child in children)
                if total < best.get(cid, math.inf):
                    best[cid], choice[cid] = total, enode
                    changed = True
    return choice


def extract(
    egraph: EGraph,
    roots: Sequence[ClassId],
    pricing: Pricing | NodeCost,
    deadline: Deadline,
) -> list[Extraction]:
    """The ILP's choice for `roots` (module docstring) and the greedy one, cheapest
    first; only the greedy one when it costs nothing (it is optimal then: costs are
    never negative) or the ILP has no time left or finds nothing. HiGHS
    gets the time left before `deadline` and may overrun it slightly (it checks its
    clock between steps of its branch and bound)."""
    pricing = _pricing(pricing)
    roots = [egraph.find(root) for root in roots]
    classes = acyclic(egraph, roots)
    fallback = _priced(roots, greedy(classes, pricing), pricing, "greedy")
    if fallback.cost <= 0.0:
        # Costs are never negative, so a free choice is optimal; it also has no cost
        # to scale the ILP's objective by (outputs that are arguments or constants).
        return [replace(fallback, method="greedy (costs nothing: optimal)")]
    if deadline.expired():
        return [replace(fallback, method="greedy (no time left for the ILP)")]
    pairs = [(cid, enode) for cid, nodes in classes.items() for enode in nodes]
    column = {pair: i for i, pair in enumerate(pairs)}
    costs = [pricing.node_cost(cid, enode) for cid, enode in pairs]
    rows = _Rows()
    for root in dict.fromkeys(roots):
        rows.add({column[root, n]: 1.0 for n in classes[root]}, 1.0, math.inf)
    for (_, enode), j in column.items():
        for child in dict.fromkeys(enode[2]):
            coefficients = {column[child, m]: 1.0 for m in classes[child]}
            coefficients[j] = -1.0
            rows.add(coefficients, 0.0, math.inf)
    fusion = pricing.fusion
    for (_, enode), j in list(column.items()):
        fused = pricing.fused(enode)
        if fusion is None or fused is None or fused >= costs[j]:
            continue
        operand = enode[2][0]
        joined = {column[operand, m]: 1.0 for m in classes[operand] if fusion.joinable(operand, m)}
        unjoined = len(costs)  # y_j: e-node j is chosen and cannot join its operand's kernel
        costs.append(costs[j] - fused)
        costs[j] = fused
        rows.add({**joined, unjoined: 1.0, j: -1.0}, 0.0, math.inf)
    integral = np.zeros(len(costs))
    integral[: len(pairs)] = 1
    solution = milp(
        np.array(costs) * (ILP_SCALE / fallback.cost),
        constraints=rows.constraint(len(costs)),
        integrality=integral,
        bounds=Bounds(0.0, 1.0),
        options={"time_limit": deadline.remaining(), "mip_rel_gap": 1e-6},
    )
    if solution.x is None:
        return [replace(fallback, method=f"greedy (the ILP found nothing: {solution.message})")]
    chosen: Choice = {}
    for (cid, enode), j in column.items():
        if solution.x[j] > 0.5 and (
            cid not in chosen or costs[j] < costs[column[cid, chosen[cid]]]
        ):
            chosen[cid] = enode
    method = "ilp (optimal)" if solution.status == 0 else "ilp (time limit)"
    return sorted([_priced(roots, chosen, pricing, method), fallback], key=lambda e: e.cost)


def _pricing(pricing: Pricing | NodeCost) -> Pricing:
    """A bare `NodeCost` prices every e-node as running alone."""
    return pricing if isinstance(pricing, Pricing) else Pricing(pricing)


class _Rows:
    """Sparse constraint rows, built one at a time."""

    def __init__(self) -> None:
        self.rows: list[int] = []
        self.cols: list[int] = []
        self.data: list[float] = []
        self.lower: list[float] = []
        self.upper: list[float] = []

    def add(self, coefficients: Mapping[int, float], lower: float, upper: float) -> None:
        row = len(self.lower)
        for col, value in coefficients.items():
            self.rows.append(row)
            self.cols.append(col)
            self.data.append(value)
        self.lower.append(lower)
        self.upper.append(upper)

    def constraint(self, columns: int) -> LinearConstraint:
        matrix = coo_array((self.data, (self.rows, self.cols)), shape=(len(self.lower), columns))
        return LinearConstraint(matrix.tocsr(), self.lower, self.upper)


def _priced(roots: Sequence[ClassId], choice: Choice, pricing: Pricing, method: str) -> Extraction:
    """The extraction of `choice`, costed over the classes the outputs actually use."""
    used: dict[ClassId, None] = {}
    stack = list(roots)
    while stack:
        cid = stack.pop()
        if cid not in used:
            used[cid] = None
            stack.extend(choice[cid][2])
    return Extraction(choice, sum(pricing.cost(cid, choice[cid], choice) for cid in used), method)


def to_dag(
    egraph: EGraph,
    roots: Sequence[ClassId],
    choice: Choice,
    like: Dag,
) -> Dag:
    """The graph of the chosen e-nodes (which must have no cycle), as a program like
    `like` (the graph the e-graph was built from): over its arguments, with its name
    and function and result attributes (`Dag.with_outputs`)."""
    built: dict[ClassId, Node | Value] = {}
    for cid in children_first(choice, [egraph.find(root) for root in roots]):
        op, attrs, children = choice[cid]
        if op == ARGUMENT:
            built[cid] = attrs[0][1].out
        elif op == PROJECT:
            owner = built[children[0]]
            assert isinstance(owner, Node)
            built[cid] = owner.results[attrs[0][1]]
        else:
            inputs = [built[child] for child in children]
            node = Node(op, inputs, **dict(attrs))  # type: ignore[arg-type]
            built[cid] = node.out if len(node.sigs) == 1 else node
    outputs = [built[egraph.find(root)] for root in roots]
    return like.with_outputs(outputs)  # type: ignore[arg-type]


def children_first(choice: Choice, roots: Sequence[ClassId]) -> list[ClassId]:
    """The classes `roots` (canonical ids) use under `choice`, each after the classes
    its chosen e-node reads, in a fixed order (first root's first operand first)."""
    order: list[ClassId] = []
    seen: set[ClassId] = set()
    stack: list[tuple[ClassId, bool]] = [(root, False) for root in reversed(roots)]
    while stack:
        cid, expanded = stack.pop()
        if expanded:
            order.append(cid)
        elif cid not in seen:
            seen.add(cid)
            stack.append((cid, True))
            stack.extend((child, False) for child in reversed(choice[cid][2]))
    return order
