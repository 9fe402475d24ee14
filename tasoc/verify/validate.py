"""Validation of rules by symbolic execution on small shapes (TASO thesis §2.4).

A rule — an axiom is a rule too — claims `src == tgt` for all tensors of its inputs'
ranks and all values of its parameters. A wrong axiom would let the prover accept wrong
rules, so TASO checks each axiom against the operators' actual semantics on every small
shape. `validate_rule` does that for tasoc at the rule's *instances*
(`tasoc.verify.instances`: every parameter bound from `rules.param_domain`, every input
a shape with all dims in 1..bound, both patterns type-checking). At each instance the
two patterns run on symbolic inputs (`tasoc.verify.symbolic`) and every pair of output
elements must be equal for all real inputs and every interpretation of the
uninterpreted functions (`compare`). Cheap checks go first: two runs on random integers
(most false rules fail there, with a counterexample anyone can check by hand), then
structural equality and polynomial normal forms (which settle bilinearity and
associativity), and only what is left goes to z3, one element pair at a time.

relu is uninterpreted with relu(0) = 0, as in TASO, so that the prover's axioms cannot
lean on what its own model of relu does not know. When an instance fails only because of
that (relu(relu(x)) = relu(x), relu commuting with max), it is checked again with relu's
definition: if that holds it counts as holding, and the report says how many instances
needed the definition.

When a rule has at most `max_instances` instances the validation is exhaustive;
otherwise it checks `max_instances` distinct instances drawn at random (seeded, so runs
repeat) and spread evenly over the parameter bindings, and says so
(`Validation.exhaustive` is False).
"""

from __future__ import annotations

import multiprocessing
import os
import random
import re
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from enum import Enum
from fractions import Fraction
from typing import Any

import numpy as np
import z3

from tasoc.ir.dag import Dag
from tasoc.ir.rules import Rule, RuleError
from tasoc.verify import symbolic
from tasoc.verify.instances import Instance, choose_instances
from tasoc.verify.pool import sigint_ignored

DEFAULT_MAX_INSTANCES = 200
DEFAULT_TIMEOUT_S = 120.0


# --------------------------------------------------------------------------- results


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
        chosen, space = choose_instances(rule, bound, max_instances, seed, deadline)
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
    # Workers are born ignoring SIGINT (Ctrl-C is the caller's, as in `pool.run_tasks`),
    # and leaving the block terminates them, so an interrupted run prints one line.
    with sigint_ignored():
        pool = multiprocessing.get_context("spawn").Pool(workers)
    with pool:
        return pool.map(_validate_one, work)
