"""Symbolic semantics agree with the reference kernels; rule validation accepts true
rules and rejects false ones with a counterexample."""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import replace
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
import z3
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st
from rule_examples import MATMUL_COMMUTES, MATMUL_FUSION, RELU_OVER_ADD

from tasoc.backends.numpy.kernels import KERNELS
from tasoc.ir.op_sets import ops_with
from tasoc.ir.rule_text import parse_rules
from tasoc.ir.rules import Condition, Param, Relation, Rule, RuleError, param_domain
from tasoc.ir.shapes import ConstData, DType, ShapeError, TensorSig, infer
from tasoc.ir.traits import Training
from tasoc.verify import symbolic
from tasoc.verify.instances import Instance, instances
from tasoc.verify.validate import validate_rule, validate_rules

# ------------------------------------------------- symbolic ops vs reference kernels

INTERPRETATIONS: dict[str, Callable[[float], float]] = {
    "relu": lambda v: max(v, 0.0),
    "sigmoid": lambda v: 1 / (1 + math.exp(-v)),
    "tanh": math.tanh,
    "gelu": lambda v: v * 0.5 * math.erfc(-v / math.sqrt(2)),
    "exp": math.exp,
    "rsqrt": lambda v: 1 / math.sqrt(v),
}
"""The real functions behind the uninterpreted ones, to evaluate results numerically."""

_ARITH: dict[int, Callable[[list[float]], float]] = {
    z3.Z3_OP_ADD: sum,
    z3.Z3_OP_MUL: math.prod,
    z3.Z3_OP_SUB: lambda a: a[0] - sum(a[1:]),
    z3.Z3_OP_UMINUS: lambda a: -a[0],
    z3.Z3_OP_DIV: lambda a: a[0] / a[1],
    z3.Z3_OP_ITE: lambda a: a[1] if a[0] else a[2],
    z3.Z3_OP_GE: lambda a: a[0] >= a[1],
    z3.Z3_OP_LE: lambda a: a[0] <= a[1],
    z3.Z3_OP_GT: lambda a: a[0] > a[1],
    z3.Z3_OP_LT: lambda a: a[0] < a[1],
}


def numeric(element: symbolic.Elem) -> float:
    """The value of an element whose variables are all numbers (only the uninterpreted
    functions are left symbolic), with the functions interpreted as the real ones."""
    if isinstance(element, Fraction):
        return float(element)
    if z3.is_rational_value(element):
        return float(element.as_fraction())
    args = [numeric(child) for child in element.children()]
    kind = element.decl().kind()
    if kind == z3.Z3_OP_UNINTERPRETED:
        return INTERPRETATIONS[element.decl().name()](args[0])
    return float(_ARITH[kind](args))


def run_numeric(op: str, attrs: dict[str, Any], inputs: list[np.ndarray]) -> list[np.ndarray]:
    results = symbolic.run_op(op, attrs, [symbolic.known(x) for x in inputs])
    return [np.vectorize(numeric, otypes=[float])(r) if r.size else r for r in results]


Draw = Callable[[st.SearchStrategy[Any]], Any]
"""`data.draw`: draws one value from a strategy."""

dims = st.integers(1, 3)


def shapes(min_rank: int = 0, max_rank: int = 3) -> st.SearchStrategy[tuple[int, ...]]:
    return st.lists(dims, min_size=min_rank, max_size=max_rank).map(tuple)


def broadcast_partner(draw: Draw, shape: tuple[int, ...]) -> tuple[int, ...]:
    kept = shape[draw(st.integers(0, len(shape))) :]
    return tuple(draw(st.sampled_from([d, 1])) for d in kept)


def window_attrs(draw: Draw) -> dict[str, Any]:
    return {
        "strides": (draw(st.integers(1, 2)), draw(st.integers(1, 2))),
        "padding": draw(st.sampled_from(["same", "valid"])),
    }


Case = tuple[dict[str, Any], list[tuple[int, ...]]]
"""Attributes and operand shapes of one op application."""


def _binary(draw: Draw) -> Case:
    x = draw(shapes())
    pair = [x, broadcast_partner(draw, x)]
    return {}, draw(st.permutations(pair))


def _unary(draw: Draw) -> Case:
    return {}, [draw(shapes())]


def _broadcast(draw: Draw) -> Case:
    x = draw(shapes())
    return {"shape": (*draw(shapes(0, 1)), *(d if d > 1 else draw(dims) for d in x))}, [x]


def _transpose(draw: Draw) -> Case:
    x = draw(shapes(1))
    return {"perm": tuple(draw(st.permutations(range(len(x)))))}, [x]


def _matmul(draw: Draw) -> Case:
    batch = draw(shapes(0, 2))
    m, k, n = draw(dims), draw(dims), draw(dims)
    return {}, [(*batch, m, k), (*broadcast_partner(draw, batch), k, n)]


def _conv2d(draw: Draw) -> Case:
    groups = draw(st.sampled_from([1, 2]))
    cin, cout = groups * draw(st.integers(1, 2)), groups * draw(st.integers(1, 2))
    x = (draw(st.integers(1, 2)), cin, draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    w = (cout, cin // groups, draw(dims), draw(dims))
    activation = draw(st.sampled_from(["none", "relu"]))
    return {**window_attrs(draw), "activation": activation, "groups": groups}, [x, w]


def _enlarge(draw: Draw) -> Case:
    kh, kw = draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 3]))
    return {"kernel": (draw(st.sampled_from([3, 5])), 5)}, [(2, 1, kh, kw)]


def _pool2d(draw: Draw) -> Case:
    kernel = (draw(dims), draw(dims))
    x = (1, 2, draw(st.integers(1, 5)), draw(st.integers(1, 5)))
    return {
        **window_attrs(draw),
        "kind": draw(st.sampled_from(["avg", "max"])),
        "kernel": kernel,
    }, [x]


def _concat(draw: Draw) -> Case:
    x = draw(shapes(1))
    axis = draw(st.integers(0, len(x) - 1))
    sizes = draw(st.lists(dims, min_size=1, max_size=3))
    return {"axis": axis}, [(*x[:axis], s, *x[axis + 1 :]) for s in sizes]


def _split(draw: Draw) -> Case:
    x = draw(shapes(1))
    axis = draw(st.integers(0, len(x) - 1))
    cuts = sorted(draw(st.sets(st.integers(1, x[axis] - 1))) if x[axis] > 1 else set())
    sizes = tuple(b - a for a, b in itertools.pairwise([0, *cuts, x[axis]]))
    return {"axis": axis, "sizes": sizes}, [x]


def _reshape(draw: Draw) -> Case:
    x = draw(shapes(1))
    return {"shape": (math.prod(x[:1]), math.prod(x[1:]))}, [x]


def _filled(draw: Draw) -> Case:
    return {"shape": draw(shapes()), "dtype": "f32"}, []


def _c_pool(draw: Draw) -> Case:
    return {"channels": draw(dims), "kernel": (draw(dims), draw(dims)), "dtype": "f32"}, []


def _i_conv(draw: Draw) -> Case:
    kernel = (draw(st.sampled_from([1, 3])), draw(st.sampled_from([1, 3])))
    return {"channels": draw(dims), "kernel": kernel, "dtype": "f32"}, []


def _i_matmul(draw: Draw) -> Case:
    return {"size": draw(dims), "dtype": "f32"}, []


def _constant(draw: Draw) -> Case:
    values = tuple(draw(st.lists(st.sampled_from([-1.5, 0.0, 2.0]), min_size=4, max_size=4)))
    return {"value": ConstData((2, 2), DType.F32, values)}, []


def _softmax(draw: Draw) -> Case:
    x = draw(shapes(1))
    return {"axis": draw(st.integers(-len(x), len(x) - 1))}, [x]


def _reduce(draw: Draw) -> Case:
    x = draw(shapes(1))
    axes = tuple(draw(st.sets(st.integers(0, len(x) - 1), min_size=1)))
    kind = draw(st.sampled_from(["sum", "mean", "max"]))
    return {"kind": kind, "axes": axes, "keepdims": draw(st.booleans())}, [x]


def _batchnorm(draw: Draw) -> Case:
    x = draw(shapes(2))
    return {"epsilon": 0.5}, [x] + [(x[1],)] * 4


def _layernorm(draw: Draw) -> Case:
    x = draw(shapes(1))
    axis = draw(st.integers(0, len(x) - 1))
    return {"axis": axis, "epsilon": 0.25}, [x, x[axis:], x[axis:]]


CASES: dict[str, Callable[[Draw], Case]] = {
    "add": _binary,
    "mul": _binary,
    "scale": lambda draw: ({}, [draw(shapes()), ()]),
    "relu": _unary,
    "sigmoid": _unary,
    "tanh": _unary,
    "gelu": _unary,
    "exp": _unary,
    "neg": _unary,
    "abs": _unary,
    "sub": _binary,
    "max": _binary,
    "min": _binary,
    "broadcast": _broadcast,
    "transpose": _transpose,
    "matmul": _matmul,
    "conv2d": _conv2d,
    "enlarge": _enlarge,
    "pool2d": _pool2d,
    "concat": _concat,
    "split": _split,
    "reshape": _reshape,
    "ones": _filled,
    "zeros": _filled,
    "c_pool": _c_pool,
    "i_conv": _i_conv,
    "i_matmul": _i_matmul,
    "constant": _constant,
    "softmax": _softmax,
    "reduce": _reduce,
    "batchnorm": _batchnorm,
    "layernorm": _layernorm,
}


def test_every_forward_op_but_those_without_has_symbolic_semantics() -> None:
    """Rules are about forward ops; the backward ops of training steps (`Training`)
    have no axioms, and no rule mentions them, nor the ops `WITHOUT_SEMANTICS`."""
    forward = set(KERNELS) - ops_with(Training)
    assert set(symbolic.SEMANTICS) == forward - symbolic.WITHOUT_SEMANTICS == set(CASES)
    for op in ("embedding", "conv2d_grad_input", "compare"):
        with pytest.raises(symbolic.SymbolicError, match=op):
            symbolic.run_op(op, {}, [])


@pytest.mark.parametrize("op", sorted(CASES))
@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_symbolic_op_matches_reference_kernel(op: str, data: st.DataObject) -> None:
    attrs, operand_shapes = CASES[op](data.draw)
    try:
        infer(op, [TensorSig(s, DType.F32) for s in operand_shapes], attrs)
    except ShapeError:
        assume(False)
    rng = np.random.default_rng(data.draw(st.integers(0, 2**16)))
    inputs = [rng.integers(-4, 5, s).astype(np.float32) for s in operand_shapes]
    if op == "batchnorm":
        inputs[4] = np.abs(inputs[4]) + 1  # a variance
    expected = KERNELS[op](attrs, inputs)
    actual = run_numeric(op, attrs, inputs)
    assert len(actual) == len(expected)
    for got, want in zip(actual, expected, strict=True):
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_symbolic_conv_is_a_polynomial_in_the_inputs() -> None:
    x, w = symbolic.variables("x", (1, 1, 2, 2)), symbolic.variables("w", (1, 1, 2, 2))
    attrs = {"strides": (1, 1), "padding": "same", "activation": "none", "groups": 1}
    (out,) = symbolic.run_op("conv2d", attrs, [x, w])
    # Same padding puts the extra row and column at the bottom/right: the last output
    # element sees only x[1,1], under the top-left weight.
    assert str(out[0, 0, 1, 1]) == "x[0,0,1,1]*w[0,0,0,0]"
    assert z3.simplify(out[0, 0, 0, 0] - sum(x.flat[i] * w.flat[i] for i in range(4))) == 0


# ------------------------------------------------------------------------- validation

RULES = {
    rule.name: rule
    for rule in parse_rules(
        """
rule add-comm(x: 2, y: 2) {
  src {
    a = add(x, y)
    return a
  }
  tgt {
    a = add(y, x)
    return a
  }
}
rule matmul-assoc(x: 2, y: 2, z: 2) {
  src {
    a = matmul(x, y)
    b = matmul(a, z)
    return b
  }
  tgt {
    a = matmul(y, z)
    b = matmul(x, a)
    return b
  }
}
rule conv-relu(x: 4, w: 4) {
  src {
    a = conv2d{strides = $s, padding = $p, activation = "relu", groups = $g}(x, w)
    return a
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = "none", groups = $g}(x, w)
    b = relu(a)
    return b
  }
}
rule concat-split(x: 3, y: 3) {
  src {
    a = concat{axis = $a}(x, y)
    b, c = split{axis = $a, sizes = [dim(x, $a), dim(y, $a)]}(a)
    return b, c
  }
  tgt {
    return x, y
  }
}
"""
        + MATMUL_FUSION.strip()
        + "\n"
        + """rule max-pool-relu(x: 4) {
  src {
    a = relu(x)
    b = pool2d{kind = "max", kernel = $k, strides = $s, padding = $p}(a)
    return b
  }
  tgt {
    a = pool2d{kind = "max", kernel = $k, strides = $s, padding = $p}(x)
    b = relu(a)
    return b
  }
}
rule sigmoid-tanh(x: 1) {
  src {
    a = sigmoid(x)
    return a
  }
  tgt {
    a = tanh(x)
    return a
  }
}
rule conv-linear(x: 4, y: 4, w: 4) {
  where shape(x) == shape(y)
  src {
    a = add(x, y)
    b = conv2d{strides = $s, padding = $p, activation = $c, groups = 1}(a, w)
    return b
  }
  tgt {
    a = conv2d{strides = $s, padding = $p, activation = $c, groups = 1}(x, w)
    b = conv2d{strides = $s, padding = $p, activation = $c, groups = 1}(y, w)
    c = add(a, b)
    return c
  }
}
rule conv-enlarge(x: 4, w: 4) {
  src {
    a = conv2d{strides = $s, padding = "same", activation = $c, groups = 1}(x, w)
    return a
  }
  tgt {
    b = enlarge{kernel = [3, 3]}(w)
    a = conv2d{strides = $s, padding = "same", activation = $c, groups = 1}(x, b)
    return a
  }
}
rule concat-split-axes(x: 2, y: 2) {
  src {
    a = concat{axis = 0}(x, y)
    b, c = split{axis = 1, sizes = [dim(x, 0), dim(y, 0)]}(a)
    return b, c
  }
  tgt {
    return x, y
  }
}
"""
        + RELU_OVER_ADD
        + MATMUL_COMMUTES
    )
}


def _with_stride_one(rule: Rule) -> Rule:
    return replace(rule, preconditions=(Condition(Param("s"), Relation.EQ, (1, 1)),))


@pytest.mark.parametrize(
    "name", ["add-comm", "matmul-assoc", "conv-relu", "concat-split", "matmul-concat-fuse"]
)
def test_validation_accepts_true_rules(name: str) -> None:
    result = validate_rule(RULES[name], bound=2, max_instances=60)
    assert result.ok, result.summary()
    assert result.counterexample is None


@pytest.mark.parametrize(
    ("name", "where"),
    [
        ("relu-over-add", "src is"),  # a concrete difference: relu does not distribute
        ("conv-linear", '$c = "relu"'),  # linear only without the activation
        ("conv-enlarge", "$s = [2, 2]"),  # TASO's property needs stride 1 in tasoc
        ("matmul-commutes", "output 0"),
        ("concat-split-axes", "src shape"),
        ("sigmoid-tanh", "functions uninterpreted"),  # a z3 model, no concrete difference
    ],
)
def test_validation_rejects_false_rules_with_a_counterexample(name: str, where: str) -> None:
    result = validate_rule(RULES[name], bound=2, max_instances=60)
    assert not result.ok and result.failed > 0, result.summary()
    assert result.counterexample is not None
    assert where in str(result.counterexample), result.summary()
    # The counterexample is an instance of the rule.
    instance = result.counterexample.instance
    RULES[name].instantiate(dict(instance.shapes), dict(instance.params))


def test_enlarge_with_stride_one_is_valid() -> None:
    rule = _with_stride_one(RULES["conv-enlarge"])
    result = validate_rule(rule, bound=3, max_instances=40)
    assert result.ok, result.summary()
    assert {dict(i.params)["s"] for i in instances(rule, 2)} == {(1, 1)}


def test_properties_of_relu_itself_hold_and_are_flagged() -> None:
    """max-pool commutes with relu, but not with every function that maps 0 to 0 (the
    uninterpreted relu): the rule holds, and the summary says it needs relu's definition."""
    result = validate_rule(RULES["max-pool-relu"], bound=2, max_instances=10)
    assert result.ok and result.relu_defined > 0, result.summary()
    assert "need relu's definition" in result.summary()


def _brute_force(rule: Rule, bound: int) -> set[Instance]:
    found = set()
    names = rule.params
    for values in itertools.product(*(param_domain(rule, name) for name in names)):
        params = dict(zip(names, values, strict=True))
        per_input = [itertools.product(range(1, bound + 1), repeat=i.rank) for i in rule.inputs]
        for combo in itertools.product(*per_input):
            shapes = {i.name: s for i, s in zip(rule.inputs, combo, strict=True)}
            try:
                rule.instantiate(shapes, params)
            except RuleError:
                continue
            found.add(Instance(tuple(params.items()), tuple(shapes.items())))
    return found


@pytest.mark.parametrize("name", ["add-comm", "matmul-concat-fuse", "conv-relu"])
def test_instances_are_exactly_the_well_typed_shapes(name: str) -> None:
    rule = RULES[name]
    bound = 2 if name.startswith("conv") else 3
    listed = list(instances(rule, bound))
    assert len(listed) == len(set(listed))
    assert set(listed) == _brute_force(rule, bound)


def test_large_spaces_are_sampled_and_say_so() -> None:
    # 500 instances at bound 2: listed in full, then sampled evenly over the bindings.
    listed = validate_rule(RULES["conv-relu"], bound=2, max_instances=100)
    assert listed.ok and listed.checked == 100 and not listed.exhaustive
    assert listed.space == 500 and "sample of 500" in listed.summary()
    # 7020 at bound 3: too many to list for 5 checks, found by random descents.
    drawn = validate_rule(RULES["conv-relu"], bound=3, max_instances=5)
    assert drawn.ok and drawn.checked == 5 and drawn.space is None
    assert "sample of many" in drawn.summary()


def test_timeout_is_reported() -> None:
    result = validate_rule(RULES["matmul-assoc"], bound=3, timeout_s=0.0)
    assert not result.ok and not result.exhaustive and "timed out" in result.note


def test_rules_validate_in_parallel_in_order() -> None:
    names = ["relu-over-add", "add-comm"]
    results = validate_rules([RULES[n] for n in names], bound=2, jobs=2)
    assert [r.rule for r in results] == names
    assert [r.ok for r in results] == [False, True]
