"""The losses `autodiff` appends to a forward program's output.

Each loss is a few ordinary `graph` ops ending in a rank-0 value, so the backward
differentiates it like the rest of the program:

- `sum`: the sum of every element of the output (what `jax.grad` of a program
  whose output is summed gives; no labels).
- `mse`: the mean of the squared differences to labels of the output's type.
- `softmax-cross-entropy`: the mean over the batch of `logsumexp(logits) -
  logits[label]`, classes on the last axis, integer labels of the output's shape
  without that axis (`graph.softmax_cross_entropy`, computed stably). When the
  output is itself a `graph.softmax` over the last axis, its operand is taken as the
  logits: the loss is then the cross-entropy of the program's own probabilities,
  without the log of a rounded probability.
"""

from __future__ import annotations

from typing import Literal

from tasoc.ir.dag import Value
from tasoc.ir.shapes import DType, TensorSig
from tasoc.passes.autodiff.writer import StepWriter

Loss = Literal["sum", "mse", "softmax-cross-entropy"]

LABEL_DTYPE = DType.I32
"""Class labels of `softmax-cross-entropy`: i32, which JAX runs without x64 mode."""


class LossError(ValueError):
    """The loss does not fit the program's output (one line)."""


def labels_sig(loss: Loss, output: TensorSig) -> TensorSig | None:
    """The type of the labels `loss` compares `output` with (None for `sum`);
    LossError when `loss` cannot apply to `output` at all."""
    if not output.dtype.is_float:
        raise LossError(f"the output of @main is {output}; a loss needs a float output")
    if loss == "sum":
        return None
    if loss == "mse":
        return TensorSig(output.shape, output.dtype)
    if output.rank < 2:
        raise LossError(
            f"loss 'softmax-cross-entropy' needs an output of rank >= 2 (a batch of class "
            f"scores on the last axis); @main returns {output}"
        )
    return TensorSig(output.shape[:-1], LABEL_DTYPE)


def check_labels(loss: Loss, output: TensorSig, name: str, given: TensorSig) -> None:
    """LossError unless the argument `name` given as labels has the type `loss` needs."""
    expected = labels_sig(loss, output)
    if expected is None:
        raise LossError(f"loss '{loss}' takes no labels, but labels={name} was given")
    if (given.shape, given.dtype) != (expected.shape, expected.dtype):
        raise LossError(
            f"loss '{loss}' needs labels of type {expected} for the output {output}; "
            f"argument '{name}' is {given}"
        )


def logits_of(output: Value) -> Value:
    """The logits behind `output`: the operand of a last-axis softmax, else itself."""
    node = output.node
    if node.op == "softmax" and node.attr("axis") % output.sig.rank == output.sig.rank - 1:
        return node.inputs[0]
    return output


def attach_loss(w: StepWriter, loss: Loss, output: Value, labels: Value | None) -> Value:
    """The rank-0 loss of `output` (against `labels` where the loss has them)."""
    if loss == "sum":
        return w.sum_all(output)
    assert labels is not None
    if loss == "mse":
        difference = w.subtract(output, labels)
        squared = w.mul(difference, difference)
        if squared.sig.rank == 0:
            return squared
        axes = tuple(range(squared.sig.rank))
        return w.value("reduce", squared, kind="mean", axes=axes, keepdims=False)
    losses = w.value("softmax_cross_entropy", logits_of(output), labels)
    axes = tuple(range(losses.sig.rank))
    return w.value("reduce", losses, kind="mean", axes=axes, keepdims=False)
