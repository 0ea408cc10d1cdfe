"""The ``messages`` transport's protocol, sans I/O: the Anthropic Messages request of a turn, its
headers, and its streamed events as Responses events (docs/protocol.md §7).

The transcript keeps Responses items; a turn's body translates them into alternating user
and assistant messages of content blocks: function calls become ``tool_use`` blocks (after the
turn's thinking blocks, sent back unchanged), their outputs ``tool_result`` blocks in one user
message.  Prompt-cache breakpoints (``cache_control``) go where a coding agent puts them
(:data:`CACHE_CONTROL`).
"""

from __future__ import annotations

from typing import Any

import orjson

from harness.client.bodies import http_headers
from harness.client.options import TransportOptions
from harness.client.translate import Event, ResponsesEmitter, int_field, responses_usage
from harness.wire.events import loads
from harness.wire.sse import SSEMessage
from harness.wire.tokens import count_tokens
from harness.workload.agent import TurnInput

PATH = "/messages"
ANTHROPIC_VERSION = "2023-06-01"
#: where the body puts ``cache_control`` breakpoints: nowhere; on the system prompt and the
#: last tool; or those and the last content block of the last message (as coding agents do)
CACHE_CONTROL = ("none", "system", "conversation")
EPHEMERAL = {"type": "ephemeral"}
#: the smallest thinking budget the API accepts
MIN_THINKING_BUDGET = 1024
#: stop reasons of a response cut short (Responses: ``response.incomplete``)
INCOMPLETE_REASONS = frozenset({"max_tokens", "refusal"})
_TOOL_CHOICE = {"required": "any", "none": "none", "auto": "auto"}


def messages_headers(options: TransportOptions) -> list[tuple[str, str]]:
    """The HTTP headers, with ``x-api-key`` and ``anthropic-version`` instead of a bearer token.

    A user's own ``authorization``, ``x-api-key`` or ``anthropic-version`` header (the
    options' extra headers) is kept as given.
    """
    default_auth = f"Bearer {options.api_key}"
    given = {k.lower() for k in options.extra_headers} | {
        k.lower() for k, _ in options.shaping.headers
    }
    out: list[tuple[str, str]] = []
    for name, value in http_headers(options):
        if name == "authorization" and value == default_auth:
            if "x-api-key" in given:
                continue
            name, value = "x-api-key", options.api_key
        out.append((name, value))
    if "anthropic-version" not in given:
        out.append(("anthropic-version", ANTHROPIC_VERSION))
    return out


def messages_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses function tools in the Messages shape (``input_schema``)."""
    return [
        {
            "name": tool.get("name", ""),
            "description": tool.get("description", ""),
            "input_schema": tool.get("parameters", {"type": "object"}),
        }
        for tool in tools
    ]


def _tool_input(arguments: object) -> dict[str, Any]:
    """A call's JSON arguments as the object a ``tool_use`` block holds."""
    try:
        value = orjson.loads(str(arguments)) if arguments else {}
    except orjson.JSONDecodeError:
        return {}
    return value if isinstance(value, dict) else {}


def _block(item: dict[str, Any]) -> tuple[str, dict[str, Any]] | None:
    """(role, content block) of one transcript item; None for what Messages does not carry."""
    kind = item.get("type", "message")
    if kind == "function_call":
        return "assistant", {
            "type": "tool_use",
            "id": str(item.get("call_id", "")),
            "name": str(item.get("name", "")),
            "input": _tool_input(item.get("arguments")),
        }
    if kind == "function_call_output":
        return "user", {
            "type": "tool_result",
            "tool_use_id": str(item.get("call_id", "")),
            "content": str(item.get("output", "")),
        }
    if kind == "reasoning":
        signature = item.get("encrypted_content")
        if not isinstance(signature, str):
            return None  # a thinking block is only accepted back with its signature
        content = item.get("content")
        text = "".join(str(p.get("text", "")) for p in content or [] if isinstance(p, dict))
        return "assistant", {"type": "thinking", "thinking": text, "signature": signature}
    if kind == "compaction":
        return "user", {"type": "text", "text": str(item.get("encrypted_content", ""))}
    if kind == "message":
        content = item.get("content", "")
        if isinstance(content, list):
            content = "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
        role = "assistant" if item.get("role") == "assistant" else "user"
        return role, {"type": "text", "text": str(content)}
    return None


def messages_conversation(items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as alternating user/assistant messages of content blocks."""
    messages: list[dict[str, Any]] = []
    for item in items:
        found = _block(item)
        if found is None:
            continue
        role, block = found
        if messages and messages[-1]["role"] == role:
            messages[-1]["content"].append(block)
        else:
            messages.append({"role": role, "content": [block]})
    return messages


def messages_body(inp: TurnInput, cache_control: str = "conversation") -> dict[str, Any]:
    """``POST /messages`` with ``stream: true``: the whole conversation, every turn.

    A turn that reasons asks for extended thinking with a budget of at least
    :data:`MIN_THINKING_BUDGET`; ``max_tokens`` then leaves room for the budget on top of
    the turn's output (the API requires ``max_tokens`` above the budget).
    """
    if cache_control not in CACHE_CONTROL:
        raise ValueError(
            f"cache_control: expected one of {', '.join(CACHE_CONTROL)}, got {cache_control!r}"
        )
    system: dict[str, Any] = {"type": "text", "text": inp.instructions}
    tools = messages_tools(inp.tools)
    messages = messages_conversation(inp.history)
    if cache_control != "none":
        system["cache_control"] = dict(EPHEMERAL)
        if tools:
            tools[-1]["cache_control"] = dict(EPHEMERAL)
        if cache_control == "conversation" and messages:
            messages[-1]["content"][-1]["cache_control"] = dict(EPHEMERAL)
    body: dict[str, Any] = {
        "model": inp.model,
        "max_tokens": inp.max_output_tokens,
        "stream": True,
        "system": [system],
        "messages": messages,
        "tools": tools,
        "tool_choice": {"type": _TOOL_CHOICE.get(inp.tool_choice, "auto")},
    }
    # the probe's one-message turn: no empty system prompt, no tool_choice without tools
    if not inp.instructions:
        del body["system"]
    if not tools:
        del body["tools"], body["tool_choice"]
    if inp.reasoning is not None:
        budget = max(MIN_THINKING_BUDGET, inp.turn.reasoning_tokens)
        body["thinking"] = {"type": "enabled", "budget_tokens": budget}
        body["max_tokens"] = budget + inp.max_output_tokens
    if inp.metadata:
        body["metadata"] = dict(inp.metadata)
    return body


class MessagesTranslator:
    """Messages stream events in, Responses events out.

    ``message_start`` opens the response (its usage: the input side); each content block
    is an item: ``text`` a message, ``tool_use`` a function call (``call_id`` = the block's
    id, arguments = the joined ``partial_json``), ``thinking`` a reasoning item whose
    signature becomes its ``encrypted_content`` (so the transcript sends it back).  A thinking
    block's item opens at its first ``thinking_delta``: the block's start is not a token.
    ``message_delta`` brings the stop reason, the output usage and ``sim_timing``;
    ``message_stop`` ends the response.  An ``error`` event is an ``error`` event.
    """

    __slots__ = (
        "_emit",
        "_pending",
        "_thinking",
        "ended",
        "reason",
        "usage",
    )

    def __init__(self) -> None:
        self._emit = ResponsesEmitter()
        #: the usage of ``message_start`` and ``message_delta`` merged, as the server sent it
        self.usage: dict[str, Any] = {}
        #: the stop reason, once ``message_delta`` gave one
        self.reason: str | None = None
        self._pending: set[object] = set()  # thinking blocks started, no token yet
        self._thinking = False  # the response had a thinking block
        self.ended = False

    def feed(self, msg: SSEMessage) -> list[Event]:
        if self.ended:
            return []
        event = loads(msg.raw)
        etype = event.get("type") or msg.event
        emit = self._emit
        if etype == "error":
            self.ended = True
            err = event.get("error")
            err = err if isinstance(err, dict) else {}
            return emit.error(err.get("type") or err.get("code"), err.get("message"))
        if etype == "message_start":
            message = event.get("message")
            message = message if isinstance(message, dict) else {}
            self._merge_usage(message.get("usage"))
            return emit.created(str(message.get("id") or "msg"), message.get("model"))
        if not emit.started:
            return []  # ping and anything else before message_start: not part of a message yet
        key = event.get("index")
        if etype == "content_block_start":
            block = event.get("content_block")
            return self._start(key, block if isinstance(block, dict) else {})
        if etype == "content_block_delta":
            delta = event.get("delta")
            return self._delta(key, delta if isinstance(delta, dict) else {})
        if etype == "content_block_stop":
            # a thinking block without a streamed token still ends as a reasoning item
            return [*self._open_thinking(key), *emit.close(key)]
        if etype == "message_delta":
            delta = event.get("delta")
            if isinstance(delta, dict) and delta.get("stop_reason"):
                self.reason = str(delta["stop_reason"])
            self._merge_usage(event.get("usage"))
            if "sim_timing" in event:
                emit.sim_timing = event["sim_timing"]
            return []
        if etype == "message_stop":
            self.ended = True
            return emit.terminal(self.reason in INCOMPLETE_REASONS, self._responses_usage())
        return []  # ping, unknown events

    def _start(self, key: object, block: dict[str, Any]) -> list[Event]:
        kind = block.get("type")
        emit = self._emit
        if kind == "text":
            return [*emit.open_message(key), *emit.delta(key, str(block.get("text") or ""))]
        if kind == "tool_use":
            return emit.open_call(key, str(block.get("id") or ""), str(block.get("name") or ""))
        if kind == "thinking":
            self._pending.add(key)
            self._thinking = True
        # redacted_thinking, server tool blocks and other kinds: not sent back, not measured
        return []

    def _open_thinking(self, key: object) -> list[Event]:
        if key not in self._pending:
            return []
        self._pending.discard(key)
        return self._emit.open_reasoning(key)

    def _delta(self, key: object, delta: dict[str, Any]) -> list[Event]:
        kind = delta.get("type")
        emit = self._emit
        if kind == "thinking_delta":
            events = self._open_thinking(key)
            return [*events, *emit.delta(key, str(delta.get("thinking") or ""))]
        if kind == "signature_delta":
            events = self._open_thinking(key)
            if emit.is_open(key):
                emit.set_field(key, "encrypted_content", str(delta.get("signature") or ""))
            return events
        if not emit.is_open(key):
            return []
        if kind == "text_delta":
            return emit.delta(key, str(delta.get("text") or ""))
        if kind == "input_json_delta":
            return emit.delta(key, str(delta.get("partial_json") or ""))
        return []

    def _merge_usage(self, usage: object) -> None:
        if isinstance(usage, dict):
            for k, v in usage.items():
                if isinstance(v, int) and not isinstance(v, bool):
                    self.usage[k] = v

    def _responses_usage(self) -> Event | None:
        u = self.usage
        if not u:
            return None
        read = int_field(u, "cache_read_input_tokens")
        write = int_field(u, "cache_creation_input_tokens")
        # Comparable with the other APIs' input: everything the request held, cached or not.
        total = int_field(u, "input_tokens") + read + write
        output = int_field(u, "output_tokens")
        reasoning = None
        if self._thinking:
            # Thinking tokens are part of output_tokens, with no count of their own, and the
            # thinking shown may be a summary: what the visible stream does not account for.
            emit = self._emit
            shown = count_tokens("x" * emit.reasoning_chars) if emit.reasoning_chars else 0
            visible = count_tokens("x" * emit.visible_chars) if emit.visible_chars else 0
            reasoning = max(shown, output - visible)
        return responses_usage(total, read, output, reasoning, cache_write=write)
