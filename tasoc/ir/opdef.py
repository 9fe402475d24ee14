"""One definition per `graph` op: everything tasoc knows about an op, in one place.

In the spirit of JAX's `standard_primitive` (a primitive's shape, dtype and sharding
rules registered together), each op of the `graph` dialect has one `OpDef`, written in
the module of its family under `tasoc/ir/ops/` (`conv.py` holds `conv2d` and its
gradients): its typing rule, its SOAP rule and the attributes its local shards run
with, the values its attributes range over when rewrite rules are enumerated, its
FLOPs, whether autodiff differentiates it, and, where NumPy and JAX compute it alike,
its kernel, written once against an array namespace `xp`. Nothing else keeps a table
of op names: the verifier, the builder, the light `dag`, the SOAP engine, the cost
model and the backends all read `op_def(name)`.

What is not here, and why:

- the xDSL class (operands, results, traits, typed properties) stays in `graph.py`,
  since xDSL defines a dialect from its classes; `tests/test_op_definitions.py`
  checks that every class has a definition and every definition a class;
- a kernel that must differ between backends (a convolution through `lax`, a NumPy
  reference that raises on a bad index where a jitted function cannot) lives in the
  backend, registered by op name into its table; a backend may also override a
  shared kernel (JAX's `sigmoid` is `jax.nn.sigmoid`);
- the reverse-mode rule builds IR with the autodiff pass's writer, so it stays in
  `passes/autodiff/rules.py` (docs/decisions.md); the definition says whether there
  is one (`no_gradient`).

Definitions are loaded on first use (`op_defs`), so modules of `ir/` that the op
families import (shapes, soap) can ask for them without an import cycle.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

if TYPE_CHECKING:
    from tasoc.ir.shapes import TensorSig
    from tasoc.ir.soap import OpRule

Attrs = Mapping[str, Any]
InferFn = Callable[["Sequence[TensorSig]", Attrs], "list[TensorSig]"]
"""(operand types, attributes) -> result types; raises ShapeError."""

SoapFn = Callable[["Sequence[TensorSig]", Attrs, "Sequence[TensorSig]"], "OpRule"]
"""(operand types, attributes, result types) -> the op's SOAP rule."""

LocalAttrsFn = Callable[[Attrs, Sequence[Sequence[int]], Sequence[Sequence[int]]], dict[str, Any]]
"""(attributes, local operand shapes, local result shapes) -> the attributes the op
runs with on those local shards."""

FlopsFn = Callable[["Sequence[TensorSig]", Attrs, "Sequence[TensorSig]"], int]
"""(operand types, attributes, result types) -> FLOPs of one run of the op."""


class ArrayNamespace(Protocol):
    """What a shared kernel computes with: the array API of NumPy and `jax.numpy`
    (`xp.add`, `xp.where`, ...), plus the few functions NumPy lacks and the element
    type a `DType` has on the backend. A backend passes its own (`tasoc.backends`)."""

    def erf(self, x: Any) -> Any: ...

    def erfc(self, x: Any) -> Any: ...

    def dtype_of(self, dtype: Any) -> Any: ...

    def __getattr__(self, name: str) -> Any: ...


XpKernel = Callable[[ArrayNamespace, Attrs, Sequence[Any]], list[Any]]
"""(xp, attributes, operand arrays) -> result arrays, written once for every backend."""


@dataclass(frozen=True)
class OpDef:
    """Everything about one `graph` op but its xDSL class.

    `arity` is (min, max) operands, max None for variadic. `flops` is either FLOPs
    per element of the first result (element-wise, normalizing ops) or a function of
    the op's types; data movement and constants cost 0. `gathers` is the index of the
    operand holding indices for ops that read only the entries they gather (the cost
    model counts those bytes, not the table's). `no_gradient` is None when autodiff
    has a reverse-mode rule for the op, else why it has none. `kernel` is the op's
    computation for every backend that does not register its own. `in_place` says
    its result may be written over an operand of the result's type that dies at it: an
    element-wise op, each result element made from the operands' elements at its own
    index and nothing else, so no element is read after it is overwritten (XLA's
    buffer assignment shares such an operand's buffer with the result; a placed
    program marks where it does, `memory.IN_PLACE_ATTR`).
    """

    name: str
    arity: tuple[int, int | None]
    infer: InferFn
    soap: SoapFn
    flops: int | FlopsFn
    no_gradient: str | None
    local_attrs: LocalAttrsFn | None = None
    domains: Mapping[str, tuple[Any, ...]] = field(default_factory=dict)
    gathers: int | None = None
    kernel: XpKernel | None = None
    in_place: bool = False

    def __post_init__(self) -> None:
        low, high = self.arity
        if low < 0 or (high is not None and high < low):
            raise ValueError(f"op '{self.name}': bad arity {self.arity}")
        if isinstance(self.flops, int) and self.flops < 0:
            raise ValueError(f"op '{self.name}': negative FLOPs per element")

    def count_flops(
        self, inputs: Sequence[TensorSig], attrs: Attrs, results: Sequence[TensorSig]
    ) -> int:
        """FLOPs of one run of the op on operands and results of these types."""
        if isinstance(self.flops, int):
            return self.flops * results[0].size if results else 0
        return self.flops(inputs, attrs, results)


_DEFS: dict[str, OpDef] = {}
_loaded = False


def define(*defs: OpDef) -> None:
    """Register op definitions; ValueError for a name defined twice."""
    for op in defs:
        if op.name in _DEFS:
            raise ValueError(f"op '{op.name}' is defined twice")
        _DEFS[op.name] = op


def _load() -> None:
    global _loaded
    _loaded = True
    importlib.import_module("tasoc.ir.ops")


def op_defs() -> dict[str, OpDef]:
    """Every op's definition by short name (`"conv2d"`)."""
    if not _loaded:
        _load()
    return _DEFS


def op_def(name: str) -> OpDef:
    """The definition of op `name`; KeyError for an op that has none."""
    found = _DEFS.get(name)
    if found is None:
        return op_defs()[name]
    return found
