"""uvicorn protocol classes that tell the app when a request's bytes arrived.

Why, and what they cost and save: docs/server.md, "Under uvicorn: arrival stamps, batched
writes".  Each stamps ``perf_counter_ns`` when ``data_received`` is entered: HTTP in
``scope["loopbench.arrived_ns"]`` (left out for a pipelined request, which waits for the one
before it), WebSocket in ``message["loopbench.arrived_ns"]`` of each ``websocket.receive``.
A WebSocket upgrade is handed, parsed, to :class:`ServerWebSocket` (framed by
harness/wire/ws_frames.py), whose ASGI extension ``loopbench.send_batch`` sends a
``websocket.send`` carrying ``"loopbench.texts"`` (UTF-8 texts) as that many frames in one
write.  They depend on uvicorn internals (the httptools protocol's ``data_received``,
``on_message_begin``, ``handle_websocket_upgrade`` and the request it has parsed).
"""

from __future__ import annotations

import asyncio
import logging
import os
import time
import urllib.parse
from collections import deque
from http import HTTPStatus
from typing import Any

import httptools
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected

from harness.wire import ws_frames as wsf
from reference_server.timer import yield_to_due

ARRIVED_KEY = "loopbench.arrived_ns"
#: ``scope[CONNECTION_KEY]``: ``(loop time the HTTP connection opened, its request number from 1)``
CONNECTION_KEY = "loopbench.connection"
BATCH_EXTENSION = "loopbench.send_batch"
BATCH_KEY = "loopbench.texts"

#: permessage-deflate's largest window either way (2**12 bytes), as uvicorn's own protocols
#: set it: a few KiB of compressor and inflater state per connection instead of a few hundred
_WINDOW_BITS = 12
_log = logging.getLogger("uvicorn.error")


class StampedHttpToolsProtocol(HttpToolsProtocol):
    """httptools protocol that records when each request's first bytes arrived."""

    _arrived_ns = 0
    _opened = 0.0
    _requests = 0

    def connection_made(self, transport: Any) -> None:
        super().connection_made(transport)
        self._opened = self.loop.time()

    def data_received(self, data: bytes) -> None:
        self._arrived_ns = time.perf_counter_ns()
        super().data_received(data)

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self.scope[ARRIVED_KEY] = self._arrived_ns  # type: ignore[literal-required]
        # What the connection is (new, how old) travels with each request, so the app
        # keeps no table of connections it has seen: such a table outlives the
        # connections and grew with every one a soak opened (docs/reliability.md).
        self._requests += 1
        self.scope[CONNECTION_KEY] = (self._opened, self._requests)  # type: ignore[literal-required]

    def handle_websocket_upgrade(self) -> None:
        """Hand the parsed request and the transport to :class:`ServerWebSocket`."""
        self.connections.discard(self)
        headers, repeated = _upgrade_headers(self.headers)
        refused = _check_upgrade(self.scope["method"], headers, repeated)
        if refused is not None:
            self.transport.write(refused)
            self.transport.close()
            return
        url = httptools.parse_url(self.url)
        raw_path = url.path
        path = raw_path.decode("ascii")
        scope = {
            **self.scope,
            "type": "websocket",
            "asgi": {"version": self.asgi_version, "spec_version": "2.4"},
            "scheme": "wss" if self.scheme == "https" else "ws",
            "path": self.root_path + (urllib.parse.unquote(path) if "%" in path else path),
            "raw_path": self.root_path.encode("ascii") + raw_path,
            "query_string": url.query or b"",
            "subprotocols": [
                p.strip()
                for p in headers.get(b"sec-websocket-protocol", b"").decode().split(",")
                if p.strip()
            ],
            "extensions": {"websocket.http.response": {}, BATCH_EXTENSION: {}},
        }
        protocol = self.ws_protocol_class(  # type: ignore[call-arg, misc]
            self.config,
            self.server_state,
            self.app_state,
            scope,
            headers.get(b"sec-websocket-extensions", b""),
        )
        self.transport.set_protocol(protocol)
        protocol.connection_made(self.transport)
        # This protocol is done: the WebSocket protocol owns the transport now.  Its
        # parser's callbacks point back at it: without this, every closed WebSocket
        # connection stayed alive as cyclic garbage, and the young-generation
        # collection that freed a few hundred connections' worth stopped the event loop
        # for 10-35 ms — a late token in every stream (BENCHMARKS.md).
        self.parser = None  # type: ignore[assignment]

    def on_headers_complete(self) -> None:
        super().on_headers_complete()
        # A pipelined request waits for the response before it: its API tier has not started.
        if self.pipeline and self.pipeline[0][0] is self.cycle:
            self.scope.pop(ARRIVED_KEY, None)  # type: ignore[misc]


class ServerWebSocket(asyncio.Protocol):
    """A WebSocket after the upgrade, framed by the project's codec (harness/wire/ws_frames.py).

    The HTTP protocol hands over its parsed request and the transport, so nothing
    is parsed twice.  To the app it is an ASGI WebSocket: the handshake, denial
    responses, text and binary messages, close codes.  Pings are answered here, below
    the app, and a keepalive ping goes out every ``ws_ping_interval`` seconds.
    """

    #: how long a close frame waits for the peer's before the TCP connection is dropped
    close_timeout = 10.0
    #: the graceful shutdown drains these through the app (reference_server/shutdown.py)
    websocket = True

    def __init__(
        self,
        config: Any,
        server_state: Any,
        app_state: dict[str, Any],
        scope: dict[str, Any],
        extensions: bytes = b"",
    ) -> None:
        self.config = config
        self.app = config.loaded_app
        self.loop = asyncio.get_running_loop()
        self.connections = server_state.connections
        self.tasks = server_state.tasks
        self.default_headers = server_state.default_headers
        self.scope = scope
        self.transport: Any = None
        agreed = None
        if config.ws_per_message_deflate and extensions:
            agreed = wsf.negotiate_deflate(extensions.decode("latin-1"), _WINDOW_BITS)
        self.extensions = agreed[0] if agreed else ""
        self.reader = wsf.FrameReader(
            config.ws_max_size, masked=True, deflate=agreed[1] if agreed else None
        )
        self.compressor = wsf.Compressor(agreed[2], mem_level=5) if agreed else None
        self.messages: deque[dict[str, Any]] = deque([{"type": "websocket.connect"}])
        self.waiter: asyncio.Future[None] | None = None
        self.read_paused = False
        self.writable = asyncio.Event()
        self.writable.set()
        self.accepted = False
        # A refusal before the 101: its status and header lines, then its body as it comes.
        self.status = 0
        self.denial: list[bytes] | None = None
        self.denial_body: list[bytes] = []
        self.close_sent = False
        self.disconnected = False
        self.timers: dict[str, asyncio.TimerHandle] = {}
        self.ping_payload: bytes | None = None

    # -- the transport's side -----------------------------------------------------------

    def connection_made(self, transport: Any) -> None:
        self.transport = transport
        self.connections.add(self)
        task = self.loop.create_task(self.run_asgi())
        self.tasks.add(task)
        task.add_done_callback(self.tasks.discard)

    def connection_lost(self, exc: Exception | None) -> None:
        self.connections.discard(self)
        if not self.disconnected:
            self._disconnect(1005 if self.accepted else 1006)
        self.disconnected = True
        self.close_sent = True
        self.writable.set()  # a send waiting for the buffer to drain raises now
        for timer in self.timers.values():
            timer.cancel()
        self.timers.clear()

    def pause_writing(self) -> None:
        self.writable.clear()

    def resume_writing(self) -> None:
        self.writable.set()

    def data_received(self, data: bytes) -> None:
        arrived_ns = time.perf_counter_ns()
        try:
            frames = self.reader.feed(data)
        except wsf.FrameError as exc:
            self._frames(exc.before, arrived_ns)
            self._fail(exc.code, exc.reason)
            return
        self._frames(frames, arrived_ns)

    def _frames(self, frames: list[tuple[int, bytes]], arrived_ns: int) -> None:
        for op, payload in frames:
            if op == wsf.OP_TEXT:
                if self.close_sent:
                    continue  # the close handshake is under way: messages are dropped
                try:
                    text = payload.decode()
                except UnicodeDecodeError:
                    self._fail(1007, "a text message that is not valid UTF-8")
                    return
                self._queue({"type": "websocket.receive", "text": text, ARRIVED_KEY: arrived_ns})
            elif op == wsf.OP_BINARY:
                if not self.close_sent:
                    self._queue({"type": "websocket.receive", "bytes": payload})
            elif op == wsf.OP_PING:
                if not self.close_sent:
                    self._write(wsf.encode_frame(wsf.OP_PONG, payload, masked=False))
            elif op == wsf.OP_PONG:
                if payload == self.ping_payload:
                    self.ping_payload = None
                    self._cancel("pong")
                    self._schedule_ping()
            else:  # close
                if not self.close_sent:
                    # Echo the peer's code (RFC 6455 §5.5.1); the server closes TCP first (§7.1.1).
                    self._write(wsf.encode_frame(wsf.OP_CLOSE, payload[:2], masked=False))
                    self.close_sent = True
                    reason = payload[2:].decode()
                    self._disconnect(wsf.close_code(payload), reason)
                self.transport.close()
                return

    def _queue(self, message: dict[str, Any]) -> None:
        self.messages.append(message)
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(None)
        # The app reads one message at a time: stop reading while it is behind.
        if not self.read_paused and not self.transport.is_closing():
            self.read_paused = True
            self.transport.pause_reading()

    def _disconnect(self, code: int, reason: str = "") -> None:
        self.disconnected = True
        self._queue({"type": "websocket.disconnect", "code": code, "reason": reason})

    def _fail(self, code: int, reason: str) -> None:
        """The peer broke the protocol: close with ``code`` and drop the connection."""
        if not self.close_sent:
            self._write(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(code), masked=False))
            self.close_sent = True
        if not self.disconnected:
            self._disconnect(code, reason)
        self.transport.close()

    def _write(self, data: bytes) -> None:
        if not self.transport.is_closing():
            self.transport.write(data)

    def _cancel(self, name: str) -> None:
        timer = self.timers.pop(name, None)
        if timer is not None:
            timer.cancel()

    # -- keepalive --------------------------------------------------------------------

    def _schedule_ping(self) -> None:
        interval = self.config.ws_ping_interval
        if interval and not self.close_sent:
            self.timers["ping"] = self.loop.call_later(interval, self._ping)

    def _ping(self) -> None:
        self.timers.pop("ping", None)
        if self.close_sent or self.transport.is_closing():
            return
        self.ping_payload = os.urandom(4)
        self._write(wsf.encode_frame(wsf.OP_PING, self.ping_payload, masked=False))
        timeout = self.config.ws_ping_timeout
        if timeout:
            self.timers["pong"] = self.loop.call_later(timeout, self._pong_missing)
        else:
            self._schedule_ping()

    def _pong_missing(self) -> None:
        self.timers.pop("pong", None)
        self._fail(1011, "keepalive ping timeout")

    # -- the app's side ---------------------------------------------------------------

    async def run_asgi(self) -> None:
        try:
            # The handshake and the app's admission are new work: tokens due first.
            await yield_to_due()
            await self.app(self.scope, self.receive, self.send)
        except ClientDisconnected:
            pass
        except BaseException:
            _log.exception("Exception in ASGI application\n")
            self._refuse(500)
        else:
            if not self.accepted and self.denial is None and not self.close_sent:
                _log.error("ASGI callable returned without completing handshake.")
                self._refuse(500)
        if "close" not in self.timers:
            self.transport.close()

    def shutdown(self) -> None:
        """uvicorn's forced shutdown: close 1012 (service restart), or 500 before the 101."""
        for name in ("ping", "pong"):
            self._cancel(name)
        if self.accepted and not self.close_sent:
            self._disconnect(1012)
            self._write(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(1012), masked=False))
            self.close_sent = True
        elif not self.accepted:
            self._refuse(500)
        self.transport.close()

    async def receive(self) -> dict[str, Any]:
        while not self.messages:
            self.waiter = self.loop.create_future()
            await self.waiter
            self.waiter = None
        message = self.messages.popleft()
        if self.read_paused and not self.messages and not self.transport.is_closing():
            self.read_paused = False
            self.transport.resume_reading()
        return message

    async def send(self, message: dict[str, Any]) -> None:
        if not self.writable.is_set():
            await self.writable.wait()
        if self.disconnected and message["type"] == "websocket.send":
            raise ClientDisconnected()
        kind = message["type"]
        if kind == "websocket.send" and self.accepted and not self.close_sent:
            texts = message.get(BATCH_KEY)
            if texts is not None:
                self._write(b"".join([self._frame(wsf.OP_TEXT, t) for t in texts]))
            elif (text := message.get("text")) is not None:
                self._write(self._frame(wsf.OP_TEXT, text.encode()))
            else:
                self._write(self._frame(wsf.OP_BINARY, message.get("bytes") or b""))
        elif kind == "websocket.close" and self.accepted and not self.close_sent:
            code = message.get("code", 1000)
            reason = message.get("reason") or ""
            self._disconnect(code, reason)
            self._write(
                wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(code, reason), masked=False)
            )
            self.close_sent = True
            if self.read_paused:  # the peer's close frame must still be read
                self.read_paused = False
                self.transport.resume_reading()
            self.timers["close"] = self.loop.call_later(self.close_timeout, self.transport.close)
        elif kind == "websocket.accept" and not self.accepted and self.denial is None:
            self._accept(message)
        elif kind == "websocket.close" and not self.accepted and self.denial is None:
            self._refuse(403)
        elif kind == "websocket.http.response.start" and not self.accepted:
            if self.denial is None:
                self.status = message["status"]
                self.denial = [b"%s: %s\r\n" % kv for kv in message.get("headers", ())]
        elif kind == "websocket.http.response.body" and self.denial is not None:
            self.denial_body.append(message.get("body", b""))
            if not message.get("more_body", False):
                self._end_denial()
        elif self.close_sent or self.disconnected:
            raise ClientDisconnected()
        else:
            raise RuntimeError(f"Unexpected ASGI message {kind!r} on this WebSocket.")

    def _frame(self, op: int, payload: bytes) -> bytes:
        if self.compressor is None:
            return wsf.encode_frame(op, payload, masked=False)
        return wsf.encode_frame(op, self.compressor.compress(payload), masked=False, rsv=4)

    def _accept(self, message: dict[str, Any]) -> None:
        if self.transport.is_closing():
            return
        key = dict(self.scope["headers"]).get(b"sec-websocket-key", b"")
        head = [
            b"HTTP/1.1 101 Switching Protocols\r\nupgrade: websocket\r\nconnection: Upgrade\r\n"
            b"sec-websocket-accept: %s\r\n" % wsf.accept_key(key).encode()
        ]
        if self.extensions:
            head.append(b"sec-websocket-extensions: %s\r\n" % self.extensions.encode())
        if message.get("subprotocol"):
            head.append(b"sec-websocket-protocol: %s\r\n" % message["subprotocol"].encode())
        head += [b"%s: %s\r\n" % kv for kv in (*self.default_headers, *message.get("headers", ()))]
        head.append(b"\r\n")
        self._write(b"".join(head))
        self.accepted = True
        self._schedule_ping()

    def _refuse(self, status: int) -> None:
        """A plain HTTP answer instead of the 101 (an error before the handshake completed)."""
        if not self.accepted and not self.close_sent:
            self.denial = [b"content-type: text/plain; charset=utf-8\r\n"]
            self.denial_body = [HTTPStatus(status).phrase.encode()]
            self.status = status
            self._end_denial()

    def _end_denial(self) -> None:
        assert self.denial is not None
        names = {line.split(b":", 1)[0].lower() for line in self.denial}
        head = self.denial + [
            b"%s: %s\r\n" % kv for kv in self.default_headers if kv[0] not in names
        ]
        self._write(http_answer(self.status, head, b"".join(self.denial_body)))
        self.close_sent = True
        if not self.disconnected:
            self._disconnect(1006)
        self.transport.close()


def http_answer(status: int, head: list[bytes], body: bytes) -> bytes:
    """A whole HTTP/1.1 answer that closes the connection; ``head``: header lines with CRLF."""
    try:
        phrase = HTTPStatus(status).phrase
    except ValueError:
        phrase = ""
    if not any(line[:15].lower() == b"content-length:" for line in head):
        head = [*head, b"content-length: %d\r\n" % len(body)]
    return b"".join(
        [f"HTTP/1.1 {status} {phrase}\r\n".encode(), *head, b"connection: close\r\n\r\n", body]
    )


def uvicorn_protocols() -> dict[str, Any]:
    """``http=`` and ``ws=`` arguments for ``uvicorn.Config``."""
    return {"http": StampedHttpToolsProtocol, "ws": ServerWebSocket}


#: may be split over several header lines (RFC 6455 §11.3.2, §11.3.4): joined with commas
_LIST_HEADERS = (b"sec-websocket-extensions", b"sec-websocket-protocol")
#: must come once (§11.3.1, §11.3.5): a second line makes the handshake invalid
_SINGLE_HEADERS = (b"sec-websocket-key", b"sec-websocket-version")


def _upgrade_headers(lines: list[tuple[bytes, bytes]]) -> tuple[dict[bytes, bytes], bool]:
    """An upgrade request's header lines by name, and whether a single-use one came twice."""
    headers: dict[bytes, bytes] = {}
    repeated = False
    for name, value in lines:
        if name in headers and name in _LIST_HEADERS:
            headers[name] += b", " + value
            continue
        repeated = repeated or (name in headers and name in _SINGLE_HEADERS)
        headers[name] = value
    return headers, repeated


def _check_upgrade(method: str, headers: dict[bytes, bytes], repeated: bool) -> bytes | None:
    """A refusal of an upgrade request that is not a WebSocket handshake (RFC 6455 §4.2.1)."""
    if repeated:
        reason, extra, status = (
            "invalid WebSocket handshake (Sec-WebSocket-Key or Sec-WebSocket-Version sent twice)",
            [],
            400,
        )
    elif headers.get(b"sec-websocket-version") != b"13":
        reason = "unsupported WebSocket version (13 is the one supported)"
        extra = [b"sec-websocket-version: 13\r\n"]
        status = 426
    elif method != "GET" or not wsf.valid_key(headers.get(b"sec-websocket-key", b"")):
        reason, extra, status = "invalid WebSocket handshake (GET with a 16-byte key)", [], 400
    else:
        return None
    body = f"Failed to open a WebSocket connection: {reason}.\n".encode()
    return http_answer(status, [*extra, b"content-type: text/plain; charset=utf-8\r\n"], body)
