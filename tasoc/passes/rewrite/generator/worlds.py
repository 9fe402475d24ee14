"""What the generator enumerates over: input pools, shape sets and operator forms.

TASO enumerates two separate "worlds" of tensors (thesis §2.3, its generator's input
pools): matrices, where `matmul`, `transpose` and the matrix identity live, and
convolutions (rank-4 activations and weights), where `conv2d`, `pool2d`, `enlarge` and
the convolution constants live; element-wise ops, `concat` and `split` live in both.
A graph never mixes worlds (an `add` of a matrix and an activation does not type-check
anyway), so each world is enumerated on its own, which keeps the cross products out.

tasoc adds a third, small world for what transformers do with matrices: a rank-3
activation `[B, N, D]` times a rank-2 weight, a `matmul` that broadcasts the weight over
the batch axis (BERT's Q/K/V projections). A rule states its inputs' ranks, so the
matrix world's rules never match these matmuls; this world finds their rules, the
fusion of projections sharing an input above all. It exists for that `matmul` and is
left out without it.

Shapes are symbolic (`("N", "D")`) and instantiated at several *shape sets*: the first
`FINGERPRINT_SETS` give the integer fingerprints, all of them the float re-tests and
the final validation. Every symbol takes a different value in every fingerprint set,
and no two symbols share their tuple of values, so

* an equality that holds only because two sizes happen to coincide (a square kernel
  that `enlarge` leaves alone, a split point that falls at the right place) fails in
  another set, and
* an attribute that varies from set to set is read off the shapes (`dim(w, 2)`), while
  one that is the same in every set is a literal (`[3, 3]`) — see `emit.py`.

A *form* is one way of applying an op: the op, the attribute values enumeration tries
(TASO's single configuration per op: stride 1, `same` padding, 3x3 pooling; the other
values come back in `emit.py`, which turns an attribute into a parameter `$strides`
when the rule holds for its whole domain), and how the remaining attributes follow
from the operands and the shape set (`Derive`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from tasoc.ir.rules import ATTR_DOMAINS

FINGERPRINT_SETS = 2
"""Shape sets the integer fingerprints are computed at (the rest only re-test)."""

F32 = "f32"


class Role(StrEnum):
    """What a tensor is for, as TASO's pools tell activations from weights: a
    convolution reads data and a weight, pooling reads data, `enlarge` a weight."""

    DATA = "data"
    WEIGHT = "weight"
    SCALAR = "scalar"


class Derive(StrEnum):
    """How an attribute follows from the operands and the shape set."""

    DIM = "dim"
    """The size of a symbol (`i_matmul{size}`, `c_pool{channels}`)."""
    SQUARE = "square"
    """`(d, d)` for a symbol `d` (the kernel that `enlarge` and `i_conv` produce)."""
    SHAPE_OF = "shape_of"
    """The shape of a pool input (`ones{shape}`)."""
    GROUPS = "groups"
    """Input channels over the weight's input channels (a convolution's groups)."""
    SPLIT_SIZES = "split_sizes"
    """The sizes of the concatenation a split undoes (the operand's split tree)."""


@dataclass(frozen=True, slots=True)
class PoolInput:
    """An input tensor of a world: a name, symbolic dims and a role."""

    name: str
    dims: tuple[str, ...]
    role: Role

    def shape(self, sizes: Mapping[str, int]) -> tuple[int, ...]:
        return tuple(sizes[d] for d in self.dims)


@dataclass(frozen=True, slots=True)
class Form:
    """One way of applying `op` in enumeration."""

    op: str
    arity: int
    literal: tuple[tuple[str, Any], ...] = ()
    derived: tuple[tuple[str, Derive, str], ...] = ()
    """(attribute, how, argument): `("size", Derive.DIM, "D")`."""
    roles: tuple[Role | None, ...] = ()
    """The role each operand must have (None or missing: any)."""
    result_role: Role | None = None
    """The results' role (None: the first operand's)."""
    same_shape: bool = False
    """Element-wise ops take operands of one shape, as TASO's do (no broadcasting)."""
    commutative: bool = False
    """Enumerate one operand order only (both for two pool inputs, so that the
    commutativity rule itself is found)."""
    inputs_only: bool = False
    """Operands must be pool inputs (TASO applies `enlarge` to weights only)."""


@dataclass(frozen=True, slots=True)
class World:
    """An input pool, its shape sets and the forms enumerated over it."""

    name: str
    inputs: tuple[PoolInput, ...]
    forms: tuple[Form, ...]
    sizes: tuple[Mapping[str, int], ...]
    """Symbol sizes per shape set; the first FINGERPRINT_SETS are fingerprint sets."""
    anchor: str | None = None
    """The op the world exists for: without it the world is not enumerated."""


TABLE_2_1: tuple[str, ...] = (
    "add",
    "mul",
    "scale",
    "relu",
    "transpose",
    "matmul",
    "conv2d",
    "enlarge",
    "pool2d",
    "concat",
    "split",
    "ones",
    "i_matmul",
    "i_conv",
    "c_pool",
)
"""TASO's operators and constants (thesis Table 2.1) as `graph` ops: ewadd, ewmul,
smul, relu, transpose, matmul, conv, enlarge, pool_avg/pool_max, concat, split and the
constants I_ewmul (`ones`), I_matmul, I_conv and C_pool."""

_POOL_KERNEL: tuple[int, int] = ATTR_DOMAINS[("pool2d", "kernel")][-1]
"""The pooling window enumerated (TASO's 3x3; `emit` tries the others)."""
_WINDOW = tuple((key, ATTR_DOMAINS[("conv2d", key)][0]) for key in ("strides", "padding"))
"""Unit strides and `same` padding, as TASO enumerates (`emit` tries the others)."""


def _concat_split_forms(axes: Sequence[int]) -> list[Form]:
    """`concat` and the `split` that undoes it, along each of `axes`."""
    forms = []
    for axis in axes:
        forms.append(Form("concat", 2, literal=(("axis", axis),)))
        forms.append(
            Form(
                "split", 1, literal=(("axis", axis),), derived=(("sizes", Derive.SPLIT_SIZES, ""),)
            )
        )
    return forms


def _shared_forms(data_inputs: Sequence[PoolInput]) -> list[Form]:
    """Forms TASO's two worlds have: element-wise ops, concat/split on the two leading
    axes, and a tensor of ones shaped like each kind of data input."""
    forms = [
        Form("add", 2, same_shape=True, commutative=True),
        Form("mul", 2, same_shape=True, commutative=True),
        Form("scale", 2, roles=(None, Role.SCALAR)),
        Form("relu", 1),
        *_concat_split_forms((0, 1)),
    ]
    for pool_input in data_inputs:
        forms.append(
            Form(
                "ones",
                0,
                literal=(("dtype", F32),),
                derived=(("shape", Derive.SHAPE_OF, pool_input.name),),
                result_role=pool_input.role,
            )
        )
    return forms


def matrix_world() -> World:
    """TASO's matrix pool: two activations x (N x D), two square weights w (D x D),
    two scalars; `matmul`, `transpose` and the identity matrix."""
    x1, x2 = (PoolInput(f"x{i}", ("N", "D"), Role.DATA) for i in (1, 2))
    w1, w2 = (PoolInput(f"w{i}", ("D", "D"), Role.DATA) for i in (1, 2))
    s1, s2 = (PoolInput(f"s{i}", (), Role.SCALAR) for i in (1, 2))
    forms = [
        *_shared_forms([x1, w1]),
        Form("transpose", 1, literal=(("perm", (1, 0)),)),
        Form("matmul", 2),
        Form(
            "i_matmul",
            0,
            literal=(("dtype", F32),),
            derived=(("size", Derive.DIM, "D"),),
            result_role=Role.DATA,
        ),
    ]
    sizes = ({"N": 2, "D": 3}, {"N": 3, "D": 4}, {"N": 4, "D": 5})
    return World("matrix", (x1, x2, w1, w2, s1, s2), tuple(forms), sizes)


def conv_world() -> World:
    """TASO's convolution pool: two activations a (N, C, H, W), two weights w with
    K x K kernels, one weight u with a smaller k x k kernel (what `enlarge` grows to
    K x K), a scalar; convolution, pooling, `enlarge` and the convolution constants."""
    a1, a2 = (PoolInput(f"a{i}", ("N", "C", "H", "W"), Role.DATA) for i in (1, 2))
    w1, w2 = (PoolInput(f"w{i}", ("C", "C", "K", "K"), Role.WEIGHT) for i in (1, 2))
    u = PoolInput("u", ("C", "C", "k", "k"), Role.WEIGHT)
    s = PoolInput("s", (), Role.SCALAR)
    forms = [*_shared_forms([a1])]
    for activation in ATTR_DOMAINS[("conv2d", "activation")]:
        forms.append(
            Form(
                "conv2d",
                2,
                literal=(*_WINDOW, ("activation", activation)),
                derived=(("groups", Derive.GROUPS, ""),),
                roles=(Role.DATA, Role.WEIGHT),
                result_role=Role.DATA,
            )
        )
    for kind in ATTR_DOMAINS[("pool2d", "kind")]:
        literal = (("kind", kind), ("kernel", _POOL_KERNEL), *_WINDOW)
        forms.append(Form("pool2d", 1, literal=literal, roles=(Role.DATA,)))
    channels = ("channels", Derive.DIM, "C")
    forms += [
        Form(
            "enlarge",
            1,
            derived=(("kernel", Derive.SQUARE, "K"),),
            roles=(Role.WEIGHT,),
            inputs_only=True,
        ),
        Form(
            "i_conv",
            0,
            literal=(("dtype", F32),),
            derived=(channels, ("kernel", Derive.SQUARE, "K")),
            result_role=Role.WEIGHT,
        ),
        Form(
            "c_pool",
            0,
            literal=(("kernel", _POOL_KERNEL), ("dtype", F32)),
            derived=(channels,),
            result_role=Role.WEIGHT,
        ),
    ]
    sizes = (
        {"N": 2, "C": 3, "H": 5, "W": 4, "K": 3, "k": 1},
        {"N": 3, "C": 2, "H": 6, "W": 7, "K": 5, "k": 3},
        {"N": 2, "C": 4, "H": 7, "W": 6, "K": 3, "k": 1},
    )
    return World("conv", (a1, a2, w1, w2, u, s), tuple(forms), sizes)


def batched_world() -> World:
    """Broadcast matmul: two activations x (B x N x D), two square weights w (D x D),
    two scalars. Kept small, as its graphs are many: the linear ops a projection
    meets (`matmul` with a weight on the right, `add`, `scale`) and concat/split on
    every axis — the batch and row axes of x, the rows and columns of w, x's last
    axis, along which the outputs of fused projections come apart."""
    x1, x2 = (PoolInput(f"x{i}", ("B", "N", "D"), Role.DATA) for i in (1, 2))
    w1, w2 = (PoolInput(f"w{i}", ("D", "D"), Role.WEIGHT) for i in (1, 2))
    s1, s2 = (PoolInput(f"s{i}", (), Role.SCALAR) for i in (1, 2))
    forms = [
        Form("add", 2, same_shape=True, commutative=True),
        Form("scale", 2, roles=(None, Role.SCALAR)),
        Form("matmul", 2, roles=(None, Role.WEIGHT)),
        *_concat_split_forms((0, 1, 2)),
    ]
    sizes = ({"B": 2, "N": 3, "D": 5}, {"B": 3, "N": 5, "D": 4}, {"B": 5, "N": 2, "D": 3})
    return World("batched", (x1, x2, w1, w2, s1, s2), tuple(forms), sizes, anchor="matmul")


def worlds(ops: Sequence[str]) -> list[World]:
    """The worlds restricted to the forms of `ops` (a world left without forms or
    without its anchor op is dropped), with scalars only where `scale` can read them."""
    chosen = set(ops)
    result = []
    for world in (matrix_world(), conv_world(), batched_world()):
        forms = tuple(form for form in world.forms if form.op in chosen)
        if not forms or (world.anchor is not None and world.anchor not in chosen):
            continue
        inputs = tuple(i for i in world.inputs if i.role is not Role.SCALAR or "scale" in chosen)
        result.append(World(world.name, inputs, forms, world.sizes, world.anchor))
    return result
