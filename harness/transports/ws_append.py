"""``ws-append``: the append prototype (docs/protocol.md §5), one response per rollout.

The session opens its WebSocket with ``?mode=append``.  The first turn sends a
``response.create`` with the whole context; the server samples, streams the
function calls and pauses the response with ``response.done``
(``status: "in_progress"``).  Each later turn sends ``response.append`` with the
tool outputs (and, as a loopbench extension, that turn's ``metadata`` and
``tool_choice`` so the replayed rollout keeps its shape); the same response
resumes and its sequence numbers continue.  Each segment is one turn record.

Recovery: a recoverable close, or an append the server no longer knows
(``response_not_found``, ``response_not_paused``), restarts the rollout's
response with the full context on a (new) connection.  Counted and timed as in
:mod:`harness.transports.ws`.
"""

from __future__ import annotations

import contextlib
import time
from typing import Any

import websockets
from websockets.asyncio.client import ClientConnection

from harness.client.stream import ResponseStream
from harness.transports.base import TransportOptions
from harness.transports.ws import (
    MAX_RECOVERIES_PER_TURN,
    RECONNECT_CODES,
    RECOVERABLE_CLOSE_CODES,
    close_code,
    open_ws,
    read_response,
)
from harness.wire.errors import APIError, TransportError
from harness.wire.events import dumps
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord

RESTART_CODES = frozenset({"response_not_found", "response_not_paused", "invalid_append_input"})


class WsAppendTransport:
    name = "ws-append"

    def __init__(self, options: TransportOptions) -> None:
        self.options = options
        self.url = options.ws_url + "?mode=append"

    async def session(self) -> WsAppendSession:
        return WsAppendSession(self)

    async def aclose(self) -> None:
        return None


class WsAppendSession:
    def __init__(self, transport: WsAppendTransport) -> None:
        self.t = transport
        self.conn: ClientConnection | None = None
        self.stream: ResponseStream | None = None  # the rollout's response while it is paused

    async def _connect(self, rec: TurnRecord) -> ClientConnection:
        conn = await open_ws(self.t.options, self.t.url)
        rec.connected_ns = time.perf_counter_ns()
        rec.new_connection = True
        self.conn = conn
        return conn

    @staticmethod
    def _create(inp: TurnInput) -> dict[str, Any]:
        return {
            "type": "response.create",
            "model": inp.model,
            "instructions": inp.instructions,
            "input": inp.history,
            "tools": inp.tools,
            "tool_choice": inp.tool_choice,
            "metadata": inp.metadata,
            "max_output_tokens": inp.max_output_tokens,
            "store": False,
        }

    @staticmethod
    def _append(inp: TurnInput, response_id: str) -> dict[str, Any]:
        return {
            "type": "response.append",
            "response_id": response_id,
            "input": inp.new_items,
            "metadata": inp.metadata,
            "tool_choice": inp.tool_choice,
        }

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        first_send = 0
        for _attempt in range(MAX_RECOVERIES_PER_TURN + 1):
            conn = self.conn or await self._connect(rec)
            paused = self.stream
            resume = paused is not None and paused.status == "paused" and paused.response_id
            body = self._append(inp, str(paused.response_id)) if resume and paused else None
            payload = dumps(body if body is not None else self._create(inp)).decode()
            rec.bytes_sent = len(payload)
            sent = time.perf_counter_ns()
            if not first_send:
                first_send = rec.sent_ns = sent
            if body is not None and paused is not None:
                stream = paused
                stream.resume(sent)
            else:
                stream = ResponseStream(sent)
            try:
                await conn.send(payload)
                await read_response(conn, stream, self.t.options.request_timeout_s)
            except APIError as err:
                if err.code in RESTART_CODES or err.code in RECONNECT_CODES:
                    rec.recoveries += 1
                    self.stream = None
                    if err.code in RECONNECT_CODES:
                        await self._drop()
                    continue
                raise
            except websockets.exceptions.ConnectionClosed as exc:
                code = close_code(exc)
                await self._drop()
                if code in RECOVERABLE_CLOSE_CODES:
                    rec.recoveries += 1
                    continue
                raise TransportError(
                    "connection_closed", f"WebSocket closed with code {code}"
                ) from exc
            if sent != first_send:
                rec.recovery_ns += sent - first_send
                stream.sent_ns = first_send
            self.stream = stream if stream.status == "paused" else None
            return stream
        raise TransportError(
            "recovery_exhausted", f"gave up after {MAX_RECOVERIES_PER_TURN} recoveries in one turn"
        )

    async def _drop(self) -> None:
        conn, self.conn = self.conn, None
        self.stream = None
        if conn is not None:
            with contextlib.suppress(Exception):
                await conn.close()

    async def close(self) -> None:
        await self._drop()
