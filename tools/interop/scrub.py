"""Captured agent requests → test data without the agents' authored prose (tests/data/agents/).

A request an agent sends carries its authors' system prompts, tool descriptions and
grammars, and the agent's own tool outputs.  The server's behaviour depends on their
structure and lengths, not their words: every such string becomes neutral placeholder
text of the same length, while field names, item and tool types, ids, JSON Schemas
(property names, types, enums, required), arguments the simulated model wrote and
headers stay as they were.
"""

from __future__ import annotations

from typing import Any

FILLER = "Placeholder text of the original length standing in for the authors' prose. "
# Tool outputs this short are the agents' error and status lines (interface, not prose).
SHORT_OUTPUT = 120
# Strings kept verbatim wherever they occur: the tasks the capture gave the agents.
TASKS: frozenset[str] = frozenset()


def placeholder(length: int) -> str:
    """Neutral text exactly ``length`` characters long."""
    return (FILLER * (length // len(FILLER) + 1))[:length]


def _prose(value: Any, tasks: frozenset[str]) -> Any:
    """Text or an array of content parts, each text replaced (a task kept)."""
    if isinstance(value, str):
        return value if value in tasks or not value else placeholder(len(value))
    if isinstance(value, list):
        return [_part(p, tasks) for p in value]
    return value


def _part(part: Any, tasks: frozenset[str]) -> Any:
    if not isinstance(part, dict):
        return part
    out = dict(part)
    for key in ("text", "thinking"):
        if isinstance(out.get(key), str):
            out[key] = _prose(out[key], tasks)
    if out.get("type") == "tool_result":
        out["content"] = _output(out.get("content"), tasks)
    return out


def _output(value: Any, tasks: frozenset[str]) -> Any:
    if isinstance(value, str):
        return value if len(value) <= SHORT_OUTPUT else placeholder(len(value))
    return _prose(value, tasks)


def _schema(value: Any) -> Any:
    """A JSON Schema with every ``description`` replaced; names, types, enums kept."""
    if isinstance(value, dict):
        return {
            k: placeholder(len(v)) if k == "description" and isinstance(v, str) else _schema(v)
            for k, v in value.items()
        }
    if isinstance(value, list):
        return [_schema(v) for v in value]
    return value


def _tool(tool: Any) -> Any:
    if not isinstance(tool, dict):
        return tool
    out = _schema(tool)
    fmt = out.get("format")
    if isinstance(fmt, dict) and isinstance(fmt.get("definition"), str):
        out["format"] = dict(fmt, definition=placeholder(len(fmt["definition"])))
    if isinstance(out.get("tools"), list):  # a namespace of tools
        out["tools"] = [_tool(t) for t in out["tools"]]
    return out


def _item(item: Any, tasks: frozenset[str]) -> Any:
    """A Responses input item, a Chat message or a Messages message."""
    if not isinstance(item, dict):
        return item
    out = dict(item)
    kind = out.get("type", "message")
    if kind in ("function_call_output", "custom_tool_call_output") or out.get("role") == "tool":
        key = "output" if "output" in out else "content"
        out[key] = _output(out.get(key), tasks)
    elif kind == "message" and "content" in out:
        out["content"] = _prose(out["content"], tasks)
    return out


def scrub_body(body: Any, tasks: frozenset[str] = TASKS) -> Any:
    """A request body (Responses, WebSocket ``response.create``, Chat or Messages) scrubbed."""
    if not isinstance(body, dict):
        return body
    out = dict(body)
    if isinstance(out.get("instructions"), str):
        out["instructions"] = _prose(out["instructions"], tasks)
    if isinstance(out.get("system"), (str, list)):
        out["system"] = _prose(out["system"], tasks)
    for key in ("input", "messages"):
        if isinstance(out.get(key), list):
            out[key] = [_item(it, tasks) for it in out[key]]
        elif isinstance(out.get(key), str):
            out[key] = _prose(out[key], tasks)
    if isinstance(out.get("tools"), list):
        out["tools"] = [_tool(t) for t in out["tools"]]
    return out
