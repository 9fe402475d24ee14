"""Prove rewrite rules from the operator axioms with z3 (TASO's verifier, thesis §2.4).

A rule is PROVEN when first-order logic shows that the axioms (`tasoc.verify.axioms`)
entail it: for each output pair i, `axioms ∧ hypotheses ∧ src_i ≠ tgt_i` is
unsatisfiable. Anything else leaves it UNKNOWN (or REFUTED, should z3 find a model),
and a rule that is not proven is never applied.

    rules = prove_rules(candidates, load_axioms(), timeout_s=10, jobs=2)

The encoding
------------
* Tensors are an uninterpreted sort `Tensor`. Every op is one uninterpreted function
  per (op, operand count, result index, result count), taking the op's attributes
  (in `ATTR_NAMES` order) and then its operand tensors: `relu/1(x)`,
  `conv2d/2(strides, padding, activation, groups, x, w)`, `split#1of2/1(axis, sizes, x)`.
* Attribute values are the z3 datatype `Attr`: `int`, `real`, `str` (an interned id),
  `flag`, and lists made of `nil` and `cons`; distinct literals are distinct values,
  and lists are equal exactly when their items are. A `$parameter` is a constant of
  sort `Attr`: universally quantified in an axiom, free in the rule being proven.
  `shape(v)` and `dtype(v)` map tensors to `Attr`, `dim(v, axis)` is
  `at(shape(v), axis)`, and a rank is `length(shape(v))`. A literal negative axis
  becomes its non-negative twin where the rank is known statically.
* An axiom becomes, per output pair, `∀ tensors, params. guards ∧ preconditions →
  src_i = tgt_i`, triggered on each side that mentions every variable, so e-matching
  rewrites both ways. The guards (`_rank_guards`) say at which ranks it holds.
* The rule being proven gets its preconditions and what its types say (`_op_typing`)
  as hypotheses: a rule is claimed only where both patterns type-check, so the
  operands of its matmuls agree, its concats' operands agree off the axis, its
  broadcasting element-wise ops have operands of one shape
  (`rules.SAME_SHAPE_OPERANDS`: no broadcasting), an `activation` parameter is "none"
  or "relu", and so on.
* Background facts, which the rule format cannot state:
  - shapes (`_shape_facts`): how each op's result shape and dtype follow from its
    operands'. A split that undoes a concat names its sizes `dim(y, 1)` after the
    concat's operand, while the concat an axiom produced may be of `matmul(x, y)`;
    the prover must see that the sizes agree. These facts only ever *define* a
    result's shape from its operands', so they cannot contradict each other.
  - permutations (`_permutation_facts`, `_permutation_tables`): two transposes are one
    (permutations composed), the identity permutation does nothing, a transpose moves
    a concat's axis. The text format cannot compute on a permutation, so TASO's
    "transpose is its inverse" and "concat and transpose" rows live here, for any rank.

z3 runs with e-matching only (no model-based instantiation): a rule the axioms do not
reach fails fast ("e-matching ran out of axiom instances") instead of spending its
whole timeout, and z3's timeout is honoured.

What the model abstracts (as TASO's does): a proven rule holds wherever both patterns
type-check to the same result types, element-wise ops do not broadcast
(`rules.SAME_SHAPE_OPERANDS`), and axis parameters stand for non-negative axes. The rewrite
pass must apply rules under those conditions.

Running proofs: z3 objects do not pickle, so `prove_rules` sends `Rule`s to spawned
worker processes (`tasoc.verify.pool`), each of which builds the axiom formulas once
(`_theory`) and proves rule after rule in push/pop scopes of one solver; a worker that
overruns a rule's hard limit is stopped and replaced. Even one rule is proven in a
worker: z3's own timeout is soft, and only a process can be stopped.
"""

from __future__ import annotations

import hashlib
import itertools
import os
import time
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from functools import cache, lru_cache, partial
from pathlib import Path
from typing import Any

import z3

from tasoc.ir.dag import ATTR_NAMES
from tasoc.ir.op_sets import ops_with
from tasoc.ir.rules import (
    SAME_SHAPE_OPERANDS,
    AttrTerm,
    Condition,
    Dim,
    DTypeOf,
    Param,
    Pattern,
    PatternOp,
    Proof,
    Relation,
    Rule,
    ShapeOf,
)
from tasoc.ir.traits import Broadcasting
from tasoc.verify.pool import Task, check_jobs, run_tasks

MAX_RANK = 4
"""The largest rank the list and matmul shape facts and the identity permutations cover."""

MAX_PERMUTATION_GROUP = 24
"""How many literal permutations of one length get a composition table (all of S4)."""

Progress = Callable[[int, int, Rule], None]
"""`progress(done, total, rule)`: called in the caller's process as each proof ends."""

Term = z3.ExprRef

# ------------------------------------------------------------------------ vocabulary


class _Vocabulary:
    """The sorts and functions of the encoding, in z3's default context."""

    def __init__(self) -> None:
        self.tensor = z3.DeclareSort("Tensor")
        attr = z3.Datatype("Attr")
        attr.declare("int", ("int_value", z3.IntSort()))
        attr.declare("real", ("real_value", z3.RealSort()))
        attr.declare("str", ("str_id", z3.IntSort()))
        attr.declare("flag", ("flag_value", z3.BoolSort()))
        attr.declare("nil")
        attr.declare("cons", ("head", attr), ("tail", attr))
        self.attr = attr.create()
        a, t = self.attr, self.tensor
        self.shape = z3.Function("shape", t, a)
        self.dtype = z3.Function("dtype", t, a)
        self.at = z3.Function("at", a, a, a)
        self.length = z3.Function("length", a, z3.IntSort())
        self.dimsum = z3.Function("dimsum", a, a, a)
        self.compose = z3.Function("compose", a, a, a)
        self.divides = z3.Function("divides", a, a, z3.BoolSort())
        self._ops: dict[tuple[str, int, int, int], z3.FuncDeclRef] = {}
        self._strings: dict[str, int] = {}

    def apply(
        self,
        op: str,
        attrs: Sequence[Term],
        operands: Sequence[Term],
        result: int = 0,
        results: int = 1,
    ) -> Term:
        """Result `result` (of `results`) of `op{attrs}(operands)`."""
        key = (op, len(operands), result, results)
        if key not in self._ops:
            label = op if results == 1 else f"{op}#{result}of{results}"
            domain = [self.attr] * len(ATTR_NAMES[op]) + [self.tensor] * len(operands)
            self._ops[key] = z3.Function(f"{label}/{len(operands)}", *domain, self.tensor)
        return self._ops[key](*attrs, *operands)

    def literal(self, value: object) -> Term:
        """A literal attribute value (bool before int: `true` and `1` differ in rules)."""
        a = self.attr
        if isinstance(value, bool):
            return a.flag(z3.BoolVal(value))
        if isinstance(value, int):
            return a.int(value)
        if isinstance(value, float):
            return a.real(z3.RealVal(repr(value)))
        if isinstance(value, str):
            return a.str(self._strings.setdefault(value, len(self._strings)))
        if isinstance(value, tuple):
            return self.items(self.literal(item) for item in value)
        raise TypeError(f"no attribute encoding for {value!r}")

    def items(self, values: Iterable[Term]) -> Term:
        """The list of `values`."""
        result = self.attr.nil
        for value in reversed(list(values)):
            result = self.attr.cons(value, result)
        return result

    def index(self, attr: Term, position: int) -> Term:
        return self.at(attr, self.attr.int(position))

    def dim(self, tensor: Term, axis: Term | int) -> Term:
        return self.at(self.shape(tensor), self.attr.int(axis) if isinstance(axis, int) else axis)

    def rank(self, tensor: Term) -> z3.ArithRef:
        return self.length(self.shape(tensor))


@cache
def _vocabulary() -> _Vocabulary:
    return _Vocabulary()


def _occurring(expr: Term, candidates: Sequence[Term]) -> list[Term]:
    """The `candidates` (constants) that occur in `expr`, in the candidates' order."""
    wanted = {c.get_id() for c in candidates}
    found: set[int] = set()
    seen: set[int] = set()
    stack = [expr]
    while stack:
        node = stack.pop()
        if node.get_id() in seen:
            continue
        seen.add(node.get_id())
        if node.get_id() in wanted:
            found.add(node.get_id())
        stack.extend(node.children())
    return [c for c in candidates if c.get_id() in found]


def _forall(body: z3.BoolRef, variables: Sequence[Term], *sides: Term) -> z3.BoolRef:
    """`∀ variables. body`, triggered by each of `sides` that mentions every variable
    (a bare variable never is a trigger), or by all sides together if none does."""
    variables = _occurring(body, variables)
    if not variables:
        return body
    bound = {v.get_id() for v in variables}
    usable = [s for s in sides if s.get_id() not in bound]
    single = [s for s in usable if len(_occurring(s, variables)) == len(variables)]
    patterns: list[Any] = single or ([z3.MultiPattern(*usable)] if usable else [])
    return z3.ForAll(variables, body, patterns=patterns)


# ------------------------------------------------------------------- background facts


def _list_facts(v: _Vocabulary) -> list[z3.BoolRef]:
    """`length` of lists, and `at` of a literal position (one fact per position, so
    that no arithmetic reaches the triggers)."""
    a = v.attr
    heads = z3.Consts(" ".join(f"h{i}" for i in range(MAX_RANK)), a)
    tail = z3.Const("tail", a)
    cell = a.cons(heads[0], tail)
    facts = [
        v.length(a.nil) == 0,
        _forall(v.length(cell) == v.length(tail) + 1, [heads[0], tail], cell),
    ]
    for position in range(MAX_RANK):
        items = tail
        for head in reversed(heads[: position + 1]):
            items = a.cons(head, items)
        term = v.index(items, position)
        facts.append(_forall(term == heads[position], [*heads, tail], term))
    return facts


def _shape_facts(v: _Vocabulary) -> list[z3.BoolRef]:
    """How each op's result shape and dtype follow from its operands' (module doc)."""
    x, y = z3.Consts("x y", v.tensor)
    axis = z3.Const("axis", v.attr)
    facts = _list_facts(v)

    def fact(
        op: str,
        operands: Sequence[Term],
        equations: Callable[..., list[Any]],
        result: int = 0,
        results: int = 1,
    ) -> Term:
        """`∀ attrs, operands. equations(term, *attrs)` on `term = op{attrs}(operands)`."""
        attrs = [z3.Const(f"{op}.{name}", v.attr) for name in ATTR_NAMES[op]]
        term = v.apply(op, attrs, operands, result, results)
        body = z3.And(*equations(term, *attrs))
        facts.append(_forall(body, [*attrs, *operands], term))
        return term

    def off_axis(term: Term, term_axis: Term, variables: Sequence[Term], *agree: Term) -> None:
        """Off `term_axis`, `term` has `x`'s dims, where `x` and the `agree` tensors
        have equal dims (triggered on each dim asked for)."""
        dim = v.at(v.shape(term), axis)
        known = z3.And(term_axis != axis, *(v.dim(x, axis) == v.dim(t, axis) for t in agree))
        facts.append(_forall(z3.Implies(known, dim == v.dim(x, axis)), [*variables, axis], dim))

    def wider(t: Term) -> z3.BoolRef:
        return v.rank(t) == z3.If(v.rank(x) >= v.rank(y), v.rank(x), v.rank(y))

    def same_shape(t: Term, *attrs: Term) -> list[Any]:
        return [v.shape(t) == v.shape(x)]

    def elementwise(t: Term) -> list[Any]:
        return [wider(t), z3.Implies(v.shape(x) == v.shape(y), v.shape(t) == v.shape(x))]

    def matmul(t: Term) -> list[Any]:
        """[..., M, K] @ [..., K, N] is [..., M, N], whichever side has more batch axes;
        the leading batch axes that only one side has are that side's (a batch of
        matrices times one matrix keeps the batch)."""
        known = [wider(t)]
        for rx, ry in itertools.product(range(2, MAX_RANK + 1), repeat=2):
            rank = max(rx, ry)
            longer = x if rx > ry else y
            own_batch = [v.dim(t, axis) == v.dim(longer, axis) for axis in range(abs(rx - ry))]
            known.append(
                z3.Implies(
                    z3.And(v.rank(x) == rx, v.rank(y) == ry),
                    z3.And(
                        v.dim(t, rank - 1) == v.dim(y, ry - 1),
                        v.dim(t, rank - 2) == v.dim(x, rx - 2),
                        *own_batch,
                    ),
                )
            )
        return known

    def kernel_shape(first: Term, second: Term, kernel: Term) -> Term:
        return v.items([first, second, v.index(kernel, 0), v.index(kernel, 1)])

    for op in ("relu", "sigmoid", "tanh", "gelu", "softmax"):
        fact(op, [x], same_shape)
    fact("scale", [x, y], same_shape)
    fact("add", [x, y], elementwise)
    fact("mul", [x, y], elementwise)
    fact("matmul", [x, y], matmul)
    # conv2d(x NCHW, w OIHW) is N x O x . x .; pooling keeps N and C.
    fact(
        "conv2d",
        [x, y],
        lambda t, *_: [v.rank(t) == 4, v.dim(t, 0) == v.dim(x, 0), v.dim(t, 1) == v.dim(y, 0)],
    )
    fact(
        "pool2d",
        [x],
        lambda t, *_: [v.rank(t) == 4, v.dim(t, 0) == v.dim(x, 0), v.dim(t, 1) == v.dim(x, 1)],
    )
    fact("enlarge", [x], lambda t, k: [v.shape(t) == kernel_shape(v.dim(x, 0), v.dim(x, 1), k)])
    # transpose: result dim i is operand dim perm[i].
    perm = z3.Const("perm", v.attr)
    transposed = v.apply("transpose", [perm], [x])
    facts.append(_forall(v.rank(transposed) == v.rank(x), [perm, x], transposed))
    dim = v.at(v.shape(transposed), axis)
    facts.append(_forall(dim == v.dim(x, v.at(perm, axis)), [perm, x, axis], dim))
    # concat adds up its axis; a split's piece has the size it was given.
    concat_axis = z3.Const("concat.axis", v.attr)
    term = fact(
        "concat",
        [x, y],
        lambda t, a: [
            v.rank(t) == v.rank(x),
            v.dim(t, a) == v.dimsum(v.dim(x, a), v.dim(y, a)),
        ],
    )
    off_axis(term, concat_axis, [concat_axis, x, y], y)
    split_axis = z3.Const("split.axis", v.attr)
    for index in range(2):
        term = fact(
            "split",
            [x],
            lambda t, a, sizes, i=index: [
                v.rank(t) == v.rank(x),
                v.dim(t, a) == v.index(sizes, i),
            ],
            index,
            2,
        )
        off_axis(term, split_axis, [split_axis, z3.Const("split.sizes", v.attr), x])
    # Constants: their attributes say their shape and dtype.
    for op in ("ones", "zeros"):
        fact(op, [], lambda t, shape, dtype: [v.shape(t) == shape, v.dtype(t) == dtype])
    fact(
        "c_pool",
        [],
        lambda t, c, k, dtype: [
            v.shape(t) == kernel_shape(c, v.attr.int(1), k),
            v.dtype(t) == dtype,
        ],
    )
    fact(
        "i_conv",
        [],
        lambda t, c, k, dtype: [v.shape(t) == kernel_shape(c, c, k), v.dtype(t) == dtype],
    )
    fact("i_matmul", [], lambda t, n, dtype: [v.shape(t) == v.items([n, n]), v.dtype(t) == dtype])
    for op, count in _FIRST_OPERAND_DTYPE.items():
        fact(op, [x, y][:count], lambda t, *_: [v.dtype(t) == v.dtype(x)])
    return facts


_FIRST_OPERAND_DTYPE: Mapping[str, int] = {
    "add": 2, "mul": 2, "scale": 2, "relu": 1, "sigmoid": 1, "tanh": 1, "gelu": 1,
    "softmax": 1, "transpose": 1, "matmul": 2, "conv2d": 2, "enlarge": 1, "pool2d": 1,
    "concat": 2,
}  # fmt: skip
"""Ops whose result has their first operand's element type, with their operand count."""


def _permutation_facts(v: _Vocabulary) -> list[z3.BoolRef]:
    """Two transposes are one, and the identity permutation does nothing;
    `_permutation_tables` evaluates `compose` on a problem's literal permutations."""
    x = z3.Const("x", v.tensor)
    p, q = z3.Consts("p q", v.attr)
    twice = _transpose(v, q, _transpose(v, p, x))
    facts = [_forall(twice == _transpose(v, v.compose(p, q), x), [p, q, x], twice)]
    for rank in range(1, MAX_RANK + 1):
        identity = _transpose(v, v.literal(tuple(range(rank))), x)
        facts.append(_forall(identity == x, [x], identity))
    return facts


def _permutation_tables(v: _Vocabulary, perms: Iterable[tuple[int, ...]]) -> list[z3.BoolRef]:
    """For the permutations that `perms` generate (per length, at most
    MAX_PERMUTATION_GROUP): `compose` on each pair, and how each moves a concat's axis,
    `concat{a}(T_p x, T_p y) = T_p(concat{p[a]}(x, y))`. Stated per literal permutation
    and axis, so no term of a fact computes on a permutation: a quantified
    `at(inverse(p), at(p, a)) = a` would be false of lists that are not permutations."""
    x, y = z3.Consts("x y", v.tensor)
    facts = []
    for group in _generated_groups(perms):
        for first, second in itertools.product(group, repeat=2):
            composed = tuple(first[i] for i in second)
            facts.append(v.compose(v.literal(first), v.literal(second)) == v.literal(composed))
        for perm in group:
            if perm == tuple(range(len(perm))):
                continue
            literal = v.literal(perm)
            for axis, moved in enumerate(perm):
                joined = _concat(
                    v, v.literal(axis), _transpose(v, literal, x), _transpose(v, literal, y)
                )
                split = _transpose(v, literal, _concat(v, v.literal(moved), x, y))
                facts.append(_forall(joined == split, [x, y], joined, split))
    return facts


def _transpose(v: _Vocabulary, perm: Term, tensor: Term) -> Term:
    return v.apply("transpose", [perm], [tensor])


def _concat(v: _Vocabulary, axis: Term, left: Term, right: Term) -> Term:
    return v.apply("concat", [axis], [left, right])


def _generated_groups(perms: Iterable[tuple[int, ...]]) -> list[list[tuple[int, ...]]]:
    """The closure of `perms` under composition, one list per length (with the
    identity), at most MAX_PERMUTATION_GROUP long."""
    by_length: dict[int, set[tuple[int, ...]]] = {}
    for perm in perms:
        by_length.setdefault(len(perm), set()).add(perm)
    groups = []
    for length, generators in sorted(by_length.items()):
        group = dict.fromkeys([tuple(range(length)), *sorted(generators)])
        frontier = list(group)
        while frontier and len(group) < MAX_PERMUTATION_GROUP:
            member = frontier.pop()
            for generator in sorted(generators):
                composed = tuple(member[i] for i in generator)
                if composed not in group and len(group) < MAX_PERMUTATION_GROUP:
                    group[composed] = None
                    frontier.append(composed)
        groups.append(list(group))
    return groups


# ------------------------------------------------------------------------- encoding

_FIXED_RANK: Mapping[str, int] = {
    "conv2d": 4, "pool2d": 4, "enlarge": 4, "c_pool": 4, "i_conv": 4, "i_matmul": 2,
}  # fmt: skip
_WIDEST_RANK = ops_with(Broadcasting)
_FIRST_RANK = frozenset(
    {"relu", "sigmoid", "tanh", "gelu", "softmax", "scale", "transpose", "concat", "split"}
)
_AXIS_ATTRS = frozenset({("concat", "axis"), ("split", "axis"), ("softmax", "axis")})


@dataclass
class _Values:
    """The terms of a pattern's values by name, and their ranks where known statically."""

    terms: dict[str, Term]
    ranks: dict[str, int | None]


@dataclass
class _Encoding:
    """A rule as z3 terms."""

    tensors: dict[str, Term]
    """The input tensors by name."""
    variables: list[Term]
    """The input tensors, then the parameters."""
    pairs: list[tuple[Term, Term]]
    """(src_i, tgt_i) for each output."""
    conditions: list[Any]
    """The preconditions."""
    typing: list[Any]
    """What the rule's types say, where it applies: the inputs' ranks, shapes made of
    dims, and what each op's type-checking requires (`_op_typing`). Hypotheses of the
    rule being proven; not of axioms, which `_rank_guards` restricts instead."""
    permutations: set[tuple[int, ...]]
    """The literal permutations of its transposes."""


def _encode(rule: Rule, v: _Vocabulary, prefix: str) -> _Encoding:
    tensors = {i.name: z3.Const(prefix + i.name, v.tensor) for i in rule.inputs}
    params = {name: z3.Const(f"{prefix}${name}", v.attr) for name in rule.params}
    inputs = _Values(dict(tensors), {i.name: i.rank for i in rule.inputs})
    encoding = _Encoding(tensors, [*tensors.values(), *params.values()], [], [], [], set())
    for rule_input in rule.inputs:
        tensor = tensors[rule_input.name]
        encoding.typing.append(v.rank(tensor) == rule_input.rank)
        encoding.typing.append(_shape_is_dims(v, tensor, rule_input.rank))
    src = _encode_pattern(v, rule.src, inputs, params, encoding)
    tgt = _encode_pattern(v, rule.tgt, inputs, params, encoding)
    encoding.pairs = [
        (src.terms[s], tgt.terms[t])
        for s, t in zip(rule.src.outputs, rule.tgt.outputs, strict=True)
    ]
    encoding.conditions = [_encode_condition(v, c, src, params) for c in rule.preconditions]
    return encoding


def _rank_guards(rule: Rule, encoding: _Encoding) -> list[Any]:
    """When an axiom applies, by the ranks of its inputs.

    Ops with a fixed rank, literal axes and literal permutations tie an axiom to the
    ranks its inputs are declared with. Otherwise it holds at any ranks that keep the
    declared differences (`add-assoc` on matrices or on 4-D tensors), scalars staying
    scalars. Without a guard an axiom would claim, say, `conv2d(x, I_conv) = x` for an
    `x` of rank 2 too, while the shape facts make every conv2d 4-D: a contradiction
    from which z3 proves anything.
    """
    v = _vocabulary()
    exact = _is_rank_exact(rule)
    inputs = [(v.rank(encoding.tensors[i.name]), i.rank) for i in rule.inputs]
    base = next(((rank, declared) for rank, declared in inputs if declared > 0), None)
    guards = []
    for rank, declared in inputs:
        if exact or declared == 0 or base is None:
            guards.append(rank == declared)
        else:
            guards.append(rank == base[0] + (declared - base[1]))
    return guards


def _is_rank_exact(rule: Rule) -> bool:
    """Whether `rule` mentions an op of fixed rank, a literal axis or a literal perm."""
    for pattern in (rule.src, rule.tgt):
        for op in pattern.ops:
            if op.op in _FIXED_RANK:
                return True
            for key, term in op.attrs:
                if (op.op, key) in _AXIS_ATTRS and _is_int(term):
                    return True
                if op.op == "transpose" and _permutation(term) is not None:
                    return True
                if _has_literal_dim(term):
                    return True
    return any(_has_literal_dim(c.lhs) or _has_literal_dim(c.rhs) for c in rule.preconditions)


def _has_literal_dim(term: AttrTerm) -> bool:
    if isinstance(term, Dim):
        return isinstance(term.axis, int)
    return isinstance(term, tuple) and any(map(_has_literal_dim, term))


def _encode_pattern(
    v: _Vocabulary,
    pattern: Pattern,
    inputs: _Values,
    params: Mapping[str, Term],
    encoding: _Encoding,
) -> _Values:
    values = _Values(dict(inputs.terms), dict(inputs.ranks))
    for op in pattern.ops:
        ranks = [values.ranks[name] for name in op.operands]
        attrs = {}
        for key in ATTR_NAMES[op.op]:
            term = op.attr(key)
            if (op.op, key) in _AXIS_ATTRS and isinstance(term, int):
                term = _nonnegative(term, ranks[0])
            attrs[key] = _encode_term(v, term, values, params)
        operands = [values.terms[name] for name in op.operands]
        encoding.typing.extend(_op_typing(v, op, attrs, operands, ranks))
        perm = _permutation(op.attr("perm")) if op.op == "transpose" else None
        if perm is not None:
            encoding.permutations.add(perm)
        rank = _result_rank(op, ranks, values.ranks)
        for index, name in enumerate(op.results):
            result = v.apply(op.op, list(attrs.values()), operands, index, len(op.results))
            values.terms[name] = result
            values.ranks[name] = rank
            if rank is not None:
                encoding.typing.append(_shape_is_dims(v, result, rank))
    return values


def _shape_is_dims(v: _Vocabulary, tensor: Term, rank: int) -> Any:
    """A tensor of rank `rank` has the shape made of its dims (shapes are lists, and the
    facts speak of single dims: this lets two shapes with equal dims be equal)."""
    return v.shape(tensor) == v.items(v.dim(tensor, axis) for axis in range(rank))


_ENUMS: Mapping[tuple[str, str], tuple[str, ...]] = {
    ("conv2d", "activation"): ("none", "relu"),
    ("pool2d", "kind"): ("avg", "max"),
}
"""Attributes that type-check only at these values (`shapes.infer` rejects others)."""
_SAME_DTYPE = frozenset({"add", "mul", "scale", "matmul", "conv2d", "concat"})
"""Ops whose operands must have one element type."""


def _op_typing(
    v: _Vocabulary,
    op: PatternOp,
    attrs: Mapping[str, Term],
    operands: Sequence[Term],
    ranks: Sequence[int | None],
) -> list[Any]:
    """What `op` type-checking says about its attributes and operand shapes, as far as
    the shape facts can use it. A rule is claimed only where both of its patterns
    type-check, so the prover may assume this of every op in them: a square-only
    `matmul(x, i_matmul{size = dim(x, 0)})` then meets the axiom's `dim(x, 1)`, and a
    rule with `activation = $act` is proven by cases."""
    facts: list[Any] = [
        z3.Or(*(attrs[key] == v.literal(choice) for choice in choices))
        for (name, key), choices in _ENUMS.items()
        if name == op.op and not isinstance(op.attr(key), str)
    ]
    if op.op in _SAME_DTYPE:
        facts.extend(v.dtype(operands[0]) == v.dtype(other) for other in operands[1:])
    known = [rank for rank in ranks if rank is not None]
    if len(known) < len(ranks):
        return facts
    if op.op in SAME_SHAPE_OPERANDS and known[0] == known[1]:
        facts.append(v.shape(operands[0]) == v.shape(operands[1]))
    elif op.op == "matmul" and min(known) >= 2:
        facts.append(v.dim(operands[0], known[0] - 1) == v.dim(operands[1], known[1] - 2))
    elif op.op == "concat" and len(operands) == 2:
        for axis in range(known[0]):
            same = v.dim(operands[0], axis) == v.dim(operands[1], axis)
            facts.append(z3.Implies(attrs["axis"] != v.attr.int(axis), same))
    elif op.op == "conv2d" and op.attr("groups") == 1:
        facts.append(v.dim(operands[0], 1) == v.dim(operands[1], 1))
    return facts


def _encode_term(
    v: _Vocabulary, term: AttrTerm, values: _Values, params: Mapping[str, Term]
) -> Term:
    if isinstance(term, Param):
        return params[term.name]
    if isinstance(term, Dim):
        if isinstance(term.axis, Param):
            axis = params[term.axis.name]
        else:
            axis = v.literal(_nonnegative(term.axis, values.ranks.get(term.value)))
        return v.dim(values.terms[term.value], axis)
    if isinstance(term, ShapeOf):
        return v.shape(values.terms[term.value])
    if isinstance(term, DTypeOf):
        return v.dtype(values.terms[term.value])
    if isinstance(term, tuple):
        return v.items(_encode_term(v, item, values, params) for item in term)
    return v.literal(term)


def _encode_condition(
    v: _Vocabulary, condition: Condition, values: _Values, params: Mapping[str, Term]
) -> Any:
    if condition.relation is Relation.DIVIDES and _is_int(condition.lhs) and _is_int(condition.rhs):
        return z3.BoolVal(condition.holds({}, {}))
    lhs = _encode_term(v, condition.lhs, values, params)
    rhs = _encode_term(v, condition.rhs, values, params)
    if condition.relation is Relation.EQ:
        return lhs == rhs
    if condition.relation is Relation.NE:
        return lhs != rhs
    return v.divides(lhs, rhs)


def _is_int(term: AttrTerm) -> bool:
    return isinstance(term, int) and not isinstance(term, bool)


def _permutation(term: AttrTerm) -> tuple[int, ...] | None:
    """`term` if it is a literal permutation."""
    if not isinstance(term, tuple):
        return None
    items = tuple(item for item in term if isinstance(item, int) and not isinstance(item, bool))
    return items if sorted(items) == list(range(len(term))) else None


def _nonnegative(axis: int, rank: int | None) -> int:
    """`axis` counted from the front, when it counts from the end and the rank is known."""
    return axis + rank if axis < 0 and rank is not None else axis


def _result_rank(
    op: PatternOp, operands: Sequence[int | None], ranks: Mapping[str, int | None]
) -> int | None:
    """The rank of `op`'s results as far as it follows statically (None: unknown)."""
    if op.op in _FIXED_RANK:
        return _FIXED_RANK[op.op]
    if op.op in _WIDEST_RANK:
        return None if None in operands else max(r for r in operands if r is not None)
    if op.op in _FIRST_RANK:
        return operands[0]
    if op.op in ("ones", "zeros"):
        shape = op.attr("shape")
        if isinstance(shape, tuple):
            return len(shape)
        if isinstance(shape, ShapeOf):
            return ranks.get(shape.value)
    return None


# --------------------------------------------------------------------------- proving


class _Theory:
    """One solver holding the background facts and the axioms, proving rule after rule."""

    def __init__(self, axioms: Sequence[Rule]) -> None:
        v = _vocabulary()
        self.solver = z3.Solver()
        self.solver.set("mbqi", False)
        self.solver.add(*_shape_facts(v), *_permutation_facts(v))
        self.permutations: set[tuple[int, ...]] = set()
        for axiom in axioms:
            encoding = _encode(axiom, v, prefix=f"{axiom.name}.")
            self.permutations |= encoding.permutations
            hypotheses = [*_rank_guards(axiom, encoding), *encoding.conditions]
            for lhs, rhs in encoding.pairs:
                body = z3.Implies(z3.And(*hypotheses), lhs == rhs)
                self.solver.add(_forall(body, encoding.variables, lhs, rhs))

    def prove(self, rule: Rule, timeout_s: float) -> Rule:
        """`rule` with its proof status: PROVEN when every output pair is unsat."""
        v = _vocabulary()
        start = time.perf_counter()
        encoding = _encode(rule, v, prefix="rule.")
        solver = self.solver
        solver.push()
        try:
            solver.add(*encoding.conditions, *encoding.typing)
            solver.add(*_permutation_tables(v, encoding.permutations | self.permutations))
            for index, (lhs, rhs) in enumerate(encoding.pairs):
                left = timeout_s - (time.perf_counter() - start)
                solver.set("timeout", max(1, int(left * 1000)))
                solver.push()
                solver.add(lhs != rhs)
                outcome = solver.check() if left > 0 else z3.unknown
                reason = solver.reason_unknown() if left > 0 else "timeout"
                solver.pop()
                if outcome == z3.unsat:
                    continue
                spent = _milliseconds(start)
                if outcome == z3.sat:
                    return rule.with_proof(
                        Proof.REFUTED, f"output {index}: z3 found a counter-model ({spent} ms)"
                    )
                why = _REASONS.get(reason, reason)
                return rule.with_proof(Proof.UNKNOWN, f"output {index}: {why} ({spent} ms)")
        finally:
            solver.pop()
        return rule.with_proof(Proof.PROVEN, f"z3 {_milliseconds(start)} ms")


_REASONS: Mapping[str, str] = {
    "timeout": "timeout",
    "canceled": "timeout",
    "(incomplete quantifiers)": "no proof: e-matching ran out of axiom instances",
}
"""z3's reasons for `unknown`, as the proof detail says them."""


def _milliseconds(start: float) -> int:
    return round((time.perf_counter() - start) * 1000)


@cache
def prover_fingerprint() -> str:
    """What a proof depends on besides the rule and the axioms: this module's code (the
    encoding, the background facts) and z3's version. A cached proof
    (`tasoc.verify.proof_cache`) is keyed by it, so changing either re-proves."""
    code = Path(__file__).read_bytes() + z3.get_full_version().encode()
    return hashlib.sha256(code).hexdigest()


@lru_cache(maxsize=4)
def _theory(axioms: tuple[Rule, ...]) -> _Theory:
    return _Theory(axioms)


def prove_rule(rule: Rule, axioms: Sequence[Rule], timeout_s: float = 10.0) -> Rule:
    """`rule` with a proof status (`Rule.with_proof`): PROVEN when z3 shows every output
    pair equal under `axioms` and the rule's preconditions, REFUTED when it finds a
    model of the axioms where they differ, UNKNOWN when it gives up or `timeout_s`
    (for the whole rule) runs out. The detail is one line ("z3 14 ms").

    This proves in the calling process, where only z3's soft timeout applies: for a
    rule from a file, use `prove_rules`, whose workers are stopped at a hard limit."""
    check_timeout(timeout_s)
    return _theory(tuple(axioms)).prove(rule, timeout_s)


def prove_rules(
    rules: Sequence[Rule],
    axioms: Sequence[Rule],
    timeout_s: float = 10.0,
    jobs: int | None = None,
    progress: Progress | None = None,
) -> list[Rule]:
    """`prove_rule` for each of `rules` (in their order), on `jobs` worker processes
    (default: one per available core, never more than there are rules).

    z3's timeout is soft and some problems overrun it by minutes (`tasoc.verify.pool`),
    so a worker that has not answered `hard_limit(timeout_s)` seconds after it was given
    a rule is stopped and the rule left UNKNOWN. That holds for one rule and `jobs=1`
    too: nothing can stop z3 in this process, so proofs always run in a worker.
    ValueError for a timeout outside `check_timeout`'s range or a bad `jobs`."""
    check_timeout(timeout_s)
    tasks = [Task(_prove_task, (rule, timeout_s), partial(_overran, rule)) for rule in rules]
    results: list[Rule] = []
    for done, proven in enumerate(_run(tasks, tuple(axioms), jobs, hard_limit(timeout_s)), 1):
        results.append(proven)
        if progress is not None:
            progress(done, len(rules), proven)
    return results


MIN_TIMEOUT_S = 0.001
"""z3 counts its timeout in whole milliseconds: below one, every rule is unknown."""
MAX_TIMEOUT_S = 3600.0
"""An hour per rule: the hardest rule of the 4-op library needs seconds, and beyond
z3's millisecond counter (49 days) the timeout would overflow."""


def check_timeout(timeout_s: float) -> None:
    """ValueError unless `timeout_s` is a per-rule timeout the prover can honour: from
    `MIN_TIMEOUT_S` to `MAX_TIMEOUT_S` seconds (not NaN, not infinite)."""
    if not MIN_TIMEOUT_S <= timeout_s <= MAX_TIMEOUT_S:  # False for NaN
        raise ValueError(
            f"expected a timeout from {MIN_TIMEOUT_S:g} to {MAX_TIMEOUT_S:g} seconds, "
            f"got {timeout_s:g}"
        )


def hard_limit(timeout_s: float) -> float:
    """Seconds after which a proof that z3 has not ended is stopped: twice its timeout,
    plus slack for a busy machine."""
    return 2 * timeout_s + 5


def _overran(rule: Rule, why: str) -> Rule:
    return rule.with_proof(Proof.UNKNOWN, f"timeout: {why}")


def redundant_axioms(
    axioms: Sequence[Rule], timeout_s: float = 2.0, jobs: int | None = None
) -> list[tuple[str, bool]]:
    """For each axiom, its name and whether the others prove it (thesis §2.4: a set of
    operator properties should hold no property that the rest entail). A redundant
    axiom is harmless to soundness but costs the prover time; one that the others
    prove unexpectedly can point at a wrong axiom."""
    check_timeout(timeout_s)
    tasks = [
        Task(_redundancy_task, (index, timeout_s), _not_redundant) for index in range(len(axioms))
    ]
    answers = _run(tasks, tuple(axioms), jobs, hard_limit(timeout_s))
    return [(axiom.name, redundant) for axiom, redundant in zip(axioms, answers, strict=True)]


def _not_redundant(why: str) -> bool:
    """An axiom whose redundancy check overran: the others did not prove it."""
    return False


# ------------------------------------------------------------------- worker processes

_worker_axioms: tuple[Rule, ...] = ()
"""The axioms, in a worker process (set once by `_init_worker`)."""


def _init_worker(axioms: tuple[Rule, ...]) -> None:
    """Remember the axioms and build their theory before the worker reports ready."""
    global _worker_axioms
    _worker_axioms = axioms
    _theory(axioms)


def _prove_task(rule: Rule, timeout_s: float) -> Rule:
    return _theory(_worker_axioms).prove(rule, timeout_s)


def _redundancy_task(index: int, timeout_s: float) -> bool:
    others = _worker_axioms[:index] + _worker_axioms[index + 1 :]
    return _Theory(others).prove(_worker_axioms[index], timeout_s).is_proven


def _run(
    tasks: Sequence[Task], axioms: tuple[Rule, ...], jobs: int | None, limit_s: float
) -> Iterator[Any]:
    """The results of `tasks`, in order, from `jobs` processes that know `axioms`
    (never more processes than tasks; none for no task)."""
    if jobs is not None:
        check_jobs(jobs)
    if tasks:
        jobs = min(jobs or len(os.sched_getaffinity(0)), len(tasks))
        yield from run_tasks(tasks, _init_worker, (axioms,), jobs, limit_s)
