"""What makes a program a training step, and reading it back from `@main`.

`autodiff` writes a training step as an ordinary program (DESIGN.md §2 "Training
programs"); what a runtime needs beyond the ops is said by argument and result
attributes, which this module names and reads:

- arguments: `graph.param` (weights, `graph.PARAM_ATTR`), `graph.state` (optimizer
  state: momentum buffers, Adam's moments and step counter), `graph.labels` (the
  loss's targets); every other argument is an input.
- results: `graph.loss` on the rank-0 float loss; `graph.replaces = N : i64` on each
  new param or state value, N the index of the argument it replaces (same type), so
  a runtime can feed it back and keep it in place across steps; `graph.gradient_of =
  N : i64` on each gradient (`emit=gradients`), N the param's index.

`training_signature` is the one reader of these marks: the driver's `--steps` loop,
the memory figures (`liveness`) and later passes ask it instead of looking at
attributes themselves, so marks that contradict each other are refused in one place.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from xdsl.dialects import func
from xdsl.dialects.builtin import DictionaryAttr, IntegerAttr
from xdsl.ir import Attribute

from tasoc.ir.graph import PARAM_ATTR, sig_of
from tasoc.ir.program import ProgramError, entry_block
from tasoc.ir.shapes import ShapeError

STATE_ATTR = "graph.state"
"""Argument attribute marking optimizer state (momentum, Adam's moments and step)."""
LABELS_ATTR = "graph.labels"
"""Argument attribute marking the loss's targets (class ids, regression targets)."""
LOSS_ATTR = "graph.loss"
"""Result attribute marking the loss, a rank-0 float."""
REPLACES_ATTR = "graph.replaces"
"""Result attribute `= N : i64`: this result is the next value of argument N."""
GRADIENT_OF_ATTR = "graph.gradient_of"
"""Result attribute `= N : i64`: this result is the gradient of the loss by argument N."""

_ARGUMENT_MARKS = (PARAM_ATTR, STATE_ATTR, LABELS_ATTR)
"""The roles an argument can have besides input; at most one per argument."""


@dataclass(frozen=True, slots=True)
class TrainingSignature:
    """The roles of `@main`'s arguments and results in a training program.

    Argument indices are positions in `@main`'s arguments, result indices in its
    results; each tuple is in increasing order. `loss` is None for a program that
    says which arguments its results replace but computes no loss (a hand-written
    update loop). `replaces` pairs (result, argument it replaces); `gradients` pairs
    (result, param argument it is the gradient of).
    """

    loss: int | None
    inputs: tuple[int, ...]
    labels: tuple[int, ...]
    params: tuple[int, ...]
    state: tuple[int, ...]
    replaces: tuple[tuple[int, int], ...]
    gradients: tuple[tuple[int, int], ...]

    @property
    def replaced_by(self) -> dict[int, int]:
        """Argument index -> the index of the result that replaces it."""
        return {argument: result for result, argument in self.replaces}


def is_training_program(function: func.FuncOp) -> bool:
    """Whether `function` carries any training mark (ProgramError if they contradict)."""
    return training_signature(function) is not None


def training_signature(function: func.FuncOp) -> TrainingSignature | None:
    """The training roles `function`'s attributes give its arguments and results, or
    None when it has none of the marks above (a forward program: `graph.param` alone
    does not make a training step).

    ProgramError, naming the argument or result, for marks that cannot all be true:
    an argument with two roles, a second loss, a loss that is not a rank-0 float, a
    `replaces`/`gradient_of` index that is not an integer or out of range, of another
    type than its argument, or an argument replaced (or differentiated) twice.
    """
    name = f"@{function.sym_name.data}"
    arguments = entry_block(function).args
    arg_marks = _dictionaries(function.arg_attrs, len(arguments))
    result_types = function.function_type.outputs.data
    res_marks = _dictionaries(function.res_attrs, len(result_types))
    if not _has_training_marks(arg_marks, res_marks):
        return None

    roles: dict[str, list[int]] = {mark: [] for mark in _ARGUMENT_MARKS}
    inputs: list[int] = []
    for index, marks in enumerate(arg_marks):
        own = [mark for mark in _ARGUMENT_MARKS if mark in marks]
        if len(own) > 1:
            raise ProgramError(
                f"argument #{index} of {name} is marked both {own[0]} and {own[1]}; "
                f"an argument has one role"
            )
        (roles[own[0]] if own else inputs).append(index)

    loss: int | None = None
    links: dict[str, list[tuple[int, int]]] = {REPLACES_ATTR: [], GRADIENT_OF_ATTR: []}
    for index, marks in enumerate(res_marks):
        where = f"result #{index} of {name}"
        if LOSS_ATTR in marks:
            if loss is not None:
                raise ProgramError(
                    f"{where} is marked {LOSS_ATTR} but result #{loss} already is; "
                    f"a training program has one loss"
                )
            _check_loss_type(where, result_types[index])
            loss = index
        for mark in links:
            if mark in marks:
                target = _argument_index(where, mark, marks[mark], len(arguments))
                if arguments[target].type != result_types[index]:
                    raise ProgramError(
                        f"{where} ({result_types[index]}) is marked {mark} = {target}, "
                        f"but argument #{target} has type {arguments[target].type}"
                    )
                links[mark].append((index, target))
    if links[REPLACES_ATTR] and links[GRADIENT_OF_ATTR]:
        raise ProgramError(
            f"{name} has both {REPLACES_ATTR} and {GRADIENT_OF_ATTR} results; a training "
            f"program is either one step or its gradients"
        )
    for mark, pairs in links.items():
        _refuse_twice(name, mark, pairs)
    return TrainingSignature(
        loss=loss,
        inputs=tuple(inputs),
        labels=tuple(roles[LABELS_ATTR]),
        params=tuple(roles[PARAM_ATTR]),
        state=tuple(roles[STATE_ATTR]),
        replaces=tuple(links[REPLACES_ATTR]),
        gradients=tuple(links[GRADIENT_OF_ATTR]),
    )


def _dictionaries(attrs: Attribute | None, count: int) -> list[Mapping[str, Attribute]]:
    """The `count` attribute dictionaries of a `func.func`'s arguments or results
    (`arg_attrs`/`res_attrs`, absent when none has any)."""
    given = [d.data for d in attrs.data if isinstance(d, DictionaryAttr)] if attrs else []  # type: ignore[attr-defined]
    return given + [{}] * (count - len(given))


def _has_training_marks(
    arg_marks: list[Mapping[str, Attribute]], res_marks: list[Mapping[str, Attribute]]
) -> bool:
    return any(STATE_ATTR in m or LABELS_ATTR in m for m in arg_marks) or any(
        LOSS_ATTR in m or REPLACES_ATTR in m or GRADIENT_OF_ATTR in m for m in res_marks
    )


def _check_loss_type(where: str, type_: Attribute) -> None:
    try:
        sig = sig_of(type_)
    except ShapeError:
        sig = None
    if sig is None or sig.rank != 0 or not sig.dtype.is_float:
        raise ProgramError(f"{where} is marked {LOSS_ATTR} but is {type_}, not a rank-0 float")


def _argument_index(where: str, mark: str, value: Attribute, count: int) -> int:
    if not isinstance(value, IntegerAttr):
        raise ProgramError(f"{where}: {mark} must be an argument index (`= N : i64`), got {value}")
    index = value.value.data
    if not 0 <= index < count:
        raise ProgramError(
            f"{where}: {mark} = {index} is out of range; @main has {count} arguments"
        )
    return index


def _refuse_twice(name: str, mark: str, pairs: list[tuple[int, int]]) -> None:
    seen: dict[int, int] = {}
    for result, argument in pairs:
        if argument in seen:
            raise ProgramError(
                f"results #{seen[argument]} and #{result} of {name} are both marked "
                f"{mark} = {argument}; one result per argument"
            )
        seen[argument] = result
