"""WebSocket mode: one connection per rollout, ``response.create`` chained by id.

``ws`` sends ``store: false`` (connection-scoped cache only); ``ws-store`` sends
``store: true`` so a cache miss falls back to the server's store.  Recovery, as
docs/architecture.md asks, with every recovery counted and timed on the turn record:

* ``previous_response_not_found`` → resend the full context as a new chain;
* ``websocket_connection_limit_reached`` or a recoverable close code (1001,
  1005, 1006, 1011, 1012, 1013, 1015, as the official SDK treats them) →
  reconnect and continue: ``ws`` resends the full context (the new socket has
  no cache), ``ws-store`` keeps chaining by id (the server falls back to its store).

The recovery time of a turn runs from its first send to the send that
succeeded; the turn's latency includes it.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection, connect

from harness.client.stream import ResponseStream
from harness.transports.base import TransportOptions
from harness.transports.ws_stamp import StampedConnection, arrival_ns
from harness.wire.errors import APIError, TransportError
from harness.wire.events import dumps, loads
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord

RECOVERABLE_CLOSE_CODES = frozenset({1001, 1005, 1006, 1011, 1012, 1013, 1015})
RECONNECT_CODES = frozenset({"websocket_connection_limit_reached"})
MAX_RECOVERIES_PER_TURN = 3


async def open_ws(options: TransportOptions, url: str) -> ClientConnection:
    """Open a WebSocket the way the measurement path needs it (or raise TransportError)."""
    headers = {"authorization": f"Bearer {options.api_key}", **options.extra_headers}
    try:
        # Compression off and no keepalive pings: the measurement path must not pay for either.
        return await connect(
            url,
            additional_headers=headers,
            compression=None,
            max_size=None,
            ping_interval=None,
            open_timeout=options.connect_timeout_s,
            close_timeout=2,
            # Messages are stamped at the I/O edge, not when the loop gets round to them.
            create_connection=StampedConnection,
            # Direct, like the HTTP transports: a proxy would be measured too, and looking
            # one up scans the environment on every connect.
            proxy=None,
        )
    except (OSError, websockets.exceptions.WebSocketException, TimeoutError) as exc:
        raise TransportError("connection", f"WebSocket {url}: {exc!r}") from exc


async def read_response(
    conn: ClientConnection, stream: ResponseStream, idle_timeout_s: float | None = None
) -> None:
    """Feed events into ``stream`` until it is done (a terminal event or a pause).

    A connection-level ``error`` event (one without ``sequence_number``) is raised
    as :class:`APIError`; errors inside a response are the stream's business.
    With ``idle_timeout_s``, a response silent for that long (between 7/8 of it
    and all of it) raises ``TransportError("timeout")``, as an HTTP read times out.
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
                event = loads(raw)
                if event.get("type") == "error" and "sequence_number" not in event:
                    err = event.get("error") or {}
                    raise APIError(
                        int(event.get("status", 400)), err.get("code"), str(err.get("message", ""))
                    )
                stream.feed(event, t_ns)
                if stream.done:
                    return
    except TimeoutError:
        raise TransportError(
            "timeout", f"WebSocket: no event for {idle_timeout_s:g} s (request_timeout_s)"
        ) from None
    # Iteration ends quietly on a 1000/1001 close; the caller decides by the code.
    proto = conn.protocol
    raise websockets.exceptions.ConnectionClosedOK(proto.close_rcvd, proto.close_sent)


def close_code(exc: websockets.exceptions.ConnectionClosed) -> int:
    return exc.rcvd.code if exc.rcvd is not None else 1006


class WsTransport:
    def __init__(self, options: TransportOptions, *, store: bool = False) -> None:
        self.name = "ws-store" if store else "ws"
        self.options = options
        self.store = store

    async def session(self) -> WsSession:
        return WsSession(self)

    async def aclose(self) -> None:
        return None


class WsSession:
    def __init__(self, transport: WsTransport) -> None:
        self.t = transport
        self.conn: ClientConnection | None = None
        self.previous_response_id: str | None = None
        self.connections = 0

    async def _connect(self, rec: TurnRecord) -> ClientConnection:
        conn = await open_ws(self.t.options, self.t.options.ws_url)
        rec.connected_ns = time.perf_counter_ns()
        rec.new_connection = True
        self.connections += 1
        self.conn = conn
        return conn

    def _body(self, inp: TurnInput, full: bool) -> dict[str, Any]:
        body: dict[str, Any] = {
            "type": "response.create",
            "model": inp.model,
            "instructions": inp.instructions,
            "tools": inp.tools,
            "tool_choice": inp.tool_choice,
            "metadata": inp.metadata,
            "max_output_tokens": inp.max_output_tokens,
            "store": self.t.store,
        }
        if full or self.previous_response_id is None:
            body["input"] = inp.history
        else:
            body["input"] = inp.new_items
            body["previous_response_id"] = self.previous_response_id
        return body

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        full = False
        first_send = 0
        for _attempt in range(MAX_RECOVERIES_PER_TURN + 1):
            conn = self.conn or await self._connect(rec)
            payload = dumps(self._body(inp, full)).decode()
            rec.bytes_sent = len(payload)
            sent = time.perf_counter_ns()
            if not first_send:
                first_send = rec.sent_ns = sent
            stream = ResponseStream(sent)
            try:
                await conn.send(payload)
                await read_response(conn, stream, self.t.options.request_timeout_s)
            except APIError as err:
                if err.code == "previous_response_not_found" and not full:
                    rec.recoveries += 1
                    full = True
                    continue
                if err.code in RECONNECT_CODES:
                    rec.recoveries += 1
                    await self._drop(keep_chain=self.t.store)
                    full = not self.t.store
                    continue
                raise
            except websockets.exceptions.ConnectionClosed as exc:
                code = close_code(exc)
                await self._drop(keep_chain=self.t.store)
                if code in RECOVERABLE_CLOSE_CODES:
                    rec.recoveries += 1
                    full = not self.t.store
                    continue
                raise TransportError(
                    "connection_closed", f"WebSocket closed with code {code}"
                ) from exc
            if sent != first_send:
                rec.recovery_ns += sent - first_send
                # The turn is measured from its first send, recovery included.
                stream.sent_ns = first_send
            if stream.response_id and stream.status in ("completed", "incomplete"):
                self.previous_response_id = stream.response_id
            else:
                self.previous_response_id = None
            return stream
        raise TransportError(
            "recovery_exhausted", f"gave up after {MAX_RECOVERIES_PER_TURN} recoveries in one turn"
        )

    async def _drop(self, *, keep_chain: bool = False) -> None:
        conn, self.conn = self.conn, None
        if not keep_chain:
            self.previous_response_id = None
        if conn is not None:
            # Closing a broken socket may fail in many ways; it is gone either way.
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()
