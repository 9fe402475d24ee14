"""Pass options (`tasoc.passes.options`): the byte-size parser every pass shares, and
the type and range checks a pass's `__post_init__` runs."""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Literal

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tasoc.passes.options import (
    BYTE_UNITS,
    check_at_least,
    check_byte_size,
    check_option_types,
    option_name,
    parse_byte_size,
    read_number,
)


@pytest.mark.parametrize(
    ("size", "expected"),
    [
        ("16GiB", 16 * 2**30),
        ("512MiB", 512 * 2**20),
        ("1.5GiB", 3 * 2**29),
        ("2GB", 2_000_000_000),
        ("4kB", 4000),
        ("1.5e9", 1_500_000_000),
        ("1.5GB", 1_500_000_000),
        ("250MB", 250_000_000),
        ("3E2KB", 300_000),
        ("1TB", 10**12),
        ("2TiB", 2 * 2**40),
        ("16gib", 16 * 2**30),
        ("16gb", 16 * 10**9),
        ("16GIB", 16 * 2**30),
        (".5KiB", 512),
        ("1_000", 1000),
        ("0e-999999999", 0),
        ("1024", 1024),
        ("1024B", 1024),
        (" 8 MiB ", 8 * 2**20),
        (1024, 1024),
        (1.5e9, 1_500_000_000),
        (0, 0),
    ],
)
def test_a_byte_size_is_a_count_or_a_number_with_a_unit(
    size: str | int | float, expected: int
) -> None:
    assert parse_byte_size(size) == expected


@pytest.mark.parametrize(
    ("size", "message"),
    [
        ("12XB", "unknown unit 'XB' in byte size '12XB'"),
        ("16G", "unknown unit 'G'"),
        ("16 bits", "unknown unit 'bits'"),
        ("1e400", "must be at most 1.8e+308 in magnitude"),
        ("1e999999999KiB", "must be at most 1.8e+308 in magnitude"),
        (10**400, "must be at most 1.8e+308 in magnitude (a float's range), got 1.0e+400"),
        ("1e-999999999GiB", "must be a whole number of bytes"),
        ("1.2.3MB", "expected a byte size such as 16GiB"),
        ("-1GiB", "must not be negative, got -1GiB"),
        (-5, "must not be negative, got -5"),
        ("1.5", "must be a whole number of bytes, got 1.5"),
        (0.5, "must be a whole number of bytes, got 0.5"),
        (math.nan, "must be finite"),
        (math.inf, "must be finite"),
        ("inf", "expected a byte size such as 16GiB"),
        ("GiB", "expected a byte size such as 16GiB"),
        ("", "expected a byte size such as 16GiB"),
        (True, "expected a byte size such as 16GiB"),
    ],
)
def test_a_bad_byte_size_is_refused_with_the_reason(size: str | int | float, message: str) -> None:
    with pytest.raises(ValueError, match=re.escape(message)):
        parse_byte_size(size)


@given(count=st.integers(0, 10**15), unit=st.sampled_from(sorted(BYTE_UNITS)))
def test_a_whole_count_of_any_unit_parses_to_its_exact_bytes(count: int, unit: str) -> None:
    assert parse_byte_size(f"{count}{unit}") == count * BYTE_UNITS[unit]


@given(count=st.integers(0, 2**53))
def test_a_byte_count_round_trips_through_its_text_and_its_float(count: int) -> None:
    assert parse_byte_size(str(count)) == count
    assert parse_byte_size(float(count)) == count  # exact up to 2**53
    assert parse_byte_size(f"{count:e}") == int(float(f"{count:e}"))


@dataclass(frozen=True)
class Options:
    """A pass's options, as a pass declares them."""

    search: Literal["egraph", "backtrack"] = "egraph"
    timeout: int | float = 30.0
    budget: int = 10
    split_size: int | None = None
    verbose: bool = False
    memory_limit: int | float | str | None = None


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"search": "dfs"}, "search must be one of 'egraph', 'backtrack', got 'dfs'"),
        ({"timeout": True}, "timeout must be a number, got True"),
        ({"timeout": "10"}, "timeout must be a number, got '10'"),
        ({"budget": 2.5}, "budget must be a whole number, got 2.5"),
        ({"budget": None}, "budget must be a whole number, got None"),
        ({"split_size": "4"}, "split-size must be a whole number, got '4'"),
        ({"verbose": 1}, "verbose must be true or false, got 1"),
        ({"timeout": math.inf}, "timeout must be a finite number, got inf"),
        ({"timeout": -math.nan}, "timeout must be a finite number, got nan"),
        (
            {"timeout": 10**400},
            "timeout must be at most 1.8e+308 in magnitude (a float's range), got 1.0e+400",
        ),
        (
            {"budget": -(10**309)},
            "budget must be at most 1.8e+308 in magnitude (a float's range), got -1.0e+309",
        ),
    ],
)
def test_an_option_of_the_wrong_type_is_named_as_users_write_it(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_option_types(Options(**changes))  # type: ignore[arg-type]


def test_options_of_their_declared_types_pass() -> None:
    check_option_types(Options())
    check_option_types(Options(timeout=3, split_size=4, verbose=True, memory_limit="1GiB"))
    check_option_types(Options(timeout=1.7e308, budget=-(10**308)))


@pytest.mark.parametrize(
    ("name", "value", "lowest", "exclusive", "message"),
    [
        ("budget", 0, 0, True, "budget must be positive, got 0"),
        ("budget", -1, 0, False, "budget must not be negative, got -1"),
        ("timeout", 0.5, 1, False, "timeout must be at least 1, got 0.5"),
        ("timeout", 1, 1, True, "timeout must be above 1, got 1"),
        ("timeout", math.nan, 0, True, "timeout must be positive, got nan"),
        ("split_size", 0, 0, True, "split-size must be positive, got 0"),
    ],
)
def test_an_option_out_of_range_is_named_with_its_bound(
    name: str, value: float, lowest: float, exclusive: bool, message: str
) -> None:
    options = Options(**{name: value})  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="^" + re.escape(message) + "$"):
        check_at_least(options, name, lowest, exclusive=exclusive)


def test_an_option_not_given_is_in_range() -> None:
    check_at_least(Options(), "split_size", 0, exclusive=True)


def test_a_byte_size_option_is_named_when_it_does_not_parse() -> None:
    check_byte_size(Options(), "memory_limit")
    check_byte_size(Options(memory_limit="16GiB"), "memory_limit")
    with pytest.raises(ValueError, match=r"^memory-limit: unknown unit 'XB'"):
        check_byte_size(Options(memory_limit="12XB"), "memory_limit")


def test_option_names_are_kebab_case() -> None:
    assert option_name("node_limit") == "node-limit"
    assert option_name("seed") == "seed"


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("1e-3", "0.001"),
        ("3E2", "3E+2"),
        (".5", "0.5"),
        ("1_000", "1000"),
        (" 2 ", "2"),
        ("1e400", "1E+400"),
        ("inf", "Infinity"),
    ],
)
def test_numbers_are_read_as_python_writes_them(text: str, value: str) -> None:
    number = read_number(text)
    assert number is not None and str(number) == value


@pytest.mark.parametrize("text", ["abc", "0x10", "16GiB", "sNaN", "1e", ""])
def test_text_that_python_does_not_read_as_a_number_is_none(text: str) -> None:
    assert read_number(text) is None
