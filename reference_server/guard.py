"""The ASGI wrapper around the app: connection counts, per-client limits, stalled-send watchdog.

Counting around the whole ASGI call covers a streamed response until its last
byte and a WebSocket until it closes, whichever way they end.

The ASGI server applies flow control on both paths (a send waits while the
socket's write buffer is above its high-water mark), so a peer that stops
reading blocks its own sends instead of growing a buffer.  The watchdog bounds
how long: a connection whose send has been blocked for ``send_timeout_s`` is
dropped (its task is cancelled and the drop surfaces as :class:`SlowClient`,
which the server's log filter keeps quiet).  Checking a timestamp once a
second costs the hot path nothing, unlike a timer per send.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import OrderedDict
from collections.abc import Awaitable, Callable, MutableMapping
from dataclasses import dataclass
from typing import Any

from reference_server.fault_send import IntentionalDisconnect
from reference_server.protocols import CONNECTION_KEY

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
ASGIApp = Callable[
    [Scope, Callable[[], Awaitable[Message]], Callable[[Message], Awaitable[None]]],
    Awaitable[None],
]


class SlowClient(IntentionalDisconnect):
    """The peer did not read for ``send_timeout_s``: its connection was dropped."""


@dataclass(slots=True, eq=False)
class _Conn:
    task: asyncio.Task[Any] | None
    host: str
    opened: float
    sending_since: float = 0.0  # 0: not inside a send
    expired: bool = False


class ConnectionGuard:
    def __init__(
        self,
        app: ASGIApp,
        *,
        send_timeout_s: float,
        http_lifetime_s: float | None = None,
    ) -> None:
        self.app = app
        self.send_timeout_s = send_timeout_s
        self.http_lifetime_s = http_lifetime_s
        # Without the stamping protocol: each HTTP connection (client host, port) while it
        # is open, [first seen, requests so far]; a bounded LRU.
        self._http_seen: OrderedDict[tuple[str, int], list[Any]] = OrderedDict()
        self.open = 0
        self.per_client: dict[str, int] = {}
        self.dropped_slow = 0
        self._conns: set[_Conn] = set()
        self._watchdog: asyncio.Task[None] | None = None

    def client_open(self, host: str | None) -> int:
        return self.per_client.get(host or "", 0)

    async def __call__(self, scope: Scope, receive: Any, send: Any) -> None:
        if scope["type"] not in ("http", "websocket"):
            await self.app(scope, receive, send)
            return
        loop = asyncio.get_running_loop()
        if self._watchdog is None or self._watchdog.done():
            self._watchdog = loop.create_task(self._watch())
        client = scope.get("client")
        host = str(client[0]) if client else ""
        conn = _Conn(asyncio.current_task(), host, loop.time())
        self._conns.add(conn)
        self.open += 1
        self.per_client[host] = self.per_client.get(host, 0) + 1
        self._stamp_connection(scope, loop.time())
        close_after = self._close_after(scope, loop.time())

        async def guarded_send(message: Message) -> None:
            if close_after and message["type"] == "http.response.start":
                message["headers"] = [*message.get("headers", []), (b"connection", b"close")]
            conn.sending_since = loop.time()
            try:
                await send(message)
            finally:
                conn.sending_since = 0.0

        try:
            await self.app(scope, receive, guarded_send)
        except asyncio.CancelledError:
            if not conn.expired or conn.task is None:
                raise
            conn.task.uncancel()
            self.dropped_slow += 1
            raise SlowClient(
                f"peer did not read for {self.send_timeout_s:g} s; connection dropped"
            ) from None
        finally:
            self._conns.discard(conn)
            self.open -= 1
            left = self.per_client[host] - 1
            if left:
                self.per_client[host] = left
            else:
                del self.per_client[host]

    def _stamp_connection(self, scope: Scope, now: float) -> None:
        """``scope[CONNECTION_KEY]`` as reference_server/protocols.py stamps it, under another
        ASGI server: the connection is the client's (host, port) while it is open."""
        client = scope.get("client")
        if scope["type"] != "http" or CONNECTION_KEY in scope or not client:
            return
        key = (str(client[0]), int(client[1]))
        seen = self._http_seen.get(key)
        if seen is None:
            seen = self._http_seen[key] = [now, 0]
            if len(self._http_seen) > 65536:
                self._http_seen.popitem(last=False)
        else:
            self._http_seen.move_to_end(key)
        seen[1] += 1
        scope[CONNECTION_KEY] = (seen[0], seen[1])

    def _close_after(self, scope: Scope, now: float) -> bool:
        """True if this HTTP request's keep-alive connection has outlived ``http_lifetime_s``."""
        stamped = scope.get(CONNECTION_KEY)
        if self.http_lifetime_s is None or scope["type"] != "http" or stamped is None:
            return False
        if now - stamped[0] < self.http_lifetime_s:
            return False
        client = scope.get("client")
        if client:  # the next request from this port is a new connection
            self._http_seen.pop((str(client[0]), int(client[1])), None)
        return True

    async def _watch(self) -> None:
        period = max(0.05, min(1.0, self.send_timeout_s / 4))
        loop = asyncio.get_running_loop()
        while True:
            await asyncio.sleep(period)
            now = loop.time()
            for conn in list(self._conns):
                since = conn.sending_since
                if since and not conn.expired and now - since >= self.send_timeout_s:
                    conn.expired = True
                    if conn.task is not None:
                        conn.task.cancel()

    async def aclose(self) -> None:
        if self._watchdog is not None:
            self._watchdog.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._watchdog
