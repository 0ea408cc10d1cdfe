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
import time

import websockets
from websockets.asyncio.client import ClientConnection, connect
from websockets.frames import Close

from harness.client.api_errors import ws_open_failure
from harness.client.bodies import ws_headers
from harness.client.conversation import Conversation
from harness.client.options import TransportOptions
from harness.client.receive import feed_ws_message
from harness.client.recovery import Recovery
from harness.client.stream import ResponseStream
from harness.transports.tls import tls_context
from harness.transports.ws_stamp import StampedConnection, arrival_ns
from harness.wire.errors import APIError, ErrorKind, TransportError, WsClosed
from harness.wire.sse import MAX_EVENT_BYTES
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


async def open_ws(options: TransportOptions, url: str) -> ClientConnection:
    """Open a WebSocket the way the measurement path needs it (or raise TransportError)."""
    try:
        # Compression off and no keepalive pings: the measurement path must not pay for either.
        return await connect(
            url,
            additional_headers=ws_headers(options),
            compression=None,
            # A Responses event holding a whole 1,000,000-token answer is ~5 MiB: a larger
            # message is a hostile or broken peer (close 1009), not one to buffer.
            max_size=MAX_EVENT_BYTES,
            ping_interval=None,
            open_timeout=options.connect_timeout_s,
            close_timeout=2,
            # Messages are stamped at the I/O edge, not when the loop gets round to them.
            create_connection=StampedConnection,
            # Direct, like the HTTP transports: a proxy would be measured too, and looking
            # one up scans the environment on every connect.
            proxy=None,
            # websockets refuses an ssl argument for ws://; for wss:// it is what --insecure sets.
            ssl=tls_context(options.verify_tls) if url.startswith("wss://") else None,
        )
    except (OSError, websockets.exceptions.WebSocketException, TimeoutError) as exc:
        raise ws_open_failure(exc, url) from exc


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
                t_ns = arrival_ns(conn)
                if idle_ns and t_ns >= next_push:
                    timer.reschedule(loop.time() + idle_ns / 1e9)
                    next_push = t_ns + idle_ns // 8
                feed_ws_message(stream, raw, t_ns)
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

    async def session(self) -> WsSession:
        return WsSession(self)

    async def aclose(self) -> None:
        return None


class WsSession:
    def __init__(self, transport: WsTransport) -> None:
        self.t = transport
        self.conv = Conversation(transport.spec)
        self.url = transport.options.ws_url + self.conv.ws_query
        self.conn: ClientConnection | None = None

    async def _connect(self, rec: TurnRecord) -> ClientConnection:
        conn = await open_ws(self.t.options, self.url)
        rec.connected_ns = time.perf_counter_ns()
        rec.new_connection = True
        self.conn = conn
        return conn

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
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
