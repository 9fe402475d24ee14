"""Cutting a convex set of ops out of a `Dag` as a program of its own, and putting an
optimized version of it back.

A search that cannot afford the whole graph (MetaFlow's split, a search around one
region, a placement of one stage) works on a piece: `extract` makes the ops a
standalone `Dag` over fresh arguments, any search optimizes that, and `splice` (or
`splice_many`, for several disjoint pieces at once) rebuilds the graph with the
optimized piece in place. The piece's arguments stand for the values it reads, its
outputs for the values read outside it, so splicing back the unchanged piece gives
back the very same (interned) dag.

A piece must be convex: no path may leave it and come back, or its inputs would
depend on its outputs. Splicing keeps the dag's arguments, name and attributes.
"""

from __future__ import annotations

import heapq
from collections import Counter
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from tasoc.ir.dag import Dag, Node, Value


@dataclass(frozen=True)
class Piece:
    """A convex set of ops of a dag, as a program of its own."""

    nodes: tuple[Node, ...]
    """The ops of the outer dag it covers, in `dag.ops` order."""
    dag: Dag
    """The ops rebuilt over fresh arguments: argument i stands for `inputs[i]`, output
    j computes what `outputs[j]` does."""
    inputs: tuple[Value, ...]
    """The outer values the piece reads (program arguments or other ops' results)."""
    outputs: tuple[Value, ...]
    """The piece's values that ops outside it read or that are program outputs."""


def extract(
    dag: Dag, nodes: Iterable[Node], is_weight: Callable[[Node], bool] | None = None
) -> Piece:
    """The ops `nodes` of `dag` as a standalone `Piece`.

    An argument of the piece that is a program argument keeps its name, weight mark
    and attributes; one that an outer op computes is named after that op and marked a
    weight where `is_weight` says the op's results are (computed from weights and
    constants alone: a cost model folds such values, and should do so in the piece as
    in the whole graph). ValueError when `nodes` is empty, holds something that is not
    an op of `dag`, or is not convex.
    """
    position = dag.position()
    chosen = set(nodes)
    if not chosen:
        raise ValueError("a piece needs at least one op")
    if any(node not in position for node in chosen):
        raise ValueError("a piece can only hold ops of the dag it is extracted from")
    order = tuple(sorted(chosen, key=position.__getitem__))
    if _reenters(dag, chosen, position[order[-1]]):
        raise ValueError("the ops are not convex: a path leaves them and comes back")
    uses = dag.consumers()
    returned = set(dag.outputs)
    inputs = tuple(dict.fromkeys(v for node in order for v in node.inputs if v.node not in chosen))
    outputs = tuple(
        value
        for node in order
        for value in node.results
        if value in returned or any(use.node not in chosen for use in uses.get(value, ()))
    )
    args = tuple(_arg_for(i, value, is_weight) for i, value in enumerate(inputs))
    values = {outer: arg.out for outer, arg in zip(inputs, args, strict=True)}
    _rebuild(order, values)
    piece = Dag(args, [values[value] for value in outputs], dag.name)
    return Piece(order, piece, inputs, outputs)


def _arg_for(index: int, value: Value, is_weight: Callable[[Node], bool] | None) -> Node:
    node = value.node
    if node.is_arg:
        return Node.arg(
            index, node.attr("name"), value.sig, node.attr("is_param"), node.attr("attributes")
        )
    weight = is_weight is not None and is_weight(node)
    return Node.arg(index, node.op, value.sig, weight)


def _reenters(dag: Dag, chosen: set[Node], last: int) -> bool:
    """Whether a path from `chosen` through some other op comes back to `chosen`;
    such a path ends before position `last` in the topological `dag.ops`."""
    position = dag.position()
    uses = dag.consumers()

    def outside_users(node: Node) -> Iterable[Node]:
        return (use.node for value in node.results for use in uses.get(value, ()))

    stack = [user for node in chosen for user in outside_users(node) if user not in chosen]
    seen: set[Node] = set()
    while stack:
        node = stack.pop()
        if node in seen or position[node] > last:
            continue
        seen.add(node)
        for user in outside_users(node):
            if user in chosen:
                return True
            stack.append(user)
    return False


def _rebuild(nodes: Iterable[Node], values: dict[Value, Value]) -> list[Node]:
    """Each of `nodes` (operands before users) made again over `values` (old value ->
    new value; values not in it stay); records their results in `values`."""
    built = []
    for node in nodes:
        inputs = [values.get(value, value) for value in node.inputs]
        new = Node(node.op, inputs, **dict(node.attrs))
        values.update(zip(node.results, new.results, strict=True))
        built.append(new)
    return built


def splice(dag: Dag, piece: Piece, optimized: Dag) -> Dag:
    """`dag` with `piece` (extracted from `dag`) replaced by `optimized`, a program
    with the argument and output types of `piece.dag` (an optimized version of it).

    `optimized` is rebuilt over the values bound to the piece's arguments and the
    dag's uses of the piece's outputs read the rebuilt outputs; the piece's old ops
    drop out. ValueError when the types differ or the piece is not part of `dag`.
    """
    return splice_many(dag, [(piece, optimized)])[0]


Origin = Node | int
"""What an op of a spliced dag comes from: the old op it rebuilds, or the index of
the replacement whose optimized program it belongs to."""


def splice_many(
    dag: Dag, replacements: Sequence[tuple[Piece, Dag]]
) -> tuple[Dag, dict[Node, Origin]]:
    """`dag` with each disjoint piece replaced by its optimized program, in one pass.

    Splicing pieces one by one would rebuild everything below each piece each time
    (and the later pieces' ops with it, losing track of them); instead each piece is
    one unit of a contracted graph whose units are rebuilt in a topological order.
    Returns the new dag and each of its ops' origin (`Origin`). ValueError when a
    piece's types differ from its replacement's, a piece is not part of `dag`, or two
    pieces overlap or depend on each other in a cycle.
    """
    position = dag.position()
    unit_of: dict[Node, Origin] = {}
    for r, (piece, optimized) in enumerate(replacements):
        _check_signature(piece, optimized)
        for node in piece.nodes:
            if node not in position:
                raise ValueError("the piece is not part of this dag")
            if unit_of.setdefault(node, r) != r:
                raise ValueError("the pieces overlap")
    units: dict[Origin, int] = {}
    successors: dict[Origin, set[Origin]] = {}
    waiting: Counter[Origin] = Counter()
    for node in dag.ops:
        unit = unit_of.get(node, node)
        units.setdefault(unit, position[node])
        for value in node.inputs:
            if value.node.is_arg:
                continue
            producer = unit_of.get(value.node, value.node)
            followers = successors.setdefault(producer, set())
            if producer != unit and unit not in followers:
                followers.add(unit)
                waiting[unit] += 1
    ready = [(first, unit) for unit, first in units.items() if not waiting[unit]]
    heapq.heapify(ready)
    values: dict[Value, Value] = {}
    origin: dict[Node, Origin] = {}
    done = 0
    while ready:
        _, unit = heapq.heappop(ready)
        done += 1
        if isinstance(unit, int):
            for new in _instantiate(*replacements[unit], values):
                origin.setdefault(new, unit)
        else:
            origin.setdefault(_rebuild([unit], values)[0], unit)
        for follower in successors.get(unit, ()):
            waiting[follower] -= 1
            if not waiting[follower]:
                heapq.heappush(ready, (units[follower], follower))
    if done != len(units):
        raise ValueError("the pieces depend on each other in a cycle")
    result = dag.with_outputs([values.get(v, v) for v in dag.outputs])
    return result, {node: origin[node] for node in result.ops}


def _instantiate(piece: Piece, optimized: Dag, values: dict[Value, Value]) -> list[Node]:
    """Build `optimized` over the new versions (`values`) of the piece's inputs and
    record its outputs as the new versions of the piece's; returns its ops."""
    bound = (values.get(value, value) for value in piece.inputs)
    inner = {arg.out: value for arg, value in zip(optimized.args, bound, strict=True)}
    built = _rebuild(optimized.ops, inner)
    outputs = (inner.get(value, value) for value in optimized.outputs)
    values.update(zip(piece.outputs, outputs, strict=True))
    return built


def _check_signature(piece: Piece, optimized: Dag) -> None:
    expected = [arg.sigs[0] for arg in piece.dag.args]
    if [arg.sigs[0] for arg in optimized.args] != expected:
        raise ValueError("the optimized program takes other arguments than the piece")
    if optimized.output_sigs != piece.dag.output_sigs:
        raise ValueError("the optimized program returns other types than the piece")
