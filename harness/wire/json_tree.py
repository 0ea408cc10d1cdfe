"""Walks over parsed JSON (dicts and lists as ``json.loads`` gives them)."""

from __future__ import annotations

from typing import Any


def without_key(node: Any, key: str) -> Any:
    """A copy of ``node`` with ``key`` dropped from every object at every depth."""
    if isinstance(node, dict):
        return {k: without_key(v, key) for k, v in node.items() if k != key}
    if isinstance(node, list):
        return [without_key(v, key) for v in node]
    return node
