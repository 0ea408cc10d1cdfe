"""The argparse types and options the benches' and tools' ``python -m`` commands share."""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence


def positive_ints(example: str) -> Callable[[str], tuple[int, ...]]:
    """An argparse type for comma-separated counts (``--levels 1,16,64``): the error names
    ``example``."""

    def parse(text: str) -> tuple[int, ...]:
        try:
            levels = tuple(int(x) for x in text.split(",") if x.strip())
        except ValueError:
            levels = ()
        if not levels or min(levels) < 1:
            raise argparse.ArgumentTypeError(f"expected {example}, got {text!r}")
        return levels

    return parse


def at_least(low: int) -> Callable[[str], int]:
    """An argparse type for a whole number no smaller than ``low`` (``--trials 1000``)."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            value = low - 1
        if value < low:
            raise argparse.ArgumentTypeError(f"expected a whole number >= {low}, got {text!r}")
        return value

    return parse


def names_of(allowed: Sequence[str], *, required: bool = True) -> Callable[[str], tuple[str, ...]]:
    """An argparse type for comma-separated names out of ``allowed`` (``--tools a,b``); with
    ``required`` False an empty list is one too (nothing of that kind is run)."""
    some = "one or more" if required else "none or some"

    def parse(text: str) -> tuple[str, ...]:
        names = tuple(t.strip() for t in text.split(",") if t.strip())
        if set(names) - set(allowed) or (required and not names):
            raise argparse.ArgumentTypeError(
                f"expected {some} of {', '.join(allowed)}, got {text!r}"
            )
        return names

    return parse


def add_check_and_quiet(p: argparse.ArgumentParser, check: str) -> None:
    """``--check`` (exit codes that judge the figures, as ``check`` says) and ``-q``."""
    p.add_argument("--check", action="store_true", help=check)
    p.add_argument("-q", "--quiet", action="store_true", help="no progress lines")
