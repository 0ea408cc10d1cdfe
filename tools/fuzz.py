"""``make fuzz``: tens of thousands of hostile requests against a reference server, checked.

A seeded mutation fuzzer over raw asyncio sockets (no HTTP library between the
fuzzer and the server, so it can send what a library would refuse to):

* **http_body** — valid ``POST /v1/responses`` bodies (plain, items with tool calls,
  tools, streamed or not, stored or not), and ``POST /v1/chat/completions`` and
  ``POST /v1/messages`` bodies in their own shapes, mutated 1 to 4 times: keys dropped,
  values replaced by any JSON type, unknown keys, huge and negative numbers, deep
  nesting, invalid UTF-8, truncation, byte flips, non-object JSON;
* **http_header** — valid requests with broken framing: wrong or missing
  content types, content-lengths that lie, bad chunked encoding, duplicate and
  invalid headers, huge headers, bad methods, paths and versions;
* **ws** — WebSocket sessions of 1 to 4 frames: creates (valid and mutated),
  appends and steers with junk, non-JSON, binary, invalid UTF-8, fragments,
  stray continuations, reserved opcodes and bits, frames without a mask, oversized
  control frames, bad close codes, lying length headers, over-limit messages;
  ended by a close, a reset or a half-close;
* **socket** — half-open (half a request, then a half-close), resets after the
  head and in the middle of a stream, garbage bytes, a WebSocket reset after
  the 101, request heads written a few bytes at a time.

HTTP requests are pipelined on keep-alive connections, several connections at
once, so a 10,000-case run takes about a minute.  Every answer is checked
against the documented set (``docs/server.md``): a status below 500, a JSON
error body with a documented code, WebSocket events that are ``response.*`` or
``error`` events with documented codes, close codes of the protocol layer.  An
answer must start within ``--hang-s`` (the fuzz bodies model milliseconds of
work on the fast engine the fuzzer starts), and a stream read to its end must
end within it too.  The server's resident memory (``VmRSS``) is sampled after
a warm-up and after the run; afterwards a valid request must still be answered.

``python -m tools.fuzz --cases 10000`` starts its own server; with
``--target URL`` it fuzzes a server already running (no RSS without ``--pid``).
Exit 0 when nothing failed, 1 otherwise; ``--json PATH`` writes the counts.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import os
import random
import socket
import struct
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from bench.cli_args import at_least
from harness.run.embedded import server_child
from harness.wire import ws_frames as wsf
from harness.wire.exit_codes import UsageParser
from tools.soak import rss_kib

#: error codes of docs/server.md (HTTP and WebSocket tables) a fuzz input may meet
DOCUMENTED_CODES = frozenset(
    {
        "invalid_json",
        "invalid_message",
        "message_too_large",
        "missing_required_parameter",
        "invalid_type",
        "invalid_value",
        "invalid_function_parameters",
        "previous_response_not_found",
        "unknown_event_type",
        "invalid_stream_id",
        "unsupported_parameter",
        "request_too_large",
        "websocket_stream_limit_reached",
        "response_not_found",
        "invalid_append_input",
        "response_not_paused",
        "not_found",
        "method_not_allowed",
        "context_length_exceeded",
        "integer_above_max_value",
        "too_many_background_responses",
        "websocket_queue_full",
        "empty_array",
    }
)
#: ``error.type`` of the Messages API's error body (``{"type":"error","error":{type,message}}``)
MESSAGES_ERROR_TYPES = frozenset(
    {
        "invalid_request_error",
        "authentication_error",
        "permission_error",
        "not_found_error",
        "request_too_large",
        "rate_limit_error",
        "api_error",
        "overloaded_error",
    }
)
#: the routes http_body posts to, by weight: the Chat Completions and Messages faces too
BODY_ROUTES = (("/v1/responses", 70), ("/v1/chat/completions", 15), ("/v1/messages", 15))
#: close codes the WebSocket layer may answer hostile frames with (1011 is a server failure)
ALLOWED_CLOSE_CODES = frozenset({1000, 1002, 1005, 1006, 1007, 1008, 1009})
#: the server's limits while fuzzing: small, so over-limit inputs are cheap to send
MAX_BODY = 64 * 1024
MAX_OUTPUT = 64
FAMILIES = (("http_body", 60), ("http_header", 15), ("ws", 20), ("socket", 5))
CANARY = "canary-7f3a91"  # written into request content; must never reach the server's log
SERVER_ARGS = (
    "--max-body-bytes",
    str(MAX_BODY),
    "--max-ws-message-bytes",
    str(MAX_BODY),
    "--default-tool-calls",
    "1",
    "--default-output-tokens",
    "16",
    # A fast engine: the valid requests among the cases finish in milliseconds.
    "--set",
    "engine.sustained_tps=50000",
    "--set",
    "engine.burst_tps=100000",
    "--set",
    "engine.prefill_tps=10000000",
    "--set",
    "engine.base_ttft_ms=0",
    "--set",
    "engine.max_streams=1024",
    *(
        arg
        for k in ("connect_ms", "fixed_resolved_ms", "fixed_ms", "hop_ms", "post_ms")
        for arg in ("--set", f"api.{k}=0")
    ),
)


# -- the tally ---------------------------------------------------------------------------------


@dataclass
class Tally:
    """What the run sent and what came back, and every failure (the first examples kept)."""

    cases: Counter[str] = field(default_factory=Counter)
    answers: Counter[str] = field(default_factory=Counter)
    failures: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)
    hangs: int = 0

    def answer(self, family: str, what: str) -> None:
        self.answers[f"{family} {what}"] += 1

    def fail(self, kind: str, detail: str) -> None:
        self.failures[kind] += 1
        if kind == "hang":
            self.hangs += 1
        if len(self.examples) < 20:
            self.examples.append(f"{kind}: {detail[:300]}")

    @property
    def total(self) -> int:
        return sum(self.cases.values())

    @property
    def server_errors(self) -> int:
        return sum(n for k, n in self.failures.items() if k.startswith("5xx"))


class Finding(Exception):
    """A case's answer broke the contract; ``kind`` is its name in the tally."""

    kind = "broken_answer"

    def __init__(self, message: str, kind: str | None = None) -> None:
        super().__init__(message)
        if kind is not None:
            self.kind = kind


class Hang(Finding):
    """No answer (or no end of a stream) within the allowed time."""

    kind = "hang"


class TruncatedStream(Finding):
    """A 200 stream read to its end held no terminal event."""

    kind = "stream_without_terminal_event"


# -- mutation ----------------------------------------------------------------------------------

_WORDS = ("hi", "", CANARY, "é", "\u0000", "\ud7ff", "a" * 300, "{", "null", "1e999", "x\ny")
_NUMBERS = (0, -1, 1, 2, 2**31, 2**63, 2**64, -(2**63), 10**30, 1e308, -1e308, 0.5, 4, 1e-9)


def _rand_scalar(r: random.Random) -> Any:
    k = r.randrange(6)
    if k == 0:
        return None
    if k == 1:
        return r.random() < 0.5
    if k == 2:
        return r.choice(_NUMBERS)
    if k == 3:
        return r.randint(-1000, 1000)
    return r.choice(_WORDS)


def _rand_json(r: random.Random, depth: int = 0) -> Any:
    k = r.randrange(8 if depth < 3 else 5)
    if k < 5:
        return _rand_scalar(r)
    if k < 6 + (depth == 0):
        return [_rand_json(r, depth + 1) for _ in range(r.randrange(4))]
    return {r.choice((*_WORDS[:4], "type", "role")): _rand_json(r, depth + 1) for _ in range(3)}


def _chat_body(r: random.Random) -> dict[str, Any]:
    """A valid chat completions body with a small output."""
    body: dict[str, Any] = {
        "model": "sim-model",
        "messages": [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": CANARY},
        ],
        "max_completion_tokens": r.randint(1, MAX_OUTPUT),
        "stream": r.random() < 0.6,
    }
    if body["stream"] and r.random() < 0.5:
        body["stream_options"] = {"include_usage": True}
    if r.random() < 0.4:
        body["messages"] += [
            {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "a.txt " + CANARY},
        ]
        body["tools"] = [
            {"type": "function", "function": {"name": "ls", "parameters": {"type": "object"}}}
        ]
        body["tool_choice"] = r.choice(["auto", "required", "none"])
    return body


def _messages_body(r: random.Random) -> dict[str, Any]:
    """A valid Messages body with a small output, sometimes with tools and cache breakpoints."""
    mark = {"type": "ephemeral"}
    body: dict[str, Any] = {
        "model": "sim-model",
        "max_tokens": r.randint(1, MAX_OUTPUT),
        "system": [{"type": "text", "text": "be brief", "cache_control": mark}],
        "messages": [{"role": "user", "content": [{"type": "text", "text": CANARY}]}],
        "stream": r.random() < 0.6,
    }
    if r.random() < 0.4:
        body["messages"] += [
            {
                "role": "assistant",
                "content": [{"type": "tool_use", "id": "toolu_1", "name": "ls", "input": {}}],
            },
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "toolu_1",
                        "content": "a.txt " + CANARY,
                        "cache_control": mark,
                    }
                ],
            },
        ]
        body["tools"] = [{"name": "ls", "input_schema": {"type": "object"}, "cache_control": mark}]
        body["tool_choice"] = {"type": r.choice(["auto", "any", "none"])}
    return body


def _base_body(r: random.Random, route: str = "/v1/responses") -> dict[str, Any]:
    """A valid create body with a small output (so the valid cases cost milliseconds)."""
    if route == "/v1/chat/completions":
        return _chat_body(r)
    if route == "/v1/messages":
        return _messages_body(r)
    body: dict[str, Any] = {
        "model": "sim-model",
        "input": "hi " + CANARY,
        "max_output_tokens": r.randint(1, MAX_OUTPUT),
        "stream": r.random() < 0.6,
    }
    k = r.randrange(5)
    if k == 1:
        body["input"] = [
            {"role": "user", "content": "list files"},
            {"type": "function_call", "call_id": "c1", "name": "ls", "arguments": "{}"},
            {"type": "function_call_output", "call_id": "c1", "output": "a.txt " + CANARY},
        ]
    elif k == 2:
        body["tools"] = [
            {
                "type": "function",
                "name": "run",
                "parameters": {"type": "object", "properties": {"q": {"type": "string"}}},
            }
        ]
        body["tool_choice"] = r.choice(["auto", "required", "none"])
    elif k == 3:
        body["store"] = r.random() < 0.5
        body["instructions"] = "be brief"
        body["metadata"] = {"loopbench.output_tokens": str(r.randint(1, MAX_OUTPUT))}
    elif k == 4:
        body["previous_response_id"] = r.choice(["resp_nope", "", CANARY])
    return body


_FIELDS = (
    "model",
    "input",
    "instructions",
    "tools",
    "tool_choice",
    "max_output_tokens",
    "metadata",
    "previous_response_id",
    "store",
    "stream",
    "stream_id",
    "parallel_tool_calls",
    "generate",
    "background",
    "truncation",
    "include",
    "reasoning",
    "temperature",
    # the Chat Completions and Messages fields
    "messages",
    "max_tokens",
    "max_completion_tokens",
    "stream_options",
    "system",
    "thinking",
    "n",
)


def _mutate_doc(r: random.Random, doc: dict[str, Any]) -> Any:
    items = "messages" if "messages" in doc else "input"
    k = r.randrange(8)
    if k == 0 and doc:
        doc.pop(r.choice(list(doc)))
    elif k == 1:
        doc[r.choice(_FIELDS)] = _rand_json(r)
    elif k == 2:
        doc[r.choice(_WORDS)] = _rand_json(r)
    elif k == 3 and isinstance(doc.get(items), list) and doc[items]:
        item = r.choice(doc[items])
        if isinstance(item, dict) and item:
            keys = [*item, "type", "role", "call_id", "content", "tool_call_id", "tool_calls"]
            item[r.choice(keys)] = _rand_json(r)
            content = item.get("content")
            if isinstance(content, list) and content and isinstance(content[0], dict):
                # Messages blocks: a bad block, tool_use_id, cache_control or signature.
                block = r.choice(content)
                if isinstance(block, dict):
                    keys = [*block, "type", "tool_use_id", "cache_control", "signature"]
                    block[r.choice(keys)] = _rand_json(r)
    elif k == 4:
        doc[items] = [_rand_json(r) for _ in range(r.randrange(1, 4))]
    elif k == 5:
        doc["metadata"] = {
            r.choice(("loopbench.output_tokens", "loopbench.parallel_calls", "loopbench.fail")): (
                r.choice(("-3", "abc", "", "1e9", "mid_stream", str(r.randint(1, MAX_OUTPUT))))
            )
        }
    elif k == 6:
        doc["tools"] = [
            {
                "type": "function",
                "name": r.choice(("t", "", CANARY, "t")),
                "parameters": r.choice(
                    (
                        _rand_json(r),
                        {
                            "type": "object",
                            "properties": {
                                "a": {
                                    "type": r.choice(("integer", "array", "number", "x")),
                                    "minimum": r.choice(_NUMBERS),
                                    "maximum": r.choice(_NUMBERS),
                                    "minItems": r.choice(_NUMBERS),
                                }
                            },
                        },
                    )
                ),
            }
        ]
    else:
        return _rand_json(r)  # not an object at all
    return doc


def _bound_work(doc: Any) -> None:
    """Keep a positive ``max_output_tokens`` small: a long answer is legitimate, not fuzz."""
    if isinstance(doc, dict):
        for key in ("max_output_tokens", "max_tokens", "max_completion_tokens"):
            v = doc.get(key)
            if isinstance(v, int) and not isinstance(v, bool) and v > MAX_OUTPUT and v < 2**31:
                doc[key] = MAX_OUTPUT


def _mutate_bytes(r: random.Random, raw: bytes) -> bytes:
    k = r.randrange(7)
    if k == 0:
        return raw[: r.randrange(len(raw) + 1)]
    if k == 1 and raw:
        b = bytearray(raw)
        for _ in range(r.randint(1, 4)):
            b[r.randrange(len(b))] = r.randrange(256)
        return bytes(b)
    if k == 2:
        i = r.randrange(len(raw) + 1)
        return raw[:i] + r.choice((b"\xff\xfe", b"\xc3", b"\xed\xa0\x80", b"\x00")) + raw[i:]
    if k == 3:
        n = r.choice((10, 1000, 1100, 5000))
        return r.choice((b"[" * n + b"]" * n, b'{"a":' * n + b"1" + b"}" * n))
    if k == 4:
        return b'{"model":"m","input":"' + b"x" * r.choice((MAX_BODY - 40, MAX_BODY + 1)) + b'"}'
    if k == 5:
        return r.choice((b"", b" ", b"null", b"[]", b"{}", b'"x"', CANARY.encode(), raw + raw))
    n = r.choice((100, 1000, 2000))
    return json.dumps({"model": "m", "input": [{"role": "user", "content": "x"}] * n}).encode()


def fuzz_body(r: random.Random, route: str = "/v1/responses") -> bytes:
    """One create body: a valid one mutated 1 to 4 times, sometimes at the byte level."""
    doc: Any = _base_body(r, route)
    for _ in range(r.randint(1, 4)):
        doc = _mutate_doc(r, doc) if isinstance(doc, dict) else _rand_json(r)
    _bound_work(doc)
    raw = json.dumps(doc).encode()
    return _mutate_bytes(r, raw) if r.random() < 0.25 else raw


# -- HTTP ---------------------------------------------------------------------------------------


@dataclass
class Answer:
    status: int
    headers: dict[str, str]
    body: bytes
    keep_alive: bool


class Conn:
    """One keep-alive HTTP/1.1 connection of raw bytes."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader = reader
        self.writer = writer

    @classmethod
    async def open(cls, host: str, port: int) -> Conn:
        reader, writer = await asyncio.open_connection(host, port, limit=1 << 20)
        return cls(reader, writer)

    def reset(self) -> None:
        """Close with a TCP reset (SO_LINGER 0)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            with contextlib.suppress(OSError):
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()

    def close(self) -> None:
        self.writer.close()

    async def read_head(self, hang_s: float) -> tuple[int, dict[str, str]] | None:
        """Status and headers, or None when the server closed without a (whole) answer."""
        try:
            head = await asyncio.wait_for(self.reader.readuntil(b"\r\n\r\n"), hang_s)
        except TimeoutError:
            raise Hang("no answer") from None
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError):
            return None
        lines = head.decode("latin-1").split("\r\n")
        parts = lines[0].split(" ", 2)
        if len(parts) < 2 or not parts[1].isdigit():
            return -1, {"status-line": lines[0][:80]}
        headers: dict[str, str] = {}
        for line in lines[1:]:
            k, _, v = line.partition(":")
            if k:
                headers[k.strip().lower()] = v.strip()
        return int(parts[1]), headers

    async def read_body(
        self, headers: dict[str, str], hang_s: float, limit: int = 1 << 24
    ) -> bytes:
        deadline = time.monotonic() + hang_s

        async def within(aw: Any) -> Any:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang("the body did not end")
            try:
                return await asyncio.wait_for(aw, left)
            except TimeoutError:
                raise Hang("the body did not end") from None

        if "content-length" in headers:
            return bytes(await within(self.reader.readexactly(int(headers["content-length"]))))
        if headers.get("transfer-encoding", "").lower() == "chunked":
            out = bytearray()
            while True:
                size_line = await within(self.reader.readuntil(b"\r\n"))
                size = int(size_line.split(b";")[0].strip(), 16)
                chunk = await within(self.reader.readexactly(size + 2))
                if size == 0:
                    return bytes(out)
                if len(out) < limit:
                    out += chunk[:-2]
        return bytes(await within(self.reader.read(limit)))


def _request(method: str, path: str, headers: Sequence[tuple[str, str]], body: bytes) -> bytes:
    head = f"{method} {path} HTTP/1.1\r\nhost: fuzz\r\n"
    head += "".join(f"{k}: {v}\r\n" for k, v in headers)
    return head.encode("utf-8", "surrogateescape") + b"\r\n" + body


def _check_error_body(tally: Tally, family: str, ans: Answer) -> None:
    try:
        doc = json.loads(ans.body)
        err = doc["error"]
        if doc.get("type") == "error":  # the Messages API's shape
            kind, message = err["type"], err["message"]
            if kind not in MESSAGES_ERROR_TYPES or not isinstance(message, str) or not message:
                tally.fail("undocumented_code", f"{family} {ans.status}: {ans.body[:200]!r}")
            else:
                tally.answer(family, f"{ans.status} {kind}")
            return
        code, message = err["code"], err["message"]
    except (ValueError, KeyError, TypeError):
        if ans.headers.get("content-type", "").startswith("application/json"):
            tally.fail("bad_error_body", f"{family} {ans.status}: {ans.body[:200]!r}")
        else:
            tally.answer(family, f"{ans.status} plain")  # the HTTP layer's own 400
        return
    if code not in DOCUMENTED_CODES or not isinstance(message, str) or not message:
        tally.fail("undocumented_code", f"{family} {ans.status}: {ans.body[:200]!r}")
        return
    tally.answer(family, f"{ans.status} {code}")


def _judge_status(tally: Tally, family: str, ans: Answer, detail: str) -> None:
    if ans.status == 500 and b"(injected by loopbench.fail)" in ans.body:
        # A non-streamed chat or messages create asked to fail: its only shape is a 500.
        tally.answer(family, "500 (loopbench.fail hint)")
    elif ans.status >= 500 or ans.status < 100:
        tally.fail(f"5xx {ans.status}", f"{family}: {detail}: {ans.body[:200]!r}")
    elif ans.status >= 400:
        _check_error_body(tally, family, ans)
    else:
        tally.answer(family, str(ans.status))


async def _exchange(
    conn: Conn, data: bytes, hang_s: float, r: random.Random, *, read_all: bool
) -> Answer | None:
    """Send one request and read its answer; None if the server closed without one."""
    conn.writer.write(data)
    with contextlib.suppress(ConnectionError):
        await conn.writer.drain()
    got = await conn.read_head(hang_s)
    if got is None:
        return None
    status, headers = got
    streamed = headers.get("content-type", "").startswith("text/event-stream")
    if status == 200 and streamed and not read_all:
        # Abandon the stream: the server must cancel its generation (FIN or reset).
        await asyncio.wait_for(conn.reader.read(256), hang_s)
        return Answer(status, headers, b"", keep_alive=False)
    try:
        body = await conn.read_body(headers, hang_s)
    except (asyncio.IncompleteReadError, ConnectionError, ValueError):
        return Answer(status, headers, b"", keep_alive=False)
    keep = headers.get("connection", "").lower() != "close"
    if (
        streamed
        and status == 200
        and not any(
            t in body
            for t in (
                b"response.completed",
                b"response.incomplete",
                b"response.failed",
                b'"type":"error"',
                b"data: [DONE]",  # chat completions
                b'data: {"error":',
                b'"type":"message_stop"',  # messages
            )
        )
    ):
        raise TruncatedStream(f"the stream ended with {body[-200:]!r}")
    return Answer(status, headers, body, keep)


async def http_body_case(
    host: str, port: int, conn: Conn | None, r: random.Random, tally: Tally, hang_s: float
) -> Conn | None:
    route = r.choices([p for p, _ in BODY_ROUTES], [w for _, w in BODY_ROUTES])[0]
    body = fuzz_body(r, route)
    chunked = r.random() < 0.15
    headers = [("content-type", "application/json")]
    if chunked:
        headers.append(("transfer-encoding", "chunked"))
        payload = (
            b"".join(
                b"%x\r\n%s\r\n" % (len(body[i : i + 8192]), body[i : i + 8192])
                for i in range(0, len(body), 8192)
            )
            + b"0\r\n\r\n"
        )
    else:
        headers.append(("content-length", str(len(body))))
        payload = body
    if conn is None:
        conn = await Conn.open(host, port)
    ans = await _exchange(
        conn,
        _request("POST", route, headers, payload),
        hang_s,
        r,
        read_all=r.random() < 0.5,
    )
    if ans is None:
        tally.fail("closed_without_answer", f"http_body {route}: {body[:120]!r}")
        conn.close()
        return None
    _judge_status(tally, "http_body", ans, f"{route} {body[:120]!r}")
    if not ans.keep_alive or ans.status == 413:
        if ans.status == 200 and r.random() < 0.5:
            conn.reset()
        else:
            conn.close()
        return None
    return conn


def _header_case(r: random.Random) -> tuple[bytes, str, bool]:
    """Raw request bytes, what they break, and whether the HTTP layer may just close."""
    body = json.dumps(_base_body(r) | {"stream": False}).encode()
    cl = ("content-length", str(len(body)))
    ct = ("content-type", "application/json")
    k = r.randrange(16)
    if k == 0:
        return _request("POST", "/v1/responses", [cl], body), "no content type", False
    if k == 1:
        ctype = r.choice(
            ("text/plain", "application/xml", "", "application/json; charset=latin-1", "\x01")
        )
        return (
            _request("POST", "/v1/responses", [("content-type", ctype), cl], body),
            "content type",
            False,
        )
    if k == 2:
        n = len(body) - r.randint(1, min(20, len(body)))
        return (
            _request("POST", "/v1/responses", [ct, ("content-length", str(n))], body[:n]),
            "short content-length",
            False,
        )
    if k == 3:
        v = r.choice(("-1", "abc", "1e3", " 12", "99999999999999999999", "0x10", ""))
        return (
            _request("POST", "/v1/responses", [ct, ("content-length", v)], body),
            "bad content-length",
            True,
        )
    if k == 4:
        bad = r.choice(
            (b"zz\r\n", b"-1\r\n", b"ffffffffffffffffff\r\n", b"3\r\nabcdef\r\n", b"\r\n")
        )
        return (
            _request(
                "POST", "/v1/responses", [ct, ("transfer-encoding", "chunked")], bad + b"0\r\n\r\n"
            ),
            "bad chunk",
            True,
        )
    if k == 5:
        return (
            _request("POST", "/v1/responses", [ct, cl, ("transfer-encoding", "chunked")], body),
            "content-length and chunked",
            True,
        )
    if k == 6:
        return (
            _request("POST", "/v1/responses", [ct, cl, cl], body),
            "duplicate content-length",
            True,
        )
    if k == 7:
        name = r.choice(("bad header", "x\x00y", "é", "", "x:y"))
        return (
            _request("POST", "/v1/responses", [ct, cl, (name, "1")], body),
            "invalid header name",
            True,
        )
    if k == 8:
        big = "a" * r.choice((8000, 70000))
        return (
            _request("POST", "/v1/responses", [ct, cl, ("x-big", big)], body),
            "huge header",
            True,
        )
    if k == 9:
        many = [(f"x-h{i}", "v") for i in range(r.choice((100, 500)))]
        return _request("POST", "/v1/responses", [ct, cl, *many], body), "many headers", True
    if k == 10:
        method = r.choice(("GET", "PUT", "DELETE", "PATCH", "OPTIONS", "BREW", "get", "POST\x00"))
        return _request(method, "/v1/responses", [ct, cl], body), "method", True
    if k == 11:
        path = r.choice(
            (
                "/",
                "/v1",
                "/v1/responses/",
                "/../etc/passwd",
                "/v1/" + "a" * 9000,
                "/v1/responses?x=%ff",
                "/v1/responses/resp_x",
                "/v1/models",
                "/health",
                "*",
                "/%00",
            )
        )
        return _request("POST", path, [ct, cl], body), "path", True
    if k == 12:
        version = r.choice(("HTTP/1.0", "HTTP/9.9", "HTTP/1", "FOO"))
        return (
            f"POST /v1/responses {version}\r\nhost: x\r\ncontent-type: application/json\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body,
            "version",
            True,
        )
    if k == 13:
        auth = r.choice(("Bearer", "Bearer " + "x" * 5000, "Basic Zm9vOmJhcg==", "\x7f"))
        return (
            _request("POST", "/v1/responses", [ct, cl, ("authorization", auth)], body),
            "authorization",
            True,
        )
    if k == 14:
        return (
            _request("POST", "/v1/responses", [ct, cl, ("expect", "100-continue")], body),
            "expect",
            True,
        )
    return (
        _request(
            "GET",
            "/v1/responses",
            [
                ("connection", "upgrade"),
                ("upgrade", r.choice(("websocket", "h2c", "x"))),
                ("sec-websocket-version", r.choice(("13", "8", ""))),
                ("sec-websocket-key", r.choice(("", "short", "dGhlIHNhbXBsZSBub25jZQ=="))),
            ],
            b"",
        ),
        "bad upgrade",
        True,
    )


async def http_header_case(
    host: str, port: int, r: random.Random, tally: Tally, hang_s: float
) -> None:
    data, what, may_close = _header_case(r)
    conn = await Conn.open(host, port)
    try:
        conn.writer.write(data)
        await conn.writer.drain()
        half_closed = what == "short content-length" or r.random() < 0.3
        if half_closed:
            # The rest never comes: a half-close says so, and the server must not wait forever.
            # uvicorn treats the EOF as the client leaving (documented): closing is an answer.
            with contextlib.suppress(OSError):
                conn.writer.write_eof()
        got = await conn.read_head(hang_s)
        if got is None:
            if may_close or half_closed:
                tally.answer("http_header", f"closed ({what})")
            else:
                tally.fail("closed_without_answer", f"http_header {what}")
            return
        status, headers = got
        body = b""
        if status != 101 and status != -1:
            with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError, ValueError):
                body = await conn.read_body(headers, hang_s)
        if status == 101:
            tally.answer("http_header", "101")
            return
        _judge_status(tally, "http_header", Answer(status, headers, body, False), what)
    finally:
        conn.reset() if r.random() < 0.5 else conn.close()


# -- WebSocket -----------------------------------------------------------------------------------


def _ws_action(r: random.Random) -> tuple[bytes, str]:
    k = r.randrange(18)
    if k < 4:
        doc = {"type": "response.create", **_base_body(r)}
        doc.pop("stream", None)
        return wsf.encode_frame(1, json.dumps(doc).encode()), "valid create"
    if k < 8:
        doc = {"type": "response.create", **_base_body(r)}
        doc.pop("stream", None)
        for _ in range(r.randint(1, 3)):
            doc = _mutate_doc(r, doc) if isinstance(doc, dict) else _rand_json(r)
        _bound_work(doc)
        return wsf.encode_frame(1, json.dumps(doc).encode()), "mutated create"
    if k == 8:
        doc = {
            "type": r.choice(("response.append", "response.steer", "bogus", "", None)),
            "response_id": r.choice(("resp_x", "", 5)),
            "input": _rand_json(r),
        }
        return wsf.encode_frame(1, json.dumps(doc).encode()), "append/steer"
    if k == 9:
        return wsf.encode_frame(
            1, r.choice((b"not json", b"", b"[1,2]", b"null", CANARY.encode()))
        ), "not json"
    if k == 10:
        return wsf.encode_frame(2, os.urandom(r.randrange(64))), "binary"
    if k == 11:
        return wsf.encode_frame(
            1, b'{"type":"response.create","model":"\xff\xfe"}'
        ), "invalid utf-8"
    if k == 12:
        msg = json.dumps({"type": "response.create", **_base_body(r)}).encode()
        half = len(msg) // 2
        return wsf.encode_frame(1, msg[:half], fin=False) + wsf.encode_frame(
            0, msg[half:]
        ), "fragmented"
    if k == 13:
        return wsf.encode_frame(0, b"stray"), "stray continuation"
    if k == 14:
        return r.choice(
            (
                wsf.encode_frame(3, b"x"),
                wsf.encode_frame(0xB, b"x"),
                wsf.encode_frame(1, b"{}", rsv=r.randint(1, 7)),
                wsf.encode_frame(1, b"{}", masked=False),
            )
        ), "bad opcode/bits/mask"
    if k == 15:
        return r.choice(
            (wsf.encode_frame(9, b"p" * 200), wsf.encode_frame(9, b"p", fin=False))
        ), "bad control frame"
    if k == 16:
        return wsf.encode_frame(
            1,
            b'{"type":"response.create","x":"'
            + b"y" * (MAX_BODY + r.choice((1, 2 * 1024 * 1024)))
            + b'"}',
        ), "over limit"
    if r.random() < 0.5:
        return wsf.encode_frame(1, b"{", length=2**40), "lying length"
    # The rest of the frame never comes: the server rightly waits for it (the client ends it).
    return wsf.encode_frame(1, b"{", length=70000), "unfinished frame"


async def ws_handshake(host: str, port: int, hang_s: float) -> Conn:
    conn = await Conn.open(host, port)
    key = base64.b64encode(os.urandom(16)).decode()
    conn.writer.write(
        f"GET /v1/responses HTTP/1.1\r\nhost: {host}:{port}\r\nupgrade: websocket\r\n"
        f"connection: Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n\r\n".encode()
    )
    got = await conn.read_head(hang_s)
    if got is None or got[0] != 101:
        conn.close()
        status = got[0] if got else None
        if status is not None and (status >= 500 or status < 100):
            raise Finding(f"the WebSocket upgrade was answered with {status}", f"5xx {status}")
        raise ConnectionError(f"WebSocket upgrade answered with {status or 'nothing'}")
    return conn


class _ServerFrames:
    """The server's frames on one connection, read by the project's codec.

    A frame the codec refuses is a finding: the server broke the framing rules.
    """

    def __init__(self, conn: Conn, tally: Tally, names: str) -> None:
        self.conn = conn
        self.tally = tally
        self.names = names
        self.reader = wsf.FrameReader(1 << 30)
        self.frames: list[tuple[int, bytes]] = []
        self.broken = False

    async def next(self, timeout: float) -> tuple[int, bytes] | None:
        """The next frame ``(opcode, payload)``; None at EOF or after a broken frame."""
        while not self.frames:
            if self.broken:
                return None
            try:
                data = await asyncio.wait_for(self.conn.reader.read(65536), timeout)
            except ConnectionError:
                return None
            if not data:
                return None
            try:
                self.frames = self.reader.feed(data)
            except wsf.FrameError as exc:
                self.tally.fail("ws_bad_frame", f"ws {self.names}: the server sent {exc.reason}")
                self.frames, self.broken = exc.before, True
        return self.frames.pop(0)


def _judge_ws_message(tally: Tally, payload: bytes, actions: str) -> bool:
    """Check one text message; True when it ends a response."""
    try:
        doc = json.loads(payload)
        kind = doc["type"]
    except (ValueError, KeyError, TypeError):
        tally.fail("ws_bad_event", f"{actions}: {payload[:200]!r}")
        return False
    if kind == "error":
        err = doc.get("error") or {}
        status = doc.get("status", 400)
        code = err.get("code")
        if "sequence_number" in doc and code == "server_error":
            tally.answer("ws", "error server_error (loopbench.fail hint)")
        elif isinstance(status, int) and status >= 500:
            tally.fail(f"5xx {status}", f"ws {actions}: {payload[:200]!r}")
        elif code not in DOCUMENTED_CODES or not err.get("message"):
            tally.fail("undocumented_code", f"ws {actions}: {payload[:200]!r}")
        else:
            tally.answer("ws", f"error {code}")
        return True
    if not isinstance(kind, str) or not kind.startswith("response."):
        tally.fail("ws_bad_event", f"{actions}: {payload[:200]!r}")
        return False
    if kind in ("response.completed", "response.failed", "response.incomplete"):
        tally.answer("ws", kind)
        return True
    return False


async def _ws_until_answered(
    frames: _ServerFrames, tally: Tally, names: str, valid: int, hang_s: float
) -> bool:
    """Read until ``valid`` responses ended; True if the server closed first."""
    ended = 0
    deadline = time.monotonic() + hang_s
    while ended < valid:
        left = deadline - time.monotonic()
        if left <= 0:
            raise Hang(f"ws {names}: {valid - ended} of the valid creates never ended")
        frame = await frames.next(left)
        if frame is None or frame[0] == wsf.OP_CLOSE:
            if frame is not None:
                _judge_ws_close(tally, frame[1], names, "before the client's close")
            return True
        if frame[0] == wsf.OP_TEXT and _judge_ws_message(tally, frame[1], names):
            ended += 1
    return False


def _judge_ws_close(tally: Tally, payload: bytes, names: str, ending: str) -> None:
    code = wsf.close_code(payload)
    if code not in ALLOWED_CLOSE_CODES:
        tally.fail(f"ws_close_{code}", f"ws {names} ({ending}): closed with {code}")
    else:
        tally.answer("ws", f"close {code}")


async def ws_case(host: str, port: int, r: random.Random, tally: Tally, hang_s: float) -> None:
    conn = await ws_handshake(host, port, hang_s)
    actions = [_ws_action(r) for _ in range(r.randint(1, 4))]
    names = ", ".join(a[1] for a in actions)
    ending = r.choice(("close", "close", "reset", "half-close", "bad close"))
    if "unfinished frame" in names:
        ending = "reset"
    valid = sum(1 for _, what in actions if what == "valid create")
    frames = _ServerFrames(conn, tally, names)
    closed_by_server = False
    try:
        for data, _ in actions:
            conn.writer.write(data)
            with contextlib.suppress(ConnectionError):
                await conn.writer.drain()
        # Sometimes wait for the valid creates' answers first: each must end, within the time.
        wait = valid and ending == "close" and r.random() < 0.7
        if wait and await _ws_until_answered(frames, tally, names, valid, hang_s):
            closed_by_server = True
            return
        if ending == "reset":
            await asyncio.sleep(0)
            conn.reset()
            tally.answer("ws", "reset by the client")
            return
        if ending == "half-close":
            with contextlib.suppress(OSError):
                conn.writer.write_eof()
        else:
            valid_code = ending == "close"
            payload = (
                wsf.close_payload(1000)
                if valid_code
                else r.choice(
                    (
                        wsf.close_payload(999),
                        wsf.close_payload(1005),
                        wsf.close_payload(5000),
                        wsf.close_payload(1000, b"\xff"),
                        b"\x03",
                    )
                )
            )
            conn.writer.write(wsf.encode_frame(8, payload))
        deadline = time.monotonic() + hang_s
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise Hang(f"ws {names}: the server neither closed nor stopped sending")
            frame = await frames.next(left)
            if frame is None:
                closed_by_server = True
                tally.answer("ws", "eof")
                return
            opcode, payload = frame
            if opcode == wsf.OP_TEXT:
                _judge_ws_message(tally, payload, names)
            elif opcode == wsf.OP_CLOSE:
                _judge_ws_close(tally, payload, names, ending)
                closed_by_server = True
                return
    except TimeoutError:
        raise Hang(f"ws {names}: no close") from None
    finally:
        if not closed_by_server:
            conn.reset()
        else:
            conn.close()


# -- broken sockets -------------------------------------------------------------------------------


async def socket_case(host: str, port: int, r: random.Random, tally: Tally, hang_s: float) -> None:
    body = json.dumps(_base_body(r) | {"stream": True}).encode()
    req = _request(
        "POST",
        "/v1/responses",
        [("content-type", "application/json"), ("content-length", str(len(body)))],
        body,
    )
    k = r.randrange(6)
    conn = await Conn.open(host, port)
    try:
        if k == 0:  # half a request, then a half-close: the server drops it (docs/reliability.md)
            conn.writer.write(req[: r.randrange(1, len(req))])
            conn.writer.write_eof()
            got = await conn.read_head(hang_s)
            tally.answer("socket", "half-open: closed" if got is None else f"half-open: {got[0]}")
            if got is not None and got[0] >= 500:
                tally.fail(f"5xx {got[0]}", "socket half-open")
        elif k == 1:  # the head, then a reset
            conn.writer.write(req[: req.index(b"\r\n\r\n") + 4])
            await conn.writer.drain()
            conn.reset()
            tally.answer("socket", "reset after head")
        elif k == 2:  # reset after the first bytes of a stream
            conn.writer.write(req)
            got = await conn.read_head(hang_s)
            if got is not None and got[0] >= 500:
                tally.fail(f"5xx {got[0]}", "socket mid-stream")
            conn.reset()
            tally.answer("socket", "reset mid-stream")
        elif k == 3:  # garbage
            conn.writer.write(os.urandom(r.randrange(1, 512)) + b"\r\n\r\n")
            conn.writer.write_eof()
            got = await conn.read_head(hang_s)
            if got is not None and got[0] >= 500:
                tally.fail(f"5xx {got[0]}", "socket garbage")
            tally.answer("socket", "garbage")
        elif k == 4:  # a WebSocket reset right after the 101 and a create
            conn.close()
            ws = await ws_handshake(host, port, hang_s)
            ws.writer.write(
                wsf.encode_frame(
                    1, json.dumps({"type": "response.create", **_base_body(r)}).encode()
                )
            )
            await ws.writer.drain()
            ws.reset()
            tally.answer("socket", "ws reset after create")
        else:  # a request written a few bytes at a time
            step = max(1, len(req) // 8)
            for i in range(0, len(req), step):
                conn.writer.write(req[i : i + step])
                await conn.writer.drain()
                await asyncio.sleep(0.001)
            ans = await _exchange(conn, b"", hang_s, r, read_all=True)
            if ans is None:
                tally.fail("closed_without_answer", "socket trickled request")
            else:
                _judge_status(tally, "socket", ans, "trickled request")
    finally:
        conn.reset()


# -- the run ----------------------------------------------------------------------------------


async def _worker(host: str, port: int, seed: int, n: int, tally: Tally, hang_s: float) -> None:
    r = random.Random(seed)
    families = [f for f, _ in FAMILIES]
    weights = [w for _, w in FAMILIES]
    conn: Conn | None = None
    for _ in range(n):
        family = r.choices(families, weights)[0]
        tally.cases[family] += 1
        try:
            if family == "http_body":
                conn = await http_body_case(host, port, conn, r, tally, hang_s)
                continue
            if family == "http_header":
                await http_header_case(host, port, r, tally, hang_s)
            elif family == "ws":
                await ws_case(host, port, r, tally, hang_s)
            else:
                await socket_case(host, port, r, tally, hang_s)
        except Finding as exc:
            tally.fail(exc.kind, f"{family}: {exc}")
            if conn is not None:
                conn.reset()
                conn = None
        except (ConnectionError, OSError, asyncio.IncompleteReadError) as exc:
            # A connection the server ended is an answer only where it was provoked.
            if family == "http_body":
                tally.fail("connection_lost", f"http_body: {type(exc).__name__}: {exc}")
                conn = None
            else:
                tally.answer(family, f"connection ended ({type(exc).__name__})")
        except TimeoutError:
            tally.fail("hang", f"{family}: no answer within {hang_s} s")
    if conn is not None:
        conn.close()


async def fuzz(
    host: str,
    port: int,
    cases: int,
    seed: int,
    concurrency: int,
    hang_s: float,
    progress: Callable[[Tally], None] | None = None,
) -> Tally:
    tally = Tally()
    per = [cases // concurrency + (i < cases % concurrency) for i in range(concurrency)]
    tasks = [
        asyncio.create_task(_worker(host, port, seed * 1000 + i, n, tally, hang_s))
        for i, n in enumerate(per)
    ]
    if progress is not None:

        async def report() -> None:
            while True:
                await asyncio.sleep(10)
                progress(tally)

        reporter = asyncio.create_task(report())
    await asyncio.gather(*tasks)
    if progress is not None:
        reporter.cancel()
    return tally


# -- the valid request afterwards, RSS, the command ----------------------------------------------


def valid_request_answered(host: str, port: int, timeout_s: float = 30.0) -> str | None:
    """None if a valid non-streamed create is answered in full, else what went wrong."""
    body = json.dumps(
        {"model": "sim-model", "input": "hi", "tool_choice": "none", "max_output_tokens": 16}
    ).encode()
    try:
        with socket.create_connection((host, port), timeout=timeout_s) as s:
            s.sendall(
                _request(
                    "POST",
                    "/v1/responses",
                    [
                        ("content-type", "application/json"),
                        ("content-length", str(len(body))),
                        ("connection", "close"),
                    ],
                    body,
                )
            )
            data = b""
            while chunk := s.recv(65536):
                data += chunk
    except OSError as exc:
        return f"a valid request after the fuzz failed: {exc}"
    if not data.startswith(b"HTTP/1.1 200") or b'"output_tokens":16' not in data:
        return f"a valid request after the fuzz was answered with {data[:200]!r}"
    return None


@contextmanager
def _own_server(extra: Sequence[str]) -> Iterator[tuple[str, int, Any]]:
    # A store on disk, as a server runs by default: an in-memory one would hold every
    # stored response of the run in the RSS that is checked.
    with (
        tempfile.TemporaryDirectory(prefix="loopbench-fuzz-") as tmp,
        server_child(
            ["--port", "0", "--store", str(Path(tmp) / "store.sqlite3"), *SERVER_ARGS, *extra],
            startup_timeout_s=60,
            keep_stderr=500,
        ) as child,
    ):
        u = urlsplit(child.ready)
        yield u.hostname or "127.0.0.1", int(u.port or 80), child


@dataclass
class FuzzResult:
    tally: Tally
    elapsed_s: float
    rss_before_kib: int | None
    rss_after_kib: int | None
    problems: list[str]

    def to_json(self) -> dict[str, Any]:
        t = self.tally
        return {
            "cases": t.total,
            "cases_by_family": dict(t.cases),
            "answers": dict(sorted(t.answers.items())),
            "failures": dict(t.failures),
            "failure_examples": t.examples,
            "server_5xx": t.server_errors,
            "hangs": t.hangs,
            "elapsed_s": round(self.elapsed_s, 1),
            "rss_before_mib": None
            if self.rss_before_kib is None
            else round(self.rss_before_kib / 1024, 1),
            "rss_after_mib": None
            if self.rss_after_kib is None
            else round(self.rss_after_kib / 1024, 1),
            "problems": self.problems,
            "ok": not self.problems,
        }


def run(
    *,
    cases: int,
    seed: int,
    concurrency: int = 16,
    hang_s: float = 10.0,
    target: str | None = None,
    pid: int | None = None,
    max_rss_growth_mib: float = 64.0,
    warmup: int = 500,
    quiet: bool = False,
) -> FuzzResult:
    """Fuzz ``target`` (or a server of its own), then judge: failures, the valid request, RSS, log."""

    def progress(t: Tally) -> None:
        if not quiet:
            print(
                f"  {t.total:>7,} cases, {sum(t.failures.values())} failures",
                file=sys.stderr,
                flush=True,
            )

    with contextlib.ExitStack() as stack:
        child = None
        if target is None:
            host, port, child = stack.enter_context(_own_server(()))
            pid = child.proc.pid
        else:
            u = urlsplit(target)
            host, port = u.hostname or "127.0.0.1", int(u.port or 80)
        t0 = time.monotonic()
        # A warm-up first, so the RSS compared is that of a warm process.
        warm = asyncio.run(fuzz(host, port, min(warmup, cases), seed + 7919, concurrency, hang_s))
        before = rss_kib(pid) if pid else None
        tally = asyncio.run(fuzz(host, port, cases, seed, concurrency, hang_s, progress))
        elapsed = time.monotonic() - t0
        for kind, n in warm.failures.items():
            tally.failures[f"warm-up {kind}"] += n
        tally.examples = warm.examples[:5] + tally.examples
        problems: list[str] = []
        if tally.failures:
            what = ", ".join(f"{k} x{n}" for k, n in tally.failures.most_common())
            problems.append(f"{sum(tally.failures.values())} cases failed: {what}")
        wrong = valid_request_answered(host, port)
        if wrong:
            problems.append(wrong)
        after = rss_kib(pid) if pid else None
        if child is not None:
            if child.proc.poll() is not None:
                problems.append(f"the server died (exit {child.proc.returncode})")
            log = "".join(child.stderr)
            if CANARY in log:
                problems.append("request content reached the server's log")
            if "Traceback" in log:
                problems.append(
                    "the server logged a traceback: " + log[log.index("Traceback") :][:3000]
                )
        if (
            before is not None
            and after is not None
            and (after - before) / 1024 > max_rss_growth_mib
        ):
            problems.append(
                f"the server's RSS grew {(after - before) / 1024:.1f} MiB (limit {max_rss_growth_mib:g} MiB)"
            )
    return FuzzResult(tally, elapsed, before, after, problems)


def summary_text(res: FuzzResult) -> str:
    doc = res.to_json()
    fam = ", ".join(f"{k} {v:,}" for k, v in sorted(doc["cases_by_family"].items()))
    lines = [
        f"fuzz: {doc['cases']:,} cases in {doc['elapsed_s']} s ({fam})",
        f"  server 5xx: {doc['server_5xx']}, hangs: {doc['hangs']}, "
        f"failures: {sum(doc['failures'].values())}",
        f"  server RSS: {doc['rss_before_mib']} MiB after warm-up, {doc['rss_after_mib']} MiB after",
        "  answers: " + ", ".join(f"{k} {v}" for k, v in Counter(doc["answers"]).most_common(12)),
    ]
    lines += [f"  example: {e}" for e in doc["failure_examples"][:8]]
    lines.append("fuzz: ok" if doc["ok"] else "fuzz: FAILED: " + "; ".join(doc["problems"]))
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> None:
    parser = UsageParser(
        prog="python -m tools.fuzz",
        description="Fuzz a reference server with HTTP bodies and headers, WebSocket frame "
        "sequences and broken sockets; check every answer against docs/server.md.",
    )
    parser.add_argument(
        "--cases", type=at_least(1), default=10_000, help="cases after the warm-up (default 10000)"
    )
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--concurrency", type=at_least(1), default=16, help="connections at once (default 16)"
    )
    parser.add_argument(
        "--hang-s",
        type=float,
        default=10.0,
        help="an answer later than this is a hang (default 10)",
    )
    parser.add_argument(
        "--target", help="fuzz this running server (http://HOST:PORT) instead of one of its own"
    )
    parser.add_argument(
        "--pid", type=int, help="with --target: the server's process id, for its RSS"
    )
    parser.add_argument("--max-rss-growth-mib", type=float, default=64.0)
    parser.add_argument("--json", help="also write the counts as JSON to this file")
    parser.add_argument("-q", "--quiet", action="store_true")
    args = parser.parse_args(argv)
    # "not > 0" also refuses nan
    if not args.hang_s > 0:
        parser.error(f"--hang-s: expected a positive number of seconds, got {args.hang_s}")
    res = run(
        cases=args.cases,
        seed=args.seed,
        concurrency=args.concurrency,
        hang_s=args.hang_s,
        target=args.target,
        pid=args.pid,
        max_rss_growth_mib=args.max_rss_growth_mib,
        quiet=args.quiet,
    )
    print(summary_text(res))
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(res.to_json(), indent=2) + "\n")
    sys.exit(0 if not res.problems else 1)


if __name__ == "__main__":
    main()
