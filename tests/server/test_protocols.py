"""reference_server/protocols.py: arrival stamps, batched WebSocket sends, no cyclic garbage.

Each test runs a uvicorn server in its own event loop on a loopback socket bound to
port 0, with a small raw ASGI app that records what it was given (or the real
reference server for the garbage check), and stops it before returning.
"""

from __future__ import annotations

import asyncio
import contextlib
import gc
import socket
import time
from collections import Counter
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, ClassVar

import orjson
import pytest
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.protocols.utils import ClientDisconnected
from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
from websockets.asyncio.client import ClientConnection, connect

from reference_server.app import ReferenceServer
from reference_server.core.config import ServerConfig
from reference_server.protocols import (
    ARRIVED_KEY,
    BATCH_EXTENSION,
    BATCH_KEY,
    CONNECTION_KEY,
    ServerWebSocket,
    StampedHttpToolsProtocol,
    uvicorn_protocols,
)

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
App = Callable[[Scope, Receive, Send], Awaitable[None]]

BATCH = [b"one", b"two", "dr\u00e9i".encode()]


@contextlib.asynccontextmanager
async def serving(
    app: Any,
    *,
    http: type[asyncio.Protocol] = StampedHttpToolsProtocol,
    ws: type[asyncio.Protocol] = ServerWebSocket,
    lifespan: str = "off",
) -> AsyncIterator[int]:
    """Serve ``app`` in this event loop on a free loopback port; yields the port.

    ``startup``/``shutdown`` are awaited directly (no signal handlers, no polling for
    ``started``); uvicorn's shutdown waits for open connections and app tasks to end.
    """
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    config = uvicorn.Config(
        app,
        http=http,
        ws=ws,
        lifespan=lifespan,  # type: ignore[arg-type]
        log_config=None,
        log_level="warning",
        access_log=False,
    )
    config.load()
    server = uvicorn.Server(config)
    server.lifespan = config.lifespan_class(config)
    try:
        await server.startup(sockets=[sock])
        try:
            yield sock.getsockname()[1]
        finally:
            server.should_exit = True
            await asyncio.wait_for(server.shutdown(sockets=[sock]), 15)
    finally:
        sock.close()


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, 20)

    return asyncio.run(bounded())


# -- a small recording app ----------------------------------------------------------------


class Recorder:
    """Raw ASGI app: answers HTTP with ``ok``; echoes WebSocket text, with a few commands."""

    def __init__(self) -> None:
        self.http: list[tuple[Scope, int]] = []  # (scope, perf_counter_ns at app entry)
        self.ws_scopes: list[Scope] = []
        self.received: list[tuple[Message, int]] = []  # (message, perf_counter_ns at receive)
        self.batch_writes: list[int] = []  # transport writes one batch send took
        self.send_errors: list[BaseException] = []

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http":
            await self.http_request(scope, receive, send)
        elif scope["type"] == "websocket":
            await self.websocket(scope, receive, send)

    async def http_request(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.http.append((dict(scope), time.perf_counter_ns()))
        while (await receive()).get("more_body"):
            pass
        await send(
            {
                "type": "http.response.start",
                "status": 200,
                "headers": [(b"content-length", b"2"), (b"content-type", b"text/plain")],
            }
        )
        await send({"type": "http.response.body", "body": b"ok"})

    async def websocket(self, scope: Scope, receive: Receive, send: Send) -> None:
        assert (await receive())["type"] == "websocket.connect"
        self.ws_scopes.append(scope)
        await send({"type": "websocket.accept"})
        while True:
            msg = await receive()
            self.received.append((msg, time.perf_counter_ns()))
            if msg["type"] == "websocket.disconnect":
                return
            text = msg.get("text")
            if text == "batch":
                counter = (
                    _WriteCountingWs.instances[-1].transport if _WriteCountingWs.instances else None
                )
                before = counter.writes if isinstance(counter, _CountingTransport) else 0
                await send({"type": "websocket.send", BATCH_KEY: list(BATCH)})
                after = counter.writes if isinstance(counter, _CountingTransport) else 0
                self.batch_writes.append(after - before)
            elif text == "batch-after-close":
                # Wait for the client to leave, then try a batch: it must not be written.
                while (await receive())["type"] != "websocket.disconnect":
                    pass
                try:
                    await send({"type": "websocket.send", BATCH_KEY: list(BATCH)})
                except BaseException as exc:  # recorded for the assertion
                    self.send_errors.append(exc)
                return
            else:
                await send({"type": "websocket.send", "text": f"echo:{text}"})


class _CountingTransport:
    """Forwards to a real transport and counts ``write`` calls."""

    def __init__(self, inner: asyncio.Transport) -> None:
        self._inner = inner
        self.writes = 0

    def write(self, data: bytes) -> None:
        self.writes += 1
        self._inner.write(data)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)


class _WriteCountingWs(ServerWebSocket):
    instances: ClassVar[list[_WriteCountingWs]] = []

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        type(self).instances.append(self)

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(_CountingTransport(transport))  # type: ignore[arg-type]


def test_the_server_runs_these_protocols() -> None:
    assert uvicorn_protocols() == {"http": StampedHttpToolsProtocol, "ws": ServerWebSocket}


# -- HTTP ---------------------------------------------------------------------------------


async def _http_exchange(port: int, payload: bytes, responses: int) -> tuple[int, bytes]:
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        sent_ns = time.perf_counter_ns()
        writer.write(payload)
        await writer.drain()
        data = b""
        while data.count(b"\r\n\r\nok") < responses:
            chunk = await reader.read(65536)
            assert chunk, f"connection closed after {data!r}"
            data += chunk
        return sent_ns, data
    finally:
        writer.close()
        await writer.wait_closed()


def _get(path: str) -> bytes:
    return f"GET {path} HTTP/1.1\r\nhost: 127.0.0.1\r\n\r\n".encode()


def test_http_scope_carries_arrival_stamp_between_send_and_app_entry() -> None:
    app = Recorder()

    async def main() -> int:
        async with serving(app) as port:
            sent_ns, data = await _http_exchange(port, _get("/first"), 1)
        assert data.startswith(b"HTTP/1.1 200")
        return sent_ns

    sent_ns = run(main())
    assert len(app.http) == 1
    scope, entered_ns = app.http[0]
    stamp = scope[ARRIVED_KEY]
    assert type(stamp) is int
    assert sent_ns <= stamp <= entered_ns


async def _on_one_connection(port: int, paths: tuple[str, ...]) -> list[int]:
    """GET each of ``paths`` in turn on one keep-alive connection; when each was sent."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    sent: list[int] = []
    try:
        for path in paths:
            sent.append(time.perf_counter_ns())
            writer.write(_get(path))
            data = b""
            while not data.endswith(b"ok"):
                chunk = await reader.read(65536)
                assert chunk
                data += chunk
    finally:
        writer.close()
        await writer.wait_closed()
    return sent


def test_http_keep_alive_requests_get_their_own_stamps() -> None:
    app = Recorder()

    async def main() -> list[int]:
        async with serving(app) as port:
            return await _on_one_connection(port, ("/a", "/b"))

    sent = run(main())
    assert [s["path"] for s, _ in app.http] == ["/a", "/b"]
    (first, first_entry), (second, second_entry) = app.http
    assert sent[0] <= first[ARRIVED_KEY] <= first_entry
    # The second request's stamp is its own arrival, not the connection's first bytes.
    assert first_entry < sent[1] <= second[ARRIVED_KEY] <= second_entry


def test_each_request_says_which_of_its_connection_it_is() -> None:
    # The app keeps no table of the connections it has seen (such a table outlived them and
    # grew with every connection a soak opened): each request carries (opened, number).
    app = Recorder()

    async def main() -> None:
        async with serving(app) as port:
            await _on_one_connection(port, ("/a", "/b", "/c"))
            await _on_one_connection(port, ("/d",))

    run(main())
    stamps = {s["path"]: s[CONNECTION_KEY] for s, _ in app.http}
    assert [stamps[p][1] for p in ("/a", "/b", "/c", "/d")] == [1, 2, 3, 1]
    assert stamps["/a"][0] == stamps["/c"][0] <= stamps["/d"][0]


def test_pipelined_http_request_has_no_stamp() -> None:
    app = Recorder()

    async def main() -> bytes:
        async with serving(app) as port:
            _, data = await _http_exchange(port, _get("/a") + _get("/b"), 2)
        return data

    data = run(main())
    assert data.count(b"HTTP/1.1 200") == 2
    assert [s["path"] for s, _ in app.http] == ["/a", "/b"]
    assert ARRIVED_KEY in app.http[0][0]
    # /b waited for /a's response: its bytes' arrival is not when its API tier starts.
    assert ARRIVED_KEY not in app.http[1][0]


# -- WebSocket ----------------------------------------------------------------------------


def test_ws_receive_carries_arrival_stamp_and_batch_extension_is_offered() -> None:
    app = Recorder()

    async def main() -> list[int]:
        sent: list[int] = []
        async with (
            serving(app) as port,
            connect(f"ws://127.0.0.1:{port}/", compression=None) as conn,
        ):
            for text in ("hello", "again"):
                sent.append(time.perf_counter_ns())
                await conn.send(text)
                assert await conn.recv() == f"echo:{text}"
        return sent

    sent = run(main())
    (scope,) = app.ws_scopes
    assert BATCH_EXTENSION in scope["extensions"]
    assert "websocket.http.response" in scope["extensions"]  # uvicorn's own ones stay
    receives = [(m, t) for m, t in app.received if m["type"] == "websocket.receive"]
    assert [m["text"] for m, _ in receives] == ["hello", "again"]
    for (msg, received_ns), sent_ns in zip(receives, sent, strict=True):
        stamp = msg[ARRIVED_KEY]
        assert type(stamp) is int
        assert sent_ns <= stamp <= received_ns
    # The disconnect message is not a received message: no stamp on it.
    assert app.received[-1][0]["type"] == "websocket.disconnect"
    assert ARRIVED_KEY not in app.received[-1][0]


def test_stock_ws_protocol_offers_no_batch_extension() -> None:
    app = Recorder()

    async def main() -> None:
        async with (
            serving(app, http=HttpToolsProtocol, ws=WebSocketsSansIOProtocol) as port,
            connect(f"ws://127.0.0.1:{port}/", compression=None) as conn,
        ):
            await conn.send("hi")
            assert await conn.recv() == "echo:hi"

    run(main())
    assert BATCH_EXTENSION not in app.ws_scopes[0]["extensions"]
    assert ARRIVED_KEY not in app.received[0][0]


@pytest.mark.parametrize("compression", [None, "deflate"])
def test_batch_send_is_one_write_of_separate_text_messages_in_order(
    compression: str | None,
) -> None:
    app = Recorder()
    _WriteCountingWs.instances.clear()

    async def main() -> list[str | bytes]:
        async with (
            serving(app, ws=_WriteCountingWs) as port,
            connect(f"ws://127.0.0.1:{port}/", compression=compression) as conn,
        ):
            await conn.send("batch")
            got = [await conn.recv() for _ in BATCH]
            # Nothing else was sent: the next message is the echo of the next request.
            await conn.send("after")
            got.append(await conn.recv())
        return got

    try:
        got = run(main())
    finally:
        instances = list(_WriteCountingWs.instances)
        _WriteCountingWs.instances.clear()
    assert got == [b.decode() for b in BATCH] + ["echo:after"]
    assert all(isinstance(m, str) for m in got)  # text frames, not binary
    assert len(instances) == 1
    assert app.batch_writes == [1]


def test_batch_send_after_client_left_raises_client_disconnected() -> None:
    app = Recorder()

    async def main() -> None:
        async with (
            serving(app) as port,
            connect(f"ws://127.0.0.1:{port}/", compression=None) as conn,
        ):
            await conn.send("batch-after-close")

    run(main())
    assert len(app.send_errors) == 1
    assert isinstance(app.send_errors[0], ClientDisconnected)


# -- reference cycles ---------------------------------------------------------------------

CONNECTIONS = 20
PROTOCOL_BASES = (HttpToolsProtocol, WebSocketsSansIOProtocol, ServerWebSocket)


def _cyclic_protocols(procedure: Callable[[], None]) -> Counter[str]:
    """Protocol instances that ``procedure`` left behind as cyclic garbage, by class name.

    The automatic collector is off while it runs, so none of that garbage is freed
    before it is counted; only uvicorn protocol classes (and subclasses) are counted.
    """
    gc.collect()
    enabled = gc.isenabled()
    gc.disable()
    try:
        procedure()
    finally:
        if enabled:
            gc.enable()
    flags = gc.get_debug()
    kept = len(gc.garbage)
    gc.set_debug(flags | gc.DEBUG_SAVEALL)
    try:
        gc.collect()
        # type(), not isinstance(): gc.garbage may hold dead weak proxies.
        return Counter(
            type(o).__name__ for o in gc.garbage[kept:] if issubclass(type(o), PROTOCOL_BASES)
        )
    finally:
        gc.set_debug(flags)
        del gc.garbage[kept:]
        gc.collect()


async def _echo_once(conn: ClientConnection) -> None:
    await conn.send("ping")
    assert await conn.recv() == "echo:ping"


async def _echo_then_abort(conn: ClientConnection) -> None:
    await _echo_once(conn)
    conn.transport.abort()  # no closing handshake: the server sees the connection lost
    await conn.wait_closed()


async def _one_response(conn: ClientConnection) -> None:
    await conn.send(
        orjson.dumps(
            {
                "type": "response.create",
                "model": "sim-model",
                "store": False,
                "input": "hi",
                "tool_choice": "none",
                "metadata": {"loopbench.output_tokens": "4"},
            }
        ).decode()
    )
    while True:
        event = orjson.loads(await conn.recv())
        assert event["type"] not in ("error", "response.failed"), event
        if event["type"] == "response.completed":
            return


def _open_and_close(
    app: Any,
    exchange: Callable[[ClientConnection], Awaitable[None]],
    path: str,
    http: type[asyncio.Protocol],
    ws: type[asyncio.Protocol],
    lifespan: str,
) -> Callable[[], None]:
    async def main() -> None:
        async with serving(app, http=http, ws=ws, lifespan=lifespan) as port:
            for _ in range(CONNECTIONS):
                async with connect(f"ws://127.0.0.1:{port}{path}", compression=None) as conn:
                    await exchange(conn)

    return lambda: run(main())


STAMPED = (StampedHttpToolsProtocol, ServerWebSocket)
STOCK = (HttpToolsProtocol, WebSocketsSansIOProtocol)


@pytest.mark.parametrize("exchange", [_echo_once, _echo_then_abort], ids=["close", "abort"])
def test_closed_websockets_leave_no_cyclic_protocols_small_app(
    exchange: Callable[[ClientConnection], Awaitable[None]],
) -> None:
    stamped = _cyclic_protocols(_open_and_close(Recorder(), exchange, "/", *STAMPED, "off"))
    assert stamped == Counter()
    # Control: uvicorn's own classes do leave garbage here, so the check above can fail:
    # the HTTP protocol a connection was upgraded from keeps its parser, whose callbacks
    # point back at it.  (uvicorn 0.55's own WebSocket protocol leaves none here either.)
    stock = _cyclic_protocols(_open_and_close(Recorder(), exchange, "/", *STOCK, "off"))
    assert stock["HttpToolsProtocol"] > 0, stock


def test_closed_websockets_leave_no_cyclic_protocols_reference_server() -> None:
    def app() -> Any:
        return ReferenceServer(ServerConfig(store_path=":memory:")).app

    stamped = _cyclic_protocols(
        _open_and_close(app(), _one_response, "/v1/responses", *STAMPED, "on")
    )
    assert stamped == Counter()
    stock = _cyclic_protocols(_open_and_close(app(), _one_response, "/v1/responses", *STOCK, "on"))
    assert stock["HttpToolsProtocol"] > 0, stock
