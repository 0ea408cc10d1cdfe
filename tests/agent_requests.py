"""The real agents' captured requests (tests/data/agents/, its README says how they were made)."""

from __future__ import annotations

import copy
import json
from functools import cache
from pathlib import Path
from typing import Any

DATA = Path(__file__).parent / "data" / "agents"
RESPONSES = ("codex-http", "codex-ws", "openai-agents-http", "openai-agents-ws")
MESSAGES = ("claude-code",)
CHAT = ("openai-agents-chat",)


@cache
def _load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = json.loads((DATA / f"{name}.json").read_text())
    return doc


def captured(name: str) -> dict[str, Any]:
    """One file of captures, a fresh copy (a test may change it)."""
    return copy.deepcopy(_load(name))


def bodies(name: str) -> list[dict[str, Any]]:
    """Every body the agent sent in ``name``: HTTP request bodies or WebSocket messages, in order."""
    doc = captured(name)
    if "requests" in doc:
        return [r["body"] for r in doc["requests"]]
    return list(doc["connection"]["messages"])


def ids(names: tuple[str, ...]) -> list[tuple[str, int]]:
    """(file, index of the body) of every body in ``names``: pytest parameters."""
    return [(n, i) for n in names for i in range(len(bodies(n)))]
