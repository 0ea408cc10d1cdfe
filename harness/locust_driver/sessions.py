"""The transports of docs/architecture.md as blocking sessions, for the gevent world.

Same requests, same recovery rules and the same stream state machine
(:class:`~harness.client.stream.ResponseStream`) as :mod:`harness.transports`;
only the I/O differs (see :mod:`.http_client`, :mod:`.ws_client`).  A session
lives as long as one Locust user, so HTTP keep-alive connections are reused
across that user's rollouts while each rollout opens its own WebSocket, as in
``loopbench run``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

from harness.client.stream import ResponseStream
from harness.locust_driver.http_client import HttpConnection
from harness.locust_driver.net import Endpoint, now_ns
from harness.locust_driver.ws_client import WsClosed, WsConnection
from harness.wire.errors import APIError, LoopbenchError, TransportError
from harness.wire.events import dumps, loads
from harness.wire.sse import SSEDecoder
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord

#: transports this driver speaks (the append prototype and SDK transports are asyncio-only)
LOCUST_TRANSPORTS = ("http", "http-chained", "ws", "ws-store")
RECOVERABLE_CLOSE_CODES = frozenset({1001, 1005, 1006, 1011, 1012, 1013, 1015})
MAX_RECOVERIES_PER_TURN = 3


@dataclass(frozen=True, slots=True)
class ClientOptions:
    base_url: str
    api_key: str = "sk-loopbench"
    keepalive: bool = True
    verify_tls: bool = True
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 120.0
    extra_headers: dict[str, str] = field(default_factory=dict)

    @property
    def headers(self) -> dict[str, str]:
        return {"authorization": f"Bearer {self.api_key}", **self.extra_headers}


class Session(Protocol):
    name: str

    def start_rollout(self) -> None: ...

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream: ...

    def end_rollout(self) -> None: ...

    def close(self) -> None: ...


def make_session(name: str, options: ClientOptions) -> Session:
    if name == "http":
        return HttpSession(options, chained=False)
    if name == "http-chained":
        return HttpSession(options, chained=True)
    if name == "ws":
        return WsSession(options, store=False)
    if name == "ws-store":
        return WsSession(options, store=True)
    raise TransportError(
        "usage", f"transport {name!r}: expected one of {', '.join(LOCUST_TRANSPORTS)}"
    )


def _request_fields(inp: TurnInput) -> dict[str, Any]:
    return {
        "model": inp.model,
        "instructions": inp.instructions,
        "tools": inp.tools,
        "tool_choice": inp.tool_choice,
        "metadata": inp.metadata,
        "max_output_tokens": inp.max_output_tokens,
    }


def _api_error(status: int, body: bytes) -> APIError:
    try:
        err = loads(body).get("error") or {}
        return APIError(
            status, err.get("code") or err.get("type"), str(err.get("message", ""))[:500]
        )
    except LoopbenchError:
        return APIError(status, None, body[:200].decode("utf-8", "replace"))


class HttpSession:
    """``http`` (whole history, ``store: false``) or ``http-chained`` (id + new items)."""

    def __init__(self, options: ClientOptions, *, chained: bool) -> None:
        self.name = "http-chained" if chained else "http"
        self.chained = chained
        self.options = options
        self.conn = HttpConnection(
            Endpoint.from_url(options.base_url),
            headers={**options.headers, "content-type": "application/json"},
            keepalive=options.keepalive,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.request_timeout_s,
            verify_tls=options.verify_tls,
        )
        self.previous_response_id: str | None = None

    def start_rollout(self) -> None:
        self.previous_response_id = None

    def end_rollout(self) -> None:
        self.previous_response_id = None

    def body(self, inp: TurnInput) -> dict[str, Any]:
        body = {**_request_fields(inp), "stream": True}
        if self.chained and self.previous_response_id is not None:
            body["input"] = inp.new_items
            body["previous_response_id"] = self.previous_response_id
            body["store"] = True
        else:
            body["input"] = inp.history
            body["store"] = self.chained
        return body

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        payload = dumps(self.body(inp))
        rec.bytes_sent = len(payload)
        decoder = SSEDecoder()
        rec.sent_ns = now_ns()
        stream = ResponseStream(rec.sent_ns)
        exchange = self.conn.post("/responses", payload)
        rec.new_connection = exchange.new_connection
        rec.connected_ns = exchange.connected_ns
        if exchange.status >= 400:
            raise _api_error(exchange.status, exchange.read_all())
        try:
            for t_ns, chunk in exchange.chunks:
                # Keep reading after the terminal event so the connection ends its
                # exchange cleanly and can be kept alive.
                if stream.done:
                    continue
                for msg in decoder.feed(chunk):
                    if not stream.done and not msg.data.startswith("[DONE]"):
                        stream.feed(loads(msg.data), t_ns)
        finally:
            exchange.chunks.close()
        if not stream.done:
            raise TransportError("truncated_stream", "the SSE stream ended before a terminal event")
        if stream.response_id and stream.status in ("completed", "incomplete"):
            self.previous_response_id = stream.response_id
        return stream

    def close(self) -> None:
        self.conn.close()


class WsSession:
    """``ws`` / ``ws-store``: one WebSocket per rollout, ``response.create`` chained by id."""

    def __init__(self, options: ClientOptions, *, store: bool) -> None:
        self.name = "ws-store" if store else "ws"
        self.store = store
        self.options = options
        self.endpoint = Endpoint.from_url(options.base_url)
        self.conn: WsConnection | None = None
        self.previous_response_id: str | None = None

    def start_rollout(self) -> None:
        self._drop()

    def end_rollout(self) -> None:
        self._drop()

    def _connect(self, rec: TurnRecord) -> WsConnection:
        opts = self.options
        conn = WsConnection(
            self.endpoint,
            "/responses",
            headers=opts.headers,
            connect_timeout_s=opts.connect_timeout_s,
            read_timeout_s=opts.request_timeout_s,
            verify_tls=opts.verify_tls,
        )
        rec.connected_ns = conn.connected_ns
        rec.new_connection = True
        self.conn = conn
        return conn

    def body(self, inp: TurnInput, full: bool) -> dict[str, Any]:
        body = {"type": "response.create", **_request_fields(inp), "store": self.store}
        if full or self.previous_response_id is None:
            body["input"] = inp.history
        else:
            body["input"] = inp.new_items
            body["previous_response_id"] = self.previous_response_id
        return body

    def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        full = False
        recovery_started = 0
        for _attempt in range(MAX_RECOVERIES_PER_TURN + 1):
            conn = self.conn or self._connect(rec)
            payload = dumps(self.body(inp, full)).decode()
            rec.bytes_sent = len(payload)
            sent = now_ns()
            if not recovery_started:
                rec.sent_ns = sent
            stream = ResponseStream(sent)
            try:
                conn.send_text(payload)
                while not stream.done:
                    t_ns, raw = conn.recv()
                    event = loads(raw)
                    if event.get("type") == "error" and "sequence_number" not in event:
                        err = event.get("error") or {}
                        raise APIError(
                            int(event.get("status", 400)),
                            err.get("code"),
                            str(err.get("message", "")),
                        )
                    stream.feed(event, t_ns)
            except APIError as err:
                if err.code == "previous_response_not_found" and not full:
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    full = True
                    continue
                if err.code == "websocket_connection_limit_reached":
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    self._drop()
                    full = True
                    continue
                raise
            except WsClosed as exc:
                self._drop()
                if exc.code in RECOVERABLE_CLOSE_CODES:
                    recovery_started = recovery_started or sent
                    rec.recoveries += 1
                    full = True
                    continue
                raise TransportError("connection_closed", str(exc)) from exc
            except TimeoutError as exc:
                self._drop()
                raise TransportError("timeout", f"WebSocket {conn.url}: no event in time") from exc
            except OSError as exc:
                self._drop()
                raise TransportError("connection", f"WebSocket {conn.url}: {exc!r}") from exc
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

    def _drop(self) -> None:
        conn, self.conn = self.conn, None
        self.previous_response_id = None
        if conn is not None:
            conn.close()

    def close(self) -> None:
        self._drop()
