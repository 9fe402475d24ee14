"""The loss `softmax_cross_entropy` (per row: logsumexp(logits) - logits[label]) and
its gradient.

The class axis does not split (a log-softmax over it); the batch dims are plain
sample and attribute factors. The kernels differ by backend: the reference raises on
a label out of range, where the JAX lowering yields NaN.
"""

from __future__ import annotations

from collections.abc import Sequence

from tasoc.ir.opdef import OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    ShapeError,
    TensorSig,
    check_forward,
    expect_shape,
    need_float,
    need_indices,
)
from tasoc.ir.soap import OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    all_but,
    op_rule,
)

# ------------------------------------------------------------------ typing


def _softmax_cross_entropy_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    logits, labels = inputs
    need_float(logits, "logits")
    if logits.rank < 1:
        raise ShapeError("logits must have rank >= 1 (classes on the last axis), got a scalar")
    need_indices(labels, "labels")
    expect_shape(labels, "labels", logits.shape[:-1])
    return [TensorSig(logits.shape[:-1], logits.dtype)]


def _softmax_cross_entropy_grad_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    logits, labels, dloss = inputs
    check_forward(
        _softmax_cross_entropy_type,
        "softmax_cross_entropy",
        [logits, labels],
        attrs,
        dloss,
        "dloss",
    )
    return [logits]


# ---------------------------------------------------------------- SOAP rules
def _softmax_cross_entropy_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # The loss is per example (no mean over the batch: the loss the autodiff pass
    # appends takes that as a separate reduce), so the batch dims are plain sample
    # and attribute factors; the class axis does not split (a log-softmax over it).
    logits = inputs[0]
    factors, dims = all_but(logits, [logits.rank - 1])
    batch = dims[:-1]
    if len(inputs) == 2:
        return op_rule(factors, [dims, batch], [batch])
    return op_rule(factors, [dims, batch, batch], [dims], ((2,),))


# -------------------------------------------------------------- definitions


def _softmax_cross_entropy_flops(
    inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
) -> int:
    """Five FLOPs per logit: the shift, exp, sum, log and pick of a log-softmax."""
    return 5 * inputs[0].size


define(
    OpDef(
        "softmax_cross_entropy",
        (2, 2),
        _softmax_cross_entropy_type,
        _softmax_cross_entropy_soap,
        _softmax_cross_entropy_flops,
        None,
    ),
    OpDef(
        "softmax_cross_entropy_grad",
        (3, 3),
        _softmax_cross_entropy_grad_type,
        _softmax_cross_entropy_soap,
        6,
        "a gradient op made by autodiff, not differentiated again",
    ),
)
