"""WebSocket mode: one connection per rollout, ``response.create`` chained by id.

``ws`` sends ``store: false`` (connection-scoped cache only); ``ws-store`` sends
``store: true`` so a cache miss falls back to the server's store.  Recovery, as
DESIGN §3 asks: ``previous_response_not_found`` → resend the full context as a
new chain; a closed connection → reconnect and resend the full context.  Each
recovery is counted and its time recorded on the turn.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection, connect

from harness.core.agent import TurnInput
from harness.core.events import dumps, loads
from harness.core.records import TurnRecord
from harness.core.stream import ResponseStream
from harness.errors import APIError, TransportError
from harness.transports.base import TransportOptions

RECOVERABLE_CLOSE_CODES = frozenset({1001, 1005, 1006, 1011, 1012, 1013, 1015})
MAX_RECOVERIES_PER_TURN = 3


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
        opts = self.t.options
        headers = {"authorization": f"Bearer {opts.api_key}", **opts.extra_headers}
        try:
            # compression off and no keepalive pings: the measurement path must not pay for either.
            conn = await connect(
                opts.ws_url,
                additional_headers=headers,
                compression=None,
                max_size=None,
                ping_interval=None,
                open_timeout=opts.connect_timeout_s,
                close_timeout=2,
            )
        except (OSError, websockets.exceptions.WebSocketException, TimeoutError) as exc:
            raise TransportError("connection", f"WebSocket {opts.ws_url}: {exc!r}") from exc
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
        recovery_started = 0
        for _attempt in range(MAX_RECOVERIES_PER_TURN + 1):
            conn = self.conn or await self._connect(rec)
            payload = dumps(self._body(inp, full)).decode()
            rec.bytes_sent = len(payload)
            if not recovery_started:
                rec.sent_ns = time.perf_counter_ns()
            sent = time.perf_counter_ns()
            stream = ResponseStream(sent)
            try:
                await conn.send(payload)
                async for raw in conn:
                    t_ns = time.perf_counter_ns()
                    event = loads(raw)
                    if event.get("type") == "error" and "sequence_number" not in event:
                        err = event.get("error") or {}
                        raise APIError(
                            int(event.get("status", 400)),
                            err.get("code"),
                            str(err.get("message", "")),
                        )
                    stream.feed(event, t_ns)
                    if stream.done:
                        break
            except APIError as err:
                if err.code == "previous_response_not_found" and not full:
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    full = True
                    continue
                if err.code == "websocket_connection_limit_reached":
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    await self._drop()
                    full = True
                    continue
                raise
            except websockets.exceptions.ConnectionClosed as exc:
                code = exc.rcvd.code if exc.rcvd is not None else 1006
                await self._drop()
                if code in RECOVERABLE_CLOSE_CODES:
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    full = True
                    continue
                raise TransportError(
                    "connection_closed", f"WebSocket closed with code {code}"
                ) from exc
            if not stream.done:
                await self._drop()
                raise TransportError(
                    "truncated_stream", "the WebSocket closed before a terminal event"
                )
            if recovery_started:
                rec.recovery_ns += sent - recovery_started
                # The turn is measured from its first send, recovery included.
                stream.sent_ns = rec.sent_ns
            if stream.response_id and stream.status in ("completed", "incomplete"):
                self.previous_response_id = stream.response_id
            else:
                self.previous_response_id = None
            return stream
        raise TransportError(
            "recovery_exhausted", f"gave up after {MAX_RECOVERIES_PER_TURN} recoveries"
        )

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        self.previous_response_id = None
        if conn is not None:
            # Closing a broken socket may fail in many ways; it is gone either way.
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()
