"""The reference server, recording every request it receives (a helper of test_parity.py).

``python tests/transports/recording_server.py RECORD_FILE [server options]`` serves
the reference server app (any ``python -m reference_server`` option) behind an ASGI
middleware that appends one JSON line to RECORD_FILE per HTTP request (method,
path, body) and per WebSocket connect (path, query) and text frame, in the order
the server received them.  Prints the same ready line as the reference server.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from typing import IO, Any

import uvicorn

from harness.run.embedded import READY_PREFIX
from reference_server.app import ReferenceServer
from reference_server.cli import add_server_arguments, config_from_args
from reference_server.fault_send import install_log_filter
from reference_server.process import bind


class Recorder:
    def __init__(self, app: Any, out: IO[str]) -> None:
        self.app = app
        self.out = out

    def write(self, entry: dict[str, Any]) -> None:
        self.out.write(json.dumps(entry) + "\n")
        self.out.flush()

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        kind = scope["type"]
        if kind == "http":
            parts: list[bytes] = []

            async def receive_http() -> Any:
                msg = await receive()
                if msg["type"] == "http.request":
                    parts.append(msg.get("body", b""))
                    if not msg.get("more_body"):
                        body = b"".join(parts).decode()
                        self.write({"http": scope["method"], "path": scope["path"], "body": body})
                return msg

            await self.app(scope, receive_http, send)
        elif kind == "websocket":

            async def receive_ws() -> Any:
                msg = await receive()
                if msg["type"] == "websocket.connect":
                    query = scope.get("query_string", b"").decode()
                    self.write({"ws": "connect", "path": scope["path"], "query": query})
                elif msg["type"] == "websocket.receive" and msg.get("text") is not None:
                    self.write({"ws": "frame", "body": msg["text"]})
                return msg

            await self.app(scope, receive_ws, send)
        else:
            await self.app(scope, receive, send)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("record")
    add_server_arguments(parser)
    args = parser.parse_args(["--host", "127.0.0.1", "--port", "0", *sys.argv[1:]])
    config = config_from_args(args)
    server = ReferenceServer(config)
    sock = bind(config.host, config.port)
    with open(args.record, "a") as out:
        uv = uvicorn.Config(
            Recorder(server.app, out),
            log_level="warning",
            access_log=False,
            ws="websockets-sansio",
            lifespan="on",
        )
        install_log_filter()
        port = sock.getsockname()[1]
        print(f"{READY_PREFIX}http://127.0.0.1:{port}/v1", flush=True)
        asyncio.run(uvicorn.Server(uv).serve(sockets=[sock]))


if __name__ == "__main__":
    main()
