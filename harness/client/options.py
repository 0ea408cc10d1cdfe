"""The client settings both edges read: where to connect, how long to wait, what to authenticate with."""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field, fields
from typing import Any

from harness.client.shaping import NO_SHAPING, RequestShaping
from harness.wire.credentials import PLACEHOLDER_API_KEY
from harness.wire.tokens import FIXED_WIDTH, TokenConvention

RECOVER_FROM = ("full", "compacted")
#: how a WebSocket transport runs a rollout's sub-agents (docs/metrics.md §1.7)
WS_SUBAGENTS = ("connection", "lanes")


@dataclass(frozen=True, slots=True, kw_only=True)
class ClientSettings:
    """The settings that can change a measurement, as the user gave them: carried whole from
    the flags to the transports, ``manifest.json`` and the Locust workers."""

    api_key: str = PLACEHOLDER_API_KEY
    #: False: send no loopbench.* metadata hints (what a real endpoint sees; nothing else changes)
    hints: bool = True
    keepalive: bool = True
    verify_tls: bool = True
    request_timeout_s: float = 120.0
    #: the ``messages`` transport's prompt-cache breakpoints: ``none``, ``system`` (system
    #: prompt and last tool) or ``conversation`` (those and the last message's last block)
    cache_control: str = "conversation"
    #: what a ``previous_response_not_found`` recovery resends once the rollout compacted:
    #: ``full`` (every item, as a client without compaction) or ``compacted`` (the
    #: compacted base and the items since); see harness/client/recovery.py
    recover_from: str = "full"
    #: extra headers, the session-affinity header and extra body fields (harness/client/shaping.py)
    shaping: RequestShaping = NO_SHAPING
    #: a WebSocket rollout's sub-agents: a connection each (``connection``), or lanes
    #: (``stream_id``) on the rollout's own connection (``lanes``); None: the scenario's
    #: rollout.subagents.ws decides
    ws_subagents: str | None = None
    #: how reads are stamped: ``auto``, ``kernel`` (the socket's receive time, plain TCP only)
    #: or ``user`` (perf_counter_ns when the read returned); docs/metrics.md §1.9
    rx_stamp: str = "auto"

    def manifest_dict(self, *, tokenizer: str, rx_stamp: str) -> dict[str, Any]:
        """The manifest's ``client_options``. ``tokenizer`` is the token convention's name,
        ``rx_stamp`` how the client stamped reads (``--rx-stamp auto`` resolved). The shaping
        goes in by header names, never their values (:meth:`RequestShaping.describe`)."""
        out: dict[str, Any] = {
            "hints": self.hints,
            "keepalive": self.keepalive,
            # only when not the default, so manifests of runs without it read as before
            **(
                {"cache_control": self.cache_control}
                if self.cache_control != "conversation"
                else {}
            ),
            "verify_tls": self.verify_tls,
            "request_timeout_s": self.request_timeout_s,
            "recover_from": self.recover_from,
            "tokenizer": tokenizer,
            "shaping": self.shaping.describe(),
        }
        if self.ws_subagents is not None:
            out["ws_subagents"] = self.ws_subagents
        out["rx_stamp"] = rx_stamp
        out["rx_stamp_option"] = self.rx_stamp
        return out


DEFAULT_SETTINGS = ClientSettings()


@dataclass(frozen=True, slots=True)
class TransportOptions(ClientSettings):
    """:class:`ClientSettings` for one target, as a transport reads them: with the
    connection's own settings, the tokenizer loaded and the choices made."""

    base_url: str  # e.g. http://127.0.0.1:8000/v1
    _: KW_ONLY
    connect_timeout_s: float = 10.0
    #: the asyncio edge's HTTP connection pool bound
    max_connections: int = 256
    extra_headers: dict[str, str] = field(default_factory=dict)
    #: sizes the synthetic text and counts streamed tokens (--tokenizer; default 4 characters)
    tokens: TokenConvention = FIXED_WIDTH
    #: resolved: the option or the scenario's choice
    ws_subagents: str = "connection"
    #: resolved: ``kernel`` or ``user`` (``auto`` is resolved where the client runs,
    #: harness/transports/rx_socket.py)
    rx_stamp: str = "user"

    @classmethod
    def of(cls, settings: ClientSettings, base_url: str, **own: Any) -> TransportOptions:
        """``settings`` for ``base_url``; ``own``: the fields only a transport has, and the
        resolved ``ws_subagents`` and ``rx_stamp`` (their defaults here when left out)."""
        given = {f.name: getattr(settings, f.name) for f in fields(ClientSettings)}
        del given["ws_subagents"], given["rx_stamp"]
        return cls(base_url=base_url, **given, **own)

    @property
    def ws_url(self) -> str:
        base = self.base_url.rstrip("/")
        if base.startswith("https://"):
            base = "wss://" + base[len("https://") :]
        elif base.startswith("http://"):
            base = "ws://" + base[len("http://") :]
        return base + "/responses"
