"""The lean HTTP/1.1 client against small real servers on loopback (port 0)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

import pytest

from harness.transports.h1client import H1Pool
from harness.wire.errors import TransportError

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, int], Awaitable[bool]]


async def read_request(reader: asyncio.StreamReader) -> bytes | None:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError:
        return None
    length = 0
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    return await reader.readexactly(length)


async def serve(handler: Handler) -> tuple[asyncio.Server, int, list[int]]:
    """A server calling ``handler(reader, writer, connection_no)`` per request; False closes."""
    conns: list[int] = []

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        conns.append(len(conns))
        no = conns[-1]
        try:
            while await read_request(reader) is not None:
                if not await handler(reader, writer, no):
                    break
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1], conns


def pool(port: int, read_timeout_s: float = 5.0, rx_stamp: str = "user") -> H1Pool:
    return H1Pool(
        f"http://127.0.0.1:{port}/v1",
        max_connections=4,
        keepalive=True,
        verify_tls=True,
        connect_timeout_s=5.0,
        read_timeout_s=read_timeout_s,
        rx_stamp=rx_stamp,
    )


def sse_chunks(writer: asyncio.StreamWriter, parts: list[bytes]) -> None:
    writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    for p in parts:
        writer.write(b"%x\r\n%s\r\n" % (len(p), p))
    writer.write(b"0\r\n\r\n")


def test_body_reaches_the_sink_and_the_connection_is_reused() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, no: int) -> bool:
        sse_chunks(w, [b"data: 1\n\n", b"data: 2\n\n"])
        await w.drain()
        return True

    async def main() -> tuple[list[bytes], list[int], list[bool]]:
        server, port, conns = await serve(handler)
        p = pool(port)
        got: list[bytes] = []
        fresh = []
        async with server:
            for _ in range(3):
                resp = await p.request("POST", "/responses", [], b"{}", lambda b, t: got.append(b))
                fresh.append(resp.new_connection)
                assert resp.status == 200 and resp.body == b""
            await p.aclose()
        return got, conns, fresh

    got, conns, fresh = asyncio.run(main())
    assert b"".join(got) == b"data: 1\n\ndata: 2\n\n" * 3
    assert conns == [0] and fresh == [True, False, False]


def test_a_connection_the_server_closed_while_idle_is_replaced_transparently() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, no: int) -> bool:
        w.write(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok")
        await w.drain()
        return False  # close after one response, without saying so

    async def main() -> tuple[list[int], list[bytes]]:
        server, port, conns = await serve(handler)
        p = pool(port)
        bodies = []
        async with server:
            for _ in range(2):
                bodies.append((await p.request("GET", "/x", [], b"")).body)
                await asyncio.sleep(0.05)  # let the close arrive
            await p.aclose()
        return conns, bodies

    conns, bodies = asyncio.run(main())
    assert bodies == [b"ok", b"ok"] and conns == [0, 1]


def test_an_error_response_is_collected_not_streamed() -> None:
    async def handler(r: asyncio.StreamReader, w: asyncio.StreamWriter, no: int) -> bool:
        body = b'{"error": {"code": "bad"}}'
        w.write(b"HTTP/1.1 400 Bad Request\r\ncontent-length: %d\r\n\r\n%s" % (len(body), body))
        await w.drain()
        return True

    async def main() -> tuple[int, bytes, list[bytes]]:
        server, port, _ = await serve(handler)
        p = pool(port)
        streamed: list[bytes] = []
        async with server:
            resp = await p.request("POST", "/r", [], b"{}", lambda b, t: streamed.append(b))
            await p.aclose()
        return resp.status, resp.body, streamed

    assert asyncio.run(main()) == (400, b'{"error": {"code": "bad"}}', [])


def test_a_silent_server_times_out_and_a_failing_sink_fails_the_request() -> None:
    async def silent(r: asyncio.StreamReader, w: asyncio.StreamWriter, no: int) -> bool:
        await asyncio.sleep(5)
        return False

    async def chatty(r: asyncio.StreamReader, w: asyncio.StreamWriter, no: int) -> bool:
        sse_chunks(w, [b"data: 1\n\n"])
        await w.drain()
        return True

    def bad_sink(body: bytes, t_ns: int) -> None:
        raise ValueError("sink refused")

    async def main() -> None:
        server, port, _ = await serve(silent)
        async with server:
            with pytest.raises(TransportError, match="no data"):
                await pool(port, read_timeout_s=0.2).request("GET", "/", [], b"")
        server, port, _ = await serve(chatty)
        async with server:
            p = pool(port)
            with pytest.raises(ValueError, match="sink refused"):
                await p.request("GET", "/", [], b"", bad_sink)
            await p.aclose()

    asyncio.run(main())


def test_a_server_hanging_up_mid_body_is_a_connection_error() -> None:
    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, no: int) -> bool:
        writer.write(b"HTTP/1.1 200 OK\r\ncontent-length: 100\r\n\r\n" + b"x" * 10)
        await writer.drain()
        return False  # close with 90 bytes of the body missing

    async def main() -> TransportError:
        server, port, _ = await serve(handler)
        async with server:
            p = pool(port)
            try:
                with pytest.raises(TransportError) as caught:
                    await p.request("POST", "/responses", [], b"{}")
            finally:
                await p.aclose()
        return caught.value

    err = asyncio.run(main())
    # Labelled as what happened to the run (the peer left), not as a parser complaint.
    assert err.kind == "connection"
    assert "inside the response body" in str(err)
