"""The bare server of the throughput step: ``python -m bench.selfbench.raw_server``.

One process, one plain asyncio protocol (no framework, no ASGI, no websockets
library), one port for both transports.  Every request gets the same valid
Responses stream, encoded once at startup: ``response.created``,
``in_progress``, ``output_item.added``, ``content_part.added``, ``--deltas``
``response.output_text.delta`` events, the three ``…done`` events and
``response.completed`` with usage (no ``sim_timing``: nothing was modelled).

* HTTP/1.1: any request with a body (``POST /v1/responses`` from the ``http``
  transport, or the bare reader's) is answered ``200 text/event-stream`` with
  ``Transfer-Encoding: chunked``, as uvicorn answers for the reference server:
  one chunk, and one ``write``, per event; then the last chunk.  Keep-alive.
* WebSocket: a ``GET`` with ``Upgrade: websocket`` is switched (RFC 6455
  handshake); every text frame from the client (``response.create``) is answered
  with the stream, one text frame (a server's: no mask), and one ``write``, per event.  A close
  frame is echoed and the connection closed.

One write per event is what a token streamer does; the writes go out as fast as
the socket takes them (the protocol waits only while the transport's buffer is
above its high-water mark).  It binds port 0 on loopback, prints ``raw server
listening on PORT`` and serves until SIGTERM.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import sys
from collections.abc import Callable, Coroutine
from dataclasses import dataclass
from typing import Any, cast

from harness.run.event_loop import run_async
from harness.wire import ws_frames as wsf
from harness.wire.events import ResponseBuilder, usage
from harness.wire.exit_codes import UsageParser
from harness.wire.sse import encode_event

READY_PREFIX = "raw server listening on "
#: what each delta carries: one token under the 4-character rule, as the flooding engine sends
DELTA_TEXT = " tok"
#: events of the stream besides its deltas (created, in_progress, item added, part added,
#: text done, part done, item done, completed)
LIFECYCLE_EVENTS = 8
_MAX_HEAD = 64 * 1024
#: a request frame larger than this is not the bench's
_MAX_REQUEST = 1 << 20
_SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"content-type: text/event-stream\r\n"
    b"cache-control: no-cache\r\n"
    b"transfer-encoding: chunked\r\n\r\n"
)
_LAST_CHUNK = b"0\r\n\r\n"


@dataclass(frozen=True, slots=True)
class Streams:
    """The pre-encoded stream: one buffer per write, for each transport."""

    sse: tuple[bytes, ...]  # chunked-encoding chunks, one per event
    ws: tuple[bytes, ...]  # text frames, one per event

    @property
    def events(self) -> int:
        return len(self.ws)


def response_events(deltas: int) -> list[dict[str, object]]:
    """A complete text answer of ``deltas`` one-token deltas, in protocol order."""
    b = ResponseBuilder("resp_selfbench", model="selfbench", created_at=1_700_000_000)
    events = b.start()
    events += b.begin_message()
    events += [b.text_delta(DELTA_TEXT) for _ in range(deltas)]
    events += b.end_message()
    events.append(b.complete(usage(60, 0, deltas)))
    return events


def sse_blocks(deltas: int) -> list[bytes]:
    """The stream as SSE events (``event:`` and ``data:`` lines, blank line), one per event."""
    return [encode_event(event) for event in response_events(deltas)]


def json_payload(block: bytes) -> bytes:
    """The event's JSON: the data line of its SSE block, what a WebSocket message carries."""
    return block[block.index(b"\ndata: ") + 7 : -2]


def encode_streams(deltas: int) -> Streams:
    sse: list[bytes] = []
    ws: list[bytes] = []
    for block in sse_blocks(deltas):
        sse.append(f"{len(block):x}\r\n".encode() + block + b"\r\n")
        ws.append(wsf.encode_frame(wsf.OP_TEXT, json_payload(block), masked=False))
    return Streams(tuple(sse), tuple(ws))


class _Conn(asyncio.Protocol):
    def __init__(self, streams: Streams) -> None:
        self.streams = streams
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.ws = False
        self.frames = wsf.FrameReader(_MAX_REQUEST, masked=True)
        self.closed = False
        self.paused = False
        self.resumed: asyncio.Future[None] | None = None
        self.queue: asyncio.Queue[tuple[bytes, ...] | None] = asyncio.Queue()
        self.writer = asyncio.get_running_loop().create_task(self._write_loop())

    # -- asyncio callbacks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)

    def data_received(self, data: bytes) -> None:
        if self.ws:
            self._frames(data)
            return
        self.buf += data
        try:
            while self.buf and not self.closed and not self.ws:
                if not self._request():
                    break
        except ValueError:
            self._close()
        if self.ws and self.buf:  # frames sent right behind the upgrade request
            rest = bytes(self.buf)
            self.buf.clear()
            self._frames(rest)

    def pause_writing(self) -> None:
        self.paused = True

    def resume_writing(self) -> None:
        self.paused = False
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.writer.cancel()
        if self.resumed is not None and not self.resumed.done():
            self.resumed.set_result(None)

    # -- input ---------------------------------------------------------------------------------
    def _request(self) -> bool:
        """One HTTP request from the buffer; False when it is not complete yet."""
        end = self.buf.find(b"\r\n\r\n")
        if end < 0:
            if len(self.buf) > _MAX_HEAD:
                raise ValueError("request head too large")
            return False
        lines = bytes(self.buf[:end]).decode("latin-1").split("\r\n")
        headers = {}
        for line in lines[1:]:
            name, _, value = line.partition(":")
            headers[name.strip().lower()] = value.strip()
        if "websocket" in headers.get("upgrade", "").lower():
            del self.buf[: end + 4]
            accept = wsf.accept_key(headers.get("sec-websocket-key", ""))
            self._write(
                b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\n"
                b"connection: Upgrade\r\nsec-websocket-accept: " + accept.encode() + b"\r\n\r\n"
            )
            self.ws = True
            return True
        length = int(headers.get("content-length", "0") or "0")
        if len(self.buf) < end + 4 + length:
            return False
        del self.buf[: end + 4 + length]
        self.queue.put_nowait((_SSE_HEAD, *self.streams.sse, _LAST_CHUNK))
        return True

    def _frames(self, data: bytes) -> None:
        """Client frames, read by the project's codec (a broken one ends the connection)."""
        try:
            frames = self.frames.feed(data)
        except wsf.FrameError:
            self._close()
            return
        for opcode, payload in frames:
            if opcode == wsf.OP_CLOSE:  # echo the code, then hang up (after what is queued)
                self.queue.put_nowait((wsf.encode_frame(wsf.OP_CLOSE, payload[:2], masked=False),))
                self.queue.put_nowait(None)
                return
            if opcode == wsf.OP_PING:
                self._write(wsf.encode_frame(wsf.OP_PONG, payload, masked=False))
            elif opcode in (wsf.OP_TEXT, wsf.OP_BINARY):  # a request: the stream
                self.queue.put_nowait(self.streams.ws)

    # -- output --------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.closed:
            self.transport.write(data)

    async def _write_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while True:
            chunks = await self.queue.get()
            if chunks is None:
                self._close()
                return
            write = self._write
            for chunk in chunks:
                write(chunk)
                if self.paused:
                    self.resumed = loop.create_future()
                    await self.resumed
                if self.closed:
                    return

    def _close(self) -> None:
        if self.transport is not None and not self.closed:
            self.transport.close()
        self.closed = True


def listen_loopback() -> socket.socket:
    """A listening socket on 127.0.0.1, on a port the system picks (this and lib_server.py)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


async def _main(deltas: int) -> None:
    streams = encode_streams(deltas)
    sock = listen_loopback()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    server = await loop.create_server(lambda: _Conn(streams), sock=sock)
    print(f"{READY_PREFIX}{sock.getsockname()[1]}", flush=True)
    try:
        await stop.wait()
    finally:
        server.close()


def serve_main(
    prog: str, serve: Callable[[int], Coroutine[Any, Any, None]], argv: list[str] | None
) -> None:
    """The command line both bare servers share: ``--deltas N``, then serve until signalled."""
    parser = UsageParser(prog=prog)
    parser.add_argument(
        "--deltas", type=int, default=20_000, help="text deltas per response (default 20000)"
    )
    args = parser.parse_args(argv)
    if args.deltas < 1:
        parser.error(f"--deltas: expected a positive number, got {args.deltas}")
    run_async(serve(args.deltas))
    sys.exit(0)


def main(argv: list[str] | None = None) -> None:
    serve_main("python -m bench.selfbench.raw_server", _main, argv)


if __name__ == "__main__":
    main()
