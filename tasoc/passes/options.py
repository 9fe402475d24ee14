"""Pass options: checked when a pass is built, so a bad one fails before any pass of
a pipeline runs (DESIGN.md §3).

A pass's options are the typed fields of its frozen dataclass, choices as `Literal`
(as in xDSL's own passes). `tasoc opt` checks the values a pipeline gives against
these types before it builds a pass (`tasoc.driver.pass_options`); a pass built from
Python gets no such check, and xDSL's own conversion takes `true` for a number (a
`bool` is an `int`). So each pass's `__post_init__` calls `check_option_types`, then states
its ranges with `check_at_least` and its byte sizes with `check_byte_size`; every
message names the option as users write it (`node-limit`, not `node_limit`) and
reads on after the driver's `tasoc: error: pass 'equality-rewrite': `.

Declare a number option `int | float`, not `float`: xDSL's conversion refuses
`timeout=3` for a field typed `float` (the pipeline parser reads `3` as an int).

Byte sizes (`memory-limit=16GiB`) have one parser, `parse_byte_size`, for every pass
that takes one.

Numbers are read as Python writes them (`read_number`: every literal `float()` takes),
and every number option, byte sizes included, is refused beyond `LARGEST_NUMBER`, so
that `1e400` is one line here rather than an OverflowError deep in a pass.
"""

from __future__ import annotations

import math
import re
import sys
from dataclasses import fields
from decimal import MIN_EMIN, Context, Decimal, Inexact, InvalidOperation
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

from tasoc.ir.limits import shown

LARGEST_NUMBER = sys.float_info.max
"""The largest magnitude of a number option (about 1.8e308): passes compute with their
options as floats (a cost model's memory limit, a deadline), and beyond it a float is
infinite. An integer of 400 digits or `1e400` is refused when the pass is built."""

BYTE_UNITS = {
    "B": 1,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
"""Units `parse_byte_size` knows: decimal (SI, powers of 1000) and binary (IEC, powers
of 1024). Their case does not matter (`16gb`, `16GB`, `4kB`, `16gib`): nobody sizes
memory in bits, so a lowercase `b` is read as bytes too."""

_UNITS_BY_CASE = {unit.lower(): scale for unit, scale in BYTE_UNITS.items()}

_SIZE = re.compile(r"(?P<number>[-+]?[0-9_.]+(?:[eE][-+]?[0-9_]+)?)\s*(?P<unit>[A-Za-z]*)")


def option_name(field_name: str) -> str:
    """The option as users write it in a pipeline: `node_limit` is `node-limit`."""
    return field_name.replace("_", "-")


def read_number(text: str) -> Decimal | None:
    """The exact value of `text` when it is a number as Python writes one (every literal
    `float()` takes: `1e-3`, `3E2`, `.5`, `1_000`, `inf`), else None.

    A Decimal, not a float or a Fraction: it keeps `1e400` and `1e-999999999` as
    written, where a float overflows or rounds and a Fraction would spell out the
    power of ten digit by digit (a hang for a huge exponent)."""
    try:
        float(text)  # the literals Python takes; Decimal alone would take `sNaN` too
        return Decimal(text)
    except (ValueError, InvalidOperation):
        return None


def written_as_size(text: str) -> bool:
    """Whether `text` is written as a byte size (digits, maybe a unit), good or not:
    `1.5GB`, `-1GiB`, `12XB`; `parse_byte_size` says what is wrong with it."""
    return _SIZE.fullmatch(text.strip()) is not None


def out_of_range(name: str, value: object) -> ValueError:
    """The error for a number option beyond `LARGEST_NUMBER`: `value` as the user wrote
    it, an integer of hundreds of digits shortened."""
    given = shown(value) if isinstance(value, int) else value
    return ValueError(
        f"{name} must be at most {LARGEST_NUMBER:.2g} in magnitude (a float's range), got {given}"
    )


def parse_byte_size(size: str | int | float) -> int:
    """Bytes from a count (`1024`, `1.5e9`) or a size with a unit (`16GiB`, `2GB`,
    `512 MiB`, `1.5gb`); ValueError for a negative, non-finite or fractional number of
    bytes, one beyond `LARGEST_NUMBER`, or an unknown unit. Exact: `1.5GiB` is
    1610612736, with no float rounding."""
    if isinstance(size, bool):
        raise ValueError(f"expected a byte size such as 16GiB or 1.5e9, got {size!r}")
    number, scale = (Decimal(size), 1) if isinstance(size, int | float) else _size_parts(size)
    if not number.is_finite():
        raise ValueError(f"a byte size must be finite, got {size}")
    if number < 0:
        raise ValueError(f"a byte size must not be negative, got {size}")
    if number > Decimal(LARGEST_NUMBER) / scale:
        raise out_of_range("a byte size", size)
    # Enough digits that the product is exact, and the exponents of any text.
    exact = Context(prec=len(number.as_tuple().digits) + 16, Emin=MIN_EMIN, traps=[Inexact])
    amount = exact.multiply(number, scale)
    if amount != amount.to_integral_value():
        raise ValueError(f"a byte size must be a whole number of bytes, got {size}")
    return int(amount)


def _size_parts(text: str) -> tuple[Decimal, int]:
    """The number and the unit's bytes of a size written as text."""
    found = _SIZE.fullmatch(text.strip())
    number = None if found is None else read_number(found["number"])
    if found is None or number is None:
        raise ValueError(f"expected a byte size such as 16GiB, 512MiB or 1.5e9, got '{text}'")
    unit = found["unit"] or "B"
    scale = _UNITS_BY_CASE.get(unit.lower())
    if scale is None:
        raise ValueError(
            f"unknown unit '{unit}' in byte size '{text}' (known: {', '.join(BYTE_UNITS)})"
        )
    return number, scale


def check_option_types(options: object) -> None:
    """ValueError naming the first option of the dataclass `options` whose value does
    not have its field's type: a `Literal`'s choices, `bool` only for `bool` (never for
    a number), `int` or `float` for `float`, `None` only where the type allows it; then
    the first number that is not finite or is beyond `LARGEST_NUMBER`."""
    hints = get_type_hints(type(options))
    for field in fields(options):  # type: ignore[arg-type]
        value = getattr(options, field.name)
        expected = hints[field.name]
        if not _conforms(value, expected):
            raise ValueError(
                f"{option_name(field.name)} must be {describe_option_type(expected)}, got {value!r}"
            )
        for number in _numbers(value):
            if isinstance(number, float) and not math.isfinite(number):
                raise ValueError(f"{option_name(field.name)} must be a finite number, got {number}")
            if abs(number) > LARGEST_NUMBER:
                raise out_of_range(option_name(field.name), number)


def check_choice(options: object, field_name: str, choices: tuple[str, ...]) -> None:
    """ValueError unless the option's value is one of `choices`, worded as for a
    `Literal`: for an option whose choices are read from a table when the pass is built
    (a search added to soap-shard's table is a choice at once), not fixed in its type."""
    value = getattr(options, field_name)
    if value not in choices:
        expected = describe_option_type(Literal[choices])  # type: ignore[valid-type]
        raise ValueError(f"{option_name(field_name)} must be {expected}, got {value!r}")


def _numbers(value: object) -> list[int | float]:
    """The numbers an option's value holds (a tuple option's items), bools excepted."""
    items = value if isinstance(value, tuple) else (value,)
    return [item for item in items if isinstance(item, int | float) and not isinstance(item, bool)]


def check_at_least(
    options: object, field_name: str, lowest: float, *, exclusive: bool = False
) -> None:
    """ValueError unless the option's value is at least (`exclusive`: above) `lowest`;
    None (an option not given) passes. NaN fails."""
    value = getattr(options, field_name)
    if value is None or (value > lowest if exclusive else value >= lowest):
        return
    if exclusive and lowest == 0:
        requirement = "be positive"
    elif lowest == 0:
        requirement = "not be negative"
    else:
        requirement = f"be {'above' if exclusive else 'at least'} {lowest}"
    raise ValueError(f"{option_name(field_name)} must {requirement}, got {value}")


def check_fraction(options: object, field_name: str, *, top_included: bool = False) -> None:
    """ValueError unless the option's value is in [0, 1) (in [0, 1] with `top_included`):
    decay rates and momenta, where 1 would never forget."""
    check_at_least(options, field_name, 0)
    value = getattr(options, field_name)
    if value > 1 or (value == 1 and not top_included):
        bound = "at most 1" if top_included else "below 1"
        raise ValueError(f"{option_name(field_name)} must be {bound}, got {value}")


def check_byte_size(options: object, field_name: str) -> None:
    """ValueError naming the option unless its value is None or a byte size
    (`parse_byte_size`), so a pass can parse it where it is used."""
    value = getattr(options, field_name)
    if value is None:
        return
    try:
        parse_byte_size(value)
    except ValueError as err:
        raise ValueError(f"{option_name(field_name)}: {err}") from None


def _conforms(value: Any, expected: Any) -> bool:
    origin = get_origin(expected)
    if origin is Literal:
        return any(value == choice and type(value) is type(choice) for choice in get_args(expected))
    if origin in (Union, UnionType):
        return any(_conforms(value, member) for member in get_args(expected))
    if origin is tuple:
        (member, _) = get_args(expected)
        return isinstance(value, tuple) and all(_conforms(item, member) for item in value)
    if expected is NoneType:
        return value is None
    if expected is bool:
        return isinstance(value, bool)
    if isinstance(value, bool):
        return False  # a bool is an int to Python, but never a number or a choice here
    if expected is float:
        return isinstance(value, int | float)
    if isinstance(expected, type):
        return isinstance(value, expected)
    raise TypeError(f"option type {expected} is not one check_option_types knows")


_KINDS = {bool: "true or false", int: "a whole number", float: "a number", str: "a string"}


def describe_option_type(expected: Any) -> str:
    """`expected` in words: `one of 'egraph', 'backtrack'`, `a number`."""
    origin = get_origin(expected)
    if origin is Literal:
        return "one of " + ", ".join(repr(choice) for choice in get_args(expected))
    if origin in (Union, UnionType):
        members = [member for member in get_args(expected) if member is not NoneType]
        if {int, float} <= set(members):
            members = [member for member in members if member is not int]
        return " or ".join(describe_option_type(member) for member in members)
    if origin is tuple:
        return f"a comma-separated list, each {describe_option_type(get_args(expected)[0])}"
    return _KINDS.get(expected, getattr(expected, "__name__", str(expected)))
