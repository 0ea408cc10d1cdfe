"""Counted nouns in messages: ``1 rollout``, ``2 rollouts`` (never ``1 rollouts``)."""

from __future__ import annotations


def plural(n: float, noun: str, many: str | None = None) -> str:
    """``noun`` for exactly one, else ``many`` (default: ``noun`` + ``s``)."""
    return noun if n == 1 else (many or f"{noun}s")


def counted(n: int, noun: str, many: str | None = None) -> str:
    """``1 rollout``, ``1,200 rollouts``: the count (thousands separated) and its noun."""
    return f"{n:,} {plural(n, noun, many)}"
