"""The client settings both edges read: where to connect, how long to wait, what to authenticate with."""

from __future__ import annotations

from dataclasses import dataclass, field

from harness.client.shaping import NO_SHAPING, RequestShaping
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.tokens import FIXED_WIDTH, TokenConvention

RECOVER_FROM = ("full", "compacted")
#: how a WebSocket transport runs a rollout's sub-agents (docs/metrics.md §1.7)
WS_SUBAGENTS = ("connection", "lanes")


@dataclass(slots=True)
class TransportOptions:
    base_url: str  # e.g. http://127.0.0.1:8000/v1
    api_key: str = PLACEHOLDER_API_KEY
    keepalive: bool = True
    verify_tls: bool = True
    connect_timeout_s: float = 10.0
    request_timeout_s: float = 120.0
    #: the asyncio edge's HTTP connection pool bound
    max_connections: int = 256
    extra_headers: dict[str, str] = field(default_factory=dict)
    #: the ``messages`` transport's prompt-cache breakpoints: ``none``, ``system`` (system
    #: prompt and last tool) or ``conversation`` (those and the last message's last block)
    cache_control: str = "conversation"
    #: what a ``previous_response_not_found`` recovery resends once the rollout compacted:
    #: ``full`` (every item, as a client without compaction) or ``compacted`` (the
    #: compacted base and the items since); see harness/client/recovery.py
    recover_from: str = "full"
    #: extra headers, the session-affinity header and extra body fields (harness/client/shaping.py)
    shaping: RequestShaping = NO_SHAPING
    #: sizes the synthetic text and counts streamed tokens (--tokenizer; default 4 characters)
    tokens: TokenConvention = FIXED_WIDTH
    #: a WebSocket rollout's sub-agents: a connection each (``connection``), or lanes
    #: (``stream_id``) on the rollout's own connection (``lanes``)
    ws_subagents: str = "connection"
    #: how reads are stamped: ``kernel`` (the socket's receive time, plain TCP only) or ``user``
    #: (perf_counter_ns when the read returned); ``--rx-stamp auto`` is resolved before it gets
    #: here (harness/transports/rx_socket.py, docs/metrics.md §1.9)
    rx_stamp: str = "user"

    @property
    def ws_url(self) -> str:
        base = self.base_url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        elif base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        return base + "/responses"
