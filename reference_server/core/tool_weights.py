"""Which tool the simulated model calls (pure, seeded).

A real agent offers a dozen tools and its model mostly runs commands, reads,
searches and edits; it seldom asks the user, plans, or ends the session.  The
engine profile's ``tool_weights`` say so as name patterns (shell-style,
case-insensitive, first match wins) → weight; a tool no pattern matches weighs 1.
Only ``function`` tools are ever called: server tools (web search, Anthropic's
typed tools), Responses ``custom`` (free-form, e.g. Codex's ``apply_patch``) tools
and tools marked ``defer_loading`` are accepted, never called (docs/model.md §11, "Which tool.").
"""

from __future__ import annotations

import random
from collections.abc import Mapping, Sequence
from fnmatch import fnmatchcase
from typing import Any


def callable_tools(tools: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The tools the simulated model may call: function tools with a name, not deferred.

    A ``defer_loading`` tool is only a name until the client's tool search loads it,
    which the simulated model never does.
    """
    return [
        t
        for t in tools
        if t.get("type") == "function"
        and isinstance(t.get("name"), str)
        and t.get("defer_loading") is not True
    ]


def tool_weight(name: str, weights: Mapping[str, float]) -> float:
    lowered = name.lower()
    for pattern, weight in weights.items():
        if fnmatchcase(lowered, pattern.lower()):
            return weight
    return 1.0


def pick_tool(
    tools: Sequence[dict[str, Any]], weights: Mapping[str, float], rng: random.Random
) -> dict[str, Any]:
    """One of ``tools`` by weight; uniformly when every weight is 0 (the call is owed)."""
    scores = [tool_weight(str(t.get("name")), weights) for t in tools]
    if sum(scores) <= 0:
        return rng.choice(list(tools))
    return rng.choices(list(tools), weights=scores)[0]
