"""Small foreign servers for tests: endpoints loopbench did not write, answering canned bytes.

Each is an asyncio TCP server on 127.0.0.1, port 0, in a background thread; it reads a
request head (and its body, by content-length) and writes one canned answer, then closes
the connection.  Use as a context manager: ``with foreign_server(ANSWER_500) as url:``;
``url`` is the base URL (``http://127.0.0.1:PORT/v1``) to pass as ``--target``.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
from collections.abc import Awaitable, Callable, Iterator

#: what an asyncio server calls per connection
Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]

#: every request (WebSocket upgrades included) answered with HTTP 500
ANSWER_500 = (
    b"HTTP/1.1 500 Internal Server Error\r\ncontent-type: text/plain\r\n"
    b"content-length: 21\r\nconnection: close\r\n\r\nInternal Server Error"
)
_JSON = b'{"id": "resp_1", "object": "response", "status": "completed", "output": []}'
#: a 200 answer with a JSON body: a Responses server that ignored ``stream: true``
ANSWER_JSON = (
    b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n"
    b"connection: close\r\n\r\n%s" % (len(_JSON), _JSON)
)
#: not HTTP at all
ANSWER_GARBAGE = b"\x00\xffthis is not HTTP\r\n\r\n"


async def read_request(reader: asyncio.StreamReader) -> tuple[str, dict[str, str], bytes]:
    """One HTTP/1.1 request off ``reader``: its request line, its headers (lower-case names)
    and its body (by content-length)."""
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    headers = {
        k.strip().lower(): v.strip() for k, _, v in (line.partition(":") for line in lines[1:]) if k
    }
    length = headers.get("content-length", "")
    body = await reader.readexactly(int(length)) if length.isdigit() else b""
    return lines[0], headers, body


#: what a keep-alive server does with each request: (request line, headers, body, writer)
Answer = Callable[[str, dict[str, str], bytes, asyncio.StreamWriter], Awaitable[None]]


async def keep_alive(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, answer: Answer
) -> None:
    """A connection's requests answered one after another until the client closes it (or asks
    to: ``connection: close``); the connection is closed after."""
    try:
        while True:
            line, headers, body = await read_request(reader)
            await answer(line, headers, body, writer)
            await writer.drain()
            if headers.get("connection", "").lower() == "close":
                break
    except (asyncio.IncompleteReadError, ConnectionError):
        pass
    finally:
        writer.close()


async def _answer(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, reply: bytes) -> None:
    with contextlib.suppress(Exception):
        await asyncio.wait_for(read_request(reader), 10)
        writer.write(reply)
        await writer.drain()
    writer.close()


@contextlib.contextmanager
def serve_in_thread(
    handle: Handler,
    what: str,
    *,
    limit: int = 1 << 16,
    stop: asyncio.Event | None = None,
    on_stop: Callable[[], Awaitable[None]] | None = None,
) -> Iterator[int]:
    """The port of an asyncio server on 127.0.0.1 calling ``handle`` per connection, on its
    own event loop in a daemon thread while the block runs.  ``stop`` is set when the block
    ends (handlers that wait on it end then); ``on_stop`` runs after, before the server
    closes."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    ended = stop or asyncio.Event()
    port: list[int] = []

    async def main() -> None:
        srv = await asyncio.start_server(handle, "127.0.0.1", 0, limit=limit)
        port.append(srv.sockets[0].getsockname()[1])
        started.set()
        async with srv:
            await ended.wait()
            if on_stop is not None:
                await on_stop()

    thread = threading.Thread(target=loop.run_until_complete, args=(main(),), daemon=True)
    thread.start()
    if not started.wait(10):
        raise RuntimeError(f"the {what} did not start within 10 s")
    try:
        yield port[0]
    finally:
        loop.call_soon_threadsafe(ended.set)
        thread.join(10)
        loop.close()


@contextlib.contextmanager
def foreign_server(reply: bytes) -> Iterator[str]:
    """A server answering every request with ``reply``; yields its base URL."""
    with serve_in_thread(lambda r, w: _answer(r, w, reply), "foreign test server") as port:
        yield f"http://127.0.0.1:{port}/v1"


def closed_port() -> int:
    """A loopback port with nothing listening (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
