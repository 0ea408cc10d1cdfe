"""Request validation for ``POST /v1/responses`` and WebSocket ``response.create``.

Pure: takes the decoded JSON body, returns a :class:`CreateRequest` or raises
:class:`RequestError` carrying the OpenAI-style status, code, message and param
(docs/protocol.md §1.5).  The same rules serve both transports so that a body accepted
over HTTP is accepted over WebSocket.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
TOOL_CHOICES = ("auto", "none", "required")
# Input items of the API's hosted and client-run tools the simulated model never makes itself:
# accepted as context an agent sends back (their JSON is charged, docs/server.md).
CONTEXT_ITEM_TYPES = (
    "apply_patch_call",
    "apply_patch_call_output",
    "code_interpreter_call",
    "computer_call",
    "computer_call_output",
    "file_search_call",
    "image_generation_call",
    "local_shell_call",
    "local_shell_call_output",
    "mcp_approval_request",
    "mcp_approval_response",
    "mcp_call",
    "mcp_list_tools",
    "shell_call",
    "shell_call_output",
    "tool_search_call",
    "tool_search_output",
    "web_search_call",
)


class RequestError(Exception):
    """An invalid request; becomes a 4xx body or a WebSocket ``error`` event."""

    def __init__(
        self,
        status: int,
        code: str | None,
        message: str,
        param: str | None = None,
        type_: str = "invalid_request_error",
    ) -> None:
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.param = param
        self.type = type_


@dataclass(slots=True)
class CreateRequest:
    model: str
    input_items: list[dict[str, Any]]
    instructions: str | None = None
    tools: list[dict[str, Any]] = field(default_factory=list)
    tool_choice: Any = "auto"
    parallel_tool_calls: bool = True
    previous_response_id: str | None = None
    store: bool = True
    stream: bool = False
    max_output_tokens: int | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    stream_id: str | None = None
    generate: bool = True
    background: bool = False
    raw: dict[str, Any] = field(default_factory=dict)
    # Messages prompt caching (core/messages.py): when set, the prefixes the engine may read
    # and the ones it writes for this request, as (key, tokens), instead of every item prefix.
    cache_prefixes: list[tuple[int, int]] | None = None
    cache_writes: list[tuple[int, int]] | None = None
    # A Messages ``thinking.budget_tokens``: the most the reasoning may take, not its plan.
    reasoning_ceiling: int | None = None


# The OpenAI-style refusals Responses and Chat Completions share (core/chat.py imports them).


def invalid(message: str, param: str | None, code: str | None = "invalid_value") -> RequestError:
    return RequestError(400, code, message, param)


def wrong_type(where: str, expected: str, value: Any) -> RequestError:
    return invalid(
        f"Invalid type for '{where}': expected {expected}, got {type_name(value)}.",
        where,
        "invalid_type",
    )


def missing(where: str) -> RequestError:
    return invalid(f"Missing required parameter: '{where}'.", where, "missing_required_parameter")


def string_map(value: Any, where: str = "metadata") -> dict[str, str]:
    """``metadata`` and the like: a map of strings to strings (absent: empty)."""
    if value is None:
        return {}
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid(
            f"Invalid type for '{where}': expected a map of strings to strings.",
            where,
            "invalid_type",
        )
    return value


def renamed(err: RequestError, old: str, new: str, param: str | None) -> RequestError:
    """A shared limit error (``max_output_tokens`` too large) in another API's terms."""
    return RequestError(err.status, err.code, err.message.replace(old, new), param, err.type)


def type_name(value: Any) -> str:
    """A JSON value's type as an error message names it (``null`` for None)."""
    return "null" if value is None else type(value).__name__


def checked(value: Any, where: str, expected: str, kind: type | tuple[type, ...]) -> Any:
    """``value`` when absent or of ``kind``; else the ``invalid_type`` refusal."""
    if value is not None and not isinstance(value, kind):
        raise wrong_type(where, expected, value)
    return value


def one_of(
    value: Any, where: str, choices: tuple[str, ...], more: str = "", *, required: bool = False
) -> Any:
    """``value`` when one of ``choices`` (or absent, unless ``required``); ``more`` names what
    else the caller accepts."""
    if (value is not None or required) and value not in choices:
        raise invalid(
            f"Invalid value for '{where}': expected one of {', '.join(choices)}{more}, got {value!r}.",
            where,
        )
    return value


def number_in(value: Any, lo: float, hi: float = math.inf, kind: Any = int | float) -> bool:
    """Whether ``value`` is a JSON number of ``kind`` (never a boolean) from ``lo`` to ``hi``."""
    return not isinstance(value, bool) and isinstance(value, kind) and lo <= value <= hi


def token_cap(value: Any, where: str) -> int | None:
    """An output cap (``max_output_tokens``, ``max_tokens``): absent, or 1 to 1,000,000."""
    if value is not None and not number_in(value, 1, 1_000_000, int):
        raise invalid(
            f"Invalid value for '{where}': expected an integer from 1 to 1000000, got {value!r}.",
            where,
        )
    return value


def body_model(body: Any) -> tuple[dict[str, Any], str]:
    """A request body that is a JSON object, and its required string ``model``."""
    if not isinstance(body, dict):
        raise invalid(
            f"Invalid request body: expected a JSON object, got {type_name(body)}.",
            None,
            "invalid_json",
        )
    model = checked(body.get("model"), "model", "a string", str)
    if not model:
        raise missing("model")
    return body, model


def objects(values: list[Any], name: str) -> Iterator[tuple[str, dict[str, Any]]]:
    """Each element of the array ``name`` with where it stands (``name[i]``): an object."""
    for i, value in enumerate(values):
        where = f"{name}[{i}]"
        if not isinstance(value, dict):
            raise wrong_type(where, "an object", value)
        yield where, value


def content_parts(parts: list[Any], where: str) -> Iterator[tuple[int, dict[str, Any]]]:
    """Each part of a message's content array, numbered: an object with a string ``type``."""
    for j, part in enumerate(parts):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise invalid(
                f"Invalid value for '{where}[{j}]': expected a content part object with a 'type'.",
                f"{where}[{j}]",
            )
        yield j, part


def booleans(body: dict[str, Any], flags: tuple[str, ...]) -> None:
    """Each of ``flags`` that ``body`` sets is a boolean (or null)."""
    for flag in flags:
        checked(body.get(flag), flag, "a boolean", bool)


def function_name(name: Any, where: str) -> str:
    """A function tool's name: what the API accepts (1 to 64 characters)."""
    if not isinstance(name, str) or not name or len(name) > 64:
        raise invalid(
            f"Invalid value for '{where}': expected a non-empty string of at most 64 characters.",
            where,
        )
    return name


def _normalize_item(where: str, item: dict[str, Any]) -> dict[str, Any]:
    kind = item.get("type")
    if kind is None or kind == "message":
        role = one_of(item.get("role"), f"{where}.role", MESSAGE_ROLES, required=True)
        content = item.get("content")
        if isinstance(content, list):
            content = [part for _, part in content_parts(content, f"{where}.content")]
        elif not isinstance(content, str):
            raise wrong_type(f"{where}.content", "a string or an array of content parts", content)
        return {"type": "message", "role": role, "content": content}
    if kind in ("function_call", "custom_tool_call"):
        payload = "arguments" if kind == "function_call" else "input"
        for key in ("call_id", "name", payload):
            if not isinstance(item.get(key), str):
                raise missing(f"{where}.{key}")
        return _namespaced(item, where)
    if kind in ("function_call_output", "custom_tool_call_output"):
        if not isinstance(item.get("output"), (str, list)):
            raise missing(f"{where}.output")
        # Codex sends the output of a tool it ran by itself (its goal tools) with an `id`, a
        # `name` and a `namespace` and no `call_id`; the API takes it, so a name will do.
        if not isinstance(item.get("call_id"), str) and not isinstance(item.get("name"), str):
            raise missing(f"{where}.call_id")
        return _namespaced(item, where)
    if kind == "reasoning":
        return _reasoning_item(item, where)
    if kind == "item_reference":
        return item
    if kind == "compaction":  # POST /v1/responses/compact's output sent back
        if not isinstance(item.get("encrypted_content"), str) or not item["encrypted_content"]:
            raise missing(f"{where}.encrypted_content")
        return item
    if kind in CONTEXT_ITEM_TYPES:
        return item
    raise invalid(
        f"Invalid value for '{where}.type': unsupported input item type {kind!r}.", f"{where}.type"
    )


def _input_items(raw_input: Any) -> list[dict[str, Any]] | None:
    """``input``: a string (one user message) or an array of items; None when neither."""
    if isinstance(raw_input, str):
        return [{"type": "message", "role": "user", "content": raw_input}]
    if isinstance(raw_input, list):
        return [_normalize_item(*it) for it in objects(raw_input, "input")]
    return None


def _namespaced(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A tool call or output item; its ``namespace`` (a group of tools) is a string when set."""
    checked(item.get("namespace"), f"{where}.namespace", "a string", str)
    return item


def _reasoning_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A reasoning item sent back as input: its summary parts and opaque blob are typed."""
    summary = item.get("summary", [])
    if not isinstance(summary, list):
        raise wrong_type(f"{where}.summary", "an array of summary parts", summary)
    for j, part in enumerate(summary):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise invalid(
                f"Invalid value for '{where}.summary[{j}]': expected an object with a string 'text'.",
                f"{where}.summary[{j}]",
            )
    checked(item.get("encrypted_content"), f"{where}.encrypted_content", "a string", str)
    return item


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_SUMMARIES = ("auto", "concise", "detailed")


@dataclass(frozen=True, slots=True)
class ReasoningOptions:
    """What a create asks of the model's reasoning (docs/model.md §12)."""

    effort: str | None = None
    summary: bool = False
    include_encrypted: bool = False


def reasoning_options(body: dict[str, Any]) -> ReasoningOptions:
    """The ``reasoning`` and ``include`` fields of a create body, checked.

    Checked here, not only echoed, because the response echoes ``reasoning`` and a
    value outside the API's enums would make a strict client reject the response.
    """
    raw = checked(body.get("reasoning"), "reasoning", "an object", dict) or {}
    effort = one_of(raw.get("effort"), "reasoning.effort", REASONING_EFFORTS)
    summary: Any = None
    for key in ("summary", "generate_summary"):
        value = one_of(raw.get(key), f"reasoning.{key}", REASONING_SUMMARIES, " or null")
        summary = summary if value is None else value
    include = body.get("include")
    if include is None:
        include = []
    if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
        raise wrong_type("include", "an array of strings", include)
    return ReasoningOptions(effort, summary is not None, "reasoning.encrypted_content" in include)


def function_tool(fn: dict[str, Any], where: str, seen: set[str]) -> str:
    """A function tool's name (unique among ``seen``, which it joins) and ``parameters``, checked."""
    name = function_name(fn.get("name"), f"{where}.name")
    if name in seen:
        raise invalid(f"Invalid '{where}.name': duplicate function name {name!r}.", f"{where}.name")
    seen.add(name)
    params = checked(fn.get("parameters"), f"{where}.parameters", "a JSON schema object", dict)
    if isinstance(params, dict) and params.get("type", "object") != "object":
        raise invalid(
            f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{params.get('type')}\"'.",
            f"{where}.parameters",
            "invalid_function_parameters",
        )
    return name


def _validate_tool(where: str, tool: dict[str, Any], seen: set[str]) -> dict[str, Any]:
    if tool.get("type") != "function":
        # Hosted tools (web_search, …) are accepted and never called by the simulated model.
        if isinstance(tool.get("type"), str):
            return tool
        raise missing(f"{where}.type")
    function_tool(tool, where, seen)
    return tool


def tool_choice(value: Any, tools: list[dict[str, Any]], *, chat: bool = False) -> Any:
    """``tool_choice`` as the output model reads it: a mode, or the one function forced.

    ``allowed_tools`` is read as its ``mode`` (the simulated model picks among every
    function tool); a hosted or custom tool forced is one it never calls, so it answers.
    ``chat``: the Chat Completions shape, whose objects nest the name and the mode.
    """
    if value is None:
        return "auto"
    functions = [t.get("name") for t in tools if t.get("type") == "function"]
    kind = value.get("type") if isinstance(value, dict) else None
    if kind == "function":
        fn = value.get("function") if chat else value
        name = fn.get("name") if isinstance(fn, dict) else None
        where = "tool_choice.function.name" if chat else "tool_choice.name"
        if name not in functions:
            raise invalid(f"Invalid value for '{where}': no function tool named {name!r}.", where)
        return {"type": "function", "name": name}
    if kind == "allowed_tools":
        allowed = value.get("allowed_tools") if chat else value
        value = allowed.get("mode", "auto") if isinstance(allowed, dict) else None
        where = "tool_choice.allowed_tools.mode" if chat else "tool_choice.mode"
        if value not in ("auto", "required"):
            raise invalid(
                f"Invalid value for '{where}': expected 'auto' or 'required', got {value!r}.",
                where,
            )
    elif chat and not isinstance(value, str) and kind != "custom":
        raise invalid(
            "Invalid value for 'tool_choice': expected 'auto', 'none', 'required' or an object "
            "of type 'function', 'custom' or 'allowed_tools'.",
            "tool_choice",
        )
    elif isinstance(value, dict):
        if not isinstance(kind, str):
            raise missing("tool_choice.type")
        return "none"
    elif not isinstance(value, str):
        raise invalid(
            f"Invalid type for 'tool_choice': got {type_name(value)}.",
            "tool_choice",
            "invalid_type",
        )
    one_of(value, "tool_choice", TOOL_CHOICES, " or an object")
    if value == "required" and not functions:
        raise invalid(
            "Tool choice 'required' needs at least one function tool in 'tools'.", "tool_choice"
        )
    return value


def parse_create(body: Any, *, websocket: bool = False) -> CreateRequest:
    """Validate a create body.  ``websocket`` enables the WS-only fields."""
    body, model = body_model(body)
    raw_input = body.get("input")
    items = _input_items(raw_input) if raw_input is not None else []
    if items is None:
        raise wrong_type("input", "a string or an array of input items", raw_input)
    tools_raw = checked(body.get("tools") or [], "tools", "an array", list)
    seen: set[str] = set()
    tools = [_validate_tool(*t, seen) for t in objects(tools_raw, "tools")]
    choice = tool_choice(body.get("tool_choice"), tools)
    mot = token_cap(body.get("max_output_tokens"), "max_output_tokens")
    metadata = string_map(body.get("metadata"))
    prev = body.get("previous_response_id")
    if prev is not None and (not isinstance(prev, str) or not prev):
        raise invalid(
            "Invalid value for 'previous_response_id': expected a non-empty string.",
            "previous_response_id",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise invalid(
            "Invalid type for 'instructions': expected a string.", "instructions", "invalid_type"
        )
    booleans(body, ("store", "stream", "parallel_tool_calls", "generate", "background"))
    if not items and prev is None and body.get("generate", True) is not False:
        raise missing("input")
    stream_id = body.get("stream_id") if websocket else None
    reasoning_options(body)
    return CreateRequest(
        model=model,
        input_items=items,
        instructions=instructions,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls", True) is not False,
        previous_response_id=prev,
        store=body.get("store", True) is not False,
        stream=bool(body.get("stream", False)),
        max_output_tokens=mot,
        metadata=metadata,
        stream_id=stream_id,
        generate=body.get("generate", True) is not False,
        background=bool(body.get("background", False)),
        raw=body,
    )


@dataclass(slots=True)
class AppendRequest:
    """``response.append`` of the append prototype (docs/protocol.md §5).

    ``metadata`` and ``tool_choice`` are optional loopbench extensions: when
    present they steer the output of the next segment (as the create's did for
    the first), so a replayed rollout keeps its per-turn shape.
    """

    response_id: str
    input_items: list[dict[str, Any]]
    metadata: dict[str, str] | None = None
    tool_choice: Any = None


def parse_append(body: dict[str, Any]) -> AppendRequest:
    rid = body.get("response_id")
    if not isinstance(rid, str) or not rid:
        raise missing("response_id")
    raw_input = body.get("input")
    items = _input_items(raw_input) if raw_input != [] else None
    if items is None:
        raise invalid(
            f"Invalid value for 'input': expected a non-empty array of input items, got {type_name(raw_input)}.",
            "input",
        )
    metadata = body.get("metadata")
    if metadata is not None:
        metadata = string_map(metadata)
    tool_choice = one_of(body.get("tool_choice"), "tool_choice", TOOL_CHOICES)
    return AppendRequest(rid, items, metadata, tool_choice)
