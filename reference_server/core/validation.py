"""Request validation for ``POST /v1/responses`` and WebSocket ``response.create``.

Pure: takes the decoded JSON body, returns a :class:`CreateRequest` or raises
:class:`RequestError` carrying the OpenAI-style status, code, message and param
(docs/protocol.md §1.5).  The same rules serve both transports so that a body accepted
over HTTP is accepted over WebSocket.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

MESSAGE_ROLES = ("user", "system", "developer", "assistant")
TOOL_CHOICES = ("auto", "none", "required")


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


def _invalid(message: str, param: str | None, code: str | None = "invalid_value") -> RequestError:
    return RequestError(400, code, message, param)


def _wrong_type(where: str, expected: str, value: Any) -> RequestError:
    return _invalid(
        f"Invalid type for '{where}': expected {expected}, got {_type_name(value)}.",
        where,
        "invalid_type",
    )


def _metadata(value: Any) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _invalid(
            "Invalid type for 'metadata': expected a map of strings to strings.",
            "metadata",
            "invalid_type",
        )
    return value


def _type_name(value: Any) -> str:
    return "null" if value is None else type(value).__name__


def _normalize_item(item: Any, where: str) -> dict[str, Any]:
    if not isinstance(item, dict):
        raise _wrong_type(where, "an object", item)
    kind = item.get("type")
    if kind is None or kind == "message":
        role = item.get("role")
        if role not in MESSAGE_ROLES:
            raise _invalid(
                f"Invalid value for '{where}.role': expected one of {', '.join(MESSAGE_ROLES)}, got {role!r}.",
                f"{where}.role",
            )
        content = item.get("content")
        if isinstance(content, list):
            for j, part in enumerate(content):
                if not isinstance(part, dict) or not isinstance(part.get("type"), str):
                    raise _invalid(
                        f"Invalid value for '{where}.content[{j}]': expected a content part object with a 'type'.",
                        f"{where}.content[{j}]",
                    )
        elif not isinstance(content, str):
            raise _wrong_type(f"{where}.content", "a string or an array of content parts", content)
        return {"type": "message", "role": role, "content": content}
    if kind == "function_call":
        for key in ("call_id", "name", "arguments"):
            if not isinstance(item.get(key), str):
                raise _invalid(
                    f"Missing required parameter: '{where}.{key}'.",
                    f"{where}.{key}",
                    "missing_required_parameter",
                )
        return item
    if kind == "function_call_output":
        out = item.get("output")
        if not isinstance(out, (str, list)):
            raise _invalid(
                f"Missing required parameter: '{where}.output'.",
                f"{where}.output",
                "missing_required_parameter",
            )
        if not isinstance(item.get("call_id"), str):
            raise _invalid(
                f"Missing required parameter: '{where}.call_id'.",
                f"{where}.call_id",
                "missing_required_parameter",
            )
        return item
    if kind == "reasoning":
        return _reasoning_item(item, where)
    if kind == "item_reference":
        return item
    if kind == "compaction":
        return _compaction_input(item, where)
    raise _invalid(
        f"Invalid value for '{where}.type': unsupported input item type {kind!r}.", f"{where}.type"
    )


def _reasoning_item(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A reasoning item sent back as input: its summary parts and opaque blob are typed."""
    summary = item.get("summary", [])
    if not isinstance(summary, list):
        raise _wrong_type(f"{where}.summary", "an array of summary parts", summary)
    for j, part in enumerate(summary):
        if not isinstance(part, dict) or not isinstance(part.get("text"), str):
            raise _invalid(
                f"Invalid value for '{where}.summary[{j}]': expected an object with a string 'text'.",
                f"{where}.summary[{j}]",
            )
    blob = item.get("encrypted_content")
    if blob is not None and not isinstance(blob, str):
        raise _wrong_type(f"{where}.encrypted_content", "a string", blob)
    return item


REASONING_EFFORTS = ("none", "minimal", "low", "medium", "high", "xhigh", "max")
REASONING_SUMMARIES = ("auto", "concise", "detailed")


@dataclass(frozen=True, slots=True)
class ReasoningOptions:
    """What a create asks of the model's reasoning (docs/server.md "Reasoning")."""

    effort: str | None = None
    summary: bool = False
    include_encrypted: bool = False


def reasoning_options(body: dict[str, Any]) -> ReasoningOptions:
    """The ``reasoning`` and ``include`` fields of a create body, checked.

    Checked here, not only echoed, because the response echoes ``reasoning`` and a
    value outside the API's enums would make a strict client reject the response.
    """
    raw = body.get("reasoning")
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise _wrong_type("reasoning", "an object", raw)
    effort = raw.get("effort")
    if effort is not None and effort not in REASONING_EFFORTS:
        raise _invalid(
            f"Invalid value for 'reasoning.effort': expected one of {', '.join(REASONING_EFFORTS)}, got {effort!r}.",
            "reasoning.effort",
        )
    summary: Any = None
    for key in ("summary", "generate_summary"):
        value = raw.get(key)
        if value is not None and value not in REASONING_SUMMARIES:
            raise _invalid(
                f"Invalid value for 'reasoning.{key}': expected one of {', '.join(REASONING_SUMMARIES)} or null, got {value!r}.",
                f"reasoning.{key}",
            )
        summary = summary if value is None else value
    include = body.get("include")
    if include is None:
        include = []
    if not isinstance(include, list) or not all(isinstance(v, str) for v in include):
        raise _wrong_type("include", "an array of strings", include)
    return ReasoningOptions(effort, summary is not None, "reasoning.encrypted_content" in include)


def _compaction_input(item: dict[str, Any], where: str) -> dict[str, Any]:
    """A compaction item sent back (``POST /v1/responses/compact``'s output): its content is required."""
    if not isinstance(item.get("encrypted_content"), str) or not item["encrypted_content"]:
        raise _invalid(
            f"Missing required parameter: '{where}.encrypted_content'.",
            f"{where}.encrypted_content",
            "missing_required_parameter",
        )
    return item


def _validate_tool(tool: Any, i: int) -> dict[str, Any]:
    where = f"tools[{i}]"
    if not isinstance(tool, dict):
        raise _wrong_type(where, "an object", tool)
    if tool.get("type") != "function":
        # Hosted tools (web_search, …) are accepted and never called by the simulated model.
        if isinstance(tool.get("type"), str):
            return tool
        raise _invalid(
            f"Missing required parameter: '{where}.type'.",
            f"{where}.type",
            "missing_required_parameter",
        )
    name = tool.get("name")
    if not isinstance(name, str) or not name or len(name) > 64:
        raise _invalid(
            f"Invalid value for '{where}.name': expected a non-empty string of at most 64 characters.",
            f"{where}.name",
        )
    params = tool.get("parameters")
    if params is not None and not isinstance(params, dict):
        raise _wrong_type(f"{where}.parameters", "a JSON schema object", params)
    if isinstance(params, dict) and params.get("type", "object") != "object":
        raise _invalid(
            f"Invalid schema for function '{name}': schema must be a JSON Schema of 'type: \"object\"', got 'type: \"{params.get('type')}\"'.",
            f"{where}.parameters",
            "invalid_function_parameters",
        )
    return tool


def parse_create(body: Any, *, websocket: bool = False) -> CreateRequest:
    """Validate a create body.  ``websocket`` enables the WS-only fields."""
    if not isinstance(body, dict):
        raise _invalid(
            f"Invalid request body: expected a JSON object, got {_type_name(body)}.",
            None,
            "invalid_json",
        )
    model = body.get("model")
    if model is not None and not isinstance(model, str):
        raise _wrong_type("model", "a string", model)
    if not model:
        raise RequestError(
            400, "missing_required_parameter", "Missing required parameter: 'model'.", "model"
        )
    raw_input = body.get("input")
    items: list[dict[str, Any]]
    if isinstance(raw_input, str):
        items = [{"type": "message", "role": "user", "content": raw_input}]
    elif isinstance(raw_input, list):
        items = [_normalize_item(it, f"input[{i}]") for i, it in enumerate(raw_input)]
    elif raw_input is None:
        items = []
    else:
        raise _wrong_type("input", "a string or an array of input items", raw_input)
    tools_raw = body.get("tools") or []
    if not isinstance(tools_raw, list):
        raise _wrong_type("tools", "an array", tools_raw)
    tools = [_validate_tool(t, i) for i, t in enumerate(tools_raw)]
    seen: set[str] = set()
    for i, t in enumerate(tools):
        if t.get("type") == "function":
            if t["name"] in seen:
                raise _invalid(
                    f"Invalid 'tools[{i}].name': duplicate function name {t['name']!r}.",
                    f"tools[{i}].name",
                )
            seen.add(t["name"])
    tool_choice = body.get("tool_choice", "auto")
    if tool_choice is None:
        tool_choice = "auto"
    if isinstance(tool_choice, str):
        if tool_choice not in TOOL_CHOICES:
            raise _invalid(
                f"Invalid value for 'tool_choice': expected one of auto, none, required or an object, got {tool_choice!r}.",
                "tool_choice",
            )
    elif isinstance(tool_choice, dict):
        if tool_choice.get("type") == "function" and not any(
            t.get("name") == tool_choice.get("name") for t in tools if t.get("type") == "function"
        ):
            raise _invalid(
                f"Invalid value for 'tool_choice.name': no function tool named {tool_choice.get('name')!r}.",
                "tool_choice.name",
            )
    else:
        raise _invalid(
            f"Invalid type for 'tool_choice': got {_type_name(tool_choice)}.",
            "tool_choice",
            "invalid_type",
        )
    needs_function = tool_choice == "required" or isinstance(tool_choice, dict)
    if needs_function and not any(t.get("type") == "function" for t in tools):
        raise _invalid(
            "Tool choice 'required' needs at least one function tool in 'tools'.", "tool_choice"
        )
    mot = body.get("max_output_tokens")
    if mot is not None and (
        isinstance(mot, bool) or not isinstance(mot, int) or mot < 1 or mot > 1_000_000
    ):
        raise _invalid(
            f"Invalid value for 'max_output_tokens': expected an integer from 1 to 1000000, got {mot!r}.",
            "max_output_tokens",
        )
    metadata = _metadata(body.get("metadata") or {})
    prev = body.get("previous_response_id")
    if prev is not None and (not isinstance(prev, str) or not prev):
        raise _invalid(
            "Invalid value for 'previous_response_id': expected a non-empty string.",
            "previous_response_id",
        )
    instructions = body.get("instructions")
    if instructions is not None and not isinstance(instructions, str):
        raise _invalid(
            "Invalid type for 'instructions': expected a string.", "instructions", "invalid_type"
        )
    for flag in ("store", "stream", "parallel_tool_calls", "generate", "background"):
        if flag in body and body[flag] is not None and not isinstance(body[flag], bool):
            raise _wrong_type(flag, "a boolean", body[flag])
    if not items and prev is None and body.get("generate", True) is not False:
        raise RequestError(
            400, "missing_required_parameter", "Missing required parameter: 'input'.", "input"
        )
    stream_id = body.get("stream_id") if websocket else None
    reasoning_options(body)
    return CreateRequest(
        model=model,
        input_items=items,
        instructions=instructions,
        tools=tools,
        tool_choice=tool_choice,
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
        raise RequestError(
            400,
            "missing_required_parameter",
            "Missing required parameter: 'response_id'.",
            "response_id",
        )
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        items = [{"type": "message", "role": "user", "content": raw_input}]
    elif isinstance(raw_input, list) and raw_input:
        items = [_normalize_item(it, f"input[{i}]") for i, it in enumerate(raw_input)]
    else:
        raise _invalid(
            f"Invalid value for 'input': expected a non-empty array of input items, got {_type_name(raw_input)}.",
            "input",
        )
    metadata = body.get("metadata")
    if metadata is not None:
        metadata = _metadata(metadata)
    tool_choice = body.get("tool_choice")
    if tool_choice is not None and tool_choice not in TOOL_CHOICES:
        raise _invalid(
            f"Invalid value for 'tool_choice': expected one of auto, none, required, got {tool_choice!r}.",
            "tool_choice",
        )
    return AppendRequest(rid, items, metadata, tool_choice)
