"""One client WebSocket connection over asyncio, lean enough for a thousand agents per core.

The opening handshake is the ``websockets`` package's sans-I/O client (request, response
checks, the exceptions :func:`~harness.client.api_errors.ws_open_failure` names); after
it, frames are read by :class:`~harness.wire.ws_frames.FrameReader` inside
``data_received``, and while a turn reads its response each event goes straight into that
turn's :class:`~harness.client.stream.ResponseStream` there, as the HTTP transport's
``h1client`` does with SSE: no queue, no task wake-up per event; the waiting turn is woken
once, when its response is done.  Events that arrive while no turn reads (a lane reader,
the endpoint probe) wait in a backlog for :meth:`WsConnection.recv`.

Every event carries the stamp of the read that completed it, taken before parsing: the
kernel's receive time over a kernel-stamping transport (:mod:`harness.transports.rx_socket`,
the user-space stamp kept next to it), else ``perf_counter_ns`` at the I/O edge.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from typing import cast

from websockets.client import ClientProtocol
from websockets.datastructures import HeadersLike
from websockets.exceptions import InvalidMessage
from websockets.http11 import USER_AGENT, Response
from websockets.uri import WebSocketURI

from harness.client.receive import feed_ws_message
from harness.client.stream import ResponseStream
from harness.transports.rx_socket import RxTransport
from harness.wire.errors import ErrorKind, TransportError, WsClosed
from harness.wire.ws_frames import (
    OP_BINARY,
    OP_CLOSE,
    OP_PING,
    OP_PONG,
    OP_TEXT,
    FrameError,
    FrameReader,
    close_code,
    close_payload,
    encode_frame,
)

#: a handshake answer's head larger than this is not a WebSocket server's
MAX_HANDSHAKE_BYTES = 64 * 1024
_LOGGER = logging.getLogger("websockets.client")

#: (payload, stamp, user-space stamp when the stamp is the kernel's else 0)
Message = tuple[bytes, int, int]


class WsConnection(asyncio.Protocol):
    """A client WebSocket: :meth:`handshake`, then :meth:`send` / :meth:`read_into` per turn."""

    def __init__(self, uri: WebSocketURI, max_size: int) -> None:
        self.loop = asyncio.get_running_loop()
        self.uri = uri
        self.transport: asyncio.Transport | None = None
        self.rx: RxTransport | None = None
        #: when the transport was handed over: over TLS, when its handshake completed
        self.made_ns = 0
        self.reader = FrameReader(max_size)
        # The opening handshake: its sans-I/O protocol, the answer's bytes, the waiter.
        self._hs: ClientProtocol | None = None
        self._head = b""
        self._hs_failing = False
        self._opened: asyncio.Future[None] = self.loop.create_future()
        #: the turn reading now, and the future that wakes it
        self.sink: ResponseStream | None = None
        #: the turns on this connection (one, or one per lane) whose first visible output is
        #: still to come: while there is one, each read ends at a frame's end, as the kernel
        #: stamps a read with its last segment's arrival (docs/metrics.md §1.9)
        self.awaiting: list[ResponseStream] = []
        self.waiter: asyncio.Future[None] | None = None
        self.backlog: deque[Message] = deque()
        self.last_io = 0.0
        #: why the connection can no longer be used (raised to every later reader and sender)
        self.gone: TransportError | None = None
        #: the server's close code, once its close frame came
        self.close_rcvd: int | None = None
        self._close_sent = False
        self.lost: asyncio.Future[None] = self.loop.create_future()
        self._drain: asyncio.Future[None] | None = None

    # -- asyncio callbacks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.made_ns = time.perf_counter_ns()
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        if isinstance(transport, RxTransport):
            self.rx = transport

    def data_received(self, data: bytes) -> None:
        self._receive(data)
        if self.awaiting:
            self.output_seen()

    def _receive(self, data: bytes) -> None:
        # Stamped before anything is parsed: every event these bytes complete arrived now.
        user_ns = time.perf_counter_ns()
        rx = self.rx
        if rx is not None and rx.rx_kernel:
            t_ns = rx.rx_ns
        else:
            t_ns, user_ns = user_ns, 0
        if self._hs is not None:
            data = self._handshake_data(data)
            if not data:
                return
        violation = None
        try:
            frames = self.reader.feed(data)
        except FrameError as exc:
            # What came complete before the broken frame is read first.
            frames, violation = exc.before, exc
        for op, payload in frames:
            if op in (OP_TEXT, OP_BINARY):
                if not self._message(payload, t_ns, user_ns, op == OP_TEXT):
                    return
            elif op == OP_PING:
                self._write(encode_frame(OP_PONG, payload))
            elif op == OP_CLOSE:
                self._closed_by_peer(close_code(payload))
                return
        if violation is not None:
            self._violation(violation)

    def _message(self, payload: bytes, t_ns: int, user_ns: int, text: bool) -> bool:
        """Hand one data message on; False when it ended the connection."""
        stream = self.sink
        if stream is None:
            if text and not _utf8(payload):
                self._violation(_NOT_UTF8)
                return False
            self.backlog.append((payload, t_ns, user_ns))
            self._wake()
            return True
        self.last_io = self.loop.time()
        try:
            # The JSON parser checks UTF-8 anyway: a text message is only decoded apart
            # when it failed, to tell a framing violation from an invalid event.
            feed_ws_message(stream, payload, t_ns, user_ns)
        except BaseException as exc:  # a connection-level error event: the turn's error
            self.sink = None
            if text and not _utf8(payload):
                self._violation(_NOT_UTF8)
                return False
            self._wake(exc)
            return True
        if stream.done:
            # What follows in this read belongs to no turn yet: the backlog keeps it.
            self.sink = None
            self._wake()
        return True

    def eof_received(self) -> bool | None:
        return None  # the transport closes; connection_lost says what that means

    def connection_lost(self, exc: Exception | None) -> None:
        if self.gone is None:
            self.gone = WsClosed(self.close_rcvd if self.close_rcvd is not None else 1006)
        if not self._opened.done():
            hs, self._hs = self._hs, None
            if hs is not None:
                # A refusal whose body ran to the end of the connection is complete now.
                with contextlib.suppress(Exception):
                    hs.receive_eof()
                _discard(hs)
            _settle(
                self._opened,
                (hs.handshake_exc if hs is not None else None)
                or exc
                or InvalidMessage("did not receive a valid HTTP response"),
            )
        self._wake(self.gone)
        if not self.lost.done():
            self.lost.set_result(None)
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)

    def pause_writing(self) -> None:
        self._drain = self.loop.create_future()

    def resume_writing(self) -> None:
        if self._drain is not None and not self._drain.done():
            self._drain.set_result(None)
        self._drain = None

    # -- the opening handshake -----------------------------------------------------------------
    async def handshake(self, headers: HeadersLike) -> None:
        """Send the upgrade request and wait for the server's 101 (or raise what went wrong)."""
        hs = self._hs = ClientProtocol(
            self.uri, extensions=None, max_size=self.reader.max_size, logger=_LOGGER
        )
        request = hs.connect()
        request.headers.update(headers)
        request.headers.setdefault("User-Agent", USER_AGENT)
        hs.send_request(request)
        self._write(b"".join(hs.data_to_send()))
        await self._opened

    def _handshake_data(self, data: bytes) -> bytes:
        """Feed the handshake; the bytes after the server's 101 answer (frames)."""
        hs = self._hs
        assert hs is not None
        if self._hs_failing:
            hs.receive_data(data)
            self._handshake_outcome()
            return b""
        head = self._head + data
        end = head.find(b"\r\n\r\n")
        if end < 0:
            if len(head) > MAX_HANDSHAKE_BYTES:
                _settle(
                    self._opened,
                    InvalidMessage(f"an answer head of over {MAX_HANDSHAKE_BYTES:,} bytes"),
                )
                self.abort()
            self._head = head
            return b""
        end += 4
        self._head = b""
        if head.startswith((b"HTTP/1.1 101 ", b"HTTP/1.1 101\r")):
            # Only the head: the websockets parser would read what follows as frames.
            hs.receive_data(head[:end])
            rest = head[end:]
        else:
            # A refusal: its body belongs to the error message, however long it is.
            self._hs_failing = True
            hs.receive_data(head)
            rest = b""
        return rest if self._handshake_outcome() else b""

    def _handshake_outcome(self) -> bool:
        """Settle the handshake when its answer is complete; True when it succeeded."""
        hs = self._hs
        assert hs is not None
        if hs.handshake_exc is not None:
            self._hs = None
            _discard(hs)
            _settle(self._opened, hs.handshake_exc)
            self.abort()
            return False
        if any(isinstance(e, Response) for e in hs.events_received()):
            self._hs = None
            _discard(hs)
            self.last_io = self.loop.time()
            if not self._opened.done():
                self._opened.set_result(None)
            return True
        return False

    # -- one turn --------------------------------------------------------------------------------
    def expect_output(self, stream: ResponseStream) -> None:
        """``stream``'s request is about to go out: unit reads until its first visible output."""
        self.awaiting.append(stream)
        self._unit_reads()

    def output_seen(self, stream: ResponseStream | None = None) -> None:
        """Forget the awaited turns whose first visible output came or that ended, and
        ``stream`` whatever its state (its reader gave up); full reads once none is left."""
        self.awaiting = [
            s for s in self.awaiting if s is not stream and not (s.rec.first_output_ns or s.done)
        ]
        self._unit_reads()

    def _unit_reads(self) -> None:
        rx = self.rx
        if rx is not None and self._hs is None:
            units = bool(self.awaiting)
            if units != (rx.unit_end is not None):
                rx.unit_end = self.reader.frame_end if units else None

    async def send(self, text: bytes) -> None:
        """One text message (``text``: its UTF-8 bytes)."""
        if self.gone is not None:
            raise self.gone
        self._write(encode_frame(OP_TEXT, text))
        if self._drain is not None:
            await self._drain
            if self.gone is not None:
                raise self.gone

    async def read_into(self, stream: ResponseStream, idle_timeout_s: float | None) -> None:
        """Feed events into ``stream`` until it is done.

        A connection-level ``error`` event raises :class:`~harness.wire.errors.APIError`,
        a close :class:`~harness.wire.errors.WsClosed`; with ``idle_timeout_s``, a response
        silent that long raises ``TransportError(TIMEOUT)``, as an HTTP read times out.
        """
        backlog = self.backlog
        while backlog:
            raw, t_ns, user_ns = backlog.popleft()
            feed_ws_message(stream, raw, t_ns, user_ns)
            if stream.done:
                return
        if self.gone is not None:
            raise self.gone
        loop = self.loop
        waiter = self.waiter = loop.create_future()
        self.sink = stream
        self.last_io = loop.time()
        try:
            if not idle_timeout_s:
                await waiter
                return
            while True:
                left = self.last_io + idle_timeout_s - loop.time()
                if left <= 0:
                    raise TransportError(
                        ErrorKind.TIMEOUT,
                        f"WebSocket: no event for {idle_timeout_s:g} s (request_timeout_s)",
                    )
                # asyncio.wait leaves the future alone on a timeout: events keep arriving.
                done, _ = await asyncio.wait((waiter,), timeout=left)
                if done:
                    waiter.result()
                    return
        finally:
            self.sink = None
            self.waiter = None

    async def recv(self) -> Message:
        """The next event and its stamps, for readers that are not a turn (lanes, the probe)."""
        backlog = self.backlog
        while not backlog:
            if self.gone is not None:
                raise self.gone
            waiter = self.waiter = self.loop.create_future()
            try:
                await waiter
            finally:
                self.waiter = None
        return backlog.popleft()

    # -- the end ---------------------------------------------------------------------------------
    async def close(self, timeout_s: float = 2.0) -> None:
        """The closing handshake (code 1000), then the socket; bounded by ``timeout_s``."""
        if self.transport is None or self.lost.done():
            return
        if not self._close_sent:
            self._close_sent = True
            self._write(encode_frame(OP_CLOSE, close_payload(1000)))
        try:
            async with asyncio.timeout(timeout_s):
                await asyncio.shield(self.lost)
        except TimeoutError:
            self.abort()

    # -- internals -------------------------------------------------------------------------------
    def _write(self, data: bytes) -> None:
        if self.transport is not None and not self.transport.is_closing():
            self.transport.write(data)

    def _wake(self, exc: BaseException | None = None) -> None:
        waiter = self.waiter
        if waiter is not None:
            _settle(waiter, exc)

    def _closed_by_peer(self, code: int) -> None:
        self.close_rcvd = code
        if not self._close_sent:
            self._close_sent = True
            self._write(encode_frame(OP_CLOSE, close_payload(code if code != 1005 else 1000)))
        self.gone = WsClosed(code)
        self._wake(self.gone)
        # The server closes the TCP connection after the closing handshake; be sure it goes.
        if self.transport is not None:
            self.transport.close()

    def _violation(self, exc: FrameError) -> None:
        if not self._close_sent:
            self._close_sent = True
            self._write(encode_frame(OP_CLOSE, close_payload(exc.code)))
        self.gone = WsClosed(exc.code, f"the server sent {exc.reason}")
        self._wake(self.gone)
        if self.transport is not None:
            self.transport.close()  # after the close frame is written

    def abort(self) -> None:
        """Drop the connection now: no closing handshake, unsent bytes discarded."""
        if self.transport is not None:
            self.transport.abort()


#: RFC 6455 §8.1: a text message that is not UTF-8 fails the connection (close 1007)
_NOT_UTF8 = FrameError(1007, "a text message that is not valid UTF-8")


def _utf8(payload: bytes) -> bool:
    try:
        payload.decode()
    except UnicodeDecodeError:
        return False
    return True


def _settle(fut: asyncio.Future[None], exc: BaseException | None) -> None:
    """Resolve ``fut`` unless it is done; an exception nobody awaits any more (its reader was
    cancelled in the same loop turn) is not logged as "never retrieved"."""
    if fut.done():
        return
    if exc is None:
        fut.set_result(None)
    else:
        fut.set_exception(exc)
        fut.exception()


def _discard(hs: ClientProtocol) -> None:
    """Close the handshake protocol's parser: a generator holding its protocol (a reference
    cycle per connection otherwise, left to the collector a run keeps quiet)."""
    parser = getattr(hs, "parser", None)
    if parser is not None:
        parser.close()
