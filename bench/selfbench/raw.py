"""The throughput ceiling: bare readers that count the bare server's events, nothing else.

Both readers are plain asyncio protocols on the same event loop the pipeline
runs on (uvloop), against the same server (:mod:`.lib_server` or
:mod:`.raw_server`), and they parse no more than it takes to count: ``\\n\\n`` boundaries of the SSE body (and the
last chunk, to know the body ended), the WebSocket stream's frames through the project's
one codec (:mod:`harness.wire.ws_frames`, what the pipeline reads them with too).  No
JSON, no timestamps, no records.  What they reach
is the most one client process moves through this server's streams, so the full
pipeline against the same server (:mod:`.pipeline`) is at most that fast: the
ratio of the two is the share of the ceiling the client's real work leaves.
"""

from __future__ import annotations

import asyncio
import base64
import os
import time
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from bench.selfbench.procs import SelfbenchError
from harness.wire.ws_frames import (
    OP_CLOSE,
    OP_TEXT,
    FrameError,
    FrameReader,
    close_payload,
    encode_frame,
)

#: the end of a chunked body: CRLF of the last data chunk, the zero-size chunk, no trailers
_BODY_END = b"\r\n0\r\n\r\n"
_REQUEST = b'{"type":"response.create"}'
#: the client's frames, masked with a zero key (built once: the bench measures reading)
_CLOSE_1000 = encode_frame(OP_CLOSE, close_payload(1000), key=bytes(4))
_WS_REQUEST = encode_frame(OP_TEXT, _REQUEST, key=bytes(4))


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` events in ``seconds`` over ``streams`` streams; ``cpu_s``: the client's CPU time,
    ``server_cpu_s``: the server process's over the same span (``None`` where not measured)."""

    count: int
    seconds: float
    streams: int
    cpu_s: float = 0.0
    server_cpu_s: float | None = None

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0

    @property
    def cpu_us_per_event(self) -> float:
        return self.cpu_s * 1e6 / self.count if self.count else 0.0

    @property
    def server_cpu_us_per_event(self) -> float | None:
        if self.server_cpu_s is None or not self.count:
            return None
        return self.server_cpu_s * 1e6 / self.count


class _Reader(asyncio.Protocol):
    def __init__(self, done: asyncio.Future[int]) -> None:
        self.done = done
        self.events = 0
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def finish(self) -> None:
        if not self.done.done():
            self.done.set_result(self.events)
        assert self.transport is not None
        self.transport.close()

    def fail(self, why: str) -> None:
        if not self.done.done():
            self.done.set_exception(SelfbenchError(f"bare reader: {why}"))
        if self.transport is not None:
            self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        self.fail(f"the server closed the connection after {self.events} event(s)")


class SseReader(_Reader):
    """POST once; count the events (blank lines) of the chunked body until its last chunk."""

    def __init__(self, done: asyncio.Future[int], host: str) -> None:
        super().__init__(done)
        self.request = (
            f"POST /v1/responses HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
            f"content-length: {len(_REQUEST)}\r\n\r\n"
        ).encode() + _REQUEST
        self.newline = False
        self.tail = b""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.write(self.request)

    def data_received(self, data: bytes) -> None:
        # A blank line split across two reads: "\n" | "\n".  The head and the chunk framing
        # use CRLF, so the only "\n\n" in the bytes are ends of events.
        self.events += data.count(b"\n\n") + (self.newline and data[0] == 10)
        self.newline = data[-1] == 10
        self.tail = (self.tail + data[-len(_BODY_END) :])[-len(_BODY_END) :]
        if self.tail == _BODY_END:
            self.finish()


class WsReader(_Reader):
    """Upgrade, send one request frame, count text frames; after ``expected`` of them close,
    and count on until the server's close frame (so an extra event is counted too)."""

    def __init__(self, done: asyncio.Future[int], host: str, expected: int) -> None:
        super().__init__(done)
        self.expected = expected
        key = base64.b64encode(os.urandom(16)).decode()
        self.handshake = (
            f"GET /v1/responses HTTP/1.1\r\nhost: {host}\r\nupgrade: websocket\r\n"
            f"connection: Upgrade\r\nsec-websocket-key: {key}\r\nsec-websocket-version: 13\r\n\r\n"
        ).encode()
        self.open = False
        self.head = b""
        self.frames = FrameReader(1 << 30)
        self.closing = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        assert self.transport is not None
        self.transport.write(self.handshake)

    def data_received(self, data: bytes) -> None:
        if not self.open:
            self.head += data
            end = self.head.find(b"\r\n\r\n")
            if end < 0:
                return
            if not self.head.startswith(b"HTTP/1.1 101"):
                self.fail(f"the upgrade was refused: {self.head[:60]!r}")
                return
            self.open = True
            data = self.head[end + 4 :]
            self.head = b""
            assert self.transport is not None
            self.transport.write(_WS_REQUEST)
        try:
            frames = self.frames.feed(data)
        except FrameError as exc:
            self.fail(f"the server sent {exc.reason}")
            return
        for opcode, _ in frames:
            if opcode == OP_TEXT:
                self.events += 1
                if self.events == self.expected and not self.closing:
                    self.closing = True
                    assert self.transport is not None
                    self.transport.write(_CLOSE_1000)
            elif opcode == OP_CLOSE:
                self.finish()
                return


async def _timed(
    start: Callable[[], Coroutine[Any, Any, list[int]]], streams: int
) -> tuple[list[int], Rate]:
    cpu0 = time.process_time()
    t0 = time.perf_counter_ns()
    counts = await start()
    t1 = time.perf_counter_ns()
    cpu = time.process_time() - cpu0
    return counts, Rate(sum(counts), (t1 - t0) / 1e9, streams, cpu)


async def read_streams(kind: str, port: int, streams: int, expected: int) -> list[int]:
    """Events counted on each of ``streams`` concurrent streams (``kind``: ``sse`` or ``ws``)."""
    loop = asyncio.get_running_loop()
    host = f"127.0.0.1:{port}"

    async def one() -> int:
        done: asyncio.Future[int] = loop.create_future()
        if kind == "ws":
            await loop.create_connection(lambda: WsReader(done, host, expected), "127.0.0.1", port)
        else:
            await loop.create_connection(lambda: SseReader(done, host), "127.0.0.1", port)
        return await done

    return list(await asyncio.gather(*(one() for _ in range(streams))))


async def ceiling(kind: str, port: int, streams: int, expected: int) -> Rate:
    """The bare readers on ``streams`` streams, timed, with the client's CPU time."""
    counts, rate = await _timed(lambda: read_streams(kind, port, streams, expected), streams)
    wrong = [c for c in counts if c != expected]
    if wrong:
        raise SelfbenchError(
            f"bare {kind} reader: counted {wrong[0]} events on a stream, expected {expected}"
        )
    return rate
