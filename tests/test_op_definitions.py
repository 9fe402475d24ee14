"""Every op of the `graph` dialect is defined once, completely (`tasoc.ir.opdef`).

An op's definition (`tasoc/ir/ops/<family>.py`) holds its typing rule, SOAP rule,
FLOPs and whether autodiff differentiates it; the backends hold the kernels that
must differ. These tests fail naming every op that misses a piece, so adding an op
says what is left to write.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from xdsl.irdl import AnyAttr
from xdsl.parser import Parser
from xdsl.traits import ConstantLike
from xdsl.utils.exceptions import VerifyException

from tasoc.backends.jax import JAX_KERNELS
from tasoc.backends.jax.lowering import JAX
from tasoc.backends.numpy import KERNELS
from tasoc.backends.numpy.kernels import NUMPY
from tasoc.driver.sources import make_context
from tasoc.ir.graph import OPS_BY_NAME
from tasoc.ir.op_sets import ops_with
from tasoc.ir.opdef import OpDef, define, op_def, op_defs
from tasoc.ir.rules import ATTR_DOMAINS
from tasoc.ir.shapes import DType, TensorSig
from tasoc.ir.traits import DataMovement
from tasoc.passes.autodiff.rules import VJP


def missing(table: object) -> list[str]:
    """The ops of the dialect that `table` (anything with `in`) lacks."""
    return sorted(name for name in OPS_BY_NAME if name not in table)  # type: ignore[operator]


def test_every_op_of_the_dialect_has_a_definition_and_every_definition_an_op() -> None:
    assert missing(op_defs()) == []
    assert sorted(set(op_defs()) - set(OPS_BY_NAME)) == []


def test_every_definition_is_complete() -> None:
    incomplete = sorted(
        name
        for name, op in op_defs().items()
        if not (callable(op.infer) and callable(op.soap) and op.name == name)
    )
    assert incomplete == []


def test_every_op_has_a_reference_kernel_and_a_jax_lowering() -> None:
    assert missing(KERNELS) == []
    assert missing(JAX_KERNELS) == []


def test_autodiff_has_a_rule_for_exactly_the_ops_declared_differentiable() -> None:
    differentiable = {name for name, op in op_defs().items() if op.no_gradient is None}
    assert sorted(differentiable - VJP.keys()) == []
    assert sorted(VJP.keys() - differentiable) == []


def test_attribute_domains_name_attributes_the_op_declares() -> None:
    unknown = sorted(
        f"{op}.{key}"
        for op, key in ATTR_DOMAINS
        if key not in OPS_BY_NAME[op].get_irdl_definition().properties
    )
    assert unknown == []


def test_a_definition_is_checked_and_defined_once() -> None:
    relu = op_def("relu")
    with pytest.raises(ValueError, match="op 'relu' is defined twice"):
        define(relu)
    with pytest.raises(ValueError, match="bad arity"):
        OpDef("bad", (2, 1), relu.infer, relu.soap, 1, None)
    with pytest.raises(ValueError, match="negative FLOPs"):
        OpDef("bad", (1, 1), relu.infer, relu.soap, -1, None)
    with pytest.raises(KeyError):
        op_def("no_such_op")


def test_flops_per_element_count_the_first_result() -> None:
    sig = TensorSig((2, 3), DType.F32)
    assert op_def("gelu").count_flops([sig], {}, [sig]) == 8 * 6
    assert op_def("reshape").count_flops([sig], {"shape": (6,)}, [sig]) == 0


@pytest.mark.parametrize("name", ["relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad"])
def test_an_activation_gradient_is_written_once_and_matches_a_finite_difference(
    name: str,
) -> None:
    """The one formula, on NumPy and on JAX, against the forward's slope."""
    forward = op_def(name.removesuffix("_grad")).kernel
    gradient = op_def(name).kernel
    assert forward is not None and gradient is not None
    x = np.linspace(-3, 3, 13) + 0.05  # away from relu's kink
    dy = np.linspace(0.5, 2, 13)
    step = 1e-6
    (y,) = forward(NUMPY, {}, [x])
    (above,) = forward(NUMPY, {}, [x + step])
    (below,) = forward(NUMPY, {}, [x - step])
    slope = (above - below) / (2 * step)
    saved = x if name == "gelu_grad" else y
    (on_numpy,) = gradient(NUMPY, {}, [saved, dy])
    (on_jax,) = gradient(JAX, {}, [saved.astype(np.float32), dy.astype(np.float32)])
    np.testing.assert_allclose(on_numpy, dy * slope, rtol=1e-6, atol=1e-8)
    np.testing.assert_allclose(np.asarray(on_jax), on_numpy, rtol=1e-5, atol=1e-6)
    assert math.isfinite(float(np.sum(on_numpy)))


def test_data_movement_and_constants_count_no_flops() -> None:
    """The cost model reads FLOPs from the definitions alone (docs/ir.md, Op traits)."""
    sig = TensorSig((4, 4), DType.F32)
    counting = sorted(
        name for name in ops_with(DataMovement) | ops_with(ConstantLike) if op_def(name).flops != 0
    )
    assert counting == []
    assert op_def("matmul").count_flops([sig, sig], {}, [sig]) == 2 * 16 * 4


def test_every_property_is_typed_by_its_kind() -> None:
    """No property takes any attribute: each is constrained to what the codec writes."""
    untyped = sorted(
        f"{name}.{prop}"
        for name, op in OPS_BY_NAME.items()
        for prop, definition in op.get_irdl_definition().properties.items()
        if isinstance(definition.constr, AnyAttr)
    )
    assert untyped == []


@pytest.mark.parametrize(
    ("attributes", "complaint"),
    [
        ('strides = "wide", padding = "same", activation = "none", groups = 1 : i64', "strides"),
        (
            'strides = array<i64: 1, 1>, padding = 2.0 : f64, activation = "none", '
            "groups = 1 : i64",
            "padding",
        ),
        (
            'strides = array<i64: 1, 1>, padding = "same", activation = 1 : i64, groups = 1 : i64',
            "activation",
        ),
        (
            'strides = array<i64: 1, 1>, padding = "same", activation = "none", groups = 1.5 : f64',
            "groups",
        ),
    ],
)
def test_a_property_of_the_wrong_kind_is_refused_by_the_verifier(
    attributes: str, complaint: str
) -> None:
    text = f"""
    func.func @main(%x: tensor<1x2x4x4xf32>, %w: tensor<3x2x3x3xf32>) -> tensor<1x3x4x4xf32> {{
      %y = graph.conv2d %x, %w {{{attributes}}} : tensor<1x3x4x4xf32>
      func.return %y : tensor<1x3x4x4xf32>
    }}
    """
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(VerifyException, match=complaint):
        module.verify()


def test_an_element_type_property_takes_only_tasocs_types() -> None:
    text = """
    func.func @main() -> tensor<2xf32> {
      %y = graph.zeros {shape = array<i64: 2>, dtype = complex<f32>} : tensor<2xf32>
      func.return %y : tensor<2xf32>
    }
    """
    module = Parser(make_context(), text).parse_module()
    with pytest.raises(
        VerifyException, match=r"'dtype' must be an element type .*got complex<f32>"
    ):
        module.verify()
