"""Training steps from the zoo (`zoo:NAME?...&train=OPTIMIZER`) and the README's
training example, run through the CLI so that the README cannot rot."""

from __future__ import annotations

import re
import shlex
from pathlib import Path
from typing import get_args

import pytest
from conftest import assert_one_line_error
from xdsl.context import Context
from xdsl.dialects.builtin import ModuleOp

from tasoc.driver.main import TRAINING_EXAMPLE
from tasoc.driver.sources import build_zoo_model
from tasoc.ir.program import entry_function
from tasoc.ir.training import training_signature
from tasoc.models import (
    TRAINING_LOSSES,
    TRAINING_OPTIMIZERS,
    TrainingSpec,
    ZooError,
    ZooModel,
    build_model,
    list_models,
    parse_request,
    parse_spec,
    register,
    registry,
)
from tasoc.passes.autodiff import AutodiffFailed, AutodiffPass
from tasoc.passes.autodiff.losses import Loss
from tasoc.passes.autodiff.optimizers import Optimizer

REPO = Path(__file__).resolve().parent.parent
README = REPO / "README.md"

CLASSIFIERS = {
    "alexnet",
    "vgg16",
    "vgg19",
    "resnet50",
    "resnet101",
    "resnext50",
    "wresnet",
    "inception_v3",
    "inception_v4",
    "nasnet",
    "squeezenet",
    "rnntc",
    "rnnlm",
    "nmt",
    "gcn",
    "sage",
    "gin",
    "gat",
}
"""The models whose output is a batch of class scores on the last axis (a GNN's batch
is its vertices)."""

CHECKED_SMALL = [
    "alexnet",
    "bert",
    "brnn",
    "candle_uno",
    "dlrm",
    "nasrnn",
    "nmt",
    "resnext50",
    "rnn",
    "rnnlm",
    "resnet50",
    "rnntc",
    "squeezenet",
    "transformer",
    "vgg19",
]
"""Models whose small variant's `train=sgd` step is run with `--check` (JAX against the
numpy reference). All 22 take about 180 s on 2 cores, so this is a subset (about 55 s):
every model family and both default losses, resnet50 and resnext50 for the batchnormed
residual networks. Left out: inception_v3/v4, nasnet, nasnet_a (14-28 s each: their
steps have 1,000-3,000 ops), resnet101 and wresnet (resnet50's blocks again). Every
model's step is still built and its signature checked below."""


def _training_spec(model: ZooModel, training: str = "train=sgd") -> str:
    """`zoo:` spec of `model`'s small variant with the training keys `training`."""
    return f"zoo:{model.spec(dict(model.small))}{'&' if model.small else '?'}{training}"


# ------------------------------------------------------------------------ parsing


def test_training_keys_match_the_autodiff_pass() -> None:
    # The registry cannot import the pass (models depend on the IR only), so it keeps
    # its own lists of the pass's choices; they must stay the same.
    assert get_args(Loss) == TRAINING_LOSSES
    assert get_args(Optimizer) == TRAINING_OPTIMIZERS


def test_parse_request_separates_training_keys_from_model_options() -> None:
    request = parse_request("zoo:bert?layers=2&train=adam&hidden=64&lr=0.5&loss=sum")
    assert request.model.name == "bert"
    assert request.options == {"layers": 2, "hidden": 64}
    assert request.training == TrainingSpec("adam", "sum", 0.5)
    assert request.training.pass_options() == {"optimizer": "adam", "loss": "sum", "lr": 0.5}
    assert parse_request("bert?layers=2").training is None


@pytest.mark.parametrize("model", list_models(), ids=lambda model: model.name)
def test_each_model_has_its_default_training_loss(model: ZooModel) -> None:
    expected = "softmax-cross-entropy" if model.name in CLASSIFIERS else "mse"
    assert model.loss == expected
    request = parse_request(f"{model.name}?train=momentum")
    assert request.training == TrainingSpec("momentum", expected, None)
    assert request.training.pass_options() == {"optimizer": "momentum", "loss": expected}


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("train=rmsprop", "unknown optimizer 'rmsprop' for 'train='; expected one of sgd,"),
        ("train=sgd&loss=hinge", "unknown loss 'hinge'; expected one of sum, mse,"),
        ("train=sgd&lr=0", "option 'lr' must be a positive finite number, got '0'"),
        ("train=sgd&lr=-0.1", "option 'lr' must be a positive finite number, got '-0.1'"),
        ("train=sgd&lr=inf", "option 'lr' must be a positive finite number, got 'inf'"),
        ("train=sgd&lr=nan", "option 'lr' must be a positive finite number, got 'nan'"),
        ("train=sgd&lr=fast", "option 'lr' must be a positive finite number, got 'fast'"),
        ("lr=0.1", "'lr=' needs 'train=OPTIMIZER' (one of sgd, momentum, adam)"),
        ("loss=mse&hidden=4", "'loss=' needs 'train=OPTIMIZER'"),
        ("train=sgd&train=adam", "option 'train' is given twice"),
    ],
)
def test_bad_training_keys_are_one_line_errors(tasoc, query: str, message: str) -> None:
    with pytest.raises(ZooError, match=re.escape(f"zoo:nasrnn: {message}")):
        parse_request(f"nasrnn?{query}")
    assert_one_line_error(tasoc("opt", f"zoo:nasrnn?{query}"), f"zoo:nasrnn: {message}")


def test_register_checks_the_training_loss_and_reserved_keys(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(ValueError, match="unknown training loss 'l1'"):

        @register(source="x", loss="l1")
        def bad_loss(*, width: int = 1) -> ModuleOp:
            """Bad loss."""
            raise AssertionError

    with pytest.raises(ValueError, match=r"options \['lr', 'train'\] are reserved"):

        @register(source="x")
        def reserved(*, train: bool = True, lr: float = 0.1) -> ModuleOp:
            """Options that would shadow the training keys."""
            raise AssertionError


def test_forward_only_entry_points_refuse_a_training_request() -> None:
    for entry in (parse_spec, build_model):
        with pytest.raises(ZooError, match="'train=' asks for a training step"):
            entry("nasrnn?hidden=4&train=sgd")


def test_a_pass_failure_names_the_spec(tasoc, monkeypatch) -> None:
    # No small model makes autodiff fail, so the failure is simulated: the driver
    # must still print it on one line, prefixed by the spec that asked for the step.
    def refuse(self: AutodiffPass, ctx: Context, module: object) -> None:
        raise AutodiffFailed("no params to differentiate")

    monkeypatch.setattr(AutodiffPass, "apply", refuse)
    spec = "zoo:nasrnn?hidden=4&train=sgd"
    assert_one_line_error(tasoc("run", spec), f"{spec}: autodiff: no params to differentiate")


# ----------------------------------------------------------------- building steps


@pytest.mark.parametrize("model", list_models(), ids=lambda model: model.name)
def test_every_small_model_builds_a_training_step_with_its_default_loss(model: ZooModel) -> None:
    forward = entry_function(build_model(model.spec(dict(model.small))))
    (output,) = forward.function_type.outputs.data
    step = entry_function(build_zoo_model(_training_spec(model).removeprefix("zoo:")))
    signature = training_signature(step)
    assert signature is not None and signature.loss == 0
    # sgd: one new value per param, each replacing its argument, and no state.
    assert len(signature.replaces) == len(signature.params) > 0
    assert signature.state == ()
    (labels,) = signature.labels
    label_shape = tuple(step.args[labels].type.get_shape())
    output_shape = tuple(output.get_shape())
    # Class labels drop the class axis; mse's targets have the output's shape.
    expected = output_shape[:-1] if model.loss == "softmax-cross-entropy" else output_shape
    assert label_shape == expected


def test_the_driver_applies_the_pass_with_the_requested_options(tasoc, tmp_path: Path) -> None:
    spec = "zoo:bert?layers=1&hidden=16&heads=2&seq=4&train=adam&loss=sum&lr=0.003"
    out = tmp_path / "step.mlir"
    assert tasoc("opt", spec, "-o", out).code == 0
    expected = build_model("bert?layers=1&hidden=16&heads=2&seq=4")
    AutodiffPass(loss="sum", optimizer="adam", lr=0.003).apply(Context(), expected)
    assert out.read_text().strip() == str(expected).strip()


@pytest.mark.parametrize("name", CHECKED_SMALL)
def test_small_training_steps_match_the_reference(tasoc, name: str) -> None:
    model = next(model for model in list_models() if model.name == name)
    result = tasoc("run", _training_spec(model), "--check")
    assert result.code == 0, result.err


# ------------------------------------------------------------- the CLI and README


def _losses(output: str) -> list[float]:
    return [float(found) for found in re.findall(r"^step +\d+/\d+ +loss (\S+)$", output, re.M)]


def test_tasoc_zoo_lists_training_losses_and_its_example_trains(tasoc) -> None:
    listing = tasoc("zoo").out
    for model in list_models():
        row = next(line for line in listing.splitlines() if line.startswith(f"{model.name} "))
        assert row.split()[1] == model.loss
    assert "train=sgd|momentum|adam" in listing and TRAINING_EXAMPLE in listing
    losses = _losses(tasoc("run", TRAINING_EXAMPLE, "--steps", "10").out)
    assert len(losses) == 10 and losses[-1] < losses[0]


def _readme_training_section() -> str:
    text = README.read_text()
    section = text[text.index("## Training") :]
    return section[: section.index("\n## ", 1)]


def _readme_training_commands() -> list[list[str]]:
    """The `$ tasoc ...` commands of the README's Training section, as argv lists."""
    return [
        shlex.split(line.removeprefix("$ tasoc "))
        for line in _readme_training_section().splitlines()
        if line.startswith("$ tasoc ")
    ]


def test_readme_training_example_learns(tasoc, tmp_path: Path, monkeypatch) -> None:
    commands = _readme_training_commands()
    assert [argv[0] for argv in commands] == ["opt", "run", "run"]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(REPO / "examples")
    outputs = []
    for argv in commands:
        result = tasoc(*argv)
        assert result.code == 0, (argv, result.err)
        outputs.append(result.out)
    mlp = _losses(outputs[1])
    assert len(mlp) == 30
    assert mlp[-1] < mlp[0] / 2
    zoo = _losses(outputs[2])
    assert len(zoo) == 5 and zoo[-1] < zoo[0]
    # The memory lines the README shows are the runs' (docs/memory.md, peak device memory).
    shown = re.findall(r"^memory: .*$", _readme_training_section(), re.M)
    assert shown == [re.search(r"^memory: .*$", out, re.M)[0] for out in outputs[1:]]
