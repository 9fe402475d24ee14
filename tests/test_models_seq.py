"""The sequence, recommendation and transformer models of the zoo.

For each of `rnn`, `brnn`, `rnntc`, `rnnlm`, `nmt`, `dlrm`, `candle_uno` and
`transformer`: the small variant builds, verifies, round-trips through text and runs
on the reference interpreter; the numerics match numpy code written from the papers'
equations (slicing gates and heads by hand rather than with the graph's split and
reshape); the default shapes have the sizes the papers state.
"""

from __future__ import annotations

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
from tasoc.models import ZooError, build_model, get_model, model_stats
from tasoc.models.dlrm import lower_triangle_pieces

SEQ_MODELS = ["brnn", "candle_uno", "dlrm", "nmt", "rnn", "rnnlm", "rnntc", "transformer"]

Arrays = dict[str, np.ndarray]


def _parse(text: str) -> ModuleOp:
    ctx = Context()
    for dialect in (builtin.Builtin, func.Func, Graph):
        ctx.load_dialect(dialect)
    return Parser(ctx, text).parse_module()


def _run(spec: str) -> tuple[ModuleOp, Arrays, list[np.ndarray]]:
    """Build `spec`, run it on the reference with `random_inputs(seed=0)`.

    Returns the module, the arguments by name (floats as float64 for checking in
    numpy, ids unchanged) and the outputs.
    """
    module = build_model(spec)
    args = arguments.random_inputs(module, seed=0)
    outputs = interpreter.run_reference(module, args)
    names = [info.name for info in arg_infos(entry_function(module))]
    by_name = {
        name: arg.astype(np.float64) if np.issubdtype(arg.dtype, np.floating) else arg
        for name, arg in zip(names, args, strict=True)
    }
    return module, by_name, outputs


def _op_counts(module: ModuleOp) -> dict[str, int]:
    counts: dict[str, int] = {}
    for op in entry_function(module).body.block.ops:
        if not isinstance(op, func.ReturnOp):
            short = op.name.removeprefix("graph.")
            counts[short] = counts.get(short, 0) + 1
    return counts


def _params(module: ModuleOp) -> dict[str, tuple[int, ...]]:
    return {a.name: a.sig.shape for a in arg_infos(entry_function(module)) if a.is_param}


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 1.0 / (1.0 + np.exp(-z))


def _softmax(z: np.ndarray) -> np.ndarray:
    e = np.exp(z - z.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _relu(z: np.ndarray) -> np.ndarray:
    return np.maximum(z, 0.0)


def _lstm(
    args: Arrays, prefix: str, xs: list[np.ndarray], h: np.ndarray, c: np.ndarray
) -> tuple[list[np.ndarray], tuple[np.ndarray, np.ndarray]]:
    """One LSTM layer by the textbook equations, gates sliced out of z by hand."""
    wx, wh, b = args[f"{prefix}_wx"], args[f"{prefix}_wh"], args[f"{prefix}_b"]
    n = wh.shape[0]
    outputs = []
    for x in xs:
        z = x @ wx + h @ wh + b
        i, f, g, o = (z[:, k * n : (k + 1) * n] for k in range(4))
        c = _sigmoid(f) * c + _sigmoid(i) * np.tanh(g)
        h = _sigmoid(o) * np.tanh(c)
        outputs.append(h)
    return outputs, (h, c)


def _steps(sequence: np.ndarray) -> list[np.ndarray]:
    return [sequence[:, t] for t in range(sequence.shape[1])]


# -------------------------------------------------------------- every model


@pytest.mark.parametrize("name", SEQ_MODELS)
def test_small_variant_builds_round_trips_and_runs(name: str) -> None:
    model = get_model(name)
    assert model.source and model.summary
    spec = model.spec(model.small)
    module = build_model(spec)
    module.verify()
    text = str(module)
    assert str(_parse(text)) == text
    arg_names = [a.name for a in arg_infos(entry_function(module))]
    assert len(arg_names) == len(set(arg_names)), "argument names must be unique"

    _, _, outputs = _run(spec)
    expected = [sig_of(v.type).shape for v in return_values(entry_function(module))]
    assert [out.shape for out in outputs] == expected
    assert all(np.isfinite(out).all() for out in outputs)


@pytest.mark.parametrize(
    ("name", "ops", "params"),
    [
        # 14 ops per LSTM step (see rnn.py), 40 steps, plus the sequence plumbing
        ("rnn", 8 * 40 * 14 + 5, 8 * (4 * 8192 * (8192 + 8192) + 4 * 8192)),
        (
            "brnn",
            4 * 2 * 40 * 14 + 4 * 40 + 5,
            2 * (4 * 8192 * 2 * 8192 + 4 * 8192) + 3 * 2 * (4 * 8192 * 3 * 8192 + 4 * 8192),
        ),
        ("rnntc", 4 * 40 * 14 + 6, 18765 * 1024 + 4 * (4 * 1024 * 2048 + 4096) + 1024 * 2),
        ("rnnlm", 2 * 40 * 14 + 8, 2 * 10000 * 2048 + 2 * (4 * 2048 * 4096 + 8192)),
        (
            "nmt",
            4 * 40 * 14 + 21,
            3 * 20480 * 1024 + 4 * (4 * 1024 * 2048 + 4096) + 3 * 1024 * 1024,
        ),
        ("dlrm", 48, 26 * 1_000_000 * 64 + 301_568 + 2_523_136),
        ("candle_uno", 38, 21_263_000),
        ("transformer", 12 * 23 + 2, 12 * (12 * 1024 * 1024 + 4 * 1024) + 1024),
    ],
)
def test_default_sizes(name: str, ops: int, params: int) -> None:
    """Default shapes are the papers'; building them (not running) stays cheap."""
    assert tuple(model_stats(build_model(name))) == (ops, params)


# ------------------------------------------------------------------- LSTM models


def test_one_lstm_step_by_hand() -> None:
    _, args, (out,) = _run("rnn?layers=1&hidden=5&seq=1&batch=3")
    x = args["x"][:, 0]
    z = x @ args["l0_wx"] + args["l0_b"]  # h0 = c0 = 0
    i, f, g, o = np.split(z, 4, axis=1)
    del f  # the forget gate multiplies c0 = 0
    h = _sigmoid(o) * np.tanh(_sigmoid(i) * np.tanh(g))
    np.testing.assert_allclose(out[:, 0], h, rtol=1e-5, atol=1e-6)


def test_rnn_stacks_layers_over_time() -> None:
    _, args, (out,) = _run("rnn?layers=3&hidden=6&seq=5&batch=2")
    zero = np.zeros((2, 6))
    xs = _steps(args["x"])
    for layer in range(3):
        xs, _ = _lstm(args, f"l{layer}", xs, zero, zero)
    np.testing.assert_allclose(out, np.stack(xs, axis=1), rtol=1e-4, atol=1e-5)


def test_rnn_shares_weights_across_steps() -> None:
    module = build_model("rnn?layers=2&hidden=4&seq=7&batch=1")
    assert _params(module) == {
        f"l{layer}_{kind}": shape
        for layer in range(2)
        for kind, shape in (("wx", (4, 16)), ("wh", (4, 16)), ("b", (16,)))
    }
    block = entry_function(module).body.block
    wx = next(a for a in block.args if a.name_hint == "l1_wx")
    assert len(list(wx.uses)) == 7


def test_brnn_joins_a_forward_and_a_backward_pass() -> None:
    _, args, (out,) = _run("brnn?layers=2&hidden=3&seq=4&batch=2")
    zero = np.zeros((2, 3))
    xs = _steps(args["x"])
    for layer in range(2):
        forward, _ = _lstm(args, f"l{layer}_fw", xs, zero, zero)
        backward, _ = _lstm(args, f"l{layer}_bw", xs[::-1], zero, zero)
        xs = [np.concatenate([f, b], axis=1) for f, b in zip(forward, backward[::-1], strict=True)]
    assert out.shape == (2, 4, 6)
    np.testing.assert_allclose(out, np.stack(xs, axis=1), rtol=1e-4, atol=1e-5)
    assert _params(build_model("brnn?layers=2&hidden=3&seq=4&batch=2"))["l1_fw_wx"] == (6, 12)


def test_rnntc_classifies_the_last_step() -> None:
    _, args, (out,) = _run("rnntc?layers=2&hidden=5&embed=3&vocab=11&classes=4&seq=3&batch=2")
    assert args["ids"].dtype == np.int32
    zero = np.zeros((2, 5))
    xs = _steps(args["embedding"][args["ids"]])
    for layer in range(2):
        xs, _ = _lstm(args, f"l{layer}", xs, zero, zero)
    np.testing.assert_allclose(out, _softmax(xs[-1] @ args["classifier"]), rtol=1e-4, atol=1e-6)


def test_rnnlm_predicts_every_step() -> None:
    _, args, (out,) = _run("rnnlm?layers=2&hidden=4&embed=3&vocab=9&seq=3&batch=2")
    zero = np.zeros((2, 4))
    xs = _steps(args["embedding"][args["ids"]])
    for layer in range(2):
        xs, _ = _lstm(args, f"l{layer}", xs, zero, zero)
    expected = _softmax(np.stack(xs, axis=1) @ args["softmax_w"])
    assert out.shape == (2, 3, 9)
    np.testing.assert_allclose(out, expected, rtol=1e-4, atol=1e-6)


def test_nmt_decoder_continues_the_encoder_and_attends_over_it() -> None:
    _, args, (out,) = _run("nmt?layers=2&hidden=4&embed=3&vocab=7&seq=3&batch=2")
    zero = np.zeros((2, 4))
    source = _steps(args["src_embedding"][args["src_ids"]])
    target = _steps(args["tgt_embedding"][args["tgt_ids"]])
    finals = []
    for layer in range(2):
        source, final = _lstm(args, f"enc{layer}", source, zero, zero)
        finals.append(final)
    for layer in range(2):
        target, _ = _lstm(args, f"dec{layer}", target, *finals[layer])
    expected = []
    for h_t in target:  # Luong's general attention, one decoder step at a time
        query = h_t @ args["attn_wa"]
        weights = _softmax(np.stack([(query * h_s).sum(axis=1) for h_s in source], axis=1))
        context = sum(weights[:, [s]] * h_s for s, h_s in enumerate(source))
        attentional = np.tanh(np.concatenate([context, h_t], axis=1) @ args["attn_wc"])
        expected.append(_softmax(attentional @ args["softmax_w"]))
    np.testing.assert_allclose(out, np.stack(expected, axis=1), rtol=1e-4, atol=1e-6)


def test_nmt_paper_shapes() -> None:
    params = _params(build_model("nmt"))
    assert {name for name in params if name.endswith("_wx")} == {
        "enc0_wx",
        "enc1_wx",
        "dec0_wx",
        "dec1_wx",
    }
    assert params["enc1_wh"] == (1024, 4096)
    assert params["softmax_w"] == (1024, 20480)


# ---------------------------------------------------------------------------- DLRM


@pytest.mark.parametrize("features", [2, 3, 27])
def test_lower_triangle_pieces_keep_exactly_the_strict_lower_triangle(features: int) -> None:
    sizes = lower_triangle_pieces(features)
    assert sum(sizes) == features * features and min(sizes) >= 1
    cuts = np.cumsum(sizes)[:-1]
    flat_index = np.arange(features * features)
    kept = np.concatenate(np.split(flat_index, cuts)[1::2])
    rows, cols = np.tril_indices(features, k=-1)
    np.testing.assert_array_equal(kept, rows * features + cols)


def test_dlrm_computes_dot_interaction() -> None:
    spec = "dlrm?tables=4&rows=6&embed=3&dense=5&bottom_width=7&top_width=5&top_layers=2&batch=3"
    _, args, (out,) = _run(spec)
    bottom = args["dense"]
    for index in range(3):  # bottom_layers=2 of width 7, then one of width embed
        bottom = _relu(bottom @ args[f"bot_w{index}"])
    ids = args["sparse_ids"]
    assert ids.dtype == np.int32 and ids.shape == (3, 4)
    vectors = np.stack(
        [bottom, *(args[f"emb{t}"][ids[:, t]] for t in range(4))], axis=1
    )  # [batch, 5, 3]
    dots = vectors @ vectors.transpose(0, 2, 1)
    rows, cols = np.tril_indices(5, k=-1)
    top = np.concatenate([bottom, dots[:, rows, cols]], axis=1)
    assert top.shape == (3, 3 + 10)
    for index in range(2):
        top = _relu(top @ args[f"top_w{index}"])
    np.testing.assert_allclose(out, _sigmoid(top @ args["top_out"]), rtol=1e-4, atol=1e-6)


def test_dlrm_defaults_are_flexflows_criteo_configuration() -> None:
    params = _params(build_model("dlrm"))
    assert [params[f"bot_w{i}"] for i in range(3)] == [(13, 512), (512, 512), (512, 64)]
    # 64 + 27 * 26 / 2 = 415 interaction features
    assert [params[f"top_w{i}"] for i in range(3)] + [params["top_out"]] == [
        (415, 1024),
        (1024, 1024),
        (1024, 1024),
        (1024, 1),
    ]
    tables = {name: shape for name, shape in params.items() if name.startswith("emb")}
    assert len(tables) == 26 and set(tables.values()) == {(1_000_000, 64)}


# ---------------------------------------------------------------------- CANDLE Uno


@pytest.mark.parametrize("shared", [True, False])
def test_candle_uno_encodes_each_feature_and_regresses(shared: bool) -> None:
    spec = (
        "candle_uno?feature_width=4&feature_layers=2&top_width=3&top_layers=2"
        f"&cell_features=5&drug_descriptors=6&drug_fingerprints=7&batch=2"
        f"&shared_drug_encoders={str(shared).lower()}"
    )
    _, args, (out,) = _run(spec)

    def encode(x: np.ndarray, prefix: str) -> np.ndarray:
        for index in range(2):
            x = _relu(x @ args[f"{prefix}_w{index}"])
        return x

    drug_prefix = "drug_{kind}" if shared else "{drug}_{kind}"
    encoded = [encode(args["cell_rnaseq"], "cell_rnaseq"), args["dose1"], args["dose2"]]
    for drug in ("drug1", "drug2"):
        for kind in ("descriptors", "fingerprints"):
            prefix = drug_prefix.format(drug=drug, kind=kind)
            encoded.append(encode(args[f"{drug}_{kind}"], prefix))
    top = encode(np.concatenate(encoded, axis=1), "top")
    np.testing.assert_allclose(out, top @ args["top_out"], rtol=1e-4, atol=1e-6)


def test_candle_uno_sizes_match_the_thesis() -> None:
    module = build_model("candle_uno")
    infos = arg_infos(entry_function(module))
    widths = {a.name: a.sig.shape[1] for a in infos if not a.is_param}
    assert widths == {
        "cell_rnaseq": 942,
        "dose1": 1,
        "dose2": 1,
        "drug1_descriptors": 5270,
        "drug1_fingerprints": 2048,
        "drug2_descriptors": 5270,
        "drug2_fingerprints": 2048,
    }
    params = _params(module)
    assert params["top_w0"] == (5 * 1000 + 2, 1000), "five encodings and two doses"
    separate = model_stats(build_model("candle_uno?shared_drug_encoders=false")).params
    assert separate - model_stats(module).params == (5270 + 2048) * 1000 + 2 * 2 * 1000 * 1000


# --------------------------------------------------------------------- Transformer


def _layernorm(x: np.ndarray, gamma: np.ndarray, beta: np.ndarray) -> np.ndarray:
    centred = x - x.mean(-1, keepdims=True)
    return centred / np.sqrt(centred.var(-1, keepdims=True) + 1e-5) * gamma + beta


def _attention(args: Arrays, prefix: str, queries: np.ndarray, memory: np.ndarray) -> np.ndarray:
    heads = 2
    q, k, v = (
        queries @ args[f"{prefix}_wq"],
        memory @ args[f"{prefix}_wk"],
        memory @ args[f"{prefix}_wv"],
    )
    size = q.shape[-1] // heads
    per_head = []
    for h in range(heads):
        cols = slice(h * size, (h + 1) * size)
        scores = q[..., cols] @ np.swapaxes(k[..., cols], -1, -2) / math.sqrt(size)
        per_head.append(_softmax(scores) @ v[..., cols])
    return np.concatenate(per_head, axis=-1) @ args[f"{prefix}_wo"]


def test_transformer_encoder_decoder_numerics() -> None:
    spec = "transformer?layers=2&decoder_layers=2&hidden=8&heads=2&seq=3&batch=2"
    _, args, (out,) = _run(spec)

    def sublayer(x: np.ndarray, update: np.ndarray, norm: str) -> np.ndarray:
        return _layernorm(x + update, args[f"{norm}_gamma"], args[f"{norm}_beta"])

    def ffn(x: np.ndarray, prefix: str) -> np.ndarray:
        return _relu(x @ args[f"{prefix}_ffn_w1"]) @ args[f"{prefix}_ffn_w2"]

    x = args["x"]
    for layer in range(2):
        p = f"enc{layer}"
        x = sublayer(x, _attention(args, p, x, x), f"{p}_ln1")
        x = sublayer(x, ffn(x, p), f"{p}_ln2")
    y = args["y"]
    for layer in range(2):
        p = f"dec{layer}"
        y = sublayer(y, _attention(args, f"{p}_self", y, y), f"{p}_ln1")
        y = sublayer(y, _attention(args, f"{p}_cross", y, x), f"{p}_ln2")
        y = sublayer(y, ffn(y, p), f"{p}_ln3")
    np.testing.assert_allclose(out, y @ args["head"], rtol=1e-4, atol=1e-5)


def test_transformer_encoder_only_by_default() -> None:
    module = build_model("transformer?layers=2&hidden=8&heads=2&seq=3&batch=1")
    names = [a.name for a in arg_infos(entry_function(module)) if not a.is_param]
    assert names == ["x"]
    assert _op_counts(module)["softmax"] == 2 and _op_counts(module)["relu"] == 2


def test_transformer_at_tensoropt_size() -> None:
    """TensorOpt's Table 1: 9.7 GB of parameters; 12 layers at hidden 4096 in f32."""
    params = model_stats(build_model("transformer?hidden=4096")).params
    bytes_per_f32 = 4
    assert params * bytes_per_f32 == pytest.approx(9.7e9, rel=0.01)


# ---------------------------------------------------------------------- option errors


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        ("rnn?layers=0", r"zoo:rnn: option 'layers' must be positive, got 0"),
        ("brnn?seq=0", r"zoo:brnn: option 'seq' must be positive, got 0"),
        ("rnntc?classes=0", r"zoo:rnntc: option 'classes' must be positive, got 0"),
        ("rnnlm?vocab=-1", r"zoo:rnnlm: option 'vocab' must be positive, got -1"),
        ("nmt?embed=0", r"zoo:nmt: option 'embed' must be positive, got 0"),
        ("dlrm?tables=0", r"zoo:dlrm: option 'tables' must be positive, got 0"),
        ("dlrm?rows=1.5", r"zoo:dlrm: option 'rows' expects an integer, got '1.5'"),
        ("candle_uno?top_layers=0", r"option 'top_layers' must be positive, got 0"),
        (
            "candle_uno?shared_drug_encoders=maybe",
            r"option 'shared_drug_encoders' expects a boolean \(true/false\), got 'maybe'",
        ),
        ("transformer?hidden=100", r"zoo:transformer: option 'hidden' \(100\) must be divisible"),
        ("transformer?decoder_layers=-1", r"option 'decoder_layers' must be non-negative"),
        ("transformer?ffn_expansion=0", r"option 'ffn_expansion' must be positive, got 0"),
        ("rnn?hiden=4", r"zoo:rnn: unknown option 'hiden'; valid options: layers, hidden"),
    ],
)
def test_option_errors(spec: str, expected: str) -> None:
    with pytest.raises(ZooError, match=expected) as info:
        build_model(spec)
    assert "\n" not in str(info.value)
