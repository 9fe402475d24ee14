"""An e-graph over tasoc's ops: many equal graphs in one structure (egg, Tensat).

An *e-class* is a set of equal tensors; an *e-node* is an op applied to e-classes,
`(op, attrs, children)` with `attrs` as in `Node.attrs`. Rewriting adds the target of
a match and *unions* its class with the source's, so no graph is ever given up: the
search keeps every alternative and an extractor (`extract.py`) picks the cheapest.

Three kinds of e-node beside the graph ops:

* `ARGUMENT`: a program argument, `attrs = (("node", <the arg Node>),)`;
* a multi-result op (`split`) lives in a *tuple class* whose `sigs` are all its
  results' types, and
* `PROJECT` e-nodes, `(PROJECT, (("index", i),), (tuple class,))`, are result i.

Every class has one type (`sigs`): a rule preserves types, and a union of classes of
different types is refused (`EGraphError`), so shape terms and preconditions of rules
can be evaluated per class. A tensor class has a *placeholder*: an argument `Node`
carrying its type, on which `rules.build_pattern` builds a rule's target as ordinary
nodes, which `add_value` then turns into e-nodes.

Unions are cheap (union-find); `rebuild` restores the invariants afterwards, in one
pass over all e-nodes per round: children canonical, and e-nodes equal after
canonicalization merged (congruence closure).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping

from tasoc.ir.dag import ARG, Attrs, Dag, Node, Value
from tasoc.ir.shapes import TensorSig

ClassId = int
ENode = tuple[str, Attrs, tuple[ClassId, ...]]
"""`(op, attrs, children)`: hashable, compared by value."""

ARGUMENT = ARG
PROJECT = "#result"


class EGraphError(ValueError):
    """An e-graph operation that would break its invariants (a union across types)."""


class EGraph:
    """E-classes of e-nodes with a hash-cons, union-find and congruence rebuild."""

    def __init__(self) -> None:
        self._parent: list[ClassId] = []
        self._sigs: list[tuple[TensorSig, ...]] = []
        self.classes: dict[ClassId, list[ENode]] = {}
        """Canonical class id -> its e-nodes (canonical after `rebuild`)."""
        self._memo: dict[ENode, ClassId] = {}
        self._placeholders: dict[ClassId, Value] = {}
        self._placeholder_class: dict[Node, ClassId] = {}
        self._dirty = False
        self._num_nodes = 0
        self.generation = 0
        """Stamped on each new e-node as its age (`ages`): saturation counts rounds."""
        self.ages: dict[ENode, int] = {}
        """Canonical e-node -> the generation it was first added in (0: the input)."""

    # ------------------------------------------------------------------ reading

    def find(self, cid: ClassId) -> ClassId:
        parent = self._parent
        while parent[cid] != cid:
            parent[cid] = parent[parent[cid]]
            cid = parent[cid]
        return cid

    def sigs(self, cid: ClassId) -> tuple[TensorSig, ...]:
        return self._sigs[self.find(cid)]

    def sig(self, cid: ClassId) -> TensorSig:
        """The type of a tensor class (not a tuple class)."""
        (sig,) = self.sigs(cid)
        return sig

    @property
    def num_nodes(self) -> int:
        """E-nodes held (kept as a count: saturation asks before every application)."""
        return self._num_nodes

    @property
    def num_classes(self) -> int:
        return len(self.classes)

    def items(self) -> Iterator[tuple[ClassId, ENode]]:
        """Every (canonical class, e-node), in class order."""
        for cid, nodes in self.classes.items():
            for enode in nodes:
                yield cid, enode

    def lookup(self, enode: ENode) -> ClassId | None:
        """The class of `enode` (children canonicalized), if the e-graph has it."""
        cid = self._memo.get(self._canonical(enode))
        return None if cid is None else self.find(cid)

    def result_class(self, tuple_class: ClassId, index: int) -> ClassId:
        """The class of result `index` of a multi-result class."""
        cid = self.lookup((PROJECT, (("index", index),), (tuple_class,)))
        if cid is None:
            raise EGraphError(f"class {tuple_class} has no result {index}")
        return cid

    def placeholder(self, cid: ClassId) -> Value:
        """A stand-in value of tensor class `cid`'s type, to build nodes on."""
        cid = self.find(cid)
        value = self._placeholders.get(cid)
        if value is None:
            node = Node.arg(cid, "eclass", self.sig(cid))
            value = self._placeholders[cid] = node.out
            self._placeholder_class[node] = cid
        return value

    # ------------------------------------------------------------------ adding

    def add(self, enode: ENode, sigs: tuple[TensorSig, ...]) -> ClassId:
        """The class of `enode`, made (with `sigs`) if it is new. A multi-result e-node
        gets its `PROJECT` classes too."""
        enode = self._canonical(enode)
        known = self._memo.get(enode)
        if known is not None:
            return self.find(known)
        cid = len(self._parent)
        self._parent.append(cid)
        self._sigs.append(sigs)
        self.classes[cid] = [enode]
        self._num_nodes += 1
        self._memo[enode] = cid
        self.ages[enode] = self.generation
        if len(sigs) > 1:
            for index, sig in enumerate(sigs):
                self.add((PROJECT, (("index", index),), (cid,)), (sig,))
        return cid

    def add_value(self, value: Value, known: Mapping[Node, ClassId] | None = None) -> ClassId:
        """The class of `value`, adding the nodes it is computed by. Its leaves are
        placeholders, or argument nodes given classes in `known`."""
        classes = dict(known or {})
        for node in _postorder(value.node, self._placeholder_class, classes):
            if node in self._placeholder_class:
                classes[node] = self._placeholder_class[node]
                continue
            children = tuple(self._value_class(v, classes) for v in node.inputs)
            classes[node] = self.add((node.op, node.attrs, children), node.sigs)
        return self._value_class(value, classes)

    def add_dag(self, dag: Dag) -> tuple[tuple[ClassId, ...], dict[ClassId, Node]]:
        """Add `dag`; the classes of its outputs, and each argument's class."""
        known = {node: self.add((ARGUMENT, (("node", node),), ()), node.sigs) for node in dag.args}
        roots = tuple(self.add_value(value, known) for value in dag.outputs)
        return roots, {cid: node for node, cid in known.items()}

    def _value_class(self, value: Value, classes: Mapping[Node, ClassId]) -> ClassId:
        cid = classes[value.node]
        if len(value.node.sigs) == 1:
            return cid
        return self.result_class(cid, value.index)

    # ---------------------------------------------------------------- merging

    def union(self, a: ClassId, b: ClassId) -> bool:
        """Make `a` and `b` one class; whether they were two. The smaller id stays the
        representative, so ids are deterministic."""
        a, b = self.find(a), self.find(b)
        if a == b:
            return False
        if self._sigs[a] != self._sigs[b]:
            raise EGraphError(f"cannot union classes of types {self._sigs[a]} and {self._sigs[b]}")
        a, b = min(a, b), max(a, b)
        self._parent[b] = a
        self._dirty = True
        return True

    def rebuild(self) -> None:
        """Restore canonical children and congruence after unions (module docstring)."""
        while self._dirty:
            self._dirty = False
            grouped: dict[ClassId, dict[ENode, None]] = {}
            memo: dict[ENode, ClassId] = {}
            for cid, nodes in self.classes.items():
                root = self.find(cid)
                group = grouped.setdefault(root, {})
                for enode in nodes:
                    enode = self._canonical(enode)
                    group[enode] = None
                    other = memo.setdefault(enode, root)
                    if other != root:
                        self.union(other, root)
            self.classes = {cid: list(group) for cid, group in sorted(grouped.items())}
            self._num_nodes = sum(len(nodes) for nodes in self.classes.values())
            self._memo = memo
            ages: dict[ENode, int] = {}
            for enode, age in self.ages.items():
                key = self._canonical(enode)
                ages[key] = min(age, ages.get(key, age))
            self.ages = ages
        self._memo = {enode: self.find(cid) for enode, cid in self._memo.items()}

    def _canonical(self, enode: ENode) -> ENode:
        op, attrs, children = enode
        return (op, attrs, tuple(self.find(child) for child in children))


def _postorder(
    root: Node, leaves: Mapping[Node, ClassId], known: Mapping[Node, ClassId]
) -> Iterable[Node]:
    """The nodes under `root` that are not `known`, operands before users, without
    recursion (a deep graph would overflow Python's stack)."""
    order: list[Node] = []
    seen: set[Node] = set(known)
    stack: list[tuple[Node, bool]] = [(root, False)]
    while stack:
        node, expanded = stack.pop()
        if expanded:
            order.append(node)
            continue
        if node in seen:
            continue
        seen.add(node)
        stack.append((node, True))
        if node not in leaves:
            stack.extend((value.node, False) for value in reversed(node.inputs))
    return order
