"""Server settings: every option of the reference server, declared once.

Each field is declared once: its default, and in its metadata (``option(...)``,
reference_server/core/options.py) its command-line flag, help text and the check
its value must pass.  ``ServerConfig.__post_init__`` runs the checks, so a config
built in code (``create_app(ServerConfig(...))``) is validated exactly like one
from the command line, and ``reference_server/cli.py`` builds the parser and the
argv <-> config mapping from the same declarations.  Adding an option is one
field here (and its row in docs/server.md).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from reference_server.core.faults import FaultSpec
from reference_server.core.options import (
    Option,
    at_least,
    close_code,
    declared,
    default_value,
    non_empty,
    non_negative,
    option,
    port_number,
    positive,
    validate,
)

MiB = 1024 * 1024
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
SSE_ERROR_SHAPES = ("nested", "flat")

# Sections of --help ("" is the general options).
STORE = "store"
ACCESS = "access"
LIMITS = "limits"
FAULTS = "fault injection (client recovery tests)"
RELIABILITY = "reliability"


@dataclass(slots=True)
class ServerConfig:
    host: str = field(
        default="127.0.0.1",
        metadata=option(
            flag="--host",
            help="address to bind (default 127.0.0.1: loopback only)",
            check=non_empty,
        ),
    )
    port: int = field(
        default=8000,
        metadata=option(
            flag="--port", help="port to bind; 0 picks a free port and prints it", check=port_number
        ),
    )
    api_profile: str = field(
        default="optimized",
        metadata=option(
            flag="--api-profile",
            help="API-tier profile: legacy, optimized or a YAML path",
            check=non_empty,
        ),
    )
    engine_profile: str = field(
        default="cerebras-spark",
        metadata=option(
            flag="--engine-profile",
            help="engine profile: cerebras-spark, gpu-legacy or a YAML path",
            check=non_empty,
        ),
    )
    overrides: dict[str, str] = field(
        default_factory=dict,
        metadata=option(
            flag="--set",
            metavar="KEY=VALUE",
            help="override a profile parameter, e.g. engine.sustained_tps=500 (repeatable)",
        ),
    )
    seed: int = field(
        default=0,
        metadata=option(flag="--seed", help="seed of the simulated model's randomness"),
    )
    model: str = field(
        default="sim-model",
        metadata=option(flag="--model", help="the model id /v1/models lists", check=non_empty),
    )
    # Output policy defaults (docs/model.md)
    default_output_tokens: int = field(
        default=200,
        metadata=option(
            flag="--default-output-tokens",
            help="output tokens of an answer when neither a hint nor max_output_tokens sets them",
            check=at_least(1),
        ),
    )
    default_auto_tool_calls: int = field(
        default=3,
        metadata=option(
            flag="--default-tool-calls",
            help="function calls a tool_choice=auto chain makes before answering",
            check=at_least(0),
        ),
    )
    # Wire options (docs/protocol.md)
    sse_done_marker: bool = field(
        default=False,
        metadata=option(flag="--sse-done", help="end SSE streams with 'data: [DONE]'"),
    )
    sse_error_shape: str = field(
        default="nested",
        metadata=option(
            flag="--sse-error-shape",
            choices=SSE_ERROR_SHAPES,
            help="shape of mid-stream SSE error events (and of mid-stream WebSocket errors)",
        ),
    )
    min_delta_interval_ms: float | None = field(
        default=None,
        metadata=option(
            flag="--min-delta-interval-ms",
            help="coalesce due tokens so deltas are at least this far apart (default: profile)",
            check=non_negative,
        ),
    )
    store_path: str | None = field(
        default=None,
        metadata=option(
            flag="--store",
            group=STORE,
            metavar="PATH",
            help="SQLite file for store:true responses (default: <user cache dir>/loopbench/"
            "responses.sqlite3); ':memory:' keeps them in process only",
            check=non_empty,
        ),
    )
    store_retention_s: float = field(
        default=30 * 24 * 3600.0,
        metadata=option(
            flag="--store-retention-s",
            group=STORE,
            help="drop stored responses older than this at startup (default 30 days)",
            check=positive,
        ),
    )
    # Access control: no keys = any key is accepted
    api_keys: tuple[str, ...] = field(
        default=(),
        metadata=option(
            flag="--api-key",
            group=ACCESS,
            metavar="KEY",
            help="accept only this bearer key (repeatable; default: any key; also "
            "LOOPBENCH_API_KEYS=k1,k2 and --api-key-file)",
            check=lambda keys: None if all(k.strip() for k in keys) else "non-empty keys",
        ),
    )
    max_connections_per_client: int = field(
        default=1024,
        metadata=option(
            flag="--max-connections-per-client",
            group=ACCESS,
            help="open connections per client address (429 beyond; 0: no limit)",
            check=at_least(0),
        ),
    )
    rate_limit_rps: float | None = field(
        default=None,
        metadata=option(
            flag="--rate-limit-rps",
            group=ACCESS,
            help="admit at most this many requests/creates per second (429 + retry-after beyond)",
            check=positive,
        ),
    )
    rate_limit_burst: float | None = field(
        default=None,
        metadata=option(
            flag="--rate-limit-burst",
            group=ACCESS,
            help="token-bucket depth (default: 1 s worth)",
            check=positive,
        ),
    )
    # Limits (each exceeded limit gets a documented error, never unbounded memory)
    max_body_bytes: int = field(
        default=16 * MiB,
        metadata=option(
            flag="--max-body-bytes",
            group=LIMITS,
            help="HTTP request body (413 beyond)",
            check=at_least(1),
        ),
    )
    max_ws_message_bytes: int = field(
        default=16 * MiB,
        metadata=option(
            flag="--max-ws-message-bytes",
            group=LIMITS,
            help="one WebSocket message (message_too_large beyond)",
            check=at_least(1),
        ),
    )
    max_connections: int = field(
        default=4096,
        metadata=option(
            flag="--max-connections",
            group=LIMITS,
            help="open WebSockets + HTTP requests in progress (503 beyond)",
            check=at_least(1),
        ),
    )
    ws_max_lanes: int = field(
        default=32,
        metadata=option(
            flag="--ws-max-lanes",
            group=LIMITS,
            help="named stream_ids per connection",
            check=at_least(1),
        ),
    )
    ws_max_in_flight: int = field(
        default=16,
        metadata=option(
            flag="--ws-max-in-flight",
            group=LIMITS,
            help="responses generating at once per connection",
            check=at_least(1),
        ),
    )
    ws_max_queued: int = field(
        default=256,
        metadata=option(
            flag="--ws-max-queued",
            group=LIMITS,
            help="creates waiting per connection (429 beyond)",
            check=at_least(1),
        ),
    )
    ws_max_cached_bytes: int = field(
        default=64 * MiB,
        metadata=option(
            flag="--ws-max-cached-bytes",
            group=LIMITS,
            help="lane cache per connection; least recently used lanes are dropped beyond it",
            check=at_least(0),
        ),
    )
    ws_max_lifetime_s: float = field(
        default=3600.0,
        metadata=option(
            flag="--ws-max-lifetime-s",
            group=LIMITS,
            help="connection lifetime; later creates get websocket_connection_limit_reached",
            check=positive,
        ),
    )
    ws_lifetime_close_code: int = field(
        default=1001,
        metadata=option(
            flag="--ws-lifetime-close-code",
            group=LIMITS,
            help="close code sent after the lifetime error (1001: SDK auto-reconnect engages)",
            check=close_code,
        ),
    )
    # The N-th response (or resumed append segment) of every WS connection is cut after
    # its first delta by a close with ws_fault_close_code (0: never).
    ws_fault_close_after: int = field(
        default=0,
        metadata=option(
            flag="--ws-fault-close-after",
            group=FAULTS,
            metavar="N",
            help="cut the N-th response of every WebSocket connection after its first delta (0: off)",
            check=at_least(0),
        ),
    )
    ws_fault_close_code: int = field(
        default=1011,
        metadata=option(
            flag="--ws-fault-close-code",
            group=FAULTS,
            help="close code of the injected cut",
            check=close_code,
        ),
    )
    # Seeded faults per request (reference_server/core/faults.py; docs/reliability.md)
    faults: FaultSpec = field(
        default_factory=FaultSpec,
        metadata=option(
            flag="--fault",
            group=FAULTS,
            metavar="KEY=VALUE",
            help="seeded per-request faults, e.g. error_rate.503=0.02, disconnect_rate=0.01, "
            "stall_rate=0.01, stall_s=30, spike_rate=0.05, spike_ms=300, evict_rate=0.1, "
            "lifetime_s=5, seed=1 (repeatable; docs/reliability.md)",
        ),
    )
    send_timeout_s: float = field(
        default=30.0,
        metadata=option(
            flag="--send-timeout-s",
            group=RELIABILITY,
            help="drop a peer that has not read for this long (its send stays blocked)",
            check=positive,
        ),
    )
    drain_timeout_s: float = field(
        default=30.0,
        metadata=option(
            flag="--drain-timeout-s",
            group=RELIABILITY,
            help="on SIGTERM, how long responses in flight may take to finish before they are cut",
            check=positive,
        ),
    )
    ws_ping_interval_s: float = field(
        default=20.0,
        metadata=option(
            flag="--ws-ping-interval-s",
            group=RELIABILITY,
            help="WebSocket keepalive pings; a peer that does not answer within as long is dropped",
            check=positive,
        ),
    )
    log_level: str = field(
        default="warning",
        metadata=option(flag="--log-level", choices=LOG_LEVELS, help="uvicorn log level"),
    )
    # Server processes sharing the listening socket (reference_server/workers.py); each
    # worker gets 1/workers of the modelled capacity, and its index keeps ids distinct.
    workers: int = field(
        default=1,
        metadata=option(
            flag="--workers",
            help="server processes sharing the port, each with 1/N of the modelled capacity "
            "(needs a --store file when > 1; see BENCHMARKS.md)",
            check=at_least(1),
        ),
    )
    worker_index: int = field(
        default=0,
        metadata=option(
            flag=None, help="this worker's index (set by the supervisor)", check=at_least(0)
        ),
    )

    def __post_init__(self) -> None:
        validate(self)

    @property
    def ws_lifetime_s(self) -> float:
        """The WebSocket lifetime in force: the limit, or a shorter injected ``lifetime_s``."""
        if self.faults.lifetime_s is None:
            return self.ws_max_lifetime_s
        return min(self.ws_max_lifetime_s, self.faults.lifetime_s)


def options() -> list[tuple[str, Any, Option]]:
    """(field name, resolved type, declaration) of every server option, in declaration order."""
    return declared(ServerConfig)


def default_of(name: str) -> Any:
    return default_value(ServerConfig, name)
