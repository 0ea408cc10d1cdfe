"""The transport seam: every way of talking to an endpoint implements these two protocols.

A :class:`Transport` is shared by all rollouts of a run (it owns pools and
settings); a :class:`Session` is one rollout's conversation (it owns the
WebSocket, or the last response id).  ``Session.turn`` sends one request, feeds
every event into a :class:`~harness.client.stream.ResponseStream` with the
monotonic time it was read, and fills the turn record.  It raises only
:class:`~harness.wire.errors.TransportError` subclasses.  What is sent and how
failures are recovered is decided in :mod:`harness.client`; this edge does the I/O.
"""

from __future__ import annotations

from typing import Protocol

from harness.client.options import TransportOptions
from harness.client.stream import ResponseStream
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


class Session(Protocol):
    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream: ...

    async def close(self) -> None: ...


class Transport(Protocol):
    name: str
    #: the run's client settings (the rollout loop reads its token convention)
    options: TransportOptions

    async def session(self, rollout_key: str | None = None) -> Session:
        """One rollout's session; ``rollout_key`` is the value of its session-affinity header
        (harness/client/shaping.py), None when the caller has no rollout to name."""
        ...

    async def aclose(self) -> None: ...
