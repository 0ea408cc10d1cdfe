"""Server settings: every option of the reference server, declared once.

Each field is declared once with ``setting(...)`` (reference_server/core/options.py): its
default, flag, help text and check.  ``__post_init__`` runs the checks, so a config built in
code is validated exactly like one from the command line, whose parser ``cli.py`` builds from
the same declarations.  Adding an option is one field here (and its row in docs/server.md).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from harness.wire.validation import shown
from reference_server.core.faults import FaultSpec
from reference_server.core.options import (
    Option,
    ServerConfigError,
    at_least,
    close_code,
    declared,
    default_value,
    non_empty,
    non_negative,
    port_number,
    positive,
    setting,
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
TLS = "TLS (docs/server.md)"


def non_empty_keys(keys: tuple[str, ...]) -> str | None:
    return None if all(k.strip() for k in keys) else "non-empty keys"


# One option per row: name, type, default, flag, then its help on the next line.
@dataclass(slots=True)
class ServerConfig:
    # fmt: off
    host: str = setting("127.0.0.1", "--host", check=non_empty,
        help="address to bind (default 127.0.0.1: loopback only)")
    port: int = setting(8000, "--port", check=port_number,
        help="port to bind; 0 picks a free port and prints it")
    api_profile: str = setting("optimized", "--api-profile", check=non_empty,
        help="API-tier profile: legacy, optimized or a YAML path")
    engine_profile: str = setting("cerebras-spark", "--engine-profile", check=non_empty,
        help="engine profile: cerebras-spark, gpu-legacy or a YAML path")
    overrides: dict[str, str] = setting(flag="--set", factory=dict, metavar="KEY=VALUE",  # noqa: RUF009 (a field())
        help="override a profile parameter, e.g. engine.sustained_tps=500 (repeatable)")
    seed: int = setting(0, "--seed",
        help="seed of the simulated model's randomness")
    model: str = setting("sim-model", "--model", check=non_empty,
        help="the model id /v1/models lists")
    access_log: bool = setting(False, "--access-log",
        help="log one line per HTTP request and per WebSocket response.create to stderr "
        "(method, path, status, duration); off by default so benchmarks pay nothing for it")
    timing_log: str | None = setting(None, "--timing-log", metavar="PATH", check=non_empty,
        help="append one JSON line per finished response to PATH (its id, X-Request-ID, lbq- tag, "
        "arrival and first-token times, sim_timing), written off the event loop; loopbench serve "
        "starts the file empty (docs/server.md \"Timing log\")")
    # Output policy defaults (docs/model.md)
    default_output_tokens: int | None = setting(None, "--default-output-tokens", check=at_least(1),
        help="make every answer (and every function call) this many output tokens when no hint "
        "sets them, instead of drawing from the engine profile's text_tokens / tool_call_tokens; "
        "the request's max_output_tokens still cuts it")
    default_auto_tool_calls: int = setting(3, "--default-tool-calls", check=at_least(0),
        help="function calls a tool_choice=auto chain makes before answering")
    # Wire options (docs/protocol.md)
    sse_done_marker: bool = setting(False, "--sse-done",
        help="end SSE streams with 'data: [DONE]'")
    sse_error_shape: str = setting("nested", "--sse-error-shape", choices=SSE_ERROR_SHAPES,
        help="shape of mid-stream SSE error events (and of mid-stream WebSocket errors)")
    # An HTTP-only deployment, as many Responses endpoints are (what loopbench probe and
    # run --target must recognise before measuring a ws transport).
    no_websocket: bool = setting(False, "--no-websocket",
        help="refuse WebSocket upgrades with HTTP 404 and a JSON error saying WebSocket "
        "mode is disabled (an HTTP-only endpoint)")
    min_delta_interval_ms: float | None = setting(None, "--min-delta-interval-ms", check=non_negative,
        help="coalesce due tokens so deltas are at least this far apart (default: profile)")
    store_path: str | None = setting(None, "--store", group=STORE, metavar="PATH", check=non_empty,
        help="SQLite file for store:true responses (default: <user cache dir>/loopbench/"
        "responses.sqlite3); ':memory:' keeps them in process only")
    store_retention_s: float = setting(30 * 24 * 3600.0, "--store-retention-s", group=STORE, check=positive,
        help="drop stored responses older than this at startup (default 30 days)")
    store_max_responses: int = setting(100_000, "--store-max-responses", group=STORE, check=at_least(1),
        help="keep at most this many stored responses (default 100,000); the oldest are pruned, a hundredth of the cap at a time")
    max_background: int = setting(256, "--max-background", group=LIMITS, check=at_least(1),
        help="background responses queued or in progress at once (default 256; 429 beyond)")
    # Access control: no keys = any key is accepted
    api_keys: tuple[str, ...] = setting((), "--api-key", group=ACCESS, metavar="KEY", check=non_empty_keys,
        help="accept only this bearer key (repeatable; default: any key; also "
        "LOOPBENCH_API_KEYS=k1,k2 and --api-key-file)")
    max_connections_per_client: int = setting(1024, "--max-connections-per-client", group=ACCESS, check=at_least(0),
        help="open connections per client address (429 beyond; 0: no limit)")
    rate_limit_rps: float | None = setting(None, "--rate-limit-rps", group=ACCESS, check=positive,
        help="admit at most this many requests/creates per second (429 + retry-after beyond)")
    rate_limit_burst: float | None = setting(None, "--rate-limit-burst", group=ACCESS, check=positive,
        help="token-bucket depth (default: 1 s worth)")
    # Limits (each exceeded limit gets a documented error, never unbounded memory)
    max_body_bytes: int = setting(16 * MiB, "--max-body-bytes", group=LIMITS, check=at_least(1),
        help="HTTP request body (413 beyond)")
    max_ws_message_bytes: int = setting(16 * MiB, "--max-ws-message-bytes", group=LIMITS, check=at_least(1),
        help="one WebSocket message (message_too_large beyond)")
    max_connections: int = setting(4096, "--max-connections", group=LIMITS, check=at_least(1),
        help="open WebSockets + HTTP requests in progress (503 beyond)")
    ws_max_lanes: int = setting(32, "--ws-max-lanes", group=LIMITS, check=at_least(1),
        help="named stream_ids per connection")
    ws_max_in_flight: int = setting(16, "--ws-max-in-flight", group=LIMITS, check=at_least(1),
        help="responses generating at once per connection")
    ws_max_queued: int = setting(256, "--ws-max-queued", group=LIMITS, check=at_least(1),
        help="creates waiting per connection (429 beyond)")
    ws_max_cached_bytes: int = setting(64 * MiB, "--ws-max-cached-bytes", group=LIMITS, check=at_least(0),
        help="lane cache per connection; least recently used lanes are dropped beyond it")
    ws_max_lifetime_s: float = setting(3600.0, "--ws-max-lifetime-s", group=LIMITS, check=positive,
        help="connection lifetime; later creates get websocket_connection_limit_reached")
    ws_lifetime_close_code: int = setting(1001, "--ws-lifetime-close-code", group=LIMITS, check=close_code,
        help="close code sent after the lifetime error (1001: SDK auto-reconnect engages)")
    # The N-th response (or resumed append segment) of every WS connection is cut after
    # its first delta by a close with ws_fault_close_code (0: never).
    ws_fault_close_after: int = setting(0, "--ws-fault-close-after", group=FAULTS, metavar="N", check=at_least(0),
        help="cut the N-th response of every WebSocket connection after its first delta (0: off)")
    # Only the first K connections get the cut (0: every one): a client that reconnects after
    # it is cut once goes on, and a test sees exactly K recoveries.
    ws_fault_close_connections: int = setting(0, "--ws-fault-close-connections", group=FAULTS, metavar="K", check=at_least(0),
        help="cut only the first K WebSocket connections (per worker) that reach their N-th response (0: every one)")
    ws_fault_close_code: int = setting(1011, "--ws-fault-close-code", group=FAULTS, check=close_code,
        help="close code of the injected cut")
    # Seeded faults per request (reference_server/core/faults.py; docs/reliability.md)
    faults: FaultSpec = setting(flag="--fault", factory=FaultSpec, group=FAULTS, metavar="KEY=VALUE",  # noqa: RUF009 (a field())
        help="seeded per-request faults, e.g. error_rate.503=0.02, disconnect_rate=0.01, "
        "stall_rate=0.01, stall_s=30, spike_rate=0.05, spike_ms=300, evict_rate=0.1, "
        "lifetime_s=5, seed=1 (repeatable; docs/reliability.md)")
    send_timeout_s: float = setting(30.0, "--send-timeout-s", group=RELIABILITY, check=positive,
        help="drop a peer that has not read for this long (its send stays blocked)")
    drain_timeout_s: float = setting(30.0, "--drain-timeout-s", group=RELIABILITY, check=positive,
        help="on SIGTERM, how long responses in flight may take to finish before they are cut")
    ws_ping_interval_s: float = setting(20.0, "--ws-ping-interval-s", group=RELIABILITY, check=positive,
        help="WebSocket keepalive pings; a peer that does not answer within as long is dropped")
    # A child server whose harness was killed (kill -9 leaves no chance to stop it) must not
    # outlive it: loopbench's embedded server is started with this flag.
    exit_with_parent: bool = setting(False, "--exit-with-parent", group=RELIABILITY,
        help="shut down gracefully (as on SIGTERM) once the process that started this one is gone")
    # TLS (reference_server/tls.py): the files are checked at startup, before serving.
    tls_cert: str | None = setting(None, "--tls-cert", group=TLS, metavar="PATH", check=non_empty,
        help="serve HTTPS and WSS with this PEM certificate (chain); needs --tls-key")
    tls_key: str | None = setting(None, "--tls-key", group=TLS, metavar="PATH", check=non_empty,
        help="the certificate's unencrypted PEM private key")
    tls_self_signed: bool = setting(False, "--tls-self-signed", group=TLS,
        help="serve HTTPS and WSS with a certificate for localhost, 127.0.0.1 and ::1 made at "
        "startup (clients must skip verification, e.g. loopbench run --insecure)")
    log_level: str = setting("warning", "--log-level", choices=LOG_LEVELS,
        help="uvicorn log level")
    # Server processes sharing the listening socket (reference_server/workers.py); each
    # worker gets 1/workers of the modelled capacity, and its index keeps ids distinct.
    workers: int = setting(1, "--workers", check=at_least(1),
        help="server processes sharing the port, each with 1/N of the modelled capacity "
        "(needs a --store file when > 1; see BENCHMARKS.md)")
    worker_index: int = setting(0, None, check=at_least(0),
        help="this worker's index (set by the supervisor)")
    # fmt: on

    def __post_init__(self) -> None:
        validate(self)
        _check_tls(self)

    @property
    def tls(self) -> bool:
        """Whether the server speaks TLS (its URLs are https:// and wss://)."""
        return self.tls_self_signed or self.tls_cert is not None

    @property
    def ws_lifetime_s(self) -> float:
        """The WebSocket lifetime in force: the limit, or a shorter injected ``lifetime_s``."""
        if self.faults.lifetime_s is None:
            return self.ws_max_lifetime_s
        return min(self.ws_max_lifetime_s, self.faults.lifetime_s)


def _check_tls(config: ServerConfig) -> None:
    """The TLS options that only work together, or not at all."""
    if config.tls_self_signed and (config.tls_cert or config.tls_key):
        given = "tls_cert" if config.tls_cert else "tls_key"
        raise ServerConfigError(
            given,
            f"--{given.replace('_', '-')}",
            "expected no certificate file with --tls-self-signed (it makes its own), "
            f"got {shown(getattr(config, given))}",
        )
    if (config.tls_cert is None) != (config.tls_key is None):
        missing = "tls_key" if config.tls_key is None else "tls_cert"
        other = "--tls-cert" if missing == "tls_key" else "--tls-key"
        raise ServerConfigError(
            missing,
            f"--{missing.replace('_', '-')}",
            f"expected a PEM file, since {other} is given, got nothing",
        )


def options() -> list[tuple[str, Any, Option]]:
    """(field name, resolved type, declaration) of every server option, in declaration order."""
    return declared(ServerConfig)


def default_of(name: str) -> Any:
    return default_value(ServerConfig, name)
