"""Validation of rules by symbolic execution on small shapes (TASO thesis §2.4).

A rule — an axiom is a rule too — claims `src == tgt` for all tensors of its inputs'
ranks and all values of its parameters. A wrong axiom would let the prover accept wrong
rules, so TASO checks each axiom against the operators' actual semantics on every small
shape. `validate_rule` does that for tasoc: an *instance* binds every parameter (values
from `rules.param_domain`) and gives every input a shape with all dims in 1..bound such
that both patterns type-check (`Rule.instantiate`, the real typing rules). At each
instance the two patterns run on symbolic inputs (`tasoc.verify.symbolic`) and every pair
of output elements must be equal for all real inputs and every interpretation of the
uninterpreted functions (`compare`). Cheap checks go first: two runs on random integers
(most false rules fail there, with a counterexample anyone can check by hand), then
structural equality and polynomial normal forms (which settle bilinearity and
associativity), and only what is left goes to z3, one element pair at a time.

relu is uninterpreted with relu(0) = 0, as in TASO, so that the prover's axioms cannot
lean on what its own model of relu does not know. When an instance fails only because of
that (relu(relu(x)) = relu(x), relu commuting with max), it is checked again with relu's
definition: if that holds it counts as holding, and the report says how many instances
needed the definition.

Which instances. Input shapes are built input by input, depth first. An input's candidate
shapes come from the typing rule of an op that reads it next to operands already known
(a convolution weight has the input's channels, a broadcast partner has each dim equal
or 1: `_PROPOSERS`); inputs nothing constrains yet range over all shapes of their rank.
Every op whose operands are known is type-checked at once, so ill-typed branches are cut
early. Candidates are a superset of what type-checks, so nothing is missed.

Even so, a rule over convolutions has tens of thousands of instances at bound 3. When
there are at most `max_instances` the validation is exhaustive; otherwise it checks
`max_instances` distinct instances drawn at random (seeded, so runs repeat) and spread
evenly over the parameter bindings, and says so (`Validation.exhaustive` is False).
"""

from __future__ import annotations

import itertools
import multiprocessing
import os
import random
import re
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from tasoc.ir.dag import Dag, Node, Value
from tasoc.ir.rules import (
    ELEMENTWISE,
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
from tasoc.verify import symbolic

Shape = tuple[int, ...]

DEFAULT_MAX_INSTANCES = 200
DEFAULT_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- results


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


@dataclass(frozen=True, slots=True)
class Counterexample:
    instance: Instance
    detail: str
    """Which output element differs, both sides' values and the inputs z3 chose."""

    def __str__(self) -> str:
        return f"at {self.instance}: {self.detail}"


@dataclass(frozen=True, slots=True)
class Validation:
    """What validating one rule found."""

    rule: str
    bound: int
    checked: int
    """Instances checked (equal, different or undecided)."""
    failed: int
    """Instances at which the two sides differ."""
    unknown: int
    """Instances z3 could not decide in time."""
    relu_defined: int
    """Instances equal only for relu itself, not for every function with f(0) = 0
    (`Verdict.RELU_DEFINED`): counted as holding, and reported."""
    space: int | None
    """How many instances there are up to the bound (None: too many to list)."""
    exhaustive: bool
    """Whether every instance up to the bound was checked (else a sample: see `note`)."""
    seconds: float
    counterexample: Counterexample | None = None
    """The first instance that failed."""
    note: str = ""
    """Why the check was not exhaustive, the first undecided instance, or why the rule
    could not be validated at all."""
    error: bool = False
    """The rule could not be validated (an op without symbolic semantics, a bad domain)."""

    @property
    def ok(self) -> bool:
        """Every checked instance was proven equal, and there was at least one."""
        return not self.error and self.checked > 0 and self.failed == 0 and self.unknown == 0

    def summary(self) -> str:
        """One line: verdict, counts, scope and time, then the counterexample if any."""
        if self.error:
            return f"{self.rule}: ERROR {self.note}"
        verdict = "ok" if self.ok else "FAILED" if self.failed else "UNDECIDED"
        if self.checked == 0:
            verdict = "NO INSTANCES"
        space = "many" if self.space is None else str(self.space)
        scope = f"all {space} instances" if self.exhaustive else f"sample of {space}"
        scope += f"; {self.note}" if self.note else ""
        relu = f", {self.relu_defined} need relu's definition" if self.relu_defined else ""
        line = (
            f"{self.rule}: {verdict} ({self.checked} checked, {self.failed} failed, "
            f"{self.unknown} unknown{relu}; {scope}; bound {self.bound}; {self.seconds:.2f} s)"
        )
        return line + (f"\n  counterexample {self.counterexample}" if self.counterexample else "")


# ------------------------------------------------------------------------- instances


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


def _elementwise_partners(
    attrs: Mapping[str, Any], shapes: Sequence[Shape | None], at: int, rank: int, bound: int
) -> list[Shape]:
    """Operands of a rule's element-wise op have one shape (`rules.ELEMENTWISE`)."""
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
    "add": _elementwise_partners,
    "mul": _elementwise_partners,
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
        if op.op in ELEMENTWISE and len({value.sig.shape for value in operands}) > 1:
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


def _choose(
    rule: Rule, bound: int, count: int, seed: int, deadline: float
) -> tuple[list[Instance], int | None]:
    """The instances to check, and how many there are (None: too many to list)."""
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


# ---------------------------------------------------------------------------- checks


class Verdict(Enum):
    EQUAL = "equal"
    RELU_DEFINED = "equal given relu's definition"
    """Different for some function with f(0) = 0, equal for relu = max(t, 0): a true
    property whose proof needs more of relu than the prover's uninterpreted function."""
    DIFFERENT = "different"
    UNKNOWN = "unknown"


_SOLVER_TIMEOUT_MS = 20_000
"""At most this long for z3 on one instance (less when the rule's time runs out)."""
_PROBES = 2
"""Random integer points tried before the symbolic proof."""


def _text(expr: Any, limit: int = 100) -> str:
    text = " ".join(str(expr).split())
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _elements(
    left: Sequence[np.ndarray], right: Sequence[np.ndarray]
) -> Iterator[tuple[str, symbolic.Elem, symbolic.Elem]]:
    """Corresponding output elements of the two sides, each with its position."""
    for output, (a, b) in enumerate(zip(left, right, strict=True)):
        for index in np.ndindex(a.shape):
            yield f"output {output}[{','.join(map(str, index))}]", a[index], b[index]


def _shape_mismatch(left: Sequence[np.ndarray], right: Sequence[np.ndarray]) -> str:
    for output, (a, b) in enumerate(zip(left, right, strict=True)):
        if a.shape != b.shape:
            return f"output {output}: src shape {a.shape}, tgt {b.shape}"
    return ""


def _concrete_difference(src: Dag, tgt: Dag, rng: random.Random) -> str:
    """A difference at random integer inputs, with relu and max evaluated exactly, or "".

    Cheap, and it turns most false rules into a counterexample a reader can check by
    hand, before z3 would have to search for one in nonlinear real arithmetic."""
    for _ in range(_PROBES):
        values = [
            np.array([rng.randint(-9, 9) for _ in range(node.sigs[0].size)], dtype=object).reshape(
                node.sigs[0].shape
            )
            for node in src.args
        ]
        args = [symbolic.known(v) for v in values]
        left, right = symbolic.run(src, args), symbolic.run(tgt, args)
        for where, x, y in _elements(left, right):
            if isinstance(x, Fraction) and isinstance(y, Fraction) and x != y:
                inputs = ", ".join(
                    f"{node.attr('name')} = {_text(v.tolist(), 60)}"
                    for node, v in zip(src.args, values, strict=True)
                )
                return f"{where}: src is {x}, tgt is {y}, at {inputs}"
    return ""


def compare(
    src: Dag,
    tgt: Dag,
    timeout_ms: int,
    rng: random.Random | None = None,
    proven: ProvenPairs | None = None,
    explain: bool = True,
) -> tuple[Verdict, str]:
    """Whether `src` and `tgt` (over the same arguments) compute equal outputs for all
    real inputs and every interpretation of the uninterpreted functions (with relu(0) =
    0), or failing that for relu = max(t, 0); for a difference, a line naming the element
    and a witness (unless not `explain`: printing large z3 terms is slow). `timeout_ms`
    bounds each z3 stage."""
    args = [symbolic.variables(node.attr("name"), node.sigs[0].shape) for node in src.args]
    left, right = symbolic.run(src, args), symbolic.run(tgt, args)
    mismatch = _shape_mismatch(left, right)
    if mismatch:
        return Verdict.DIFFERENT, mismatch
    concrete = _concrete_difference(src, tgt, rng or random.Random(0))
    if concrete:
        return Verdict.DIFFERENT, concrete
    pending: list[Pair] = []
    for where, x, y in _elements(left, right):
        if isinstance(x, Fraction) and isinstance(y, Fraction):
            if x != y:
                return Verdict.DIFFERENT, f"{where}: src is {x}, tgt is {y}, for any input"
            continue
        zx, zy = symbolic.to_z3(x), symbolic.to_z3(y)
        if not (zx.eq(zy) or _cancels(zx, zy)):
            pending.append((where, zx, zy))
    if not pending:
        return Verdict.EQUAL, ""
    budget = max(1, min(timeout_ms, _SOLVER_TIMEOUT_MS))
    proven = ProvenPairs() if proven is None else proven
    result, model, gave_up = _solve(pending, budget, proven)
    if model is None:
        return (Verdict.EQUAL, "") if result == z3.unsat else (Verdict.UNKNOWN, gave_up)
    # Different for some function with relu(0) = 0; is it for relu itself?
    defined = [(w, symbolic.define_relu(zx), symbolic.define_relu(zy)) for w, zx, zy in pending]
    if all(a.eq(b) for (_, a, _), (_, b, _) in zip(pending, defined, strict=True)):
        return Verdict.DIFFERENT, _witness(
            model, pending, "functions uninterpreted"
        ) if explain else ""
    exact, exact_model, gave_up = _solve(defined, budget, proven)
    if exact_model is not None:
        return Verdict.DIFFERENT, _witness(
            exact_model, defined, "relu = max(t, 0)"
        ) if explain else ""
    if exact == z3.unsat:
        return Verdict.RELU_DEFINED, ""
    return Verdict.UNKNOWN, gave_up


def _cancels(zx: z3.ArithRef, zy: z3.ArithRef) -> bool:
    """Whether zx - zy normalizes to 0 as a sum of monomials: polynomial identities
    (bilinearity, associativity) need no solver."""
    difference = z3.simplify(zx - zy, som=True)
    return z3.is_rational_value(difference) and difference.as_fraction() == 0


Pair = tuple[str, z3.ArithRef, z3.ArithRef]
"""An output element's position and its value on either side."""


class ProvenPairs:
    """Element pairs z3 has shown equal, up to a renaming of the input variables.

    The instances of a rule pose the same small problems over different variables (every
    window of a max-pooling, at every shape): renamed to v0, v1, ... in order of first
    appearance, a pair proven once needs no second proof. A one-to-one renaming of the
    variables changes no equality, so this is sound. The key is z3's own printing (fast,
    and shared subterms stay shared), where the variables are the only symbols in bars,
    as `symbolic.variables` names them `x[i,j]`."""

    _VARIABLE = re.compile(r"\|[^|]*\|")

    def __init__(self) -> None:
        self._proven: set[str] = set()

    def _key(self, zx: z3.ArithRef, zy: z3.ArithRef) -> str:
        names: dict[str, str] = {}
        text = f"{zx.sexpr()}\n{zy.sexpr()}"
        return self._VARIABLE.sub(lambda m: names.setdefault(m.group(), f"v{len(names)}"), text)

    def __contains__(self, pair: tuple[z3.ArithRef, z3.ArithRef]) -> bool:
        return self._key(*pair) in self._proven

    def add(self, pair: tuple[z3.ArithRef, z3.ArithRef]) -> None:
        self._proven.add(self._key(*pair))


def _solve(
    pending: Sequence[Pair], timeout_ms: int, proven: ProvenPairs
) -> tuple[z3.CheckSatResult, z3.ModelRef | None, str]:
    """Whether some pair of `pending` can differ, with a model if so, or why z3 gave up.

    One pair at a time, stopping at the first that can differ: z3 proves a few hundred
    small problems much faster than their disjunction (a max-pooling window of relus:
    1.3 s against 5.5 s), and a pair proven before (`proven`) is skipped."""
    deadline = time.monotonic() + timeout_ms / 1000
    gave_up = ""
    for _, zx, zy in pending:
        if (zx, zy) in proven:
            continue
        left = int((deadline - time.monotonic()) * 1000)
        if left <= 0:
            return z3.unknown, None, "timeout"
        solver = z3.Solver()
        solver.set(timeout=left)
        solver.add(*symbolic.HYPOTHESES)
        solver.add(zx != zy)
        result = solver.check()
        if result == z3.sat:
            return result, solver.model(), ""
        if result == z3.unsat:
            proven.add((zx, zy))
        else:
            gave_up = solver.reason_unknown()
    return (z3.unknown, None, gave_up) if gave_up else (z3.unsat, None, "")


def _variables(expr: z3.ExprRef) -> list[z3.ExprRef]:
    """The variables of `expr` in order of first appearance (left to right)."""
    found: dict[z3.ExprRef, None] = {}
    seen: set[int] = set()
    stack = [expr]
    while stack:
        e = stack.pop()
        if e.get_id() in seen:
            continue
        seen.add(e.get_id())
        if z3.is_const(e) and e.decl().kind() == z3.Z3_OP_UNINTERPRETED:
            found[e] = None
        stack.extend(reversed(e.children()))
    return list(found)


def _witness(model: z3.ModelRef, pending: Sequence[Pair], relu: str) -> str:
    """The first pair `model` makes differ: both sides, their values, the inputs."""
    for where, zx, zy in pending:
        if z3.is_true(model.eval(zx != zy, model_completion=True)):
            names = sorted({str(v) for v in _variables(zx) + _variables(zy)})
            values = {str(d): model[d] for d in model.decls() if d.arity() == 0}
            shown = ", ".join(f"{name} = {values.get(name, 0)}" for name in names[:8])
            more = ", ..." if len(names) > 8 else ""
            return (
                f"{where}: src {_text(zx)} = {model.eval(zx, model_completion=True)}, "
                f"tgt {_text(zy)} = {model.eval(zy, model_completion=True)}, "
                f"with {shown}{more} ({relu})"
            )
    raise AssertionError("the model was found for one of these pairs")


# -------------------------------------------------------------------------- validate


def validate_rule(
    rule: Rule,
    bound: int = 4,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    max_instances: int = DEFAULT_MAX_INSTANCES,
    seed: int = 0,
) -> Validation:
    """Check `rule` at every instance with input dims in 1..`bound` (or at
    `max_instances` of them drawn at random, when there are more), within `timeout_s`."""
    start = time.monotonic()
    deadline = start + timeout_s

    def result(counts: Mapping[Verdict, int], **fields: Any) -> Validation:
        return Validation(
            rule=rule.name,
            bound=bound,
            checked=sum(counts.values()),
            failed=counts[Verdict.DIFFERENT],
            unknown=counts[Verdict.UNKNOWN],
            relu_defined=counts[Verdict.RELU_DEFINED],
            seconds=time.monotonic() - start,
            **fields,
        )

    counts = dict.fromkeys(Verdict, 0)
    try:
        chosen, space = _choose(rule, bound, max_instances, seed, deadline)
    except RuleError as err:
        return result(counts, space=None, exhaustive=False, note=str(err), error=True)
    exhaustive = space is not None and len(chosen) == space
    first: Counterexample | None = None
    rng = random.Random(seed)
    proven = ProvenPairs()
    note = "" if exhaustive else f"capped at {max_instances}"
    for instance in chosen:
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            note = f"timed out after {sum(counts.values())} of {len(chosen)} instances"
            exhaustive = False
            break
        src, tgt = rule.instantiate(dict(instance.shapes), dict(instance.params))
        try:
            verdict, detail = compare(
                src, tgt, int(remaining * 1000), rng, proven, explain=first is None
            )
        except symbolic.SymbolicError as err:
            return result(counts, space=space, exhaustive=False, note=str(err), error=True)
        counts[verdict] += 1
        if verdict is Verdict.DIFFERENT and first is None:
            first = Counterexample(instance, detail)
        if verdict is Verdict.UNKNOWN and counts[verdict] == 1:
            note = "; ".join(filter(None, [note, f"undecided at {instance}: {detail}"]))
    return result(counts, space=space, exhaustive=exhaustive, counterexample=first, note=note)


def _validate_one(job: tuple[Rule, dict[str, Any]]) -> Validation:
    rule, options = job
    return validate_rule(rule, **options)


def validate_rules(
    rules: Sequence[Rule],
    bound: int = 4,
    jobs: int | None = None,
    **options: Any,
) -> list[Validation]:
    """`validate_rule` for every rule, in order, on `jobs` processes (default: one per
    core); `options` are `validate_rule`'s keyword arguments. Workers are spawned, so a
    script calling this needs the usual `if __name__ == "__main__":` guard."""
    workers = min(len(rules), jobs or os.cpu_count() or 1)
    work = [(rule, {"bound": bound, **options}) for rule in rules]
    if workers <= 1:
        return [_validate_one(job) for job in work]
    # Fresh interpreters rather than forks: z3 keeps native state that a fork would copy.
    context = multiprocessing.get_context("spawn")
    with ProcessPoolExecutor(workers, mp_context=context) as pool:
        return list(pool.map(_validate_one, work))
