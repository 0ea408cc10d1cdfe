"""Server settings: every knob of the reference server in one typed place.

``docs/server.md`` documents each option; ``serve.py`` maps the command line here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from reference_server.core.faults import FaultSpec

MiB = 1024 * 1024


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_profile: str = "optimized"
    engine_profile: str = "cerebras-spark"
    overrides: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    model: str = "sim-model"
    # Output policy defaults (docs/model.md)
    default_output_tokens: int = 200
    default_auto_tool_calls: int = 3
    # Wire options (docs/protocol.md §6)
    sse_done_marker: bool = False
    sse_error_shape: str = "nested"  # nested | flat; also the shape of mid-stream WS errors
    min_delta_interval_ms: float | None = None
    # Store: a SQLite file (None: the default file under the user's cache dir) or ":memory:"
    store_path: str | None = None
    store_retention_s: float = 30 * 24 * 3600.0
    # Access control: empty = no key required
    api_keys: tuple[str, ...] = ()
    rate_limit_rps: float | None = None  # None: no rate limit
    rate_limit_burst: float | None = None  # default: one second's worth
    # Limits (each exceeded limit gets a documented error, never unbounded memory)
    max_body_bytes: int = 16 * MiB
    max_ws_message_bytes: int = 16 * MiB
    max_connections: int = 4096  # open WebSockets + HTTP requests in progress
    ws_max_lanes: int = 32  # distinct named stream_ids per connection
    ws_max_in_flight: int = 16  # responses generating at once per connection
    ws_max_queued: int = 256  # creates waiting beyond the in-flight ones, per connection
    ws_max_cached_bytes: int = 64 * MiB  # lane cache per connection (estimated from tokens)
    ws_max_lifetime_s: float = 3600.0
    ws_lifetime_close_code: int = 1001
    # Fault injection (tests of client recovery): the N-th response (or resumed append
    # segment) of every WS connection is cut after its first delta by a close with
    # ``ws_fault_close_code`` (0: never).
    ws_fault_close_after: int = 0
    ws_fault_close_code: int = 1011
    # Seeded faults per request (reference_server/core/faults.py; docs/reliability.md); off by default
    faults: FaultSpec = field(default_factory=FaultSpec)
    # Reliability limits (docs/reliability.md)
    max_connections_per_client: int = 1024  # per client address (429 beyond); 0: no limit
    send_timeout_s: float = 30.0  # a peer that does not read for this long is dropped
    drain_timeout_s: float = 30.0  # SIGTERM: in-flight responses get this long to finish
    ws_ping_interval_s: float = 20.0  # keepalive pings; a peer silent for 2x this is dropped
    log_level: str = "warning"
    # Server processes sharing the listening socket (reference_server/workers.py); each
    # worker gets 1/workers of the modelled capacity, and its index keeps ids distinct.
    workers: int = 1
    worker_index: int = 0
