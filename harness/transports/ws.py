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
import re
import socket
import time
from dataclasses import dataclass

import websockets
from websockets.uri import parse_uri

from harness.client.api_errors import ws_open_failure
from harness.client.bodies import ws_headers
from harness.client.conversation import Conversation, on_lane
from harness.client.options import TransportOptions
from harness.client.receive import feed_ws_message
from harness.client.recovery import Recovery
from harness.client.shaping import session_headers
from harness.client.stream import ResponseStream
from harness.transports.http import HttpTransport, compact
from harness.transports.rx_socket import stamped_transport, tcp_socket
from harness.transports.tls import tls_context
from harness.transports.ws_conn import WsConnection
from harness.wire.errors import APIError, ErrorKind, TransportError, WsClosed
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


async def open_ws(options: TransportOptions, url: str) -> WsConnection:
    """Open a WebSocket the way the measurement path needs it (or raise TransportError)."""
    conn, _ = await open_ws_timed(options, url)
    return conn


async def open_ws_timed(
    options: TransportOptions, url: str, rollout_key: str | None = None
) -> tuple[WsConnection, ConnectStamps]:
    """:func:`open_ws`, with when its TCP connect and TLS handshake ended.

    The TCP socket is connected here, then wrapped (TLS for ``wss://``; a kernel-stamping
    transport for ``ws://`` with ``--rx-stamp kernel``, docs/metrics.md §1.9) and upgraded:
    the three are timed apart.  No compression, no keepalive pings, no proxy: the
    measurement path pays for none of them, as the HTTP transports do not.
    """
    uri = parse_uri(url)
    # Before the clock starts: the first call loads the CA store (milliseconds).
    ctx = tls_context(options.verify_tls) if uri.secure else None
    headers = ws_headers(options, session_headers(options.shaping, rollout_key))
    loop = asyncio.get_running_loop()
    sock: socket.socket | None = None
    # A Responses event holding a whole 1,000,000-token answer is ~5 MiB: a larger message
    # is a hostile or broken peer (close 1009), not one to buffer.
    conn = WsConnection(uri, MAX_EVENT_BYTES)
    started = time.perf_counter_ns()
    try:
        async with asyncio.timeout(options.connect_timeout_s):
            sock = await tcp_socket(uri.host, uri.port)
            tcp_ns = time.perf_counter_ns()
            stamped = (
                options.rx_stamp == "kernel"
                and ctx is None
                and stamped_transport(loop, sock, conn) is not None
            )
            if not stamped:
                await loop.create_connection(
                    lambda: conn,
                    sock=sock,
                    ssl=ctx,
                    server_hostname=uri.host if ctx is not None else None,
                )
            await conn.handshake(headers)
    except BaseException as exc:
        conn.abort()
        if sock is not None:
            sock.close()  # a no-op once the transport owns (and has closed) it
        if isinstance(exc, (OSError, websockets.exceptions.WebSocketException, TimeoutError)):
            raise ws_open_failure(exc, url) from exc
        raise
    tls_ns = conn.made_ns if ctx is not None else 0
    return conn, ConnectStamps(started, tcp_ns, tls_ns)


async def _open_for_turn(
    rec: TurnRecord, options: TransportOptions, url: str, rollout_key: str | None
) -> WsConnection:
    """:func:`open_ws_timed`, its stamps those of the turn that needed the new connection."""
    conn, stamps = await open_ws_timed(options, url, rollout_key)
    rec.connected_ns = time.perf_counter_ns()
    rec.connect_start_ns = stamps.start_ns
    rec.tcp_connected_ns = stamps.tcp_ns
    rec.tls_done_ns = stamps.tls_ns
    rec.new_connection = True
    return conn


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


class _WsConversation:
    """A conversation over a WebSocket, however its connection is held: a compaction goes
    over HTTP, a recorded warm-up first, then each turn's attempts until one finishes.
    The subclasses say how a connection is had, read and given up."""

    def __init__(
        self, transport: WsTransport, rollout_key: str | None, stream_id: str | None
    ) -> None:
        self.t = transport
        options = transport.options
        self.rollout_key = rollout_key
        #: the lane of a multiplexed connection (None: the default lane, or a connection alone)
        self.stream_id = stream_id
        self.conv = Conversation(
            transport.spec, options.recover_from, options.shaping, options.tokens
        )
        #: added to a compaction's HTTP request (the WebSocket handshake carries them too)
        self.compact_headers = session_headers(options.shaping, rollout_key)
        self.url = options.ws_url + self.conv.ws_query

    async def _connection(self, rec: TurnRecord) -> WsConnection:
        raise NotImplementedError

    def _forget_stale(self) -> None:
        """Before a send: drop what an earlier attempt left unread."""

    async def _receive(self, conn: WsConnection, stream: ResponseStream, timeout_s: float) -> None:
        raise NotImplementedError

    async def _lost(self, action: Recovery | None) -> None:
        """After a failed attempt (``action``: the turn's recovery; None: the warm-up's)."""

    async def _before_compaction(self) -> None:
        pass

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        if inp.compaction:
            await self._before_compaction()
            http = self.t.http
            headers = [*http.headers, *self.compact_headers]
            return await compact(http.pool, headers, self.conv, inp, rec)
        warmup = self.conv.ws_warmup(inp)
        if warmup is not None:
            await self._warm_up(warmup, rec)
        turn = self.conv.ws_turn(inp, rec)
        timeout_s = self.t.options.request_timeout_s
        while True:
            conn = await self._connection(rec)
            payload = turn.request(self.stream_id)
            self._forget_stale()
            stream = turn.start(time.perf_counter_ns())
            conn.expect_output(stream)
            try:
                await conn.send(payload)
                await self._receive(conn, stream, timeout_s)
            except (APIError, WsClosed) as exc:
                # turn.recover raises when the turn must fail instead
                await self._lost(turn.recover(exc))
                continue
            finally:
                conn.output_seen(stream)
            return turn.finish()

    async def _warm_up(self, payload: bytes, rec: TurnRecord) -> None:
        """Send the recorded warm-up on the rollout's connection and wait for its answer."""
        conn = await self._connection(rec)
        payload = on_lane(payload, self.stream_id)
        self._forget_stale()
        stream = ResponseStream(time.perf_counter_ns(), tokens=self.conv.tokens)
        try:
            await conn.send(payload)
            await self._receive(conn, stream, self.t.options.request_timeout_s)
        except (APIError, WsClosed):
            # No warm-up then: the turn goes out whole, as a client whose warm-up failed
            # sends it.
            await self._lost(None)
            return
        self.conv.warmed(stream)


class WsSession(_WsConversation):
    """A conversation on a connection of its own."""

    def __init__(self, transport: WsTransport, rollout_key: str | None = None) -> None:
        super().__init__(transport, rollout_key, None)
        self.conn: WsConnection | None = None

    async def _connection(self, rec: TurnRecord) -> WsConnection:
        if self.conn is None:
            self.conn = await _open_for_turn(rec, self.t.options, self.url, self.rollout_key)
        return self.conn

    async def _receive(self, conn: WsConnection, stream: ResponseStream, timeout_s: float) -> None:
        await conn.read_into(stream, timeout_s)

    async def _lost(self, action: Recovery | None) -> None:
        # A full resend may go out on the same connection; anything else on a fresh one.
        if action is not Recovery.RESEND_FULL:
            await self._drop()

    async def _before_compaction(self) -> None:
        if self.conv.spec.append:
            # The rollout's response is paused on this connection, waiting for tool
            # outputs that will not come: the compacted history starts on a new one.
            await self._drop()

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
        self.conn: WsConnection | None = None
        self.queues: dict[str | None, asyncio.Queue[tuple[str | bytes | None, int, int]]] = {}
        self._reader: asyncio.Task[None] | None = None
        self._opening = asyncio.Lock()

    async def connection(self, rec: TurnRecord, url: str) -> WsConnection:
        async with self._opening:
            if self.conn is None:
                conn = await _open_for_turn(rec, self.t.options, url, self.rollout_key)
                self.conn = conn
                self._reader = asyncio.create_task(self._read(conn))
            return self.conn

    async def _read(self, conn: WsConnection) -> None:
        code = 1006
        try:
            while True:
                raw, t_ns, user_ns = await conn.recv()
                queue = self.queues.get(lane_of(raw))
                if queue is not None:
                    queue.put_nowait((raw, t_ns, user_ns))
        except WsClosed as exc:
            code = exc.code
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


class WsLaneSession(_WsConversation):
    """One conversation of a rollout on a lane of the rollout's shared connection."""

    def __init__(self, mux: LaneMux, lane: str | None) -> None:
        super().__init__(mux.t, mux.rollout_key, lane)
        self.mux = mux
        self.queue: asyncio.Queue[tuple[str | bytes | None, int, int]] = asyncio.Queue()
        mux.queues[lane] = self.queue

    def lane(self, conversation: int) -> WsLaneSession:
        """A sub-agent's session: a lane of its own on the same connection."""
        return WsLaneSession(self.mux, f"subagent-{conversation}")

    async def _connection(self, rec: TurnRecord) -> WsConnection:
        # A reconnect opens a new shared connection once the reader saw this one close.
        return self.mux.conn or await self.mux.connection(rec, self.url)

    def _forget_stale(self) -> None:
        queue = self.queue
        while not queue.empty():
            queue.get_nowait()  # what a failed response or a closed connection left

    async def _receive(self, conn: WsConnection, stream: ResponseStream, timeout_s: float) -> None:
        await _read_lane(conn, self.queue, stream, timeout_s)

    async def close(self) -> None:
        await self.mux.release(self.stream_id)


async def _read_lane(
    conn: WsConnection,
    queue: asyncio.Queue[tuple[str | bytes | None, int, int]],
    stream: ResponseStream,
    idle_timeout_s: float | None,
) -> None:
    """:meth:`WsConnection.read_into` for one lane: its events, as the connection's reader
    stamped them."""
    loop = asyncio.get_running_loop()
    waiting = True  # for the first visible output: the connection reads frame by frame
    try:
        async with asyncio.timeout(idle_timeout_s) as timer:
            while True:
                raw, t_ns, user_ns = await queue.get()
                if raw is None:
                    raise WsClosed(t_ns)
                if idle_timeout_s:
                    timer.reschedule(loop.time() + idle_timeout_s)
                feed_ws_message(stream, raw, t_ns, user_ns)
                if waiting and (stream.rec.first_output_ns or stream.done):
                    waiting = False
                    conn.output_seen(stream)
                if stream.done:
                    return
    except TimeoutError:
        raise TransportError(
            ErrorKind.TIMEOUT, f"WebSocket: no event for {idle_timeout_s:g} s (request_timeout_s)"
        ) from None
