"""The ``chat`` transport's protocol, sans I/O: the Chat Completions request of a turn, and its
streamed chunks as Responses events (docs/protocol.md §7).

The transcript (:class:`~harness.workload.agent.Transcript`) keeps Responses items; a turn's
body translates them into chat messages: the instructions as the system message, consecutive
function calls as one assistant message with ``tool_calls`` (parallel calls), each output as
a ``tool`` message.  Reasoning items are dropped: Chat Completions has no way to send
reasoning back.
"""

from __future__ import annotations

from typing import Any

from harness.client.translate import (
    Event,
    ResponsesEmitter,
    int_field,
    responses_usage,
)
from harness.wire.errors import ErrorKind, TransportError
from harness.wire.events import loads
from harness.wire.sse import SSEMessage
from harness.workload.agent import TurnInput

PATH = "/chat/completions"
#: finish reasons of a response cut short (Responses: ``response.incomplete``)
INCOMPLETE_REASONS = frozenset({"length", "content_filter"})
# The stream's own keys for the output that has no index: its text and its reasoning.
_TEXT = "text"
_REASONING = "reasoning"


def chat_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Responses function tools in the chat shape (the function nested under ``function``)."""
    out = []
    for tool in tools:
        fn = {k: tool[k] for k in ("name", "description", "parameters", "strict") if k in tool}
        out.append({"type": "function", "function": fn})
    return out


def chat_messages(instructions: str, items: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The conversation as chat messages (see the module docstring); no system message
    without instructions (the probe's one-message turn)."""
    messages: list[dict[str, Any]] = (
        [{"role": "system", "content": instructions}] if instructions else []
    )
    for item in items:
        kind = item.get("type", "message")
        if kind == "function_call":
            call = {
                "id": str(item.get("call_id", "")),
                "type": "function",
                "function": {
                    "name": str(item.get("name", "")),
                    "arguments": str(item.get("arguments", "")),
                },
            }
            last = messages[-1]
            # Parallel calls: one assistant message holds them all (and its text, if any).
            if last["role"] == "assistant":
                last.setdefault("tool_calls", []).append(call)
            else:
                messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        elif kind == "function_call_output":
            messages.append(
                {
                    "role": "tool",
                    "tool_call_id": str(item.get("call_id", "")),
                    "content": str(item.get("output", "")),
                }
            )
        elif kind == "message":
            messages.append({"role": str(item.get("role", "user")), "content": _text(item)})
        elif kind == "compaction":
            # The reference server's compacted history: opaque text, sent as the user's.
            messages.append({"role": "user", "content": str(item.get("encrypted_content", ""))})
        # reasoning: not sent back (the API has no field for it)
    return messages


def _text(item: dict[str, Any]) -> str:
    content = item.get("content", "")
    if isinstance(content, list):
        return "".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return str(content)


def chat_body(inp: TurnInput) -> dict[str, Any]:
    """``POST /chat/completions`` with ``stream: true``: the whole conversation, every turn."""
    body: dict[str, Any] = {
        "model": inp.model,
        "stream": True,
        "stream_options": {"include_usage": True},
        "messages": chat_messages(inp.instructions, inp.history),
        "tools": chat_tools(inp.tools),
        "tool_choice": inp.tool_choice,
        "parallel_tool_calls": True,
        "max_completion_tokens": inp.max_output_tokens,
    }
    if not inp.tools:
        # a tool_choice without tools is refused by OpenAI's API (the probe's plain request)
        for key in ("tools", "tool_choice", "parallel_tool_calls"):
            del body[key]
    if inp.metadata:
        body["metadata"] = dict(inp.metadata)
    return body


class ChatTranslator:
    """``chat.completion.chunk`` objects (and ``[DONE]``) in, Responses events out.

    The first chunk opens the response; ``reasoning_content`` (or vLLM's ``reasoning``)
    becomes a reasoning item, ``content`` a message, each tool call index a function call
    whose name is a token of the output (:data:`~harness.client.stream.FUNCTION_NAME_TOKEN`).
    The finish reason closes the items; the usage chunk (``choices: []``) brings the usage and
    ``sim_timing``; ``[DONE]`` ends the response.  A ``{"error": …}`` chunk is an ``error``
    event.  ``[DONE]`` before any finish reason is a truncated stream.
    """

    __slots__ = ("_emit", "ended", "reason", "usage")

    def __init__(self) -> None:
        self._emit = ResponsesEmitter()
        #: the finish reason, once a choice had one
        self.reason: str | None = None
        #: the usage chunk's ``usage``, as the server sent it
        self.usage: dict[str, Any] | None = None
        self.ended = False

    def feed(self, msg: SSEMessage) -> list[Event]:
        if self.ended:
            return []  # nothing after the end counts (a stray byte after [DONE] or an error)
        if msg.raw.startswith(b"[DONE]"):
            return self._done()
        chunk = loads(msg.raw)
        emit = self._emit
        err = chunk.get("error")
        if isinstance(err, dict):
            self.ended = True
            return emit.error(err.get("code") or err.get("type"), err.get("message"))
        events: list[Event] = []
        if not emit.started:
            events += emit.created(str(chunk.get("id") or "chatcmpl"), chunk.get("model"))
        usage = chunk.get("usage")
        if isinstance(usage, dict):
            self.usage = usage
        if "sim_timing" in chunk:
            emit.sim_timing = chunk["sim_timing"]
        choices = chunk.get("choices")
        if not isinstance(choices, list):
            return events
        for choice in choices:
            if not isinstance(choice, dict) or choice.get("index", 0) != 0:
                continue  # n is 1: other choices are not this conversation's
            delta = choice.get("delta")
            if isinstance(delta, dict):
                events += self._delta(delta)
            reason = choice.get("finish_reason")
            if reason:
                self.reason = str(reason)
                events += emit.close_all()
        return events

    def _delta(self, delta: dict[str, Any]) -> list[Event]:
        emit = self._emit
        events: list[Event] = []
        reasoning = delta.get("reasoning_content") or delta.get("reasoning")
        if isinstance(reasoning, str) and reasoning:
            if not emit.is_open(_REASONING):
                events += emit.open_reasoning(_REASONING)
            events += emit.delta(_REASONING, reasoning)
        content = delta.get("content")
        if isinstance(content, str) and content:
            events += emit.close(_REASONING)
            if not emit.is_open(_TEXT):
                events += emit.open_message(_TEXT)
            events += emit.delta(_TEXT, content)
        calls = delta.get("tool_calls")
        if isinstance(calls, list):
            for call in calls:
                if isinstance(call, dict):
                    events += self._call(call)
        return events

    def _call(self, call: dict[str, Any]) -> list[Event]:
        emit = self._emit
        key = ("call", call.get("index", 0))
        fn = call.get("function")
        fn = fn if isinstance(fn, dict) else {}
        events: list[Event] = []
        if not emit.is_open(key):
            events += emit.close(_REASONING)
            name = str(fn.get("name") or "")
            events += emit.open_call(key, str(call.get("id") or ""), name)
            if name:
                events += emit.name_token(key)
        arguments = fn.get("arguments")
        if isinstance(arguments, str):
            events += emit.delta(key, arguments)
        return events

    def _done(self) -> list[Event]:
        self.ended = True
        if self.reason is None:
            raise TransportError(
                ErrorKind.TRUNCATED_STREAM,
                "the Chat Completions stream sent [DONE] before any choice had a finish_reason",
            )
        return self._emit.terminal(
            self.reason in INCOMPLETE_REASONS,
            None if self.usage is None else _usage(self.usage),
        )


def _usage(usage: dict[str, Any]) -> Event:
    prompt = usage.get("prompt_tokens_details")
    completion = usage.get("completion_tokens_details")
    reasoning = completion.get("reasoning_tokens") if isinstance(completion, dict) else None
    return responses_usage(
        int_field(usage, "prompt_tokens"),
        int_field(prompt, "cached_tokens"),
        int_field(usage, "completion_tokens"),
        reasoning if isinstance(reasoning, int) and not isinstance(reasoning, bool) else None,
    )
