"""Endpoints that speak only one of the other two APIs, for the probe's tests.

- :func:`chat_only_server` — a vLLM-like server: ``POST /v1/chat/completions`` streamed as
  vLLM streams it (``chat.completion.chunk`` chunks, the usage chunk when
  ``stream_options.include_usage`` asks for it, ``data: [DONE]``), FastAPI's 404 everywhere
  else (``/v1/responses`` and its WebSocket upgrade included).  Like vLLM it reports no
  ``prompt_tokens_details`` unless told to; with ``tools=False`` it refuses requests with
  tools, in vLLM's (older) error shape.
- :func:`messages_only_server` — an Anthropic-like server: ``POST /v1/messages`` streamed
  as ``message_start`` … ``message_stop``, ``x-api-key`` and ``anthropic-version`` required,
  prompt caching of a system prompt marked with ``cache_control`` (1024 tokens at least, as
  the API's smallest cacheable prompt), the API's own error body everywhere else.

Both run on 127.0.0.1 port 0 in a thread and stop when their block ends
(:func:`tests.foreign_servers.serve`).
"""

from __future__ import annotations

import itertools
import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

from tests.foreign_servers import _Handler, serve

_ids = itertools.count(1)
#: the smallest prompt the fake Messages API caches, in tokens (the real API's, for most models)
MIN_CACHEABLE_TOKENS = 1024


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _sse(data: list[Any], *, named: bool = False) -> bytes:
    out = []
    for d in data:
        if isinstance(d, str):
            out.append(f"data: {d}\n\n")
        elif named:
            out.append(f"event: {d['type']}\ndata: {json.dumps(d)}\n\n")
        else:
            out.append(f"data: {json.dumps(d)}\n\n")
    return "".join(out).encode()


class _Chat(_Handler):
    # a WebSocket client reads no HTTP/1.0 answer to its upgrade
    protocol_version = "HTTP/1.1"
    tools = True
    cached_tokens = False
    #: the one model it serves (None: any name is taken)
    model: str | None = None

    #: answer a WebSocket upgrade as Starlette does on a plain HTTP route: 403, no body
    bare_403_upgrades = False

    def answer(self) -> tuple[int, str, bytes]:
        if self.bare_403_upgrades and self.headers.get("upgrade", "").lower() == "websocket":
            return 403, "text/plain", b""
        if self.command != "POST" or self.path.rstrip("/") != "/v1/chat/completions":
            return 404, "application/json", b'{"detail":"Not Found"}'
        body = json.loads(self.request_body or b"{}")
        if self.model is not None and body.get("model") != self.model:
            # vLLM's answer to a model it does not serve: a 404 on a route it has
            message = f"The model `{body.get('model')}` does not exist."
            err = {"error": {"message": message, "type": "NotFoundError", "param": None,
                             "code": 404}}  # fmt: skip
            return 404, "application/json", json.dumps(err).encode()
        if body.get("tools") and not self.tools:
            # an OpenAI-compatible server without tool support, in vLLM's error shape
            message = f'tool_choice "{body.get("tool_choice")}" is not supported by this server'
            err = {"object": "error", "message": message, "type": "BadRequestError", "code": 400}
            return 400, "application/json", json.dumps(err).encode()
        prompt = sum(_tokens(str(m.get("content") or "")) + 4 for m in body["messages"])
        head = {
            "id": f"chatcmpl-{next(_ids)}",
            "object": "chat.completion.chunk",
            "created": 1751569118,
            "model": body["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {
                **head,
                "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
                "usage": None,
            }

        chunks: list[Any] = [chunk({"role": "assistant", "content": ""})]
        if body.get("tools"):
            name = body["tools"][0]["function"]["name"]
            chunks += [
                chunk(
                    {
                        "tool_calls": [
                            {
                                "index": 0,
                                "id": "call_1",
                                "type": "function",
                                "function": {"name": name, "arguments": ""},
                            }
                        ]
                    }
                ),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"text": '}}]}),
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"ok"}'}}]}),
                chunk({}, "tool_calls"),
            ]
            completion = 8
        else:
            chunks += [chunk({"content": "Hello"}), chunk({"content": "."}), chunk({}, "stop")]
            completion = 2
        if (body.get("stream_options") or {}).get("include_usage"):
            usage: dict[str, Any] = {
                "prompt_tokens": prompt,
                "completion_tokens": completion,
                "total_tokens": prompt + completion,
            }
            if self.cached_tokens:
                usage["prompt_tokens_details"] = {"cached_tokens": 0}
            chunks.append({**head, "choices": [], "usage": usage})
        chunks.append("[DONE]")
        return 200, "text/event-stream", _sse(chunks)


def _anthropic_error(status: int, kind: str, message: str) -> tuple[int, str, bytes]:
    doc = {"type": "error", "error": {"type": kind, "message": message}, "request_id": "req_1"}
    return status, "application/json", json.dumps(doc).encode()


class _Messages(_Handler):
    protocol_version = "HTTP/1.1"
    #: the system prompts already cached (the whole marked prefix's text); one set per server
    cache: ClassVar[set[str]] = set()
    lock: ClassVar[threading.Lock] = threading.Lock()

    def answer(self) -> tuple[int, str, bytes]:
        if self.command != "POST" or self.path.rstrip("/") != "/v1/messages":
            return _anthropic_error(404, "not_found_error", f"Not found: {self.path}")
        if not self.headers.get("x-api-key"):
            return _anthropic_error(401, "authentication_error", "x-api-key header is required")
        if not self.headers.get("anthropic-version"):
            return _anthropic_error(
                400, "invalid_request_error", "anthropic-version: header is required"
            )
        body = json.loads(self.request_body or b"{}")
        system = body.get("system") or []
        blocks = [system] if isinstance(system, str) else system
        marked = "".join(b["text"] for b in blocks if isinstance(b, dict))
        system_tokens = _tokens(marked) if marked else 0
        user = sum(_tokens(json.dumps(m["content"])) for m in body["messages"])
        read = written = 0
        cached = any(isinstance(b, dict) and b.get("cache_control") for b in blocks)
        if cached and system_tokens >= MIN_CACHEABLE_TOKENS:
            with self.lock:
                if marked in self.cache:
                    read = system_tokens
                else:
                    self.cache.add(marked)
                    written = system_tokens
        uncached = user + system_tokens - read - written
        usage = {
            "input_tokens": uncached,
            "cache_creation_input_tokens": written,
            "cache_read_input_tokens": read,
        }
        message = {
            "id": f"msg_{next(_ids)}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body["model"],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        events = [
            {"type": "message_start", "message": message},
            {
                "type": "content_block_start",
                "index": 0,
                "content_block": {"type": "text", "text": ""},
            },
            {"type": "ping"},
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "Hello"},
            },
            {"type": "content_block_stop", "index": 0},
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": 2},
            },
            {"type": "message_stop"},
        ]
        return 200, "text/event-stream", _sse(events, named=True)


@contextmanager
def chat_only_server(
    *,
    tools: bool = True,
    cached_tokens: bool = False,
    model: str | None = None,
    bare_403_upgrades: bool = False,
) -> Iterator[str]:
    """A vLLM-like Chat Completions endpoint (see the module docstring); with ``model``, it
    serves that model only; with ``bare_403_upgrades``, it refuses WebSocket upgrades as vLLM
    (Starlette) does, 403 with no body."""
    handler = type(
        "_ChatServer",
        (_Chat,),
        {
            "tools": tools,
            "cached_tokens": cached_tokens,
            "model": model,
            "bare_403_upgrades": bare_403_upgrades,
        },
    )
    with serve(handler) as url:
        yield url


@contextmanager
def messages_only_server() -> Iterator[str]:
    """An Anthropic-like Messages endpoint with prompt caching (see the module docstring)."""
    handler = type("_MessagesServer", (_Messages,), {"cache": set(), "lock": threading.Lock()})
    with serve(handler) as url:
        yield url
