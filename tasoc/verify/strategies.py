"""Hypothesis strategies for property-testing passes on random, well-typed programs.

`graphs()` draws small verified `builtin.module { func.func @main }` programs that
mix every `graph` op kind on tiny shapes: element-wise ops with broadcasting,
scale, transpose, batched matmul, grouped/strided/padded convolutions with fused
relu, pooling, concat/split/reshape, softmax, reductions, normalizations,
embeddings and TASO's constants, with weights as `{graph.param}` arguments. A pass
that claims to preserve meaning can then be checked against the reference:

    from hypothesis import given, settings
    from tasoc.verify.equivalence import equivalent
    from tasoc.verify.strategies import graphs

    @settings(max_examples=50, deadline=None)
    @given(graphs(max_ops=8))
    def test_my_pass_preserves_meaning(module):
        assert equivalent(module, my_pass(module.clone())).ok

(clone first when the pass rewrites in place). `graphs(ops=["conv2d"], max_ops=1)`
draws single-op programs, which is how the backend tests cover each op.

`placements(dag)`, `placed_programs(module)` and `capacities(module)` draw
memory-placed programs and device capacities (`placement_strategies.py`), and
`cost_graphs()` the additive cost graphs soap-shard's frontier, tiling and ILP
searches work on (`cost_graph_strategies.py`).

`meshes()` draws device meshes and `shardings(dag, mesh)` a legal SOAP configuration
for every op of a light graph (`ir/dag.py`), as the `Plan` that `soap-shard`'s writer
writes as a sharded program: inputs for a parallel backend or cost model under test.

Each op kind has an emitter that picks its operands from the values built so far
when one has a fitting type (so graphs are connected and values are reused) and
otherwise makes a fresh argument of a fitting type; typing questions are answered
by `shapes.infer`, the same rules the verifier uses. Results nobody uses become
the program's outputs.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import strategies as st
from hypothesis.vendor.pretty import RepresentationPrinter, for_type_by_name
from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir import soap
from tasoc.ir.builder import GraphBuilder
from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.graph import OPS_BY_NAME, sig_of
from tasoc.ir.op_sets import ops_with
from tasoc.ir.opdef import op_defs
from tasoc.ir.ops.elementwise import COMPARISONS
from tasoc.ir.ops.reduce import REDUCTIONS
from tasoc.ir.shapes import (
    ConstData,
    DType,
    ShapeError,
    TensorSig,
    broadcast_shapes,
    infer,
)
from tasoc.ir.shard_plan import Plan
from tasoc.ir.soap import Config, Mesh, OpRule, Sharding
from tasoc.ir.traits import Training
from tasoc.verify.cost_graph_strategies import cost_graphs  # noqa: F401 - public strategy
from tasoc.verify.placement_strategies import (  # noqa: F401 - public strategies
    capacities,
    placed_programs,
    placements,
)


def _pretty_module(module: ModuleOp, printer: RepresentationPrinter, cycle: bool) -> None:
    for index, line in enumerate(str(module).splitlines()):
        if index:
            printer.break_()
        printer.text(line)


# Hypothesis would print a failing module as nested xDSL dataclasses (megabytes for
# a few ops, and slow enough to stall the run); print it as IR text instead.
for_type_by_name(ModuleOp.__module__, ModuleOp.__name__, _pretty_module)


def tensor_sigs(
    min_rank: int = 0,
    max_rank: int = 4,
    min_side: int = 1,
    max_side: int = 4,
    dtypes: Sequence[DType | str] = (DType.F32,),
) -> st.SearchStrategy[TensorSig]:
    """Static tensor types with rank and side lengths in the given ranges."""
    shapes = st.lists(st.integers(min_side, max_side), min_size=min_rank, max_size=max_rank).map(
        tuple
    )
    return st.builds(TensorSig, shapes, st.sampled_from([DType(d) for d in dtypes]))


def _fits(op: str, sigs: Sequence[TensorSig], attrs: dict[str, Any]) -> bool:
    try:
        infer(op, sigs, attrs)
    except ShapeError:
        return False
    return True


class _GraphMaker:
    """The state of one drawn program: the builder and the values made so far."""

    def __init__(self, draw: st.DrawFn, dtype: DType, trainable: bool = False) -> None:
        self.draw = draw
        self.dtype = dtype
        self.trainable = trainable
        """Drawing a forward program for `autodiff`: only what has a gradient."""
        self.builder = GraphBuilder()
        self.pool: list[SSAValue] = []
        """Values of the program's float type that later ops may consume."""
        self.produced: list[SSAValue] = []
        self._args = 0

    # ----------------------------------------------------------------- values
    def sig(self, value: SSAValue) -> TensorSig:
        return sig_of(value.type)

    def new_arg(self, sig: TensorSig, param: bool | None = None) -> SSAValue:
        """A fresh argument; a weight (`{graph.param}`) if `param`, drawn if None."""
        is_param = self.draw(st.booleans()) if param is None else param
        self._args += 1
        name = f"{'w' if is_param else 'x'}{self._args}"
        make = self.builder.param if is_param else self.builder.input
        value = make(name, sig.shape, sig.dtype.value)
        if sig.dtype == self.dtype:
            self.pool.append(value)
        return value

    def existing(self, accepts: Callable[[TensorSig], bool]) -> SSAValue | None:
        """A value from the pool of a type `accepts` allows, or None (also by chance,
        so that fresh arguments keep appearing)."""
        candidates = [v for v in self.pool if accepts(self.sig(v))]
        if not candidates or self.draw(st.integers(0, 3)) == 0:
            return None
        return self.draw(st.sampled_from(candidates))

    def operand(
        self,
        accepts: Callable[[TensorSig], bool],
        fresh: Callable[[], TensorSig],
        param: bool | None = None,
    ) -> SSAValue:
        """An existing fitting value, or a new argument of type `fresh()`."""
        found = self.existing(accepts)
        return found if found is not None else self.new_arg(fresh(), param)

    def any_float(self, min_rank: int = 0, max_rank: int = 4) -> SSAValue:
        return self.operand(
            lambda s: min_rank <= s.rank <= max_rank,
            lambda: self.fresh(min_rank, max_rank),
            param=False,
        )

    def fresh(self, min_rank: int = 0, max_rank: int = 4) -> TensorSig:
        return self.draw(tensor_sigs(min_rank, max_rank, dtypes=[self.dtype]))

    def nchw(self) -> SSAValue:
        shape = st.tuples(
            st.integers(1, 2), st.integers(1, 4), st.integers(1, 5), st.integers(1, 5)
        )
        return self.operand(
            lambda s: s.rank == 4, lambda: TensorSig(self.draw(shape), self.dtype), param=False
        )

    def emit(self, op: str, *operands: SSAValue, **attrs: Any) -> list[SSAValue]:
        results = list(self.builder.emit(OPS_BY_NAME[op], *operands, **attrs).results)
        self.pool.extend(r for r in results if self.sig(r).dtype == self.dtype)
        self.produced.extend(results)
        return results

    # --------------------------------------------------------------- attributes
    def axis(self, rank: int) -> int:
        return self.draw(st.integers(-rank, rank - 1))

    def window(self, in_hw: Sequence[int]) -> dict[str, Any]:
        """Strides, padding and a kernel size that fits the padded input."""
        padding = self.draw(
            st.one_of(st.sampled_from(["same", "valid"]), st.tuples(*[st.integers(0, 1)] * 4))
        )
        if padding == "same":
            limits = (3, 3)
        elif padding == "valid":
            limits = (min(3, in_hw[0]), min(3, in_hw[1]))
        else:
            limits = (
                min(3, in_hw[0] + padding[0] + padding[2]),
                min(3, in_hw[1] + padding[1] + padding[3]),
            )
        kernel = tuple(self.draw(st.integers(1, limit)) for limit in limits)
        strides = self.draw(st.tuples(st.integers(1, 2), st.integers(1, 2)))
        return {"padding": padding, "kernel": kernel, "strides": strides}

    def shape_like_pool(self, min_rank: int = 0) -> tuple[int, ...]:
        """The shape of an existing value (so constants combine with it), or fresh."""
        found = self.existing(lambda s: s.rank >= min_rank)
        return self.sig(found).shape if found is not None else self.fresh(min_rank).shape

    def finish(self) -> ModuleOp:
        outputs = [v for v in self.produced if not v.uses]
        module = self.builder.build(*outputs)
        module.verify()
        return module

    def finish_trainable(self) -> ModuleOp:
        """One float output that every result of the program's float type reaches: the
        sum of each unused one's elements, times a rank-0 weight, so that the program has
        a weight to differentiate even when the ops drew none. (Results of other types,
        a comparison's or a cast's, reach it only through the ops that read them.)"""
        g = self.builder
        totals = []
        for value in self.produced:
            sig = self.sig(value)
            if value.uses or sig.dtype != self.dtype:
                continue
            axes = tuple(range(sig.rank))
            totals.append(g.reduce(value, "sum", axes) if axes else value)
        if not totals:  # every result was consumed: sum the program's first input
            first = self.pool[0]
            axes = tuple(range(self.sig(first).rank))
            totals.append(g.reduce(first, "sum", axes) if axes else first)
        total = totals[0]
        for other in totals[1:]:
            total = g.add(total, other)
        output = g.scale(total, self.new_arg(TensorSig((), self.dtype), param=True))
        module = g.build(output)
        module.verify()
        return module


# ---------------------------------------------------------------------- emitters

Emitter = Callable[[_GraphMaker], None]

NO_GRADIENT = frozenset({"pow", "gather"})
"""Forward ops whose float operands `autodiff` gives no gradient (it refuses a program
whose loss depends on one): `graphs(trainable=True)` leaves them out."""


def _unary(name: str) -> Emitter:
    def emit(m: _GraphMaker) -> None:
        m.emit(name, m.any_float())

    return emit


def _partner(m: _GraphMaker, shape: tuple[int, ...], dtype: DType) -> TensorSig:
    """A type that broadcasts against `shape`: a suffix of it with some dimensions
    collapsed to 1."""
    suffix = shape[m.draw(st.integers(0, len(shape))) :]
    return TensorSig(tuple(1 if m.draw(st.booleans()) else d for d in suffix), dtype)


def _broadcasting(name: str) -> Emitter:
    def emit(m: _GraphMaker) -> None:
        m.emit(name, *_float_pair(m, name))

    return emit


def _positive(m: _GraphMaker, sig: TensorSig) -> SSAValue:
    """A fresh argument of type `sig` as the operand of log, sqrt or reciprocal, or a
    divisor or the base of a power: `random_inputs` draws it positive and near 1, so
    the op stays in its domain and well-conditioned."""
    return m.new_arg(sig, param=False)


def _in_domain(name: str) -> Emitter:
    """log, sqrt, reciprocal: on a positive operand."""

    def emit(m: _GraphMaker) -> None:
        m.emit(name, _positive(m, m.fresh()))

    return emit


def _div(m: _GraphMaker) -> None:
    x = m.any_float()
    m.emit("div", x, _positive(m, _partner(m, m.sig(x).shape, m.dtype)))


def _pow(m: _GraphMaker) -> None:
    exponent = m.any_float()
    m.emit("pow", _positive(m, _partner(m, m.sig(exponent).shape, m.dtype)), exponent)


def _boolean(m: _GraphMaker, accepts: Callable[[TensorSig], bool], fresh: TensorSig) -> SSAValue:
    """An i1 value made earlier (a comparison's, say) that `accepts` allows, or a fresh
    i1 argument of type `fresh` (`random_inputs` draws it as fair coins)."""
    made = [v for v in m.produced if m.sig(v).dtype == DType.BOOL and accepts(m.sig(v))]
    if made and m.draw(st.booleans()):
        return m.draw(st.sampled_from(made))
    return m.new_arg(fresh, param=False)


def _float_pair(m: _GraphMaker, name: str = "add") -> tuple[SSAValue, SSAValue]:
    """Two float values that broadcast against each other (as `name`'s operands), in
    either order."""
    x = m.any_float()
    y = m.operand(
        lambda s: _fits(name, [m.sig(x), s], {}), lambda: _partner(m, m.sig(x).shape, m.dtype)
    )
    return (x, y) if m.draw(st.booleans()) else (y, x)


def _compare(m: _GraphMaker) -> None:
    m.emit("compare", *_float_pair(m), predicate=m.draw(st.sampled_from(COMPARISONS)))


def _not(m: _GraphMaker) -> None:
    m.emit("not", _boolean(m, lambda s: True, TensorSig(m.shape_like_pool(), DType.BOOL)))


def _logic(name: str) -> Emitter:
    def emit(m: _GraphMaker) -> None:
        x = _boolean(m, lambda s: True, TensorSig(m.shape_like_pool(), DType.BOOL))
        shape = m.sig(x).shape
        y = _boolean(m, lambda s: _fits(name, [m.sig(x), s], {}), _partner(m, shape, DType.BOOL))
        m.emit(name, *((x, y) if m.draw(st.booleans()) else (y, x)))

    return emit


def _where(m: _GraphMaker) -> None:
    a, b = _float_pair(m)
    shape = broadcast_shapes(m.sig(a).shape, m.sig(b).shape)
    condition = _boolean(
        m,
        lambda s: _fits("where", [s, m.sig(a), m.sig(b)], {}),
        _partner(m, shape, DType.BOOL),
    )
    m.emit("where", condition, a, b)


def _cast(m: _GraphMaker) -> None:
    """A float value to another float type or to i1, or a fresh integer or i1 argument
    to the program's float type (never to its own type: a cast that changes nothing is
    dropped by the ONNX import, so it would not round-trip). Floats become integers only
    in hand-written tests: a value computed near an integer (a sum of softmax outputs)
    truncates to either neighbour, depending on the backend's last bit. bfloat16 appears
    only in bfloat16 programs, so that onnxruntime, which cannot return it, runs the
    others."""
    if m.draw(st.booleans()):
        kinds = sorted({DType.F32, DType.F16, DType.F64, DType.BOOL} - {m.dtype})
        m.emit("cast", m.any_float(), to=m.draw(st.sampled_from(kinds)))
        return
    source = m.draw(st.sampled_from([kind for kind in DType if not kind.is_float]))
    m.emit("cast", m.new_arg(TensorSig(m.shape_like_pool(), source), param=False), to=m.dtype)


def _broadcast(m: _GraphMaker) -> None:
    """A broadcast that changes the shape (one that does not is dropped by the ONNX
    import, like an identity cast)."""
    x = m.any_float()
    shape = m.sig(x).shape
    stretched = tuple(m.draw(st.integers(1, 3)) if d == 1 else d for d in shape)
    lead = m.draw(st.lists(st.integers(1, 3), min_size=int(stretched == shape), max_size=2))
    m.emit("broadcast", x, shape=(*lead, *stretched))


def _gather(m: _GraphMaker) -> None:
    data = m.any_float(min_rank=1)
    indices = _indices(m, m.draw(tensor_sigs(0, 2)).shape)
    m.emit("gather", data, indices, axis=m.axis(m.sig(data).rank))


def _activation_grad(name: str) -> Emitter:
    """An activation's derivative: (y or x, dy), two values of one shape."""

    def emit(m: _GraphMaker) -> None:
        value = m.any_float()
        m.emit(name, value, _exactly(m, m.sig(value).shape, False))

    return emit


def _scale(m: _GraphMaker) -> None:
    x = m.any_float()
    scalar = m.operand(lambda s: s.rank == 0, lambda: TensorSig((), m.dtype))
    m.emit("scale", x, scalar)


def _transpose(m: _GraphMaker) -> None:
    x = m.any_float()
    m.emit("transpose", x, perm=tuple(m.draw(st.permutations(range(m.sig(x).rank)))))


def _matmul(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=2)
    shape = m.sig(x).shape
    side = st.integers(1, 4)
    if m.draw(st.booleans()):
        rhs = m.operand(
            lambda s: _fits("matmul", [m.sig(x), s], {}),
            lambda: TensorSig((shape[-1], m.draw(side)), m.dtype),
            param=True,
        )
        m.emit("matmul", x, rhs)
    else:
        lhs = m.operand(
            lambda s: _fits("matmul", [s, m.sig(x)], {}),
            lambda: TensorSig((m.draw(side), shape[-2]), m.dtype),
        )
        m.emit("matmul", lhs, x)


def _conv_operands(m: _GraphMaker) -> tuple[SSAValue, SSAValue, dict[str, Any]]:
    """An NCHW value x, a weight that fits it and the conv2d attributes (no activation)."""
    x = m.nchw()
    channels, in_hw = m.sig(x).shape[1], m.sig(x).shape[2:]
    window = m.window(in_hw)
    attrs = {"strides": window["strides"], "padding": window["padding"]}

    def groups_of(w: TensorSig) -> int:
        """The groups count a weight implies; 0 when it cannot apply to x."""
        return channels // w.shape[1] if w.rank == 4 and channels % w.shape[1] == 0 else 0

    def fresh_weight() -> TensorSig:
        groups = m.draw(st.sampled_from([g for g in range(1, channels + 1) if channels % g == 0]))
        out_channels = groups * m.draw(st.integers(1, 2))
        return TensorSig((out_channels, channels // groups, *window["kernel"]), m.dtype)

    weight = m.operand(
        lambda s: (
            groups_of(s) > 0
            and _fits(
                "conv2d", [m.sig(x), s], {**attrs, "groups": groups_of(s), "activation": "none"}
            )
        ),
        fresh_weight,
        param=True,
    )
    return x, weight, {**attrs, "groups": groups_of(m.sig(weight))}


def _conv2d(m: _GraphMaker) -> None:
    x, weight, attrs = _conv_operands(m)
    m.emit("conv2d", x, weight, **attrs, activation=m.draw(st.sampled_from(["none", "relu"])))


def _result_shape(m: _GraphMaker, op: str, operands: Sequence[SSAValue], **attrs: Any) -> tuple:
    """The shape of `op`'s first result on `operands`: what its gradient op's dy has."""
    return infer(op, [m.sig(v) for v in operands], attrs)[0].shape


def _conv2d_grad_input(m: _GraphMaker) -> None:
    x, weight, attrs = _conv_operands(m)
    dy = _exactly(m, _result_shape(m, "conv2d", [x, weight], **attrs, activation="none"), False)
    m.emit("conv2d_grad_input", dy, weight, **attrs, input_shape=m.sig(x).shape)


def _conv2d_grad_weight(m: _GraphMaker) -> None:
    x, weight, attrs = _conv_operands(m)
    dy = _exactly(m, _result_shape(m, "conv2d", [x, weight], **attrs, activation="none"), False)
    m.emit("conv2d_grad_weight", x, dy, **attrs, kernel=m.sig(weight).shape[2:])


def _enlarge(m: _GraphMaker) -> None:
    kernel = st.tuples(*[st.integers(1, 3)] * 4)
    w = m.operand(lambda s: s.rank == 4, lambda: TensorSig(m.draw(kernel), m.dtype), param=True)
    _, _, kh, kw = m.sig(w).shape
    grow = st.integers(0, 1)
    m.emit("enlarge", w, kernel=(kh + 2 * m.draw(grow), kw + 2 * m.draw(grow)))


def _pool2d_attrs(m: _GraphMaker, x: SSAValue) -> dict[str, Any]:
    return {"kind": m.draw(st.sampled_from(["avg", "max"])), **m.window(m.sig(x).shape[2:])}


def _pool2d(m: _GraphMaker) -> None:
    x = m.nchw()
    m.emit("pool2d", x, **_pool2d_attrs(m, x))


def _pool2d_grad(m: _GraphMaker) -> None:
    x = m.nchw()
    attrs = _pool2d_attrs(m, x)
    m.emit("pool2d_grad", x, _exactly(m, _result_shape(m, "pool2d", [x], **attrs), False), **attrs)


def _concat(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    sig = m.sig(x)
    axis = m.axis(sig.rank)
    operands = [x]
    for _ in range(m.draw(st.integers(1, 2))):
        shape = list(sig.shape)
        shape[axis] = m.draw(st.integers(1, 3))
        part = m.operand(
            lambda s: _fits("concat", [sig, s], {"axis": axis}),
            lambda shape=tuple(shape): TensorSig(shape, m.dtype),
        )
        operands.insert(m.draw(st.integers(0, len(operands))), part)
    m.emit("concat", *operands, axis=axis)


def _pieces(m: _GraphMaker, length: int, max_cuts: int) -> list[tuple[int, int]]:
    """A random partition of range(length) into consecutive non-empty (start, end)."""
    cuts = m.draw(st.sets(st.integers(1, length - 1), max_size=max_cuts)) if length > 1 else set()
    bounds = [0, *sorted(cuts), length] if length else []
    return list(itertools.pairwise(bounds))


def _split(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    axis = m.axis(m.sig(x).rank)
    pieces = _pieces(m, m.sig(x).shape[axis], max_cuts=2)
    m.emit("split", x, axis=axis, sizes=tuple(end - start for start, end in pieces))


def _factors(n: int) -> list[int]:
    """Prime factors of n, with repetition."""
    factors, p = [], 2
    while n > 1:
        while n % p == 0:
            factors.append(p)
            n //= p
        p += 1
    return factors


def _reshape(m: _GraphMaker) -> None:
    x = m.any_float()
    factors = m.draw(st.permutations(_factors(m.sig(x).size)))
    # Group the shuffled prime factors into dimensions, then sprinkle in 1s.
    dims = [math.prod(factors[a:b]) for a, b in _pieces(m, len(factors), max_cuts=3)]
    for _ in range(m.draw(st.integers(0, 1))):
        dims.insert(m.draw(st.integers(0, len(dims))), 1)
    m.emit("reshape", x, shape=tuple(dims))


def _softmax(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    m.emit("softmax", x, axis=m.axis(m.sig(x).rank))


_DIFFERENTIABLE_REDUCTIONS = ("sum", "mean", "max")
"""The reductions `reduce_grad` (and so `autodiff`) takes."""


def _reduce_attrs(m: _GraphMaker, x: SSAValue, kinds: Sequence[str]) -> dict[str, Any]:
    rank = m.sig(x).rank
    axes = m.draw(st.sets(st.integers(0, rank - 1), min_size=1))
    negated = [a - rank if m.draw(st.booleans()) else a for a in sorted(axes)]
    return {
        "kind": m.draw(st.sampled_from(kinds)),
        "axes": tuple(negated),
        "keepdims": m.draw(st.booleans()),
    }


def _reduce(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    kinds = _DIFFERENTIABLE_REDUCTIONS if m.trainable else REDUCTIONS
    m.emit("reduce", x, **_reduce_attrs(m, x, kinds))


def _reduce_grad(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    attrs = _reduce_attrs(m, x, _DIFFERENTIABLE_REDUCTIONS)
    m.emit("reduce_grad", x, _exactly(m, _result_shape(m, "reduce", [x], **attrs), False), **attrs)


def _exactly(m: _GraphMaker, shape: tuple[int, ...], param: bool = True) -> SSAValue:
    """A value of exactly `shape` (normalization parameters, gradients): reused, or a new
    argument, a weight if `param`."""
    return m.operand(lambda s: s.shape == shape, lambda: TensorSig(shape, m.dtype), param=param)


def _epsilon(m: _GraphMaker) -> float:
    return m.draw(st.sampled_from([1e-5, 1e-3]))


def _layernorm(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    axis = m.axis(m.sig(x).rank)
    tail = m.sig(x).shape[axis:]
    m.emit("layernorm", x, _exactly(m, tail), _exactly(m, tail), axis=axis, epsilon=_epsilon(m))


def _layernorm_grad(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=1)
    axis = m.axis(m.sig(x).rank)
    gamma, dy = _exactly(m, m.sig(x).shape[axis:]), _exactly(m, m.sig(x).shape, False)
    _keep_out_of_pool(m, m.emit("layernorm_grad", x, gamma, dy, axis=axis, epsilon=_epsilon(m))[0])


def _keep_out_of_pool(m: _GraphMaker, dx: SSAValue) -> None:
    """Let no later op consume a normalization's input gradient `dx`.

    Over a small group (2 values: both normalize to +-1 whatever they are) dx is 0
    in exact arithmetic and rounding noise in practice, different in every backend;
    a later normalization scales that noise up to its epsilon, so the backends
    would disagree by far more than rounding on a meaningless value.
    """
    m.pool.remove(dx)


def _batchnorm(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=2)
    channels = (m.sig(x).shape[1],)
    scale, bias, mean = (_exactly(m, channels) for _ in range(3))
    # The variance is always a fresh weight: `random_inputs` draws it positive.
    var = m.new_arg(TensorSig(channels, m.dtype), param=True)
    m.emit("batchnorm", x, scale, bias, mean, var, epsilon=_epsilon(m))


def _batchnorm_train(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=2)
    channels = (m.sig(x).shape[1],)
    m.emit("batchnorm_train", x, _exactly(m, channels), _exactly(m, channels), epsilon=_epsilon(m))


def _batchnorm_grad(m: _GraphMaker) -> None:
    x = m.any_float(min_rank=2)
    scale, dy = _exactly(m, (m.sig(x).shape[1],)), _exactly(m, m.sig(x).shape, False)
    _keep_out_of_pool(m, m.emit("batchnorm_grad", x, scale, dy, epsilon=_epsilon(m))[0])


def _indices(m: _GraphMaker, shape: tuple[int, ...]) -> SSAValue:
    """A fresh i32 or i64 argument (`random_inputs` draws it in range of what it indexes)."""
    id_type = m.draw(st.sampled_from([DType.I32, DType.I64]))
    return m.new_arg(TensorSig(shape, id_type), param=False)


def _embedding(m: _GraphMaker) -> None:
    ids = _indices(m, m.draw(tensor_sigs(1, 2)).shape)
    table_shape = st.tuples(st.integers(1, 6), st.integers(1, 4))
    table = m.operand(
        lambda s: s.rank == 2, lambda: TensorSig(m.draw(table_shape), m.dtype), param=True
    )
    m.emit("embedding", ids, table)


def _scatter_add(m: _GraphMaker) -> None:
    ids = _indices(m, m.draw(tensor_sigs(1, 2)).shape)
    features = m.draw(st.integers(1, 4))
    updates = _exactly(m, (*m.sig(ids).shape, features), False)
    m.emit("scatter_add", ids, updates, rows=m.draw(st.integers(1, 6)))


# Graph neural networks: edge arrays [blocks, edges], arguments drawn in range.


@dataclass(frozen=True)
class _Edges:
    src: SSAValue
    dst: SSAValue
    blocks: int
    width: int
    block_rows: int


def _edges(m: _GraphMaker) -> _Edges:
    """Fresh edge arguments (`random_inputs` draws them in range: `ir/indices.py`)."""
    blocks, width, rows = (m.draw(st.integers(1, high)) for high in (3, 5, 4))
    src, dst = (_indices(m, (blocks, width)) for _ in range(2))
    return _Edges(src, dst, blocks, width, rows)


def _features(m: _GraphMaker) -> SSAValue:
    """A [rows, features] float value with a row to read."""
    shape = st.tuples(st.integers(1, 6), st.integers(1, 4))
    return m.operand(
        lambda s: s.rank == 2 and s.shape[0] > 0, lambda: TensorSig(m.draw(shape), m.dtype)
    )


def _aggregation(name: str) -> Emitter:
    """`aggregate`, `aggregate_grad` or `aggregate_weight_grad`."""

    def emit(m: _GraphMaker) -> None:
        x = _features(m)
        features = m.sig(x).shape[1]
        e = _edges(m)
        kinds = ["sum", "mean"] + ([] if name == "aggregate_weight_grad" else ["max"])
        attrs = {"reduce": m.draw(st.sampled_from(kinds)), "block_rows": e.block_rows}
        # A max's weights have no gradient: a program drawn for autodiff has none.
        weightless = name == "aggregate_weight_grad" or (m.trainable and attrs["reduce"] == "max")
        weighted = not weightless and m.draw(st.booleans())
        weight = [_exactly(m, (e.blocks, e.width), False)] if weighted else []
        dy = (
            [] if name == "aggregate" else [_exactly(m, (e.blocks * e.block_rows, features), False)]
        )
        m.emit(name, x, e.src, e.dst, *weight, *dy, **attrs)

    return emit


def _edge_softmax(name: str) -> Emitter:
    """`edge_softmax` or `edge_softmax_grad`."""

    def emit(m: _GraphMaker) -> None:
        e = _edges(m)
        shape = (e.blocks, e.width)
        dy = [_exactly(m, shape, False)] if name == "edge_softmax_grad" else []
        m.emit(name, _exactly(m, shape, False), e.dst, *dy, block_rows=e.block_rows)

    return emit


def _edge_scores(m: _GraphMaker) -> None:
    e = _edges(m)
    a = _exactly(m, (m.draw(st.integers(1, 6)), 1), False)
    b = _exactly(m, (e.blocks * e.block_rows, 1), False)
    m.emit("edge_scores", a, b, e.src, e.dst, block_rows=e.block_rows)


def _softmax_cross_entropy(m: _GraphMaker) -> None:
    logits = m.any_float(min_rank=1)
    m.emit("softmax_cross_entropy", logits, _indices(m, m.sig(logits).shape[:-1]))


def _softmax_cross_entropy_grad(m: _GraphMaker) -> None:
    logits = m.any_float(min_rank=1)
    labels = _indices(m, m.sig(logits).shape[:-1])
    dloss = _exactly(m, m.sig(logits).shape[:-1], False)
    m.emit("softmax_cross_entropy_grad", logits, labels, dloss)


def _adam_update(m: _GraphMaker) -> None:
    param = m.any_float()
    shape = m.sig(param).shape
    grad, moment = _exactly(m, shape, False), _exactly(m, shape, False)
    # The second moment and the step are always fresh arguments: `random_inputs` draws
    # the moment non-negative and the step >= 1, as a real optimizer state holds them.
    second_moment = m.new_arg(TensorSig(shape, m.dtype), param=False)
    step = m.new_arg(TensorSig((), DType.F32), param=False)  # f32 whatever the weights are
    hyper = {"lr": m.draw(st.sampled_from([1e-3, 0.1])), "beta1": 0.9, "beta2": 0.999}
    m.emit("adam_update", param, grad, moment, second_moment, step, **hyper, epsilon=1e-8)


def _filled(name: str) -> Emitter:
    def emit(m: _GraphMaker) -> None:
        m.emit(name, shape=m.shape_like_pool(), dtype=m.dtype)

    return emit


def _constant(m: _GraphMaker) -> None:
    shape = m.shape_like_pool()
    # Quarters are exact in every float type, so the printed IR round-trips exactly.
    quarters = m.draw(
        st.lists(st.integers(-8, 8), min_size=math.prod(shape), max_size=math.prod(shape))
    )
    m.emit("constant", value=ConstData(shape, m.dtype, tuple(q / 4 for q in quarters)))


def _channels(m: _GraphMaker) -> int:
    """The channel count of an existing NCHW value, so the kernel fits it."""
    found = m.existing(lambda s: s.rank == 4)
    return m.sig(found).shape[1] if found is not None else m.draw(st.integers(1, 4))


def _c_pool(m: _GraphMaker) -> None:
    kernel = m.draw(st.tuples(st.integers(1, 3), st.integers(1, 3)))
    m.emit("c_pool", channels=_channels(m), kernel=kernel, dtype=m.dtype)


def _i_conv(m: _GraphMaker) -> None:
    kernel = m.draw(st.tuples(st.sampled_from([1, 3]), st.sampled_from([1, 3])))
    m.emit("i_conv", channels=_channels(m), kernel=kernel, dtype=m.dtype)


def _i_matmul(m: _GraphMaker) -> None:
    size = m.shape_like_pool(min_rank=1)[-1]
    m.emit("i_matmul", size=size, dtype=m.dtype)


EMITTERS: dict[str, Emitter] = {
    **{
        name: _unary(name)
        for name in ("relu", "sigmoid", "tanh", "gelu", "neg", "exp", "erf", "abs")
    },
    **{name: _in_domain(name) for name in ("log", "sqrt", "reciprocal")},
    **{name: _broadcasting(name) for name in ("add", "mul", "sub", "max", "min")},
    **{name: _logic(name) for name in ("and", "or", "xor")},
    **{name: _filled(name) for name in ("ones", "zeros")},
    "scale": _scale,
    "transpose": _transpose,
    "matmul": _matmul,
    "conv2d": _conv2d,
    "enlarge": _enlarge,
    "pool2d": _pool2d,
    "concat": _concat,
    "split": _split,
    "reshape": _reshape,
    "softmax": _softmax,
    "reduce": _reduce,
    "layernorm": _layernorm,
    "batchnorm": _batchnorm,
    "embedding": _embedding,
    "constant": _constant,
    "c_pool": _c_pool,
    "i_conv": _i_conv,
    "i_matmul": _i_matmul,
    "div": _div,
    "pow": _pow,
    "compare": _compare,
    "not": _not,
    "where": _where,
    "cast": _cast,
    "broadcast": _broadcast,
    "gather": _gather,
    **{
        name: _activation_grad(name)
        for name in ("relu_grad", "sigmoid_grad", "tanh_grad", "gelu_grad")
    },
    "conv2d_grad_input": _conv2d_grad_input,
    "conv2d_grad_weight": _conv2d_grad_weight,
    "pool2d_grad": _pool2d_grad,
    "reduce_grad": _reduce_grad,
    "scatter_add": _scatter_add,
    "aggregate": _aggregation("aggregate"),
    "aggregate_grad": _aggregation("aggregate_grad"),
    "aggregate_weight_grad": _aggregation("aggregate_weight_grad"),
    "edge_softmax": _edge_softmax("edge_softmax"),
    "edge_softmax_grad": _edge_softmax("edge_softmax_grad"),
    "edge_scores": _edge_scores,
    "layernorm_grad": _layernorm_grad,
    "batchnorm_train": _batchnorm_train,
    "batchnorm_grad": _batchnorm_grad,
    "softmax_cross_entropy": _softmax_cross_entropy,
    "softmax_cross_entropy_grad": _softmax_cross_entropy_grad,
    "adam_update": _adam_update,
}
"""How `graphs()` emits each op kind, by op short name (every op in `GRAPH_OPS`)."""


@st.composite
def _graphs(
    draw: st.DrawFn,
    ops: Sequence[str],
    min_ops: int,
    max_ops: int,
    dtypes: Sequence[DType],
    trainable: bool,
) -> ModuleOp:
    maker = _GraphMaker(draw, draw(st.sampled_from(dtypes)), trainable)
    maker.new_arg(maker.fresh(), param=False)
    for _ in range(draw(st.integers(min_ops, max_ops))):
        EMITTERS[draw(st.sampled_from(ops))](maker)
    return maker.finish_trainable() if trainable else maker.finish()


def graphs(
    max_ops: int = 8,
    ops: Collection[str] | None = None,
    min_ops: int = 1,
    dtypes: Sequence[DType | str] = (DType.F32,),
    trainable: bool = False,
) -> st.SearchStrategy[ModuleOp]:
    """Random verified programs of `min_ops..max_ops` ops drawn from `ops`.

    `ops` are op short names (default: every op of the `graph` dialect); each op
    draws its own operands and attributes, adding weights as needed. The program's
    float type is drawn from `dtypes` (embedding ids are i32 or i64). Raises
    ValueError for unknown op names or an empty range.

    `trainable=True` draws forward programs for `autodiff`: by default only the ops a
    forward program has (not the `Training` ones: gradients, losses, updates) whose
    gradient `autodiff` defines (not `NO_GRADIENT`, and reductions only of the kinds
    `reduce_grad` takes), and one rank-0 float output scaled by a weight, so that
    `autodiff{loss=sum}` always has a weight to differentiate and every drawn op can
    reach the loss.
    """
    default = EMITTERS.keys() - ops_with(Training) - NO_GRADIENT if trainable else EMITTERS
    names = sorted(default if ops is None else ops)
    unknown = sorted(set(names) - EMITTERS.keys())
    if unknown or not names:
        raise ValueError(f"graphs(ops=...): unknown or no op names {unknown}")
    if not 0 <= min_ops <= max_ops:
        raise ValueError(f"graphs(): need 0 <= min_ops <= max_ops, got {min_ops}, {max_ops}")
    kinds = [DType(d) for d in dtypes]
    if not kinds or not all(k.is_float for k in kinds):
        raise ValueError(f"graphs(dtypes=...): need float types, got {list(dtypes)}")
    return _graphs(names, min_ops, max_ops, kinds, trainable)


# ------------------------------------------------------------------ parallel programs

AXIS_NAMES = ("x", "y", "z", "u", "v", "w")
"""Axis names of drawn meshes of two or more axes (one axis is "d"), as the
`soap-shard` pass names the axes of `mesh=2x4`."""


@st.composite
def _meshes(draw: st.DrawFn, max_devices: int, max_axes: int) -> Mesh:
    count = draw(st.integers(1, max_axes))
    names = ("d",) if count == 1 else AXIS_NAMES[:count]
    sizes: list[int] = []
    for _ in names:
        sizes.append(draw(st.integers(1, max_devices // math.prod(sizes))))
    size = math.prod(sizes)
    group = st.permutations(range(max_devices)).map(lambda ids: tuple(ids[:size]))
    return Mesh("mesh", tuple(zip(names, sizes, strict=True)), draw(st.none() | group))


def meshes(max_devices: int = 8, max_axes: int = 2) -> st.SearchStrategy[Mesh]:
    """Device meshes `@mesh` of 1..`max_axes` axes and at most `max_devices` devices.

    One axis is named "d", more are "x", "y", "z", ... (the `soap-shard` pass's names);
    axes of size 1 are drawn too (the edge case of a split that splits nothing).
    Some meshes list their devices (a device group: distinct ids below
    `max_devices`, in any order), the others leave them implicit. Shrinks towards
    one axis of size 1. ValueError when `max_devices` < 1 or `max_axes` is not in
    1..6.

        @given(meshes(max_devices=4))
        def test_my_cost_model(mesh):
            assert my_cost(program, mesh) >= 0
    """
    if max_devices < 1 or not 1 <= max_axes <= len(AXIS_NAMES):
        raise ValueError(
            f"meshes(): need max_devices >= 1 and 1 <= max_axes <= {len(AXIS_NAMES)}, "
            f"got {max_devices}, {max_axes}"
        )
    return _meshes(max_devices, max_axes)


def _rules(dag: Dag) -> dict[Node, OpRule]:
    """Each op's SOAP rule (ops without operands, constants, have none); ValueError
    naming the ops that have no rule."""
    rules, missing = {}, set()
    for node in dag.ops:
        if not node.inputs:
            continue
        if node.op not in op_defs():
            missing.add(node.op)
            continue
        sigs = [v.sig for v in node.inputs]
        rules[node] = soap.rule_of(node.op, sigs, dict(node.attrs), node.sigs)
    if missing:
        raise ValueError(
            f"shardings(): ops without a SOAP rule: {', '.join(sorted(missing))} "
            "(draw graphs(ops=...) among tasoc.ir.opdef.op_defs())"
        )
    return rules


@st.composite
def _shardings(draw: st.DrawFn, dag: Dag, rules: Mapping[Node, OpRule], mesh: Mesh) -> Plan:
    configs: dict[Node, Config] = {}
    operands: dict[Node, tuple[Sharding, ...]] = {}
    values: dict[Value, Sharding] = {}
    for node, rule in rules.items():
        config = draw(st.sampled_from(list(soap.configurations(rule, mesh))))
        reads, makes = soap.shardings_for(rule, config, mesh.name)
        configs[node], operands[node] = config, tuple(reads)
        values.update(zip(node.results, makes, strict=True))
    # Arguments and constants lie as their first reader reads them; the others copy.
    for node, reads in operands.items():
        for value, read in zip(node.inputs, reads, strict=True):
            values.setdefault(value, read)
    for node in (*dag.args, *dag.ops):
        for value in node.results:
            values.setdefault(value, Sharding.replicated(mesh.name, value.sig.rank))
    outputs = tuple(
        draw(
            st.sampled_from(
                [Sharding(mesh.name, values[v].dims), Sharding.replicated(mesh.name, v.sig.rank)]
            )
        )
        for v in dag.outputs
    )
    return Plan(configs, operands, values, outputs)


def shardings(dag: Dag, mesh: Mesh) -> st.SearchStrategy[Plan]:
    """A legal SOAP configuration of every op of `dag` on `mesh` (one of
    `soap.configurations` of its rule, unsplit ones included), as the `Plan` that
    `soap-shard`'s writer turns into a sharded program. Shrinks towards the unsplit
    program.

    Each op is split on its own terms: `plan.operands[op]` are the shardings its
    configuration reads, `plan.values` the shardings its results come out in
    (`soap.shardings_for`: partial sums along the factors it sums over). Arguments
    and constants lie as their first reader reads them; each output leaves complete,
    split as computed or replicated. Where a value lies otherwise than a reader reads
    it, the writer inserts the collectives `soap.reshard` names (or makes what no
    device needs sent: `tasoc.ir.shard_plan`).

    Every op of `dag` with operands needs a SOAP rule (ValueError naming those that
    have none, raised at once), so draw programs among the ops that have one:

        from hypothesis import given, strategies as st
        from tasoc.ir.dag import from_module
        from tasoc.ir.parallel import unsharded
        from tasoc.ir.opdef import op_defs
        from tasoc.ir.shard_plan import write_sharded
        from tasoc.verify.strategies import EMITTERS, graphs, meshes, shardings

        shardable = sorted(op_defs().keys() & EMITTERS.keys())

        @given(st.data(), graphs(ops=shardable, max_ops=4), meshes(max_devices=4))
        def test_my_sharded_backend(data, module, mesh):
            dag = from_module(module)
            sharded = module.clone()
            write_sharded(sharded, dag, data.draw(shardings(dag, mesh)), mesh)
            assert my_backend_runs_like(sharded, unsharded(sharded))
    """
    return _shardings(dag, _rules(dag), mesh)
