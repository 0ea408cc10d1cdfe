"""The ``ws`` transports' connection against a real ``websockets`` server and a raw socket."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable

import pytest
from websockets.asyncio.server import ServerConnection, serve
from websockets.frames import Frame, Opcode
from websockets.utils import accept_key

from harness.client.options import TransportOptions
from harness.transports.ws import open_ws
from harness.transports.ws_conn import WsConnection
from harness.wire.errors import ErrorKind, TransportError, WsClosed


def _options(port: int, rx_stamp: str = "user") -> TransportOptions:
    return TransportOptions(base_url=f"http://127.0.0.1:{port}/v1", rx_stamp=rx_stamp)


def _serve(
    handler: Callable[[ServerConnection], Awaitable[None]], body: Callable[[int], Awaitable[object]]
) -> object:
    async def main() -> object:
        async with serve(handler, "127.0.0.1", 0, compression=None) as server:
            return await body(server.sockets[0].getsockname()[1])

    return asyncio.run(main())


@pytest.mark.parametrize("rx_stamp", ["user", "kernel"])
def test_messages_read_late_keep_their_arrival_stamps_in_order(rx_stamp: str) -> None:
    async def handler(conn: ServerConnection) -> None:
        await conn.recv()
        for i in range(5):
            await conn.send(f"m{i}")
        await conn.send(iter(["frag", "ment"]))  # a fragmented message: its last read's stamp
        await conn.wait_closed()

    async def body(port: int) -> tuple[list[bytes], list[int], int]:
        conn = await open_ws(_options(port, rx_stamp), f"ws://127.0.0.1:{port}/")
        await conn.send(b"go")
        await asyncio.sleep(0.2)  # everything arrives while nobody reads
        read_at = time.perf_counter_ns()
        got, stamps = [], []
        for _ in range(6):
            raw, t_ns, _user_ns = await conn.recv()
            got.append(raw)
            stamps.append(t_ns)
        await conn.close()
        return got, stamps, read_at

    got, stamps, read_at = _serve(handler, body)  # type: ignore[misc]
    assert got == [b"m0", b"m1", b"m2", b"m3", b"m4", b"fragment"]
    assert stamps == sorted(stamps) and stamps[-1] < read_at


def test_the_servers_close_code_reaches_the_reader_and_its_pings_are_answered() -> None:
    pongs: list[float] = []

    async def handler(conn: ServerConnection) -> None:
        await conn.recv()
        pongs.append(await asyncio.wait_for(await conn.ping(b"are you there"), 5))
        await conn.close(1001, "going away")

    async def body(port: int) -> WsClosed:
        conn = await open_ws(_options(port), f"ws://127.0.0.1:{port}/")
        await conn.send(b"hello")
        with pytest.raises(WsClosed) as caught:
            await conn.recv()
        with pytest.raises(WsClosed):  # and to every later sender
            await conn.send(b"again")
        await conn.close()
        return caught.value

    closed = _serve(handler, body)
    assert isinstance(closed, WsClosed) and closed.code == 1001
    assert len(pongs) == 1


def test_a_client_close_completes_the_closing_handshake() -> None:
    codes: list[int | None] = []

    async def handler(conn: ServerConnection) -> None:
        await conn.wait_closed()
        codes.append(conn.close_code)

    async def body(port: int) -> None:
        conn = await open_ws(_options(port), f"ws://127.0.0.1:{port}/")
        started = time.perf_counter()
        await conn.close()
        assert time.perf_counter() - started < 2.0  # answered, not timed out
        assert conn.lost.done()
        await asyncio.sleep(0.05)

    _serve(handler, body)
    assert codes == [1000]


async def _raw_server(answer: bytes) -> tuple[asyncio.Server, int]:
    """A socket that answers any request head with ``answer`` and stays open."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        await reader.read()  # until the client hangs up
        writer.close()

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


def _after_handshake(frames: bytes) -> WsClosed:
    """What reading from a server that accepts the upgrade and then sends ``frames`` raises."""

    async def main() -> WsClosed:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            head = await reader.readuntil(b"\r\n\r\n")
            key = next(
                ln.split(b":", 1)[1].strip()
                for ln in head.split(b"\r\n")
                if ln.lower().startswith(b"sec-websocket-key:")
            )
            writer.write(
                b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n"
                b"Connection: Upgrade\r\nSec-WebSocket-Accept: "
                + accept_key(key.decode()).encode()
                + b"\r\n\r\n"
                # in the same write as the 101: the frames must not be read as part of it
                + frames
            )
            await writer.drain()
            await reader.read()  # until the client hangs up
            writer.close()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            conn: WsConnection = await open_ws(_options(port), f"ws://127.0.0.1:{port}/")
            with pytest.raises(WsClosed) as caught:
                await conn.recv()
            conn.abort()
            await asyncio.sleep(0.1)
            return caught.value

    return asyncio.run(main())


def test_a_server_that_masks_its_frames_is_named_and_closed_with_1002() -> None:
    closed = _after_handshake(Frame(Opcode.TEXT, b"masked").serialize(mask=True))
    assert closed.code == 1002
    assert "masked frame" in str(closed)


def test_a_text_message_that_is_not_utf8_closes_with_1007() -> None:
    closed = _after_handshake(Frame(Opcode.TEXT, b'{"type": "\xff"}').serialize(mask=False))
    assert closed.code == 1007
    assert "not valid UTF-8" in str(closed)


def test_a_refused_upgrade_is_a_no_websocket_error_naming_the_status() -> None:
    async def main() -> TransportError:
        server, port = await _raw_server(
            b"HTTP/1.1 404 Not Found\r\nContent-Length: 9\r\n\r\nnot found"
        )
        async with server:
            with pytest.raises(TransportError) as caught:
                await open_ws(_options(port), f"ws://127.0.0.1:{port}/v1/responses")
            await asyncio.sleep(0.1)  # the server's side sees the hang-up and closes
            return caught.value

    exc = asyncio.run(main())
    assert exc.kind is ErrorKind.NO_WEBSOCKET and "404" in str(exc)


def test_a_server_that_hangs_up_during_the_handshake_is_a_connection_error() -> None:
    async def main() -> TransportError:
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            await reader.readuntil(b"\r\n\r\n")
            writer.close()
            await writer.wait_closed()

        server = await asyncio.start_server(handle, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with server:
            with pytest.raises(TransportError) as caught:
                await open_ws(_options(port), f"ws://127.0.0.1:{port}/")
            await asyncio.sleep(0.1)
            return caught.value

    exc = asyncio.run(main())
    assert exc.kind is ErrorKind.CONNECTION
    assert "did not receive a valid HTTP response" in str(exc)
