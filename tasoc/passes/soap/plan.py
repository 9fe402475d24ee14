"""The problem `soap-shard` solves and the completion every strategy ends with.

A strategy prescribes configurations for the ops it has an opinion on (data parallel:
the layers' batch; expert: convolutions' batch, dense layers' output features);
`complete` chooses one for every other op and a sharding for every argument, on the
light graph (`ir/dag.py`), never on xDSL modules. The result is a `Plan`, which
`tasoc.ir.shard_plan.write_sharded` turns into IR.

Completion walks the ops in topological order and gives each the configuration
(among `soap.configurations`) that costs the fewest bytes of resharding: its operands
from the shardings their producers gave them, plus its results into the sharding they
must leave the program in when they are outputs (a new weight takes its argument's
sharding so steps chain; any other output is completed). That lookahead is what keeps
a weight update from being split and gathered back when an all-reduce of the
gradient does. Ties go to the configuration slicing fewer operands that already lie
somewhere (a replicated value stays free for every consumer), then to the larger total
degree (more devices share the work), then to the first in `soap.configurations`'
order, so the plan is deterministic. Operands of a linear op may stay partial sums
(a gradient scaled by the learning rate is reduced once, after the scaling) when the
op's rule allows it. So backward ops follow their forward op's configuration (anything else costs
communication) and weight gradients of a split batch come out as partial sums.

Values with no sharding yet, inputs, labels and constants, take the one their first
consumer wants, at no cost: an input is laid out as the first layer reads it. Some
reads cost nothing whatever the layout, and neither count nor break ties: an operand
read for its shape alone (`OpRule.shape_only`), and a value that depends on no
argument (`Problem.local`), which the writer makes where it is read
(`tasoc.ir.shard_plan`).

A strategy may place ops and arguments on device groups (`Prescription.placement`,
FlexFlow's Operator dimension): each op then chooses among the configurations of its
group's mesh, and a value read on another group is completed where it lies and copied
over (`parallel.replicate`), priced at its whole size. Partial sums never leave their
run of ops on one group (`runs`).
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tasoc.ir import soap
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.shapes import TensorSig
from tasoc.ir.shard_plan import Plan, completed, free_read, local_values, moves
from tasoc.ir.soap import Config, Mesh, OpRule, Sharding, ShardingError
from tasoc.ir.training import TrainingSignature


class PlanError(ValueError):
    """A program `soap-shard` cannot plan (an op without a SOAP rule, a bad hint); one line."""


@dataclass(frozen=True)
class Problem:
    """A program, the mesh it is planned on, and what its arguments and results are."""

    dag: Dag
    mesh: Mesh
    signature: TrainingSignature | None
    """The training roles of arguments and results; None for a forward program."""
    hints: Mapping[int, Sharding]
    """Argument index -> the sharding a user fixed for it (`parallel.sharding`)."""
    rules: Mapping[Node, OpRule] = field(init=False)
    """Each op's SOAP rule (ops without operands, constants, have none: they are made
    in the sharding their first consumer wants)."""
    forward: frozenset[Node] = field(init=False)
    """The ops the loss depends on (every op of a forward program)."""
    weights: frozenset[int] = field(init=False)
    """Arguments that are weights or optimizer state (laid out before any op)."""
    activations: frozenset[Node] = field(init=False)
    """The ops that depend on an input or the labels, not on weights and constants alone."""
    local: frozenset[Value] = field(init=False)
    """The values that depend on no argument (`shard_plan.local_values`): read in any
    complete layout at no cost, since the writer makes them where they are read."""

    def __post_init__(self) -> None:
        rules = {}
        for node in self.dag.ops:
            if not node.inputs:
                continue
            try:
                rules[node] = soap.rule_of(
                    node.op, [v.sig for v in node.inputs], dict(node.attrs), node.sigs
                )
            except ShardingError as err:
                raise PlanError(f"graph.{node.op}: {err}") from None
        object.__setattr__(self, "rules", rules)
        object.__setattr__(self, "forward", self._loss_ancestors())
        params = (i for i, arg in enumerate(self.dag.args) if arg.attr("is_param"))
        state = self.signature.state if self.signature else ()
        object.__setattr__(self, "weights", frozenset((*params, *state)))
        object.__setattr__(self, "activations", self._input_descendants())
        object.__setattr__(self, "local", local_values(self.dag, rules))

    @property
    def replaces(self) -> dict[int, int]:
        """Output index -> the argument it is the next value of (training steps)."""
        return dict(self.signature.replaces) if self.signature else {}

    def _loss_ancestors(self) -> frozenset[Node]:
        if self.signature is None or self.signature.loss is None:
            return frozenset(self.dag.ops)
        seen: set[Node] = set()
        stack = [self.dag.outputs[self.signature.loss].node]
        while stack:
            node = stack.pop()
            if node in seen or node.is_arg:
                continue
            seen.add(node)
            stack.extend(v.node for v in node.inputs)
        return frozenset(seen)

    def _input_descendants(self) -> frozenset[Node]:
        weights = self.weights
        sources = {arg for i, arg in enumerate(self.dag.args) if i not in weights}
        found: set[Node] = set()
        for node in self.dag.ops:
            if any(v.node in sources or v.node in found for v in node.inputs):
                found.add(node)
        return frozenset(found)

    def describe(self, node: Node) -> str:
        """`graph.conv2d #3`: an op by name and its place among `@main`'s graph ops
        (the sharded program keeps their order), for notes."""
        return f"graph.{node.op} #{self.dag.position()[node]}"


@dataclass
class Prescription:
    """What a strategy decides before completion fills in the rest."""

    configs: dict[Node, Config] = field(default_factory=dict)
    """The configurations it fixes (each on its op's mesh)."""
    notes: list[str] = field(default_factory=list)
    """What it could not do, for the report."""
    placement: dict[Node, Mesh] = field(default_factory=dict)
    """Op or argument -> the device group it runs on; a node not here runs on the
    problem's whole mesh. Empty for strategies on one mesh."""
    layouts: dict[int, Sharding] = field(default_factory=dict)
    """Argument index -> the layout it lies in (as a hint fixes it; hints win)."""
    order: tuple[Node, ...] | None = None
    """The order to run the ops in (the dag's when None): ops of one group kept
    together, since each change of group is a new computation on other devices."""
    inapplicable: str | None = None
    """Why the strategy has nothing to prescribe here beyond data parallel (no embedding
    lookup for DLRM's hybrid, no optimizer update for ZeRO), None when it has: a baseline
    that does not apply is not simulated, and a `search=` of it writes data parallel."""

    def mesh_of(self, problem: Problem, node: Node) -> Mesh:
        return self.placement.get(node, problem.mesh)


def largest_split(size: int, mesh: Mesh) -> tuple[str, ...]:
    """The mesh axes (in mesh order) splitting a dim of `size` into the most pieces;
    all axes when they divide it, () when none does. Ties go to the earlier set."""
    best: tuple[str, ...] = ()
    for count in range(len(mesh.axes), 0, -1):
        for axes in itertools.combinations(mesh.axis_names, count):
            if size % mesh.degree(axes) == 0 and mesh.degree(axes) > mesh.degree(best):
                best = axes
    return best


def complete(problem: Problem, prescription: Prescription) -> Plan:
    """The plan keeping the hints and the prescribed configurations and placement and
    completing the rest (see the module docstring)."""
    dag = problem.dag
    mesh_of = functools.partial(prescription.mesh_of, problem)
    groups = tuple(sorted(set(prescription.placement.values()), key=lambda m: m.device_ids))
    meshes = {mesh.name: mesh for mesh in (problem.mesh, *groups)}
    fixed = {**prescription.layouts, **problem.hints}
    values: dict[Value, Sharding] = {dag.args[i].out: s for i, s in fixed.items()}
    _lay_out_weights(problem, prescription, values)
    exits: dict[Value, list[int]] = {}
    for index, value in enumerate(dag.outputs):
        exits.setdefault(value, []).append(index)
    order = prescription.order or dag.ops
    run_of = runs(order, prescription.placement)
    configs: dict[Node, Config] = {}
    operands: dict[Node, tuple[Sharding, ...]] = {}
    for node in order:
        if not node.inputs:
            continue
        rule, mesh = problem.rules[node], mesh_of(node)
        candidates = [prescription.configs[node]] if node in prescription.configs else None
        config, needs = _cheapest(
            problem, meshes, mesh, rule, candidates, node, values, exits, run_of
        )
        for value, need in zip(node.inputs, needs, strict=True):
            values.setdefault(value, need)
        values.update(zip(node.results, result_layouts(rule, needs, mesh.name), strict=True))
        configs[node], operands[node] = config, needs
    for node in (*dag.args, *order):
        for value in node.results:
            values.setdefault(value, Sharding.replicated(mesh_of(node).name, value.sig.rank))
    outputs = tuple(
        _exit(problem, values, index, values[value]) for index, value in enumerate(dag.outputs)
    )
    return Plan(
        configs, operands, values, outputs, list(prescription.notes), groups, prescription.order
    )


def cheapest_config(
    problem: Problem,
    plan: Plan,
    node: Node,
    mesh: Mesh,
    candidates: Sequence[Config],
    run_of: Mapping[Node, int],
) -> tuple[Config, tuple[Sharding, ...]]:
    """The one of `candidates` (configurations on `mesh`) completion would give `node`
    where `plan` lays out its operands as it does now, and the operand layouts it would
    read them in: the fewest bytes of resharding its operands and its results into the
    layouts they leave the program in (`_cheapest`'s order of ties), partial sums read
    as they are where the op is linear in them (in its run, `run_of`: `runs`).
    What a search's proposal gives the op it edits and, propagating, its readers
    (not kept as completion's choices are: with a few dozen candidates per call the
    key is no longer cheap, and a chain's proposals were not measured faster kept)."""
    meshes = {m.name: m for m in (problem.mesh, *plan.meshes)}
    exits: dict[Value, list[int]] = {}
    for index, value in enumerate(problem.dag.outputs):
        if value.node is node:
            exits.setdefault(value, []).append(index)
    rule = problem.rules[node]
    return _cheapest_of(problem, meshes, mesh, rule, candidates, node, plan.values, exits, run_of)


def runs(order: Sequence[Node], placement: Mapping[Node, Mesh]) -> dict[Node, int]:
    """Each op's run, on a program on device groups: the consecutive ops (constants
    aside, which go where they are read) on one group, which run as one computation.
    A partial sum must be completed in its run, since it cannot pass between two.
    Empty on one mesh: the whole program is one run."""
    run_of: dict[Node, int] = {}
    if not placement:
        return run_of
    run, mesh = 0, None
    for node in order:
        if node.inputs and placement[node] != mesh:
            run, mesh = run + 1, placement[node]
        run_of[node] = run
    return run_of


def _lay_out_weights(
    problem: Problem, prescription: Prescription, values: dict[Value, Sharding]
) -> None:
    """Weights: replicated on their group unless a prescribed op reads one split (a
    model-parallel dense layer), in the sharding the first such op wants. Optimizer
    state (momentum, Adam's moments) lies as the weight of its type on its group does,
    so updates stay local."""
    dag = problem.dag
    wanted: dict[Value, Sharding] = {}
    for node in dag.ops:
        if node not in prescription.configs:
            continue
        mesh = prescription.mesh_of(problem, node)
        needs, _ = soap.shardings_for(problem.rules[node], prescription.configs[node], mesh.name)
        for value, need in zip(node.inputs, needs, strict=True):
            if value.node.is_arg and not need.is_replicated:
                wanted.setdefault(value, need)
    state = set(problem.signature.state if problem.signature else ())
    by_type: dict[tuple[object, str], Sharding] = {}
    for arg in dag.args:
        mesh = prescription.mesh_of(problem, arg)
        if arg.attr("is_param") and arg.out not in values:
            values[arg.out] = wanted.get(arg.out, Sharding.replicated(mesh.name, arg.out.sig.rank))
        if arg.attr("is_param") and not values[arg.out].is_replicated:
            by_type.setdefault((arg.out.sig, values[arg.out].mesh), values[arg.out])
    for index in sorted(state):
        value = dag.args[index].out
        mesh = prescription.mesh_of(problem, dag.args[index])
        if value not in values:
            values[value] = by_type.get(
                (value.sig, mesh.name), Sharding.replicated(mesh.name, value.sig.rank)
            )


def _move_bytes(
    source: Sharding, target: Sharding, sig: TensorSig, meshes: Mapping[str, Mesh]
) -> int:
    """What `moves` communicates, per device (all-slices are local)."""
    if source.mesh == target.mesh:
        return _reshard_bytes(source, target, sig, meshes[source.mesh])
    return sum(
        step.bytes for step in moves(source, target, sig, meshes) if step.kind != "all_slice"
    )


def _exit(
    problem: Problem, values: Mapping[Value, Sharding], index: int, produced: Sharding
) -> Sharding:
    """The sharding output `index` leaves the program in, produced as `produced`: that
    of the argument it replaces (so the next step reads it as this one did), else
    `produced` with its partial sums completed."""
    replaced = problem.replaces.get(index)
    if replaced is not None and problem.dag.args[replaced].out in values:
        return values[problem.dag.args[replaced].out]
    return completed(produced)


CHEAPEST_KEPT = 1 << 16
"""The most answers of `_cheapest` kept (`_kept_cheapest`) before it starts again."""

_kept_cheapest: dict[Hashable, tuple[Config, tuple[Sharding, ...]]] = {}
"""`_cheapest`'s answers by all they depend on (`_cheapest_key`)."""


def _cheapest(
    problem: Problem,
    meshes: Mapping[str, Mesh],
    mesh: Mesh,
    rule: OpRule,
    candidates: Sequence[Config] | None,
    node: Node,
    values: Mapping[Value, Sharding],
    exits: Mapping[Value, Sequence[int]],
    run_of: Mapping[Node, int],
) -> tuple[Config, tuple[Sharding, ...]]:
    """`_cheapest_of` (candidates None: every configuration of `rule` on `mesh`), kept
    by what it depends on: an unrolled RNN's 40 steps, its forward and backward and a
    ResNet's blocks ask alike, and completion asks once per op and plan (13 plans of
    3,000-6,000 ops before a 64-device pass's first proposal). An op whose results
    leave the program is not kept (its answer reads the arguments' layouts too)."""
    if any(value in exits for value in node.results):
        return _cheapest_of(problem, meshes, mesh, rule, candidates, node, values, exits, run_of)
    key = _cheapest_key(problem, meshes, mesh, rule, candidates, node, values, run_of)
    kept = _kept_cheapest.get(key)
    if kept is None:
        if len(_kept_cheapest) >= CHEAPEST_KEPT:
            _kept_cheapest.clear()
        kept = _kept_cheapest[key] = _cheapest_of(
            problem, meshes, mesh, rule, candidates, node, values, exits, run_of
        )
    return dict(kept[0]), kept[1]


def _cheapest_key(
    problem: Problem,
    meshes: Mapping[str, Mesh],
    mesh: Mesh,
    rule: OpRule,
    candidates: Sequence[Config] | None,
    node: Node,
    values: Mapping[Value, Sharding],
    run_of: Mapping[Node, int],
) -> Hashable:
    """All `_cheapest_of` reads of an op none of whose results leaves the program: its
    rule (factors, dims, linear groups, shape-only operands) and result types, the
    mesh and the meshes its operands may lie on, the candidates, and per operand its
    layout (or none yet), its type, whether it is local (`free_read`) and whether its
    producer runs in the op's run (`_operand_choices`)."""
    run = run_of.get(node)
    return (
        rule,
        node.sigs,
        mesh,
        tuple(meshes.items()),
        None if candidates is None else tuple(tuple(sorted(c.items())) for c in candidates),
        tuple(
            (values.get(value), value.sig, value in problem.local, run_of.get(value.node) == run)
            for value in node.inputs
        ),
    )


def _cheapest_of(
    problem: Problem,
    meshes: Mapping[str, Mesh],
    mesh: Mesh,
    rule: OpRule,
    candidates: Sequence[Config] | None,
    node: Node,
    values: Mapping[Value, Sharding],
    exits: Mapping[Value, Sequence[int]],
    run_of: Mapping[Node, int],
) -> tuple[Config, tuple[Sharding, ...]]:
    """The candidate configuration (and operand shardings) resharding the fewest bytes;
    ties to the one slicing fewer operands, then to the larger total degree, then to
    the earlier candidate. The candidates are configurations on `mesh`, the op's.

    A slice (`all_slice`) costs no communication but commits a value that was free to
    be read any way; without the second key an op on replicated weights alone (a
    weight's transpose in the backward) would split them because it can, and its
    consumer would pay to gather them back."""
    best: tuple[tuple[int, int, int, int], Config, tuple[Sharding, ...]] | None = None
    if candidates is None:
        candidates = soap.configurations(rule, mesh)
    for order, config in enumerate(candidates):
        degree = mesh.degree([axis for axes in config.values() for axis in axes])
        for needs in _operand_choices(rule, config, node, values, mesh.name, run_of):
            try:
                moved = [
                    _move_bytes(values[value], need, value.sig, meshes)
                    for index, (value, need) in enumerate(zip(node.inputs, needs, strict=True))
                    if value in values
                    and values[value] != need
                    and index not in rule.shape_only
                    and not free_read(value, need, problem.local)
                ]
                cost = sum(moved)
                results = result_layouts(rule, needs, mesh.name)
                for value, result in zip(node.results, results, strict=True):
                    for index in exits.get(value, ()):
                        target = _exit(problem, values, index, result)
                        if not free_read(value, target, problem.local):
                            cost += _move_bytes(result, target, value.sig, meshes)
            except ShardingError:
                continue
            key = (cost, moved.count(0), -degree, order)
            if best is None or key < best[0]:
                best = (key, config, needs)
    if best is None:
        raise PlanError(f"{problem.describe(node)} has no configuration its operands can reach")
    return best[1], best[2]


# The same shapes, rules and layouts recur layer after layer (and forward, backward and
# update alike), so the engine's answers are kept: they are pure functions of hashable
# values, and computing them was nine tenths of the pass's time on a resnet50 step.
_reshard_bytes = functools.lru_cache(maxsize=1 << 16)(soap.reshard_bytes)


@functools.lru_cache(maxsize=1 << 16)
def result_layouts(rule: OpRule, operands: tuple[Sharding, ...], mesh: str) -> tuple[Sharding, ...]:
    return tuple(soap.propagate(rule, operands, mesh)[0])


@functools.lru_cache(maxsize=1 << 16)
def _operand_layouts(
    rule: OpRule, config: tuple[tuple[str, tuple[str, ...]], ...], mesh: str
) -> tuple[Sharding, ...]:
    return tuple(soap.shardings_for(rule, dict(config), mesh)[0])


def operand_layouts(rule: OpRule, config: Config, mesh: str) -> tuple[Sharding, ...]:
    """The complete operand shardings `config` reads (cached, as `result_layouts`)."""
    return _operand_layouts(rule, tuple(sorted(config.items())), mesh)


def _operand_choices(
    rule: OpRule,
    config: Config,
    node: Node,
    values: Mapping[Value, Sharding],
    mesh: str,
    run_of: Mapping[Node, int],
) -> Iterator[tuple[Sharding, ...]]:
    """The operand shardings `config` reads: complete ones, and, for each group of
    operands the op is jointly linear in whose producers all left partial sums along
    the same axes (not axes the configuration splits) in the op's run (`runs`), those
    partial sums as they are.

    Partial sums pass on only into results no larger than them: completing them later
    costs what completing them now does, whereas a matmul turning a partial gradient
    of activations into a partial gradient of a large weight would reduce far more
    bytes than it saved."""
    needs = operand_layouts(rule, config, mesh)
    yield needs
    used = {axis for axes in config.values() for axis in axes}
    largest_result = max(sig.size for sig in node.sigs)
    for group in rule.linear:
        if largest_result > min(node.inputs[i].sig.size for i in group):
            continue
        sources = [values.get(node.inputs[i]) for i in group]
        if any(run_of.get(node.inputs[i].node) != run_of.get(node) for i in group):
            continue
        pending = {s.unreduced if s is not None else () for s in sources}
        if len(pending) != 1:
            continue
        unreduced = next(iter(pending))
        if not unreduced or used & set(unreduced):
            continue
        partial = list(needs)
        for i in group:
            partial[i] = Sharding(mesh, needs[i].dims, unreduced)
        yield tuple(partial)
