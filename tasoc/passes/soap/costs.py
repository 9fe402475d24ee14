"""A SOAP problem as TensorOpt's cost graph (`cost_graph.py`): what `search=ft`,
`search=greedy` and `search=ilp` search, priced with the simulator's op costs and the
machine's collectives.

Nodes are the choices a strategy makes on one mesh:

* each op with operands: its SOAP configurations (`soap.configurations`). An
  option's time is eq. 1's t = t_c + t_s: the op's cost on one device at its local
  shapes as the machine prices it (`sim.parallel.machine_op_cost`, what the simulator
  charges), plus the
  all-reduce of its statistics when it splits a synced factor (batchnorm's batch),
  plus completing the partial sums of a program result it leaves unreduced. Its
  memory is eq. 1's m_t: the local bytes of its results the simulator holds
  (`ShardedStep.memory`, XLA's accounting) at the turn from forward to backward:
  forward values a backward or update op reads (activations saved for the backward;
  a reader XLA fuses away counts as its readers), but not those XLA never writes (a
  reshape, a transpose folded into a matmul, an element-wise op fused into its
  readers, a training batchnorm's normalized output: `fused_away`), while a cheap
  element-wise op's operand counts as read by the element-wise readers XLA
  duplicates the op into (`duplicated_into`: a relu's input, read again by its
  gradient); the zero-filled result of a `scatter_add` or a
  max-pooling's gradient, which XLA makes at the step's start (`made_at_start`), and
  such a gradient's argmax, found as soon as its input exists (`argmax_of`: the
  input itself is then not read by the gradient); and program results (a new weight
  excepted: it reuses its argument's buffer); every result of a forward program;
* each argument an op reads: the layouts it may lie in (replicated, and every
  complete layout a configuration of a reader reads it in), memory its local bytes
  (eq. 1's m_p: params, optimizer state, inputs), once more for a weight XLA copies
  before updating it in place (an op the update does not wait for still reads it:
  the backward's `dy @ W^T`), and once more for each kind of backward convolution
  reading it, which reads a copy in its own layout (`CONVOLUTIONS`); one option when a
  user fixed it. (The simulator also has XLA fill a copied weight's own buffer with
  temporaries until its update; counting the copy once instead left every estimate
  lower, 31 % off on average against 13 %: the temporaries the graph leaves out fill it.)

Edges join a value's producer (op or argument) to each op reading it: for every pair
of options, the time (eq. 2's t_x) of the collectives `soap.reshard` inserts to turn
the producer's layout into the reader's, each priced by `Machine.collective_time` on
the first group of devices it runs over (the groups run at once), and the bytes they
communicate per device; `inf` where no collective can (a reader wanting partial sums).
A re-scheduled copy of a saved activation is made as soon as the value is (the
simulator runs collectives then) and held until its reader, so at the turn to the
backward both copies are held (TensorOpt §4's "keep both copies"): its edge holds the
reader's copy. A new weight leaving the step must lie as its argument does: an edge from the
op making it to the argument. Values that depend on no argument and operands read
for their shape alone cost nothing (the writer makes them where they are read), as
in completion (`plan.py`).

What the graph leaves out, the re-simulation of a chosen strategy shows: the sums of
eq. 3 ignore overlap of compute and communication and count a collective once per
reader; and memory is what is held at one point, the turn to the backward, while the
simulated peak is wherever XLA's schedule holds the most (`ShardedStep.sequence`):
often later in the backward, where the gradients of every layer of one depth, the
communication buffers of their collectives and the activations still to be read
are held together, which no sum over single ops and edges can say."""

from __future__ import annotations

import functools
import math
from collections.abc import Hashable, Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from tasoc.cost.machines import Machine
from tasoc.ir import soap
from tasoc.ir.dag import Node, Value
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan, free_read
from tasoc.ir.soap import Config, Mesh, Sharding, ShardingError
from tasoc.passes.soap.cost_graph import Choice, CostEdge, CostGraph, CostNode, Floats
from tasoc.passes.soap.plan import Prescription, Problem, operand_layouts, result_layouts
from tasoc.passes.soap.problem import configurations
from tasoc.sim.parallel import (
    CONVOLUTIONS,
    INDEX_BYTES,
    ancestors,
    argmax_of,
    axis_groups,
    duplicated_into,
    fused_away,
    machine_op_cost,
    made_at_start,
    shard_bytes,
)

Option = Config | Sharding
"""An op node's option is a configuration, an argument node's a layout."""


@dataclass(frozen=True)
class CostModel:
    """The cost graph of a problem and what its nodes and options stand for."""

    graph: CostGraph
    problem: Problem
    machine: Machine
    nodes: tuple[Node, ...]
    """Per graph node, the op or argument it chooses for."""
    options: tuple[tuple[Option, ...], ...]
    """Per graph node, its options (configurations or layouts), in index order."""

    def prescription(self, choice: Choice) -> Prescription:
        """A strategy as what completion keeps: every op's configuration and every
        argument's layout."""
        configs: dict[Node, Config] = {}
        layouts: dict[int, Sharding] = {}
        position = {arg: i for i, arg in enumerate(self.problem.dag.args)}
        for node, options, index in zip(self.nodes, self.options, choice, strict=True):
            option = options[index]
            if isinstance(option, Sharding):
                layouts[position[node]] = option
            else:
                configs[node] = option
        return Prescription(configs=configs, layouts=layouts)

    def choice_of(self, plan: Plan) -> Choice | None:
        """`plan` as a strategy of this graph, or None when it chooses what the graph
        has no option for (a layout no reader reads, a plan on device groups)."""
        if plan.meshes:
            return None
        choice = []
        for node, options in zip(self.nodes, self.options, strict=True):
            if node.is_arg:
                wanted: Option = plan.values[node.out]
                found = next((i for i, o in enumerate(options) if o == wanted), None)
            else:
                wanted = _split_only(plan.configs[node])
                found = next(
                    (i for i, o in enumerate(options) if _split_only(o) == wanted),  # type: ignore[arg-type]
                    None,
                )
            if found is None:
                return None
            choice.append(found)
        return tuple(choice)


def _split_only(config: Config) -> dict[str, tuple[str, ...]]:
    return {factor: axes for factor, axes in config.items() if axes}


def build(problem: Problem, machine: Machine) -> CostModel:
    """The cost graph of `problem` on its mesh, priced on `machine` (module docstring)."""
    return _Builder(problem, machine).build()


class _Builder:
    def __init__(self, problem: Problem, machine: Machine) -> None:
        self.problem, self.machine, self.mesh = problem, machine, problem.mesh
        self.op_cost = machine_op_cost(machine, problem.mesh.size, problem.dag)
        self.dag = problem.dag
        self.consumers = self.dag.consumers()
        self.index: dict[Node, int] = {}
        self.nodes: list[Node] = []
        self.options: list[tuple[Option, ...]] = []
        self.costs: list[CostNode] = []
        self.edges: list[CostEdge] = []
        replaced = {self.dag.outputs[index] for index in problem.replaces}
        self.kept_outputs = frozenset(self.dag.outputs) - replaced
        """Program results held in buffers of their own (a new weight reuses its
        argument's: donated)."""
        self.updates = {
            argument: self.dag.outputs[output].node
            for output, argument in problem.replaces.items()
            if not self.dag.outputs[output].node.is_arg
        }
        """Each argument written in place, and the op writing its new value."""
        self.fused: dict[Value, bool] = {}
        """Values XLA never writes (`_fused`), as they are asked."""
        self.pairs: dict[Hashable, tuple[Floats, Floats, Floats]] = {}
        """`_edge`'s matrices by all they depend on: an unrolled layer's steps, and
        the forward and backward of alike layers, read alike values alike."""

    def build(self) -> CostModel:
        readers = [node for node in self.dag.ops if node in self.problem.rules]
        for position, arg in enumerate(self.dag.args):
            layouts = self._layouts(position, arg)
            copies = 1 + self._copied(position) + self._relaid(arg.out)
            memories = [copies * self._bytes(arg.out, layout) for layout in layouts]
            self._add(arg, layouts, [0.0] * len(layouts), memories)
        for node in readers:
            options = configurations(self.problem.rules[node], self.mesh)
            times, memories = zip(*(self._op_cost(node, config) for config in options), strict=True)
            self._add(node, options, list(times), list(memories))
        for node in readers:
            self._read_edges(node)
        self._exit_edges()
        graph = CostGraph(tuple(self.costs), tuple(self.edges))
        return CostModel(graph, self.problem, self.machine, tuple(self.nodes), tuple(self.options))

    # ------------------------------------------------------------------ nodes

    def _add(
        self, node: Node, options: Sequence[Option], times: list[float], memories: list[float]
    ) -> None:
        self.index[node] = len(self.nodes)
        self.nodes.append(node)
        self.options.append(tuple(options))
        name = f"%{node.attr('name')}" if node.is_arg else self.problem.describe(node)
        self.costs.append(CostNode(name, np.array(times, float), np.array(memories, float)))

    def _layouts(self, position: int, arg: Node) -> list[Sharding]:
        """The layouts argument `arg` may lie in: its hint alone, else replicated and
        every complete layout a reader's configuration reads it in."""
        if position in self.problem.hints:
            return [self.problem.hints[position]]
        value = arg.out
        found = {Sharding.replicated(self.mesh.name, value.sig.rank): None}
        for use in self.consumers.get(value, ()):
            if use.node not in self.problem.rules:
                continue
            rule = self.problem.rules[use.node]
            for config in configurations(rule, self.mesh):
                need = operand_layouts(rule, config, self.mesh.name)[use.operand]
                if not need.unreduced:
                    found.setdefault(need)
        return list(found)

    def _op_cost(self, node: Node, config: Config) -> tuple[float, float]:
        rule = self.problem.rules[node]
        needs = operand_layouts(rule, config, self.mesh.name)
        results = result_layouts(rule, needs, self.mesh.name)
        device = self.machine.device
        local_in = [_local(v.sig, s, self.mesh) for v, s in zip(node.inputs, needs, strict=True)]
        local_out = [
            _local(v.sig, s, self.mesh) for v, s in zip(node.results, results, strict=True)
        ]
        time = self.op_cost(node, local_in, local_out, device)
        for factor, axes in soap.internal_collectives(rule, config):
            stats = sum(
                shard_bytes(v.sig, s, self.mesh)
                for v, s, dims in zip(node.results, results, rule.results, strict=True)
                if factor not in dims
            )
            time += self._collective("all_reduce", stats, axes)
        for value, result in zip(node.results, results, strict=True):
            if value in self.kept_outputs and result.unreduced:
                time += self._reshard(result, Sharding(result.mesh, result.dims), value.sig)[0]
        held = [
            self._bytes(value, result)
            for value, result in zip(node.results, results, strict=True)
            if self._saved(value) or made_at_start(node)
        ]
        if argmax_of(node):  # its argmax, found in the forward, held until it runs
            held.append(node.inputs[0].sig.rank * math.prod(local_in[1].shape) * INDEX_BYTES)
        return time, sum(held)

    # ------------------------------------------------------------------ edges

    def _read_edges(self, reader: Node) -> None:
        rule = self.problem.rules[reader]
        target = self.index[reader]
        reader_options = self.options[target]
        for operand, value in enumerate(reader.inputs):
            if operand in rule.shape_only or value in self.problem.local:
                continue
            producer = value.node
            if producer not in self.index:
                continue  # an argument nobody splits, or a constant: read as made
            source = self.index[producer]
            made = [self._made(producer, value, option) for option in self.options[source]]
            wanted = [
                operand_layouts(rule, config, self.mesh.name)[operand] for config in reader_options
            ]
            held = self._saved(value)
            self.edges.append(self._edge(source, target, value, made, wanted, held))

    def _exit_edges(self) -> None:
        """A new weight (or optimizer state) leaves as its argument lies."""
        for output, argument in self.problem.replaces.items():
            value, arg = self.dag.outputs[output], self.dag.args[argument]
            producer = value.node
            if producer not in self.index or arg not in self.index or producer is arg:
                continue
            source, target = self.index[producer], self.index[arg]
            made = [self._made(producer, value, option) for option in self.options[source]]
            wanted = list(self.options[target])
            self.edges.append(self._edge(source, target, value, made, wanted, False))  # type: ignore[arg-type]

    def _made(self, producer: Node, value: Value, option: Option) -> Sharding:
        """The layout `value` is made in when `producer` takes `option`."""
        if isinstance(option, Sharding):
            return option
        rule = self.problem.rules[producer]
        results = result_layouts(
            rule, operand_layouts(rule, option, self.mesh.name), self.mesh.name
        )
        return results[producer.results.index(value)]

    def _edge(
        self,
        source: int,
        target: int,
        value: Value,
        made: Sequence[Sharding],
        wanted: Sequence[Sharding],
        held: bool,
    ) -> CostEdge:
        """The edge reading `value` from `made` (per source option) into `wanted` (per
        target option): each pair's resharding time and bytes, and the bytes held where
        `held`; the matrices kept by what they depend on (`pairs`), each edge its copy."""
        key = (tuple(made), tuple(wanted), value.sig, value in self.problem.local, held)
        if key not in self.pairs:
            shape = (len(made), len(wanted))
            time, moved, memory = np.zeros(shape), np.zeros(shape), np.zeros(shape)
            for i, have in enumerate(made):
                for j, want in enumerate(wanted):
                    if have == want or free_read(value, want, self.problem.local):
                        continue
                    time[i, j], moved[i, j] = self._reshard(have, want, value.sig)
                    if held and math.isfinite(time[i, j]):
                        memory[i, j] = self._bytes(value, want)
            self.pairs[key] = (time, moved, memory)
        time, moved, memory = (matrix.copy() for matrix in self.pairs[key])
        return CostEdge(source, target, time, moved, memory if memory.any() else None)

    def _saved(self, value: Value) -> bool:
        """Whether `value` holds a buffer at the step's peak as the simulator counts
        it (`ShardedStep.memory`), taken to be the turn from forward to backward: a
        forward value some backward or update op reads, a reader XLA fuses away
        standing for its own readers, unless XLA never writes the value itself
        (`fused_away`); a program result not donated. In a forward program every
        value counts. (The zero-filled result of a `made_at_start` op is held too, from
        the step's start: its op's memory, `_op_cost`; not a copy its readers hold.)"""
        problem = self.problem
        if problem.signature is None or value in self.kept_outputs:
            return True
        node = value.node
        if self._fused(value) or not (node.is_arg or node in problem.forward):
            return False
        return any(reader not in problem.forward for reader in self._readers(value))

    def _copied(self, position: int) -> bool:
        """Whether XLA copies argument `position` before writing its new value in place:
        an op the update does not wait for still reads it (`ShardedStep.memory`); the
        copy is held from the step's start, past the turn to the backward."""
        update = self.updates.get(position)
        if update is None:
            return False
        before = ancestors(update)
        readers = self._readers(self.dag.args[position].out)
        return any(reader is not update and reader not in before for reader in readers)

    def _relaid(self, value: Value) -> int:
        """How many copies of argument `value` in a convolution's layout are held at
        the turn to the backward (`CONVOLUTIONS`): one per kind of backward
        convolution reading it (the forward's is read before the turn)."""
        readers = [use.node for use in self.consumers.get(value, ())]
        backward = [r for r in readers if r not in self.problem.forward]
        return len({reader.op for reader in backward if reader.op in CONVOLUTIONS})

    def _fused(self, value: Value) -> bool:
        """Whether XLA never writes `value` (`fused_away`, on its readers at global
        shapes: an option's local shapes are not known here)."""
        if value not in self.fused:
            readers = [use.node for use in self.consumers.get(value, ())]
            self.fused[value] = not value.node.is_arg and fused_away(value, readers)
        return self.fused[value]

    def _readers(self, value: Value) -> Iterator[Node]:
        """The ops reading `value`, one XLA fuses away standing for its readers (beside
        itself where it still runs for its other results: a training batchnorm), one
        XLA duplicates into some of its readers (`duplicated_into`) together with
        those; a max-pooling's gradient does not read its input (`argmax_of`)."""
        for use in self.consumers.get(value, ()):
            reader = use.node
            if argmax_of(reader, value.node):
                continue  # it reads the argmax found in the forward, not the input
            fused = [result for result in reader.results if self._fused(result)]
            if len(reader.results) == 1 and fused:
                yield from self._readers(reader.results[0])
                continue
            for result in fused:  # computed in its readers' loops (`COMPUTED_IN_READERS`)
                yield from self._readers(result)
            yield reader
            if len(reader.results) == 1:  # readers computing `reader` in their own loop
                readers = [use.node for use in self.consumers.get(reader.results[0], ())]
                yield from duplicated_into(reader, readers)

    # ------------------------------------------------------------------ pricing

    def _reshard(self, source: Sharding, target: Sharding, sig: TensorSig) -> tuple[float, float]:
        return _reshard_cost(source, target, sig, self.mesh, self.machine)

    def _collective(self, kind: soap.CollectiveKind, nbytes: int, axes: tuple[str, ...]) -> float:
        group = tuple(axis_groups(self.mesh, axes)[0])
        return self.machine.collective_time(kind, nbytes, group)

    def _bytes(self, value: Value, sharding: Sharding) -> float:
        return float(shard_bytes(value.sig, sharding, self.mesh))


@functools.lru_cache(maxsize=1 << 16)
def _reshard_cost(
    source: Sharding, target: Sharding, sig: TensorSig, mesh: Mesh, machine: Machine
) -> tuple[float, float]:
    """(seconds, bytes per device) of the collectives turning `source` into `target`;
    (inf, inf) where none can."""
    try:
        steps = soap.reshard(source, target, sig, mesh)
    except ShardingError:
        return math.inf, math.inf
    seconds = moved = 0.0
    for step in steps:
        if step.kind == "all_slice":
            continue
        group = tuple(axis_groups(mesh, step.axes)[0])
        seconds += machine.collective_time(step.kind, step.bytes, group)
        moved += step.bytes
    return seconds, moved


def _local(sig: TensorSig, sharding: Sharding, mesh: Mesh) -> TensorSig:
    return TensorSig(sharding.local_shape(sig.shape, mesh), sig.dtype)
