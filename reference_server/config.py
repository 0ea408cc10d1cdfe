"""Server settings: every knob of the reference server in one typed place."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(slots=True)
class ServerConfig:
    host: str = "127.0.0.1"
    port: int = 8000
    api_profile: str = "optimized"
    engine_profile: str = "cerebras-spark"
    overrides: dict[str, str] = field(default_factory=dict)
    seed: int = 0
    model: str = "sim-model"
    # Output policy defaults (DESIGN §4)
    default_output_tokens: int = 200
    default_auto_tool_calls: int = 3
    # Wire options (PROTOCOL §6)
    sse_done_marker: bool = False
    sse_error_shape: str = "nested"  # nested | flat
    min_delta_interval_ms: float | None = None
    # Limits
    max_body_bytes: int = 16 * 1024 * 1024
    max_ws_message_bytes: int = 16 * 1024 * 1024
    store_path: str | None = None  # None: in-memory store
    log_level: str = "warning"
