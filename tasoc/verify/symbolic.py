"""Symbolic execution of `graph` ops in exact real arithmetic, to validate rules.

TASO guards against wrong operator properties by checking each one on every small
tensor shape: a symbolic implementation of each operator turns the two sides of a
property into real-arithmetic expressions over one variable per input element, and
z3 decides whether they are equal (Jia's thesis, §2.4). This module is that symbolic
implementation for tasoc; `tasoc.verify.validate` drives it.

A tensor is a NumPy object array. An element is either a `Fraction` (a number known
exactly: a constant, a padded zero, arithmetic on numbers) or a z3 real expression.
Folding numbers in Python keeps the expressions small — a zero-padded border adds no
terms, an identity kernel collapses to the input element — and keeps everything exact:
there are no floats anywhere, so an equality z3 proves is an equality of real numbers.

The semantics are those of the reference kernels (`tasoc.backends.numpy.kernels`), which
are the ground truth: the same window padding (`shapes.window_pads`, odd element at the
bottom/right), average pooling dividing by the full window, padded positions never winning
a max, broadcasting as in NumPy. Functions whose exact definition the rules must not rely
on are uninterpreted z3 functions Real -> Real: `relu` (with the one fact `relu(0) = 0`,
`HYPOTHESES`), `sigmoid`, `tanh`, `gelu`, and the `exp` and reciprocal square root inside
softmax and the normalizations. A property proven for every interpretation of them holds
for the real ones; a property that needs more (relu is monotone, say) fails validation and
has to be justified some other way. On known numbers `relu` is evaluated exactly.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from tasoc.ir.dag import Dag, Node
from tasoc.ir.shapes import ConstData, window_pads

Elem = Fraction | z3.ArithRef
"""One tensor element: a known number or a z3 real expression."""

SymbolicKernel = Callable[[Mapping[str, Any], Sequence[np.ndarray]], list[np.ndarray]]
"""Same signature as the reference kernels: attributes and operands to results."""

ZERO, ONE = Fraction(0), Fraction(1)


class SymbolicError(ValueError):
    """An op (or operand) that has no symbolic semantics, such as integer embedding ids."""


_REAL = z3.RealSort()
UNINTERPRETED: dict[str, z3.FuncDeclRef] = {
    name: z3.Function(name, _REAL, _REAL)
    for name in ("relu", "sigmoid", "tanh", "gelu", "exp", "rsqrt")
}
"""The uninterpreted functions, by name (`rsqrt` is 1/sqrt, inside the normalizations)."""

HYPOTHESES: tuple[z3.BoolRef, ...] = (UNINTERPRETED["relu"](z3.RealVal(0)) == 0,)
"""What the symbolic semantics assumes of its uninterpreted functions."""


# ------------------------------------------------------------------------- elements


def to_z3(e: Elem) -> z3.ArithRef:
    return z3.RealVal(e) if isinstance(e, Fraction) else e


def add(a: Elem, b: Elem) -> Elem:
    return total((a, b))


def mul(a: Elem, b: Elem) -> Elem:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return a * b
    if isinstance(b, Fraction):
        a, b = b, a
    if isinstance(a, Fraction) and a in (0, 1):
        return ZERO if a == 0 else b
    return to_z3(a) * to_z3(b)


def neg(a: Elem) -> Elem:
    return mul(Fraction(-1), a)


def divide(a: Elem, b: Elem) -> Elem:
    if isinstance(b, Fraction):
        if b == 0:
            raise SymbolicError("division by zero")
        return mul(a, 1 / b)
    return to_z3(a) / b


def total(items: Iterable[Elem]) -> Elem:
    """The sum, with the known numbers folded into one term (zero adds nothing)."""
    number = ZERO
    terms: list[z3.ArithRef] = []
    for e in items:
        if isinstance(e, Fraction):
            number += e
        else:
            terms.append(e)
    if not terms:
        return number
    if number != 0:
        terms.append(z3.RealVal(number))
    return terms[0] if len(terms) == 1 else z3.Sum(terms)


def maximum(a: Elem, b: Elem) -> Elem:
    if isinstance(a, Fraction) and isinstance(b, Fraction):
        return max(a, b)
    za, zb = to_z3(a), to_z3(b)
    return z3.If(za >= zb, za, zb)


def relu(a: Elem) -> Elem:
    if isinstance(a, Fraction):
        return max(a, ZERO)
    return UNINTERPRETED["relu"](a)


def define_relu(expr: z3.ExprRef) -> z3.ExprRef:
    """`expr` with the uninterpreted relu replaced by its definition, max(t, 0)."""
    t = z3.Var(0, _REAL)
    return z3.substitute_funs(expr, (UNINTERPRETED["relu"], z3.If(t > 0, t, 0)))


def _function(name: str) -> Callable[[Elem], Elem]:
    function = UNINTERPRETED[name]
    return lambda a: function(to_z3(a))


# -------------------------------------------------------------------------- tensors


def _array(value: Any) -> np.ndarray:
    """`value` as an object array (np.frompyfunc returns a bare element for 0-d input)."""
    if isinstance(value, np.ndarray):
        return value
    array = np.empty((), dtype=object)
    array[()] = value
    return array


def _elementwise(fn: Callable[..., Elem], arity: int) -> Callable[..., np.ndarray]:
    """`fn` lifted to object arrays, with NumPy broadcasting."""
    lifted = np.frompyfunc(fn, arity, 1)
    return lambda *arrays: _array(lifted(*arrays))


ADD, MUL, DIVIDE = _elementwise(add, 2), _elementwise(mul, 2), _elementwise(divide, 2)
NEG, RELU = _elementwise(neg, 1), _elementwise(relu, 1)


def variables(name: str, shape: Sequence[int]) -> np.ndarray:
    """A tensor of fresh z3 reals named `name[i,j,...]` (the brackets make z3 print them
    quoted, `|x[0,1]|`, which `validate.ProvenPairs` relies on)."""
    out = np.empty(tuple(shape), dtype=object)
    for index in np.ndindex(out.shape):
        out[index] = z3.Real(f"{name}[{','.join(map(str, index))}]")
    return out


def known(values: np.ndarray | Sequence[Any] | Fraction | float) -> np.ndarray:
    """A tensor of known numbers (ints, exact floats, Fractions) as Fractions."""
    array = np.asarray(values)
    out = np.empty(array.shape, dtype=object)
    for index in np.ndindex(array.shape):
        value = array[index]
        out[index] = Fraction(value.item() if isinstance(value, np.generic) else value)
    return out


def _filled(shape: Sequence[int], value: Any) -> np.ndarray:
    out = np.empty(tuple(shape), dtype=object)
    out[...] = value
    return out


SEMANTICS: dict[str, SymbolicKernel] = {}
"""Symbolic kernel by op short name; ops not listed raise SymbolicError in `run`."""


def _semantics(*names: str) -> Callable[[SymbolicKernel], SymbolicKernel]:
    def register(fn: SymbolicKernel) -> SymbolicKernel:
        for name in names:
            SEMANTICS[name] = fn
        return fn

    return register


# --------------------------------------------------------------------- element-wise


@_semantics("add")
def _add(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [ADD(inputs[0], inputs[1])]


@_semantics("mul", "scale")
def _mul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [MUL(inputs[0], inputs[1])]


@_semantics("relu")
def _relu(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [RELU(inputs[0])]


def _uninterpreted_op(name: str) -> None:
    lifted = _elementwise(_function(name), 1)
    SEMANTICS[name] = lambda attrs, inputs: [lifted(inputs[0])]


for _name in ("sigmoid", "tanh", "gelu", "exp"):
    _uninterpreted_op(_name)


def absolute(a: Elem) -> Elem:
    if isinstance(a, Fraction):
        return abs(a)
    return z3.If(a >= 0, a, -a)


MAXIMUM, ABS = _elementwise(maximum, 2), _elementwise(absolute, 1)


@_semantics("neg")
def _neg(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [NEG(inputs[0])]


@_semantics("sub")
def _sub(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [ADD(inputs[0], NEG(inputs[1]))]


@_semantics("abs")
def _abs(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [ABS(inputs[0])]


@_semantics("max")
def _max(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [MAXIMUM(inputs[0], inputs[1])]


@_semantics("min")
def _min(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [NEG(MAXIMUM(NEG(inputs[0]), NEG(inputs[1])))]


@_semantics("broadcast")
def _broadcast(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.broadcast_to(inputs[0], attrs["shape"]).copy()]


WITHOUT_SEMANTICS = frozenset(
    {"embedding", "gather", "compare", "not", "and", "or", "xor", "where", "cast"}
    | {"aggregate", "edge_softmax", "edge_scores"}
    | {"div", "reciprocal", "pow", "log", "sqrt", "erf"}
)
"""Forward ops with no symbolic semantics, which no axiom or rule mentions (`run_op`
raises SymbolicError for them): those with integer or boolean operands or results
(ids and indices, comparisons, logic, selection, casts, and the GNN ops that
read a graph's integer edge arrays), which real arithmetic does not
model, and the partial real functions the ONNX importer brought (division, powers,
logarithms, roots, erf), whose axioms would need their domains."""


# --------------------------------------------------------------------------- linear


@_semantics("transpose")
def _transpose(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.transpose(inputs[0], attrs["perm"])]


@_semantics("matmul")
def _matmul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    lhs, rhs = inputs
    batch = np.broadcast_shapes(lhs.shape[:-2], rhs.shape[:-2])
    lhs = np.broadcast_to(lhs, (*batch, *lhs.shape[-2:]))
    rhs = np.broadcast_to(rhs, (*batch, *rhs.shape[-2:]))
    out = np.empty((*batch, lhs.shape[-2], rhs.shape[-1]), dtype=object)
    for index in np.ndindex(out.shape):
        *b, m, n = index
        out[index] = total(map(mul, lhs[(*b, m)], rhs[(*b, slice(None), n)]))
    return [out]


def _windows(
    x: np.ndarray,
    kernel: tuple[int, int],
    strides: tuple[int, int],
    padding: str | Sequence[int],
    fill: Any,
) -> np.ndarray:
    """All kh x kw windows of an NCHW tensor, [N, C, OH, OW, kh, kw], padded with `fill`
    exactly as the reference kernels pad (`shapes.window_pads`)."""
    top, left, bottom, right = window_pads(padding, x.shape[2:4], kernel, strides)
    n, c, h, w = x.shape
    padded = _filled((n, c, top + h + bottom, left + w + right), fill)
    padded[:, :, top : top + h, left : left + w] = x
    windows = np.lib.stride_tricks.sliding_window_view(padded, kernel, axis=(2, 3))
    return windows[:, :, :: strides[0], :: strides[1]]


@_semantics("conv2d")
def _conv2d(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, w = inputs
    out_channels, group_channels, kh, kw = w.shape
    per_group = out_channels // attrs["groups"]
    windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], ZERO)
    n, _, oh, ow = windows.shape[:4]
    out = np.empty((n, out_channels, oh, ow), dtype=object)
    for b, o, i, j in np.ndindex(out.shape):
        # Output channel o belongs to group g, which reads input channels g*Cg .. g*Cg+Cg-1.
        first = o // per_group * group_channels
        patch = windows[b, first : first + group_channels, i, j]
        out[b, o, i, j] = total(map(mul, patch.flat, w[o].flat))
    return [RELU(out) if attrs["activation"] == "relu" else out]


@_semantics("enlarge")
def _enlarge(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    (w,) = inputs
    kh, kw = attrs["kernel"]
    out = _filled((*w.shape[:2], kh, kw), ZERO)
    dh, dw = (kh - w.shape[2]) // 2, (kw - w.shape[3]) // 2
    out[:, :, dh : dh + w.shape[2], dw : dw + w.shape[3]] = w
    return [out]


def _max_of(items: Iterable[Elem | None]) -> Elem:
    """The largest element, ignoring padding (`None`, the reference kernel's -inf)."""
    present = [e for e in items if e is not None]
    if not present:
        raise SymbolicError("a max-pooling window lies entirely in the padding")
    best = present[0]
    for e in present[1:]:
        best = maximum(best, e)
    return best


@_semantics("pool2d")
def _pool2d(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    (x,) = inputs
    kh, kw = attrs["kernel"]
    is_max = attrs["kind"] == "max"
    windows = _windows(x, (kh, kw), attrs["strides"], attrs["padding"], None if is_max else ZERO)
    out = np.empty(windows.shape[:4], dtype=object)
    for index in np.ndindex(out.shape):
        window = windows[index].flat
        # Average pooling counts the padded zeros: divide by the full window size.
        out[index] = _max_of(window) if is_max else mul(total(window), Fraction(1, kh * kw))
    return [out]


# ------------------------------------------------------------------------ structure


@_semantics("concat")
def _concat(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.concatenate(inputs, axis=attrs["axis"])]


@_semantics("split")
def _split(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    cuts = np.cumsum(attrs["sizes"])[:-1]
    return list(np.split(inputs[0], cuts, axis=attrs["axis"]))


@_semantics("reshape")
def _reshape(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [inputs[0].reshape(attrs["shape"])]


# ------------------------------------------------------------------------ constants


def _fill_op(name: str, value: Fraction) -> None:
    SEMANTICS[name] = lambda attrs, inputs: [_filled(attrs["shape"], value)]


_fill_op("ones", ONE)
_fill_op("zeros", ZERO)


@_semantics("c_pool")
def _c_pool(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    kh, kw = attrs["kernel"]
    return [_filled((attrs["channels"], 1, kh, kw), Fraction(1, kh * kw))]


@_semantics("i_conv")
def _i_conv(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    channels = attrs["channels"]
    kh, kw = attrs["kernel"]
    out = _filled((channels, channels, kh, kw), ZERO)
    for c in range(channels):
        out[c, c, kh // 2, kw // 2] = ONE
    return [out]


@_semantics("i_matmul")
def _i_matmul(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [known(np.eye(attrs["size"], dtype=int))]


@_semantics("constant")
def _constant(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    value: ConstData = attrs["value"]
    return [known(np.asarray(value.values, dtype=object).reshape(value.shape))]


# ----------------------------------------------------------------------- model ops


def _reduce_axes(
    x: np.ndarray, axes: Sequence[int], keepdims: bool, fold: Callable[[list[Elem]], Elem]
) -> np.ndarray:
    """`fold` applied to every slice of `x` along `axes` (NumPy's axis reduction)."""
    axes = sorted(a % x.ndim for a in axes)
    moved = np.moveaxis(x, axes, range(x.ndim - len(axes), x.ndim))
    rows = moved.reshape(*moved.shape[: x.ndim - len(axes)], -1)
    out = np.empty(rows.shape[:-1], dtype=object)
    for index in np.ndindex(out.shape):
        out[index] = fold(list(rows[index]))
    if keepdims:
        out = out.reshape([1 if a in axes else d for a, d in enumerate(x.shape)])
    return out


def _mean(x: np.ndarray, axes: Sequence[int], keepdims: bool) -> np.ndarray:
    count = math.prod(x.shape[a] for a in axes)
    return _reduce_axes(x, axes, keepdims, lambda row: mul(total(row), Fraction(1, count)))


@_semantics("reduce")
def _reduce(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, axes, keepdims = inputs[0], tuple(attrs["axes"]), attrs["keepdims"]
    if attrs["kind"] == "mean":
        return [_mean(x, axes, keepdims)]
    fold = _max_of if attrs["kind"] == "max" else total
    return [_reduce_axes(x, axes, keepdims, fold)]


_EXP, _RSQRT = _elementwise(_function("exp"), 1), _elementwise(_function("rsqrt"), 1)


@_semantics("softmax")
def _softmax(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    exp = _EXP(inputs[0])
    return [DIVIDE(exp, _reduce_axes(exp, (attrs["axis"],), True, total))]


def _normalize(centred: np.ndarray, var: np.ndarray, epsilon: float) -> np.ndarray:
    """centred / sqrt(var + epsilon), with 1/sqrt uninterpreted."""
    return MUL(centred, _RSQRT(ADD(var, known(Fraction(epsilon)))))


@_semantics("batchnorm")
def _batchnorm(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, scale, bias, mean, var = inputs
    shape = (1, x.shape[1]) + (1,) * (x.ndim - 2)  # per-channel vectors broadcast over N,C,...
    centred = ADD(x, NEG(mean.reshape(shape)))
    normalized = _normalize(centred, var.reshape(shape), attrs["epsilon"])
    return [ADD(MUL(normalized, scale.reshape(shape)), bias.reshape(shape))]


@_semantics("layernorm")
def _layernorm(attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    x, gamma, beta = inputs
    axes = tuple(range(attrs["axis"] % x.ndim, x.ndim))
    mean = _mean(x, axes, True)
    centred = ADD(x, NEG(mean))
    var = _mean(MUL(centred, centred), axes, True)
    return [ADD(MUL(_normalize(centred, var, attrs["epsilon"]), gamma), beta)]


# ------------------------------------------------------------------------- programs


def run_op(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The results of `op` on symbolic tensors; SymbolicError for ops without semantics
    (`embedding` indexes by integer values, which a symbolic tensor does not have)."""
    kernel = SEMANTICS.get(op)
    if kernel is None:
        raise SymbolicError(f"graph.{op} has no symbolic semantics")
    return kernel(attrs, inputs)


def run(dag: Dag, args: Sequence[np.ndarray]) -> list[np.ndarray]:
    """The outputs of `dag` on symbolic arguments (one object array per argument)."""
    if len(args) != len(dag.args):
        raise ValueError(f"the dag takes {len(dag.args)} arguments, got {len(args)}")
    results: dict[Node, list[np.ndarray]] = {}
    for node, arg in zip(dag.args, args, strict=True):
        if arg.shape != node.sigs[0].shape:
            raise ValueError(
                f"argument {node.attr('name')}: shape {arg.shape}, expected {node.sigs[0].shape}"
            )
        results[node] = [arg]
    for node in dag.ops:
        operands = [results[value.node][value.index] for value in node.inputs]
        results[node] = run_op(node.op, dict(node.attrs), operands)
    return [results[value.node][value.index] for value in dag.outputs]
