"""The optimizer update `adam_update` (PyTorch's and optax's Adam, epsilon outside
the square root).

Element-wise over a weight's dims, which are parameter factors (ZeRO's sharded
optimizer); the step counter is a scalar every device holds. Its kernel is written
once for every backend.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from tasoc.ir.opdef import ArrayNamespace, OpDef, define
from tasoc.ir.shapes import (
    Attrs,
    DType,
    ShapeError,
    TensorSig,
    epsilon_attr,
    expect_shape,
    need_float,
    number_attr,
    same_dtype,
)
from tasoc.ir.soap import Factor, OpRule
from tasoc.ir.soap_rules import (
    Inputs,
    Results,
    factor_names,
    op_rule,
)

# ------------------------------------------------------------------ typing


def _adam_update_type(inputs: Sequence[TensorSig], attrs: Attrs) -> list[TensorSig]:
    param, grad, m, v, step = inputs
    need_float(param, "param")
    same_dtype(param, grad, m, v)
    for name, sig in (("grad", grad), ("m", m), ("v", v)):
        expect_shape(sig, name, param.shape)
    # The step counter is float32 whatever the weights' type: a float16 count stops at
    # 2048 and a bfloat16 one at 256, after which the bias correction would be wrong.
    if step.rank != 0 or step.dtype != DType.F32:
        raise ShapeError(f"step must be a rank-0 f32 tensor, got {step}")
    number_attr(attrs, "lr", lambda lr: 0 < lr < math.inf, "a finite number > 0")
    for beta in ("beta1", "beta2"):
        number_attr(attrs, beta, lambda b: 0 <= b < 1, "a number in [0, 1)")
    epsilon_attr(attrs)
    return [param, param, param]


# ---------------------------------------------------------------- SOAP rules
def _adam_update_soap(inputs: Inputs, attrs: Attrs, results: Results) -> OpRule:
    # Element-wise over a weight's dims (parameter dims, ZeRO's sharded optimizer);
    # the step counter is a scalar every device holds.
    param = inputs[0]
    names = factor_names("d", param.rank)
    factors = [
        Factor(name, size, "parameter") for name, size in zip(names, param.shape, strict=True)
    ]
    return op_rule(factors, [names] * 4 + [()], [names] * 3)


# ------------------------------------------------------------------ kernels


def _adam_update(xp: ArrayNamespace, attrs: Attrs, inputs: Sequence[Any]) -> list[Any]:
    param, grad, m, v, step = inputs
    lr, beta1, beta2, epsilon = attrs["lr"], attrs["beta1"], attrs["beta2"], attrs["epsilon"]
    m_next = beta1 * m + (1 - beta1) * grad
    v_next = beta2 * v + (1 - beta2) * grad * grad
    m_hat = m_next / (1 - xp.power(beta1, step))
    v_hat = v_next / (1 - xp.power(beta2, step))
    return [param - lr * m_hat / (xp.sqrt(v_hat) + epsilon), m_next, v_next]


define(
    OpDef(
        "adam_update",
        (5, 5),
        _adam_update_type,
        _adam_update_soap,
        14,
        "an optimizer update made by autodiff, not differentiated",
        kernel=_adam_update,
    )
)
