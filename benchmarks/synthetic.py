"""Large random-but-realistic `graph` programs for measuring the IR itself.

`synthetic_graph(num_ops, seed)` strings together the building blocks real models
are made of — conv/batchnorm/relu stems, ResNet residual blocks, Inception-style
split/convolve/concat cells, squeeze-and-excitation gates, attention and MLP blocks
with reshapes and matmuls — into one deep chain with skip connections reaching back
up to `_SKIP_WINDOW` blocks, so the DAG is deep *and* wide the way real models are.

Every activation has the same small shape, so any block can follow any other and
any earlier activation can be a residual; the benchmark measures IR speed, not
arithmetic. Every op feeds the single output (no dead code) and every weight is its
own `{graph.param}` argument, so no two ops are structurally identical and the
light `dag` keeps exactly `num_ops` nodes. The op count is exact: the last few ops
are single unary ops chosen to fill the remainder.
"""

from __future__ import annotations

import random
from collections.abc import Callable

from xdsl.dialects.builtin import ModuleOp
from xdsl.ir import SSAValue

from tasoc.ir.builder import GraphBuilder

_CHANNELS = 8
_SIDE = 4
_ACTIVATION = (1, _CHANNELS, _SIDE, _SIDE)
_ROWS, _COLS = _CHANNELS, _SIDE * _SIDE
"""The activation viewed as a matrix by the attention and MLP blocks."""
_SKIP_WINDOW = 16


class _Stream:
    """The state of the chain under construction: builder, RNG and recent activations."""

    def __init__(self, seed: int) -> None:
        self.g = GraphBuilder()
        self.rng = random.Random(seed)
        self.recent: list[SSAValue] = []
        self._params = 0

    def param(self, shape: tuple[int, ...]) -> SSAValue:
        self._params += 1
        return self.g.param(f"w{self._params}", shape)

    def skip(self) -> SSAValue:
        """An earlier activation for a residual or gating connection."""
        return self.rng.choice(self.recent[-_SKIP_WINDOW:])

    def conv(
        self, x: SSAValue, channels_in: int, channels_out: int, activation: str = "none"
    ) -> SSAValue:
        kernel = self.rng.choice((1, 3))
        weight = self.param((channels_out, channels_in, kernel, kernel))
        return self.g.conv2d(x, weight, padding="same", activation=activation)


Block = Callable[[_Stream, SSAValue], SSAValue]


def _conv_bn_relu(s: _Stream, x: SSAValue) -> SSAValue:
    y = s.conv(x, _CHANNELS, _CHANNELS)
    stats = [s.param((_CHANNELS,)) for _ in range(4)]
    return s.g.relu(s.g.batchnorm(y, *stats))


def _residual(s: _Stream, x: SSAValue) -> SSAValue:
    y = s.conv(x, _CHANNELS, _CHANNELS, activation="relu")
    return s.g.add(s.conv(y, _CHANNELS, _CHANNELS), s.skip())


def _inception(s: _Stream, x: SSAValue) -> SSAValue:
    sizes = s.rng.choice(((4, 4), (2, 2, 4), (2, 2, 2, 2)))
    branches = s.g.split(x, 1, sizes)
    return s.g.concat([s.conv(b, c, c) for b, c in zip(branches, sizes, strict=True)], axis=1)


def _squeeze_excite(s: _Stream, x: SSAValue) -> SSAValue:
    gate = s.g.sigmoid(s.g.reduce(x, "mean", (2, 3), keepdims=True))
    return s.g.mul(x, gate)


def _gated(s: _Stream, x: SSAValue) -> SSAValue:
    gate = s.g.sigmoid(x)
    return s.g.mul(gate, s.g.tanh(s.g.add(x, s.skip())))


def _attention(s: _Stream, x: SSAValue) -> SSAValue:
    q = s.g.reshape(x, (_ROWS, _COLS))
    scores = s.g.softmax(s.g.matmul(q, s.g.transpose(q, (1, 0))), axis=-1)
    return s.g.add(s.g.reshape(s.g.matmul(scores, q), _ACTIVATION), s.skip())


def _mlp(s: _Stream, x: SSAValue) -> SSAValue:
    h = s.g.gelu(s.g.matmul(s.g.reshape(x, (_ROWS, _COLS)), s.param((_COLS, 2 * _COLS))))
    out = s.g.matmul(h, s.param((2 * _COLS, _COLS)))
    return s.g.add(s.g.reshape(out, _ACTIVATION), s.skip())


def _layernorm(s: _Stream, x: SSAValue) -> SSAValue:
    return s.g.layernorm(x, s.param((_SIDE,)), s.param((_SIDE,)), axis=-1)


def _pool(s: _Stream, x: SSAValue) -> SSAValue:
    return s.g.pool2d(x, s.rng.choice(("avg", "max")), (3, 3), (1, 1), padding="same")


def _scale(s: _Stream, x: SSAValue) -> SSAValue:
    return s.g.scale(x, round(s.rng.uniform(0.5, 2.0), 6))


def _unary(s: _Stream, x: SSAValue) -> SSAValue:
    return s.rng.choice((s.g.relu, s.g.gelu, s.g.tanh, s.g.sigmoid))(x)


_BLOCKS: tuple[tuple[Block, int, int], ...] = (
    # (block, number of ops it emits (max), relative frequency)
    (_conv_bn_relu, 3, 6),
    (_residual, 3, 6),
    (_inception, 6, 3),
    (_squeeze_excite, 3, 2),
    (_gated, 4, 2),
    (_attention, 7, 2),
    (_mlp, 6, 2),
    (_layernorm, 1, 2),
    (_pool, 1, 2),
    (_scale, 2, 1),
    (_unary, 1, 2),
)


def synthetic_graph(num_ops: int, seed: int = 0) -> ModuleOp:
    """A program of exactly `num_ops` `graph` ops (plus `func.return`), same for a seed."""
    if num_ops < 1:
        raise ValueError("num_ops must be positive")
    s = _Stream(seed)
    x = s.g.input("x", _ACTIVATION)
    s.recent.append(x)
    emitted = 0
    while (remaining := num_ops - emitted) > 0:
        fitting = [(block, weight) for block, size, weight in _BLOCKS if size <= remaining]
        blocks, weights = zip(*fitting, strict=True)
        last = s.g.block.last_op
        x = s.rng.choices(blocks, weights)[0](s, x)
        s.recent.append(x)
        # Count only the new ops: len(block.ops) walks the whole linked list.
        op = last.next_op if last is not None else s.g.block.first_op
        while op is not None:
            emitted += 1
            op = op.next_op
    return s.g.build(x)
