"""``--access-log``: one line per HTTP request and per WebSocket ``response.create``, on stderr
(docs/server.md, "Logging").  Off, the HTTP layer is not wrapped: the off path costs nothing.
"""

from __future__ import annotations

import sys
import time
from typing import Any, TextIO

PREFIX = "access: "


def _client(scope: Any) -> str:
    client = scope.get("client")
    return f"{client[0]}:{client[1]}" if client else "-"


def _ms(started_ns: int) -> str:
    return f"{(time.perf_counter_ns() - started_ns) / 1e6:.1f} ms"


def write_line(line: str, out: TextIO | None = None) -> None:
    stream = out or sys.stderr
    stream.write(PREFIX + line + "\n")
    stream.flush()


class AccessLog:
    """ASGI layer: ``access: POST /v1/responses 200 153.2 ms client=127.0.0.1:50412``."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        started = time.perf_counter_ns()
        status: list[int] = []
        logged = False

        def log(code: str) -> None:
            nonlocal logged
            if not logged:
                logged = True
                write_line(
                    f"{scope['method']} {scope['path']} {code} {_ms(started)} client={_client(scope)}"
                )

        async def logging_send(message: Any) -> None:
            if message["type"] == "http.response.start":
                status.append(message["status"])
            await send(message)
            if message["type"] == "http.response.body" and not message.get("more_body", False):
                log(str(status[0]) if status else "-")

        try:
            await self.app(scope, receive, logging_send)
        finally:
            # A client that hung up mid-stream: still one line, with what was sent.
            log(f"{status[0]} (incomplete)" if status else "- (no response)")


def log_ws_refused(scope: Any, status: int, started_ns: int) -> None:
    """``access: WS /v1/responses handshake 401 0.4 ms client=…``: refused before the 101.

    The client saw only an HTTP status (it may retry, or fall back to HTTP): without this
    line a wrong key left no trace in the log at all."""
    write_line(
        f"WS {scope.get('path', '-')} handshake {status} {_ms(started_ns)} client={_client(scope)}"
    )


def log_ws_create(scope: Any, lane: str | None, outcome: str, started_ns: int) -> None:
    """``access: WS /v1/responses response.create completed 153.2 ms client=… lane=…``."""
    where = f" lane={lane}" if lane is not None else ""
    write_line(
        f"WS {scope.get('path', '-')} response.create {outcome} {_ms(started_ns)} "
        f"client={_client(scope)}{where}"
    )
