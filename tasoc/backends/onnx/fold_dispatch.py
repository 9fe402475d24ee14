"""When the importer folds a node, and where a value it cannot know comes from.

Every node whose inputs are all known is tried by folding first (`Folding.import_node`,
before its handler): an op with a folder (`folding.FOLDERS`) is computed, and an op
whose handler folds a known input itself (`FOLDED_BY_HANDLERS`: Identity, Reshape,
Squeeze, Unsqueeze, Flatten) goes to its handler, which does. A node with an input
known only at run time goes to its handler.

One exception keeps programs as they were: float data the program holds, a weight
or a float literal (`known_values.is_program_data`), is computed on by ops, not
folded away. A node reading such data is imported by its handler, as ops where the
node stands, and its result is folded too, but only when a reader needs it known (a
Resize's scales from `Concat(Constant([1., 1.]), ...)`, a Pad's fill value): its
recipe is kept, and `late_value` evaluates it on demand. Where nothing reads those
ops as data they are dropped at the end (`drop_unused`). So weights stay parameters
(`Transpose(W)` stays a transpose of the weight `W`), and a program tasoc exported,
whose constant ops are Constant nodes, comes back op for op.

A configuring input (a shape, axes, pads, sizes, scales) that is not known is the
reading node's error line, which says where its value comes from at run time
(`runtime_origin`): the graph input whose values it depends on, or the node that
computes it from known inputs without folding it.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import Operation, SSAValue

from tasoc.backends import numpy_dtype
from tasoc.backends.onnx.errors import OnnxImportError, shown
from tasoc.backends.onnx.folding import FOLDERS, SHAPE_FOLDERS, check_input_types
from tasoc.backends.onnx.known_values import Known, Origin, Value, is_program_data
from tasoc.backends.onnx.registry import Handler
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

FOLDED_BY_HANDLERS = frozenset({"Identity", "Reshape", "Squeeze", "Unsqueeze", "Flatten"})
"""Ops whose handlers fold a known input themselves (`Importer.reshaped`, or by passing
it on): they have no folder, and their handlers are called for known inputs too."""

_SHOWN_STEPS = 3
"""Nodes of a run-time value's path a message names before it says `...`."""


def node_label(node: onnx.NodeProto, index: int) -> str:
    """How messages name a node: its op type and its name, or `#index` without one."""
    label = shown(node.name) if node.name else f"'#{index}'"
    return f"{shown(node.op_type, quote=False)} node {label}"


@dataclass(frozen=True)
class _Recipe:
    """How to fold an output that ops on program data compute at run time."""

    node: onnx.NodeProto
    attrs: dict[str, Any]
    handler: Handler
    where: str
    """The importer's label of the node, for the errors of folding it later."""


class Folding:
    """The importer's constant folding: which values are known, the nodes it folds,
    the recipes of values ops on program data compute, and the ops made only in case
    something reads them as data."""

    def __init__(self, imp: Importer) -> None:
        self.imp = imp
        self.recipes: dict[str, _Recipe] = {}
        """Outputs computed at run time from program data, foldable on demand."""
        self.late: dict[str, np.ndarray] = {}
        """The recipes' values folded so far."""
        self.droppable: list[Operation] = []
        """Ops made for nodes on program data, dropped at the end if nothing reads them."""

    # ------------------------------------------------------------------- values
    def is_known(self, name: str) -> bool:
        """Whether input `name` has a value at import time (now, or by its recipe)."""
        return isinstance(self.imp.env.get(name), Known) or name in self.recipes

    def _is_program_data(self, name: str) -> bool:
        value = self.imp.env.get(name)
        return name in self.recipes or (isinstance(value, Known) and is_program_data(value))

    def array(self, name: str) -> np.ndarray:
        """The import-time value of known input `name`."""
        value = self.imp.value(name)
        if isinstance(value, Known):
            return value.array
        late = self.late_value(name)
        assert late is not None, name
        return late

    def _stand_in(self, name: str) -> np.ndarray:
        """Input `name`'s value, or for a run-time value a zero-cost view of its shape
        and type (all a shape folder reads)."""
        value = self.imp.value(name)
        if isinstance(value, Known):
            return value.array
        sig = G.sig_of(value.type)
        return np.broadcast_to(np.zeros((), numpy_dtype(sig.dtype)), sig.shape)

    # -------------------------------------------------------------- dispatching
    def import_node(
        self, node: onnx.NodeProto, attrs: dict[str, Any], handler: Handler | None
    ) -> list[Value | None] | None:
        """`node`'s outputs when folding imports it, or None to leave it to its handler."""
        op_type = node.op_type
        if op_type in SHAPE_FOLDERS:
            return [self._folded(node, attrs, self._stand_in)]
        if op_type not in FOLDERS and op_type not in FOLDED_BY_HANDLERS:
            return None
        names = [name for name in node.input if name]
        if not names or not all(self.is_known(name) for name in names):
            return None
        if handler is not None and any(self._is_program_data(name) for name in names):
            results = self._import_as_ops(node, attrs, handler)
            if results is not None or op_type not in FOLDERS:
                return results
        if op_type not in FOLDERS:
            return None  # its handler folds
        return [self._folded(node, attrs, self.array)]

    def _folded(
        self, node: onnx.NodeProto, attrs: dict[str, Any], value: Callable[[str], np.ndarray]
    ) -> Known:
        """`node` computed by its folder on its inputs' values (`value` of each name)."""
        arrays = [value(name) if name else None for name in node.input]
        check_input_types(self.imp, node, arrays)
        given = [array for array in arrays if array is not None]
        folded = FOLDERS[node.op_type](self.imp, node, attrs, given)
        return Known(node.output[0], np.asarray(folded), Origin.DERIVED)

    def _import_as_ops(
        self, node: onnx.NodeProto, attrs: dict[str, Any], handler: Handler
    ) -> list[Value | None] | None:
        """`node` on program data, imported by its handler where it stands, its ops
        droppable and its first output's recipe kept; None when the handler cannot
        express it (a folder then computes it)."""
        imp = self.imp
        last = imp.block.last_op
        try:
            results = handler(imp, node, attrs)
        except OnnxImportError:
            if node.op_type not in FOLDERS:
                raise
            return None
        finally:
            op = imp.block.first_op if last is None else last.next_op
            while op is not None:
                self.droppable.append(op)
                op = op.next_op
        if results and isinstance(results[0], SSAValue):
            self.recipes[node.output[0]] = _Recipe(node, attrs, handler, imp.where)
        return results

    # -------------------------------------------------------------- late folding
    def late_value(self, name: str) -> np.ndarray | None:
        """The value of `name` folded from its recipe (and those it reads, inputs first,
        without recursion: a chain may be long), or None when it has none."""
        if name not in self.recipes:
            return None
        pending = [(name, False)]
        while pending:
            current, ready = pending.pop()
            if current in self.late:
                continue
            recipe = self.recipes[current]
            if ready:
                self.late[current] = self._evaluate(recipe)
                continue
            pending.append((current, True))
            pending += [(i, False) for i in recipe.node.input if i in self.recipes]
        return self.late[name]

    def _evaluate(self, recipe: _Recipe) -> np.ndarray:
        """A recipe's node folded now that its inputs are (their recipes evaluated)."""
        imp, node = self.imp, recipe.node
        saved = imp.where
        imp.where = recipe.where
        try:
            if node.op_type in FOLDERS:
                return self._folded(node, recipe.attrs, self.array).array
            # A handler that folds known inputs gets them as computed values.
            inputs = {name: imp.env[name] for name in node.input if name}
            imp.env.update({name: Known(name, self.array(name), Origin.DERIVED) for name in inputs})
            try:
                result = recipe.handler(imp, node, recipe.attrs)[0]
            finally:
                imp.env.update(inputs)
            if not isinstance(result, Known):
                imp.fail(f"output {shown(node.output[0])} cannot be computed at import time")
            return result.array
        finally:
            imp.where = saved

    # -------------------------------------------------------------------- errors
    def runtime_origin(self, name: str) -> str:
        """Where run-time value `name` comes from, for the message of a configuring input
        that must be known: the graph input whose values it is computed from, or the
        node that computes it at run time from known inputs, and the nodes between."""
        producers = {
            output: (index, node)
            for index, node in enumerate(self.imp.graph.node)
            for output in node.output
        }
        path: list[str] = []
        seen = {name}
        while name in producers:
            index, node = producers[name]
            label = node_label(node, index)
            later = [i for i in node.input if i and not self.is_known(i) and i not in seen]
            if not later:
                op_type = shown(node.op_type, quote=False)
                source = f"{label}{_through(path)}, an op tasoc does not fold ({op_type})"
                return f"it is computed at run time by {source}"
            path.append(label)
            name = later[0]
            seen.add(name)
        source = f"the values of graph input {shown(name)}"
        return f"it is computed at run time from {source}{_through(path)}"

    # ------------------------------------------------------------------- cleanup
    def drop_unused(self, outputs: set[SSAValue]) -> None:
        """Remove the ops made for program data that nothing reads (latest first, so
        that a chain goes as a whole)."""
        for op in reversed(self.droppable):
            if not any(result.uses or result in outputs for result in op.results):
                self.imp.block.erase_op(op)


def _through(path: list[str]) -> str:
    """`(through A, B, C, ...)`: the nodes between a configuring input and its origin."""
    if not path:
        return ""
    shown_steps = ", ".join(path[:_SHOWN_STEPS]) + (", ..." if len(path) > _SHOWN_STEPS else "")
    return f" (through {shown_steps})"
