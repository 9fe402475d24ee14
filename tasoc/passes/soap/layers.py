"""Layer-wise model parallelism for RNNs (FlexFlow, Jia thesis §3.7): the recurrent
layers of a program, found in its graph, each on its own device group.

An unrolled RNN reads each layer's weights at every time step, and step t+1 of a layer
depends on step t through the recurrent state. So a layer shows in the graph without
any name: a weight read by several forward ops, one of which depends on another, is
*recurrent*, and the ops that descend from one of its readers and lead to another are
its layer's steps. Such ops that touch each other form one layer (an LSTM's recurrent
weight and bias share their steps); a reader of a weight whose results feed one layer
only (an input projection `x @ wx`) joins that layer, and so does its weight, and with
it every other reader of the weight (the last step's). Layers are numbered by their
last op in program order, which is the order data flows up a stack of them (and from
an encoder to the decoder starting from its state).

A mesh of N devices is cut into G groups of N/G consecutive devices (each a 1-D mesh
with axis "d"), G the largest divisor of N no larger than the number of layers;
layer i goes to group i*G // layers, so consecutive layers share a group. Every other
node is placed by where its data is, deterministically:

* a forward op on the group of the latest layer among its operands (an op reading two
  layers sits after the lower one); one reading no placed value (the embedding and
  the reshapes before the first layer, the labels' scaling) on the earliest group
  among its consumers;
* an argument on its first reader's group (a layer's weights: the layer's);
* an op feeding only the new values (or gradients) of the weights of one group, a
  weight gradient and its update, on that group, unless it reads a weight of another
  group (the transposed weight of the layer above, in the bottom layer's backward);
* any other backward op with the forward values and weights it reads (a layer's
  backward with its forward), else on the earliest group among its operands
  (gradients flow down: a sum of two layers' contributions belongs to the lower),
  else its consumers'.

The ops are then ordered so that each group runs as long as the dependencies allow:
each change of group is another computation on other devices, and a partial sum may
not wait across one.
"""

from __future__ import annotations

import heapq
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

from tasoc.ir.dag import Dag, Node, Use, Value
from tasoc.ir.soap import Mesh
from tasoc.passes.soap.plan import Problem

Consumers = Mapping[Value, tuple[Use, ...]]

GROUP_AXIS = "d"
"""The one axis of every device group's mesh."""


@dataclass(frozen=True)
class Layer:
    """One recurrent layer: its ops (every time step) and its weights (argument indices)."""

    ops: frozenset[Node]
    weights: frozenset[int]


def recurrent_layers(problem: Problem) -> list[Layer]:
    """The recurrent layers of `problem`'s forward ops, by first op (see the module doc)."""
    dag = problem.dag
    readers = _weight_readers(problem)
    steps: set[Node] = set()
    for ops in readers.values():
        steps |= _between(dag, problem.forward, ops)
    components = _components(steps)
    layer_of = {node: index for index, component in enumerate(components) for node in component}
    members = [set(component) for component in components]
    weights: list[set[int]] = [set() for _ in components]
    consumers = dag.consumers()
    for weight, ops in readers.items():
        for reader in ops:
            if reader in layer_of:
                weights[layer_of[reader]].add(weight)
                continue
            users = [
                use.node
                for value in reader.results
                for use in consumers.get(value, ())
                if use.node in problem.forward
            ]
            fed = {layer_of[user] for user in users if user in layer_of}
            if len(fed) == 1 and all(user in layer_of for user in users):
                (index,) = fed
                members[index].add(reader)
                weights[index].add(weight)
    claimed: set[int] = set()
    for ops, owned in zip(members, weights, strict=True):
        for weight in sorted(owned - claimed):
            ops.update(readers[weight])
        claimed |= owned
    position = dag.position()
    layers = [Layer(frozenset(ops), frozenset(w)) for ops, w in zip(members, weights, strict=True)]
    return sorted(layers, key=lambda layer: max(position[node] for node in layer.ops))


def _weight_readers(problem: Problem) -> dict[int, list[Node]]:
    """Weight argument index -> the forward ops reading it, for weights read twice or more."""
    consumers = problem.dag.consumers()
    found = {}
    for index in sorted(problem.weights):
        uses = consumers.get(problem.dag.args[index].out, ())
        ops = list(dict.fromkeys(u.node for u in uses if u.node in problem.forward))
        if len(ops) > 1:
            found[index] = ops
    return found


def _between(dag: Dag, forward: frozenset[Node], readers: Iterable[Node]) -> set[Node]:
    """The forward ops that descend from one of `readers` and lead to another (readers
    included when they do): the time steps joining a recurrent weight's reads."""
    start = set(readers)
    consumers = dag.consumers()
    after: set[Node] = set()
    for node in dag.ops:
        if node in forward and any(v.node in start or v.node in after for v in node.inputs):
            after.add(node)
    before: set[Node] = set()
    for node in reversed(dag.ops):
        if node not in forward:
            continue
        uses = (use.node for value in node.results for use in consumers.get(value, ()))
        if any(user in start or user in before for user in uses):
            before.add(node)
    return (after & before) | {r for r in start if r in after or r in before}


def _components(nodes: set[Node]) -> list[list[Node]]:
    """`nodes` split into the groups connected by data edges among them."""
    parent = {node: node for node in nodes}

    def root(node: Node) -> Node:
        while parent[node] is not node:
            parent[node] = parent[parent[node]]
            node = parent[node]
        return node

    for node in nodes:
        for value in node.inputs:
            if value.node in parent:
                parent[root(value.node)] = root(node)
    grouped: dict[Node, list[Node]] = {}
    for node in nodes:
        grouped.setdefault(root(node), []).append(node)
    return list(grouped.values())


def group_meshes(mesh: Mesh, layers: int) -> list[Mesh]:
    """`mesh`'s devices cut into as many equal groups of consecutive devices as divide
    them without exceeding `layers` (one group when only that does)."""
    count = max(c for c in range(1, min(layers, mesh.size) + 1) if mesh.size % c == 0)
    size = mesh.size // count
    ids = mesh.device_ids
    return [
        Mesh(f"g{index}", ((GROUP_AXIS, size),), ids[index * size : (index + 1) * size])
        for index in range(count)
    ]


def place(problem: Problem, layers: list[Layer], groups: int) -> dict[Node, int]:
    """The group index of every op and argument (see the module doc)."""
    dag = problem.dag
    consumers = dag.consumers()
    group: dict[Node, int] = {}
    for index, layer in enumerate(layers):
        for node in (*layer.ops, *(dag.args[w] for w in layer.weights)):
            group[node] = index * groups // len(layers)
    forward = [n for n in dag.ops if n in problem.forward and n not in group]

    def placed(node: Node) -> list[Value]:
        """Its operands placed so far, not constants (made on every group that reads them)."""
        return [v for v in node.inputs if v.node in group and (v.node.is_arg or v.node.inputs)]

    def after_its_operands(node: Node) -> int | None:
        return max((group[v.node] for v in placed(node)), default=None)

    _follow(forward, group, after_its_operands, consumers)
    _place_arguments(dag, group, consumers)
    bound = _update_groups(problem, group)

    def with_its_forward(node: Node) -> int | None:
        operands = placed(node)
        weights = [
            group[v.node] for v in operands if v.node.is_arg or v.node not in problem.activations
        ]
        if node in bound and all(g == bound[node] for g in weights):
            return bound[node]
        taped = weights + [group[v.node] for v in operands if v.node in problem.forward]
        # Gradients flow down the layers: one summing those of two layers is the lower's.
        return max(taped) if taped else min((group[v.node] for v in operands), default=None)

    backward = [n for n in dag.ops if n not in problem.forward and n not in group]
    _follow(backward, group, with_its_forward, consumers)
    _place_arguments(dag, group, consumers)
    return group


def _follow(
    nodes: list[Node],
    group: dict[Node, int],
    choose: Callable[[Node], int | None],
    consumers: Consumers,
) -> None:
    """Place `nodes` (in program order) on the group `choose` picks from their placed
    operands; those it picks none for (reading nothing placed), in reverse, on the
    earliest group among their consumers, else on group 0."""
    waiting = []
    for node in nodes:
        chosen = choose(node)
        if chosen is None:
            waiting.append(node)
        else:
            group[node] = chosen
    for node in reversed(waiting):
        later = [
            group[use.node]
            for value in node.results
            for use in consumers.get(value, ())
            if use.node in group
        ]
        group[node] = min(later, default=0)


def _place_arguments(dag: Dag, group: dict[Node, int], consumers: Consumers) -> None:
    """Unplaced arguments on their first placed reader's group."""
    for arg in dag.args:
        if arg in group:
            continue
        readers = [use.node for use in consumers.get(arg.out, ()) if use.node in group]
        if readers:
            group[arg] = group[readers[0]]


def _update_groups(problem: Problem, group: Mapping[Node, int]) -> dict[Node, int]:
    """The backward ops whose results feed only the new values or gradients of weights
    of one group (a weight gradient, its accumulation over time steps, its update):
    that group."""
    dag, signature = problem.dag, problem.signature
    targets: dict[int, int] = {}
    if signature is not None:
        for output, argument in (*signature.replaces, *signature.gradients):
            if dag.args[argument] in group:
                targets[output] = group[dag.args[argument]]
    exits: dict[Value, list[int]] = {}
    for index, value in enumerate(dag.outputs):
        exits.setdefault(value, []).append(index)
    consumers = dag.consumers()
    bound: dict[Node, int] = {}
    for node in reversed(dag.ops):
        if node in problem.forward:
            continue
        destinations: set[int | None] = {
            *(bound.get(use.node) for v in node.results for use in consumers.get(v, ())),
            *(targets.get(index) for v in node.results for index in exits.get(v, ())),
        }
        if len(destinations) == 1 and None not in destinations:
            (bound[node],) = destinations  # type: ignore[assignment]
    return bound


def grouped_order(dag: Dag, group: Mapping[Node, int]) -> tuple[Node, ...]:
    """A topological order of `dag`'s ops running each group's ready ops before moving
    on (to the group whose ready op comes first in the dag's order). A constant comes
    just before its first reader, so it lies on that reader's group and splits no run."""
    position = dag.position()

    def producers(node: Node) -> list[Node]:
        return list(dict.fromkeys(v.node for v in node.inputs if not v.node.is_arg))

    waiting = {n: sum(1 for p in producers(n) if p.inputs) for n in dag.ops}
    dependents: dict[Node, list[Node]] = {}
    for node in dag.ops:
        for producer in producers(node):
            dependents.setdefault(producer, []).append(node)
    ready: dict[int, list[tuple[int, Node]]] = {}

    def push(node: Node) -> None:
        heapq.heappush(ready.setdefault(group[node], []), (position[node], node))

    for node in dag.ops:
        if node.inputs and waiting[node] == 0:
            push(node)
    order: dict[Node, None] = {}
    current = None
    while any(ready.values()):
        if current is None or not ready.get(current):
            current = min((g for g in ready if ready[g]), key=lambda g: ready[g][0][0])
        _, node = heapq.heappop(ready[current])
        order.update((p, None) for p in producers(node) if not p.inputs)
        order[node] = None
        for dependent in dependents.get(node, ()):
            waiting[dependent] -= 1
            if waiting[dependent] == 0:
                push(dependent)
    return tuple(order)
