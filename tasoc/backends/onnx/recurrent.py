"""ONNX's recurrent layers (RNN, GRU, LSTM) unrolled over their static sequence length.

The dialect has no loop, and needs none: an exported recurrent layer has a static
sequence length, so each time step becomes its own `matmul`/`add`/activation/`mul`
ops. The input projection of all steps is one `matmul` (`X W^T` over `[seq * batch,
input]`), split into steps; the recurrent projection (`H R^T`) is one `matmul` a step.
The equations are the ONNX spec's, with its gate orders (LSTM `iofc`, GRU `zrh`) and
its defaults (zero initial states, no bias, no peepholes); the sums are the spec's
terms added in another order, so results differ from onnxruntime's by rounding only.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np
import onnx
from xdsl.ir import SSAValue

from tasoc.backends.onnx.elementwise import dtype_of
from tasoc.backends.onnx.errors import format_dims
from tasoc.backends.onnx.known_values import Value
from tasoc.backends.onnx.operands import optional_input, used_output
from tasoc.backends.onnx.registry import Handler, registrar
from tasoc.ir import graph as G

if TYPE_CHECKING:
    from tasoc.backends.onnx.importer import Importer

HANDLERS: dict[str, Handler] = {}
_handles = registrar(HANDLERS)

_ACTIVATIONS: dict[str, type[G.GraphOp]] = {
    "Sigmoid": G.SigmoidOp,
    "Tanh": G.TanhOp,
    "Relu": G.ReluOp,
}
"""The activation functions (ONNX's names) a layer may be given; none of them takes
the `activation_alpha`/`activation_beta` parameters, so those have nothing to set."""

_GATES = {"RNN": 1, "GRU": 3, "LSTM": 4}
_DEFAULT_ACTIVATIONS = {
    "RNN": ("Tanh",),
    "GRU": ("Sigmoid", "Tanh"),
    "LSTM": ("Sigmoid", "Tanh", "Tanh"),
}
"""The spec's activations f (and g, h) of one direction, when the node names none."""

_INPUTS = ("X", "W", "R", "B", "sequence_lens", "initial_h", "initial_c", "P")
"""The inputs by position (GRU and RNN stop at initial_h)."""

_DIRECTIONS = {"forward": (False,), "reverse": (True,), "bidirectional": (False, True)}
"""Each direction attribute's passes over the sequence: reversed or not."""


@_handles("RNN", "GRU", "LSTM")
def _recurrent(imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> list[Value | None]:
    layer = _Layer.read(imp, node, attrs)
    passes = [layer.direction(d, reverse) for d, reverse in enumerate(layer.reversed)]
    steps, batch, hidden = layer.steps, layer.batch, layer.hidden
    results: list[Value | None] = [None] * (3 if node.op_type == "LSTM" else 2)
    if used_output(imp, node, 0):
        ys = [imp.reshape(_concat(imp, hs, axis=0), (steps, 1, batch, hidden)) for hs, _ in passes]
        y = _concat(imp, ys, axis=1)
        results[0] = imp.op(G.TransposeOp, y, perm=(2, 0, 1, 3)) if layer.layout else y
    for index in range(1, len(results)):
        if used_output(imp, node, index):
            finals = [imp.reshape(last[index - 1], (1, batch, hidden)) for _, last in passes]
            state = _concat(imp, finals, axis=0)
            results[index] = imp.op(G.TransposeOp, state, perm=(1, 0, 2)) if layer.layout else state
    return results


def _concat(imp: Importer, values: Sequence[SSAValue], axis: int) -> SSAValue:
    return values[0] if len(values) == 1 else imp.op(G.ConcatOp, *values, axis=axis)


@dataclass
class _Layer:
    """One recurrent node, read and checked: its sequence (in layout 0), sizes and
    options. `direction` unrolls one pass over the sequence."""

    imp: Importer
    node: onnx.NodeProto
    x: SSAValue
    """X as [seq, batch, input] (transposed from layout 1)."""
    layout: int
    reversed: tuple[bool, ...]
    hidden: int
    activations: list[str]
    clip: float | None
    input_forget: bool
    linear_before_reset: bool
    recurrent: dict[str, SSAValue] = field(default_factory=dict)
    """The current direction's R blocks, transposed for `H @ R^T`."""

    @property
    def steps(self) -> int:
        return self.imp.shape(self.x)[0]

    @property
    def batch(self) -> int:
        return self.imp.shape(self.x)[1]

    @property
    def gates(self) -> int:
        return _GATES[self.node.op_type]

    @classmethod
    def read(cls, imp: Importer, node: onnx.NodeProto, attrs: dict[str, Any]) -> _Layer:
        op_type = node.op_type
        reversed_ = _DIRECTIONS.get(attrs.get("direction", "forward"))
        if reversed_ is None:
            imp.fail(f"direction {attrs['direction']!r} is not forward, reverse or bidirectional")
        layout = int(attrs.get("layout", 0))
        if layout not in (0, 1):
            imp.fail(f"layout {layout} is not 0 or 1")
        x = imp.data(node.input[0])
        if len(imp.shape(x)) != 3:
            imp.fail(f"X must be 3-D, got shape {format_dims(imp.shape(x))}")
        if layout:
            x = imp.op(G.TransposeOp, x, perm=(1, 0, 2))
        steps, batch, size = imp.shape(x)
        if steps == 0:
            imp.fail("X holds an empty sequence")
        count, gates = len(reversed_), _GATES[op_type]
        w_shape = imp.shape(node.input[1])
        if len(w_shape) != 3 or w_shape[0] != count or w_shape[1] % gates or not w_shape[1]:
            imp.fail(
                f"W must have shape [{count}, {gates} * hidden_size, {size}] with hidden_size "
                f"> 0, got {format_dims(w_shape)}"
            )
        hidden = w_shape[1] // gates
        if int(attrs.get("hidden_size", hidden)) != hidden:
            imp.fail(f"hidden_size {attrs['hidden_size']} does not match W's {hidden}")
        state = (batch, count, hidden) if layout else (count, batch, hidden)
        shapes = {
            "W": (count, gates * hidden, size),
            "R": (count, gates * hidden, hidden),
            "B": (count, 2 * gates * hidden),
            "initial_h": state,
            "initial_c": state,
            "P": (count, 3 * hidden),
        }
        for index, what in enumerate(_INPUTS[: len(node.input)]):
            name = optional_input(node, index)
            if name is not None and what in shapes and imp.shape(name) != shapes[what]:
                imp.fail(
                    f"{what} must have shape {format_dims(shapes[what])}, got "
                    f"{format_dims(imp.shape(name))}"
                )
        _check_sequence_lengths(imp, node, steps, batch)
        clip = attrs.get("clip")
        if clip is not None and not clip > 0:
            imp.fail(f"clip {clip} must be positive")
        return cls(
            imp,
            node,
            x,
            layout,
            reversed_,
            hidden,
            _activations(imp, attrs, op_type, count),
            clip,
            bool(attrs.get("input_forget", 0)),
            bool(attrs.get("linear_before_reset", 0)),
        )

    # ------------------------------------------------------------------ one pass
    def direction(self, d: int, reverse: bool) -> tuple[list[SSAValue], list[SSAValue]]:
        """Pass `d` over the sequence: the hidden state of each step in time order, and
        the final states (H, and C for LSTM)."""
        imp, node, hidden, gates = self.imp, self.node, self.hidden, self.gates
        steps, batch, size = imp.shape(self.x)
        w = self._slice(1, d, (gates * hidden, size))
        r = self._slice(2, d, (gates * hidden, hidden))
        projected = imp.op(G.MatmulOp, imp.reshape(self.x, (steps * batch, size)), _t(imp, w))
        reset_bias = None
        if optional_input(node, 3) is not None:
            bias = self._slice(3, d, (2 * gates * hidden,))
            wb, rb = imp.ops(G.SplitOp, bias, axis=0, sizes=(gates * hidden,) * 2)
            if node.op_type == "GRU" and self.linear_before_reset:
                # Rbh is added inside r * (H Rh^T + Rbh), not to the input projection.
                reset_bias = imp.take(rb, 0, 2 * hidden, 3 * hidden)
                zeros = imp.op(G.ZerosOp, shape=(hidden,), dtype=dtype_of(rb))
                rb = imp.op(G.ConcatOp, imp.take(rb, 0, 0, 2 * hidden), zeros, axis=0)
            projected = imp.op(G.AddOp, projected, imp.op(G.AddOp, wb, rb))
        inputs = [projected]
        if steps > 1:
            inputs = imp.ops(G.SplitOp, projected, axis=0, sizes=(batch,) * steps)
        if node.op_type == "GRU":
            self.recurrent = {
                "zr": _t(imp, imp.take(r, 0, 0, 2 * hidden)),
                "h": _t(imp, imp.take(r, 0, 2 * hidden, 3 * hidden)),
            }
        else:
            self.recurrent = {"all": _t(imp, r)}
        functions = self.activations[d * len(_DEFAULT_ACTIVATIONS[node.op_type]) :]
        h = self._state(5, d)
        c = self._state(6, d) if node.op_type == "LSTM" else None
        peepholes = None
        if node.op_type == "LSTM" and optional_input(node, 7) is not None:
            p = self._slice(7, d, (3 * hidden,))
            peepholes = imp.ops(G.SplitOp, p, axis=0, sizes=(hidden,) * 3)
        hs: dict[int, SSAValue] = {}
        for t in range(steps - 1, -1, -1) if reverse else range(steps):
            if c is not None:
                h, c = self._lstm(functions, inputs[t], h, c, peepholes)
            elif node.op_type == "GRU":
                h = self._gru(functions, inputs[t], h, reset_bias)
            else:
                h = self._activate(functions[0], imp.op(G.AddOp, inputs[t], self._rh(h, "all")))
            hs[t] = h
        return [hs[t] for t in range(steps)], [h] if c is None else [h, c]

    def _gru(
        self, functions: Sequence[str], x: SSAValue, h: SSAValue, reset_bias: SSAValue | None
    ) -> SSAValue:
        imp = self.imp
        xz, xr, xh = self._gates(x, 3)
        hz, hr = self._gates(self._rh(h, "zr"), 2)
        z = self._activate(functions[0], imp.op(G.AddOp, xz, hz))
        r = self._activate(functions[0], imp.op(G.AddOp, xr, hr))
        if self.linear_before_reset:
            hh = self._rh(h, "h")
            if reset_bias is not None:
                hh = imp.op(G.AddOp, hh, reset_bias)
            candidate = imp.op(G.MulOp, r, hh)
        else:
            candidate = self._rh(imp.op(G.MulOp, r, h), "h")
        n = self._activate(functions[1], imp.op(G.AddOp, xh, candidate))
        return imp.op(G.AddOp, imp.op(G.MulOp, _one_minus(imp, z), n), imp.op(G.MulOp, z, h))

    def _lstm(
        self,
        functions: Sequence[str],
        x: SSAValue,
        h: SSAValue,
        c: SSAValue,
        peepholes: list[SSAValue] | None,
    ) -> tuple[SSAValue, SSAValue]:
        imp = self.imp
        xi, xo, xf, xc = self._gates(imp.op(G.AddOp, x, self._rh(h, "all")), 4)
        if peepholes is not None:
            xi = imp.op(G.AddOp, xi, imp.op(G.MulOp, peepholes[0], c))
            xf = imp.op(G.AddOp, xf, imp.op(G.MulOp, peepholes[2], c))
        i = self._activate(functions[0], xi)
        # input_forget couples the gates: the forget gate is 1 - i.
        f = _one_minus(imp, i) if self.input_forget else self._activate(functions[0], xf)
        cell_input = self._activate(functions[1], xc)
        cell = imp.op(G.AddOp, imp.op(G.MulOp, f, c), imp.op(G.MulOp, i, cell_input))
        if peepholes is not None:
            xo = imp.op(G.AddOp, xo, imp.op(G.MulOp, peepholes[1], cell))
        o = self._activate(functions[0], xo)
        # h(C) takes the cell state unclipped, as onnxruntime computes it.
        return imp.op(G.MulOp, o, self._activate(functions[2], cell, clip=False)), cell

    # ------------------------------------------------------------------ pieces
    def _activate(self, function: str, x: SSAValue, clip: bool = True) -> SSAValue:
        """An activation of a gate's input, after `clip` bounds it to [-clip, clip]."""
        imp = self.imp
        if clip and self.clip is not None:
            x = imp.op(G.MaxOp, x, imp.literal(-self.clip, x))
            x = imp.op(G.MinOp, x, imp.literal(self.clip, x))
        return imp.op(_ACTIVATIONS[function], x)

    def _gates(self, x: SSAValue, count: int) -> list[SSAValue]:
        """The `count` gate blocks of a [batch, count * hidden] tensor."""
        return self.imp.ops(G.SplitOp, x, axis=1, sizes=(self.hidden,) * count)

    def _rh(self, h: SSAValue, block: str) -> SSAValue:
        """`h @ R^T` for one block of R's gates."""
        return self.imp.op(G.MatmulOp, h, self.recurrent[block])

    def _slice(self, index: int, d: int, shape: tuple[int, ...]) -> SSAValue:
        """Direction `d`'s part of a per-direction input, without the direction axis."""
        imp = self.imp
        return imp.reshape(imp.take(imp.data(self.node.input[index]), 0, d, d + 1), shape)

    def _state(self, index: int, d: int) -> SSAValue:
        """Direction `d`'s initial state (initial_h or initial_c), zeros when absent."""
        imp, shape = self.imp, (self.batch, self.hidden)
        name = optional_input(self.node, index)
        if name is None:
            return imp.op(G.ZerosOp, shape=shape, dtype=dtype_of(self.x))
        state = imp.data(name)
        if self.layout:
            state = imp.op(G.TransposeOp, state, perm=(1, 0, 2))
        return imp.reshape(imp.take(state, 0, d, d + 1), shape)


def _t(imp: Importer, matrix: SSAValue) -> SSAValue:
    return imp.op(G.TransposeOp, matrix, perm=(1, 0))


def _one_minus(imp: Importer, x: SSAValue) -> SSAValue:
    """1 - x, as 1 + (-x): negation is exact, so this rounds as the difference does."""
    return imp.op(G.AddOp, imp.literal(1.0, x), imp.op(G.ScaleOp, x, imp.literal(-1.0, x)))


def _check_sequence_lengths(imp: Importer, node: onnx.NodeProto, steps: int, batch: int) -> None:
    """sequence_lens must be absent or give every batch entry the whole sequence: the
    unrolled layer has no per-entry lengths."""
    name = optional_input(node, 4)
    if name is None:
        return
    lengths = imp.known_ints(name, "sequence_lens").reshape(-1)
    if lengths.shape != (batch,) or not np.all(lengths == steps):
        imp.fail(
            f"sequence_lens {lengths.tolist()} must give all {batch} sequences the full "
            f"length {steps} (shorter sequences are not supported)"
        )


def _activations(imp: Importer, attrs: dict[str, Any], op_type: str, count: int) -> list[str]:
    """The activation names, per direction in order (the spec's defaults when absent)."""
    defaults = _DEFAULT_ACTIVATIONS[op_type]
    given = attrs.get("activations", defaults * count)
    names = [n.decode("utf-8", "backslashreplace") if isinstance(n, bytes) else n for n in given]
    if len(names) != len(defaults) * count:
        imp.fail(
            f"activations {names} must name {len(defaults)} functions for each of {count} "
            "directions"
        )
    unknown = sorted(set(names) - _ACTIVATIONS.keys())
    if unknown:
        imp.fail(f"activations {unknown} are not supported (only {', '.join(_ACTIVATIONS)})")
    return names
