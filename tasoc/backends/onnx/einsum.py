"""ONNX Einsum on one or two operands, as transposes, sums and one batched `matmul`.

An equation names each operand dimension with a letter; the letters of two operands
fall into five roles: in both and in the output (a batch dimension), in both and not
in the output (contracted), in one operand and the output (a free row or column), in
one operand only (summed away before the product). So every two-operand einsum is

    reduce{sum} each operand over its own summed letters
    transpose A to [batch..., rows..., contracted...], reshape to [batch..., M, K]
    transpose B to [batch..., contracted..., columns...], reshape to [batch..., K, N]
    matmul, reshape to [batch..., rows..., columns...], transpose to the output's order

and a one-operand einsum is the first and last of these. `...` stands for the same
broadcast dimensions in every term, as in NumPy. A letter twice in one term (a
diagonal, `ii->i`) and three or more operands are refused.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

import onnx
from xdsl.ir import SSAValue

from tasoc.backends.onnx.known_values import Value
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

Labels = tuple[str, ...]
"""An operand's dimension names: a letter each, or `.0`, `.1`, ... for the dimensions
`...` stands for (numbered from the right, as they broadcast)."""

_TERM = re.compile(r"[A-Za-z]*(\.\.\.)?[A-Za-z]*")


@_handles("Einsum")
def _einsum(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    equation = "".join(str(attrs["equation"]).split())
    operands = [imp.data(name) for name in node.input]
    if not 1 <= len(operands) <= 2:
        imp.fail(f"{len(operands)} operands are not supported (only 1 or 2)")
    inputs, output = _parse(imp, equation, [len(imp.shape(x)) for x in operands])
    if len(operands) == 1:
        return [_arrange(imp, *_summed(imp, operands[0], inputs[0], set(output)), output)]
    return [_product(imp, operands, inputs, output)]


def _parse(imp: Importer, equation: str, ranks: Sequence[int]) -> tuple[list[Labels], Labels]:
    """The labels of each input term and of the output (implicit: the letters that
    appear once, sorted, after the `...` dimensions)."""
    left, arrow, right = equation.partition("->")
    terms = left.split(",")
    if len(terms) != len(ranks) or not all(_TERM.fullmatch(t) for t in [*terms, right]):
        imp.fail(f"equation {equation!r} does not fit {len(ranks)} operands")
    broadcast = max(
        (
            rank - len(t.replace("...", ""))
            for t, rank in zip(terms, ranks, strict=True)
            if "..." in t
        ),
        default=0,
    )
    inputs = []
    for term, rank in zip(terms, ranks, strict=True):
        letters = len(term.replace("...", ""))
        if ("..." in term and letters > rank) or ("..." not in term and letters != rank):
            imp.fail(f"term {term!r} of equation {equation!r} does not fit a rank-{rank} operand")
        labels = _labels(term, rank - letters)
        if len(set(labels)) != len(labels):
            imp.fail(f"term {term!r} repeats a letter (diagonals are not supported)")
        inputs.append(labels)
    if arrow:
        output = _labels(right, broadcast)
        if len(set(output)) != len(output):
            imp.fail(f"the output term {right!r} repeats a letter")
        unknown = sorted(set(output) - {label for labels in inputs for label in labels})
        if unknown:
            imp.fail(f"the output term {right!r} names {', '.join(unknown)}, in no input term")
    else:
        letters = [label for labels in inputs for label in labels if not label.startswith(".")]
        once = sorted(label for label in set(letters) if letters.count(label) == 1)
        output = (*(f".{i}" for i in range(broadcast - 1, -1, -1)), *once)
    return inputs, output


def _labels(term: str, broadcast: int) -> Labels:
    """A term's labels, its `...` standing for `broadcast` dimensions."""
    before, dots, after = term.partition("...")
    middle = tuple(f".{i}" for i in range(broadcast - 1, -1, -1)) if dots else ()
    return (*before, *middle, *after)


def _summed(imp: Importer, x: SSAValue, labels: Labels, kept: set[str]) -> tuple[SSAValue, Labels]:
    """x summed over its labels outside `kept`, and the labels left."""
    axes = tuple(i for i, label in enumerate(labels) if label not in kept)
    if not axes:
        return x, labels
    summed = imp.op(G.ReduceOp, x, kind="sum", axes=axes, keepdims=False)
    return summed, tuple(label for label in labels if label in kept)


def _arrange(imp: Importer, x: SSAValue, labels: Labels, order: Labels) -> SSAValue:
    """x with its dimensions (named by `labels`) in `order`."""
    perm = tuple(labels.index(label) for label in order)
    return x if perm == tuple(range(len(perm))) else imp.op(G.TransposeOp, x, perm=perm)


def _product(
    imp: Importer, operands: Sequence[SSAValue], inputs: Sequence[Labels], output: Labels
) -> SSAValue:
    """A two-operand einsum as one batched matmul."""
    (a, b), (la, lb) = operands, inputs
    # A dimension of size 1 that the other operand has larger is a broadcast one: it
    # repeats the operand, so dropping it and letting its letter belong to the other
    # operand alone gives the same sums.
    a, la = _squeezed(imp, a, la, _sizes(imp, b, lb))
    b, lb = _squeezed(imp, b, lb, _sizes(imp, a, la))
    sizes_a, sizes_b = _sizes(imp, a, la), _sizes(imp, b, lb)
    shared = set(la) & set(lb)
    for label in sorted(shared):
        if sizes_a[label] != sizes_b[label]:
            name = "..." if label.startswith(".") else label
            imp.fail(f"dimension {name!r} has sizes {sizes_a[label]} and {sizes_b[label]}")
    sizes = sizes_a | sizes_b
    a, la = _summed(imp, a, la, shared | set(output))
    b, lb = _summed(imp, b, lb, shared | set(output))
    batch = tuple(label for label in output if label in shared)
    rows = tuple(label for label in la if label not in shared)
    columns = tuple(label for label in lb if label not in shared)
    contracted = tuple(label for label in la if label in shared and label not in output)
    a = _arrange(imp, a, la, (*batch, *rows, *contracted))
    b = _arrange(imp, b, lb, (*batch, *contracted, *columns))
    batch_dims = [sizes[label] for label in batch]
    m, k, n = (math.prod(sizes[label] for label in group) for group in (rows, contracted, columns))
    product = imp.op(
        G.MatmulOp, imp.reshape(a, (*batch_dims, m, k)), imp.reshape(b, (*batch_dims, k, n))
    )
    full = (*batch, *rows, *columns)
    return _arrange(imp, imp.reshape(product, [sizes[label] for label in full]), full, output)


def _sizes(imp: Importer, x: SSAValue, labels: Labels) -> dict[str, int]:
    return dict(zip(labels, imp.shape(x), strict=True))


def _squeezed(
    imp: Importer, x: SSAValue, labels: Labels, other: dict[str, int]
) -> tuple[SSAValue, Labels]:
    """x without its size-1 dimensions that the other operand (its sizes by label,
    `other`) has larger."""
    shape = imp.shape(x)
    kept = [i for i, label in enumerate(labels) if shape[i] != 1 or other.get(label, 1) == 1]
    if len(kept) == len(labels):
        return x, labels
    return imp.reshape(x, [shape[i] for i in kept]), tuple(labels[i] for i in kept)
