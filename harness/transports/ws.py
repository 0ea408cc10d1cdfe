"""WebSocket transports over asyncio: ``ws``, ``ws-store`` and the ``ws-append`` prototype.

One connection per rollout.  What each turn sends (``response.create`` chained by
id, or ``response.append`` to the rollout's paused response) and how a failure is
recovered (resend the full context, reconnect keeping the chain, or fail) are
decided by :class:`harness.client.conversation.WsTurn` under the policy of
:mod:`harness.client.recovery`; this module opens, reads and closes sockets.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import re
import socket
import time
from dataclasses import dataclass

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.client import ClientProtocol
from websockets.datastructures import HeadersLike
from websockets.frames import Close
from websockets.http11 import USER_AGENT
from websockets.uri import WebSocketURI, parse_uri

from harness.client.api_errors import ws_open_failure
from harness.client.bodies import ws_headers
from harness.client.conversation import Conversation
from harness.client.options import TransportOptions
from harness.client.receive import feed_ws_message
from harness.client.recovery import Recovery
from harness.client.shaping import session_headers
from harness.client.stream import ResponseStream
from harness.transports.http import HttpTransport, compact
from harness.transports.rx_socket import stamped_transport, tcp_socket
from harness.transports.tls import tls_context
from harness.transports.ws_stamp import StampedConnection, arrival
from harness.wire.errors import APIError, ErrorKind, TransportError, WsClosed
from harness.wire.events import dumps
from harness.wire.sse import MAX_EVENT_BYTES
from harness.wire.transports import TransportSpec, transport_spec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


@dataclass(frozen=True, slots=True)
class ConnectStamps:
    """When a new connection's TCP connect began and ended, and its TLS handshake ended (0: no TLS)."""

    start_ns: int
    tcp_ns: int
    tls_ns: int


async def open_ws(options: TransportOptions, url: str) -> ClientConnection:
    """Open a WebSocket the way the measurement path needs it (or raise TransportError)."""
    conn, _ = await open_ws_timed(options, url)
    return conn


async def open_ws_timed(
    options: TransportOptions, url: str, rollout_key: str | None = None
) -> tuple[ClientConnection, ConnectStamps]:
    """:func:`open_ws`, with when its TCP connect and TLS handshake ended.

    The TCP socket is connected here and handed to ``connect``, which then runs only
    the TLS handshake (for ``wss://``) and the upgrade: the three are timed apart.
    """
    uri = parse_uri(url)
    # Before the clock starts: the first call loads the CA store (milliseconds).
    ctx = tls_context(options.verify_tls) if uri.secure else None
    headers = ws_headers(options, session_headers(options.shaping, rollout_key))
    sock: socket.socket | None = None
    started = time.perf_counter_ns()
    try:
        async with asyncio.timeout(options.connect_timeout_s):
            sock = await tcp_socket(uri.host, uri.port)
        tcp_ns = time.perf_counter_ns()
        if options.rx_stamp == "kernel" and not uri.secure:
            stamped = await _open_stamped(sock, uri, headers, options.connect_timeout_s)
            if stamped is not None:
                return stamped, ConnectStamps(started, tcp_ns, 0)
        # Compression off and no keepalive pings: the measurement path must not pay for either.
        conn = await connect(
            url,
            sock=sock,
            additional_headers=headers,
            compression=None,
            # A Responses event holding a whole 1,000,000-token answer is ~5 MiB: a larger
            # message is a hostile or broken peer (close 1009), not one to buffer.
            max_size=MAX_EVENT_BYTES,
            ping_interval=None,
            open_timeout=options.connect_timeout_s,
            close_timeout=_CLOSE_TIMEOUT_S,
            # Messages are stamped at the I/O edge, not when the loop gets round to them.
            create_connection=StampedConnection,
            # Direct, like the HTTP transports: a proxy would be measured too, and looking
            # one up scans the environment on every connect.
            proxy=None,
            # websockets refuses an ssl argument for ws://; for wss:// it is what --insecure sets.
            ssl=ctx,
        )
    except (OSError, websockets.exceptions.WebSocketException, TimeoutError) as exc:
        if sock is not None:
            sock.close()  # a no-op once the transport owns (and has closed) it
        raise ws_open_failure(exc, url) from exc
    tls_ns = conn.made_ns if uri.secure and isinstance(conn, StampedConnection) else 0
    return conn, ConnectStamps(started, tcp_ns, tls_ns)


#: what ``connect`` is given above, for the connection :func:`_open_stamped` builds itself
_CLOSE_TIMEOUT_S = 2
_LOGGER = logging.getLogger("websockets.client")


async def _open_stamped(
    sock: socket.socket, uri: WebSocketURI, headers: HeadersLike, open_timeout_s: float
) -> StampedConnection | None:
    """The WebSocket over a kernel-stamping transport (docs/metrics.md §1.9); None when the
    socket refuses the timestamp option (the caller then goes the usual way).

    What ``websockets.asyncio.client.connect`` does for a given socket, with the same
    settings as :func:`open_ws_timed`'s call of it: the sans-I/O protocol, the connection
    around it, our transport instead of the loop's, the opening handshake.
    """
    protocol = ClientProtocol(uri, extensions=None, max_size=MAX_EVENT_BYTES, logger=_LOGGER)
    conn = StampedConnection(protocol, ping_interval=None, close_timeout=_CLOSE_TIMEOUT_S)
    if stamped_transport(asyncio.get_running_loop(), sock, conn) is None:
        return None
    try:
        async with asyncio.timeout(open_timeout_s):
            await conn.handshake(headers, USER_AGENT)
    except TimeoutError as exc:
        conn.transport.abort()
        raise TimeoutError("timed out during opening handshake") from exc
    except BaseException:
        conn.transport.abort()
        raise
    conn.start_keepalive()
    return conn


async def read_response(
    conn: ClientConnection, stream: ResponseStream, idle_timeout_s: float | None = None
) -> None:
    """Feed events into ``stream`` until it is done (a terminal event or a pause).

    A connection-level ``error`` event is raised as :class:`APIError`, a close as
    :class:`WsClosed`.  With ``idle_timeout_s``, a response silent for that long
    (between 7/8 of it and all of it) raises ``TransportError(TIMEOUT)``, as an
    HTTP read times out.
    """
    loop = asyncio.get_running_loop()
    idle_ns = round(idle_timeout_s * 1e9) if idle_timeout_s else 0
    # One timer per turn, pushed back at most every idle/8 (not once per event).
    next_push = time.perf_counter_ns() + idle_ns // 8
    try:
        async with asyncio.timeout_at(loop.time() + idle_ns / 1e9 if idle_ns else None) as timer:
            async for raw in conn:
                t_ns, user_ns = arrival(conn)
                if idle_ns and t_ns >= next_push:
                    timer.reschedule(loop.time() + idle_ns / 1e9)
                    next_push = t_ns + idle_ns // 8
                feed_ws_message(stream, raw, t_ns, user_ns)
                if stream.done:
                    return
    except TimeoutError:
        raise TransportError(
            ErrorKind.TIMEOUT, f"WebSocket: no event for {idle_timeout_s:g} s (request_timeout_s)"
        ) from None
    except websockets.exceptions.ConnectionClosed as exc:
        raise WsClosed(close_code(exc.rcvd)) from exc
    # Iteration ends quietly on a 1000/1001 close.
    raise WsClosed(close_code(conn.protocol.close_rcvd))


def close_code(rcvd: Close | None) -> int:
    """The peer's close code; 1006 (abnormal closure) when none came."""
    return rcvd.code if rcvd is not None else 1006


class WsTransport:
    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        self.name = spec.name
        self.spec = spec
        self.options = options
        # Compaction is an HTTP endpoint: a pool, opened by the first rollout that compacts.
        self._http: HttpTransport | None = None

    @property
    def http(self) -> HttpTransport:
        if self._http is None:
            self._http = HttpTransport(transport_spec("http"), self.options)
        return self._http

    async def session(self, rollout_key: str | None = None) -> WsSession | WsLaneSession:
        # A paused ws-append response is bound to its connection's default lane: that
        # prototype keeps a connection per conversation.
        if self.options.ws_subagents == "lanes" and not self.spec.append:
            return WsLaneSession(LaneMux(self, rollout_key), None)
        return WsSession(self, rollout_key)

    async def aclose(self) -> None:
        if self._http is not None:
            await self._http.aclose()


class WsSession:
    def __init__(self, transport: WsTransport, rollout_key: str | None = None) -> None:
        self.t = transport
        options = transport.options
        self.rollout_key = rollout_key
        self.conv = Conversation(
            transport.spec, options.recover_from, options.shaping, options.tokens
        )
        #: added to a compaction's HTTP request (the WebSocket handshake carries them too)
        self.compact_headers = session_headers(options.shaping, rollout_key)
        self.url = transport.options.ws_url + self.conv.ws_query
        self.conn: ClientConnection | None = None

    async def _connect(self, rec: TurnRecord) -> ClientConnection:
        conn, stamps = await open_ws_timed(self.t.options, self.url, self.rollout_key)
        rec.connected_ns = time.perf_counter_ns()
        rec.connect_start_ns = stamps.start_ns
        rec.tcp_connected_ns = stamps.tcp_ns
        rec.tls_done_ns = stamps.tls_ns
        rec.new_connection = True
        self.conn = conn
        return conn

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        if inp.compaction:
            if self.conv.spec.append:
                # The rollout's response is paused on this connection, waiting for tool
                # outputs that will not come: the compacted history starts on a new one.
                await self._drop()
            http = self.t.http
            headers = [*http.headers, *self.compact_headers]
            return await compact(http.pool, headers, self.conv, inp, rec)
        turn = self.conv.ws_turn(inp, rec)
        timeout_s = self.t.options.request_timeout_s
        while True:
            conn = self.conn or await self._connect(rec)
            payload = turn.request()
            stream = turn.start(time.perf_counter_ns())
            try:
                try:
                    await conn.send(payload)
                except websockets.exceptions.ConnectionClosed as exc:
                    raise WsClosed(close_code(exc.rcvd)) from exc
                await read_response(conn, stream, timeout_s)
            except (APIError, WsClosed) as exc:
                if turn.recover(exc) is not Recovery.RESEND_FULL:
                    await self._drop()
                continue
            return turn.finish()

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        if conn is not None:
            # Closing a broken socket may fail in many ways; it is gone either way.
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()


#: where a lane's events name it (docs/protocol.md §2.4: every event of a named lane echoes
#: its stream_id; an escaped quote inside a text delta cannot match)
_LANE_RE = re.compile(r'"stream_id":\s*"([^"]*)"')


def lane_of(raw: str | bytes) -> str | None:
    """The lane an event belongs to (None: the default lane, or the connection)."""
    text = raw if isinstance(raw, str) else raw.decode("utf-8", "replace")
    match = _LANE_RE.search(text)
    return match.group(1) if match else None


class LaneMux:
    """One WebSocket connection shared by a rollout's conversations, each on its lane.

    The root conversation runs on the default lane and each sub-agent on a lane named after
    it, so their responses stream at the same time on one socket (docs/protocol.md §2.4).
    A reader task hands each event, stamped when it was read, to its lane's queue; the
    connection closes when the last conversation is done.
    """

    def __init__(self, transport: WsTransport, rollout_key: str | None) -> None:
        self.t = transport
        self.rollout_key = rollout_key
        self.conn: ClientConnection | None = None
        self.queues: dict[str | None, asyncio.Queue[tuple[str | bytes | None, int, int]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()

    async def connection(self, rec: TurnRecord, url: str) -> ClientConnection:
        async with self._opening:
            if self.conn is None:
                conn, stamps = await open_ws_timed(self.t.options, url, self.rollout_key)
                rec.connected_ns = time.perf_counter_ns()
                rec.connect_start_ns = stamps.start_ns
                rec.tcp_connected_ns = stamps.tcp_ns
                rec.tls_done_ns = stamps.tls_ns
                rec.new_connection = True
                self.conn = conn
                self._reader = asyncio.create_task(self._read(conn))
            return self.conn

    async def _read(self, conn: ClientConnection) -> None:
        code = 1006
        try:
            async for raw in conn:
                queue = self.queues.get(lane_of(raw))
                if queue is not None:
                    queue.put_nowait((raw, *arrival(conn)))
            code = close_code(conn.protocol.close_rcvd)
        except websockets.exceptions.ConnectionClosed as exc:
            code = close_code(exc.rcvd)
        finally:
            if self.conn is conn:
                self.conn = None
            # Every lane waiting on this connection learns it is gone.
            for queue in self.queues.values():
                queue.put_nowait((None, code, 0))

    async def release(self, lane: str | None) -> None:
        self.queues.pop(lane, None)
        if self.queues:
            return
        conn, self.conn = self.conn, None
        reader, self._reader = self._reader, None
        if conn is not None:
            # Closing a broken socket may fail in many ways; it is gone either way.
            with contextlib.suppress(Exception):
                await conn.close()
        if reader is not None:
            reader.cancel()
            with contextlib.suppress(BaseException):
                await reader


class WsLaneSession:
    """One conversation of a rollout on a lane of the rollout's shared connection."""

    def __init__(self, mux: LaneMux, lane: str | None) -> None:
        self.mux = mux
        self.stream_id = lane
        t = mux.t
        options = t.options
        self.conv = Conversation(t.spec, options.recover_from, options.shaping, options.tokens)
        self.compact_headers = session_headers(options.shaping, mux.rollout_key)
        self.url = options.ws_url + self.conv.ws_query
        self.queue: asyncio.Queue[tuple[str | bytes | None, int, int]] = asyncio.Queue()
        mux.queues[lane] = self.queue

    def lane(self, conversation: int) -> WsLaneSession:
        """A sub-agent's session: a lane of its own on the same connection."""
        return WsLaneSession(self.mux, f"subagent-{conversation}")

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        if inp.compaction:
            http = self.mux.t.http
            headers = [*http.headers, *self.compact_headers]
            return await compact(http.pool, headers, self.conv, inp, rec)
        turn = self.conv.ws_turn(inp, rec)
        timeout_s = self.mux.t.options.request_timeout_s
        queue = self.queue
        while True:
            conn = self.mux.conn or await self.mux.connection(rec, self.url)
            payload = turn.request()
            if self.stream_id is not None:
                # The body is a JSON object: the lane goes in as its first key.
                payload = f'{{"stream_id":{dumps(self.stream_id).decode()},{payload[1:]}'
                rec.bytes_sent = len(payload)
            while not queue.empty():
                queue.get_nowait()  # what a failed response or a closed connection left
            stream = turn.start(time.perf_counter_ns())
            try:
                try:
                    await conn.send(payload)
                except websockets.exceptions.ConnectionClosed as exc:
                    raise WsClosed(close_code(exc.rcvd)) from exc
                await _read_lane(queue, stream, timeout_s)
            except (APIError, WsClosed) as exc:
                # Raises when the turn must fail; a reconnect opens a new shared connection
                # once the reader saw this one close.
                turn.recover(exc)
                continue
            return turn.finish()

    async def close(self) -> None:
        await self.mux.release(self.stream_id)


async def _read_lane(
    queue: asyncio.Queue[tuple[str | bytes | None, int, int]],
    stream: ResponseStream,
    idle_timeout_s: float | None,
) -> None:
    """:func:`read_response` for one lane: its events, as the connection's reader stamped them."""
    loop = asyncio.get_running_loop()
    try:
        async with asyncio.timeout(idle_timeout_s) as timer:
            while True:
                raw, t_ns, user_ns = await queue.get()
                if raw is None:
                    raise WsClosed(t_ns)
                if idle_timeout_s:
                    timer.reschedule(loop.time() + idle_timeout_s)
                feed_ws_message(stream, raw, t_ns, user_ns)
                if stream.done:
                    return
    except TimeoutError:
        raise TransportError(
            ErrorKind.TIMEOUT, f"WebSocket: no event for {idle_timeout_s:g} s (request_timeout_s)"
        ) from None
