"""A websockets client connection that stamps each message when its last frame arrives.

``async for raw in conn`` hands a message to the reader one event-loop hop
after the bytes arrived, later still when the loop is busy with other streams;
a timestamp taken there measures the client's own queueing.  This subclass
records, for every complete data message, the ``perf_counter_ns`` at which
the ``data_received`` call that completed it began — the I/O edge, before the
frame parser runs, as the HTTP transport's ``data_received`` does — and
:meth:`StampedConnection.arrival_ns` hands the stamps out in message order.
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.frames import DATA_OPCODES, Frame


class StampedConnection(ClientConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._arrivals: deque[int] = deque()
        self._received_ns = 0
        #: when the transport was handed over: over TLS, when the handshake completed
        self.made_ns = 0

    def connection_made(self, transport: Any) -> None:
        self.made_ns = time.perf_counter_ns()
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        # Stamped before the frame parser runs: every message completed by these bytes
        # arrived now, however long parsing the ones before it in the same read takes.
        self._received_ns = time.perf_counter_ns()
        super().data_received(data)

    def process_event(self, event: Any) -> None:
        # A final frame completes a message (unfragmented TEXT/BINARY, or the last CONT).
        if isinstance(event, Frame) and event.fin and event.opcode in DATA_OPCODES:
            self._arrivals.append(self._received_ns or time.perf_counter_ns())
        super().process_event(event)

    def arrival_ns(self) -> int:
        """When the message just read arrived; now, if it was never stamped."""
        arrivals = self._arrivals
        return arrivals.popleft() if arrivals else time.perf_counter_ns()


def arrival_ns(conn: ClientConnection) -> int:
    """The arrival stamp of the message just read from ``conn`` (now for other connections)."""
    if isinstance(conn, StampedConnection):
        return conn.arrival_ns()
    return time.perf_counter_ns()
