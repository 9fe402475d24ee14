"""The model zoo: registry, specs and their errors, each graph's structure and its numerics."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from xdsl.context import Context
from xdsl.dialects import builtin, func
from xdsl.dialects.builtin import ModuleOp
from xdsl.parser import Parser

from tasoc.backends import arguments
from tasoc.backends.numpy import interpreter
from tasoc.ir.graph import Graph, sig_of
from tasoc.ir.program import arg_infos, entry_function, return_values
from tasoc.ir.shapes import DType, TensorSig
from tasoc.models import (
    ZooError,
    ZooModel,
    build_model,
    get_model,
    list_models,
    model_stats,
    parse_spec,
    register,
    registry,
    stats_table,
)

MODELS = list_models()
MODEL_IDS = [model.name for model in MODELS]


def _parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def _args(module: ModuleOp) -> dict[str, tuple[TensorSig, bool]]:
    return {a.name: (a.sig, a.is_param) for a in arg_infos(entry_function(module))}


def _output_sigs(module: ModuleOp) -> list[TensorSig]:
    return [sig_of(value.type) for value in return_values(entry_function(module))]


def _op_names(module: ModuleOp) -> list[str]:
    body = entry_function(module).body.block.ops
    return [op.name for op in body if not isinstance(op, func.ReturnOp)]


# ------------------------------------------------------------------------ registry


def test_zoo_has_the_first_models() -> None:
    assert {"bert", "nasrnn"} <= set(MODEL_IDS)
    assert sorted(MODEL_IDS) == MODEL_IDS


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
def test_model_metadata(model: ZooModel) -> None:
    assert model.summary and "\n" not in model.summary
    assert model.source
    assert model.small, "every model needs a small variant for tests and docs"
    assert set(model.small) <= set(model.defaults)
    assert get_model(model.name) is model


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
def test_small_variant_builds_verifies_and_round_trips(model: ZooModel) -> None:
    module = build_model(model.spec(model.small))
    module.verify()
    text = str(module)
    reparsed = _parse(text)
    reparsed.verify()
    assert str(reparsed) == text
    names = [a.name for a in arg_infos(entry_function(module))]
    assert len(names) == len(set(names)), "argument names must be unique"
    stats = model_stats(module)
    assert stats.ops > 0 and stats.params > 0


def test_register_reads_options_from_the_signature(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    seen: dict[str, object] = {}

    @register(source="a test", small={"width": 2})
    def toy(*, width: int = 4, rate: float = 0.5, fused: bool = False, kind: str = "a") -> ModuleOp:
        """A toy model.

        More text that is not part of the summary.
        """
        seen.update(width=width, rate=rate, fused=fused, kind=kind)
        return build_model("nasrnn?hidden=2&length=1")

    model = get_model("toy")
    assert model.summary == "A toy model."
    assert dict(model.defaults) == {"width": 4, "rate": 0.5, "fused": False, "kind": "a"}
    assert model.option_types() == {"width": int, "rate": float, "fused": bool, "kind": str}

    build_model("zoo:toy?width=7&rate=1e-3&fused=TRUE&kind=b=c")
    assert seen == {"width": 7, "rate": 1e-3, "fused": True, "kind": "b=c"}
    build_model("toy?fused=off")
    assert seen == {"width": 4, "rate": 0.5, "fused": False, "kind": "a"}
    assert model.spec({"fused": True, "width": 3}) == "toy?fused=true&width=3"

    with pytest.raises(ValueError, match="registered twice"):
        register(source="again")(toy)
    with pytest.raises(TypeError, match="keyword-only"):

        @register(source="x")
        def positional(width: int = 1) -> ModuleOp:
            """Positional option."""
            raise AssertionError

    with pytest.raises(TypeError, match="needs an int, float, bool or str default"):

        @register(source="x")
        def no_default(*, width: int) -> ModuleOp:
            """No default."""
            raise AssertionError


# --------------------------------------------------------------------- spec parsing


def test_options_are_parsed_to_the_default_type() -> None:
    model, options = parse_spec("zoo:bert?layers=2&hidden=256")
    assert model.name == "bert"
    assert options == {"layers": 2, "hidden": 256}
    assert all(type(v) is int for v in options.values())
    assert parse_spec("nasrnn")[1] == {}
    assert parse_spec("nasrnn?")[1] == {}


def test_spec_options_reach_the_graph() -> None:
    module = build_model("bert?layers=2&hidden=256&heads=4&seq=8&batch=3")
    args = _args(module)
    assert args["x"] == (TensorSig((3, 8, 256), DType.F32), False)
    assert args["l1_wq"][1] and args["l1_wq"][0].shape == (256, 256)
    assert "l2_wq" not in args
    assert [s.shape for s in _output_sigs(module)] == [(3, 8, 256)]


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("lenet", r"unknown zoo model 'lenet'; known models: .*bert.*nasrnn"),
        ("", r"unknown zoo model ''; known models: .*bert"),
        ("bert?layer=2", r"zoo:bert: unknown option 'layer'; valid options: layers, hidden, heads"),
        ("bert?layers=two", r"zoo:bert: option 'layers' expects an integer, got 'two'"),
        ("bert?layers=2.5", r"option 'layers' expects an integer, got '2.5'"),
        ("bert?layers", r"zoo:bert: expected 'option=value', got 'layers'"),
        ("bert?layers=2&&seq=4", r"expected 'option=value', got ''"),
        ("bert?layers=2&layers=3", r"option 'layers' is given twice"),
        ("bert?hidden=100&heads=16", r"zoo:bert: option 'hidden' \(100\) must be divisible"),
        ("bert?layers=0", r"zoo:bert: option 'layers' must be positive, got 0"),
        ("bert?heads=-2", r"option 'heads' must be positive, got -2"),
        ("nasrnn?length=0", r"zoo:nasrnn: option 'length' must be positive, got 0"),
        ("nasrnn?hidden=", r"option 'hidden' expects an integer, got ''"),
    ],
)
def test_spec_errors_are_one_clear_line(spec: str, expected: str) -> None:
    with pytest.raises(ZooError, match=expected) as info:
        build_model(spec)
    assert "\n" not in str(info.value)
    assert isinstance(info.value, ValueError)


def test_bool_options_reject_other_words(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register(source="a test")
    def flags(*, fused: bool = True) -> ModuleOp:
        """Flags."""
        raise AssertionError("not reached")

    with pytest.raises(ZooError, match=r"option 'fused' expects a boolean \(true/false\), got 'y'"):
        build_model("flags?fused=y")


def test_build_rejects_unknown_keyword_options() -> None:
    with pytest.raises(ZooError, match="unknown option 'depth'"):
        get_model("bert").build(depth=3)


# --------------------------------------------------------------------------- models


def test_bert_defaults_are_tasos_evaluation_shapes() -> None:
    module = build_model("bert")
    args = _args(module)
    assert args["x"][0].shape == (1, 64, 1024)
    assert {name for name in args if name.endswith("_wq")} == {f"l{i}_wq" for i in range(8)}
    assert args["l0_ffn_w1"][0].shape == (1024, 4096)
    ops = _op_names(module)
    # one scalar 1/sqrt(head_dim) shared by all layers
    assert ops.count("graph.constant") == 1
    assert ops.count("graph.softmax") == 8 and ops.count("graph.layernorm") == 16


def test_bert_attention_reaches_the_output() -> None:
    """TASO's script leaves attention dead; here every softmax feeds the result."""
    module = build_model("bert?layers=2&hidden=32&heads=4&seq=4")
    used: set[object] = set(return_values(entry_function(module)))
    live_ops: set[str] = set()
    for op in reversed(list(entry_function(module).body.block.ops)):
        if any(r in used for r in op.results):
            live_ops.add(op.name)
            used.update(op.operands)
    assert {"graph.softmax", "graph.scale", "graph.gelu"} <= live_ops
    wq_args = [a for a in entry_function(module).body.block.args if a.name_hint == "l0_wq"]
    assert wq_args and wq_args[0] in used


def test_bert_scale_is_inverse_sqrt_head_dim() -> None:
    module = build_model("bert?layers=1&hidden=64&heads=4&seq=4")
    (constant,) = [
        op for op in entry_function(module).body.block.ops if op.name == "graph.constant"
    ]
    assert constant.py_attrs()["value"].values == pytest.approx((0.25,))  # 1/sqrt(16)


def test_bert_size_grows_linearly_in_layers() -> None:
    stats = [
        model_stats(build_model(f"bert?layers={n}&hidden=32&heads=4&seq=4")) for n in (1, 2, 3)
    ]
    op_steps = {b.ops - a.ops for a, b in itertools.pairwise(stats)}
    assert len(op_steps) == 1 and op_steps.pop() > 20
    hidden = 32
    per_layer = 12 * hidden * hidden + 4 * hidden  # Q, K, V, O, FFN 2 x 4h^2, two norms
    assert [s.params for s in stats] == [n * per_layer for n in (1, 2, 3)]


def test_nasrnn_defaults_and_per_step_structure() -> None:
    module = build_model("nasrnn")
    args = _args(module)
    inputs = [name for name, (_, is_param) in args.items() if not is_param]
    assert inputs == ["x0", "x1", "x2", "x3", "x4", "h0"]
    assert all(args[name][0].shape == (1, 512) for name in inputs)
    weights = [sig.shape for sig, is_param in args.values() if is_param]
    assert weights == [(512, 512)] * 16, "weights are shared across the 5 steps"
    ops = _op_names(module)
    per_step = {name: ops.count(name) // 5 for name in set(ops)}
    assert all(ops.count(name) % 5 == 0 for name in set(ops))
    # 8 branches x (2 matmuls + 1 add), then the searched tree: 4 + 1 + 1 + 1 binary ops,
    # 8 + 6 activations and the final tanh
    assert per_step == {
        "graph.matmul": 16,
        "graph.add": 8 + 3,
        "graph.mul": 4,
        "graph.relu": 2,
        "graph.sigmoid": 5,
        "graph.tanh": 8,
    }
    assert [s.shape for s in _output_sigs(module)] == [(1, 512)]


def test_nasrnn_steps_chain_through_the_hidden_state() -> None:
    module = build_model("nasrnn?hidden=4&length=3")
    block = entry_function(module).body.block
    h0 = next(a for a in block.args if a.name_hint == "h0")
    # only the first step reads h0; later steps read the previous step's tanh
    readers = {use.operation.name for use in h0.uses}
    assert readers == {"graph.matmul"} and len(list(h0.uses)) == 8
    stats = [model_stats(build_model(f"nasrnn?hidden=4&length={n}")) for n in (1, 2, 3)]
    assert stats[2].ops - stats[1].ops == stats[1].ops - stats[0].ops == 46
    assert {s.params for s in stats} == {16 * 4 * 4}


def test_stats_table_lists_default_and_small_variants() -> None:
    table = stats_table()
    lines = table.splitlines()
    assert lines[0].startswith("| model | variant |")
    assert len(lines) == 2 + 2 * len(MODELS)
    small_bert = get_model("bert").spec(get_model("bert").small)
    row = next(line for line in lines if f"`zoo:{small_bert}`" in line)
    stats = model_stats(build_model(small_bert))
    assert row.endswith(f"| {stats.ops} | {stats.params:,} |")


# --------------------------------------------------------------- reference backend


def _erf_gelu(x: np.ndarray) -> np.ndarray:
    return 0.5 * x * (1.0 + np.vectorize(math.erf)(x / math.sqrt(2.0)))


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt(centred.var(-1, keepdims=True) + 1e-5) * gamma + beta


def _softmax(x: np.ndarray) -> np.ndarray:
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _run_on_reference(spec: str) -> tuple[ModuleOp, dict[str, np.ndarray], list[np.ndarray]]:
    """Build `spec` and run it on the reference interpreter with random arguments.

    Returns the module, the arguments by name (as float64, for checking in numpy)
    and the outputs.
    """
    module = build_model(spec)
    args = arguments.random_inputs(module, seed=1)
    outputs = interpreter.run_reference(module, args)
    names = [a.name for a in arg_infos(entry_function(module))]
    by_name = {n: np.asarray(a, np.float64) for n, a in zip(names, args, strict=True)}
    return module, by_name, outputs


@pytest.mark.parametrize("model", MODELS, ids=MODEL_IDS)
def test_small_variant_runs_on_the_reference_with_finite_outputs(model: ZooModel) -> None:
    module, _, outputs = _run_on_reference(model.spec(model.small))
    assert [np.shape(out) for out in outputs] == [sig.shape for sig in _output_sigs(module)]
    assert all(np.isfinite(out).all() for out in outputs)


def test_bert_computes_multi_head_attention_and_feed_forward() -> None:
    """Per-head attention written head by head with slices, independent of the
    reshape/transpose formulation in the graph."""
    batch, seq, hidden, heads = 2, 5, 12, 3
    spec = f"bert?layers=2&hidden={hidden}&heads={heads}&seq={seq}&batch={batch}"
    _, args, (output,) = _run_on_reference(spec)
    head = hidden // heads
    x = args["x"]
    for layer in range(2):
        w = {k.removeprefix(f"l{layer}_"): v for k, v in args.items() if k.startswith(f"l{layer}_")}
        q, k, v = x @ w["wq"], x @ w["wk"], x @ w["wv"]
        per_head = []
        for h in range(heads):
            cols = slice(h * head, (h + 1) * head)
            scores = q[..., cols] @ np.swapaxes(k[..., cols], -1, -2) / math.sqrt(head)
            per_head.append(_softmax(scores) @ v[..., cols])
        attended = np.concatenate(per_head, axis=-1) @ w["wo"]
        x = _layernorm(x + attended, w["ln1_gamma"], w["ln1_beta"])
        ffn = _erf_gelu(x @ w["ffn_w1"]) @ w["ffn_w2"]
        x = _layernorm(x + ffn, w["ln2_gamma"], w["ln2_beta"])
    np.testing.assert_allclose(output, x, rtol=1e-4, atol=1e-4)


def test_nasrnn_computes_the_searched_cell() -> None:
    length = 3
    _, args, (output,) = _run_on_reference(f"nasrnn?hidden=6&length={length}&batch=2")

    def sigmoid(z: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-z))

    def relu(z: np.ndarray) -> np.ndarray:
        return np.maximum(z, 0.0)

    tanh = np.tanh
    h = args["h0"]
    for step in range(length):
        t = [args[f"x{step}"] @ args[f"wx{i}"] + h @ args[f"wh{i}"] for i in range(8)]
        a, b = relu(t[0]) + sigmoid(t[3]), sigmoid(t[1]) + tanh(t[2])
        c, d = sigmoid(t[4]) * tanh(t[5]), sigmoid(t[6]) * relu(t[7])
        h = tanh(tanh(sigmoid(b) + tanh(c)) * tanh(tanh(a) * tanh(d)))
    np.testing.assert_allclose(output, h, rtol=1e-4, atol=1e-5)
