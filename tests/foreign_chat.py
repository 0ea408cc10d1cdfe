"""A small canned Chat Completions + Anthropic Messages server, for the ``chat`` and ``messages``
transports' tests (until and besides the reference server's own routes).

Started by a test on 127.0.0.1 port 0 in a background thread (its own event loop), stopped
when the ``with`` block ends.  It speaks ``POST /v1/chat/completions`` and ``POST
/v1/messages`` (HTTP/1.1, keep-alive, chunked SSE) as the issue-18 wire contract writes them,
answering like the reference server's scripted agent: ``tool_choice`` required / ``any`` →
``loopbench.parallel_calls`` function calls (default 1), else a text answer of
``loopbench.output_tokens`` tokens; ``loopbench.reasoning_tokens`` → reasoning first
(``reasoning_content`` chunks, or a thinking block with a signature).  Usage counts four
characters per token; Messages honours prompt-cache breakpoints (a marked prefix seen
before is read from the cache, the rest up to the last breakpoint is written).  Every
answer carries a ``sim_timing`` (:data:`SIM_TIMING`).

It records each request (path, the headers that matter, the parsed body) in ``requests``.
``mode`` makes it misbehave in one way: ``error_status`` (every request refused with
:data:`ERROR_STATUS` in the API's own error shape), ``midstream_error`` (an error after the
first delta), ``truncate`` (the body ends after the first delta, no end marker), ``no_finish``
(chat: ``[DONE]`` without a finish reason).
"""

from __future__ import annotations

import asyncio
import hashlib
import itertools
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import orjson

from harness.wire.tokens import count_tokens
from tests.foreign_http import keep_alive, serve_in_thread

MODES = ("ok", "error_status", "midstream_error", "truncate", "no_finish")
SIM_TIMING = {"api_pre": 1.5, "prefill": 2.5, "decode": 3.0, "ttft": 4.0, "cache": "hit"}
ERROR_STATUS = 529
RECORDED_HEADERS = ("authorization", "x-api-key", "anthropic-version", "content-type", "x-extra")
DEFAULT_TOKENS = 24
#: blocks a cache read looks back from a breakpoint (the API's documented window)
LOOKBACK = 20


@dataclass
class _Server:
    mode: str = "ok"
    requests: list[dict[str, Any]] = field(default_factory=list)
    ids: Iterator[int] = field(default_factory=lambda: itertools.count(1))
    cached: set[str] = field(default_factory=set)

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await keep_alive(reader, writer, self.route)

    async def route(
        self, line: str, headers: dict[str, str], raw: bytes, writer: asyncio.StreamWriter
    ) -> None:
        _method, path, _ = line.split(" ", 2)
        body = orjson.loads(raw) if raw else {}
        self.requests.append(
            {
                "path": path,
                "headers": {k: headers[k] for k in RECORDED_HEADERS if k in headers},
                "body": body,
            }
        )
        if path.endswith("/chat/completions"):
            await self.chat(writer, body)
        elif path.endswith("/messages"):
            await self.messages(writer, body)
        else:
            _respond(writer, 404, b'{"error": {"message": "no such route"}}')

    # -- what to answer ------------------------------------------------------------------

    @staticmethod
    def plan(body: dict[str, Any], forced: bool) -> tuple[int, int, int]:
        """(function calls, text tokens, reasoning tokens) as the scripted agent decides."""
        meta = body.get("metadata") or {}
        calls = int(meta.get("loopbench.parallel_calls", 1)) if forced else 0
        return (
            calls,
            int(meta.get("loopbench.output_tokens", DEFAULT_TOKENS)),
            int(meta.get("loopbench.reasoning_tokens", 0)),
        )

    # -- Chat Completions ----------------------------------------------------------------

    async def chat(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        if self.mode == "error_status":
            err = {"message": "The engine is overloaded.", "type": "server_error", "code": None}
            _respond(writer, 503, orjson.dumps({"error": err}))
            return
        n = next(self.ids)
        calls, tokens, reasoning = self.plan(body, body.get("tool_choice") == "required")
        base = {
            "id": f"chatcmpl-{n:032x}",
            "object": "chat.completion.chunk",
            "created": 1,
            "model": body.get("model"),
            "system_fingerprint": None,
        }
        _start_stream(writer)

        async def chunk(choices: list[Any], **extra: Any) -> None:
            await _send(writer, b"data: " + orjson.dumps({**base, "choices": choices, **extra}))

        def delta(d: dict[str, Any], finish: str | None = None) -> list[Any]:
            return [{"index": 0, "delta": d, "finish_reason": finish}]

        await chunk(delta({"role": "assistant", "content": ""}))
        for piece in _pieces(reasoning, "r"):
            await chunk(delta({"reasoning_content": piece}))
        streamed = 0
        if calls:
            for k in range(calls):
                head = {
                    "index": k,
                    "id": f"call_{n:016x}{k:016x}",
                    "type": "function",
                    "function": {"name": "run_tool", "arguments": ""},
                }
                await chunk(delta({"tool_calls": [head]}))
                for piece in ('{"command":', f' "ls {k}"}}'):
                    streamed += len(piece)
                    await chunk(
                        delta({"tool_calls": [{"index": k, "function": {"arguments": piece}}]})
                    )
                    if await self.misbehave(writer, chat=True):
                        return
            finish = "tool_calls"
        else:
            for piece in _pieces(tokens, "t"):
                streamed += len(piece)
                await chunk(delta({"content": piece}))
                if await self.misbehave(writer, chat=True):
                    return
            finish = "stop"
        if self.mode != "no_finish":
            await chunk(delta({}, finish))
        prompt = count_tokens(orjson.dumps(body.get("messages", [])).decode())
        completion = count_tokens("x" * streamed) + reasoning
        usage = {
            "prompt_tokens": prompt,
            "completion_tokens": completion,
            "total_tokens": prompt + completion,
            "prompt_tokens_details": {"cached_tokens": 0},
            "completion_tokens_details": {"reasoning_tokens": reasoning},
        }
        await chunk([], usage=usage, sim_timing=SIM_TIMING)
        await _send(writer, b"data: [DONE]")
        _end_stream(writer)

    # -- Anthropic Messages --------------------------------------------------------------

    async def messages(self, writer: asyncio.StreamWriter, body: dict[str, Any]) -> None:
        if self.mode == "error_status":
            err = {"type": "overloaded_error", "message": "Overloaded"}
            doc = {"type": "error", "error": err, "request_id": "req_1"}
            _respond(writer, ERROR_STATUS, orjson.dumps(doc))
            return
        n = next(self.ids)
        forced = (body.get("tool_choice") or {}).get("type") == "any"
        calls, tokens, reasoning = self.plan(body, forced)
        total, read, write = self.cache(body)
        usage = {
            "input_tokens": total - read - write,
            "cache_creation_input_tokens": write,
            "cache_read_input_tokens": read,
        }
        _start_stream(writer)

        async def event(name: str, **data: Any) -> None:
            doc = orjson.dumps({"type": name, **data})
            await _send(writer, b"event: " + name.encode() + b"\ndata: " + doc)

        message = {
            "id": f"msg_{n:032x}",
            "type": "message",
            "role": "assistant",
            "content": [],
            "model": body.get("model"),
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {**usage, "output_tokens": 1},
        }
        await event("message_start", message=message)
        await event("ping")
        index = 0
        if reasoning:
            block = {"type": "thinking", "thinking": "", "signature": ""}
            await event("content_block_start", index=index, content_block=block)
            for piece in _pieces(reasoning, "r"):
                d = {"type": "thinking_delta", "thinking": piece}
                await event("content_block_delta", index=index, delta=d)
            sig = {"type": "signature_delta", "signature": f"sig{n}"}
            await event("content_block_delta", index=index, delta=sig)
            await event("content_block_stop", index=index)
            index += 1
        streamed = 0
        if calls:
            for k in range(calls):
                block = {
                    "type": "tool_use",
                    "id": f"toolu_{n:012x}{k:012x}",
                    "name": "run_tool",
                    "input": {},
                }
                await event("content_block_start", index=index, content_block=block)
                for piece in ("", '{"command":', f' "ls {k}"}}'):
                    streamed += len(piece)
                    d = {"type": "input_json_delta", "partial_json": piece}
                    await event("content_block_delta", index=index, delta=d)
                    if piece and await self.misbehave(writer, chat=False):
                        return
                await event("content_block_stop", index=index)
                index += 1
            stop = "tool_use"
        else:
            block = {"type": "text", "text": ""}
            await event("content_block_start", index=index, content_block=block)
            for piece in _pieces(tokens, "t"):
                streamed += len(piece)
                await event(
                    "content_block_delta", index=index, delta={"type": "text_delta", "text": piece}
                )
                if await self.misbehave(writer, chat=False):
                    return
            await event("content_block_stop", index=index)
            stop = "end_turn"
        out = count_tokens("x" * streamed) + reasoning
        await event(
            "message_delta",
            delta={"stop_reason": stop, "stop_sequence": None},
            usage={**usage, "output_tokens": out},
            sim_timing=SIM_TIMING,
        )
        await event("message_stop")
        _end_stream(writer)

    def cache(self, body: dict[str, Any]) -> tuple[int, int, int]:
        """(input tokens, cache read, cache write) by the request's breakpoints: tools, system,
        messages in that order (as the API renders them); a read looks back up to
        :data:`LOOKBACK` blocks before each breakpoint, as the API does."""
        blocks: list[Any] = [*body.get("tools", []), *body.get("system", [])]
        for message in body.get("messages", []):
            blocks.extend(message.get("content", []))
        prefix = hashlib.sha256()
        tokens = 0
        bounds: list[tuple[str, int]] = []  # (hash, tokens) after each block
        read = last_mark = 0
        for i, block in enumerate(blocks):
            text = orjson.dumps({k: v for k, v in block.items() if k != "cache_control"})
            prefix.update(text)
            tokens += count_tokens(text.decode())
            bounds.append((prefix.copy().hexdigest(), tokens))
            if "cache_control" in block:
                for key, upto in reversed(bounds[max(0, i - LOOKBACK + 1) :]):
                    if key in self.cached:
                        read = max(read, upto)
                        break
                last_mark = tokens
        for i, block in enumerate(blocks):
            if "cache_control" in block:
                self.cached.add(bounds[i][0])
        return tokens, read, max(0, last_mark - read)

    async def misbehave(self, writer: asyncio.StreamWriter, *, chat: bool) -> bool:
        """After the first delta: True when the stream ends here (the mode's fault)."""
        if self.mode == "midstream_error":
            if chat:
                err = {
                    "message": "The engine failed.",
                    "type": "server_error",
                    "code": "server_error",
                    "param": None,
                }
                await _send(writer, b"data: " + orjson.dumps({"error": err}))
            else:
                err = {"type": "overloaded_error", "message": "Overloaded"}
                doc = orjson.dumps({"type": "error", "error": err})
                await _send(writer, b"event: error\ndata: " + doc)
            _end_stream(writer)
            return True
        if self.mode == "truncate":
            _end_stream(writer)
            return True
        return False


def _pieces(tokens: int, letter: str) -> list[str]:
    """``tokens`` tokens of text, one four-character piece each."""
    return [f" {letter}{i % 100:02d}" for i in range(tokens)]


def _respond(writer: asyncio.StreamWriter, status: int, body: bytes) -> None:
    writer.write(
        b"HTTP/1.1 %d Error\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s"
        % (status, len(body), body)
    )


def _start_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )


async def _send(writer: asyncio.StreamWriter, line: bytes) -> None:
    chunk = line + b"\n\n"
    writer.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
    await writer.drain()


def _end_stream(writer: asyncio.StreamWriter) -> None:
    writer.write(b"0\r\n\r\n")


@contextmanager
def foreign_chat_server(mode: str = "ok") -> Iterator[tuple[str, list[dict[str, Any]]]]:
    """(base URL ``http://127.0.0.1:PORT/v1``, the recorded requests) while the block runs."""
    if mode not in MODES:
        raise ValueError(f"foreign chat server mode {mode!r}: expected one of {', '.join(MODES)}")
    server = _Server(mode)
    with serve_in_thread(server.handle, "foreign chat server") as port:
        yield f"http://127.0.0.1:{port}/v1", server.requests
