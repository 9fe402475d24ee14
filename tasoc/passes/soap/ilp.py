"""One configuration per op, chosen exactly by an integer linear program (ILP), as Alpa's
intra-operator pass and XLA's auto-sharding do.

The frontier search (FT) keeps every (memory, time) trade-off; this search answers one
question exactly: the least time of any strategy whose memory per device stays within
a cap. On a `CostGraph` (TensorOpt's additive model, eq. 3) that is a quadratic
assignment, written linearly the way Alpa writes it (Alpa §4.2):

* a binary x[n, k] per option of each node with more than one option, and
  sum_k x[n, k] = 1 (one option per node);
* per edge between two such nodes a continuous y[e, k, p] in [0, 1] with the marginal
  constraints sum_p y[e, k, p] = x[a, k] and sum_k y[e, k, p] = x[b, p]. Alpa asks
  y = x[a] * x[b] through its linearization; the marginal form is the local-polytope
  relaxation of MAP inference, tighter than the usual y >= x_a + x_b - 1, and once the
  x are integral it forces y to the one pair picked, so y need not be integral;
* minimize sum time * x + sum time * y (+ constants), subject, under a cap, to
  sum memory * x + sum memory * y <= cap - constants.

What no choice changes is folded into constants before building: nodes with one option
get no variable, an edge whose ends both have one option is a constant, and an edge with
one such end is a per-option cost of its other end (no y at all). Parallel edges
between one pair are summed first, so each pair has one y block. An impossible pair
(`inf` time) gets upper bound 0 and cost 0, so the solver can never pick it; an
impossible option likewise. HiGHS (through `scipy.optimize.milp`) solves the model:
branch and bound with the LP relaxation, which the marginal constraints make tight on
trees (exact there) and usually near-tight on the DAGs of real programs.

An exact answer costs exponential time in the worst case, so a `Deadline` bounds the
search: at the limit HiGHS returns its best strategy so far (status "timeout") with its
relative gap to the dual bound, which says how far from optimal it can be at most.
`max_variables` refuses, before building anything, models too big to solve in any
useful time: 2000 nodes of 8 options joined by 4000 edges are already about 272,000
variables (8 per node, 64 per joined pair). What decides the time is the structure,
not the size: such a graph with uniformly random costs and random long-range edges
(frustrated cycles everywhere) did not finish HiGHS's root LP in 300 s, and kept a
heuristic incumbent with a 98 % gap, while one of 236,000 variables whose edges join
nearby nodes and cost 0 when both ends agree (as layouts do) solved to optimality in
9 s.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy import sparse
from scipy.optimize import Bounds, LinearConstraint, milp

from tasoc.passes.search import Deadline
from tasoc.passes.soap.cost_graph import Choice, CostGraph, Floats


@dataclass(frozen=True)
class IlpResult:
    """The strategy the ILP chose and what HiGHS knows of its optimality."""

    choice: Choice | None
    """One option per node; None only when stopped at the deadline with no strategy."""
    memory: float
    """`graph.cost(choice)`'s memory (nan when `choice` is None)."""
    time: float
    """`graph.cost(choice)`'s time (nan when `choice` is None)."""
    status: Literal["optimal", "timeout"]
    """"optimal": proven optimal (within `relative_gap`); "timeout": the deadline passed."""
    gap: float | None
    """HiGHS's relative MIP gap of the incumbent: |objective - bound| / |objective|
    (0 when proven optimal; None with no incumbent)."""
    bound: float | None
    """The dual bound on time: no strategy (within the cap) is faster."""
    objective: float | None
    """HiGHS's objective of the incumbent plus the constants: equal to `time` up to the
    solver's tolerances (the model is checked against `graph.cost` by the tests)."""
    variables: int
    constraints: int
    seconds: float
    """Wall time of the whole call, building included."""


class IlpTooLarge(ValueError):
    """The model would have more variables than `max_variables` (raised before building)."""


class IlpInfeasible(ValueError):
    """No strategy exists (every one pairs impossible options), or none fits the cap."""

    def __init__(self, message: str, least_memory: float | None = None) -> None:
        super().__init__(message)
        self.least_memory = least_memory
        """The least memory any strategy needs, when the cap is the reason and it could
        be computed in time."""


@dataclass(frozen=True)
class _Model:
    """The ILP's arrays: variables are the x of every multi-option node (by node), then
    the y of every kept edge (row-major in its option pair)."""

    offsets: tuple[int, ...]
    """Per node: where its x start, or -1 for a node with one option."""
    time: Floats
    """Objective coefficients for time (0 where impossible)."""
    memory: Floats
    """Memory coefficients (0 where impossible or infinite)."""
    possible: np.ndarray
    """Per variable: not an impossible option or pair (finite time)."""
    finite_memory: np.ndarray
    """Per variable: finite memory (an infinite one can never fit under a cap)."""
    integral: np.ndarray
    """Per variable: 1 for the x, 0 for the y."""
    equalities: sparse.csr_array
    """One-option-per-node rows (= 1) then marginal rows (= 0)."""
    right: Floats
    """The equalities' right-hand sides."""
    constant_time: float
    constant_memory: float

    @property
    def variables(self) -> int:
        return len(self.time)


def _number(value: float) -> str:
    """A count of bytes or seconds for a message: whole numbers without a fraction."""
    if math.isfinite(value) and value == round(value) and abs(value) < 1e15:
        return str(int(value))
    return f"{value:.6g}"


def _kept_pairs(graph: CostGraph) -> set[tuple[int, int]]:
    """The pairs of multi-option nodes joined by at least one edge (each once)."""
    multi = [node.options > 1 for node in graph.nodes]
    return {
        (min(e.source, e.target), max(e.source, e.target))
        for e in graph.edges
        if multi[e.source] and multi[e.target]
    }


def _build(graph: CostGraph, pairs: set[tuple[int, int]]) -> _Model:
    nodes = graph.nodes
    node_time = [node.time.astype(float) for node in nodes]
    node_memory = [node.memory.astype(float) for node in nodes]
    constant_time = graph.fixed_time
    constant_memory = graph.fixed_memory

    # Merge parallel edges, oriented from the lower node index to the higher.
    merged: dict[tuple[int, int], tuple[Floats, Floats]] = {}
    for edge in graph.edges:
        t, m = edge.time, edge.memory_matrix()
        a, b = edge.source, edge.target
        if a > b:
            a, b, t, m = b, a, t.T, m.T
        if (a, b) in merged:
            old_t, old_m = merged[a, b]
            merged[a, b] = (old_t + t, old_m + m)
        else:
            merged[a, b] = (t.astype(float), m.astype(float))

    # Fold what no choice changes: edges with a single-option end become constants or
    # per-option costs of the other end.
    for (a, b), (t, m) in merged.items():
        single_a, single_b = nodes[a].options == 1, nodes[b].options == 1
        if single_a and single_b:
            constant_time += float(t[0, 0])
            constant_memory += float(m[0, 0])
        elif single_a:
            node_time[b] = node_time[b] + t[0, :]
            node_memory[b] = node_memory[b] + m[0, :]
        elif single_b:
            node_time[a] = node_time[a] + t[:, 0]
            node_memory[a] = node_memory[a] + m[:, 0]
    for index, node in enumerate(nodes):
        if node.options == 1:
            constant_time += float(node_time[index][0])
            constant_memory += float(node_memory[index][0])

    offsets: list[int] = []
    times: list[Floats] = []
    memories: list[Floats] = []
    count = 0
    for index, node in enumerate(nodes):
        if node.options == 1:
            offsets.append(-1)
            continue
        offsets.append(count)
        times.append(node_time[index])
        memories.append(node_memory[index])
        count += node.options
    x_count = count

    rows: list[np.ndarray] = []
    cols: list[np.ndarray] = []
    vals: list[np.ndarray] = []
    right: list[Floats] = []
    row = 0
    for index, node in enumerate(nodes):
        if node.options == 1:
            continue
        k = node.options
        rows.append(np.full(k, row))
        cols.append(offsets[index] + np.arange(k))
        vals.append(np.ones(k))
        right.append(np.ones(1))
        row += 1

    for a, b in sorted(pairs):
        t, m = merged[a, b]
        ka, kb = t.shape
        y = count + np.arange(ka * kb).reshape(ka, kb)
        count += ka * kb
        times.append(t.ravel())
        memories.append(m.ravel())
        # sum_p y[k, p] - x_a[k] = 0 for each k, then sum_k y[k, p] - x_b[p] = 0.
        rows += [np.repeat(row + np.arange(ka), kb), row + np.arange(ka)]
        cols += [y.ravel(), offsets[a] + np.arange(ka)]
        vals += [np.ones(ka * kb), -np.ones(ka)]
        row += ka
        rows += [np.tile(row + np.arange(kb), ka), row + np.arange(kb)]
        cols += [y.ravel(), offsets[b] + np.arange(kb)]
        vals += [np.ones(ka * kb), -np.ones(kb)]
        row += kb
        right.append(np.zeros(ka + kb))

    time_vector = np.concatenate(times) if times else np.zeros(0)
    memory_vector = np.concatenate(memories) if memories else np.zeros(0)
    possible = np.isfinite(time_vector)
    finite_memory = np.isfinite(memory_vector)
    integral = np.zeros(count)
    integral[:x_count] = 1
    equalities = sparse.csr_array(
        (
            np.concatenate(vals) if vals else np.zeros(0),
            (
                np.concatenate(rows) if rows else np.zeros(0, int),
                np.concatenate(cols) if cols else np.zeros(0, int),
            ),
        ),
        shape=(row, count),
    )
    return _Model(
        offsets=tuple(offsets),
        time=np.where(possible, time_vector, 0.0),
        memory=np.where(possible & finite_memory, memory_vector, 0.0),
        possible=possible,
        finite_memory=finite_memory,
        integral=integral,
        equalities=equalities,
        right=np.concatenate(right) if right else np.zeros(0),
        constant_time=constant_time,
        constant_memory=constant_memory,
    )


@dataclass(frozen=True)
class _Outcome:
    choice: Choice | None
    objective: float | None
    bound: float | None
    gap: float | None
    status: Literal["optimal", "timeout", "infeasible"]


def _time_limit(deadline: Deadline | None) -> float | None:
    if deadline is None:
        return None
    left = deadline.remaining()
    return None if math.isinf(left) else max(left, 0.01)


def _run(
    graph: CostGraph,
    model: _Model,
    *,
    objective: Floats,
    constant: float,
    memory_cap: float | None,
    upper: Floats,
    deadline: Deadline | None,
    relative_gap: float,
) -> _Outcome:
    """Solve the model for one objective (time or memory), optionally under a cap."""
    constraints = [LinearConstraint(model.equalities, model.right, model.right)]
    if memory_cap is not None:
        row = sparse.csr_array(model.memory.reshape(1, -1))
        constraints.append(LinearConstraint(row, -np.inf, memory_cap - model.constant_memory))
    options: dict[str, float | bool] = {"mip_rel_gap": relative_gap}
    limit = _time_limit(deadline)
    if limit is not None:
        options["time_limit"] = limit
    result = milp(
        objective,
        integrality=model.integral,
        bounds=Bounds(np.zeros(model.variables), upper),
        constraints=constraints,
        options=options,
    )
    bound = getattr(result, "mip_dual_bound", None)
    bound = None if bound is None or not math.isfinite(bound) else float(bound) + constant
    if result.status == 2:
        return _Outcome(None, None, None, None, "infeasible")
    if result.status not in (0, 1):
        raise RuntimeError(f"HiGHS failed on the ILP (status {result.status}): {result.message}")
    status: Literal["optimal", "timeout"] = "optimal" if result.status == 0 else "timeout"
    if result.x is None:
        return _Outcome(None, None, bound, None, status)
    choice = tuple(
        0 if offset < 0 else int(np.argmax(result.x[offset : offset + node.options]))
        for node, offset in zip(graph.nodes, model.offsets, strict=True)
    )
    gap = getattr(result, "mip_gap", None)
    # Proven optimal with no gap allowed: 0 (HiGHS may print a rounding residue).
    exact = status == "optimal" and relative_gap == 0.0
    gap = 0.0 if exact or gap is None else max(0.0, float(gap))
    return _Outcome(choice, float(result.fun) + constant, bound, gap, status)


def _least_memory(
    graph: CostGraph, model: _Model, deadline: Deadline | None
) -> tuple[str, float | None]:
    """Why no strategy fits a cap: the least memory any strategy needs, by a second ILP
    minimizing memory (IlpInfeasible when there is no strategy at all)."""
    upper = (model.possible & model.finite_memory).astype(float)
    outcome = _run(
        graph,
        model,
        objective=model.memory,
        constant=model.constant_memory,
        memory_cap=None,
        upper=upper,
        deadline=deadline,
        relative_gap=0.0,
    )
    if outcome.status == "infeasible":
        raise IlpInfeasible("no strategy: every strategy pairs impossible options")
    if outcome.choice is None:
        return "the least memory any strategy needs could not be computed by the deadline", None
    found = graph.cost(outcome.choice)[0]
    if outcome.status == "optimal":
        return f"the least memory any strategy needs is {_number(found)}", found
    at_least = "" if outcome.bound is None else f"at least {_number(outcome.bound)} and "
    return f"the least memory any strategy needs is {at_least}at most {_number(found)}", None


def solve(
    graph: CostGraph,
    *,
    memory_cap: float | None = None,
    deadline: Deadline | None = None,
    max_variables: int = 200_000,
    relative_gap: float = 0.0,
) -> IlpResult:
    """The least-time strategy whose memory per device is at most `memory_cap` (None: any
    memory), exact unless the deadline stops HiGHS first.

    `relative_gap` is HiGHS's `mip_rel_gap`: it stops once its incumbent is within this
    relative gap of the dual bound (HiGHS's own default is 1e-4; 0 here, so "optimal"
    means proven optimal up to HiGHS's absolute gap of 1e-6). The cap holds up to
    HiGHS's feasibility tolerance (1e-7): a strategy over the cap by less than that may
    be returned (`memory` says so; the caller compares it with the cap). Raises IlpTooLarge
    before building a model of more than `max_variables` variables, and IlpInfeasible
    when no strategy exists or none fits the cap (naming the least memory one needs)."""
    started = time.perf_counter()
    pairs = _kept_pairs(graph)
    x_count = sum(node.options for node in graph.nodes if node.options > 1)
    y_count = sum(graph.nodes[a].options * graph.nodes[b].options for a, b in pairs)
    variables = x_count + y_count
    constraints = (
        sum(node.options > 1 for node in graph.nodes)
        + sum(graph.nodes[a].options + graph.nodes[b].options for a, b in pairs)
        + (memory_cap is not None)
    )
    if variables > max_variables:
        raise IlpTooLarge(
            f"the ILP would have {variables} variables ({x_count} options, {y_count} option "
            f"pairs) and {constraints} constraints, more than max_variables={max_variables}"
        )
    model = _build(graph, pairs)

    def result(outcome: _Outcome) -> IlpResult:
        memory, spent = (math.nan, math.nan)
        if outcome.choice is not None:
            memory, spent = graph.cost(outcome.choice)
        assert outcome.status != "infeasible"
        return IlpResult(
            choice=outcome.choice,
            memory=memory,
            time=spent,
            status=outcome.status,
            gap=outcome.gap,
            bound=outcome.bound,
            objective=outcome.objective,
            variables=variables,
            constraints=constraints,
            seconds=time.perf_counter() - started,
        )

    if not math.isfinite(model.constant_time):
        raise IlpInfeasible("no strategy: an edge between single-option nodes is impossible")
    if variables == 0:
        choice = (0,) * len(graph.nodes)
        memory, spent = graph.cost(choice)
        if memory_cap is not None and memory > memory_cap:
            raise IlpInfeasible(
                f"no strategy fits the memory cap {_number(memory_cap)}: the least memory "
                f"any strategy needs is {_number(memory)}",
                memory,
            )
        return result(_Outcome(choice, spent, spent, 0.0, "optimal"))

    upper = model.possible.astype(float)
    if memory_cap is not None:
        upper = upper * model.finite_memory
    outcome = _run(
        graph,
        model,
        objective=model.time,
        constant=model.constant_time,
        memory_cap=memory_cap,
        upper=upper,
        deadline=deadline,
        relative_gap=relative_gap,
    )
    if outcome.status != "infeasible":
        return result(outcome)
    if memory_cap is None:
        raise IlpInfeasible("no strategy: every strategy pairs impossible options")
    why, least = _least_memory(graph, model, deadline)
    raise IlpInfeasible(f"no strategy fits the memory cap {_number(memory_cap)}: {why}", least)
