"""What the recording proxy hands over, read into :class:`Exchange` summaries.

The relay hands over a copy of what it forwarded as *steps* (a name from :data:`STEPS`, plain
picklable arguments); the :class:`Observer` holds all the state the reading needs, so it runs
on a thread of the proxy's process or in a process of its own (docs/traces.md, "Overhead").
"""

from __future__ import annotations

import contextlib
import os
import signal
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection
from typing import Any

import orjson

from harness.record.observe import Exchange, WsDecoder, summarize
from harness.wire.events import COMPLETED, ERROR, INCOMPLETE, TERMINAL_TYPES
from harness.wire.ws_frames import deflate_agreed

#: what the observer's process sends first, once it can read steps
READY = "ready"
#: how much lower the observer's process runs than the relay's (``os.nice``)
NICE = 10


@dataclass
class Observed:
    """What the observer made of the steps: the exchanges and what could not be read."""

    exchanges: list[Exchange] = field(default_factory=list)
    #: why each exchange the trace could not read was lost (each counted as failed)
    unread: list[str] = field(default_factory=list)
    #: of those, the ones that left no :class:`Exchange` behind (an observer's error)
    unread_without_exchange: int = 0
    #: why the trace as a whole misses exchanges (its observer fell behind, stuck or died):
    #: not the traffic's fault, the recording's — record again
    lost: list[str] = field(default_factory=list)


class Observer:
    """Reads steps into :class:`Observed`; pure (no I/O), one step at a time, in order."""

    def __init__(self, keep_content: bool = False) -> None:
        self.keep_content = keep_content
        self.out = Observed()
        self._ws: dict[int, _WsConnection] = {}

    def step(self, conn: int, name: str, args: tuple[Any, ...]) -> None:
        """Apply one step; an error loses that exchange for the trace, never the relay's bytes."""
        try:
            STEPS[name](self, *args)
        except Exception as exc:  # the bytes were forwarded: only the trace loses this one
            self.out.unread_without_exchange += 1
            self.out.unread.append(
                f"connection {conn}: could not read an exchange for the trace "
                f"({type(exc).__name__}: {exc}); it was forwarded unchanged"
            )

    # --- the steps ------------------------------------------------------------------------

    def http(
        self,
        api: str,
        conn: int,
        request: bytes,
        status: int,
        response: bytes,
        headers: dict[str, str],
        times: tuple[int, int],
    ) -> None:
        """An HTTP exchange that ended (its response whole, or cut by a close)."""
        ex = summarize(
            api, "http", conn, request, status, response, headers, times, self.keep_content
        )
        if ex is None:
            self.failed(api, "http", conn, times[0], times[1], 400, "its request body is not JSON")
            return
        self._record(ex)

    def failed(
        self, api: str, transport: str, conn: int, t_start: int, t_end: int, status: int, why: str
    ) -> None:
        """An exchange the trace cannot use: counted in the header's ``failed``, with why."""
        self._record(Exchange(api, transport, conn, t_start, t_end, status))
        self.out.unread.append(f"connection {conn}: a {api} exchange over {transport}: {why}")

    def ws_open(self, conn: int, extensions: str) -> None:
        """A WebSocket upgrade was accepted on ``conn`` (``extensions``: the server's
        ``Sec-WebSocket-Extensions`` answer): its frames follow."""
        deflate = deflate_agreed(extensions)
        to_server, to_client = deflate if deflate is not None else (None, None)
        self._ws[conn] = _WsConnection(
            self,
            conn,
            WsDecoder(masked=True, deflate=to_server),
            WsDecoder(masked=False, deflate=to_client),
        )

    def ws_client(self, conn: int, data: bytes, t_ns: int) -> None:
        ws = self._ws[conn]
        ws.from_client(ws.to_server.feed(data), t_ns)

    def ws_server(self, conn: int, data: bytes, t_ns: int) -> None:
        ws = self._ws[conn]
        ws.from_server(ws.to_client.feed(data), t_ns)

    def ws_close(self, conn: int, t_ns: int) -> None:
        """The connection ended: requests still waiting for their response end failed."""
        ws = self._ws.pop(conn, None)
        if ws is not None:
            ws.close(t_ns)

    def _record(self, ex: Exchange | None) -> None:
        if ex is not None:
            self.out.exchanges.append(ex)


STEPS: dict[str, Callable[..., None]] = {
    "http": Observer.http,
    "failed": Observer.failed,
    "ws_open": Observer.ws_open,
    "ws_client": Observer.ws_client,
    "ws_server": Observer.ws_server,
    "ws_close": Observer.ws_close,
}


class _WsConnection:
    """Requests in flight on one WebSocket connection, per lane (``stream_id``).

    ``t_ns`` is when the relay saw the bytes, not when they are read here.
    """

    def __init__(self, observer: Observer, conn: int, to_server: WsDecoder, to_client: WsDecoder):
        self.observer = observer
        self.conn = conn
        self.to_server = to_server
        self.to_client = to_client
        self.pending: dict[str | None, deque[tuple[bytes, int, list[bytes]]]] = {}

    def from_client(self, messages: list[bytes], t_ns: int) -> None:
        for m in messages:
            if b"response.create" not in m:
                continue  # cheap: most client messages are not one
            event = _event(m)
            if event is None or event.get("type") != "response.create":
                continue
            lane = _lane_of(event)
            self.pending.setdefault(lane, deque()).append((m, t_ns, []))

    def from_server(self, messages: list[bytes], t_ns: int) -> None:
        now = t_ns
        for m in messages:
            # The event's own type, not a substring: a response object carries "error": null
            # from its first event on, and any text may contain an event name.
            event = _event(m)
            if event is None:
                continue
            queue = self.pending.get(_lane_of(event)) or self.pending.get(None)
            if not queue:
                continue
            request, t_start, events = queue[0]
            events.append(m)
            kind = event.get("type")
            if kind in TERMINAL_TYPES or kind == ERROR:
                queue.popleft()
                status = 200 if kind in (COMPLETED, INCOMPLETE) else 500
                self.observer._record(
                    summarize(
                        "responses",
                        "ws",
                        self.conn,
                        request,
                        status,
                        b"\n".join(events),
                        {},
                        (t_start, now),
                        self.observer.keep_content,
                    )
                )

    def close(self, t_ns: int) -> None:
        why = "the connection closed before the response ended"
        for side, decoder in (("client", self.to_server), ("server", self.to_client)):
            if decoder.broken is not None:
                why = f"the {side}'s frames could not be read after {decoder.broken}"
                break
        for queue_ in self.pending.values():
            for _, t_start, _ in queue_:
                self.observer.failed("responses", "ws", self.conn, t_start, t_ns, 499, why)
        self.pending.clear()


def _event(message: bytes) -> dict[str, Any] | None:
    try:
        event = orjson.loads(message)
    except orjson.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def _lane_of(event: dict[str, Any]) -> str | None:
    lane = event.get("stream_id")
    return lane if isinstance(lane, str) else None


def serve_observer(steps: Connection, results: Connection, keep_content: bool) -> None:
    """The observer's process: read steps until ``None``, then send back :class:`Observed`."""
    with contextlib.suppress(OSError):
        os.nice(NICE)
    # The relay's process owns the terminal: Ctrl-C reaches it, which ends this one by
    # sending None, after the steps in flight were read.
    # A SIGTERM sent to the whole group (GNU timeout, systemd) is the relay's to act on too:
    # it sends None; the relay's stop() kills this process if it does not end.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    observer = Observer(keep_content)
    results.send(READY)
    while True:
        try:
            item = steps.recv()
        except (EOFError, OSError):  # the proxy died (mid-message, maybe): nobody to answer
            return
        if item is None:
            break
        for conn, name, args in item:
            observer.step(conn, name, args)
    results.send(observer.out)
