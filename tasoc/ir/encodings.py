"""Hooks through which a dialect gives meaning to a tensor encoding.

A tensor type's encoding (`tensor<8x4xf32, #parallel.sharding<...>>`) belongs to the
dialect that defines it, not to `graph`: a `graph` op propagates a sharding by the
rule of the `parallel` dialect, a memory space by that of `memory`. `shapes.infer`
and the `graph` verifier look the rule up here by the encoding's class, so `shapes`
and `graph` never import the dialects that extend them (the dialect registers its
rule when it is imported, which is also when its attributes become parseable).

* `PROPAGATE[kind](op, inputs, attrs, results)` gives the results of `op` their
  encodings from the operands' (raising `ShapeError` when the operands' encodings do
  not fit the op); without a rule, results take the operands' common encoding.
* `CHECK[kind](op, sigs)` verifies what needs the module around an op (a sharding
  names a mesh defined elsewhere in the module): `sigs` are the types of the op's
  values (of a function's signature), read once by the caller; it raises
  `VerifyException`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from xdsl.ir import Operation

Propagate = Callable[[str, Sequence[Any], Mapping[str, Any], list[Any]], list[Any]]
"""(op short name, operand TensorSigs, attributes, results without encodings) ->
results with encodings."""

PROPAGATE: dict[type, Propagate] = {}
CHECK: dict[type, Callable[[Operation, Sequence[Any]], None]] = {}


def check_op(op: Operation, sigs: Sequence[Any]) -> None:
    """Run the module-level check of every encoding kind among `sigs`, the TensorSigs
    of `op`'s values."""
    for kind in {type(sig.encoding) for sig in sigs if sig.encoding is not None}:
        check = CHECK.get(kind)
        if check is not None:
            check(op, sigs)
