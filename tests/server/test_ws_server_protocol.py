"""reference_server/protocols.py's ServerWebSocket, bytes in and bytes out: no socket.

An upgrade request is fed to the stamping HTTP protocol over a fake transport; the
WebSocket it hands over to is driven with frames built by the project's codec, and
what it writes is read back with the same codec, as a client would.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import Awaitable, Callable
from typing import Any

import pytest
import uvicorn
from uvicorn.server import ServerState
from websockets.extensions.permessage_deflate import PerMessageDeflate
from websockets.frames import Frame, Opcode
from websockets.streams import StreamReader

from harness.wire import ws_frames as wsf
from reference_server.protocols import ARRIVED_KEY, ServerWebSocket, StampedHttpToolsProtocol
from reference_server.timer import fine_timer, sleep_until

KEY = "dGhlIHNhbXBsZSBub25jZQ=="

Message = dict[str, Any]


class FakeTransport:
    """What asyncio's transport offers a protocol, recording writes and reading pauses."""

    def __init__(self) -> None:
        self.written = bytearray()
        self.closed = False
        self.paused = False
        self.protocol: Any = None

    def write(self, data: bytes) -> None:
        assert not self.closed, "written after close"
        self.written += data

    def is_closing(self) -> bool:
        return self.closed

    def close(self) -> None:
        if not self.closed:
            self.closed = True
            asyncio.get_running_loop().call_soon(self.protocol.connection_lost, None)

    def pause_reading(self) -> None:
        self.paused = True

    def resume_reading(self) -> None:
        self.paused = False

    def set_protocol(self, protocol: Any) -> None:
        self.protocol = protocol

    def get_extra_info(self, name: str, default: Any = None) -> Any:
        return {"peername": ("127.0.0.1", 5000), "sockname": ("127.0.0.1", 8000)}.get(name, default)

    def take(self) -> bytes:
        out = bytes(self.written)
        self.written.clear()
        return out


def upgrade(extra: str = "", version: str = "13", key: str = KEY) -> bytes:
    return (
        f"GET /v1/responses?mode=append HTTP/1.1\r\nhost: x\r\nupgrade: websocket\r\n"
        f"connection: Upgrade\r\nsec-websocket-key: {key}\r\n"
        f"sec-websocket-version: {version}\r\n{extra}\r\n"
    ).encode()


class Echo:
    """Accepts with a header, echoes text, records what it received."""

    def __init__(self) -> None:
        self.scopes: list[Message] = []
        self.received: list[Message] = []

    async def __call__(
        self,
        scope: Message,
        receive: Callable[[], Awaitable[Message]],
        send: Callable[[Message], Awaitable[None]],
    ) -> None:
        self.scopes.append(scope)
        assert (await receive())["type"] == "websocket.connect"
        await send({"type": "websocket.accept", "headers": [(b"x-request-id", b"req_1")]})
        while True:
            msg = await receive()
            self.received.append(msg)
            if msg["type"] == "websocket.disconnect":
                return
            if msg.get("text") == "bye":
                await send({"type": "websocket.close", "code": 4000, "reason": "done"})
            else:
                await send({"type": "websocket.send", "text": f"echo:{msg.get('text')}"})


def connect(
    app: Any, request: bytes, *, deflate: bool = True, max_size: int = 1000
) -> tuple[FakeTransport, Any]:
    config = uvicorn.Config(app, ws_max_size=max_size, ws_per_message_deflate=deflate)
    config.load()
    config.ws_protocol_class = ServerWebSocket
    transport = FakeTransport()
    http = StampedHttpToolsProtocol(config, ServerState(), {})
    transport.set_protocol(http)
    http.connection_made(transport)  # type: ignore[arg-type]
    http.data_received(request)
    return transport, transport.protocol


def frames(data: bytes, deflate: wsf.Deflate | None = None) -> list[tuple[int, bytes]]:
    return wsf.FrameReader(1 << 20, deflate=deflate).feed(data)


async def settle() -> None:
    for _ in range(5):
        await asyncio.sleep(0)


def run(body: Callable[[], Awaitable[None]]) -> None:
    asyncio.run(asyncio.wait_for(body(), 5))


def test_upgrade_is_accepted_with_the_rfc_key_and_messages_carry_arrival_stamps() -> None:
    app = Echo()

    async def body() -> None:
        transport, ws = connect(app, upgrade())
        assert isinstance(ws, ServerWebSocket)
        await settle()
        head, _, rest = transport.take().partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 101 Switching Protocols\r\n")
        assert b"sec-websocket-accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo=" in head
        assert b"x-request-id: req_1" in head
        assert b"sec-websocket-extensions" not in head and rest == b""
        ws.data_received(wsf.encode_frame(wsf.OP_TEXT, b"hi") + wsf.encode_frame(wsf.OP_PING, b"p"))
        await settle()
        # The pong is written below the app, before the echo the app sends.
        assert frames(transport.take()) == [(wsf.OP_PONG, b"p"), (wsf.OP_TEXT, b"echo:hi")]
        ws.data_received(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(1000, "ok")))
        await settle()
        assert frames(transport.take()) == [(wsf.OP_CLOSE, wsf.close_payload(1000))]
        assert transport.closed

    run(body)
    (scope,) = app.scopes
    assert (scope["type"], scope["path"], scope["query_string"]) == (
        "websocket",
        "/v1/responses",
        b"mode=append",
    )
    assert scope["client"] == ("127.0.0.1", 5000)
    text, disconnect = app.received
    assert text["text"] == "hi" and type(text[ARRIVED_KEY]) is int
    assert disconnect == {"type": "websocket.disconnect", "code": 1000, "reason": "ok"}


def test_app_close_waits_for_the_peers_close_frame() -> None:
    app = Echo()

    async def body() -> None:
        transport, ws = connect(app, upgrade())
        await settle()
        transport.take()
        ws.data_received(wsf.encode_frame(wsf.OP_TEXT, b"bye"))
        await settle()
        assert frames(transport.take()) == [(wsf.OP_CLOSE, wsf.close_payload(4000, "done"))]
        assert not transport.closed  # the closing handshake: the peer's close comes first
        ws.data_received(wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(4000)))
        await settle()
        assert transport.closed and transport.take() == b""

    run(body)


@pytest.mark.parametrize(
    ("data", "code"),
    [
        (wsf.encode_frame(wsf.OP_TEXT, b"x", masked=False), 1002),
        (wsf.encode_frame(wsf.OP_TEXT, b"\xff\xfe"), 1007),
        (wsf.encode_frame(wsf.OP_TEXT, b"x" * 1001), 1009),
        (wsf.encode_frame(wsf.OP_PING, b"p", fin=False), 1002),
        (wsf.encode_frame(wsf.OP_CLOSE, wsf.close_payload(999)), 1002),
    ],
    ids=["unmasked", "invalid utf-8", "over ws_max_size", "fragmented ping", "bad close code"],
)
def test_a_broken_frame_is_answered_with_its_close_code(data: bytes, code: int) -> None:
    app = Echo()

    async def body() -> None:
        transport, ws = connect(app, upgrade())
        await settle()
        transport.take()
        ws.data_received(wsf.encode_frame(wsf.OP_TEXT, b"first") + data)
        await settle()
        assert frames(transport.take())[-1] == (wsf.OP_CLOSE, wsf.close_payload(code))
        assert transport.closed
        # The app's echo of "first" met a closed connection; the disconnect waits unread.
        assert ws.messages[-1]["type"] == "websocket.disconnect"
        assert ws.messages[-1]["code"] == code

    run(body)
    # What came before the broken frame still reached the app.
    assert app.received[0]["text"] == "first"


@pytest.mark.parametrize(
    ("request_bytes", "status"),
    [(upgrade(version="8"), b"426"), (upgrade(key="short"), b"400")],
    ids=["version", "key"],
)
def test_a_handshake_that_is_not_rfc_6455_is_refused_before_the_app(
    request_bytes: bytes, status: bytes
) -> None:
    app = Echo()

    async def body() -> None:
        transport, ws = connect(app, request_bytes)
        await settle()
        assert transport.take().startswith(b"HTTP/1.1 " + status)
        assert transport.closed and not isinstance(ws, ServerWebSocket)

    run(body)
    assert app.scopes == []


def test_extensions_and_subprotocols_split_over_header_lines_are_joined() -> None:
    """RFC 6455 §11.3.2/§11.3.4: these headers may come as several lines; each line counts."""
    app = Echo()

    async def body() -> None:
        extra = (
            "sec-websocket-extensions: permessage-deflate; server_max_window_bits=10\r\n"
            "sec-websocket-protocol: chat\r\n"
            "sec-websocket-extensions: x-webkit-deflate-frame\r\n"
            "sec-websocket-protocol: v2, v3\r\n"
        )
        transport, _ = connect(app, upgrade(extra))
        await settle()
        head = transport.take()
        assert head.startswith(b"HTTP/1.1 101 ")
        assert (
            b"sec-websocket-extensions: permessage-deflate; server_max_window_bits=10\r\n" in head
        )

    run(body)
    assert app.scopes[0]["subprotocols"] == ["chat", "v2", "v3"]


@pytest.mark.parametrize(
    "extra",
    [f"sec-websocket-key: {KEY}\r\n", "sec-websocket-version: 13\r\n"],
    ids=["key", "version"],
)
def test_a_repeated_key_or_version_is_refused_with_400(extra: str) -> None:
    app = Echo()

    async def body() -> None:
        transport, _ = connect(app, upgrade(extra))
        await settle()
        answer = transport.take()
        assert answer.startswith(b"HTTP/1.1 400 Bad Request\r\n")
        assert answer.endswith(b"(Sec-WebSocket-Key or Sec-WebSocket-Version sent twice).\n")
        assert transport.closed

    run(body)
    assert app.scopes == []


def test_deflate_is_agreed_when_offered_and_what_the_app_sends_is_compressed() -> None:
    app = Echo()

    async def body() -> None:
        offer = "sec-websocket-extensions: permessage-deflate; client_max_window_bits\r\n"
        transport, ws = connect(app, upgrade(offer))
        await settle()
        head = transport.take()
        assert b"sec-websocket-extensions: permessage-deflate; server_max_window_bits=12" in head
        ws.data_received(wsf.encode_frame(wsf.OP_TEXT, b"hi"))
        await settle()
        wire = transport.take()
        assert wire[0] == 0xC1  # FIN, RSV1 (compressed), text
        assert frames(wire, wsf.Deflate()) == [(wsf.OP_TEXT, b"echo:hi")]

    run(body)


def test_deflate_keeps_to_the_windows_it_answered() -> None:
    """A client told ``server_max_window_bits=9`` inflates with a 512-byte window (websockets' own
    inflater here): every echo reads back.  The client is asked for at most 12 bits and, compressing
    with them, round-trips too."""
    app = Echo()
    # No repeat inside it: the next echo's copy refers ~900 bytes back, beyond a 9-bit window.
    text = "".join(random.Random(1).choices("abcdefghijklmnopqrstuvwxyz", k=900)).encode()

    async def body() -> None:
        offer = (
            "sec-websocket-extensions: permessage-deflate; server_max_window_bits=9; "
            "client_max_window_bits\r\n"
        )
        transport, ws = connect(app, upgrade(offer), max_size=4000)
        await settle()
        head = transport.take()
        assert (
            b"sec-websocket-extensions: permessage-deflate; server_max_window_bits=9; "
            b"client_max_window_bits=12\r\n" in head
        )
        client = PerMessageDeflate(
            remote_no_context_takeover=False,
            local_no_context_takeover=False,
            remote_max_window_bits=9,
            local_max_window_bits=12,
        )
        for _ in range(3):
            sent = client.encode(Frame(Opcode.TEXT, text))
            ws.data_received(wsf.encode_frame(wsf.OP_TEXT, sent.data, rsv=4))
            await settle()
            assert their_frame(transport.take(), client).data == b"echo:" + text

    run(body)
    assert [m["text"].encode() for m in app.received] == [text] * 3


def their_frame(data: bytes, deflate: PerMessageDeflate) -> Frame:
    """The one frame in ``data``, parsed and inflated by websockets (not our codec)."""
    reader = StreamReader()
    reader.feed_data(data)
    parse = Frame.parse(reader.read_exact, mask=False, extensions=[deflate])
    with pytest.raises(StopIteration) as done:
        next(parse)
    frame: Frame = done.value.value
    return frame


def test_denial_before_the_handshake_is_a_plain_http_answer() -> None:
    async def deny(scope: Message, receive: Any, send: Any) -> None:
        await send(
            {
                "type": "websocket.http.response.start",
                "status": 404,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "websocket.http.response.body", "body": b'{"error":{}}'})

    async def body() -> None:
        transport, _ = connect(deny, upgrade())
        await settle()
        head, _, got = transport.take().partition(b"\r\n\r\n")
        assert head.startswith(b"HTTP/1.1 404 Not Found\r\n")
        assert b"content-length: 12" in head and b"connection: close" in head
        assert got == b'{"error":{}}' and transport.closed

    run(body)


def test_the_handshake_waits_for_a_token_due_first() -> None:
    """A token due in 0.5 ms is written before an upgrade that arrived first reaches the
    app (reference_server/timer.py yield_to_due): over WebSocket the next turn's upgrade
    comes exactly when the other streams' last tokens are due."""
    order: list[str] = []

    class Recording(Echo):
        async def __call__(self, scope: Message, receive: Any, send: Any) -> None:
            order.append("app")
            await super().__call__(scope, receive, send)

    async def body() -> None:
        if fine_timer(asyncio.get_running_loop()) is None:
            pytest.skip("no timerfd here: nothing is ordered")

        async def token() -> None:
            await sleep_until(time.perf_counter_ns() + 500_000)
            order.append("token")

        due = asyncio.ensure_future(token())
        await asyncio.sleep(0)
        transport, _ = connect(Recording(), upgrade())
        await due
        await settle()
        assert transport.take().startswith(b"HTTP/1.1 101 Switching Protocols\r\n")

    run(body)
    assert order == ["token", "app"]
