"""Named strategies: which ops `soap-shard` splits how, before completion fills the rest.

A strategy reads the `Problem` and prescribes configurations for the ops it has an
opinion on, with notes for what it could not do; `plan.complete` chooses the rest.
Strategies register by their `search=` name in `STRATEGIES`. They are the plans a
practitioner would pick, so every report compares with those that apply
(`searches.BASELINES`) and every search starts from them. The searches that choose
by simulation (`search=mcmc`, `search=exhaustive`: `mcmc.py`, `exhaustive.py`) are not
strategies: they take the machine and limits besides the problem and are listed in
`soap_shard.SEARCHES`.

* `data-parallel`: every forward op on the batch splits its first sample factor over
  all mesh axes (over fewer when they do not divide it, none when no axis does: that
  op is replicated, with a note).
* `owt` (Krizhevsky's one weird trick, arXiv:1404.5997): data parallel for
  convolutions, pooling and batch normalization, model parallel for dense layers (a
  matmul whose right operand is a weight splits its output features, the `parameter`
  factor).
* `layer-wise` (Jia thesis §3.7, FlexFlow's Operator dimension): for RNNs (two or more
  recurrent layers and devices for two groups), each layer on its own device group
  (`layers.py`), every op data parallel on its group.
* `expert` (FlexFlow's expert-designed strategy, Jia thesis §3.3 and §3.7): `owt`, with
  `layer-wise`'s groups for RNNs (the layers' ops data parallel on their group, the
  other ops OWT's rules on the group `layers.place` gives them).
* `megatron` (Shoeybi et al., 2019): tensor parallelism for transformer blocks, dense
  layers in column-then-row parallel pairs (`megatron`'s docstring).
* `dlrm-hybrid` (Naumov et al., 2019): embedding tables split by their columns,
  the rest data parallel, all-to-alls between (`dlrm_hybrid`'s docstring).
* `zero` (Rajbhandari et al., 2020, stages 1-2): data parallel with the optimizer's
  updates and state split over the devices (`zero`'s docstring).

A strategy with nothing to prescribe beyond data parallel for a program (no embedding
lookup for `dlrm-hybrid`) says why (`Prescription.inapplicable`): the pass lists it as
not applying, and `prescribe` gives data parallel for it. Only forward ops on the
batch (what the loss depends on, fed by an input) and, for `zero`, the ops making new
weights and state are prescribed: an op on weights alone or a backward op has no batch
of its own, and completion makes it follow the ops around it.
"""

from __future__ import annotations

from collections.abc import Callable

from tasoc.ir import soap
from tasoc.ir.dag import Node, Value
from tasoc.ir.soap import Config, Factor, FactorKind, Mesh, OpRule, Sharding
from tasoc.passes.soap.layers import group_meshes, grouped_order, place, recurrent_layers
from tasoc.passes.soap.plan import Prescription, Problem, largest_split

Strategy = Callable[[Problem], Prescription]

STRATEGIES: dict[str, Strategy] = {}
"""Strategy by `search=` name."""

CONVOLUTION_LIKE = frozenset({"conv2d", "pool2d", "enlarge", "batchnorm", "batchnorm_train"})
"""Ops the expert strategy runs data parallel: few weights, much work per sample."""


def strategy(name: str) -> Callable[[Strategy], Strategy]:
    def register(fn: Strategy) -> Strategy:
        STRATEGIES[name] = fn
        return fn

    return register


def _first(rule: OpRule, kind: FactorKind) -> Factor | None:
    return next((f for f in rule.factors if f.kind == kind), None)


class Notes:
    """What a strategy could not do, one note per kind of shortfall naming its ops (the
    first few, then how many more): a batch of 4 on a 2x4 mesh falls short in every
    layer, and one line says so better than a hundred."""

    SHOWN = 5
    """Ops named per note."""

    def __init__(self) -> None:
        self._ops: dict[str, list[str]] = {}

    def add(self, shortfall: str, op: str) -> None:
        self._ops.setdefault(shortfall, []).append(op)

    def lines(self) -> list[str]:
        lines = []
        for shortfall, ops in self._ops.items():
            named = ", ".join(ops[: self.SHOWN])
            more = f" and {len(ops) - self.SHOWN} more" if len(ops) > self.SHOWN else ""
            lines.append(f"{shortfall}: {named}{more}")
        return lines


def _split(
    problem: Problem, node: Node, factor: Factor, what: str, notes: Notes, mesh: Mesh
) -> Config:
    """`factor` over as many axes of `mesh` as divide it, with a note when not all do."""
    axes = largest_split(factor.size, mesh)
    if mesh.size == 1:  # nothing to split, nothing to note
        return {}
    if not axes:
        notes.add(
            f"{what} {factor.size} splits over no axis of the mesh; replicated",
            problem.describe(node),
        )
    elif axes != mesh.axis_names:
        notes.add(
            f"{what} {factor.size} splits over {', '.join(axes)} only", problem.describe(node)
        )
    return {factor.name: axes} if axes else {}


def _batch_parallel(problem: Problem, node: Node, notes: Notes, mesh: Mesh) -> Config | None:
    """The op's first sample factor split (None when it has no sample factor)."""
    sample = _first(problem.rules[node], "sample")
    return None if sample is None else _split(problem, node, sample, "batch", notes, mesh)


def _on_batch(problem: Problem) -> list[Node]:
    """The forward ops fed by an input: those with a batch to split."""
    return [n for n in problem.dag.ops if n in problem.forward and n in problem.activations]


def unsplit_batch(problem: Problem) -> dict[Node, int]:
    """The ops with a batch to split whose batch no axis of the mesh divides, with that
    batch size: data parallelism cannot split them there (a batch of 6 on 4 devices;
    none on one device, where there is nothing to split)."""
    unsplit = {}
    for node in _on_batch(problem):
        sample = _first(problem.rules[node], "sample")
        if (
            sample is not None
            and problem.mesh.size > 1
            and not largest_split(sample.size, problem.mesh)
        ):
            unsplit[node] = sample.size
    return unsplit


def _is_weight(problem: Problem, value: Value) -> bool:
    """A weight, or a value computed from weights and constants alone."""
    if value.node.is_arg:
        return value.node.attr("index") in problem.weights
    return value.node not in problem.activations


def _per_op(
    problem: Problem, prescription: Prescription, choose: Callable[[Node, Mesh], Config | None]
) -> None:
    """Prescribe `choose`'s configuration (None: none) for every op with a batch, on the
    mesh `prescription` places it on."""
    for node in _on_batch(problem):
        config = choose(node, prescription.mesh_of(problem, node))
        if config is not None:
            prescription.configs[node] = config


def _batch_everywhere(problem: Problem, prescription: Prescription) -> Prescription:
    """`prescription` with every op with a batch split by it (on its group), its notes
    extended with what did not split."""
    notes = Notes()
    _per_op(problem, prescription, lambda node, mesh: _batch_parallel(problem, node, notes, mesh))
    prescription.notes = prescription.notes + notes.lines()
    return prescription


@strategy("data-parallel")
def data_parallel(problem: Problem) -> Prescription:
    return _batch_everywhere(problem, Prescription())


def _dense(problem: Problem, node: Node) -> Factor | None:
    """The output-feature factor of a dense layer (a matmul whose right operand is a
    weight), None for another op."""
    if node.op != "matmul" or not _is_weight(problem, node.inputs[1]):
        return None
    return _first(problem.rules[node], "parameter")


def _owt(problem: Problem, prescription: Prescription, in_layers: frozenset[Node]) -> bool:
    """Prescribe one weird trick's configurations (Krizhevsky, 2014) in `prescription`:
    dense layers split by their output features, convolution-like ops by the batch;
    the ops of `in_layers` (layer-wise RNN layers) by the batch on their group. Whether
    some dense layer was split: the trick differs from data parallel only there."""
    notes = Notes()
    split_dense = False

    def choose(node: Node, mesh: Mesh) -> Config | None:
        nonlocal split_dense
        features = None if node in in_layers else _dense(problem, node)
        if features is not None:
            config = _split(problem, node, features, "output features", notes, mesh)
            split_dense = split_dense or bool(config)
            return config
        if node in in_layers or node.op in CONVOLUTION_LIKE:
            return _batch_parallel(problem, node, notes, mesh)
        return None

    _per_op(problem, prescription, choose)
    prescription.notes = prescription.notes + notes.lines()
    return split_dense


NO_DENSE = "no dense layer (a matmul by a weight) whose output features the mesh splits"
"""Why OWT does not apply."""


@strategy("owt")
def owt(problem: Problem) -> Prescription:
    """Krizhevsky's one weird trick (arXiv:1404.5997): convolutions, pooling and
    normalization data parallel (much work per weight), dense layers model parallel
    (many weights per unit of work), each dense layer's output features over the mesh;
    completion chooses the rest (element-wise ops follow their producers)."""
    prescription = Prescription()
    if not _owt(problem, prescription, frozenset()):
        prescription.inapplicable = NO_DENSE
    return prescription


@strategy("expert")
def expert(problem: Problem) -> Prescription:
    """FlexFlow's expert-designed strategy (Jia thesis §3.7): OWT, with layer-wise
    model parallelism for RNNs (each recurrent layer on its own device group, its ops
    data parallel there)."""
    prescription, in_layers, no_layers = _layer_wise(problem)
    if not _owt(problem, prescription, in_layers) and no_layers is not None:
        prescription.inapplicable = f"{NO_DENSE}, and {no_layers}"
    return prescription


@strategy("layer-wise")
def layer_wise(problem: Problem) -> Prescription:
    """Layer-wise model parallelism for RNNs (`layers.py`): each recurrent layer on its
    own device group, every op with a batch data parallel on its group."""
    prescription, _, no_layers = _layer_wise(problem)
    prescription.inapplicable = no_layers
    return _batch_everywhere(problem, prescription)


@strategy("megatron")
def megatron(problem: Problem) -> Prescription:
    """Megatron-LM's tensor parallelism (Shoeybi et al., 2019, §3): in each pair of
    dense layers, the first splits its output features (column parallel: the MLP's
    first GEMM, attention's Q, K and V by heads) and the second its input features (row
    parallel: the MLP's second GEMM, attention's output projection), so what lies
    between them (GELU, attention by heads) needs nothing from other devices, and one
    all-reduce of the second's partial sums completes the pair. A dense layer is row
    parallel when its input was computed from a column-parallel one's output through
    no other dense layer; every other is column parallel. The rest (embeddings,
    normalization, the residual adds) is completion's. It applies where some pair's
    row-parallel layer splits."""
    prescription = Prescription()
    notes = Notes()
    on_batch = set(_on_batch(problem))
    split_features: dict[Node, bool] = {}
    """Whether an op's result lies split by a column-parallel layer's features."""
    pairs = 0
    for node in problem.dag.ops:
        after_column = any(split_features.get(value.node, False) for value in node.inputs)
        if node not in on_batch or _dense(problem, node) is None:
            split_features[node] = after_column and node in on_batch
            continue
        kind, what = (
            ("reduction", "input features") if after_column else ("parameter", "output features")
        )
        factor = _first(problem.rules[node], kind)
        if factor is not None:
            config = _split(problem, node, factor, what, notes, problem.mesh)
            prescription.configs[node] = config
            pairs += bool(config) and after_column
        split_features[node] = not after_column
    prescription.notes = notes.lines()
    if not pairs:
        prescription.inapplicable = (
            "no pair of dense layers (one reading the other's output features) the mesh splits"
        )
    return prescription


@strategy("dlrm-hybrid")
def dlrm_hybrid(problem: Problem) -> Prescription:
    """DLRM's hybrid parallelism (Naumov et al., 2019, §4; Mudigere et al., 2021):
    embedding tables model parallel, the MLPs and the interaction data parallel, an
    all-to-all between. Each lookup (`graph.embedding` of a weight table) splits the
    table's embedding columns over the mesh (the column-wise sharding of Mudigere et
    al.: each device holds 1/N of every table and looks up its columns for the whole
    batch), and so does the scatter-add making that table's gradient from the same ids,
    so the gradient comes back by an all-to-all of the lookups' gradients, not a
    reduce-scatter of a whole table. The SOAP rule splits neither a table's rows
    (which rows a device needs depends on the ids) nor the set of tables (each is an
    op of its own on the one mesh): table-wise and row-wise sharding are not
    expressible."""
    prescription = data_parallel(problem)
    notes = Notes()
    by_ids: dict[Value, Config] = {}
    """The ids of each split lookup, with its configuration."""
    for node in _on_batch(problem):
        if node.op != "embedding" or not _is_weight(problem, node.inputs[1]):
            continue
        columns = _first(problem.rules[node], "parameter")
        if columns is not None:
            config = _split(problem, node, columns, "embedding columns", notes, problem.mesh)
            if config:
                prescription.configs[node] = config
                by_ids[node.inputs[0]] = config
    for node in problem.dag.ops:
        if node.op == "scatter_add" and node not in problem.forward and node.inputs[0] in by_ids:
            prescription.configs[node] = by_ids[node.inputs[0]]
    prescription.notes = prescription.notes + notes.lines()
    if not by_ids:
        prescription.inapplicable = (
            "no embedding lookup (graph.embedding of a weight table) whose columns the mesh splits"
        )
    return prescription


@strategy("zero")
def zero(problem: Problem) -> Prescription:
    """ZeRO's sharded optimizer (Rajbhandari et al., 2020, stages 1 and 2): data
    parallel, but the op making each new weight or optimizer state (`adam_update`,
    SGD's and momentum's adds) splits the weight's dims over the mesh (`_update_split`),
    and the optimizer state lies split the same way: each device keeps 1/N of the
    state and updates 1/N of each weight. The gradient's partial sums reach the update
    by a reduce-scatter instead of an all-reduce, and the new weight, which leaves the
    step replicated as its argument lies (weights stay replicated: stage 3 would split
    them too), by an all-gather."""
    prescription = data_parallel(problem)
    signature = problem.signature
    if signature is None or not signature.replaces:
        prescription.inapplicable = "no optimizer update (not a training step)"
        return prescription
    dag, mesh = problem.dag, problem.mesh
    optimized = {*signature.params, *signature.state}
    updates: set[Node] = set()
    for output, argument in signature.replaces:
        value = dag.outputs[output]
        node = value.node
        if argument not in optimized or node.is_arg or node in problem.forward:
            continue
        rule = problem.rules[node]
        config = prescription.configs.get(node) or _update_split(
            rule.results[value.index], rule, mesh
        )
        if not config:
            continue
        prescription.configs[node] = config
        updates.add(node)
        _, results = soap.shardings_for(rule, config, mesh.name)
        layout = results[value.index]
        replicated = Sharding.replicated(mesh.name, value.sig.rank)
        prescription.layouts[argument] = layout if argument in signature.state else replicated
    if not updates:
        prescription.inapplicable = "no weight update whose dims the mesh splits"
    return prescription


def _update_split(dims: tuple[str | None, ...], rule: OpRule, mesh: Mesh) -> Config:
    """The configuration of an update splitting its result (a weight's shape) over the
    most devices: the dim of the largest split, the first of equals ({} when none
    splits)."""
    best: Config = {}
    for name in dims:
        if name is None:
            continue
        axes = largest_split(rule.by_name[name].size, mesh)
        if mesh.degree(axes) > mesh.degree(next(iter(best.values()), ())):
            best = {name: axes}
    return best


def _layer_wise(problem: Problem) -> tuple[Prescription, frozenset[Node], str | None]:
    """Each recurrent layer on its own device group, and the layers' ops, when the
    program has two layers or more and the mesh devices for two groups; else nothing,
    and why (also with hand-written shardings, which name the whole mesh)."""
    layers = recurrent_layers(problem)
    if len(layers) < 2:
        return Prescription(), frozenset(), f"{len(layers)} recurrent layers, not two or more"
    groups = group_meshes(problem.mesh, len(layers))
    if len(groups) < 2:
        why = f"mesh @{problem.mesh.name} of {problem.mesh.size} devices makes no two groups"
        return Prescription(), frozenset(), why
    if problem.hints:
        why = (
            f"{len(layers)} recurrent layers stay on @{problem.mesh.name}: "
            "arguments laid out by hand name it"
        )
        return Prescription(notes=[why]), frozenset(), why
    group = place(problem, layers, len(groups))
    return (
        Prescription(
            placement={node: groups[index] for node, index in group.items()},
            order=grouped_order(problem.dag, group),
        ),
        frozenset(node for layer in layers for node in layer.ops),
        None,
    )


def prescribe(problem: Problem, name: str) -> Prescription:
    """Strategy `name`'s prescription; where it does not apply, data parallel's with a
    note saying so (what a practitioner's recipe gives a program it has nothing for)."""
    prescription = STRATEGIES[name](problem)
    if prescription.inapplicable is None:
        return prescription
    fallback = data_parallel(problem)
    fallback.notes = [
        f"search={name} does not apply ({prescription.inapplicable}): the plan is data parallel's",
        *fallback.notes,
    ]
    fallback.inapplicable = prescription.inapplicable
    return fallback
