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
* `WRAPPED[kind](encoding)` is the encoding an encoding carries inside it, None when
  it carries none: a host memory space wraps the sharding of a value that is both
  sharded and placed (`#memory.space<host, #parallel.sharding<...>>`, DESIGN.md §8),
  so `layout_of` finds the sharding under the space without `parallel` knowing
  `memory`; `REWRAPPED[kind](encoding, inner)` is the wrapper around another inner
  encoding (`without_layout`: a sharded host value made unsharded stays on the host).
* `LOCAL_SHAPE[kind](op, sig)` is the shape of the block of a value of type `sig`
  that one device holds (a sharding's local shape, its mesh looked up from `op`);
  without a rule, the whole shape (`device_shape`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import replace
from typing import Any

from xdsl.ir import Operation

Propagate = Callable[[str, Sequence[Any], Mapping[str, Any], list[Any]], list[Any]]
"""(op short name, operand TensorSigs, attributes, results without encodings) ->
results with encodings."""

PROPAGATE: dict[type, Propagate] = {}
CHECK: dict[type, Callable[[Operation, Sequence[Any]], None]] = {}
WRAPPED: dict[type, Callable[[Any], Any | None]] = {}
REWRAPPED: dict[type, Callable[[Any, Any | None], Any]] = {}
LOCAL_SHAPE: dict[type, Callable[[Operation, Any], tuple[int, ...]]] = {}


def layouts(encoding: Any | None) -> Iterator[Any]:
    """`encoding` and every encoding wrapped inside it, outermost first."""
    while encoding is not None:
        yield encoding
        unwrap = WRAPPED.get(type(encoding))
        encoding = unwrap(encoding) if unwrap is not None else None


def layout_of(encoding: Any | None, kind: type) -> Any | None:
    """The encoding of class `kind` in `encoding` or wrapped inside it, None if none."""
    return next((e for e in layouts(encoding) if isinstance(e, kind)), None)


def without_layout(encoding: Any | None, kind: type) -> Any | None:
    """`encoding` with its layer of class `kind` taken out, wrappers around it kept
    (None when nothing is left)."""
    if encoding is None:
        return None
    unwrap = WRAPPED.get(type(encoding))
    inner = unwrap(encoding) if unwrap is not None else None
    if isinstance(encoding, kind):
        return inner
    if inner is None:
        return encoding
    return REWRAPPED[type(encoding)](encoding, without_layout(inner, kind))


def check_op(op: Operation, sigs: Sequence[Any]) -> None:
    """Run the module-level check of every encoding kind among `sigs`, the TensorSigs
    of `op`'s values, wrapped kinds included: the check of a kind sees each value that
    carries it (under a wrapper or not) as if it carried that encoding alone, and the
    other values as they are."""
    kinds = {type(e) for sig in sigs for e in layouts(sig.encoding)}
    for kind in kinds:
        check = CHECK.get(kind)
        if check is not None:
            check(op, [_as_laid_out(sig, kind) for sig in sigs])


def _as_laid_out(sig: Any, kind: type) -> Any:
    encoding = layout_of(sig.encoding, kind)
    return sig if encoding is None or encoding is sig.encoding else replace(sig, encoding=encoding)


def device_shape(op: Operation, sig: Any) -> tuple[int, ...]:
    """The shape of the block of a value of type `sig` one device holds (`LOCAL_SHAPE`
    of the encodings it carries; the whole shape when none splits it)."""
    for encoding in layouts(sig.encoding):
        local = LOCAL_SHAPE.get(type(encoding))
        if local is not None:
            return local(op, replace(sig, encoding=encoding))
    return tuple(sig.shape)
