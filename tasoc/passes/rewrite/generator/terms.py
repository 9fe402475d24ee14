"""The term table: every op application the generator builds, hash-consed, typed and
evaluated once.

A *term* is one form applied to operand values; its results are *values*, and so are
the pool inputs. Interning terms by (form, operands) means a computation is never
built twice: a graph is a set of terms, two graphs that share a subgraph share those
very terms, and extending a graph by one op evaluates only that op, on the cached
values of its operands (exact ones at the fingerprint sets, float ones on demand).

Each value also records what enumeration and emission need to know about it: its
shape at every shape set, its role, its closure (the terms it depends on, i.e. the
smallest graph computing it), the pool inputs it reads, its fingerprint class and its
*split trees* — TASO's record, per axis, of the concatenation a split may undo
(thesis §2.3.1), carried through the ops that keep that axis apart (a matmul keeps
the batch and row axes of its left operand and the columns of its right one, a
convolution the output channels of its weight).
"""

from __future__ import annotations

import zlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from tasoc.ir.shapes import DType, ShapeError, TensorSig, infer
from tasoc.passes.rewrite.generator.evaluate import apply, random_input
from tasoc.passes.rewrite.generator.fingerprint import value_key
from tasoc.passes.rewrite.generator.worlds import FINGERPRINT_SETS, Derive, Form, Role, World

Shape = tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SplitPoint:
    """A concatenation of `left` and `right` (value ids) along their axis `axis`, and
    the split trees of its two parts on the same axis."""

    left: int
    right: int
    axis: int
    inner_left: SplitPoint | None
    inner_right: SplitPoint | None


@dataclass(slots=True)
class Value:
    """A pool input (`term == -1`) or result `index` of term `term`."""

    id: int
    term: int
    index: int
    shapes: tuple[Shape, ...]
    role: Role
    trees: tuple[SplitPoint | None, ...]
    closure: frozenset[int]
    inputs: frozenset[int]
    exact: list[np.ndarray] | None
    """Contents at the fingerprint sets (dropped once the value can no longer be an
    operand, to bound memory)."""
    cls: int = -1


@dataclass(slots=True)
class Term:
    """Form `form` (an index into the world's forms) applied to `operands`."""

    id: int
    form: int
    operands: tuple[int, ...]
    attrs: tuple[dict[str, Any], ...]
    """The op's attributes at every shape set."""
    results: tuple[int, ...]


class Table:
    """All terms and values of one world, with their fingerprint classes."""

    def __init__(self, world: World, seed: int) -> None:
        self.world = world
        self.forms = world.forms
        self.values: list[Value] = []
        self.terms: list[Term] = []
        self._interned: dict[tuple[int, tuple[int, ...]], int] = {}
        self.classes: dict[bytes, int] = {}
        self.rep: list[int] = []
        """The canonical value of each class (-1 while only split results are in it)."""
        self.members: list[list[int]] = []
        """The values of each class, in order of discovery."""
        stream = zlib.crc32(world.name.encode())
        self._rng = np.random.default_rng([seed, stream])
        self._float_rng = np.random.default_rng([seed, stream, 1])
        self._floats: dict[int, list[np.ndarray]] = {}
        self._input_shapes = {i.name: i.dims for i in world.inputs}
        self.input_ids: list[int] = []
        for pool_input in world.inputs:
            shapes = tuple(pool_input.shape(sizes) for sizes in world.sizes)
            exact = [random_input(self._rng, s, True) for s in shapes[:FINGERPRINT_SETS]]
            value = self._new_value(-1, 0, shapes, pool_input.role, (None,) * len(shapes[0]))
            value.inputs = frozenset((value.id,))
            value.exact = exact
            self.input_ids.append(value.id)
            self.classify(value.id)

    # ------------------------------------------------------------------ building
    def build(self, form_index: int, operands: tuple[int, ...]) -> Term | None:
        """The term of `form_index` on `operands`, evaluated at the fingerprint sets,
        or None when it does not type-check at every shape set (or breaks a form's
        rule); a term is built once, later calls return the same term."""
        key = (form_index, operands)
        found = self._interned.get(key)
        if found is not None:
            return self.terms[found]
        term = self._make(form_index, operands)
        if term is not None:
            self._interned[key] = term.id
        return term

    def _make(self, form_index: int, operands: tuple[int, ...]) -> Term | None:
        form = self.forms[form_index]
        args = [self.values[v] for v in operands]
        if not self._admits(form, args):
            return None
        attrs, result_shapes = [], []
        for index, sizes in enumerate(self.world.sizes):
            op_attrs = self._attrs(form, args, sizes, index)
            if op_attrs is None:
                return None
            try:
                sigs = infer(
                    form.op, [TensorSig(a.shapes[index], DType.F32) for a in args], op_attrs
                )
            except (ShapeError, ValueError, TypeError):
                return None
            attrs.append(op_attrs)
            result_shapes.append([sig.shape for sig in sigs])
        exact = [
            apply(form.op, attrs[i], [a.exact[i] for a in args], True)  # type: ignore[index]
            for i in range(FINGERPRINT_SETS)
        ]
        term_id = len(self.terms)
        role = form.result_role or args[0].role
        closure = frozenset((term_id,)).union(*(a.closure for a in args))
        inputs = frozenset().union(*(a.inputs for a in args))
        trees = self._trees(form, args, attrs[0], [len(s) for s in result_shapes[0]])
        results = []
        for r in range(len(result_shapes[0])):
            shapes = tuple(per_set[r] for per_set in result_shapes)
            value = self._new_value(term_id, r, shapes, role, trees[r])
            value.closure, value.inputs = closure, inputs
            value.exact = [per_set[r] for per_set in exact]
            results.append(value.id)
        term = Term(term_id, form_index, operands, tuple(attrs), tuple(results))
        self.terms.append(term)
        return term

    def _new_value(
        self,
        term: int,
        index: int,
        shapes: tuple[Shape, ...],
        role: Role,
        trees: tuple[SplitPoint | None, ...],
    ) -> Value:
        value = Value(
            len(self.values), term, index, shapes, role, trees, frozenset(), frozenset(), None
        )
        self.values.append(value)
        return value

    def _admits(self, form: Form, args: Sequence[Value]) -> bool:
        """The form's own rules (operand roles, equal shapes, pool inputs only, one
        order of commutative operands) and TASO's: two different operands (`add(x, x)`
        only doubles), scalars only in `scale`; then a quick look at ranks and at the
        sizes that must agree, which turns most ill-typed operands away before `infer`."""
        for arg, role in zip(args, form.roles, strict=False):
            if role is not None and arg.role is not role:
                return False
        if form.same_shape and args[0].shapes != args[1].shapes:
            return False
        if form.inputs_only and any(a.term >= 0 for a in args):
            return False
        if form.commutative and args[0].id > args[1].id and max(a.term for a in args) >= 0:
            return False
        if form.arity == 2 and args[0].id == args[1].id:
            return False
        if form.op != "scale" and any(a.role is Role.SCALAR for a in args):
            return False
        shapes = [a.shapes[0] for a in args]
        if form.op == "matmul":  # a matrix, or a batch of them times one matrix
            lhs, rhs = shapes
            return len(lhs) >= 2 and len(rhs) == 2 and lhs[-1] == rhs[0]
        if form.op == "concat":
            axis = dict(form.literal)["axis"]
            return (
                args[0].role == args[1].role
                and len(shapes[0]) == len(shapes[1]) > axis
                and all(i == axis or a == b for i, (a, b) in enumerate(zip(*shapes, strict=True)))
            )
        if form.op == "split":
            axis = dict(form.literal)["axis"]
            return len(shapes[0]) > axis and args[0].trees[axis] is not None
        if form.op == "scale":
            return len(shapes[1]) == 0
        if form.op == "transpose":
            return len(shapes[0]) == 2
        return form.op not in ("add", "mul") or args[0].role == args[1].role

    def _attrs(
        self, form: Form, args: Sequence[Value], sizes: Mapping[str, int], index: int
    ) -> dict[str, Any] | None:
        attrs = dict(form.literal)
        for name, how, argument in form.derived:
            if how is Derive.DIM:
                attrs[name] = sizes[argument]
            elif how is Derive.SQUARE:
                attrs[name] = (sizes[argument], sizes[argument])
            elif how is Derive.SHAPE_OF:
                attrs[name] = tuple(sizes[d] for d in self._input_shapes[argument])
            elif how is Derive.GROUPS:
                channels, per_group = args[0].shapes[index], args[1].shapes[index]
                if len(channels) != 4 or len(per_group) != 4 or channels[1] % per_group[1]:
                    return None
                attrs[name] = channels[1] // per_group[1]
            else:
                tree = args[0].trees[attrs["axis"]] if args[0].trees else None
                if tree is None:
                    return None
                attrs[name] = tuple(
                    self.values[v].shapes[index][tree.axis] for v in (tree.left, tree.right)
                )
        return attrs

    def _trees(
        self, form: Form, args: Sequence[Value], attrs: Mapping[str, Any], ranks: Sequence[int]
    ) -> list[tuple[SplitPoint | None, ...]]:
        """The split trees of the results (see the module docstring)."""
        op = form.op
        if form.arity == 0:
            return [(None,) * ranks[0]]
        first = args[0].trees
        if op in ("add", "mul", "concat"):
            merged = tuple(a if a == b else None for a, b in zip(first, args[1].trees, strict=True))
            if op != "concat":
                return [merged]
            axis = attrs["axis"]
            point = SplitPoint(args[0].id, args[1].id, axis, first[axis], args[1].trees[axis])
            return [(*merged[:axis], point, *merged[axis + 1 :])]
        if op == "split":
            axis = attrs["axis"]
            tree = first[axis]
            assert tree is not None
            return [
                (*first[:axis], part, *first[axis + 1 :])
                for part in (tree.inner_left, tree.inner_right)
            ]
        if op == "transpose":
            return [tuple(first[p] for p in attrs["perm"])]
        if op == "matmul":  # the right operand is a matrix (`_admits`)
            return [(*first[:-1], args[1].trees[1])]
        if op == "conv2d":
            channels = args[1].trees[0] if attrs["groups"] == 1 else None
            return [(first[0], channels, None, None)]
        if op in ("pool2d", "enlarge"):
            return [(first[0], first[1], None, None)]
        return [first]

    # ---------------------------------------------------------------- classes
    def classify(self, value_id: int) -> bool:
        """Put a value in its fingerprint class; True when it is the class's new
        canonical value (split results never are: a split undoes a concatenation,
        so its results always equal something smaller)."""
        value = self.values[value_id]
        key = value_key(value.shapes[:FINGERPRINT_SETS], value.exact or [])
        cls = self.classes.setdefault(key, len(self.classes))
        if cls == len(self.rep):
            self.rep.append(-1)
            self.members.append([])
        value.cls = cls
        self.members[cls].append(value_id)
        is_split = value.term >= 0 and self.forms[self.terms[value.term].form].op == "split"
        if self.rep[cls] < 0 and not is_split:
            self.rep[cls] = value_id
            return True
        return False

    def drop_exact(self, value_id: int) -> None:
        """Free the exact contents of a value that will never be an operand."""
        self.values[value_id].exact = None

    # ----------------------------------------------------------------- floats
    def floats(self, value_id: int) -> list[np.ndarray]:
        """The value at every shape set on the fixed random float inputs (cached)."""
        found = self._floats.get(value_id)
        if found is not None:
            return found
        value = self.values[value_id]
        if value.term < 0:
            result = [random_input(self._float_rng, shape, False) for shape in value.shapes]
        else:
            term = self.terms[value.term]
            args = [self.floats(v) for v in term.operands]
            op = self.forms[term.form].op
            outs = [
                apply(op, attrs, [a[i] for a in args], False) for i, attrs in enumerate(term.attrs)
            ]
            for r, result_id in enumerate(term.results):
                self._floats[result_id] = [per_set[r] for per_set in outs]
            return self._floats[value_id]
        self._floats[value_id] = result
        return result

    def clear_floats(self) -> None:
        self._floats.clear()

    # -------------------------------------------------------------- structure
    def producers(self, term: Term) -> frozenset[int]:
        """The terms whose results `term` reads directly."""
        return frozenset(self.values[v].term for v in term.operands if self.values[v].term >= 0)

    def op(self, term: Term) -> str:
        return self.forms[term.form].op
