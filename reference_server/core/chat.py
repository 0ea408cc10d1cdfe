"""Chat Completions (``POST /v1/chat/completions``) in terms of the server's Responses model (pure).

The server has one simulation: a Responses request (:class:`CreateRequest`) run by
the shared pipeline, whose output is Responses events.  This module is the Chat
Completions face of it: :func:`parse_chat` validates a chat body (errors name the
chat fields: ``messages[3].tool_call_id``, ``max_completion_tokens``) and turns the
messages into the same conversation items the ``http`` transport sends, so both
APIs cost and cache the same; :class:`ChatChunks` turns the pipeline's events into
``chat.completion.chunk`` objects, and :func:`chat_completion` the finished response
into the ``stream: false`` object.  Shapes follow the issue-18 wire contract.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from harness.wire import events as ev
from reference_server.core.validation import (
    REASONING_EFFORTS,
    CreateRequest,
    body_model,
    booleans,
    checked,
    content_parts,
    function_tool,
    invalid,
    missing,
    number_in,
    objects,
    one_of,
    string_map,
    token_cap,
    tool_choice,
    wrong_type,
)

CHAT_ROLES = ("system", "developer", "user", "assistant", "tool")


@dataclass(slots=True)
class ChatRequest:
    create: CreateRequest
    include_usage: bool
    # Which field set the output cap, so a limit error names the one the client sent.
    max_tokens_field: str


def _text(value: Any, where: str, *, nullable: bool = False) -> str | None:
    """A message's ``content``: a string or an array of parts; the text the model reads."""
    if value is None and nullable:
        return None
    if isinstance(value, str):
        return value
    if isinstance(value, list):
        texts = []
        for j, part in content_parts(value, where):
            if part["type"] == "text":
                if not isinstance(part.get("text"), str):
                    raise missing(f"{where}[{j}].text")
                texts.append(part["text"])
        return "".join(texts)
    expected = (
        "a string, an array of content parts or null"
        if nullable
        else "a string or an array of content parts"
    )
    raise wrong_type(where, expected, value)


def _tool_calls(value: Any, where: str) -> list[dict[str, Any]]:
    checked(value, where, "an array", list)
    calls = []
    for at, call in objects(value, where):
        if not isinstance(call.get("id"), str) or not call["id"]:
            raise missing(f"{at}.id")
        if call.get("type", "function") != "function":
            raise invalid(f"Invalid value for '{at}.type': expected 'function'.", f"{at}.type")
        fn = call.get("function")
        if not isinstance(fn, dict):
            raise missing(f"{at}.function")
        if not isinstance(fn.get("name"), str) or not fn["name"]:
            raise missing(f"{at}.function.name")
        if not isinstance(fn.get("arguments"), str):
            raise missing(f"{at}.function.arguments")
        calls.append(
            {
                "type": "function_call",
                "call_id": call["id"],
                "name": fn["name"],
                "arguments": fn["arguments"],
            }
        )
    return calls


def chat_items(messages: Any) -> list[dict[str, Any]]:
    """The conversation items of a chat ``messages`` array, each message checked."""
    if messages is None:
        raise missing("messages")
    if not checked(messages, "messages", "an array", list):
        raise invalid(
            "Invalid 'messages': empty array. Expected an array with minimum length 1.",
            "messages",
            "empty_array",
        )
    items: list[dict[str, Any]] = []
    call_ids: set[str] = set()
    for where, msg in objects(messages, "messages"):
        role = one_of(msg.get("role"), f"{where}.role", CHAT_ROLES, required=True)
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if not isinstance(call_id, str) or not call_id:
                raise missing(f"{where}.tool_call_id")
            if call_id not in call_ids:
                raise invalid(
                    f"Invalid parameter: '{where}.tool_call_id' is {call_id!r}, which no earlier "
                    "assistant message's 'tool_calls' has: a message with role 'tool' must answer "
                    "a preceding tool call.",
                    f"{where}.tool_call_id",
                )
            output = _text(msg.get("content"), f"{where}.content")
            items.append({"type": "function_call_output", "call_id": call_id, "output": output})
            continue
        if role == "assistant":
            content = _text(msg.get("content"), f"{where}.content", nullable=True)
            raw_calls = msg.get("tool_calls")
            calls = _tool_calls(raw_calls, f"{where}.tool_calls") if raw_calls is not None else []
            if content is None and not calls:
                raise invalid(
                    f"Invalid value for '{where}': an assistant message needs 'content' or 'tool_calls'.",
                    f"{where}.content",
                )
            if content:
                items.append({"type": "message", "role": "assistant", "content": content})
            items.extend(calls)
            call_ids.update(c["call_id"] for c in calls)
            continue
        if "content" not in msg:
            raise missing(f"{where}.content")
        text = _text(msg.get("content"), f"{where}.content")
        items.append({"type": "message", "role": role, "content": text})
    return items


def chat_tools(value: Any) -> list[dict[str, Any]]:
    """Chat ``tools`` in the Responses shape (what the output model and the token count read)."""
    if value is None:
        return []
    checked(value, "tools", "an array", list)
    tools: list[dict[str, Any]] = []
    seen: set[str] = set()
    for where, tool in objects(value, "tools"):
        if tool.get("type") == "custom":
            # A free-form tool: accepted and counted, never called by the simulated model.
            custom = tool.get("custom")
            if not isinstance(custom, dict) or not isinstance(custom.get("name"), str):
                raise missing(f"{where}.custom.name")
            tools.append({"type": "custom", **custom})
            continue
        if tool.get("type") != "function":
            raise invalid(
                f"Invalid value for '{where}.type': expected 'function' or 'custom', got {tool.get('type')!r}.",
                f"{where}.type",
            )
        fn = tool.get("function")
        if not isinstance(fn, dict):
            raise missing(f"{where}.function")
        name = function_tool(fn, f"{where}.function", seen)
        out: dict[str, Any] = {"type": "function", "name": name}
        for key in ("description", "parameters", "strict"):
            if fn.get(key) is not None:
                out[key] = fn[key]
        tools.append(out)
    return tools


def _max_tokens(body: dict[str, Any]) -> tuple[int | None, str]:
    field = (
        "max_completion_tokens" if body.get("max_completion_tokens") is not None else "max_tokens"
    )
    return token_cap(body.get(field), field), field


def _check_scalars(body: dict[str, Any]) -> None:
    booleans(body, ("stream", "parallel_tool_calls", "store", "logprobs"))
    for key, lo, hi in (("temperature", 0, 2), ("top_p", 0, 1)):
        value = body.get(key)
        if value is not None and not number_in(value, lo, hi):
            raise invalid(
                f"Invalid value for '{key}': expected a number from {lo} to {hi}, got {value!r}.",
                key,
            )
    seed = body.get("seed")
    if seed is not None and not number_in(seed, -math.inf, kind=int):
        raise wrong_type("seed", "an integer", seed)
    n = body.get("n")
    if n is not None and n != 1:
        raise invalid(
            f"Invalid value for 'n': this server generates one choice per request (n = 1), got {n!r}.",
            "n",
        )
    checked(body.get("user"), "user", "a string", str)


def parse_chat(body: Any) -> ChatRequest:
    """A chat completions body, validated, as the server's internal request."""
    body, model = body_model(body)
    items = chat_items(body.get("messages"))
    tools = chat_tools(body.get("tools"))
    choice = tool_choice(body.get("tool_choice"), tools, chat=True)
    max_tokens, max_field = _max_tokens(body)
    _check_scalars(body)
    stream = body.get("stream") is True
    options = body.get("stream_options")
    include_usage = False
    if checked(options, "stream_options", "an object", dict) is not None:
        if not stream:
            raise invalid(
                "The 'stream_options' parameter is only allowed when 'stream' is enabled.",
                "stream_options",
            )
        flag = checked(
            options.get("include_usage"), "stream_options.include_usage", "a boolean", bool
        )
        include_usage = flag is True
    effort = one_of(body.get("reasoning_effort"), "reasoning_effort", REASONING_EFFORTS)
    # Reasoning streams as `reasoning_content`: the pipeline's summary deltas carry it (docs/server.md).
    raw = {"model": model, "reasoning": {"effort": effort, "summary": "auto"}}
    create = CreateRequest(
        model=model,
        input_items=items,
        tools=tools,
        tool_choice=choice,
        parallel_tool_calls=body.get("parallel_tool_calls") is not False,
        store=False,
        stream=stream,
        max_output_tokens=max_tokens,
        metadata=string_map(body.get("metadata")),
        raw=raw,
    )
    return ChatRequest(create, include_usage, max_field)


def chat_usage(usage: dict[str, Any]) -> dict[str, Any]:
    """A Responses ``usage`` as chat ``usage``."""
    prompt = int(usage.get("input_tokens", 0))
    completion = int(usage.get("output_tokens", 0))
    cached = int((usage.get("input_tokens_details") or {}).get("cached_tokens", 0))
    reasoning = int((usage.get("output_tokens_details") or {}).get("reasoning_tokens", 0))
    return {
        "prompt_tokens": prompt,
        "completion_tokens": completion,
        "total_tokens": prompt + completion,
        "prompt_tokens_details": {"cached_tokens": cached},
        "completion_tokens_details": {"reasoning_tokens": reasoning},
    }


def finish_reason(response: dict[str, Any]) -> str:
    """Why a finished response stopped, in Chat terms (Messages renames them)."""
    if response.get("status") == "incomplete":
        return "length"
    if any(it.get("type") == "function_call" for it in response.get("output", [])):
        return "tool_calls"
    return "stop"


def event_error(event: dict[str, Any]) -> dict[str, Any]:
    """The ``error`` object of a Responses ``error`` event, nested or flat (--sse-error-shape)."""
    nested = event.get("error")
    return nested if isinstance(nested, dict) else event


def error_message(event: dict[str, Any]) -> str:
    """The message of a Responses ``error`` event, as a failed answer states it."""
    return str(event_error(event).get("message") or "The server had an error.")


def mid_stream_error(message: str, code: str | None = "server_error") -> dict[str, Any]:
    """The one chunk that ends a failed stream (no ``[DONE]`` follows)."""
    return {"error": {"message": message, "type": "server_error", "code": code, "param": None}}


@dataclass(slots=True)
class ChatChunks:
    """Responses events of one response → ``chat.completion.chunk`` objects (issue-18 contract).

    ``failed`` turns true at an ``error`` event: the stream then ends without ``[DONE]``.
    """

    id: str
    model: str
    created: int
    include_usage: bool = field(kw_only=True)
    failed: bool = field(default=False, init=False)
    finished: bool = field(default=False, init=False)
    _calls: int = field(default=0, init=False)

    def _frame(self, choices: list[dict[str, Any]]) -> dict[str, Any]:
        return _envelope(self.id, "chat.completion.chunk", self.created, self.model, choices)

    def _chunk(self, delta: dict[str, Any], finish_reason: str | None = None) -> dict[str, Any]:
        choice = {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish_reason}
        return self._frame([choice])

    def translate(self, events: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
        out: list[dict[str, Any]] = []
        for event in events:
            kind = event.get("type")
            if kind == ev.CREATED:
                out.append(self._chunk({"role": "assistant", "content": ""}))
            elif kind == ev.OUTPUT_ITEM_ADDED and event["item"].get("type") == "function_call":
                call = {"index": self._calls, **_call(event["item"], "")}
                self._calls += 1
                out.append(self._chunk({"tool_calls": [call]}))
            elif kind == ev.ARGUMENTS_DELTA:
                part = {"index": self._calls - 1, "function": {"arguments": event["delta"]}}
                out.append(self._chunk({"tool_calls": [part]}))
            elif kind == ev.TEXT_DELTA:
                out.append(self._chunk({"content": event["delta"]}))
            elif kind == ev.REASONING_SUMMARY_TEXT_DELTA:
                out.append(self._chunk({"reasoning_content": event["delta"]}))
            elif kind in (ev.COMPLETED, ev.INCOMPLETE):
                response = event["response"]
                self.finished = True
                out.append(self._chunk({}, finish_reason(response)))
                if self.include_usage:
                    out.append(self._usage_chunk(response))
            elif kind == ev.ERROR:
                err = event_error(event)
                self.failed = True
                out.append(mid_stream_error(str(err.get("message", "")), err.get("code")))
        return out

    def _usage_chunk(self, response: dict[str, Any]) -> dict[str, Any]:
        chunk = self._frame([])
        chunk["usage"] = chat_usage(response.get("usage") or {})
        return with_sim_timing(chunk, response)


def with_sim_timing(doc: dict[str, Any], response: dict[str, Any]) -> dict[str, Any]:
    """``doc`` carrying the response's ``sim_timing`` when it has one (docs/server.md)."""
    if "sim_timing" in response:
        doc["sim_timing"] = response["sim_timing"]
    return doc


def _call(item: dict[str, Any], arguments: str) -> dict[str, Any]:
    return {
        "id": item["call_id"],
        "type": "function",
        "function": {"name": item["name"], "arguments": arguments},
    }


def chat_completion(response: dict[str, Any], completion_id: str, created: int) -> dict[str, Any]:
    """A finished Responses response object as the ``stream: false`` ``chat.completion``."""
    texts: list[str] = []
    reasoning: list[str] = []
    calls: list[dict[str, Any]] = []
    for item in response.get("output", []):
        kind = item.get("type")
        if kind == "message":
            texts.extend(p.get("text", "") for p in item.get("content", []))
        elif kind == "function_call":
            calls.append(_call(item, item["arguments"]))
        elif kind == "reasoning":
            reasoning.extend(p.get("text", "") for p in item.get("summary", []))
    message: dict[str, Any] = {
        "role": "assistant",
        "content": "".join(texts) if texts else None,
        "refusal": None,
    }
    if calls:
        message["tool_calls"] = calls
    if reasoning:
        message["reasoning_content"] = "".join(reasoning)
    reason = finish_reason(response)
    choice = {"index": 0, "message": message, "logprobs": None, "finish_reason": reason}
    doc = _envelope(completion_id, "chat.completion", created, response.get("model"), [choice])
    doc["usage"] = chat_usage(response.get("usage") or {})
    return with_sim_timing(doc, response)


def _envelope(
    doc_id: str, kind: str, created: int, model: Any, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    """What a ``chat.completion`` and each of its chunks carry around their choices."""
    return {
        "id": doc_id,
        "object": kind,
        "created": created,
        "model": model,
        "system_fingerprint": None,
        "choices": choices,
    }
