"""The library server of the throughput step: ``python -m bench.selfbench.lib_server``.

The flood server (:mod:`.raw_server`) writes pre-encoded bytes from a bare
asyncio protocol, so fast that the client is always the bottleneck against it.
This one streams the same events through the libraries real servers are built
on, each event handed to the library as it is produced, so what it streams is
what a real server's I/O layer can stream on this machine:

* SSE: a raw ASGI callable under uvicorn with httptools on uvloop (the
  reference server's stack) answers any POST ``200 text/event-stream`` and
  sends each pre-encoded event as its own ``http.response.body`` message
  (``more_body=True``): uvicorn writes each as one chunk, one socket write.
* WebSocket: ``websockets``' own asyncio server; each text message from the
  client is answered with the stream, one ``send()`` (one text frame) per event.

Same events as the flood server (its encoder), no framework on top, no
per-event work but the libraries' own.  One process, one event loop, two
ports; prints ``library server listening on HTTP_PORT WS_PORT`` and serves
until SIGTERM.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

import uvicorn
from websockets.asyncio.server import ServerConnection, serve
from websockets.exceptions import ConnectionClosed

from bench.selfbench.raw_server import json_payload, listen_loopback, serve_main, sse_blocks

READY_PREFIX = "library server listening on "

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]

_SSE_START: Message = {
    "type": "http.response.start",
    "status": 200,
    "headers": [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")],
}
_SSE_END: Message = {"type": "http.response.body", "body": b"", "more_body": False}


def sse_app(blocks: list[bytes]) -> Callable[[Scope, Receive, Send], Awaitable[None]]:
    """An ASGI app that answers every HTTP request with ``blocks``, one body message each."""
    # Built once: the messages are the same for every response, as the events are.
    bodies = [{"type": "http.response.body", "body": b, "more_body": True} for b in blocks]

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            return
        while (await receive()).get("more_body"):
            pass
        await send(_SSE_START)
        for body in bodies:
            await send(body)
        await send(_SSE_END)

    return app


def ws_handler(payloads: list[bytes]) -> Callable[[ServerConnection], Awaitable[None]]:
    """A ``websockets`` handler that answers every message with ``payloads``, one send each."""

    async def handler(ws: ServerConnection) -> None:
        try:
            async for _ in ws:
                for payload in payloads:
                    await ws.send(payload, text=True)
        except ConnectionClosed:
            pass

    return handler


async def _main(deltas: int) -> None:
    blocks = sse_blocks(deltas)
    http_sock, ws_sock = listen_loopback(), listen_loopback()
    # No pings and no compression: a bare stream, as the flood server's and the readers' are.
    ws_server = await serve(
        ws_handler([json_payload(b) for b in blocks]),
        sock=ws_sock,
        compression=None,
        ping_interval=None,
    )
    config = uvicorn.Config(
        sse_app(blocks),
        http="httptools",
        ws="none",
        lifespan="off",
        access_log=False,
        log_level="warning",
    )
    server = uvicorn.Server(config)
    # Both sockets listen already: a client connecting before uvicorn accepts waits in the backlog.
    print(f"{READY_PREFIX}{http_sock.getsockname()[1]} {ws_sock.getsockname()[1]}", flush=True)
    try:
        # uvicorn owns SIGINT/SIGTERM: it returns from serve() on either.
        await server.serve(sockets=[http_sock])
    finally:
        ws_server.close()


def main(argv: list[str] | None = None) -> None:
    serve_main("python -m bench.selfbench.lib_server", _main, argv)


if __name__ == "__main__":
    main()
