"""Named strategies: which ops `soap-shard` splits how, before completion fills the rest.

A strategy reads the `Problem` and prescribes configurations for the ops it has an
opinion on, with notes for what it could not do; `plan.complete` chooses the rest.
Strategies register by their `search=` name in `STRATEGIES`. The searches that choose
by simulation (`search=mcmc`, `search=exhaustive`: `mcmc.py`, `exhaustive.py`) are
not strategies: they take the machine and limits besides the problem, start from the
plans of these two and are listed in `soap_shard.SEARCHES`.

* `data-parallel`: every forward op on the batch splits its first sample factor over
  all mesh axes (over fewer when they do not divide it, none when no axis does: that
  op is replicated, with a note).
* `expert` (FlexFlow, Jia thesis §3.3): data parallel for convolutions, pooling and
  batch normalization, model parallel for dense layers (a matmul whose right operand
  is a weight splits its output features, the `parameter` factor). For RNNs (two or
  more recurrent layers and devices for two groups), layer-wise model parallelism
  (§3.7, FlexFlow's Operator dimension): each layer on its own device group
  (`layers.py`), its ops data parallel inside it; the other ops take the rules above
  on the group `layers.place` gives them.
* `megatron` (Shoeybi et al., 2019): tensor parallelism for transformer blocks, dense
  layers in column-then-row parallel pairs (`megatron`'s docstring).

Only forward ops on the batch (what the loss depends on, fed by an input) are
prescribed: an op on weights alone, a backward op or an optimizer update has no batch
of its own, and completion makes it follow the ops around it.
"""

from __future__ import annotations

from collections.abc import Callable

from tasoc.ir.dag import Node, Value
from tasoc.ir.soap import Config, Factor, FactorKind, Mesh, OpRule
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
    batch size: data parallelism cannot split them there (a batch of 6 on 4 devices)."""
    unsplit = {}
    for node in _on_batch(problem):
        sample = _first(problem.rules[node], "sample")
        if sample is not None and not largest_split(sample.size, problem.mesh):
            unsplit[node] = sample.size
    return unsplit


def _is_weight(problem: Problem, value: Value) -> bool:
    """A weight, or a value computed from weights and constants alone."""
    if value.node.is_arg:
        return value.node.attr("index") in problem.weights
    return value.node not in problem.activations


@strategy("data-parallel")
def data_parallel(problem: Problem) -> Prescription:
    prescription = Prescription()
    notes = Notes()
    for node in _on_batch(problem):
        config = _batch_parallel(problem, node, notes, problem.mesh)
        if config is not None:
            prescription.configs[node] = config
    prescription.notes = notes.lines()
    return prescription


@strategy("expert")
def expert(problem: Problem) -> Prescription:
    prescription, in_layers = _layer_wise(problem)
    notes = Notes()
    for node in _on_batch(problem):
        mesh = prescription.mesh_of(problem, node)
        config: Config | None = None
        if node in in_layers:
            config = _batch_parallel(problem, node, notes, mesh)
        elif node.op == "matmul" and _is_weight(problem, node.inputs[1]):
            features = _first(problem.rules[node], "parameter")
            if features is not None:
                config = _split(problem, node, features, "output features", notes, mesh)
        elif node.op in CONVOLUTION_LIKE:
            config = _batch_parallel(problem, node, notes, mesh)
        if config is not None:
            prescription.configs[node] = config
    prescription.notes = prescription.notes + notes.lines()
    return prescription


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
    normalization, the residual adds) is completion's."""
    prescription = Prescription()
    notes = Notes()
    on_batch = set(_on_batch(problem))
    split_features: dict[Node, bool] = {}
    """Whether an op's result lies split by a column-parallel layer's features."""
    for node in problem.dag.ops:
        after_column = any(split_features.get(value.node, False) for value in node.inputs)
        if node not in on_batch or node.op != "matmul" or not _is_weight(problem, node.inputs[1]):
            split_features[node] = after_column and node in on_batch
            continue
        kind, what = (
            ("reduction", "input features") if after_column else ("parameter", "output features")
        )
        factor = _first(problem.rules[node], kind)
        if factor is not None:
            prescription.configs[node] = _split(problem, node, factor, what, notes, problem.mesh)
        split_features[node] = not after_column
    prescription.notes = notes.lines()
    return prescription


def _layer_wise(problem: Problem) -> tuple[Prescription, frozenset[Node]]:
    """Each recurrent layer on its own device group, and the layers' ops, when the
    program has two layers or more and the mesh devices for two groups; nothing
    otherwise, nor with hand-written shardings (they name the whole mesh: a note)."""
    layers = recurrent_layers(problem)
    groups = group_meshes(problem.mesh, len(layers)) if len(layers) > 1 else []
    if len(groups) < 2:
        return Prescription(), frozenset()
    if problem.hints:
        note = (
            f"{len(layers)} recurrent layers stay on @{problem.mesh.name}: "
            "arguments laid out by hand name it"
        )
        return Prescription(notes=[note]), frozenset()
    group = place(problem, layers, len(groups))
    return (
        Prescription(
            placement={node: groups[index] for node, index in group.items()},
            order=grouped_order(problem.dag, group),
        ),
        frozenset(node for layer in layers for node in layer.ops),
    )
