"""The model zoo registry: built-in benchmark models addressed as `zoo:NAME?k=v&k2=v2`.

A zoo model is a plain builder function with keyword-only options, registered with
`@register`. Its options, their defaults and their types are read from the function's
signature, so the defaults documented in `docs/models.md`, the ones the driver parses
against and the ones the code uses cannot drift apart:

    @register(source="...", loss="mse", small={"hidden": 64})
    def mymodel(*, hidden: int = 512) -> ModuleOp:
        '''One-line summary shown by `tasoc zoo`.'''

`build_model("bert?layers=2&hidden=256")` parses each value to the type of its default
and calls the builder. Every mistake a user can make in a spec (unknown model, unknown
option, a value of the wrong type, options that do not fit together, sizes over the
resource limits of `tasoc.ir.limits`) raises `ZooError` with one line that says what
to type instead, because the driver prints it as is.

Three keys are not model options but ask for a training step of the model:
`train=sgd|momentum|adam` (the optimizer), `loss=` (default: the model's own training
loss, given to `register`) and `lr=`. They are parsed and checked here
(`parse_request`, `TrainingSpec`), but the step is built by the driver, which applies
the `autodiff` pass: models build forward programs only and do not depend on passes.

A spec is a few bytes that can ask for exabytes, so sizes are bounded twice: an
integer option is at most `MAX_DIM` and a float finite when the spec is parsed,
and the built program's tensors and arguments are within the limits before anyone
allocates them (the builder refuses a tensor over the limit as it types it; the
arguments' total is checked here).
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import NamedTuple

from xdsl.dialects import func
from xdsl.dialects.builtin import ModuleOp

from tasoc.ir.limits import MAX_DIM, LimitError, check_argument_bytes, shown
from tasoc.ir.program import arg_infos, argument_bytes, entry_function

OptionValue = int | float | bool | str
Builder = Callable[..., ModuleOp]

SCHEME = "zoo:"
"""The driver's prefix for zoo inputs; `build_model` accepts specs with or without it."""

TRAINING_OPTIMIZERS = ("sgd", "momentum", "adam")
"""What `train=` accepts: the `autodiff` pass's optimizers (a test keeps them equal)."""
TRAINING_LOSSES = ("sum", "mse", "softmax-cross-entropy")
"""What `loss=` (and `register(loss=...)`) accepts: the `autodiff` pass's losses."""
TRAIN_KEY, LOSS_KEY, LR_KEY = "train", "loss", "lr"
TRAINING_KEYS = (TRAIN_KEY, LOSS_KEY, LR_KEY)
"""Spec keys reserved for asking for a training step; no model may name an option so."""

_OPTION_TYPES: tuple[type, ...] = (bool, int, float, str)
_TRUE_WORDS = frozenset({"true", "1", "yes", "on"})
_FALSE_WORDS = frozenset({"false", "0", "no", "off"})


class ZooError(ValueError):
    """A zoo spec names an unknown model or option, or gives an unusable value."""


@dataclass(frozen=True, slots=True)
class ZooModel:
    """One registered model: how to build it and what to tell a user about it."""

    name: str
    builder: Builder
    summary: str
    source: str
    defaults: Mapping[str, OptionValue]
    small: Mapping[str, OptionValue] = field(default_factory=dict)
    """Option overrides giving a variant that builds and runs in well under a second;
    used by the tests and the stats table."""
    loss: str = "mse"
    """The loss a training step of this model minimizes unless `loss=` says otherwise:
    softmax-cross-entropy for classifiers (class scores on the last axis), mse else."""

    def option_types(self) -> dict[str, type]:
        """The type each option's value is parsed to: the type of its default."""
        return {name: type(value) for name, value in self.defaults.items()}

    def spec(self, options: Mapping[str, OptionValue] | None = None) -> str:
        """The spec string (`NAME?k=v&...`) that builds this model with `options`."""
        if not options:
            return self.name
        query = "&".join(f"{key}={_format_value(value)}" for key, value in options.items())
        return f"{self.name}?{query}"

    def build(self, **options: OptionValue) -> ModuleOp:
        """Build with `options` (already typed) over the defaults.

        A builder rejects option values that do not fit together by raising ZooError
        without naming itself; the message gets the model's name here. Options that
        make a tensor, or all arguments together, larger than the resource limits
        raise ZooError too, before any value is allocated.
        """
        for key in options:
            if key not in self.defaults:
                raise self.unknown_option(key)
        try:
            module = self.builder(**{**self.defaults, **options})
            check_argument_bytes(argument_bytes(arg_infos(entry_function(module))), "its arguments")
        except ZooError as err:
            raise ZooError(f"{SCHEME}{self.name}: {err}") from None
        except LimitError as err:
            raise ZooError(f"{SCHEME}{self.name}: options too large: {err}") from None
        return module

    def unknown_option(self, key: str) -> ZooError:
        """The error for an option this model does not have, listing the ones it has."""
        return ZooError(
            f"{SCHEME}{self.name}: unknown option '{key}'; "
            f"valid options: {', '.join(self.defaults)} "
            f"(and {', '.join(TRAINING_KEYS)} for a training step)"
        )


_REGISTRY: dict[str, ZooModel] = {}


def register(
    *,
    source: str,
    loss: str = "mse",
    small: Mapping[str, OptionValue] | None = None,
    name: str | None = None,
) -> Callable[[Builder], Builder]:
    """Register a builder function as the zoo model `name` (default: the function's name).

    The function's keyword-only parameters are the model's options; each needs a
    default of type int, float, bool or str, because that default's type is how a
    value given in a spec is parsed, and none may be one of `TRAINING_KEYS`. The first
    docstring line is the summary. `loss` is the model's training loss (one of
    `TRAINING_LOSSES`): what `train=` minimizes unless `loss=` is given.
    """

    def decorate(builder: Builder) -> Builder:
        model_name = name or builder.__name__
        if model_name in _REGISTRY:
            raise ValueError(f"zoo model '{model_name}' is registered twice")
        if loss not in TRAINING_LOSSES:
            raise ValueError(f"zoo model '{model_name}': unknown training loss '{loss}'")
        defaults = _options_of(builder)
        reserved = sorted(set(defaults) & set(TRAINING_KEYS))
        if reserved:
            raise ValueError(f"zoo model '{model_name}': options {reserved} are reserved")
        small_options = dict(small or {})
        unknown = sorted(set(small_options) - set(defaults))
        if unknown:
            raise ValueError(f"zoo model '{model_name}': small variant sets unknown {unknown}")
        doc = inspect.getdoc(builder)
        if not doc:
            raise ValueError(f"zoo model '{model_name}' needs a docstring (its summary)")
        _REGISTRY[model_name] = ZooModel(
            name=model_name,
            builder=builder,
            summary=doc.splitlines()[0],
            source=source,
            defaults=MappingProxyType(defaults),
            small=MappingProxyType(small_options),
            loss=loss,
        )
        return builder

    return decorate


def _options_of(builder: Builder) -> dict[str, OptionValue]:
    defaults: dict[str, OptionValue] = {}
    for param in inspect.signature(builder).parameters.values():
        if param.kind is not inspect.Parameter.KEYWORD_ONLY:
            raise TypeError(f"{builder.__name__}: option '{param.name}' must be keyword-only")
        if type(param.default) not in _OPTION_TYPES:
            raise TypeError(
                f"{builder.__name__}: option '{param.name}' needs an int, float, bool or str "
                f"default, got {param.default!r}"
            )
        defaults[param.name] = param.default
    return defaults


def list_models() -> list[ZooModel]:
    """Every registered model, sorted by name."""
    return [_REGISTRY[name] for name in sorted(_REGISTRY)]


def get_model(name: str) -> ZooModel:
    """The model called `name`; raises ZooError listing the known names."""
    try:
        return _REGISTRY[name]
    except KeyError:
        known = ", ".join(sorted(_REGISTRY))
        raise ZooError(f"unknown zoo model '{name}'; known models: {known}") from None


@dataclass(frozen=True, slots=True)
class TrainingSpec:
    """A spec's request for a training step (`train=`, `loss=`, `lr=`), checked."""

    optimizer: str
    loss: str
    lr: float | None = None
    """None: the `autodiff` pass's default."""

    def pass_options(self) -> dict[str, str | float]:
        """The `autodiff` pass's keyword options for this request."""
        options: dict[str, str | float] = {"optimizer": self.optimizer, "loss": self.loss}
        if self.lr is not None:
            options["lr"] = self.lr
        return options


class ZooRequest(NamedTuple):
    """A parsed spec: the model, its typed options, and the training step asked for
    (None: the forward program)."""

    model: ZooModel
    options: dict[str, OptionValue]
    training: TrainingSpec | None

    def build_forward(self) -> ModuleOp:
        return self.model.build(**self.options)


def parse_request(spec: str) -> ZooRequest:
    """Split `NAME?k=v&k2=v2` (optionally prefixed `zoo:`) into a model, its typed
    options and the training keys (`TRAINING_KEYS`), each checked."""
    name, _, query = spec.removeprefix(SCHEME).partition("?")
    model = get_model(name)
    types = model.option_types()
    options: dict[str, OptionValue] = {}
    training: dict[str, str] = {}
    for item in query.split("&") if query else ():
        key, equals, text = item.partition("=")
        if not equals:
            raise ZooError(f"{SCHEME}{name}: expected 'option=value', got '{item}'")
        if key not in types and key not in TRAINING_KEYS:
            raise model.unknown_option(key)
        if key in options or key in training:
            raise ZooError(f"{SCHEME}{name}: option '{key}' is given twice")
        if key in TRAINING_KEYS:
            training[key] = text
        else:
            options[key] = _parse_value(name, key, text, types[key])
    return ZooRequest(model, options, _training_spec(model, training))


def _training_spec(model: ZooModel, keys: Mapping[str, str]) -> TrainingSpec | None:
    """The checked TrainingSpec for the training keys given, None when there are none."""
    where = f"{SCHEME}{model.name}"
    if TRAIN_KEY not in keys:
        if keys:
            given = next(iter(keys))
            raise ZooError(
                f"{where}: '{given}=' needs 'train=OPTIMIZER' "
                f"(one of {', '.join(TRAINING_OPTIMIZERS)}) to ask for a training step"
            )
        return None
    optimizer, loss = keys[TRAIN_KEY], keys.get(LOSS_KEY, model.loss)
    if optimizer not in TRAINING_OPTIMIZERS:
        raise ZooError(
            f"{where}: unknown optimizer '{optimizer}' for 'train='; "
            f"expected one of {', '.join(TRAINING_OPTIMIZERS)}"
        )
    if loss not in TRAINING_LOSSES:
        raise ZooError(
            f"{where}: unknown loss '{loss}'; expected one of {', '.join(TRAINING_LOSSES)}"
        )
    return TrainingSpec(optimizer, loss, _learning_rate(where, keys.get(LR_KEY)))


def _learning_rate(where: str, text: str | None) -> float | None:
    """`lr=`'s value, a positive finite number (None when not given)."""
    if text is None:
        return None
    try:
        lr = float(text)
    except ValueError:
        lr = math.nan
    if not (math.isfinite(lr) and lr > 0):
        raise ZooError(f"{where}: option 'lr' must be a positive finite number, got '{text}'")
    return lr


def parse_spec(spec: str) -> tuple[ZooModel, dict[str, OptionValue]]:
    """The model and typed options of a spec that asks for a forward program; a
    training request is refused (`parse_request` returns it)."""
    request = parse_request(spec)
    if request.training is not None:
        raise ZooError(
            f"{SCHEME}{request.model.name}: '{TRAIN_KEY}=' asks for a training step, which "
            "the driver builds (tasoc opt/run); here, build the forward program and apply "
            "the autodiff pass"
        )
    return request.model, request.options


def build_model(spec: str) -> ModuleOp:
    """Build the forward program of the zoo model that `spec` (`NAME` or
    `NAME?k=v&k2=v2`) describes."""
    model, options = parse_spec(spec)
    return model.build(**options)


def _parse_value(model: str, key: str, text: str, kind: type) -> OptionValue:
    """`text` as a value of `kind`. Numbers are bounded here, whatever the model: a
    float is finite and an integer at most MAX_DIM (no size or count can be larger);
    each builder says what else it needs (`require_positive`)."""
    where = f"{SCHEME}{model}: option '{key}'"
    if kind is str:
        return text
    if kind is bool:
        word = text.lower()
        if word not in _TRUE_WORDS | _FALSE_WORDS:
            raise ZooError(f"{where} expects a boolean (true/false), got '{text}'")
        return word in _TRUE_WORDS
    try:
        value = kind(text)
    except ValueError:  # not a number, or an integer of 4300 digits or more
        raise ZooError(f"{where} expects {_NUMBER_WORDS[kind]}, got '{text}'") from None
    if kind is int and value > MAX_DIM:
        raise ZooError(f"{where} must be at most {MAX_DIM}, got {shown(value)}")
    if kind is float and not math.isfinite(value):
        raise ZooError(f"{where} expects {_NUMBER_WORDS[kind]}, got '{text}'")
    return value


_NUMBER_WORDS = {int: "an integer", float: "a finite number"}


def _format_value(value: OptionValue) -> str:
    return str(value).lower() if isinstance(value, bool) else str(value)


# ------------------------------------------------------------------ option checks


def require_positive(**sizes: int) -> None:
    """Raise ZooError naming the first of `sizes` (option=value) that is not positive.

    Called by builders before they touch the graph builder, so a bad option is
    reported as the user wrote it rather than as a shape error deep in a layer.
    """
    for option, value in sizes.items():
        if value < 1:
            raise ZooError(f"option '{option}' must be positive, got {value}")


# ------------------------------------------------------------------------- stats


class ModelStats(NamedTuple):
    """Size of a program: graph ops in `@main` (not counting the return) and weight elements."""

    ops: int
    params: int


def model_stats(module: ModuleOp) -> ModelStats:
    """Op count and weight-element count of a program, the sizes the zoo table reports."""
    function = entry_function(module)
    ops = sum(1 for op in function.body.block.ops if not isinstance(op, func.ReturnOp))
    params = sum(info.sig.size for info in arg_infos(function) if info.is_param)
    return ModelStats(ops, params)


def stats_table(models: list[ZooModel] | None = None) -> str:
    """A markdown table of op and parameter counts of each model, default and small.

    This is the table in `docs/models.md`; `python -m tasoc.models` prints it.
    """
    rows = [
        "| model | variant | spec | ops | params |",
        "| --- | --- | --- | ---: | ---: |",
    ]
    for model in models if models is not None else list_models():
        variants = [("default", {})]
        if model.small:
            variants.append(("small", dict(model.small)))
        for variant, options in variants:
            stats = model_stats(model.build(**options))
            spec = f"`{SCHEME}{model.spec(options)}`"
            rows.append(f"| {model.name} | {variant} | {spec} | {stats.ops} | {stats.params:,} |")
    return "\n".join(rows)
