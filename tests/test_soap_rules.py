"""The SOAP rule of every `graph` op, checked against the op's reference kernel.

A rule claims that running the op's kernel on each device's local shards (with the
attributes `local_attrs` gives, and split `mean` factors scaled by 1/degree) and
then putting the pieces together (concatenating split dims, summing partial sums,
finding equal replicas) gives the op on the global operands. `test_rule_is_exact`
checks that claim for every legal configuration of every op on 1-D and 2-D meshes,
in numpy, with no JAX: a rule that splits a dim it may not, forgets a partial sum
or a mean, or lets a factor index the wrong dim fails it.

Configurations that split a `synced` factor (batchnorm's batch statistics) are left
out: the local kernel alone cannot be right there, the op all-reduces its statistics
itself, and the sharded JAX lowering's tests check that collective. Computing those
statistics globally here would check nothing of the rule.
"""

from __future__ import annotations

import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from xdsl.dialects.builtin import ModuleOp

from tasoc.backends.arguments import random_inputs
from tasoc.backends.numpy.kernels import KERNELS
from tasoc.ir import soap
from tasoc.ir.graph import GraphOp, sig_of
from tasoc.ir.opdef import op_defs
from tasoc.ir.program import entry_function
from tasoc.ir.shapes import ConstData, DType, TensorSig, infer
from tasoc.ir.soap import Mesh, OpRule, Sharding, ShardingError, rule_of
from tasoc.ir.soap_rules import local_attrs
from tasoc.verify.strategies import graphs

F32, I32 = DType.F32, DType.I32

MESHES = (
    Mesh("m", (("d", 2),)),
    Mesh("m", (("d", 4),)),
    Mesh("m", (("x", 2), ("y", 2))),
)


@dataclass(frozen=True)
class Case:
    """One op with concrete operand types and attributes.

    `ints` gives each integer operand's exclusive upper bound (ids, labels);
    `positive` lists float operands that must be positive (a variance, a step count);
    `bools` lists the i1 operands (conditions, logic).
    """

    op: str
    shapes: tuple[tuple[int, ...], ...]
    attrs: Mapping[str, Any] = field(default_factory=dict)
    ints: Mapping[int, int] = field(default_factory=dict)
    positive: tuple[int, ...] = ()
    bools: tuple[int, ...] = ()

    @property
    def sigs(self) -> list[TensorSig]:
        return [
            TensorSig(shape, I32 if i in self.ints else DType.BOOL if i in self.bools else F32)
            for i, shape in enumerate(self.shapes)
        ]

    def inputs(self, rng: np.random.Generator) -> list[np.ndarray]:
        arrays = []
        for i, shape in enumerate(self.shapes):
            if i in self.ints:
                arrays.append(rng.integers(0, self.ints[i], shape).astype(np.int32))
            elif i in self.positive:
                arrays.append(rng.uniform(0.5, 3.0, shape))
            elif i in self.bools:
                arrays.append(rng.random(shape) < 0.5)
            else:
                arrays.append(rng.standard_normal(shape))
        return arrays

    def __str__(self) -> str:
        shapes = ",".join("x".join(map(str, s)) or "scalar" for s in self.shapes)
        attrs = ",".join(f"{k}={v}" for k, v in self.attrs.items() if k != "value")
        return f"{self.op}[{shapes}]{'{' + attrs + '}' if attrs else ''}"


def _conv_cases(x: tuple[int, ...], w: tuple[int, ...], **window: Any) -> list[Case]:
    """conv2d and both of its gradients on one input, weight and window."""
    attrs = {"strides": (1, 1), "padding": "same", "groups": 1, **window}
    (out,) = infer(
        "conv2d", [TensorSig(x, F32), TensorSig(w, F32)], {**attrs, "activation": "none"}
    )
    cases = [Case("conv2d", (x, w), {**attrs, "activation": act}) for act in ("none", "relu")]
    return [
        *cases,
        Case("conv2d_grad_input", (out.shape, w), {**attrs, "input_shape": x}),
        Case("conv2d_grad_weight", (x, out.shape), {**attrs, "kernel": w[2:]}),
    ]


def _pool_cases(x: tuple[int, ...], **window: Any) -> list[Case]:
    cases = []
    for kind in ("avg", "max"):
        attrs = {"kind": kind, **window}
        (out,) = infer("pool2d", [TensorSig(x, F32)], attrs)
        cases += [Case("pool2d", (x,), attrs), Case("pool2d_grad", (x, out.shape), attrs)]
    return cases


def _reduce_cases(x: tuple[int, ...], **attrs: Any) -> list[Case]:
    (out,) = infer("reduce", [TensorSig(x, F32)], attrs)
    return [Case("reduce", (x,), attrs), Case("reduce_grad", (x, out.shape), attrs)]


def _gnn_cases() -> list[Case]:
    """The GNN ops over 4 edge blocks of 5 entries, 3 target rows a block, 6 sources."""
    edges = {1: 6, 2: 3}
    cases = []
    for reduce in ("sum", "mean", "max"):
        attrs = {"reduce": reduce, "block_rows": 3}
        for weight in ((), ((4, 5),)):
            forward = ((6, 4), (4, 5), (4, 5), *weight)
            cases += [
                Case("aggregate", forward, attrs, ints=edges),
                Case("aggregate_grad", (*forward, (12, 4)), attrs, ints=edges),
            ]
        if reduce != "max":
            grad = ((6, 4), (4, 5), (4, 5), (12, 4))
            cases.append(Case("aggregate_weight_grad", grad, attrs, ints=edges))
    softmax = {"block_rows": 3}
    return [
        *cases,
        Case("edge_softmax", ((4, 5), (4, 5)), softmax, ints={1: 3}),
        Case("edge_softmax_grad", ((4, 5), (4, 5), (4, 5)), softmax, ints={1: 3}),
        Case("edge_scores", ((6, 1), (12, 1), (4, 5), (4, 5)), softmax, ints={2: 6, 3: 3}),
    ]


ADAM = {"lr": 0.1, "beta1": 0.9, "beta2": 0.99, "epsilon": 1e-8}
EPS = {"epsilon": 1e-5}

CASES: list[Case] = [
    Case("add", ((4, 4), (4, 4))),
    Case("add", ((4, 8), (8,))),
    Case("add", ((4, 1), (4, 4))),
    Case("mul", ((4, 4), (1, 4))),
    Case("mul", ((2, 4, 4), (4, 4))),
    Case("scale", ((4, 8), ())),
    *(Case(op, ((4, 4, 2),)) for op in ("relu", "sigmoid", "tanh", "gelu")),
    *(Case(f"{op}_grad", ((4, 4), (4, 4))) for op in ("relu", "sigmoid", "tanh", "gelu")),
    *(Case(op, ((4, 4, 2),)) for op in ("neg", "exp", "abs", "erf")),
    *(Case(op, ((4, 4, 2),), positive=(0,)) for op in ("log", "sqrt", "reciprocal")),
    *(Case(op, ((4, 8), (8,))) for op in ("sub", "max", "min")),
    Case("sub", ((4, 1), (1, 4))),
    Case("div", ((4, 8), (4, 8)), positive=(1,)),
    Case("pow", ((4, 8), (8,)), positive=(0,)),
    Case("compare", ((4, 8), (8,)), {"predicate": "lt"}),
    Case("compare", ((4, 4), (4, 4)), {"predicate": "ne"}),
    Case("not", ((4, 4, 2),), bools=(0,)),
    *(Case(op, ((4, 8), (8,)), bools=(0, 1)) for op in ("and", "or", "xor")),
    Case("where", ((4, 8), (4, 8), (8,)), bools=(0,)),
    Case("where", ((8,), (4, 8), (4, 1)), bools=(0,)),
    Case("cast", ((4, 8),), {"to": DType.F16}),
    Case("broadcast", ((1, 8),), {"shape": (4, 8)}),
    Case("broadcast", ((8,),), {"shape": (2, 4, 8)}),
    Case("gather", ((10, 4), (4, 2)), {"axis": 0}, ints={1: 10}),
    Case("gather", ((4, 8), (2, 3)), {"axis": 1}, ints={1: 8}),
    Case("adam_update", ((4, 8), (4, 8), (4, 8), (4, 8), ()), ADAM, positive=(3, 4)),
    Case("matmul", ((4, 8), (8, 4))),
    Case("matmul", ((2, 4, 8), (8, 4))),
    Case("matmul", ((4, 4, 8), (4, 8, 4))),
    Case("matmul", ((4, 1, 4, 8), (2, 8, 4))),
    Case("transpose", ((4, 2, 8),), {"perm": (2, 0, 1)}),
    *_conv_cases((4, 4, 4, 4), (4, 4, 3, 3)),
    *_conv_cases((4, 4, 4, 4), (8, 4, 1, 1), padding="valid"),
    *_conv_cases((4, 4, 4, 8), (4, 4, 2, 2), strides=(2, 2), padding="valid"),
    *_conv_cases((4, 4, 5, 4), (4, 4, 2, 2), strides=(2, 2), padding="valid"),
    *_conv_cases((2, 4, 6, 6), (4, 4, 3, 3), strides=(2, 2), padding="valid"),
    *_conv_cases((2, 4, 4, 4), (4, 1, 3, 3), groups=4),
    *_conv_cases((2, 4, 4, 4), (8, 2, 2, 2), strides=(2, 2), padding="valid", groups=2),
    Case("enlarge", ((4, 4, 1, 1),), {"kernel": (3, 3)}),
    *_pool_cases((4, 4, 4, 8), kernel=(2, 2), strides=(2, 2), padding="valid"),
    *_pool_cases((4, 4, 4, 4), kernel=(3, 3), strides=(1, 1), padding="same"),
    *_pool_cases((2, 4, 6, 6), kernel=(3, 3), strides=(2, 2), padding="valid"),
    *_pool_cases((2, 4, 4, 4), kernel=(2, 2), strides=(2, 2), padding="same"),
    *_pool_cases((2, 4, 4, 4), kernel=(2, 2), strides=(2, 2), padding=(0, 0, 0, 0)),
    Case("concat", ((4, 2), (4, 6)), {"axis": 1}),
    Case("concat", ((2, 4), (2, 4), (4, 4)), {"axis": 0}),
    Case("split", ((4, 8),), {"axis": 1, "sizes": (2, 6)}),
    Case("split", ((4, 8),), {"axis": -2, "sizes": (1, 3)}),
    Case("reshape", ((4, 2, 4),), {"shape": (4, 8)}),
    Case("reshape", ((4, 8),), {"shape": (4, 2, 4)}),
    Case("reshape", ((2, 4, 4),), {"shape": (8, 4)}),
    Case("reshape", ((4, 1, 8),), {"shape": (4, 8, 1)}),
    # Merged and split blocks split by their leading dims (the gcd of the two).
    Case("reshape", ((4, 6),), {"shape": (24,)}),
    Case("reshape", ((8, 3),), {"shape": (2, 12)}),
    Case("reshape", ((6, 4),), {"shape": (4, 6)}),
    Case("reshape", ((2, 4, 8),), {"shape": (8, 2, 4)}),
    Case("ones", (), {"shape": (4, 4), "dtype": "f32"}),
    Case("zeros", (), {"shape": (2, 4), "dtype": "f32"}),
    Case("c_pool", (), {"channels": 4, "kernel": (3, 3), "dtype": "f32"}),
    Case("i_conv", (), {"channels": 4, "kernel": (3, 3), "dtype": "f32"}),
    Case("i_matmul", (), {"size": 4, "dtype": "f32"}),
    Case("constant", (), {"value": ConstData((2, 2), F32, (1.0, 2.0, 3.0, 4.0))}),
    Case("softmax", ((4, 8),), {"axis": 1}),
    Case("softmax", ((4, 8, 2),), {"axis": 0}),
    *_reduce_cases((4, 4, 8), kind="sum", axes=(1,), keepdims=False),
    *_reduce_cases((4, 4, 8), kind="mean", axes=(0, 2), keepdims=True),
    *_reduce_cases((4, 4, 8), kind="mean", axes=(-1,), keepdims=False),
    *_reduce_cases((4, 4, 8), kind="max", axes=(1,), keepdims=False),
    Case("reduce", ((4, 4, 8),), {"kind": "min", "axes": (0, 2), "keepdims": True}),
    Case("reduce", ((4, 4, 8),), {"kind": "prod", "axes": (1,), "keepdims": False}),
    Case("batchnorm", ((4, 4, 2, 2), (4,), (4,), (4,), (4,)), EPS, positive=(4,)),
    Case("batchnorm", ((4, 8), (8,), (8,), (8,), (8,)), EPS, positive=(4,)),
    Case("batchnorm_train", ((4, 4, 2, 2), (4,), (4,)), EPS),
    Case("batchnorm_grad", ((4, 4, 2, 2), (4,), (4, 4, 2, 2)), EPS),
    Case("layernorm", ((4, 4, 8), (8,), (8,)), {"axis": 2, **EPS}),
    Case("layernorm", ((4, 4, 8), (4, 8), (4, 8)), {"axis": 1, **EPS}),
    Case("layernorm_grad", ((4, 4, 8), (8,), (4, 4, 8)), {"axis": -1, **EPS}),
    Case("layernorm_grad", ((4, 4, 8), (4, 8), (4, 4, 8)), {"axis": 1, **EPS}),
    Case("embedding", ((4, 2), (10, 4)), ints={0: 10}),
    Case("scatter_add", ((4, 2), (4, 2, 4)), {"rows": 10}, ints={0: 10}),
    *_gnn_cases(),
    Case("softmax_cross_entropy", ((4, 8), (4,)), ints={1: 8}),
    Case("softmax_cross_entropy", ((4, 2, 8), (4, 2)), ints={1: 8}),
    Case("softmax_cross_entropy_grad", ((4, 8), (4,), (4,)), ints={1: 8}),
    Case("softmax_cross_entropy_grad", ((2, 4, 8), (2, 4), (2, 4)), ints={1: 8}),
]


def _rule(case: Case) -> tuple[OpRule, list[TensorSig]]:
    results = infer(case.op, case.sigs, case.attrs)
    return rule_of(case.op, case.sigs, case.attrs, results), results


def _run(op: str, attrs: Mapping[str, Any], inputs: Sequence[np.ndarray]) -> list[np.ndarray]:
    return [np.asarray(r) for r in KERNELS[op](attrs, inputs)]


# ------------------------------------------------------------- the local view


def _block(sharding: Sharding, mesh: Mesh, at: Mapping[str, int]) -> tuple:
    """The block index per dim that the device at mesh coordinates `at` holds."""
    index = []
    for axes in sharding.dims:
        position = 0
        for axis in axes:  # major to minor
            position = position * mesh.axis_size(axis) + at[axis]
        index.append(position)
    return tuple(index)


def _slices(sharding: Sharding, shape: Sequence[int], mesh: Mesh, block: tuple) -> tuple:
    local = sharding.local_shape(shape, mesh)
    return tuple(slice(b * n, (b + 1) * n) for b, n in zip(block, local, strict=True))


def _sharded(
    op: str,
    attrs: Mapping[str, Any],
    rule: OpRule,
    config: Mapping[str, tuple[str, ...]],
    mesh: Mesh,
    inputs: Sequence[np.ndarray],
) -> list[np.ndarray]:
    """The op on every device's local shards under `config`, put back together.

    Replicas (devices that differ only in axes a result is neither split nor
    unreduced along) must agree; devices that differ in unreduced axes hold
    partial sums, added up here as the all-reduce would."""
    operand_shardings, result_shardings = soap.shardings_for(rule, config, mesh.name)
    scale = 1.0
    for factor in rule.factors:
        if factor.mean and config.get(factor.name):
            scale /= mesh.degree(config[factor.name])
    sums: dict[tuple[int, tuple, tuple], np.ndarray] = {}
    globals_ = _run(op, attrs, inputs)
    for coords in itertools.product(*(range(size) for _, size in mesh.axes)):
        at = dict(zip(mesh.axis_names, coords, strict=True))
        local = [
            x[_slices(s, x.shape, mesh, _block(s, mesh, at))]
            for x, s in zip(inputs, operand_shardings, strict=True)
        ]
        shapes = [
            s.local_shape(g.shape, mesh) for s, g in zip(result_shardings, globals_, strict=True)
        ]
        here = local_attrs(op, attrs, [x.shape for x in local], shapes)
        for r, (value, s) in enumerate(zip(_run(op, here, local), result_shardings, strict=True)):
            assert value.shape == shapes[r], (r, value.shape, shapes[r])
            replica = tuple(at[a] for a in mesh.axis_names if a not in s.used_axes)
            key = (r, _block(s, mesh, at), replica)
            sums[key] = sums.get(key, 0) + value * scale
    assembled = [np.full(g.shape, np.nan) for g in globals_]
    for (r, block, _), value in sums.items():
        where = _slices(result_shardings[r], globals_[r].shape, mesh, block)
        if not np.isnan(assembled[r][where]).all():
            np.testing.assert_allclose(value, assembled[r][where], rtol=1e-9, atol=1e-9)
        assembled[r][where] = value
    return assembled


def _check_every_configuration(
    op: str,
    attrs: Mapping[str, Any],
    sigs: Sequence[TensorSig],
    inputs: Sequence[np.ndarray],
    meshes: Sequence[Mesh],
) -> int:
    """Check `op`'s rule in every configuration on `meshes` that splits no synced
    factor; the number of configurations that split something."""
    results = infer(op, sigs, attrs)
    rule = rule_of(op, sigs, attrs, results)
    expected = _run(op, attrs, inputs)
    checked = 0
    for mesh in meshes:
        for config in soap.configurations(rule, mesh):
            operands, outs = soap.shardings_for(rule, config, mesh.name)
            for sig, sharding in zip([*sigs, *results], [*operands, *outs], strict=True):
                sharding.check(sig, mesh)
            # The operands' shardings alone determine the results': the typing rule.
            implied, implied_config = soap.propagate(rule, operands, mesh.name)
            assert implied == outs
            assert {name: axes for name, axes in implied_config.items() if axes} == config
            if soap.internal_collectives(rule, config):
                continue  # synced: checked with its all-reduce by the JAX lowering's tests
            got = _sharded(op, attrs, rule, config, mesh, inputs)
            for want, have in zip(expected, got, strict=True):
                finite = np.abs(want[np.isfinite(want)])  # infinities compare exactly
                scale = max(1.0, float(finite.max(initial=0)))
                np.testing.assert_allclose(have, want, rtol=1e-9, atol=1e-9 * scale)
            checked += any(config.values())
    return checked


@pytest.mark.parametrize("case", CASES, ids=str)
def test_rule_is_exact(case: Case) -> None:
    inputs = case.inputs(np.random.default_rng(0))
    checked = _check_every_configuration(case.op, case.attrs, case.sigs, inputs, MESHES)
    rule, _ = _rule(case)
    splittable = [f for f in rule.factors if f.size % 2 == 0]
    assert checked or not splittable, "no split configuration was checked"


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graphs(min_ops=1, max_ops=1))
def test_rules_of_random_ops(module: ModuleOp) -> None:
    """The same check on one op drawn by the public strategy: broadcasting, explicit
    paddings, strides, groups and shapes the hand-written cases do not have."""
    block = entry_function(module).body.block
    (op,) = [o for o in block.ops if isinstance(o, GraphOp)]
    args = [x.astype(np.float64) if x.dtype.kind == "f" else x for x in random_inputs(module)]
    inputs = [args[block.args.index(value)] for value in op.operands]
    sigs = [sig_of(value.type) for value in op.operands]
    _check_every_configuration(op.op_name(), op.py_attrs(), sigs, inputs, MESHES)


@pytest.mark.parametrize("case", [c for c in CASES if _rule(c)[0].linear], ids=str)
def test_linear_groups_are_linear(case: Case) -> None:
    """Partial sums entering through a `linear` group leave as partial sums: the op
    of a sum (over every operand of the group) is the sum of the ops."""
    rule, _ = _rule(case)
    rng = np.random.default_rng(1)
    inputs = case.inputs(rng)
    whole = _run(case.op, case.attrs, inputs)
    for group in rule.linear:
        part = [rng.standard_normal(x.shape) if i in group else x for i, x in enumerate(inputs)]
        rest = [
            x - p if i in group else x for i, (x, p) in enumerate(zip(inputs, part, strict=True))
        ]
        pieces = zip(
            _run(case.op, case.attrs, part), _run(case.op, case.attrs, rest), whole, strict=True
        )
        for a, b, want in pieces:
            np.testing.assert_allclose(a + b, want, rtol=1e-9, atol=1e-9)


SHAPE_ONLY = [c for c in CASES if _rule(c)[0].shape_only]


@pytest.mark.parametrize("case", SHAPE_ONLY, ids=str)
def test_shape_only_operands_are_read_for_their_shape_alone(case: Case) -> None:
    """Zeros standing in for an operand the rule reads for its shape alone change no
    result: what the writer gives the op where moving that operand would communicate."""
    rule, _ = _rule(case)
    inputs = case.inputs(np.random.default_rng(2))
    zeroed = [np.zeros_like(x) if i in rule.shape_only else x for i, x in enumerate(inputs)]
    pieces = zip(_run(case.op, case.attrs, inputs), _run(case.op, case.attrs, zeroed), strict=True)
    for want, have in pieces:
        np.testing.assert_array_equal(have, want)


def test_the_gradients_of_sums_means_and_average_pooling_read_x_for_its_shape() -> None:
    assert {(c.op, c.attrs["kind"]) for c in SHAPE_ONLY} == {
        ("reduce_grad", "sum"),
        ("reduce_grad", "mean"),
        ("pool2d_grad", "avg"),
    }


def test_every_op_has_a_case() -> None:
    assert sorted(set(op_defs()) - {case.op for case in CASES}) == []


@pytest.mark.parametrize("case", CASES, ids=str)
def test_factors_divide_their_dims(case: Case) -> None:
    """Every dim a factor indexes is a multiple of the factor's size, so a degree
    that divides the factor (what `configurations` allows) divides the dim."""
    rule, results = _rule(case)
    assert len(rule.operands) == len(case.sigs) and len(rule.results) == len(results)
    for sig, dims in zip([*case.sigs, *results], [*rule.operands, *rule.results], strict=True):
        assert len(dims) == sig.rank
        for size, name in zip(sig.shape, dims, strict=True):
            if name is not None:
                assert size % rule.by_name[name].size == 0, (sig, name)


def test_kinds_follow_table_3_1() -> None:
    conv, _ = _rule(_conv_cases((4, 4, 4, 4), (8, 4, 1, 1), padding="valid")[0])
    assert {f.name: f.kind for f in conv.factors} == {
        "n": "sample",
        "h": "attribute",
        "w": "attribute",
        "o": "parameter",
        "c": "reduction",
    }
    grad_weight, _ = _rule(_conv_cases((4, 4, 4, 4), (8, 4, 3, 3))[3])
    assert {f.name: f.kind for f in grad_weight.factors} == {
        "n": "reduction",
        "o": "parameter",
        "c": "parameter",
    }
    mean, _ = _rule(Case("reduce", ((4, 8),), {"kind": "mean", "axes": (1,), "keepdims": False}))
    assert [(f.kind, f.mean) for f in mean.factors] == [("sample", False), ("reduction", True)]
    train, _ = _rule(Case("batchnorm_train", ((4, 4, 2, 2), (4,), (4,)), EPS))
    assert [f.name for f in train.factors if f.synced] == ["n", "s0", "s1"]


# ------------------------------------------------------------------ bad shardings


def _matmul_rule() -> OpRule:
    return _rule(Case("matmul", ((4, 8), (8, 4))))[0]


def test_a_split_of_an_unsplittable_dim_names_the_operand_and_dim() -> None:
    rule, _ = _rule(Case("softmax", ((4, 8),), {"axis": 1}))
    with pytest.raises(ShardingError, match=r"operand #0 dim 1 is split by \[\"d\"\] but the op"):
        soap.config_of(rule, [Sharding("m", ((), ("d",)))])


def test_one_factor_split_two_ways_names_both_dims() -> None:
    operands = [Sharding("m", ((), ("d",))), Sharding("m", ((), ()))]
    with pytest.raises(
        ShardingError, match=r"operand #1 dim 0 is not split but operand #0 dim 1 is split .*'k'"
    ):
        soap.config_of(_matmul_rule(), operands)


def test_an_axis_on_two_factors_is_refused() -> None:
    operands = [Sharding("m", (("d",), ())), Sharding("m", ((), ("d",)))]
    with pytest.raises(ShardingError, match="mesh axis 'd' splits both the 'm' and the 'n' dims"):
        soap.config_of(_matmul_rule(), operands)


def test_partial_sums_into_a_nonlinear_op_are_refused() -> None:
    rule, _ = _rule(Case("relu", ((4, 4),)))
    with pytest.raises(ShardingError, match=r"operands \[0\] hold partial sums but"):
        soap.config_of(rule, [Sharding("m", ((), ()), unreduced=("d",))])


def test_partial_sums_flow_through_a_linear_op() -> None:
    rule, _ = _rule(Case("add", ((4, 4), (4, 4))))
    partial = Sharding("m", (("x",), ()), unreduced=("y",))
    results, config = soap.propagate(rule, [partial, partial], "m")
    assert results == [partial] and config["d0"] == ("x",) and not config["d1"]
    with pytest.raises(ShardingError, match=r"operands \[0\] hold partial sums .*\[0, 1\]"):
        soap.config_of(rule, [partial, Sharding("m", (("x",), ()))])
