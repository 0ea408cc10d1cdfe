"""A lean HTTP/1.1 client for the measurement path: asyncio protocols and a connection pool.

Each received chunk is timestamped in ``data_received`` — the earliest point
Python sees it — and handed, in the same call, to the caller's body sink (the
SSE decoder and the response state machine).  There is no task switch, stream
wrapper or timeout scope per chunk, which is where an httpx stream spends most
of its time at thousands of SSE chunks per second (see BENCHMARKS.md).

Scope: one request at a time per connection, keep-alive reuse, optional TLS,
connect and idle-read timeouts, a bound on open connections.  A request on a
reused connection that the server closed while idle (before any response
byte) is retried once on a fresh connection, as the request never reached the
application.
"""

from __future__ import annotations

import asyncio
import ssl
import time
from dataclasses import dataclass
from typing import Protocol, cast
from urllib.parse import urlsplit

from harness.client.api_errors import describe_os_error, lost_mid_response
from harness.client.h1 import H1Error, ResponseParser, encode_request
from harness.client.stream import ResponseStream
from harness.transports.rx_socket import RxTransport, stamped_transport, tcp_socket
from harness.wire.errors import ErrorKind, LoopbenchError, StaleConnection, TransportError


class BodySink(Protocol):
    """Body bytes of a stream in, with their arrival time; returns the events they completed
    (``None``: not counted, every byte is progress).  Raising stops the response and fails the
    request with that error.  Over a kernel-stamping connection ``t_ns`` is the kernel's receive
    stamp and ``user_ns`` the user-space one (else 0, and ``t_ns`` is the user-space stamp)."""

    def __call__(self, chunk: bytes, t_ns: int, user_ns: int = 0, /) -> int | None: ...


#: the most a non-streamed body (an error, an answer of another content type) may hold
MAX_BODY_BYTES = 16 * 1024 * 1024
#: seconds :meth:`H1Pool.aclose` waits for its connections to finish closing
CLOSE_WAIT_S = 2.0


@dataclass(frozen=True, slots=True)
class Response:
    status: int
    headers: dict[str, str]
    body: bytes  # only when no sink was given (error responses, non-streaming calls)
    new_connection: bool
    connected_ns: int = 0  # when the new connection was established (0: reused)
    connect_start_ns: int = 0  # when its TCP connect began (0: reused)
    tcp_connected_ns: int = 0  # when TCP was established (0: reused)
    tls_done_ns: int = 0  # when its TLS handshake completed (0: reused, or plain http)


class _Conn(asyncio.Protocol):
    def __init__(
        self, loop: asyncio.AbstractEventLoop, peer: str, stream_types: tuple[str, ...] = ()
    ) -> None:
        self.loop = loop
        self.peer = peer
        self.stream_types = stream_types
        self.transport: asyncio.Transport | None = None
        #: the kernel-stamping transport, when this connection has one (docs/metrics.md §1.9)
        self.rx: RxTransport | None = None
        self.closed = False
        self.parser = ResponseParser()
        self.sink: BodySink | None = None
        #: the response the sink feeds, while its first visible output is still to come: reads
        #: over a kernel-stamping transport end at the parser's unit boundaries until then
        self.awaiting: ResponseStream | None = None
        self.body: list[bytes] = []
        self.body_bytes = 0
        self.done: asyncio.Future[None] | None = None
        self.received = False
        self.last_io = 0.0
        #: done when the transport is gone (H1Pool.aclose waits for it)
        self.lost: asyncio.Future[None] = loop.create_future()

    # -- asyncio callbacks ---------------------------------------------------------------------
    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports implement asyncio.Transport without subclassing it.
        self.transport = cast(asyncio.Transport, transport)
        if isinstance(transport, RxTransport):
            self.rx = transport

    def data_received(self, data: bytes) -> None:
        t_ns = user_ns = time.perf_counter_ns()
        rx = self.rx
        kernel = rx is not None and rx.rx_kernel
        if kernel:
            assert rx is not None
            t_ns = rx.rx_ns
        self.received = True
        progress: int | None = None
        try:
            body = self.parser.feed(data)
            if body:
                # Error responses, and answers of another content type than the sink expects,
                # are collected whole for the error message, never streamed.
                p = self.parser
                if (
                    self.sink is not None
                    and p.status < 400
                    and (
                        not self.stream_types
                        or p.headers.get("content-type", "").startswith(self.stream_types)
                    )
                ):
                    progress = self.sink(body, t_ns, user_ns) if kernel else self.sink(body, t_ns)
                else:
                    self.body.append(body)
                    self.body_bytes += len(body)
                    if self.body_bytes > MAX_BODY_BYTES:
                        raise H1Error(
                            f"a body of over {self.body_bytes:,} bytes that is not an event "
                            f"stream: expected at most {MAX_BODY_BYTES:,}"
                        )
        except H1Error as exc:
            self._fail(H1Error(f"the answer of {self.peer} is not valid HTTP/1.1: {exc}"))
            return
        except BaseException as exc:  # the sink's protocol errors included: fail the request
            self._fail(exc)
            return
        # A stream is alive while its events arrive: bytes that complete none (a peer
        # dripping one byte a second) do not push the idle timeout back.
        if progress != 0:
            self.last_io = self.loop.time()
        awaiting = self.awaiting
        if awaiting is not None and (awaiting.rec.first_output_ns or awaiting.done):
            self.awaiting = None
            if rx is not None:
                rx.unit_end = None
        if self.parser.complete and self.done is not None and not self.done.done():
            self.done.set_result(None)

    def eof_received(self) -> bool | None:
        try:
            self.parser.eof()
        except LoopbenchError as exc:
            # The peer hung up mid-response: a connection failure, not a malformed response
            # (before any byte, a pooled connection the server had already closed: retried).
            self._fail(
                StaleConnection("pooled connection")
                if not self.received
                else TransportError(
                    ErrorKind.CONNECTION, f"{self.peer} closed the connection mid-response: {exc}"
                )
            )
        else:
            if self.done is not None and not self.done.done():
                self.done.set_result(None)
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        if not self.lost.done():
            self.lost.set_result(None)
        if self.done is not None and not self.done.done():
            if not self.received:
                self._fail(StaleConnection("pooled connection"))
            else:
                self._fail(TransportError(ErrorKind.CONNECTION, lost_mid_response(exc, self.peer)))

    def _fail(self, exc: BaseException) -> None:
        if self.done is not None and not self.done.done():
            self.done.set_exception(exc)
        self.close()

    def abandon(self) -> None:
        """Close without failing anyone: the waiter already gave up (timeout, cancellation)."""
        if self.done is not None and not self.done.done():
            self.done.cancel()
        self.close()

    def close(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.close()

    # -- one exchange --------------------------------------------------------------------------
    def start(
        self, request: bytes, sink: BodySink | None, stream: ResponseStream | None = None
    ) -> None:
        assert self.transport is not None
        self.parser = ResponseParser()
        self.sink = sink
        if self.rx is not None:
            # Until the first token, each read ends where a unit of the response does: the
            # kernel stamps a read with its last segment's arrival (docs/metrics.md §1.9).
            self.awaiting = stream
            self.rx.unit_end = self.parser.unit_end if stream is not None else None
        self.body = []
        self.body_bytes = 0
        self.received = False
        self.done = self.loop.create_future()
        self.last_io = self.loop.time()
        self.transport.write(request)


class H1Pool:
    """Keep-alive connections to one origin (``http[s]://host:port``)."""

    def __init__(
        self,
        base_url: str,
        *,
        max_connections: int,
        keepalive: bool,
        verify_tls: bool,
        connect_timeout_s: float,
        read_timeout_s: float,
        stream_types: tuple[str, ...] = (),
        rx_stamp: str = "user",
    ) -> None:
        """``stream_types``: content types whose body goes to a request's sink as it arrives
        (any, if empty); a body of another type is collected whole, for the error message.
        ``rx_stamp``: ``kernel`` stamps plain-TCP reads with the kernel's receive time
        (:mod:`harness.transports.rx_socket`; resolved from ``--rx-stamp`` beforehand); TLS
        connections and ``user`` are stamped in user space."""
        parts = urlsplit(base_url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise LoopbenchError(
                f"base URL {base_url!r}: expected http://HOST[:PORT]/PATH or https://"
            )
        self.host = parts.hostname
        self.port = parts.port or (443 if parts.scheme == "https" else 80)
        self.path = parts.path.rstrip("/")
        default_port = self.port == (443 if parts.scheme == "https" else 80)
        shown = f"[{self.host}]" if ":" in self.host else self.host
        self.authority = shown if default_port else f"{shown}:{self.port}"
        self.ssl: ssl.SSLContext | None = None
        if parts.scheme == "https":
            self.ssl = ssl.create_default_context()
            if not verify_tls:
                self.ssl.check_hostname = False
                self.ssl.verify_mode = ssl.CERT_NONE
        self.keepalive = keepalive
        self.stream_types = stream_types
        self.kernel_stamps = rx_stamp == "kernel" and self.ssl is None
        self.connect_timeout_s = connect_timeout_s
        self.read_timeout_s = read_timeout_s
        self._slots = asyncio.Semaphore(max_connections)
        self._idle: list[_Conn] = []
        self._open: set[_Conn] = set()

    async def _connect(self) -> tuple[_Conn, tuple[int, int, int]]:
        """A new connection, and when its TCP connect began, ended, and its TLS handshake ended.

        TCP first, then TLS over it (``start_tls``), so the two are timed apart: one
        ``create_connection(ssl=...)`` would hide where the time went.
        """
        loop = asyncio.get_running_loop()
        started = time.perf_counter_ns()
        tcp_ns = tls_ns = 0
        transport: asyncio.BaseTransport | None = None
        try:
            async with asyncio.timeout(self.connect_timeout_s):
                if self.kernel_stamps:
                    transport, proto = await self._connect_stamped(loop)
                else:
                    transport, proto = await loop.create_connection(
                        lambda: _Conn(loop, self.authority, self.stream_types), self.host, self.port
                    )
                tcp_ns = time.perf_counter_ns()
                if self.ssl is not None:
                    tls = await loop.start_tls(
                        cast(asyncio.WriteTransport, transport),
                        proto,
                        self.ssl,
                        server_hostname=self.host,
                    )
                    tls_ns = time.perf_counter_ns()
                    assert tls is not None  # None only when the loop is closing
                    transport = tls
        except TimeoutError as exc:
            if transport is not None:
                transport.close()
            raise TransportError(
                ErrorKind.TIMEOUT,
                f"connecting to {self.authority} timed out after {self.connect_timeout_s:g} s",
            ) from exc
        except OSError as exc:  # ssl.SSLError (a refused certificate) included
            if transport is not None:
                transport.close()
            raise TransportError(
                ErrorKind.CONNECTION, describe_os_error(exc, self.authority)
            ) from exc
        # uvloop calls connection_made() soon, not before create_connection returns; and
        # after start_tls the protocol's transport is the TLS one.
        proto.transport = cast(asyncio.Transport, transport)
        self._open.add(proto)
        return proto, (started, tcp_ns, tls_ns)

    async def _connect_stamped(
        self, loop: asyncio.AbstractEventLoop
    ) -> tuple[asyncio.BaseTransport, _Conn]:
        """A plain-TCP connection over a kernel-stamping transport; over the loop's own when
        the socket refuses the timestamp option."""
        sock = await tcp_socket(self.host, self.port)
        proto = _Conn(loop, self.authority, self.stream_types)
        try:
            transport = stamped_transport(loop, sock, proto)
            if transport is not None:
                return transport, proto
            return await loop.create_connection(lambda: proto, sock=sock)
        except BaseException:
            sock.close()
            raise

    def _take_idle(self) -> _Conn | None:
        while self._idle:
            conn = self._idle.pop()
            if not conn.closed:
                return conn
            self._open.discard(conn)
        return None

    async def request(
        self,
        method: str,
        path: str,
        headers: list[tuple[str, str]],
        body: bytes,
        sink: BodySink | None = None,
        stream: ResponseStream | None = None,
    ) -> Response:
        """Send one request; body bytes go to ``sink`` as they arrive (else into ``body``).

        ``stream``: the response the sink feeds; over a kernel-stamping connection, the reads
        before its first visible output end at unit boundaries, so that the first token is
        stamped with its own segment's arrival (docs/metrics.md §1.9)."""
        head = [("host", self.authority), *headers]
        if not self.keepalive:
            head.append(("connection", "close"))
        wire = encode_request(method, self.path + path, head, body)
        async with self._slots:
            for attempt in (0, 1):
                conn = self._take_idle() if attempt == 0 else None
                connected_ns = 0
                stamps = (0, 0, 0)
                if conn is None:
                    conn, stamps = await self._connect()
                    connected_ns = time.perf_counter_ns()
                conn.start(wire, sink, stream)
                try:
                    await self._wait(conn)
                except StaleConnection:
                    self._open.discard(conn)
                    if connected_ns:
                        raise StaleConnection(f"{method} {path}") from None
                    continue
                except BaseException:
                    conn.abandon()
                    self._open.discard(conn)
                    raise
                p = conn.parser
                if self.keepalive and p.keep_alive and not conn.closed:
                    self._idle.append(conn)
                else:
                    conn.close()
                    self._open.discard(conn)
                return Response(
                    p.status,
                    p.headers,
                    b"".join(conn.body),
                    bool(connected_ns),
                    connected_ns,
                    *stamps,
                )
        raise AssertionError("unreachable")

    async def _wait(self, conn: _Conn) -> None:
        """Until the response is complete; fails after ``read_timeout_s`` without progress
        (a byte; in a stream, a complete event)."""
        assert conn.done is not None
        loop = asyncio.get_running_loop()
        while True:
            left = conn.last_io + self.read_timeout_s - loop.time()
            if left <= 0:
                raise TransportError(
                    ErrorKind.TIMEOUT,
                    f"no data from {self.authority} for {self.read_timeout_s:g} s "
                    "(once a stream has begun: no complete event)",
                )
            try:
                await asyncio.wait_for(asyncio.shield(conn.done), left)
            except TimeoutError:
                continue
            return

    async def aclose(self) -> None:
        conns = list(self._open)
        for conn in conns:
            conn.close()
        self._open.clear()
        self._idle.clear()
        # Closing TLS is an exchange (close_notify), not instant: an event loop closed
        # before it ends leaves the socket open (uvloop warns of an unclosed transport).
        pending = [c.lost for c in conns if c.transport is not None]
        if pending:
            await asyncio.wait(pending, timeout=CLOSE_WAIT_S)
