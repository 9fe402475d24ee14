"""Traits of `graph` ops: facts about an op that the passes, cost models and verifiers
read, declared once on the op class (`traits = traits_def(...)` in `ir/graph.py`).

Like xDSL's own `Pure`, `Commutative` and `ConstantLike`, these traits only mark an op;
its typing stays in `shapes.infer`, which every verifier already asks. Code that works
on the light graph (`dag`) asks `op_sets.ops_with(Trait)` for the op names that carry
one, so no module keeps its own list of op names that could drift from the dialect.
"""

from __future__ import annotations

from xdsl.traits import OpTrait


class Elementwise(OpTrait):
    """Result element i depends only on the operands' elements at i (after any
    broadcast): `add`, `mul`, `scale`, and the unary activations."""


class Broadcasting(OpTrait):
    """Operands of different shapes broadcast against each other NumPy-style (for
    `matmul`, its batch dims), so the result has the widest operand's rank. Rules treat
    the ops that are both `Broadcasting` and `Elementwise` as taking operands of one
    shape (`rules.SAME_SHAPE_OPERANDS`)."""


class Contraction(OpTrait):
    """Sums products over a contracted dimension (`matmul`, `conv2d`): the work that
    runs on matrix units at a device's matrix rate."""


class DataMovement(OpTrait):
    """Moves, copies or gathers elements without arithmetic (`reshape`, `transpose`,
    `split`, `concat`, `enlarge`, `embedding`): its cost is bytes, not FLOPs."""


class Fusible(OpTrait):
    """XLA computes this op inside the loop of the kernel that produces its operand (an
    element-wise map, inference batchnorm's per-channel affine map, or an index
    remapping), so it launches no kernel of its own and reads that operand from
    registers (`cost.fusion`)."""


class Training(OpTrait):
    """Made by `autodiff` for a training step: a gradient, a loss, an optimizer update
    or training-mode batchnorm (docs/autodiff.md). A forward program has none of them,
    so these ops have no gradient of their own, and a program holding them is already
    a training step."""
