"""The transport seam: every way of talking to an endpoint implements these two protocols.

A :class:`Transport` is shared by all rollouts of a run (it owns pools and
settings); a :class:`Session` is one rollout's conversation (it owns the
WebSocket, or the last response id).  ``Session.turn`` sends one request, feeds
every event into a :class:`~harness.client.stream.ResponseStream` with the
monotonic time it was read, and fills the turn record.  It raises only
:class:`~harness.wire.errors.TransportError` subclasses.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Protocol

from harness.client.stream import ResponseStream
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


@dataclass(slots=True)
class TransportOptions:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    api_key: str = "sk-loopbench"
    keepalive: bool = True
    verify_tls: bool = True
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 120.0
    max_connections: int = 256
    extra_headers: dict[str, str] = field(default_factory=dict)

    @property
    def ws_url(self) -> str:
        base = self.base_url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        elif base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        return base + "/responses"


class Session(Protocol):
    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream: ...

    async def close(self) -> None: ...


class Transport(Protocol):
    name: str

    async def session(self) -> Session: ...

    async def aclose(self) -> None: ...
