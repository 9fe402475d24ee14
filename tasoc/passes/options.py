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
"""

from __future__ import annotations

import math
import re
from dataclasses import fields
from fractions import Fraction
from types import NoneType, UnionType
from typing import Any, Literal, Union, get_args, get_origin, get_type_hints

BYTE_UNITS = {
    "B": 1,
    "kB": 10**3,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
    "KiB": 2**10,
    "MiB": 2**20,
    "GiB": 2**30,
    "TiB": 2**40,
}
"""Units `parse_byte_size` knows: decimal (SI) and binary (IEC), in their usual case."""

_SIZE = re.compile(r"(?P<number>[0-9]*\.?[0-9]+(?:[eE][-+]?[0-9]+)?)\s*(?P<unit>[A-Za-z]*)")


def option_name(field_name: str) -> str:
    """The option as users write it in a pipeline: `node_limit` is `node-limit`."""
    return field_name.replace("_", "-")


def parse_byte_size(size: str | int | float) -> int:
    """Bytes from a count (`1024`, `1.5e9`) or a size with a unit (`16GiB`, `2GB`,
    `512 MiB`); ValueError for a negative, infinite or fractional number of bytes, or
    an unknown unit. Exact: `1.5GiB` is 1610612736, with no float rounding."""
    if isinstance(size, bool):
        raise ValueError(f"expected a byte size such as 16GiB or 1.5e9, got {size!r}")
    if isinstance(size, int | float):
        if not math.isfinite(size):
            raise ValueError(f"a byte size must be finite, got {size}")
        amount = Fraction(size)
    else:
        amount = _parse_size_text(size)
    if amount < 0:
        raise ValueError(f"a byte size must not be negative, got {size}")
    if amount.denominator != 1:
        raise ValueError(f"a byte size must be a whole number of bytes, got {size}")
    return int(amount)


def _parse_size_text(text: str) -> Fraction:
    stripped = text.strip()
    negative = stripped.startswith("-")
    found = _SIZE.fullmatch(stripped.removeprefix("-").lstrip())
    if found is None:
        raise ValueError(f"expected a byte size such as 16GiB, 512MiB or 1.5e9, got '{text}'")
    unit = found["unit"] or "B"
    if unit not in BYTE_UNITS:
        raise ValueError(
            f"unknown unit '{unit}' in byte size '{text}' (known: {', '.join(BYTE_UNITS)})"
        )
    amount = Fraction(found["number"]) * BYTE_UNITS[unit]
    return -amount if negative else amount


def check_option_types(options: object) -> None:
    """ValueError naming the first option of the dataclass `options` whose value does
    not have its field's type: a `Literal`'s choices, `bool` only for `bool` (never for
    a number), `int` or `float` for `float`, `None` only where the type allows it."""
    hints = get_type_hints(type(options))
    for field in fields(options):  # type: ignore[arg-type]
        value = getattr(options, field.name)
        expected = hints[field.name]
        if not _conforms(value, expected):
            raise ValueError(
                f"{option_name(field.name)} must be {describe_option_type(expected)}, got {value!r}"
            )


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
