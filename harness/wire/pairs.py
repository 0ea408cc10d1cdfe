"""Repeated ``KEY=VALUE`` options (``--set``, ``--fault``): one parser for client and server."""

from __future__ import annotations

from collections.abc import Callable, Iterable


def parse_key_values(
    items: Iterable[str], malformed: Callable[[str], BaseException]
) -> dict[str, str]:
    """``["a=1", "b = 2"]`` as ``{"a": "1", "b": "2"}``.

    An item without ``=`` or without a key raises ``malformed(item)``.
    """
    out: dict[str, str] = {}
    for item in items:
        key, sep, value = item.partition("=")
        if not sep or not key.strip():
            raise malformed(item)
        out[key.strip()] = value.strip()
    return out
