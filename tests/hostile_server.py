"""A hostile Responses endpoint for the client fuzz tests: every answer breaks the protocol.

One asyncio TCP server on 127.0.0.1 port 0 in a background thread, started as a context
manager (``with hostile_server("invalid_json") as url:``), yielding the base URL
(``http://127.0.0.1:PORT/v1``) to pass as ``--target``.  Each mode is one way a server can
hurt a client: malformed SSE, events that are not JSON, out-of-order events, oversized
lines and frames, slowloris streams, resets, bad HTTP, bad WebSocket frames and close
codes.  Every connection gets the mode's answer and nothing else; the server stops (and
its connections are reset) when the block ends.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import socket
import struct
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from harness.wire.ws_frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_TEXT,
    FrameReader,
    close_payload,
    encode_frame,
)
from tests.foreign_http import read_request, serve_in_thread
from tests.foreign_servers import canned_events

#: bytes of the oversized SSE line and WebSocket frame (over the client's limits)
OVERSIZED = 80 * 1024 * 1024
#: gap of the slowloris stream: shorter than the client's timeout, so only a per-event
#: timeout (not a per-byte one) ends it
DRIP_S = 0.2

Writer = asyncio.StreamWriter


def sse(*events: dict[str, Any]) -> bytes:
    return b"".join(
        b"event: %s\ndata: %s\n\n" % (str(e.get("type")).encode(), json.dumps(e).encode())
        for e in events
    )


def _head(content_type: str = "text/event-stream", extra: bytes = b"") -> bytes:
    return (
        b"HTTP/1.1 200 OK\r\ncontent-type: "
        + content_type.encode()
        + b"\r\n"
        + extra
        + b"connection: close\r\n\r\n"
    )


def _events(n: int = 0) -> list[dict[str, Any]]:
    return canned_events(f"resp_hostile{n}")


def _reset(writer: Writer) -> None:
    sock = writer.get_extra_info("socket")
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def _drip(writer: Writer, data: bytes, stop: asyncio.Event) -> None:
    for i in range(len(data)):
        if stop.is_set():
            return
        writer.write(data[i : i + 1])
        await writer.drain()
        await asyncio.sleep(DRIP_S)


# -- HTTP modes: (the bytes after the request, or a coroutine that writes them) --------------

E = _events()
HTTP_MODES: dict[str, bytes] = {
    # lines that are no SSE field, then the end: no event ever arrives
    "malformed_sse": _head() + b"this is not server-sent events\r\n\x00\xff\xfe\n{json: no}\n",
    "invalid_json": _head() + b'event: response.created\ndata: {"type": "response.cre\n\n',
    "not_an_object": _head() + b"data: [1, 2, 3]\n\n",
    "delta_before_created": _head() + sse(E[4], *E),
    "completed_twice": _head() + sse(*E, E[-1]),
    "events_after_completed": _head() + sse(*E, E[4]),
    "unknown_event_only": _head() + sse({"type": "response.bogus", "sequence_number": 0}),
    "terminal_without_created": _head() + sse(E[-1]),
    "bad_chunk_size": _head(extra=b"transfer-encoding: chunked\r\n") + b"zz\r\nxx\r\n0\r\n\r\n",
    "not_http": b"\x00\xffSSH-2.0-OpenSSH_9.0\r\n\r\n",
    "huge_head": b"HTTP/1.1 200 OK\r\nx-big: " + b"a" * (128 * 1024) + b"\r\n\r\n",
    "truncated_after_created": _head() + sse(E[0], E[1]),
    "error_body_not_json": (
        b"HTTP/1.1 400 Bad Request\r\ncontent-type: application/json\r\ncontent-length: 9\r\n"
        b'connection: close\r\n\r\n{"error":'
    ),
}
#: modes written by a coroutine: (writer, stop) -> None
HttpAct = Callable[[Writer, asyncio.Event], Awaitable[None]]


async def _flood(w: Writer, stop: asyncio.Event) -> None:
    """OVERSIZED bytes in 1 MiB writes (what the head before it promised), then silence."""
    block = b"x" * (1 << 20)
    for _ in range(OVERSIZED // len(block)):
        if stop.is_set() or w.is_closing():
            return
        w.write(block)
        await w.drain()
    await stop.wait()


async def _oversized_line(w: Writer, stop: asyncio.Event) -> None:
    w.write(_head() + b"data: ")
    await _flood(w, stop)


async def _slowloris(w: Writer, stop: asyncio.Event) -> None:
    w.write(_head() + sse(E[0]))
    await w.drain()
    # a byte at a time of an event that never ends: the connection is never idle
    await _drip(w, b"data: " + b"y" * 10_000, stop)


async def _reset_mid_stream(w: Writer, stop: asyncio.Event) -> None:
    w.write(_head() + sse(*E[:5]))
    await w.drain()
    await asyncio.sleep(0.05)
    _reset(w)


async def _silent_after_head(w: Writer, stop: asyncio.Event) -> None:
    w.write(_head())
    await w.drain()
    await stop.wait()


HTTP_ACTS: dict[str, HttpAct] = {
    "oversized_line": _oversized_line,
    "slowloris": _slowloris,
    "reset_mid_stream": _reset_mid_stream,
    "silent_after_head": _silent_after_head,
}


# -- WebSocket modes ---------------------------------------------------------------------------


def frame(opcode: int, payload: bytes, *, fin: bool = True, rsv: int = 0) -> bytes:
    """A server frame (no mask), by the project's codec."""
    return encode_frame(opcode, payload, masked=False, fin=fin, rsv=rsv)


def text(doc: dict[str, Any] | str) -> bytes:
    return frame(1, (doc if isinstance(doc, str) else json.dumps(doc)).encode())


def close(code: int, reason: bytes = b"") -> bytes:
    return frame(OP_CLOSE, close_payload(code, reason))


WS_MODES: dict[str, bytes] = {
    "ws_invalid_json": text('{"type": "response.cre'),
    "ws_not_an_object": text("[1, 2]"),
    "ws_binary": frame(2, b"\x00\x01binary"),
    "ws_delta_before_created": b"".join(text(e) for e in (E[4], *E)),
    "ws_completed_twice": b"".join(text(e) for e in (*E, E[-1])),
    "ws_events_after_completed": b"".join(text(e) for e in (*E, E[4])),
    "ws_close_1011": text(E[0]) + close(1011, b"internal error"),
    "ws_close_invalid_code": text(E[0]) + close(999),
    "ws_close_reason_not_utf8": close(1000, b"\xff\xfe"),
    "ws_reserved_opcode": frame(3, b"x"),
    "ws_rsv_bits": frame(1, b"{}", rsv=4),
    "ws_stray_continuation": frame(0, b"x"),
    "ws_fragmented_control": frame(9, b"p", fin=False),
    "ws_invalid_utf8_text": frame(1, b'{"type": "\xff"}'),
}


async def _ws_oversized(w: Writer, stop: asyncio.Event) -> None:
    w.write(encode_frame(OP_TEXT, b"", masked=False, length=OVERSIZED))
    await _flood(w, stop)


async def _ws_slowloris(w: Writer, stop: asyncio.Event) -> None:
    w.write(text(E[0]))
    # a frame that says 10,000 bytes follow, then a byte at a time
    w.write(encode_frame(OP_TEXT, b"", masked=False, length=10_000))
    await w.drain()
    await _drip(w, b"z" * 10_000, stop)


async def _ws_reset(w: Writer, stop: asyncio.Event) -> None:
    w.write(b"".join(text(e) for e in E[:5]))
    await w.drain()
    await asyncio.sleep(0.05)
    _reset(w)


WS_ACTS: dict[str, HttpAct] = {
    "ws_oversized_frame": _ws_oversized,
    "ws_slowloris": _ws_slowloris,
    "ws_reset_mid_stream": _ws_reset,
}

MODES = (*HTTP_MODES, *HTTP_ACTS, *WS_MODES, *WS_ACTS)
_GUID = b"258EAFA5-E914-47DA-95CA-C5AB0DC85B11"


class _Hostile:
    def __init__(self, mode: str) -> None:
        if mode not in MODES:
            raise ValueError(f"hostile server mode {mode!r}: expected one of {', '.join(MODES)}")
        self.mode = mode
        self.stop = asyncio.Event()
        self.writers: set[Writer] = set()
        self.tasks: set[asyncio.Task[Any]] = set()
        self.requests = 0

    async def handle(self, reader: asyncio.StreamReader, writer: Writer) -> None:
        task = asyncio.current_task()
        if task is not None:
            self.tasks.add(task)
        self.writers.add(writer)
        try:
            _, headers, _ = await asyncio.wait_for(read_request(reader), 30)
            self.requests += 1
            if headers.get("upgrade", "").lower() == "websocket":
                await self.websocket(reader, writer, headers)
            elif self.mode.startswith("ws_"):
                # An HTTP request to a WebSocket mode (none is expected: --no-probe)
                writer.write(HTTP_MODES["not_http"])
            elif self.mode in HTTP_ACTS:
                await HTTP_ACTS[self.mode](writer, self.stop)
            else:
                writer.write(HTTP_MODES[self.mode])
                await writer.drain()
                # closing would end the answer in a way the client may accept; hold it until
                # the client gives up (its timeout) or the test ends
                await asyncio.wait_for(self.stop.wait(), 30)
        except (OSError, asyncio.IncompleteReadError, TimeoutError, asyncio.LimitOverrunError):
            pass
        except asyncio.CancelledError:
            pass
        finally:
            self.writers.discard(writer)
            writer.close()
            if task is not None:
                self.tasks.discard(task)

    async def websocket(
        self, reader: asyncio.StreamReader, writer: Writer, headers: dict[str, str]
    ) -> None:
        key = headers.get("sec-websocket-key", "").encode()
        accept = base64.b64encode(hashlib.sha1(key + _GUID).digest()).decode()
        writer.write(
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            + f"sec-websocket-accept: {accept}\r\n\r\n".encode()
        )
        # Every message (a response.create) gets the mode's answer; a close frame gets a
        # close back and the end of the connection, as the close handshake asks.
        frames = FrameReader(1 << 26, masked=True)
        while not self.stop.is_set():
            data = await asyncio.wait_for(reader.read(65536), 30)
            if not data:
                return
            for opcode, _ in frames.feed(data):
                if opcode == OP_CLOSE:
                    writer.write(close(1000))
                    await writer.drain()
                    return
                if opcode not in (OP_TEXT, OP_BINARY):
                    continue
                if self.mode in WS_ACTS:
                    await WS_ACTS[self.mode](writer, self.stop)
                    return
                writer.write(WS_MODES[self.mode])
                await writer.drain()


@contextlib.contextmanager
def hostile_server(mode: str) -> Iterator[str]:
    """The base URL of a server answering in ``mode`` while the block runs."""
    server = _Hostile(mode)

    async def end_connections() -> None:
        for w in list(server.writers):
            _reset(w)
        for t in list(server.tasks):
            t.cancel()
        await asyncio.gather(*server.tasks, return_exceptions=True)

    with serve_in_thread(
        server.handle, "hostile server", limit=1 << 20, stop=server.stop, on_stop=end_connections
    ) as port:
        yield f"http://127.0.0.1:{port}/v1"
