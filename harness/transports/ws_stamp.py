"""A websockets client connection that stamps each message when its last frame arrives.

``async for raw in conn`` hands a message to the reader one event-loop hop
after the bytes arrived, later still when the loop is busy with other streams;
a timestamp taken there measures the client's own queueing.  This subclass
records, for every complete data message, the ``perf_counter_ns`` at which
the ``data_received`` call that completed it began — the I/O edge, before the
frame parser runs, as the HTTP transport's ``data_received`` does — and
:meth:`StampedConnection.arrival` hands the stamps out in message order.

Over a kernel-stamping transport (:mod:`harness.transports.rx_socket`) the stamp is
the kernel's receive time of that read, and the user-space one travels with it (the
turn records the first token's pair, docs/metrics.md §1.9).
"""

from __future__ import annotations

import time
from collections import deque
from typing import Any

from websockets.asyncio.client import ClientConnection
from websockets.frames import DATA_OPCODES, Frame

from harness.transports.rx_socket import RxTransport


class StampedConnection(ClientConnection):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: (stamp, user-space stamp when the stamp is the kernel's, else 0) per message
        self._arrivals: deque[tuple[int, int]] = deque()
        self._received = (0, 0)
        self._rx: RxTransport | None = None
        #: when the transport was handed over: over TLS, when the handshake completed
        self.made_ns = 0

    def connection_made(self, transport: Any) -> None:
        self.made_ns = time.perf_counter_ns()
        if isinstance(transport, RxTransport):
            self._rx = transport
        super().connection_made(transport)

    def data_received(self, data: bytes) -> None:
        # Stamped before the frame parser runs: every message completed by these bytes
        # arrived now, however long parsing the ones before it in the same read takes.
        user_ns = time.perf_counter_ns()
        rx = self._rx
        if rx is not None and rx.rx_kernel:
            self._received = (rx.rx_ns, user_ns)
        else:
            self._received = (user_ns, 0)
        super().data_received(data)

    def process_event(self, event: Any) -> None:
        # A final frame completes a message (unfragmented TEXT/BINARY, or the last CONT).
        if isinstance(event, Frame) and event.fin and event.opcode in DATA_OPCODES:
            received = self._received
            self._arrivals.append(received if received[0] else (time.perf_counter_ns(), 0))
        super().process_event(event)

    def arrival(self) -> tuple[int, int]:
        """When the message just read arrived, and the user-space stamp of that read if the
        first is the kernel's (else 0); now, if it was never stamped."""
        arrivals = self._arrivals
        return arrivals.popleft() if arrivals else (time.perf_counter_ns(), 0)

    def arrival_ns(self) -> int:
        """When the message just read arrived; now, if it was never stamped."""
        return self.arrival()[0]


def arrival(conn: ClientConnection) -> tuple[int, int]:
    """:meth:`StampedConnection.arrival` of ``conn`` (now, 0 for other connections)."""
    if isinstance(conn, StampedConnection):
        return conn.arrival()
    return time.perf_counter_ns(), 0


def arrival_ns(conn: ClientConnection) -> int:
    """The arrival stamp of the message just read from ``conn`` (now for other connections)."""
    return arrival(conn)[0]
