"""Strict function tools for test requests: the envelope the Responses API wants, written once."""

from __future__ import annotations

from typing import Any


def strict_tool(name: str, description: str = "", **properties: dict[str, Any]) -> dict[str, Any]:
    """A strict function tool whose arguments are exactly ``properties``, every one required."""
    tool: dict[str, Any] = {"type": "function", "name": name}
    if description:
        tool["description"] = description
    tool["strict"] = True
    tool["parameters"] = {
        "type": "object",
        "properties": properties,
        "required": list(properties),
        "additionalProperties": False,
    }
    return tool
