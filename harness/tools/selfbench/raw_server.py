"""Bare servers for the loopback ceiling: ``python -m harness.tools.selfbench.raw_server ws|sse``.

Each streams ``n`` small JSON messages per request as fast as the library lets
it, with none of the reference server's work (no builder, no pacing, no
validation).  A message has the size and shape of a real
``response.output_text.delta`` event, so the ceiling and the full pipeline move
the same bytes per message.

* ``ws``: the ``websockets`` library's own asyncio server (no ASGI); the client
  sends ``{"n": N}`` and receives ``N`` text frames.
* ``sse``: a raw ASGI callable under uvicorn (no framework); ``GET /?n=N``
  answers ``text/event-stream`` with one body write per message.

The process binds port 0 on loopback and prints ``listening on PORT``, then
serves until SIGTERM.
"""

from __future__ import annotations

import argparse
import asyncio
import signal
import socket
import sys
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import orjson
import uvicorn
from websockets.asyncio.server import ServerConnection, serve

from harness.run.event_loop import run_async

READY_PREFIX = "raw server listening on "

Scope = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[MutableMapping[str, Any]]]
Send = Callable[[MutableMapping[str, Any]], Awaitable[None]]


def message(seq: int) -> bytes:
    """One delta-sized JSON message (the shape of a real output_text.delta event)."""
    return orjson.dumps(
        {
            "type": "response.output_text.delta",
            "sequence_number": seq,
            "item_id": "msg_0123456789abcdef0123456789abcdef0000",
            "output_index": 0,
            "content_index": 0,
            "delta": " tok",
            "logprobs": [],
        }
    )


def _bind() -> socket.socket:
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind(("127.0.0.1", 0))
    sock.listen(1024)
    return sock


async def _serve_ws(sock: socket.socket, stop: asyncio.Event) -> None:
    async def handler(conn: ServerConnection) -> None:
        async for raw in conn:
            n = int(orjson.loads(raw)["n"])
            for i in range(n):
                await conn.send(message(i).decode())

    async with serve(handler, sock=sock, compression=None, max_size=None, ping_interval=None):
        await stop.wait()


async def _sse_app(scope: Scope, receive: Receive, send: Send) -> None:
    if scope["type"] != "http":
        return
    query = scope.get("query_string", b"").decode()
    n = int(dict(p.split("=", 1) for p in query.split("&") if "=" in p).get("n", "1"))
    await send(
        {
            "type": "http.response.start",
            "status": 200,
            "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
        }
    )
    for i in range(n):
        await send(
            {
                "type": "http.response.body",
                "body": b"data: " + message(i) + b"\n\n",
                "more_body": True,
            }
        )
    await send({"type": "http.response.body", "body": b"", "more_body": False})


async def _serve_sse(sock: socket.socket, stop: asyncio.Event) -> None:
    config = uvicorn.Config(_sse_app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    task = asyncio.ensure_future(server.serve(sockets=[sock]))
    await stop.wait()
    server.should_exit = True
    await task


async def _main(kind: str) -> None:
    sock = _bind()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    print(f"{READY_PREFIX}{sock.getsockname()[1]}", flush=True)
    await (_serve_ws if kind == "ws" else _serve_sse)(sock, stop)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m harness.tools.selfbench.raw_server")
    parser.add_argument("kind", choices=("ws", "sse"))
    args = parser.parse_args(argv)
    run_async(_main(args.kind))
    sys.exit(0)


if __name__ == "__main__":
    main()
