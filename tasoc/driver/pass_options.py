"""Building a pass from its pipeline text, with one-line errors naming pass and option.

xDSL's `ModulePass.from_pass_spec` converts `pass{key=value}` options to the pass's
dataclass fields, but its errors name neither (`Incompatible types: given ('abc',),
expected int | float`), and it takes `true` for a number (a bool is an int in Python).
So every given option is checked here first, against the field's type hint with
xDSL's own `isa`: an unknown option, a value of the wrong type and a choice outside a
`Literal` fail with the pass and the option named. What only the pass can judge (a
value out of range, two options that conflict) it raises from `__post_init__` as a
ValueError whose message names the option; that message is prefixed with the pass.
All of this runs when the pipeline is set up, before any pass runs.
"""

from __future__ import annotations

import dataclasses
from types import NoneType
from typing import Any, get_args, get_type_hints

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import ArgSpec, ParameterListType
from xdsl.utils.hints import isa

from tasoc.driver.errors import DriverError, one_line
from tasoc.passes.options import describe_option_type, option_name


def _admits_bool(hint: Any) -> bool:
    return hint is bool or any(_admits_bool(part) for part in get_args(hint))


def fits(values: ParameterListType, hint: Any) -> bool:
    """Whether an option's parsed values suit a field typed `hint`, as xDSL converts
    them (one value, a tuple of values, or none for an optional), except that `true`
    and `false` suit only a field that takes a bool."""
    if isa(values, hint):
        return True
    if not values:
        return NoneType in get_args(hint)
    value = values[0]
    return (
        len(values) == 1
        and isa(value, hint)
        and (not isinstance(value, bool) or _admits_bool(hint))
    )


def _value_text(values: ParameterListType) -> str:
    if not values:
        return "no value"
    return "'" + ",".join(str(v).lower() if isinstance(v, bool) else str(v) for v in values) + "'"


def build_pass(pass_class: type[ModulePass], spec: ArgSpec) -> ModulePass:
    """The pass `spec` names, with its options; DriverError naming the pass and the
    option when an option is unknown, of the wrong type, or refused by the pass."""
    where = f"pass '{spec.name}'"
    fields = [f.name for f in dataclasses.fields(pass_class) if f.init and f.name != "name"]
    try:
        hints = get_type_hints(pass_class)
    except (NameError, TypeError) as err:  # a plugin's annotation that does not resolve
        raise DriverError(f"{where}: cannot read its option types: {err}") from None
    for key, values in spec.normalize_parameter_names().parameters.items():
        if key not in fields:
            known = ", ".join(option_name(name) for name in fields)
            options = f"its options: {known}" if known else "it takes no options"
            raise DriverError(f"{where} has no option '{option_name(key)}' ({options})")
        if not fits(values, hints[key]):
            raise DriverError(
                f"{where}: option '{option_name(key)}' expects {describe_option_type(hints[key])}, "
                f"got {_value_text(values)}"
            )
    try:
        return pass_class.from_pass_spec(spec)
    except (ValueError, TypeError) as err:
        raise DriverError(f"{where}: {one_line(str(err))}") from None
