"""Op traits (`tasoc.ir.traits`) and the op-name sets derived from them
(`tasoc.ir.op_sets.ops_with`): the sets are written out here as they stood when they
were hand-written string sets in `cost/` and `ir/rules.py`, so moving a trait changes
a test, not silently a cost or a rule."""

from __future__ import annotations

import pytest
from xdsl.traits import Commutative, ConstantLike, OpTrait

from tasoc.ir.op_sets import ops_with
from tasoc.ir.rules import SAME_SHAPE_OPERANDS
from tasoc.ir.traits import (
    Broadcasting,
    Contraction,
    DataMovement,
    Elementwise,
    Fusible,
    Training,
)

BROADCASTING_ELEMENTWISE = {
    "sub", "div", "pow", "max", "min", "compare", "and", "or", "xor", "where",
}  # fmt: skip
"""The element-wise ops of imported models that broadcast like add and mul."""

ELEMENTWISE = {
    "neg", "exp", "log", "sqrt", "reciprocal", "erf", "abs", "not", "cast",
    *BROADCASTING_ELEMENTWISE,
}  # fmt: skip
"""Every element-wise op of imported models."""

EXPECTED: dict[type[OpTrait], set[str]] = {
    ConstantLike: {"ones", "zeros", "c_pool", "i_conv", "i_matmul", "constant"},
    Fusible: {
        "add", "mul", "scale", "relu", "sigmoid", "tanh", "gelu", "batchnorm",
        "reshape", "transpose", "split", "concat", "enlarge",
        "relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad",
        "broadcast", *ELEMENTWISE,
    },
    Contraction: {"matmul", "conv2d", "conv2d_grad_input", "conv2d_grad_weight"},
    DataMovement: {
        "reshape", "transpose", "split", "concat", "enlarge", "embedding", "broadcast", "gather",
    },
    Elementwise: {
        "add", "mul", "scale", "relu", "sigmoid", "tanh", "gelu",
        "relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad",
        *ELEMENTWISE,
    },
    Broadcasting: {"add", "mul", "matmul", *BROADCASTING_ELEMENTWISE},
    Commutative: {"add", "mul", "max", "min", "and", "or", "xor"},
    Training: {
        "relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad", "conv2d_grad_input",
        "conv2d_grad_weight", "pool2d_grad", "reduce_grad", "scatter_add", "layernorm_grad",
        "aggregate_grad", "aggregate_weight_grad", "edge_softmax_grad",
        "batchnorm_train", "batchnorm_grad", "softmax_cross_entropy",
        "softmax_cross_entropy_grad", "adam_update",
    },
}  # fmt: skip


@pytest.mark.parametrize("trait", list(EXPECTED), ids=lambda trait: trait.__name__)
def test_each_trait_marks_the_ops_its_old_string_set_named(trait: type[OpTrait]) -> None:
    assert ops_with(trait) == EXPECTED[trait]


def test_rules_take_one_shape_for_the_broadcasting_element_wise_ops() -> None:
    assert {"add", "mul", *BROADCASTING_ELEMENTWISE} == SAME_SHAPE_OPERANDS


def test_constants_are_never_fused_or_counted_as_work() -> None:
    constants = ops_with(ConstantLike)
    for trait in (Fusible, Contraction, DataMovement, Elementwise):
        assert not constants & ops_with(trait)
