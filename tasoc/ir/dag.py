"""A light, immutable, hash-consed view of a `graph` program, for search passes.

Search passes (equality-rewrite, soap-shard, placement) look at thousands of
candidate graphs. Cloning an xDSL module per candidate costs ~0.2 s at 5,000 ops
and xDSL's use-lists make every edit a mutation, so a pass converts the module once
with `from_module`, searches over `Dag`s, and writes the winner back with
`write_back`, which replaces `@main` and nothing else of the module.

The light graph keeps everything `@main` says, or refuses it: tensor encodings
(`tensor<4xf32, #memory.space<host>>`) are part of each value's `TensorSig`, every
argument attribute is kept on its argument node, result and function attributes
(`sym_visibility`, ...) on the `Dag`. What a node has no place for is refused with a
one-line `ProgramError` naming the op (`representable`): ops of other dialects (a
node is keyed by the `graph` op's short name), regions, successors, discardable op
attributes, and bodies of several blocks.

* `Node` — one op application: `op` (the short name, `"conv2d"`), `attrs` (the
  Python values of `GraphOp.py_attrs()` as `(name, value)` pairs in the op's
  declared property order), `inputs` (`Value`s) and `sigs` (result types, inferred
  with `shapes.infer` when the node is made, so an ill-typed node — and therefore
  an ill-typed substitution — fails at once with `ShapeError`). Program arguments
  are nodes too (`op == "arg"`, made with `Node.arg`).
* `Value` — a `(node, index)` pair naming one result of a node.
* `Dag` — the ordered arguments, the output values, the function name and
  attributes, plus the ops in one deterministic topological order (`position()`
  gives each op's index in it).
* `Node.given` — a node whose result types are given rather than inferred, named by
  an op's full name (`"parallel.all_gather"`): for *views* of a program the `graph`
  rules do not describe, which planners read and nobody writes back as a graph
  (placement's view of one device of a sharded step, `passes/placement/device_view.py`).

Hash-consing. Nodes are interned process-wide (a weak table, like tinygrad's UOp
cache): building a node structurally equal to a live one returns that very object.
So equality of nodes is identity, hashing is the C-level identity hash, equal
subgraphs of two candidate graphs are shared rather than copied, and comparing two
`Dag`s compares only their arguments, outputs and attributes. Unpickling re-interns, so a
pickled graph comes back as the same objects in the same process. Interning is
exact about attribute values: `0.0` and `-0.0`, `1` and `1.0` and `True`, the
string `"f32"` and `DType.F32` give different nodes, because they print as
different IR.

Consequences a pass author must know:
* *CSE for free, and on purpose*: two identical ops of a module (same op, attributes
  and inputs) become one node, and ops that do not reach an output are dropped
  (all `graph` ops are pure). `to_module(from_module(m))` is therefore semantically
  equal to `m`, not op-for-op identical; `from_module(to_module(d)) == d` holds
  exactly.
* Arguments are identified by their position, not their name: names may repeat
  (xDSL prints two arguments named `w` as `%w` and `%w_1`, and parsing the text gives
  back two hints `w`, because it strips a `_<digits>` suffix). `Node.arg` rejects
  names ending in `_<digits>` for that reason, so every name survives the trip
  through xDSL unchanged.
* There are no use-lists; `Dag.consumers()` computes them on demand.

Everything is iterative: graphs tens of thousands of ops deep never touch the
recursion limit, and pickling writes a flat table instead of nested objects.

Costs (10k ops, 2 cores; docs/benchmarks.md): `from_module` 0.13 s, `to_module`
0.14 s; `==` and `hash` of dags are microseconds; building a `Dag` (or `replace`)
walks the whole graph once (~20 ms) and re-infers only the nodes downstream of a
substitution (~13 us each).
"""

from __future__ import annotations

import gc
import threading
import weakref
from collections.abc import Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any, NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp, UnregisteredOp
from xdsl.ir import Attribute, Block, Operation, SSAValue
from xdsl.ir.core import IRWithName
from xdsl.rewriter import Rewriter

from tasoc.ir.graph import OPS_BY_NAME, PARAM_ATTR, GraphOp, sig_of, tensor_type, to_attr
from tasoc.ir.program import (
    ENTRY,
    NamedAttrs,
    ProgramError,
    arg_infos,
    entry_block,
    entry_function,
    function_attributes,
    make_function,
    named,
    result_attributes,
    return_values,
)
from tasoc.ir.shapes import ConstData, ShapeError, TensorSig, infer

ARG = "arg"
"""The `op` of argument nodes."""

ATTR_NAMES: dict[str, tuple[str, ...]] = {
    name: tuple(op.get_irdl_definition().properties) for name, op in OPS_BY_NAME.items()
}
"""Each op's attribute names in declaration order: the canonical order of `Node.attrs`
and the order `to_module` writes them in, so the text matches the builder's."""

Attrs = tuple[tuple[str, Any], ...]


@contextmanager
def _collector_paused() -> Iterator[None]:
    """Hold off Python's cyclic garbage collector while converting.

    A conversion (or a `replace`) allocates tens of objects per op and frees none of
    them, yet every few hundred allocations the collector walks the young objects and,
    often enough, the whole heap; on a 10k-op module that was over half of the
    conversion time (0.9 s instead of 0.3 s) and of a `replace` rebuilding 5k nodes
    (0.1-0.25 s instead of 0.065 s). Collection is deferred, not skipped.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class Value(NamedTuple):
    """Result `index` of `node`: what an xDSL `SSAValue` is in the light graph."""

    node: Node
    index: int = 0

    @property
    def sig(self) -> TensorSig:
        return self.node.sigs[self.index]


class Use(NamedTuple):
    """Operand `operand` of `node` reads the value this use is listed under."""

    node: Node
    operand: int


class Node:
    """One interned op application (see the module docstring); never mutated.

    `Node("relu", [x.out])`, `Node("conv2d", [x.out, w.out], strides=(1, 1),
    padding="same", activation="none", groups=1)`: inputs are `Value`s, attributes are
    keyword arguments (all of the op's, no others; lists are taken as tuples).
    """

    __slots__ = ("__weakref__", "_results", "attrs", "inputs", "op", "sigs")

    op: str
    attrs: Attrs
    inputs: tuple[Value, ...]
    sigs: tuple[TensorSig, ...]

    def __new__(cls, op: str, inputs: Sequence[Value] = (), **attrs: Any) -> Node:
        if op == ARG:
            raise ValueError("argument nodes are made with Node.arg")
        return _make(op, tuple(inputs), attrs)

    @staticmethod
    def arg(
        index: int,
        name: str,
        sig: TensorSig,
        is_param: bool = False,
        attributes: Mapping[str, Attribute] | NamedAttrs = (),
    ) -> Node:
        """Argument `index` of a program; `is_param` marks a weight (`{graph.param}`),
        `attributes` are its other argument attributes (`{my.attr = 1}`), kept so that
        writing the program back loses none.

        The name must survive as an xDSL name hint, which is what keeps it through
        `to_module`/`from_module` and the text: a valid MLIR identifier not ending in
        `_<digits>` (xDSL strips that as its own uniquing suffix). ValueError otherwise,
        as in `GraphBuilder`. Names may repeat; the index tells arguments apart.
        """
        if index < 0:
            raise ValueError(f"argument index must be non-negative, got {index}")
        if IRWithName.extract_valid_name(name) != name:
            raise ValueError(
                f"argument name '{name}' ends in '_<digits>', which xDSL strips from names"
            )
        others = named(dict(attributes))
        if any(key == PARAM_ATTR for key, _ in others):
            raise ValueError(f"'{PARAM_ATTR}' is given by is_param, not in attributes")
        attrs = (
            ("index", int(index)),
            ("name", name),
            ("is_param", bool(is_param)),
            ("attributes", others),
        )
        return _intern(ARG, attrs, (), (sig,))

    @staticmethod
    def given(op: str, inputs: Sequence[Value], sigs: Sequence[TensorSig], **attrs: Any) -> Node:
        """An op application whose result types are given, not inferred: a node of a
        *view* of a program that the `graph` rules do not describe — one device's
        blocks of a sharded program and its collectives (`placement`'s device view),
        which planners read and nobody writes back as a graph. `op` is the op's full
        name (`"graph.matmul"`, `"parallel.all_gather"`), so a given node never passes
        for a `graph` node (keyed by short names); attributes are kept as given."""
        if op in ATTR_NAMES or op == ARG:
            raise ValueError(f"'{op}' is a graph op's short name: given nodes use full names")
        return _intern(op, tuple(attrs.items()), tuple(inputs), tuple(sigs))

    # ----------------------------------------------------------------- reading
    @property
    def is_given(self) -> bool:
        """Whether this node's result types were given (`Node.given`), not inferred."""
        return self.op not in ATTR_NAMES and self.op != ARG

    @property
    def is_arg(self) -> bool:
        return self.op == ARG

    def attr(self, name: str) -> Any:
        """The value of attribute `name` (KeyError when the op has none)."""
        for key, value in self.attrs:
            if key == name:
                return value
        raise KeyError(f"{self.op} has no attribute '{name}'")

    @property
    def results(self) -> tuple[Value, ...]:
        return self._results  # made once: searches read them millions of times

    @property
    def out(self) -> Value:
        """The only result; ValueError for multi-result nodes (use `results`)."""
        if len(self.sigs) != 1:
            raise ValueError(f"{self.op} has {len(self.sigs)} results; pick one from .results")
        return Value(self, 0)

    # --------------------------------------------------------- immutability
    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Node is immutable (cannot set '{name}')")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Node is immutable (cannot delete '{name}')")

    def __copy__(self) -> Node:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Node:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        order = _topological([self])
        return (_unpickle_node, (_flatten(order),))

    def __repr__(self) -> str:
        if self.is_arg:
            return f"Node.arg({self.attr('index')}, {self.attr('name')!r}, {self.sigs[0]})"
        sigs = ", ".join(map(str, self.sigs))
        return f"Node({self.op}, {len(self.inputs)} inputs -> {sigs})"


class Dag:
    """A whole program: arguments in order, outputs, and the function's name and
    attributes.

    `ops` holds every non-argument node reachable from the outputs, in a
    deterministic topological order (depth-first from the outputs, operands left to
    right). `attributes` are the function's own (`sym_visibility`, discardable ones)
    and `result_attributes` each output's (empty when no output has any), as
    `program.function_attributes`/`result_attributes` read them: what the module says
    of `@main` beyond its ops, so that `write_back` loses nothing. Two dags are equal
    when they have the same name, attributes, arguments and outputs; thanks to
    interning that takes time proportional to those, not to the graph.
    """

    __slots__ = (
        "_consumers",
        "_hash",
        "_position",
        "args",
        "attributes",
        "name",
        "ops",
        "outputs",
        "result_attributes",
    )

    args: tuple[Node, ...]
    outputs: tuple[Value, ...]
    name: str
    attributes: NamedAttrs
    result_attributes: tuple[NamedAttrs, ...]
    ops: tuple[Node, ...]

    def __init__(
        self,
        args: Sequence[Node],
        outputs: Sequence[Value],
        name: str = ENTRY,
        *,
        attributes: NamedAttrs = (),
        result_attributes: Sequence[NamedAttrs] = (),
    ) -> None:
        args = tuple(args)
        outputs = tuple(outputs)
        for i, node in enumerate(args):
            if not (isinstance(node, Node) and node.is_arg and node.attr("index") == i):
                raise ValueError(f"args[{i}] must be Node.arg({i}, ...), got {node!r}")
        if not outputs:
            raise ValueError("a program needs at least one output")
        for value in outputs:
            if not isinstance(value, Value):
                raise TypeError(f"outputs must be Values, got {value!r}")
        result_attributes = tuple(result_attributes) if any(result_attributes) else ()
        if result_attributes and len(result_attributes) != len(outputs):
            raise ValueError(
                f"{len(result_attributes)} result attribute sets for {len(outputs)} outputs"
            )
        ops = []
        known_args = set(args)
        for node in _topological([v.node for v in outputs]):
            if not node.is_arg:
                ops.append(node)
            elif node not in known_args:
                raise ValueError(f"{node!r} is used but is not one of the dag's arguments")
        init = object.__setattr__
        init(self, "args", args)
        init(self, "outputs", outputs)
        init(self, "name", name)
        init(self, "attributes", tuple(attributes))
        init(self, "result_attributes", result_attributes)
        init(self, "ops", tuple(ops))
        init(self, "_hash", hash((name, self.attributes, result_attributes, args, outputs)))
        init(self, "_consumers", None)
        init(self, "_position", None)

    def with_outputs(self, outputs: Sequence[Value]) -> Dag:
        """The program with the same arguments, name and attributes computing `outputs`
        instead: what a search makes of a candidate graph, so that the function's and
        the results' attributes survive it."""
        return Dag(
            self.args,
            outputs,
            self.name,
            attributes=self.attributes,
            result_attributes=self.result_attributes,
        )

    def scheduled(self, order: Iterable[Node]) -> Dag:
        """The same program with its ops in the order of `order`, which must list every
        op of the dag after its operands (nodes that are not ops of the dag, arguments
        among them, are skipped); ValueError otherwise.

        The depth-first order the dag picks is right for a search, which does not care,
        but not for a pass that decides the schedule: `autodiff` writes the backward
        layer by layer, as frameworks run it, so that a training step's live memory in
        program order is the figure a user expects. Equality ignores the order (it is a
        schedule, not a meaning), and `replace` goes back to the depth-first one.
        """
        ops = set(self.ops)
        placed: set[Node] = set()
        ordered = []
        for node in order:
            if node not in ops or node in placed:
                continue
            for value in node.inputs:
                if not value.node.is_arg and value.node not in placed:
                    raise ValueError(f"{node!r} comes before its operand {value.node!r}")
            placed.add(node)
            ordered.append(node)
        if len(ordered) != len(ops):
            raise ValueError(f"the order lists {len(ordered)} of the dag's {len(ops)} ops")
        dag = self.with_outputs(self.outputs)
        object.__setattr__(dag, "ops", tuple(ordered))
        return dag

    @property
    def num_ops(self) -> int:
        return len(self.ops)

    @property
    def output_sigs(self) -> tuple[TensorSig, ...]:
        return tuple(v.sig for v in self.outputs)

    def consumers(self) -> Mapping[Value, tuple[Use, ...]]:
        """Every value's uses by ops of this dag, in `ops` order (outputs are not uses).

        Computed on first call and kept: the dag is immutable.
        """
        if self._consumers is None:
            uses: dict[Value, list[Use]] = {}
            for node in self.ops:
                for position, value in enumerate(node.inputs):
                    uses.setdefault(value, []).append(Use(node, position))
            object.__setattr__(self, "_consumers", {v: tuple(u) for v, u in uses.items()})
        return self._consumers  # type: ignore[return-value]

    def position(self) -> Mapping[Node, int]:
        """Each op's index in `ops`, a topological order (arguments have none): a node
        can only depend on nodes of a lower index, which bounds walks that look for
        paths between ops. Computed on first call and kept: the dag is immutable."""
        if self._position is None:
            object.__setattr__(self, "_position", {n: i for i, n in enumerate(self.ops)})
        return self._position  # type: ignore[return-value]

    @_collector_paused()
    def replace(self, mapping: Mapping[Value, Value]) -> Dag:
        """The dag in which every use of each key (and each output that is a key) reads
        its mapped value instead.

        Replacement values are taken as they are (they may be built on the old ones);
        every op downstream of a replaced value is rebuilt, so its type is inferred
        again and an ill-typed substitution raises ShapeError. The program's result
        types must not change (ShapeError); values the graph does not contain raise
        KeyError.
        """
        live = {*self.ops, *self.args}
        for old in mapping:
            if old.node not in live or not 0 <= old.index < len(old.node.sigs):
                raise KeyError(f"{old!r} is not a value of this dag")
        rebuilt: dict[Node, Node] = {}

        def updated(value: Value) -> Value:
            if value in mapping:
                return mapping[value]
            node = rebuilt.get(value.node)
            return value if node is None else Value(node, value.index)

        for node in self.ops:
            inputs = tuple(updated(v) for v in node.inputs)
            if inputs != node.inputs:
                rebuilt[node] = _intern(node.op, node.attrs, inputs, None)
        outputs = tuple(updated(v) for v in self.outputs)
        for old, new in zip(self.outputs, outputs, strict=True):
            if old.sig != new.sig:
                raise ShapeError(
                    f"replace changes a result of @{self.name} from {old.sig} to {new.sig}"
                )
        return self.with_outputs(outputs)

    # ------------------------------------------------------------ identity
    def __eq__(self, other: object) -> bool:
        return (
            isinstance(other, Dag)
            and self._hash == other._hash
            and self.name == other.name
            and self.args == other.args
            and self.outputs == other.outputs
            and self.attributes == other.attributes
            and self.result_attributes == other.result_attributes
        )

    def __hash__(self) -> int:
        return self._hash

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"Dag is immutable (cannot set '{name}')")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"Dag is immutable (cannot delete '{name}')")

    def __copy__(self) -> Dag:
        return self

    def __deepcopy__(self, memo: dict[int, Any]) -> Dag:
        return self

    def __reduce__(self) -> tuple[Any, ...]:
        order = [*self.args, *self.ops]
        index = {node: i for i, node in enumerate(order)}
        outputs = tuple((index[v.node], v.index) for v in self.outputs)
        interface = (self.name, self.attributes, self.result_attributes)
        return (_unpickle_dag, (interface, len(self.args), _flatten(order), outputs))

    def __repr__(self) -> str:
        return (
            f"Dag(@{self.name}: {len(self.args)} args, {len(self.ops)} ops, "
            f"{len(self.outputs)} outputs)"
        )


# ----------------------------------------------------------------- interning

_NODES: weakref.WeakValueDictionary[tuple[Any, ...], Node] = weakref.WeakValueDictionary()
_NODES_LOCK = threading.Lock()


def _exact(value: Any) -> Any:
    """An interning key for an attribute value that is equal only for values that
    print as the same IR (Python's `==` equates 0.0 with -0.0, 1 with True and 1.0,
    and the StrEnum DType.F32 with the string "f32")."""
    kind = type(value)
    if kind is str or kind is int or kind is tuple:
        return value
    if kind is float:
        return (float, value.hex())
    if kind is ConstData:
        return (ConstData, value.shape, value.dtype, tuple(_exact(v) for v in value.values))
    return (kind, value)


def _intern(
    op: str, attrs: Attrs, inputs: tuple[Value, ...], arg_sigs: tuple[TensorSig, ...] | None
) -> Node:
    """The unique node for this structure; result types are inferred for `graph` ops
    and given (`arg_sigs`) for arguments and `Node.given` nodes. `attrs` must already
    be in canonical order."""
    key = (op, tuple((name, _exact(value)) for name, value in attrs), inputs, arg_sigs)
    node = _NODES.get(key)
    if node is not None:
        return node
    if arg_sigs is None:
        sigs = _infer(op, attrs, key[1], inputs)
    elif op == ARG and (len(arg_sigs) != 1 or not isinstance(arg_sigs[0], TensorSig)):
        raise TypeError(f"an argument has one TensorSig, got {arg_sigs!r}")
    elif not all(isinstance(sig, TensorSig) for sig in arg_sigs):
        raise TypeError(f"{op}: given result types must be TensorSigs, got {arg_sigs!r}")
    else:
        sigs = arg_sigs
    node = object.__new__(Node)
    init = object.__setattr__
    init(node, "op", op)
    init(node, "attrs", attrs)
    init(node, "inputs", inputs)
    init(node, "sigs", sigs)
    init(node, "_results", tuple(Value(node, i) for i in range(len(sigs))))
    with _NODES_LOCK:
        return _NODES.setdefault(key, node)


_INFERRED: dict[tuple[Any, ...], tuple[TensorSig, ...]] = {}
"""Result types by (op, exact attributes, operand types). A search's candidates rebuild
every op downstream of a rewrite (a node's identity is its operands'), but most of those
ops read the same types as before: inferring them again was a fifth of a backtracking
search's time on a deep CNN."""
_INFERRED_LIMIT = 1 << 16


def _infer(
    op: str, attrs: Attrs, exact_attrs: tuple[Any, ...], inputs: tuple[Value, ...]
) -> tuple[TensorSig, ...]:
    input_sigs = []
    for position, value in enumerate(inputs):
        if not isinstance(value, Value) or not isinstance(value.node, Node):
            raise TypeError(f"{op}: operand #{position} must be a Value, got {value!r}")
        if not 0 <= value.index < len(value.node.sigs):
            raise ShapeError(
                f"graph.{op}: operand #{position} names result {value.index} of {value.node!r}"
            )
        input_sigs.append(value.node.sigs[value.index])
    key = (op, exact_attrs, tuple(input_sigs))
    sigs = _INFERRED.get(key)
    if sigs is not None:
        return sigs
    try:
        sigs = tuple(infer(op, input_sigs, dict(attrs)))
    except ShapeError as err:
        raise ShapeError(f"graph.{op}: {err}") from None
    if len(_INFERRED) >= _INFERRED_LIMIT:
        _INFERRED.clear()
    _INFERRED[key] = sigs
    return sigs


def _make(op: str, inputs: tuple[Value, ...], attrs: Mapping[str, Any]) -> Node:
    """Check the attribute names of a `graph` op, put them in canonical order and intern."""
    names = ATTR_NAMES.get(op)
    if names is None:
        raise ShapeError(f"unknown op 'graph.{op}'")
    if len(attrs) != len(names) or not all(n in attrs for n in names):
        raise ShapeError(
            f"graph.{op}: attributes {sorted(attrs)} differ from the expected {sorted(names)}"
        )
    canonical = tuple((n, _freeze(attrs[n])) for n in names)
    return _intern(op, canonical, inputs, None)


def _freeze(value: Any) -> Any:
    """Lists become tuples, so `strides=[1, 1]` means the same as `(1, 1)`."""
    return tuple(value) if isinstance(value, list) else value


def _topological(roots: Iterable[Node]) -> list[Node]:
    """Nodes reachable from `roots` (arguments included), operands before users:
    an iterative depth-first post-order, operands left to right, roots in order."""
    order: list[Node] = []
    seen: set[Node] = set()
    for root in roots:
        if root in seen:
            continue
        seen.add(root)
        stack = [(root, 0)]
        while stack:
            node, next_input = stack[-1]
            inputs = node.inputs
            while next_input < len(inputs) and inputs[next_input].node in seen:
                next_input += 1
            if next_input == len(inputs):
                stack.pop()
                order.append(node)
            else:
                child = inputs[next_input].node
                seen.add(child)
                stack[-1] = (node, next_input + 1)
                stack.append((child, 0))
    return order


# ------------------------------------------------------------------ pickling

_Entry = tuple[str, Attrs, tuple[tuple[int, int], ...], tuple[TensorSig, ...] | None]


def _flatten(order: Sequence[Node]) -> list[_Entry]:
    """Nodes in topological order as a flat table whose operands are row numbers."""
    index: dict[Node, int] = {}
    table: list[_Entry] = []
    for row, node in enumerate(order):
        index[node] = row
        refs = tuple((index[v.node], v.index) for v in node.inputs)
        given = node.is_arg or node.is_given
        table.append((node.op, node.attrs, refs, node.sigs if given else None))
    return table


def _unflatten(table: Sequence[_Entry]) -> list[Node]:
    nodes: list[Node] = []
    for op, attrs, refs, arg_sigs in table:
        inputs = tuple(Value(nodes[row], index) for row, index in refs)
        nodes.append(_intern(op, attrs, inputs, arg_sigs))
    return nodes


def _unpickle_node(table: Sequence[_Entry]) -> Node:
    return _unflatten(table)[-1]


def _unpickle_dag(
    interface: tuple[str, NamedAttrs, tuple[NamedAttrs, ...]],
    num_args: int,
    table: Sequence[_Entry],
    outputs: Sequence[tuple[int, int]],
) -> Dag:
    name, attributes, result_attributes = interface
    nodes = _unflatten(table)
    return Dag(
        nodes[:num_args],
        [Value(nodes[row], index) for row, index in outputs],
        name,
        attributes=attributes,
        result_attributes=result_attributes,
    )


# ---------------------------------------------------------------- conversion


@_collector_paused()
def from_module(module: ModuleOp, *, keep_order: bool = False) -> Dag:
    """The dag of a program's entry function (see the module docstring for the CSE
    effect), with its argument, result and function attributes and every tensor's
    encoding; with `keep_order`, its ops in the block's order (`Dag.scheduled`), for a
    pass to which the order is a schedule (placement). Raises ProgramError, naming the
    op, for what a dag cannot hold exactly (`representable`), and ShapeError when an
    op's result types disagree with inference (an unverified module)."""
    function = entry_function(module)
    block = entry_block(function)
    args = tuple(
        Node.arg(i, info.name, info.sig, info.is_param, info.attributes)
        for i, info in enumerate(arg_infos(function))
    )
    values: dict[SSAValue, Value] = {
        block_arg: Value(node, 0) for block_arg, node in zip(block.args, args, strict=True)
    }
    sigs_of_types: dict[Attribute, TensorSig] = {}
    order: list[Node] = []
    for op in block.ops:
        if isinstance(op, func.ReturnOp):
            continue
        graph_op = representable(op)
        operands = []
        for operand in op.operands:
            if operand not in values:
                raise ProgramError(f"'{op.name}' reads a value defined outside @main's block")
            operands.append(values[operand])
        node = _make(graph_op.op_name(), tuple(operands), graph_op.py_attrs())
        order.append(node)
        for i, result in enumerate(op.results):
            sig = sigs_of_types.get(result.type)
            if sig is None:
                sig = sigs_of_types[result.type] = sig_of(result.type)
            if sig != node.sigs[i]:
                raise ShapeError(
                    f"'{op.name}': result #{i} has type {sig}, inference says {node.sigs[i]}"
                )
            values[result] = Value(node, i)
    outputs = tuple(values[v] for v in return_values(function))
    dag = Dag(
        args,
        outputs,
        function.sym_name.data,
        attributes=function_attributes(function),
        result_attributes=result_attributes(function),
    )
    return dag.scheduled(order) if keep_order else dag


def representable(op: Operation) -> GraphOp:
    """`op` as a `graph` op a node holds exactly; ProgramError naming it otherwise.

    A node is keyed by a `graph` op's short name, attributes and operands, so an op of
    another dialect (which might share a short name: `parallel.reduce`) or anything a
    node has no place for (regions, successors, discardable attributes beside the
    op's own) would be dropped or confused on the way back; refusing is the only
    exact answer.
    """
    if not isinstance(op, GraphOp):
        name = op.op_name.data if isinstance(op, UnregisteredOp) else op.name
        raise ProgramError(f"'{name}' cannot be represented in a dag (graph ops only)")
    if op.regions or op.successors:
        raise ProgramError(f"'{op.name}' has regions or successors, which a dag cannot hold")
    if op.attributes:
        names = ", ".join(sorted(op.attributes))
        raise ProgramError(f"'{op.name}' has attributes a dag cannot hold: {names}")
    return op


@_collector_paused()
def to_function(dag: Dag) -> func.FuncOp:
    """The `func.func` of `dag`: ops in `dag.ops` order, arguments named, marked and
    attributed as in the dag, results and the function attributed as in the dag.
    Types and attributes are already known, so ops are built with `GraphOp.create`
    (no per-op inference or verification) and equal types and attributes are shared
    xDSL objects."""
    types: dict[TensorSig, Attribute] = {}
    attributes: dict[Any, Attribute] = {}

    def type_of(sig: TensorSig) -> Attribute:
        found = types.get(sig)
        if found is None:
            found = types[sig] = tensor_type(sig)
        return found

    def attribute_of(value: Any) -> Attribute:
        key = _exact(value)
        found = attributes.get(key)
        if found is None:
            found = attributes[key] = to_attr(value)
        return found

    block = Block(arg_types=[type_of(node.sigs[0]) for node in dag.args])
    results: dict[Node, Sequence[SSAValue]] = {}
    for block_arg, node in zip(block.args, dag.args, strict=True):
        block_arg.name_hint = node.attr("name")
        results[node] = (block_arg,)
    ops = []
    for node in dag.ops:
        op = OPS_BY_NAME[node.op].create(
            operands=[results[v.node][v.index] for v in node.inputs],
            result_types=[type_of(sig) for sig in node.sigs],
            properties={name: attribute_of(value) for name, value in node.attrs},
        )
        results[node] = op.results
        ops.append(op)
    block.add_ops(ops)
    return function_of(dag, block, [results[v.node][v.index] for v in dag.outputs])


def function_of(dag: Dag, block: Block, outputs: Sequence[SSAValue]) -> func.FuncOp:
    """`@main` of `dag` around `block` (its ops, not yet a return) returning `outputs`:
    the dag's name, arguments' marks and attributes, result and function attributes.
    What every writer of a light graph (plain, sharded, placed) wraps its block in."""
    return make_function(
        dag.name,
        block,
        [node.attr("is_param") for node in dag.args],
        outputs,
        arg_attrs=[node.attr("attributes") for node in dag.args],
        res_attrs=dag.result_attributes,
        func_attrs=dag.attributes,
    )


def to_module(dag: Dag) -> ModuleOp:
    """A module holding only `to_function(dag)` (a new program; to put a search's
    result into an existing module, which may hold more, use `write_back`)."""
    return ModuleOp([to_function(dag)])


def write_back(module: ModuleOp, dag: Dag) -> None:
    """Put `dag` in place of `module`'s entry function, the one `from_module` read.

    Only that function is replaced, where it stood: every other op of the module
    (helper functions, `parallel.mesh` declarations, ...) and the module's own
    attributes stay as they are. The new function's body, type, argument, result and
    function attributes are the dag's, which `from_module` read from the old one, so
    what a search did not change comes back unchanged.
    """
    Rewriter.replace_op(entry_function(module), to_function(dag))
