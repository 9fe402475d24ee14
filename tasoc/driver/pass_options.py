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

Numbers are taken as people write them, in two steps around xDSL's pipeline lexer:

- it splits some into two tokens, a syntax error: a number followed by a unit
  (`1.5GB`), a point first (`.5`), a sign and an exponent (`-1e-3`). So
  `quote_split_numbers` quotes such option values before xDSL parses the pipeline
  (and a syntax error's column is mapped back to the text as written);
- it reads a number with an exponent but no point (`1e-3`, `3E2`) as a name, so that
  `2d-slice` is one, and likewise `1_000`, `inf` and anything quoted: the option
  arrives as a string. So before the check, `read_numbers` reads such a string as the
  number it spells, for an option that takes numbers and no text (a byte size, which
  takes text, parses its own); and for an option that takes a whole number only, a
  whole `1e6` or `1000.0` as an int.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable, Mapping
from decimal import Decimal
from types import NoneType
from typing import Any, Literal, get_args, get_origin, get_type_hints

from xdsl.passes import ModulePass
from xdsl.utils.arg_spec import (
    ArgSpec,
    ParameterListType,
    ParameterType,
    PipelineLexer,
    SpecTokenKind,
    parse_pipeline,
)
from xdsl.utils.exceptions import ArgSpecParseError
from xdsl.utils.hints import isa

from tasoc.driver.errors import DriverError, one_line, pipeline_syntax_message
from tasoc.passes.options import (
    LARGEST_NUMBER,
    describe_option_type,
    option_name,
    out_of_range,
    read_number,
    written_as_size,
)
from tasoc.passes.registry import PassRegistryError


def _admits(hint: Any, kind: type) -> bool:
    """Whether a field typed `hint` takes values of `kind` (alone, in a union or as a
    tuple's items; not as a `Literal`'s choices)."""
    if hint is kind:
        return True
    if get_origin(hint) is Literal:
        return False
    return any(_admits(part, kind) for part in get_args(hint))


def read_numbers(values: ParameterListType, hint: Any, name: str) -> ParameterListType:
    """`values` with the numbers xDSL's parser left as strings read (module docstring),
    for option `name` of a field typed `hint`; ValueError for a number beyond
    `LARGEST_NUMBER` (`1e400`), which as a float would be infinite."""
    if _admits(hint, str) or not (_admits(hint, int) or _admits(hint, float)):
        return values
    return tuple(_read_number(value, hint, name) for value in values)


def _read_number(value: ParameterType, hint: Any, name: str) -> ParameterType:
    if isinstance(value, int):  # `true` included: `fits` refuses it for a number
        return value
    number = read_number(value) if isinstance(value, str) else Decimal(value)
    if number is None:
        return value
    if number.is_finite() and number.copy_abs() > Decimal(LARGEST_NUMBER):
        raise out_of_range(option_name(name), value)
    if _admits(hint, float):
        return float(number)
    if number.is_finite() and number == number.to_integral_value():
        return int(number)
    return value  # `1.5` for a whole number: `fits` refuses it as written


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
        and (not isinstance(value, bool) or _admits(hint, bool))
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
    parameters: dict[str, ParameterListType] = {}
    for key, given in spec.normalize_parameter_names().parameters.items():
        if key not in fields:
            known = ", ".join(option_name(name) for name in fields)
            options = f"its options: {known}" if known else "it takes no options"
            raise DriverError(f"{where} has no option '{option_name(key)}' ({options})")
        try:
            values = read_numbers(given, hints[key], key)
        except ValueError as err:
            raise DriverError(f"{where}: {err}") from None
        if not fits(values, hints[key]):
            raise DriverError(
                f"{where}: option '{option_name(key)}' expects {describe_option_type(hints[key])}, "
                f"got {_value_text(values)}"
            )
        parameters[key] = values
    try:
        return pass_class.from_pass_spec(ArgSpec(spec.name, parameters))
    except (ValueError, TypeError) as err:
        raise DriverError(f"{where}: {one_line(str(err))}") from None


_PIPELINE_PARTS = re.compile(r'"(?:\\.|[^"\\\n])*"|\[[^\]]*\]|[{}]|(?<=[=,])[^\s,{}="\[\]]+')
"""What `quote_split_numbers` scans a pipeline for: string literals and MLIR pipelines
(skipped whole), braces (to know when it is inside options), and a value after `=`
or `,`."""


def quote_split_numbers(text: str) -> tuple[str, list[int]]:
    """`text` with each option value quoted that xDSL's lexer would split into two
    tokens but that is a number or a byte size (module docstring); and the positions,
    in `text`, where quotes were put, to map a column of the result back."""
    pieces: list[str] = []
    inserted: list[int] = []
    depth = last = 0
    for part in _PIPELINE_PARTS.finditer(text):
        token = part[0]
        if token in ("{", "}"):
            depth += 1 if token == "{" else -1
        elif depth > 0 and token[0] not in '"[' and _number_xdsl_splits(token):
            pieces += [text[last : part.start()], f'"{token}"']
            inserted += [part.start(), part.end()]
            last = part.end()
    return "".join(pieces) + text[last:], inserted


def _number_xdsl_splits(value: str) -> bool:
    """Whether `value` is a number or a byte size that xDSL's pipeline lexer reads as
    more than one token (or as none)."""
    if read_number(value) is None and not written_as_size(value):
        return False
    lexer = PipelineLexer(value)
    try:
        lexer.lex()
        return lexer.lex().kind is not SpecTokenKind.EOF
    except ArgSpecParseError:
        return True


PassFactories = Mapping[str, Callable[[], type[ModulePass]]]
"""Pipeline name -> a function returning the pass class (`get_all_passes()`)."""


def build_pipeline(text: str, passes: PassFactories) -> list[ModulePass]:
    """Every pass of the pipeline `text`, built with its options from `passes`, none
    run: what `tasoc opt -p` does before the first pass, and what the documentation's
    pipelines are checked with. DriverError for a syntax error, an unknown pass or a bad
    option."""
    if text.rstrip().endswith(","):
        # xDSL's parser takes a trailing comma for the end of the pipeline.
        column = len(text.rstrip()) + 1
        raise DriverError(f"invalid pipeline '{text}': at column {column}: Expected pass name here")
    quoted, inserted = quote_split_numbers(text)
    try:
        specs = list(parse_pipeline(quoted))
    except ArgSpecParseError as err:
        message = pipeline_syntax_message(
            err, lambda column: column - sum(at + k < column - 1 for k, at in enumerate(inserted))
        )
        raise DriverError(f"invalid pipeline '{text}': {message}") from None
    built = []
    for spec in specs:
        factory = passes.get(spec.name)
        if factory is None:
            raise DriverError(
                f"unknown pass '{spec.name}' in pipeline '{text}'; "
                f"available passes: {', '.join(sorted(passes))}"
            )
        try:
            pass_class = factory()
        except PassRegistryError as err:
            raise DriverError(str(err)) from None
        built.append(build_pass(pass_class, spec))
    return built
