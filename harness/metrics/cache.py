"""Cached input tokens: the share of a turn's input the server reports as served from its
prefix cache, per transport and by turn index (docs/metrics.md §1.2, ``cached_ratio``).

The ratio is of token sums, ``sum(cached_tokens) / sum(input_tokens)``, over the turns that
reported input tokens; why sums and which turns: docs/observability.md §2.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

#: one turn index's sums: [turns that reported input, input tokens, cached tokens]
Row = list[int]


def add(by_turn: list[Row], turn_index: int, input_tokens: int, cached_tokens: int) -> None:
    """Fold one turn's usage into ``by_turn`` (indexed by turn index; grown as needed)."""
    if input_tokens <= 0 or turn_index < 0:
        return
    if turn_index >= len(by_turn):
        by_turn.extend([0, 0, 0] for _ in range(turn_index + 1 - len(by_turn)))
    row = by_turn[turn_index]
    row[0] += 1
    row[1] += input_tokens
    row[2] += cached_tokens


def merge(into: list[Row], other: Sequence[Sequence[int]]) -> None:
    for i, row in enumerate(other):
        if i >= len(into):
            into.append([0, 0, 0])
        into[i] = [a + int(b) for a, b in zip(into[i], row, strict=True)]


def ratio(cached_tokens: int, input_tokens: int) -> float | None:
    """``cached / input`` to 4 digits; None when no input token was reported."""
    return round(cached_tokens / input_tokens, 4) if input_tokens > 0 else None


def totals(by_turn: Sequence[Sequence[int]]) -> tuple[int, int]:
    """(input tokens, cached tokens) over every turn index."""
    return sum(r[1] for r in by_turn), sum(r[2] for r in by_turn)


def group(by_turn: Sequence[Sequence[int]]) -> dict[str, Any]:
    """The ``cache`` group of one transport in ``summary.json``."""
    input_tokens, cached_tokens = totals(by_turn)
    return {
        "cached_ratio": ratio(cached_tokens, input_tokens),
        "input_tokens": input_tokens,
        "cached_tokens": cached_tokens,
        # turn indexes no turn reported usage at are left out, not listed as null
        "by_turn": [
            {
                "turn_index": i,
                "turns": n,
                "input_tokens": tokens,
                "cached_tokens": cached,
                "cached_ratio": ratio(cached, tokens),
            }
            for i, (n, tokens, cached) in enumerate(by_turn)
            if n
        ],
    }
