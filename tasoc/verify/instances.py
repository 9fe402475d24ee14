"""The instances of a rule: bindings of its parameters and input shapes, all dims in
1..bound, at which both of its patterns type-check (`Rule.instantiate`, the real
typing rules). Validation (`tasoc.verify.validate`) checks a rule at each instance;
the matcher's tests build their graphs from them.

Input shapes are built input by input, depth first. An input's candidate shapes come
from the typing rule of an op that reads it next to operands already known (a
convolution weight has the input's channels, a broadcast partner has each dim equal
or 1: `_PROPOSERS`); inputs nothing constrains yet range over all shapes of their rank.
Every op whose operands are known is type-checked at once, so ill-typed branches are
cut early. Candidates are a superset of what type-checks, so nothing is missed.

Even so, a rule over convolutions has tens of thousands of instances at bound 3.
`choose_instances` lists them all when there are few, and otherwise draws a seeded
random sample spread evenly over the parameter bindings, and says which it did.
"""

from __future__ import annotations

import itertools
import random
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from tasoc.ir.dag import Node, Value
from tasoc.ir.rules import (
    SAME_SHAPE_OPERANDS,
    Condition,
    DimLookup,
    Pattern,
    PatternOp,
    Rule,
    RuleError,
    evaluate,
    param_domain,
    shape_table,
)
from tasoc.ir.shapes import DType, ShapeError, TensorSig

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Instance:
    """One binding of a rule's parameters and one shape per input."""

    params: tuple[tuple[str, Any], ...]
    shapes: tuple[tuple[str, Shape], ...]

    def __str__(self) -> str:
        shapes = [f"{name}: {'x'.join(map(str, shape)) or 'scalar'}" for name, shape in self.shapes]
        params = [f"${name} = {_show(value)}" for name, value in self.params]
        return ", ".join(shapes + params)


def _show(value: Any) -> str:
    if isinstance(value, tuple):
        return "[" + ", ".join(map(_show, value)) + "]"
    return f'"{value}"' if isinstance(value, str) else str(value)


def _all_shapes(rank: int, bound: int) -> list[Shape]:
    return list(itertools.product(range(1, bound + 1), repeat=rank))


def _broadcast_partners(other: Shape, rank: int, bound: int) -> list[Shape]:
    """Every shape of `rank` that broadcasts with `other` (NumPy rules: trailing axes
    align, and aligned dims are equal or one of them is 1)."""
    axes: list[Sequence[int]] = []
    for axis in range(rank):
        aligned = axis - rank + len(other)
        if aligned < 0 or other[aligned] == 1:
            axes.append(range(1, bound + 1))
        else:
            axes.append([d for d in (other[aligned], 1) if d <= bound])
    return list(itertools.product(*axes))


Proposer = Callable[[Mapping[str, Any], Sequence[Shape | None], int, int, int], list[Shape] | None]
"""(attributes, operand shapes with None at the unknown one, its position, its rank,
bound) -> every shape of that rank, dims in 1..bound, with which the op may type-check
(a superset), or None when the op says nothing about that operand."""


def _same_shape_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape]:
    """Operands of a rule's broadcasting element-wise op have one shape
    (`rules.SAME_SHAPE_OPERANDS`)."""
    other = shapes[1 - at]
    assert other is not None
    return [other] if len(other) == rank else []


def _scale_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape] | None:
    return None if at == 0 else [()] if rank == 0 else []


def _matmul_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape]:
    other = shapes[1 - at]
    assert other is not None
    if rank < 2 or len(other) < 2:
        return []
    shared = other[-1] if at == 1 else other[-2]  # the contracted dimension
    if shared > bound:
        return []
    batches = _broadcast_partners(other[:-2], rank - 2, bound)
    free = range(1, bound + 1)
    matrices = [(shared, n) for n in free] if at == 1 else [(m, shared) for m in free]
    return [batch + matrix for batch in batches for matrix in matrices]


def _conv2d_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape]:
    other = shapes[1 - at]
    assert other is not None
    groups = attrs["groups"]
    if rank != 4 or len(other) != 4 or not isinstance(groups, int) or groups < 1:
        return []
    free = range(1, bound + 1)
    if at == 1:  # the weight [O, C/groups, kh, kw] of an input [N, C, H, W]
        if other[1] % groups:
            return []
        outs = [o for o in free if o % groups == 0]
        return list(itertools.product(outs, [other[1] // groups], free, free))
    channels = other[1] * groups  # the input of a weight
    return list(itertools.product(free, [channels] if channels <= bound else [], free, free))


def _concat_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape] | None:
    other = next((s for s in shapes if s is not None), None)
    if other is None:
        return None
    axis = attrs["axis"]
    if len(other) != rank or not -rank <= axis < rank:
        return []
    axis %= rank
    if any(d > bound for i, d in enumerate(other) if i != axis):
        return []
    return [(*other[:axis], d, *other[axis + 1 :]) for d in range(1, bound + 1)]


def _split_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape]:
    axis, size = attrs["axis"], sum(attrs["sizes"])
    if not -rank <= axis < rank or size > bound:
        return []
    axes: list[Sequence[int]] = [range(1, bound + 1)] * rank
    axes[axis % rank] = [size]
    return list(itertools.product(*axes))


_PROPOSERS: dict[str, Proposer] = {
    **dict.fromkeys(SAME_SHAPE_OPERANDS, _same_shape_partners),
    "scale": _scale_partners,
    "matmul": _matmul_partners,
    "conv2d": _conv2d_partners,
    "concat": _concat_partners,
    "split": _split_partners,
}


def _attrs(op: PatternOp, params: Mapping[str, Any], values: Mapping[str, Value]) -> dict[str, Any]:
    """The op's attribute values; KeyError when a term reads a value not built yet."""
    known = shape_table(values)
    return {key: evaluate(term, params, known) for key, term in op.attrs}


def _build_known(
    pattern: Pattern, inputs: Mapping[str, Value], params: Mapping[str, Any]
) -> dict[str, Value] | None:
    """The pattern's values that the known inputs determine (ops reading an unknown value
    are skipped), or None when one of them does not type-check."""
    values = dict(inputs)
    for op in pattern.ops:
        if any(name not in values for name in op.operands):
            continue
        try:
            attrs = _attrs(op, params, values)
        except KeyError:
            continue
        except RuleError:
            return None
        operands = [values[name] for name in op.operands]
        if op.op in SAME_SHAPE_OPERANDS and len({value.sig.shape for value in operands}) > 1:
            return None  # rules' element-wise ops never broadcast
        try:
            node = Node(op.op, operands, **attrs)
        except (ShapeError, ValueError, TypeError):
            return None
        if len(node.results) != len(op.results):
            return None
        values.update(zip(op.results, node.results, strict=True))
    return values


def _input_order(rule: Rule) -> list[str]:
    """Inputs in the order the patterns first read them: constrained ones come late."""
    names = {i.name for i in rule.inputs}
    order: dict[str, None] = {}
    for pattern in (rule.src, rule.tgt):
        for op in pattern.ops:
            order.update(dict.fromkeys(o for o in op.operands if o in names))
    order.update(dict.fromkeys(i.name for i in rule.inputs))
    return list(order)


class _Space:
    """The well-typed input shapes of one rule under one binding of its parameters."""

    def __init__(self, rule: Rule, params: Mapping[str, Any], bound: int) -> None:
        self.rule, self.params, self.bound = rule, dict(params), bound
        self.ranks = {i.name: i.rank for i in rule.inputs}
        self.positions = {i.name: k for k, i in enumerate(rule.inputs)}
        self.order = _input_order(rule)

    def _known(self, shapes: Mapping[str, Shape]) -> list[dict[str, Value]] | None:
        """The src and tgt values the assigned shapes determine; None if ill-typed or if
        a precondition that reads only those values fails."""
        args = {
            name: Node.arg(self.positions[name], name, TensorSig(shape, DType.F32)).out
            for name, shape in shapes.items()
        }
        built = []
        for pattern in (self.rule.src, self.rule.tgt):
            values = _build_known(pattern, args, self.params)
            if values is None:
                return None
            built.append(values)
        src_shapes = shape_table(built[0])
        if not all(_may_hold(c, self.params, src_shapes) for c in self.rule.preconditions):
            return None
        return built

    def _candidates(self, name: str, built: Sequence[Mapping[str, Value]]) -> list[Shape]:
        """The shapes every op reading `name` next to known operands allows (each op's
        proposals are a superset of what type-checks, so their intersection is too)."""
        rank = self.ranks[name]
        candidates: list[Shape] | None = None
        for pattern, values in zip((self.rule.src, self.rule.tgt), built, strict=True):
            for op in pattern.ops:
                proposals = self._propose(op, name, values, rank)
                if proposals is not None:
                    allowed = set(proposals)
                    candidates = [
                        s for s in (proposals if candidates is None else candidates) if s in allowed
                    ]
        return _all_shapes(rank, self.bound) if candidates is None else candidates

    def _propose(
        self, op: PatternOp, name: str, values: Mapping[str, Value], rank: int
    ) -> list[Shape] | None:
        proposer = _PROPOSERS.get(op.op)
        if proposer is None or op.operands.count(name) != 1:
            return None
        at = op.operands.index(name)
        others = [values.get(o) for o in op.operands]
        if any(value is None for k, value in enumerate(others) if k != at):
            return None
        try:
            attrs = _attrs(op, self.params, values)
        except (KeyError, RuleError):
            return None
        shapes = [None if value is None else value.sig.shape for value in others]
        return proposer(attrs, shapes, at, rank, self.bound)

    def instances(self, rng: random.Random | None = None) -> Iterator[Instance]:
        """Every well-typed instance, depth first; in a random order when `rng` is given."""
        params = tuple(self.params.items())

        def walk(shapes: dict[str, Shape], built: list[dict[str, Value]]) -> Iterator[Instance]:
            if len(shapes) == len(self.order):
                # Every op is built and every precondition checked: `Rule.instantiate` holds.
                yield Instance(params, tuple((i.name, shapes[i.name]) for i in self.rule.inputs))
                return
            name = self.order[len(shapes)]
            options = self._candidates(name, built)
            if rng is not None:
                rng.shuffle(options)
            for shape in options:
                extended = {**shapes, name: shape}
                known = self._known(extended)
                if known is not None:
                    yield from walk(extended, known)

        start = self._known({})
        if start is not None:
            yield from walk({}, start)


def _bindings(rule: Rule) -> list[dict[str, Any]]:
    """Every binding of the rule's parameters that the parameter-only preconditions allow
    (preconditions on shapes are left to `Rule.instantiate`)."""
    names = rule.params
    bindings = []
    for values in itertools.product(*(param_domain(rule, name) for name in names)):
        binding = dict(zip(names, values, strict=True))
        if all(_may_hold(condition, binding, {}) for condition in rule.preconditions):
            bindings.append(binding)
    return bindings


def _may_hold(condition: Condition, binding: Mapping[str, Any], shapes: DimLookup) -> bool:
    """False only when `condition` is known to fail: it may read shapes not known yet."""
    try:
        return bool(condition.holds(binding, shapes))
    except KeyError:
        return True


def instances(rule: Rule, bound: int) -> Iterator[Instance]:
    """Every instance of `rule` with input dims in 1..bound, lazily, binding by binding."""
    for binding in _bindings(rule):
        yield from _Space(rule, binding, bound).instances()


def _round_robin(
    groups: Sequence[list[Instance]], count: int, rng: random.Random
) -> list[Instance]:
    """`count` instances taken from shuffled `groups` in turn, so that every parameter
    binding is represented as evenly as the groups allow."""
    shuffled = [rng.sample(group, len(group)) for group in groups]
    merged = itertools.chain.from_iterable(itertools.zip_longest(*shuffled))
    return list(itertools.islice((i for i in merged if i is not None), count))


def _draw(
    spaces: Sequence[_Space], count: int, rng: random.Random, deadline: float
) -> list[Instance]:
    """Up to `count` distinct instances found by random descents, round robin over the
    bindings, for spaces too large to list; a binding whose descents keep finding
    instances already drawn counts as exhausted."""
    drawn: dict[Instance, None] = {}
    misses = dict.fromkeys(range(len(spaces)), 0)
    while misses and len(drawn) < count and time.monotonic() < deadline:
        for index in list(misses):
            instance = next(spaces[index].instances(rng), None)
            if instance is None or instance in drawn:
                misses[index] += 1
                if instance is None or misses[index] > _MAX_MISSES:
                    del misses[index]
                continue
            misses[index] = 0
            drawn[instance] = None
            if len(drawn) >= count:
                break
    return list(drawn)


_MAX_MISSES = 50
_LISTING_FACTOR = 5
"""Spaces of up to this many times `max_instances` instances are listed in full and
sampled evenly; larger ones are sampled by random descents."""


def choose_instances(
    rule: Rule, bound: int, count: int, seed: int, deadline: float
) -> tuple[list[Instance], int | None]:
    """Up to `count` instances of `rule` to check, and how many there are (None: too
    many to list): all of them when there are at most `count`, else a sample seeded by
    `seed`, drawing until `deadline` (`time.monotonic()`) at the latest."""
    spaces = [_Space(rule, binding, bound) for binding in _bindings(rule)]
    limit = count * _LISTING_FACTOR
    groups: list[list[Instance]] = []
    for space in spaces:
        groups.append(list(itertools.islice(space.instances(), limit + 1)))
        limit -= len(groups[-1])
        if limit < 0:
            return _draw(spaces, count, random.Random(seed), deadline), None
    total = sum(map(len, groups))
    return _round_robin(groups, count, random.Random(seed)), total
