"""Build one training step from a forward program, on the light graph.

`training_step(forward, options)` returns the step as a `Dag`:

    @main(inputs..., labels, params..., optimizer state...)
        -> (loss, new params..., new state...)           emit=step
    @main(inputs..., labels, params...) -> (loss, gradients...)   emit=gradients

with the marks of `tasoc.ir.training` on arguments and results. It works in four
parts, each a loop over nodes in program order:

1. *Forward.* The forward program is rebuilt on the new arguments. Inference
   `batchnorm` becomes `batchnorm_train` (batch statistics, as frameworks train),
   and each running mean/variance weight that feeds only a batchnorm gets its
   moving average (`bn-momentum`) as its new value instead of an optimizer update.
2. *Loss* (`losses.py`), a rank-0 value.
3. *Backward.* Reverse-mode accumulation over the loss's ancestors in reverse
   program order, starting from a gradient of one: each node's rule (`rules.py`)
   gets its results' gradients, which are complete by then (every consumer comes
   later in program order, so earlier in the sweep), and returns its operands'.
   Gradients reaching one value from several consumers are added (fan-out, shared
   RNN weights). Only values that depend on a trained weight are differentiated,
   so no gradient is computed for the inputs.
4. *Update* (`optimizers.py`). A weight's update is written as soon as its last use
   has been swept, so the step's program order is the framework order: forward,
   then the backward layer by layer, each layer's weights updated as the sweep
   leaves them, which keeps few gradients alive at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING

from xdsl.dialects.builtin import IntegerAttr, UnitAttr, i64

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.program import NamedAttrs, named
from tasoc.ir.shapes import TensorSig
from tasoc.ir.training import (
    GRADIENT_OF_ATTR,
    LABELS_ATTR,
    LOSS_ATTR,
    REPLACES_ATTR,
    STATE_ATTR,
)
from tasoc.passes.autodiff.losses import attach_loss, check_labels, labels_sig
from tasoc.passes.autodiff.optimizers import (
    Hyperparameters,
    Optimizer,
    Updater,
    shared_state,
    slots,
)
from tasoc.passes.autodiff.rules import VJP
from tasoc.passes.autodiff.writer import StepWriter

if TYPE_CHECKING:
    from tasoc.passes.autodiff.autodiff import AutodiffPass

LABELS_NAME = "labels"
"""The name of the labels argument `autodiff` adds."""

_BATCHNORM_STATISTICS = {3: 1, 4: 2}
"""Operand index of an inference batchnorm's mean and variance -> the index of the
matching batch statistic among `batchnorm_train`'s results."""


class AutodiffError(ValueError):
    """The forward program cannot be made a training step (one line)."""


@dataclass(frozen=True)
class TrainingStep:
    """The step and what the report says about it."""

    dag: Dag
    trained: int
    """Weights updated by the optimizer (float weights that are not running statistics)."""
    running_statistics: int
    """Batchnorm mean/variance weights updated by their moving average."""
    state: int
    """Optimizer state arguments."""


@dataclass(frozen=True)
class _Layout:
    """The step's arguments, by role, as new argument nodes."""

    args: tuple[Node, ...]
    inputs: dict[Node, Node]
    """Forward argument node -> the step's argument node (inputs and weights)."""
    labels: Node | None
    params: tuple[Node, ...]
    """The step's weight arguments, in the forward's order."""
    state: dict[Node, tuple[Node, ...]]
    """Trained weight (step argument) -> its own state arguments."""
    shared_state: tuple[Node, ...]


@dataclass(frozen=True)
class _Forward:
    """The forward part of a step: arguments, rebuilt forward ops and the loss."""

    w: StepWriter
    layout: _Layout
    loss: Value
    trained: tuple[Node, ...]
    """The step's arguments of the weights the optimizer trains."""
    statistics: dict[Node, Value]
    """Running statistic (step argument) -> its moving average."""
    batch_statistics: dict[Node, Value]
    """Running statistic (step argument) -> the batch statistic it averages."""


def _forward(forward: Dag, options: AutodiffPass, emit: str) -> _Forward:
    """Parts 1 and 2 of the step, on arguments laid out for `emit`."""
    if len(forward.outputs) != 1:
        raise AutodiffError(
            f"@{forward.name} returns {len(forward.outputs)} values; autodiff needs one "
            "output to put the loss on"
        )
    (output,) = forward.outputs
    labels_type = labels_sig(options.loss, output.sig)
    given_labels = _given_labels(forward, options, output)
    statistics = _running_statistics(forward)
    trained = [
        arg
        for arg in forward.args
        if arg.attr("is_param") and arg.sigs[0].dtype.is_float and arg not in statistics
    ]
    if not trained:
        raise AutodiffError(
            f"@{forward.name} has no float weights ({{graph.param}} arguments) to differentiate"
        )
    layout = _layout(forward, options.optimizer, emit, labels_type, given_labels, set(trained))
    w = StepWriter()
    values, batches = _rebuild_forward(w, forward, layout, statistics)
    averages = {
        arg: w.add(w.times(arg.out, 1.0 - options.bn_momentum), w.times(batch, options.bn_momentum))
        for arg, batch in batches.items()
    }
    labels = None if layout.labels is None else layout.labels.out
    loss = attach_loss(w, options.loss, values[output], labels)
    trained_args = tuple(layout.inputs[arg] for arg in trained)
    return _Forward(w, layout, loss, trained_args, averages, batches)


def forward_with_loss(forward: Dag, options: AutodiffPass, *, statistics: bool = False) -> Dag:
    """The program the step differentiates: `@main(inputs..., labels, params...) ->
    loss`, batchnorm in training mode. Its gradient by the weights (`jax.grad` of its
    JAX lowering) is what `emit=gradients` computes, which is how the tests and the
    benchmark check the backward against JAX's own autodiff.

    With `statistics`, the batch mean or variance that each running statistic averages
    follows the loss, in weight order (what `jax.value_and_grad(..., has_aux=True)` of
    a framework's training step returns beside the loss)."""
    part = _forward(forward, options, "gradients")
    extra = [part.batch_statistics[p] for p in part.layout.params if p in part.batch_statistics]
    outputs = [part.loss, *extra] if statistics else [part.loss]
    return Dag(part.layout.args, outputs, forward.name, attributes=forward.attributes)


def training_step(forward: Dag, options: AutodiffPass) -> TrainingStep:
    """The training step of `forward` (see the module docstring); AutodiffError (or
    LossError, a ValueError too) for a program it cannot differentiate."""
    part = _forward(forward, options, options.emit)
    w, layout = part.w, part.layout
    gradients = _Backward(w, part.loss, part.trained)
    hyper = Hyperparameters(
        lr=float(options.lr),
        momentum=float(options.momentum),
        nesterov=options.nesterov,
        beta1=float(options.beta1),
        beta2=float(options.beta2),
        epsilon=float(options.epsilon),
    )
    updater = Updater(w, options.optimizer, hyper, tuple(node.out for node in layout.shared_state))
    new_values: dict[Node, Value] = {}
    new_state: dict[Node, Value] = {}
    for param, gradient in gradients.sweep():
        if options.emit == "gradients":
            new_values[param] = gradient
            continue
        own = layout.state[param]
        new_values[param], updated = updater.update(
            param.out, gradient, tuple(node.out for node in own)
        )
        new_state.update(zip(own, updated, strict=True))
    if options.emit == "step":
        new_state.update(zip(layout.shared_state, updater.new_shared, strict=True))
    dag = _assemble(forward, options.emit, layout, part, new_values, new_state)
    return TrainingStep(
        dag=dag.scheduled(w.order),
        trained=len(part.trained),
        running_statistics=len(part.statistics),
        state=sum(len(own) for own in layout.state.values()) + len(layout.shared_state),
    )


# ---------------------------------------------------------------------- arguments


def _given_labels(forward: Dag, options: AutodiffPass, output: Value) -> Node | None:
    """The input argument `labels=NAME` names, checked against the loss; None when
    the option is not given (the step gets a new labels argument)."""
    if options.labels is None:
        return None
    found = [a for a in forward.args if a.attr("name") == options.labels]
    if not found or found[0].attr("is_param"):
        inputs = ", ".join(a.attr("name") for a in forward.args if not a.attr("is_param"))
        raise AutodiffError(
            f"labels={options.labels}: @{forward.name} has no input argument of that name "
            f"(inputs: {inputs or 'none'})"
        )
    check_labels(options.loss, output.sig, options.labels, found[0].sigs[0])
    return found[0]


def _running_statistics(forward: Dag) -> dict[Node, tuple[Node, int]]:
    """Weights used only once, as the mean or variance of an inference batchnorm:
    weight -> (that batchnorm, the index of its batch statistic)."""
    found: dict[Node, tuple[Node, int]] = {}
    consumers = forward.consumers()
    for arg in forward.args:
        uses = consumers.get(arg.out, ())
        if arg.attr("is_param") and len(uses) == 1:
            (use,) = uses
            if use.node.op == "batchnorm" and use.operand in _BATCHNORM_STATISTICS:
                found[arg] = (use.node, _BATCHNORM_STATISTICS[use.operand])
    return found


def _layout(
    forward: Dag,
    optimizer: Optimizer,
    emit: str,
    labels_type: TensorSig | None,
    given_labels: Node | None,
    trained: set[Node],
) -> _Layout:
    """The step's arguments: inputs, labels, weights, then optimizer state."""
    taken = {arg.attr("name") for arg in forward.args}
    made: list[Node] = []
    inputs: dict[Node, Node] = {}

    def argument(name: str, sig: TensorSig, is_param: bool, attrs: NamedAttrs) -> Node:
        node = Node.arg(len(made), name, sig, is_param, attrs)
        made.append(node)
        return node

    def keep(arg: Node, extra: NamedAttrs = ()) -> Node:
        attributes = named({**dict(arg.attr("attributes")), **dict(extra)})
        inputs[arg] = argument(arg.attr("name"), arg.sigs[0], arg.attr("is_param"), attributes)
        return inputs[arg]

    for arg in forward.args:
        if not arg.attr("is_param") and arg is not given_labels:
            keep(arg)
    labels = None
    if given_labels is not None:
        labels = keep(given_labels, ((LABELS_ATTR, UnitAttr()),))
    elif labels_type is not None:
        name = _fresh(LABELS_NAME, taken)
        labels = argument(name, labels_type, False, ((LABELS_ATTR, UnitAttr()),))
    params = tuple(keep(arg) for arg in forward.args if arg.attr("is_param"))
    state: dict[Node, tuple[Node, ...]] = {}
    shared: tuple[Node, ...] = ()
    if emit == "step":
        mark = ((STATE_ATTR, UnitAttr()),)
        for arg in forward.args:
            if arg in trained:
                state[inputs[arg]] = tuple(
                    argument(_fresh(f"{arg.attr('name')}.{slot}", taken), arg.sigs[0], False, mark)
                    for slot in slots(optimizer)
                )
        shared = tuple(
            argument(_fresh(name, taken), sig, False, mark) for name, sig in shared_state(optimizer)
        )
    else:
        state = {inputs[arg]: () for arg in trained}
    return _Layout(tuple(made), inputs, labels, params, state, shared)


def _fresh(name: str, taken: set[str]) -> str:
    """`name`, or `name.1`, `name.2`, ... if an argument has it already."""
    candidate, suffix = name, 0
    while candidate in taken:
        suffix += 1
        candidate = f"{name}.{suffix}"
    taken.add(candidate)
    return candidate


# ------------------------------------------------------------------------ forward


def _rebuild_forward(
    w: StepWriter,
    forward: Dag,
    layout: _Layout,
    statistics: dict[Node, tuple[Node, int]],
) -> tuple[dict[Value, Value], dict[Node, Value]]:
    """The forward ops on the step's arguments, batchnorm in training mode.

    Returns the forward's values -> the step's, and each running statistic (step
    argument) -> the batch statistic its moving average takes in.
    """
    values: dict[Value, Value] = {arg.out: new.out for arg, new in layout.inputs.items()}
    trained_batchnorms: dict[Node, Node] = {}
    for node in forward.ops:
        inputs = [values[v] for v in node.inputs]
        if node.op == "batchnorm":
            made = w.node("batchnorm_train", *inputs[:3], epsilon=node.attr("epsilon"))
            trained_batchnorms[node] = made
            values[node.out] = made.results[0]
        else:
            made = w.node(node.op, *inputs, **dict(node.attrs))
            values.update(zip(node.results, made.results, strict=True))
    return values, {
        layout.inputs[arg]: trained_batchnorms[batchnorm].results[index]
        for arg, (batchnorm, index) in statistics.items()
    }


# ----------------------------------------------------------------------- backward


class _Backward:
    """Reverse-mode accumulation from `loss` to the `params` (module docstring, 3)."""

    def __init__(self, w: StepWriter, loss: Value, params: Sequence[Node]) -> None:
        self.w = w
        self.loss = loss
        self.params = list(params)
        self.sweep_order = _ancestors_in_order(w.order, loss.node)
        wanted = set(params)
        self.needs: set[Node] = set(params)
        for node in reversed(self.sweep_order):
            if any(v.node in self.needs for v in node.inputs):
                self.needs.add(node)
        self.contributions: dict[Value, list[Value]] = {loss: [w.ones(loss.sig)]}
        self.pending = {param: 0 for param in wanted}
        for node in self.sweep_order:
            for value in node.inputs:
                if value.node in self.pending:
                    self.pending[value.node] += 1

    def gradient(self, value: Value) -> Value | None:
        found = self.contributions.get(value)
        return self.w.total(found) if found else None

    def sweep(self) -> Iterable[tuple[Node, Value]]:
        """Yield (weight, its complete gradient) as soon as the sweep has passed the
        weight's last use; weights the loss does not depend on get zeros at the end."""
        done: set[Node] = set()
        for node in self.sweep_order:
            if node in self.needs:
                self._differentiate(node)
            for value in node.inputs:
                param = value.node
                if param in self.pending:
                    self.pending[param] -= 1
                    if self.pending[param] == 0 and param not in done:
                        done.add(param)
                        yield param, self._gradient_or_zeros(param)
        for param in self.params:
            if param not in done:
                yield param, self._gradient_or_zeros(param)

    def _gradient_or_zeros(self, param: Node) -> Value:
        found = self.gradient(param.out)
        return self.w.zeros(param.sigs[0]) if found is None else found

    def _differentiate(self, node: Node) -> None:
        grads = tuple(self.gradient(v) for v in node.results)
        if all(g is None for g in grads):
            return
        rule = VJP.get(node.op)
        if rule is None:
            raise AutodiffError(
                f"no gradient is defined for graph.{node.op}, which the loss depends on"
            )
        needed = tuple(v.node in self.needs and v.sig.dtype.is_float for v in node.inputs)
        for value, gradient in zip(node.inputs, rule(self.w, node, grads, needed), strict=True):
            if gradient is not None and value.node in self.needs:
                self._accumulate(value, gradient)

    def _accumulate(self, value: Value, gradient: Value) -> None:
        """Add `gradient` to `value`'s running sum at once, as frameworks accumulate a
        weight's `.grad`: the same sum, added left to right in the order the sweep makes
        them (`StepWriter.total`'s), but scheduled as each contribution appears, so an
        RNN's weight gradients over its time steps are not all held until the sweep
        reaches the weight (the step's peak memory)."""
        found = self.contributions.get(value)
        self.contributions[value] = [gradient if found is None else self.w.add(found[0], gradient)]


def _ancestors_in_order(order: Sequence[Node], root: Node) -> list[Node]:
    """The ops `root` depends on (itself included), latest first in `order`."""
    reached = {root}
    sweep = []
    for node in reversed(order):
        if node in reached:
            sweep.append(node)
            reached.update(v.node for v in node.inputs)
    return sweep


# ----------------------------------------------------------------------- assemble


def _assemble(
    forward: Dag,
    emit: str,
    layout: _Layout,
    part: _Forward,
    new_values: dict[Node, Value],
    new_state: dict[Node, Value],
) -> Dag:
    """The step's `Dag`: loss first, then one value per weight, then the new state."""
    index = {node: node.attr("index") for node in layout.args}
    outputs = [part.loss]
    marks: list[NamedAttrs] = [((LOSS_ATTR, UnitAttr()),)]
    role = GRADIENT_OF_ATTR if emit == "gradients" else REPLACES_ATTR
    for param in layout.params:
        if param in new_values:
            value = new_values[param]
        elif emit == "gradients":
            value = part.w.zeros(param.sigs[0])
        else:
            value = part.statistics.get(param, param.out)
        outputs.append(value)
        marks.append(((role, IntegerAttr(index[param], i64)),))
    if emit == "step":
        owned = [node for param in layout.params for node in layout.state.get(param, ())]
        for node in (*owned, *layout.shared_state):
            outputs.append(new_state[node])
            marks.append(((REPLACES_ATTR, IntegerAttr(index[node], i64)),))
    return Dag(
        layout.args,
        outputs,
        forward.name,
        attributes=forward.attributes,
        result_attributes=marks,
    )
