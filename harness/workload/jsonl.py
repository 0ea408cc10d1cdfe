"""JSON Lines input: one value per non-blank line, errors naming the line."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from typing import Any

import orjson


def json_lines(
    lines: Iterable[str], bad_line: Callable[[int, str], Exception]
) -> Iterator[tuple[int, str, Any]]:
    """``(line number, text, value)`` of each non-blank line, numbered from 1.

    Invalid JSON raises ``bad_line(line number, "invalid JSON: ...")``.
    """
    for lineno, raw in enumerate(lines, start=1):
        text = raw.strip()
        if not text:
            continue
        try:
            value = orjson.loads(text)
        except orjson.JSONDecodeError as exc:
            raise bad_line(lineno, f"invalid JSON: {exc}") from None
        yield lineno, text, value
