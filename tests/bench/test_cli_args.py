"""bench/cli_args.py: the argparse types the benches' commands share (strings in, values out)."""

from __future__ import annotations

import argparse

import pytest

from bench.cli_args import at_least, names_of, positive_ints


def test_names_are_taken_from_the_allowed_ones_and_an_empty_list_only_when_allowed() -> None:
    tools = names_of(("a", "b", "c"))
    assert tools(" c, a ,") == ("c", "a")
    with pytest.raises(argparse.ArgumentTypeError, match="expected one or more of a, b, c"):
        tools("a,d")
    with pytest.raises(argparse.ArgumentTypeError, match="got ','"):
        tools(",")
    assert names_of(("a", "b"), required=False)("") == ()


def test_counts_are_positive_and_the_error_names_the_example() -> None:
    levels = positive_ints("counts like 1,4")
    assert levels("1,4,") == (1, 4)
    for bad in ("0,4", "x", ""):
        with pytest.raises(argparse.ArgumentTypeError, match="expected counts like 1,4"):
            levels(bad)


def test_a_whole_number_below_the_floor_or_not_a_number_is_refused() -> None:
    assert at_least(0)("0") == 0 and at_least(1)("7") == 7
    for bad in ("0", "-3", "1.5", "x"):
        with pytest.raises(
            argparse.ArgumentTypeError, match=f"expected a whole number >= 1, got '{bad}'"
        ):
            at_least(1)(bad)
