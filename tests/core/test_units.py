"""The one parser of each kind of number (edgepipe/core/units.py)."""

from __future__ import annotations

import argparse
import math

import pytest

from edgepipe.core.units import check_seconds, number, seconds, whole


def test_numbers_and_whole_numbers_within_their_bounds() -> None:
    share = number("a number from 0 to 1", at_least=0, at_most=1)
    assert share("0") == 0.0
    assert share("1") == 1.0
    with pytest.raises(argparse.ArgumentTypeError):
        share("1.01")
    count = whole(1)
    assert count("2048") == 2048
    assert count("2e3") == 2000
    for bad in ("0", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="expected a whole number of at least 1"):
            count(bad)


def test_a_whole_number_is_read_exactly_and_a_fraction_refused() -> None:
    count = whole(1, what="a positive whole number")
    assert count("3e9") == 3_000_000_000
    assert count("12345678901234567891") == 12345678901234567891  # a float would round it
    for bad in ("3.5", "-3e9", "0", "inf", "nan", "1e400"):
        with pytest.raises(
            argparse.ArgumentTypeError, match=f"expected a positive whole number, got {bad!r}"
        ):
            count(bad)


@pytest.mark.parametrize("text", ["0", "-1", "nan", "inf", "soon", ""])
def test_seconds_above_0_refuses_what_is_not_and_names_the_bound(text: str) -> None:
    parse = seconds(above=0)
    assert parse("2.5") == 2.5
    with pytest.raises(
        argparse.ArgumentTypeError, match=f"expected a finite number of seconds above 0, got {text!r}"
    ):
        parse(text)


def test_seconds_at_least_and_at_most() -> None:
    parse = seconds(at_least=0, at_most=60)
    assert parse("0") == 0.0
    with pytest.raises(argparse.ArgumentTypeError, match="seconds at least 0 and at most 60, got '61'"):
        parse("61")


@pytest.mark.parametrize("value", [math.nan, math.inf, -1.0, 0, True, "1", None])
def test_check_seconds_refuses_what_cannot_be_a_duration(value: object) -> None:
    with pytest.raises(
        ValueError, match=rf"post_s must be a finite number of seconds above 0, got {value!r}"
    ):
        check_seconds("post_s", value, above=0)


def test_check_seconds_gives_a_float_within_its_bounds() -> None:
    assert check_seconds("pre_s", 0, at_least=0) == 0.0
    assert isinstance(check_seconds("pre_s", 2, at_least=0), float)
