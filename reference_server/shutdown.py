"""Graceful shutdown on SIGTERM (or SIGINT): drain, bounded, then close WebSockets with 1001.

Why not uvicorn's own: it lets HTTP responses in progress finish but closes every WebSocket at
once with 1012.  The steps on the first signal, and the second signal's immediate exit:
docs/reliability.md, "Graceful shutdown".
"""

from __future__ import annotations

import asyncio
import logging
import socket
from collections.abc import Callable
from types import FrameType
from typing import Any

import uvicorn

from reference_server.app import ReferenceServer
from reference_server.ws_connection import WsConnection

GOING_AWAY = 1001
_POLL_S = 0.05
_log = logging.getLogger("uvicorn.error")


class _QuietCancelled(logging.Filter):
    """After the drain timeout, requests are cancelled on purpose: no traceback for each."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, asyncio.CancelledError)


def _is_websocket(protocol: Any) -> bool:
    # reference_server/protocols.py's: its app drains it; uvicorn's HTTP ones are shut down.
    return getattr(protocol, "websocket", False) is True


class DrainingServer(uvicorn.Server):
    def __init__(
        self,
        config: uvicorn.Config,
        app: ReferenceServer,
        drain_timeout_s: float,
        announce: Callable[[], None] | None = None,
    ):
        super().__init__(config)
        self.ref = app
        self.drain_timeout_s = drain_timeout_s
        self.announce = announce
        #: the first signal that stopped the server (None: it stopped otherwise)
        self.stopped_by: int | None = None

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if self.stopped_by is None:
            self.stopped_by = sig
        super().handle_exit(sig, frame)

    async def startup(self, sockets: list[socket.socket] | None = None) -> None:
        await super().startup(sockets)
        # Announced only now: uvicorn has taken SIGINT/SIGTERM and the app has started, so a
        # caller that signals the moment it reads the line stops the server.  Announced
        # before, a signal could land while asyncio's runner held SIGINT and be lost.
        if self.announce is not None and not self.should_exit:
            self.announce()

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.drain_timeout_s
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for protocol in list(self.server_state.connections):
            if not _is_websocket(protocol):
                protocol.shutdown()
        ws_drain: list[asyncio.Future[None]] = []

        def drain(conn: WsConnection) -> None:
            conn.draining = True  # before a create already read can be accepted
            remaining = max(0.0, deadline - loop.time())
            ws_drain.append(asyncio.ensure_future(conn.shutdown(GOING_AWAY, remaining)))

        for conn in list(self.ref.ws_connections):
            drain(conn)
        # An upgrade waiting for due tokens now (reference_server/protocols.py) opens its
        # WebSocket after this listing: drained when it registers, not cut with 1012 later.
        self.ref.drain_ws = drain
        # Background responses are drained too (they hold no connection); the lifespan's end
        # cuts those still running.
        while (
            (self.server_state.connections or self.ref.lifecycle.runs.active)
            and not self.force_exit
            and loop.time() < deadline
        ):
            await asyncio.sleep(_POLL_S)
        await asyncio.gather(*ws_drain, return_exceptions=True)
        # Whatever is left overran the drain timeout: cut it, with one log line, not a
        # traceback per cancelled request.
        if self.server_state.connections:
            _log.warning(
                "drain timeout (%g s): cutting %d connection(s) still open",
                self.drain_timeout_s,
                len(self.server_state.connections),
            )
        logging.getLogger("uvicorn.error").addFilter(_QuietCancelled())
        for protocol in list(self.server_state.connections):
            protocol.shutdown()
        for task in list(self.server_state.tasks):
            task.cancel()
        await asyncio.gather(*self.server_state.tasks, return_exceptions=True)
        for server in self.servers:
            await server.wait_closed()
        if not self.force_exit:
            await self.lifespan.shutdown()
