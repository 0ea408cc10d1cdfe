"""A reference server that also writes down every request an agent sends (development only).

``python -m tools.interop.capture --port 8000 --out raw.jsonl`` serves the reference server
on loopback and appends one JSON line per HTTP request (method, path, query, headers, body,
status) and per WebSocket handshake and text message, as received.  Point an agent at it
(docs/agents.md), then turn the lines into test data with :func:`tools.interop.scrub.scrub_body`
(tests/data/agents/README.md).  The lines hold whatever the agent sent, prompts included:
keep them out of the repository.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any, TextIO

import uvicorn

from reference_server.app import create_app
from reference_server.core.config import ServerConfig

Asgi = Callable[[Any, Any, Any], Any]


def _headers(scope: dict[str, Any]) -> list[list[str]]:
    return [[k.decode("latin-1"), v.decode("latin-1")] for k, v in scope["headers"]]


def _json(text: bytes | str | None) -> dict[str, Any]:
    if not text:
        return {"body": None}
    try:
        return {"body": json.loads(text)}
    except ValueError:
        raw = text.decode("utf-8", "replace") if isinstance(text, bytes) else text
        return {"raw": raw}


def capturing(app: Asgi, out: TextIO) -> Asgi:
    """``app`` with every request written to ``out`` before it is handled."""

    def write(record: dict[str, Any]) -> None:
        out.write(json.dumps({"t": time.time(), **record}) + "\n")
        out.flush()

    async def wrapped(scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] == "http":
            chunks = []
            while True:
                message = await receive()
                chunks.append(message.get("body", b""))
                if not message.get("more_body"):
                    break
            body = b"".join(chunks)
            record = {
                "kind": "http",
                "method": scope["method"],
                "path": scope["path"],
                "query": scope["query_string"].decode("latin-1"),
                "headers": _headers(scope),
                **_json(body),
            }
            replayed = False

            async def replay_body() -> Any:
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()

            async def note_status(message: Any) -> None:
                if message["type"] == "http.response.start":
                    write({**record, "status": message["status"]})
                await send(message)

            await app(scope, replay_body, note_status)
        elif scope["type"] == "websocket":
            write(
                {
                    "kind": "ws_open",
                    "path": scope["path"],
                    "query": scope["query_string"].decode("latin-1"),
                    "headers": _headers(scope),
                }
            )

            async def note_message() -> Any:
                message = await receive()
                if message["type"] == "websocket.receive":
                    write({"kind": "ws_message", **_json(message.get("text"))})
                return message

            await app(scope, note_message, send)
        else:
            await app(scope, receive, send)

    return wrapped


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m tools.interop.capture", description=__doc__)
    p.add_argument("--port", type=int, default=8000)
    p.add_argument("--out", required=True, help="JSON lines file to append to")
    p.add_argument("--seed", type=int, default=0)
    args = p.parse_args(argv)
    with open(args.out, "a") as out:
        app = capturing(create_app(ServerConfig(seed=args.seed)), out)
        uvicorn.run(app, host="127.0.0.1", port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
