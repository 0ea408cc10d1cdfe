"""Anthropic Messages (``POST /v1/messages``) in terms of the server's Responses model (pure).

:func:`parse_messages` validates a Messages body (errors in Anthropic's words, fields
named as its errors name them: ``messages.3.content.0.tool_use_id``, ``max_tokens``)
and turns system blocks, text, ``tool_use``, ``tool_result`` and ``thinking`` blocks
into the conversation items the ``http`` transport sends, one item per block.
:class:`MessagesEvents` turns the shared pipeline's Responses events into the
``message_start`` … ``message_stop`` stream, :func:`message_object` the finished
response into the ``stream: false`` message.

Prompt caching (docs/model.md "Prompt caching"): the blocks marked with ``cache_control``
are the only prefixes the engine caches or reads for this request
(:attr:`MessagesRequest.cache_writes`, :attr:`MessagesRequest.cache_reads`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.wire import events as ev
from reference_server.core.chat import error_message, finish_reason, with_sim_timing
from reference_server.core.conversation import Conversation, tools_tokens
from reference_server.core.lengths import EFFORTS
from reference_server.core.reasoning import INCLUDE_ENCRYPTED
from reference_server.core.validation import CreateRequest, RequestError, number_in, type_name

MAX_CACHE_BREAKPOINTS = 4
# A read checks the blocks up to this many before each breakpoint (the API's documented window).
LOOKBACK_BLOCKS = 20
MIN_THINKING_BUDGET = 1024
# The API's documented default effort: what thinking plans when output_config names none.
DEFAULT_EFFORT = "high"
ROLES = ("user", "assistant")
# Blocks of the API's server tools (web search, code execution, MCP, tool search) an agent
# sends back in its history; the simulated model never makes them itself.
CONTEXT_BLOCK_TYPES = (
    "bash_code_execution_tool_result",
    "code_execution_tool_result",
    "container_upload",
    "mcp_tool_result",
    "mcp_tool_use",
    "server_tool_use",
    "text_editor_code_execution_tool_result",
    "tool_reference",
    "tool_search_tool_result",
    "web_fetch_tool_result",
    "web_search_tool_result",
)
# Status → the Messages API's error type; 413 keeps its own type (request_too_large).
ERROR_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    405: "invalid_request_error",
    413: "request_too_large",
    429: "rate_limit_error",
    529: "overloaded_error",
}
# Keys of the prompt-cache namespace: never equal to a conversation prefix's hash.
_CACHE_NAMESPACE = "loopbench.prompt_cache"


@dataclass(slots=True)
class MessagesRequest:
    create: CreateRequest
    conv: Conversation
    # (key, tokens through the block), ascending: what a read may hit, what is written.
    cache_reads: list[tuple[int, int]] = field(default_factory=list)
    cache_writes: list[tuple[int, int]] = field(default_factory=list)

    @property
    def input_tokens(self) -> int:
        return self.conv.tokens + tools_tokens(self.create.tools)


def api_error(status: int, message: str) -> tuple[int, dict[str, Any]]:
    """(HTTP status, ``{"type":"error","error":{type,message}}``) for a refusal of ``status``.

    An overloaded engine (503) is the API's 529 ``overloaded_error``; every other
    5xx is ``api_error``.
    """
    if status == 503:
        status = 529
    kind = ERROR_TYPES.get(status, "api_error" if status >= 500 else "invalid_request_error")
    return status, {"type": "error", "error": {"type": kind, "message": message}}


def _bad(message: str) -> RequestError:
    return RequestError(400, "invalid_request_error", message)


def _expect(
    value: Any, where: str, expected: str, kind: type | tuple[type, ...], *, optional: bool = False
) -> Any:
    """``value`` when of ``kind`` (or absent, if ``optional``); else the refusal naming it."""
    if not isinstance(value, kind) and not (optional and value is None):
        raise _bad(f"{where}: expected {expected}, got {type_name(value)}.")
    return value


def _field(block: dict[str, Any], key: str, where: str, *, empty: bool = True) -> str:
    """The string ``block[key]`` (non-empty unless ``empty``); else the API's "Field required"."""
    value = block.get(key)
    if not isinstance(value, str) or not (empty or value):
        raise _bad(f"{where}.{key}: Field required.")
    return value


_TEXTS = "a string or an array of text blocks"
_CONTENTS = "a string or an array of content blocks"


def _cache_mark(block: dict[str, Any], where: str) -> bool:
    mark = block.get("cache_control")
    if mark is None:
        return False
    if not isinstance(mark, dict) or mark.get("type") != "ephemeral":
        raise _bad(f"{where}.cache_control: expected {{'type': 'ephemeral'}}, got {mark!r}.")
    ttl = mark.get("ttl")
    if ttl is not None and ttl not in ("5m", "1h"):
        raise _bad(f"{where}.cache_control.ttl: expected '5m' or '1h', got {ttl!r}.")
    return True


def _block_text(value: Any, where: str) -> str:
    """A ``tool_result`` content: a string or text (and image) blocks."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    _expect(value, where, _CONTENTS, list)
    texts = []
    for j, part in enumerate(value):
        if not isinstance(part, dict) or not isinstance(part.get("type"), str):
            raise _bad(f"{where}.{j}: expected a content block object with a 'type'.")
        if part["type"] == "text":
            texts.append(_field(part, "text", f"{where}.{j}"))
    return "".join(texts)


def thinking_signature(item_id: str, encrypted_content: str) -> str:
    """A thinking block's signature: the reasoning item's id and blob, so it comes back as it went."""
    return f"{item_id}.{encrypted_content}"


def _thinking_item(block: dict[str, Any], where: str) -> dict[str, Any]:
    if block["type"] == "redacted_thinking":
        data = _field(block, "data", where)
        return {"type": "reasoning", "id": "", "summary": [], "encrypted_content": data}
    signature = _field(block, "signature", where, empty=False)
    _field(block, "thinking", where)
    item_id, dot, blob = signature.partition(".")
    if not dot:  # another server's signature: charged by its length
        item_id, blob = "", signature
    # The hidden reasoning is charged (the blob encodes it), not the summary shown.
    return {"type": "reasoning", "id": item_id, "summary": [], "encrypted_content": blob}


class _Builder:
    """Items of the prompt, and which of them end at a cache breakpoint."""

    def __init__(self) -> None:
        self.items: list[dict[str, Any]] = []
        self.marks: list[int] = []  # index of the last item at each breakpoint (-1: none yet)
        self.breakpoints = 0
        self.tool_use_ids: set[str] = set()

    def add(self, item: dict[str, Any] | None, marked: bool) -> None:
        if item is not None:
            self.items.append(item)
        if marked:
            self.marks.append(len(self.items) - 1)

    def system(self, value: Any, at: str = "system") -> None:
        if value is None:
            return
        if isinstance(value, str):
            if value:
                self.add({"type": "message", "role": "system", "content": value}, False)
            return
        for j, block in enumerate(_expect(value, at, _TEXTS, list)):
            where = f"{at}.{j}"
            if not isinstance(block, dict) or block.get("type") != "text":
                raise _bad(f"{where}: expected a text block {{'type': 'text', 'text': ...}}.")
            text = _field(block, "text", where)
            marked = _cache_mark(block, where)
            self.breakpoints += marked
            self.add({"type": "message", "role": "system", "content": text}, marked)

    def message(self, msg: Any, i: int) -> None:
        where = f"messages.{i}"
        _expect(msg, where, "an object", dict)
        role = msg.get("role")
        if role == "system":
            self.mid_system(msg, where)
            return
        if role not in ROLES:
            raise _bad(
                f"{where}.role: Input should be 'user', 'assistant' or 'system', got {role!r}."
            )
        content = msg.get("content")
        if isinstance(content, str):
            self.add({"type": "message", "role": role, "content": content}, False)
            return
        for j, block in enumerate(_expect(content, f"{where}.content", _CONTENTS, list)):
            at = f"{where}.content.{j}"
            if not isinstance(block, dict) or not isinstance(block.get("type"), str):
                raise _bad(f"{at}: expected a content block object with a 'type'.")
            marked = _cache_mark(block, at)
            self.breakpoints += marked
            self.add(self._block(block, role, at), marked)

    def mid_system(self, msg: dict[str, Any], where: str) -> None:
        """A system message inside ``messages``, where Claude Code sends one.

        Claude Code 2.1 sends it under ``per-turn-control-2026-07-01`` (with a per-turn
        ``output_config``) and treats ``mid-conversation-system-2026-04-07`` as generally
        available, so it is accepted with or without a beta header; the model reads it as
        system text at its place in the conversation.
        """
        _expect(
            msg.get("output_config"), f"{where}.output_config", "an object", dict, optional=True
        )
        content = msg.get("content")
        if isinstance(content, str):
            self.add({"type": "message", "role": "system", "content": content}, False)
            return
        self.system(_expect(content, f"{where}.content", _TEXTS, list), f"{where}.content")

    def _block(self, block: dict[str, Any], role: str, at: str) -> dict[str, Any] | None:
        kind = block["type"]
        if kind == "text":
            return {"type": "message", "role": role, "content": _field(block, "text", at)}
        if kind in ("image", "document", "search_result"):
            return None  # accepted; the simulated model reads text only
        if kind == "tool_use":
            if role != "assistant":
                raise _bad(f"{at}: 'tool_use' blocks are only allowed in assistant messages.")
            for key in ("id", "name"):
                _field(block, key, at, empty=False)
            _expect(block.get("input"), f"{at}.input", "an object", dict)
            self.tool_use_ids.add(block["id"])
            return {
                "type": "function_call",
                "call_id": block["id"],
                "name": block["name"],
                "arguments": orjson.dumps(block["input"]).decode(),
            }
        if kind == "tool_result":
            if role != "user":
                raise _bad(f"{at}: 'tool_result' blocks are only allowed in user messages.")
            use_id = _field(block, "tool_use_id", at, empty=False)
            if use_id not in self.tool_use_ids:
                raise _bad(
                    f"{at}.tool_use_id: unexpected `tool_use_id` found in `tool_result` blocks: "
                    f"{use_id}. Each `tool_result` block must have a corresponding `tool_use` "
                    "block in an earlier assistant message."
                )
            output = _block_text(block.get("content"), f"{at}.content")
            return {"type": "function_call_output", "call_id": use_id, "output": output}
        if kind in ("thinking", "redacted_thinking"):
            if role != "assistant":
                raise _bad(f"{at}: thinking blocks are only allowed in assistant messages.")
            return _thinking_item(block, at)
        if kind in CONTEXT_BLOCK_TYPES:
            # Server tools' blocks sent back: context the model reads, charged as their JSON.
            text = orjson.dumps({k: v for k, v in block.items() if k != "cache_control"})
            return {"type": "message", "role": role, "content": text.decode()}
        raise _bad(f"{at}.type: unsupported content block type {kind!r}.")


def _tools(value: Any) -> tuple[list[dict[str, Any]], list[int]]:
    """Tools in the Responses shape, and the indexes of those marked with ``cache_control``."""
    if value is None:
        return [], []
    _expect(value, "tools", "an array", list)
    tools: list[dict[str, Any]] = []
    marked: list[int] = []
    seen: set[str] = set()
    for i, tool in enumerate(value):
        where = f"tools.{i}"
        _expect(tool, where, "an object", dict)
        if _cache_mark(tool, where):
            marked.append(i)
        kind = tool.get("type", "custom")
        name = tool.get("name")
        if kind not in ("custom", None):
            # A server tool (bash, web_search, an MCP toolset, tool search …): accepted, never
            # called by the simulated model; an MCP toolset is named by its server, not `name`.
            _expect(kind, f"{where}.type", "a string", str)
            tools.append({"type": kind, "name": name if isinstance(name, str) else ""})
            continue
        if not isinstance(name, str) or not name or len(name) > 128:
            raise _bad(f"{where}.name: expected a non-empty string of at most 128 characters.")
        if name in seen:
            raise _bad(f"tools: Tool names must be unique; {name!r} appears twice.")
        seen.add(name)
        schema = tool.get("input_schema")
        if not isinstance(schema, dict):
            raise _bad(f"{where}.input_schema: Field required (a JSON schema object).")
        if schema.get("type") != "object":
            raise _bad(f"{where}.input_schema.type: Input should be 'object'.")
        if tool.get("defer_loading") is True:
            # Not in the prompt until a tool search finds it (not modelled): never called, and
            # only its name is charged.  Kept in place: cache marks count tools by position.
            tools.append({"type": "deferred", "name": name})
            continue
        out: dict[str, Any] = {"type": "function", "name": name, "parameters": schema}
        if isinstance(tool.get("description"), str):
            out["description"] = tool["description"]
        tools.append(out)
    return tools, marked


def _tool_choice(value: Any, tools: list[dict[str, Any]]) -> tuple[Any, bool]:
    """(Responses tool_choice, parallel tool calls allowed)."""
    if value is None:
        return "auto", True
    if not isinstance(value, dict):
        raise _bad(
            f"tool_choice: expected an object like {{'type': 'auto'}}, got {type_name(value)}."
        )
    kind = value.get("type")
    parallel = value.get("disable_parallel_tool_use") is not True
    functions = [t for t in tools if t.get("type") == "function"]
    if kind in ("auto", "none"):
        return kind, parallel
    if kind == "any":
        if not functions:
            raise _bad("tool_choice: type 'any' needs at least one tool in 'tools'.")
        return "required", parallel
    if kind == "tool":
        name = value.get("name")
        if not any(t["name"] == name for t in functions):
            raise _bad(f"tool_choice.name: no tool in 'tools' is named {name!r}.")
        return {"type": "function", "name": name}, parallel
    raise _bad(f"tool_choice.type: expected 'auto', 'any', 'tool' or 'none', got {kind!r}.")


def _metadata(value: Any) -> dict[str, str]:
    """``metadata``: ``user_id`` and, from loopbench, the string hints of docs/protocol.md."""
    if value is None:
        return {}
    hints: dict[str, str] = {}
    for key, item in _expect(value, "metadata", "an object", dict).items():
        _expect(item, f"metadata.{key}", "a string", str, optional=key == "user_id")
        if key != "user_id":
            hints[key] = item
    return hints


def _effort(value: Any) -> str | None:
    """``output_config.effort``: how much the model thinks (and writes) when it may."""
    if value is None:
        return None
    effort = _expect(value, "output_config", "an object", dict).get("effort")
    if effort is not None and effort not in EFFORTS:
        expected = ", ".join(repr(e) for e in EFFORTS)
        raise _bad(f"output_config.effort: expected one of {expected}, got {effort!r}.")
    return effort


def _thinking(value: Any, max_tokens: int, effort: str | None) -> tuple[str, int | None]:
    """(reasoning effort, ceiling of the thinking): effort ``none`` when thinking is off.

    ``adaptive`` lets the model decide: it thinks as the effort's distribution says.
    ``enabled`` does the same under its ``budget_tokens``, a ceiling, not a plan.
    """
    if value is None:
        return "none", None
    kind = _expect(value, "thinking", "an object", dict).get("type")
    if kind == "disabled":
        return "none", None
    if kind == "adaptive":
        return effort or DEFAULT_EFFORT, None
    if kind != "enabled":
        raise _bad(f"thinking.type: expected 'enabled', 'adaptive' or 'disabled', got {kind!r}.")
    budget = value.get("budget_tokens")
    if not number_in(budget, MIN_THINKING_BUDGET, kind=int):
        raise _bad(
            f"thinking.budget_tokens: Input should be an integer >= {MIN_THINKING_BUDGET}, got {budget!r}."
        )
    if budget >= max_tokens:
        raise _bad(
            f"`max_tokens` must be greater than `thinking.budget_tokens` ({max_tokens} <= {budget})."
        )
    return effort or DEFAULT_EFFORT, budget


def _context_management(value: Any) -> None:
    """``context_management``: checked, not applied (the context is charged as sent).

    Claude Code asks for ``clear_thinking_20251015`` edits; clearing old thinking or tool
    results server-side is not modelled (docs/server.md "Messages").
    """
    if value is None:
        return
    edits = _expect(value, "context_management", "an object", dict).get("edits", [])
    for i, edit in enumerate(_expect(edits, "context_management.edits", "an array", list)):
        if not isinstance(edit, dict) or not isinstance(edit.get("type"), str):
            raise _bad(f"context_management.edits.{i}: expected an object with a 'type'.")


def _check_scalars(body: dict[str, Any]) -> None:
    _expect(body.get("stream"), "stream", "a boolean", bool, optional=True)
    for key, hi in (("temperature", 1), ("top_p", 1)):
        value = body.get(key)
        if value is not None and not number_in(value, 0, hi):
            raise _bad(f"{key}: expected a number from 0 to {hi}, got {value!r}.")
    top_k = body.get("top_k")
    if top_k is not None and not number_in(top_k, 0, kind=int):
        raise _bad(f"top_k: expected an integer >= 0, got {top_k!r}.")
    stops = body.get("stop_sequences")
    if stops is not None and (
        not isinstance(stops, list) or not all(isinstance(s, str) for s in stops)
    ):
        raise _bad("stop_sequences: expected an array of strings.")


def _prompt_cache_keys(
    conv: Conversation, marks: list[int], tools: list[dict[str, Any]], tool_marks: list[int]
) -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(prefixes a read may hit, prefixes written): keys and token positions, ascending.

    Tools come first, as the API renders them.  A breakpoint writes its prefix; a read
    also finds a prefix cached at any of the :data:`LOOKBACK_BLOCKS` blocks before a
    breakpoint (so last turn's breakpoint is found when this turn's moved on).
    """
    tools_key = orjson.dumps(tools)
    total_tools = tools_tokens(tools)

    def item_key(j: int) -> tuple[int, int]:
        if j < 0:
            return hash((_CACHE_NAMESPACE, tools_key, 0)), total_tools
        h, tokens = conv.prefix_hashes[j]
        return hash((_CACHE_NAMESPACE, tools_key, h)), total_tools + tokens

    writes: dict[int, int] = {}
    reads: dict[int, int] = {}
    for i in tool_marks:
        part = tools[: i + 1]
        key = hash((_CACHE_NAMESPACE, orjson.dumps(part), 0))
        writes[key] = reads[key] = tools_tokens(part)
    for j in marks:
        if j < 0 and not total_tools:
            continue
        key, tokens = item_key(j)
        writes[key] = tokens
        for back in range(max(-1, j - LOOKBACK_BLOCKS), j + 1):
            if back >= 0 or total_tools:
                k, t = item_key(back)
                reads[k] = t

    def ordered(keys: dict[int, int]) -> list[tuple[int, int]]:
        return sorted(keys.items(), key=lambda kv: kv[1])

    return ordered(reads), ordered(writes)


def parse_messages(body: Any) -> MessagesRequest:
    """A Messages body, validated, as the server's request and its prompt-cache keys."""
    if not isinstance(body, dict):
        raise _bad(f"The request body must be a JSON object, got {type_name(body)}.")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise _bad("model: Field required (a non-empty string).")
    max_tokens = body.get("max_tokens")
    if max_tokens is None:
        raise _bad("max_tokens: Field required.")
    if not number_in(max_tokens, 1, 1_000_000, int):
        raise _bad(f"max_tokens: Input should be an integer from 1 to 1000000, got {max_tokens!r}.")
    messages = body.get("messages")
    if not isinstance(messages, list):
        raise _bad(f"messages: Field required (an array of messages), got {type_name(messages)}.")
    if not messages:
        raise _bad("messages: at least one message is required.")
    tools, tool_marks = _tools(body.get("tools"))
    tool_choice, parallel = _tool_choice(body.get("tool_choice"), tools)
    metadata = _metadata(body.get("metadata"))
    effort, ceiling = _thinking(
        body.get("thinking"), max_tokens, _effort(body.get("output_config"))
    )
    _check_scalars(body)
    _context_management(body.get("context_management"))
    built = _Builder()
    built.breakpoints += len(tool_marks)
    built.system(body.get("system"))
    for i, msg in enumerate(messages):
        built.message(msg, i)
    if built.breakpoints > MAX_CACHE_BREAKPOINTS:
        raise _bad(
            f"A maximum of {MAX_CACHE_BREAKPOINTS} blocks with cache_control may be provided. "
            f"Found {built.breakpoints}."
        )
    reasoning: dict[str, Any] = {"effort": effort}
    if effort != "none":
        # Extended thinking streams as thinking blocks: the pipeline's reasoning summary is the
        # thinking shown, its encrypted content the signature (docs/server.md "Messages").
        thinking = body.get("thinking")
        if not (isinstance(thinking, dict) and thinking.get("display") == "omitted"):
            # `display: "omitted"`: thinking blocks carry their signature and no text.
            reasoning["summary"] = "auto"
    conv = Conversation.build(None, [], built.items)
    create = CreateRequest(
        model=model,
        input_items=built.items,
        tools=tools,
        tool_choice=tool_choice,
        parallel_tool_calls=parallel,
        store=False,
        stream=body.get("stream") is True,
        max_output_tokens=max_tokens,
        metadata=metadata,
        raw={"model": model, "reasoning": reasoning, "include": [INCLUDE_ENCRYPTED]},
        reasoning_ceiling=ceiling,
    )
    reads, writes = _prompt_cache_keys(conv, built.marks, tools, tool_marks)
    create.cache_prefixes, create.cache_writes = reads, writes
    return MessagesRequest(create, conv, reads, writes)


def cache_usage(
    writes: Sequence[tuple[int, int]], read_tokens: int, input_tokens: int
) -> dict[str, int]:
    """The API's split of the input: read from the cache, written to it now, neither.

    ``read_tokens`` is what the longest cached marked prefix holds; everything from there
    to the last breakpoint is written now; what follows the last breakpoint is neither.
    With no breakpoint nothing is read or written.
    """
    last = writes[-1][1] if writes else 0
    read = min(read_tokens, last)
    write = max(0, last - read)
    return {
        "input_tokens": max(0, input_tokens - read - write),
        "cache_creation_input_tokens": write,
        "cache_read_input_tokens": read,
    }


def cached_read(prefixes: Sequence[tuple[int, int]], cached: Any) -> int:
    """Tokens of the longest marked prefix for which ``cached(key)`` holds (0 if none)."""
    for key, tokens in reversed(prefixes):
        if cached(key):
            return tokens
    return 0


# Chat's finish reasons (core/chat.py) as Messages names them.
_STOP_REASONS = {"length": "max_tokens", "tool_calls": "tool_use", "stop": "end_turn"}


def tool_use_id(call_id: str) -> str:
    """The pipeline's ``call_<hex>`` as a Messages ``toolu_<hex>``."""
    return "toolu_" + call_id.split("_", 1)[-1]


def _usage(response: dict[str, Any], prefixes: Sequence[tuple[int, int]]) -> dict[str, int]:
    usage = response.get("usage") or {}
    read = int((usage.get("input_tokens_details") or {}).get("cached_tokens", 0))
    split = cache_usage(prefixes, read, int(usage.get("input_tokens", 0)))
    return {"output_tokens": int(usage.get("output_tokens", 0)), **split}


def _message(
    message_id: str, model: Any, content: list[dict[str, Any]], stop_reason: str | None, usage: Any
) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "content": content,
        "model": model,
        "stop_reason": stop_reason,
        "stop_sequence": None,
        "usage": usage,
    }


def _tool_use(item: dict[str, Any], arguments: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "tool_use",
        "id": tool_use_id(item["call_id"]),
        "name": item["name"],
        "input": arguments,
    }


@dataclass(slots=True)
class MessagesEvents:
    """Responses events of one response → the Messages stream (issue-18 contract).

    ``start_usage`` is the input split ``message_start`` announces (the engine's own
    lookup, made when prefill starts, gives the one ``message_delta`` reports).
    """

    id: str
    model: str
    prefixes: Sequence[tuple[int, int]]
    start_usage: dict[str, int]
    failed: bool = field(default=False, init=False)
    _index: int = field(default=-1, init=False)

    def _block_start(self, block: dict[str, Any]) -> dict[str, Any]:
        self._index += 1
        return {"type": "content_block_start", "index": self._index, "content_block": block}

    def _delta(self, delta: dict[str, Any]) -> dict[str, Any]:
        return {"type": "content_block_delta", "index": self._index, "delta": delta}

    def _stop(self) -> dict[str, Any]:
        return {"type": "content_block_stop", "index": self._index}

    def translate(self, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            kind = event.get("type")
            if kind == ev.CREATED:
                usage = {**self.start_usage, "output_tokens": 1}
                message = _message(self.id, self.model, [], None, usage)
                out += [{"type": "message_start", "message": message}, {"type": "ping"}]
            elif kind == ev.OUTPUT_ITEM_ADDED:
                item = event["item"]
                if item["type"] == "reasoning":
                    out.append(
                        self._block_start({"type": "thinking", "thinking": "", "signature": ""})
                    )
                elif item["type"] == "message":
                    out.append(self._block_start({"type": "text", "text": ""}))
                elif item["type"] == "function_call":
                    out.append(self._block_start(_tool_use(item, {})))
            elif kind == ev.REASONING_SUMMARY_TEXT_DELTA:
                out.append(self._delta({"type": "thinking_delta", "thinking": event["delta"]}))
            elif kind == ev.TEXT_DELTA:
                out.append(self._delta({"type": "text_delta", "text": event["delta"]}))
            elif kind == ev.ARGUMENTS_DELTA:
                out.append(
                    self._delta({"type": "input_json_delta", "partial_json": event["delta"]})
                )
            elif kind == ev.OUTPUT_ITEM_DONE:
                item = event["item"]
                if item["type"] == "reasoning":
                    signature = thinking_signature(item["id"], item.get("encrypted_content", ""))
                    out.append(self._delta({"type": "signature_delta", "signature": signature}))
                out.append(self._stop())
            elif kind in (ev.COMPLETED, ev.INCOMPLETE):
                response = event["response"]
                delta: dict[str, Any] = {
                    "type": "message_delta",
                    "delta": {
                        "stop_reason": _STOP_REASONS[finish_reason(response)],
                        "stop_sequence": None,
                    },
                    "usage": _usage(response, self.prefixes),
                }
                out += [with_sim_timing(delta, response), {"type": "message_stop"}]
            elif kind == ev.ERROR:
                self.failed = True
                out.append(
                    {
                        "type": "error",
                        "error": {"type": "api_error", "message": error_message(event)},
                    }
                )
        return out


def message_object(
    response: dict[str, Any], message_id: str, prefixes: Sequence[tuple[int, int]]
) -> dict[str, Any]:
    """A finished Responses response object as the ``stream: false`` message."""
    content: list[dict[str, Any]] = []
    for item in response.get("output", []):
        kind = item.get("type")
        if kind == "reasoning":
            thinking = "".join(p.get("text", "") for p in item.get("summary", []))
            signature = thinking_signature(item["id"], item.get("encrypted_content", ""))
            content.append({"type": "thinking", "thinking": thinking, "signature": signature})
        elif kind == "message":
            text = "".join(p.get("text", "") for p in item.get("content", []))
            content.append({"type": "text", "text": text})
        elif kind == "function_call":
            content.append(_tool_use(item, orjson.loads(item["arguments"])))
    stop = _STOP_REASONS[finish_reason(response)]
    usage = _usage(response, prefixes)
    return with_sim_timing(
        _message(message_id, response.get("model"), content, stop, usage), response
    )
