"""Server settings: every option of the reference server, declared once.

Each field is declared once: its default, and in its metadata (:func:`option`)
its command-line flag, help text and the check its value must pass.  ``ServerConfig.__post_init__``
runs the checks, so a config built in code (``create_app(ServerConfig(...))``) is
validated exactly like one from the command line, and ``reference_server/cli.py``
builds the parser and the argv <-> config mapping from the same declarations.
Adding an option is one field here (and its row in docs/server.md).
"""

from __future__ import annotations

import typing
from collections.abc import Callable
from dataclasses import MISSING, dataclass, field, fields
from typing import Any

from harness.wire.errors import LoopbenchError
from reference_server.core.faults import FaultSpec

MiB = 1024 * 1024
LOG_LEVELS = ("critical", "error", "warning", "info", "debug", "trace")
SSE_ERROR_SHAPES = ("nested", "flat")

# What a value must be, as a phrase ("an integer >= 1"), or None when it is fine.
Check = Callable[[Any], str | None]


class ServerConfigError(LoopbenchError):
    """A server option has a bad value.

    ``str(err)``: ``max_body_bytes (--max-body-bytes): expected an integer >= 1, got 0``.
    """

    def __init__(self, name: str, flag: str | None, expected: str, got: Any) -> None:
        self.name = name
        self.flag = flag
        self.expected = expected
        self.got = got
        self.detail = f"expected {expected}, got {_shown(got)}"
        super().__init__(f"{name} ({flag}): {self.detail}" if flag else f"{name}: {self.detail}")


@dataclass(frozen=True, slots=True)
class Option:
    """How one field appears on the command line."""

    flag: str | None  # None: set by the program, not by the user (worker_index)
    help: str
    group: str = ""  # the section of --help ("": the general options)
    metavar: str | None = None
    choices: tuple[str, ...] = ()
    check: Check | None = None


def option(
    *,
    flag: str | None,
    help: str,
    group: str = "",
    metavar: str | None = None,
    choices: tuple[str, ...] = (),
    check: Check | None = None,
) -> dict[str, Option]:
    """A field's ``metadata``: how the option appears on the command line, and its check."""
    return {"option": Option(flag, help, group, metavar, choices, check)}


def at_least(n: int) -> Check:
    return lambda v: None if v >= n else f"an integer >= {n}"


def positive(v: float) -> str | None:
    return None if v > 0 else "a positive number"


def non_negative(v: float) -> str | None:
    return None if v >= 0 else "a number >= 0"


def non_empty(v: str) -> str | None:
    return None if v.strip() else "a non-empty string"


def port_number(v: int) -> str | None:
    return None if 0 <= v <= 65535 else "a port from 0 to 65535"


def close_code(v: int) -> str | None:
    # 1004-1006 are reserved: never sent in a close frame.
    valid = v == 1000 or 1001 <= v <= 1014 or 3000 <= v <= 4999
    return None if valid and v not in (1004, 1005, 1006) else "a WebSocket close code"


def one_of(choices: tuple[str, ...]) -> Check:
    return lambda v: None if v in choices else "one of " + ", ".join(choices)


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
            check=one_of(SSE_ERROR_SHAPES),
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
        metadata=option(
            flag="--log-level",
            choices=LOG_LEVELS,
            help="uvicorn log level",
            check=one_of(LOG_LEVELS),
        ),
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
        hints = _hints()
        for f in fields(self):
            opt: Option = f.metadata["option"]
            value = getattr(self, f.name)
            expected = _type_problem(hints[f.name], value)
            if expected is None and value is not None and opt.check is not None:
                expected = opt.check(value)
            if expected is not None:
                raise ServerConfigError(f.name, opt.flag, expected, value)

    @property
    def ws_lifetime_s(self) -> float:
        """The WebSocket lifetime in force: the limit, or a shorter injected ``lifetime_s``."""
        if self.faults.lifetime_s is None:
            return self.ws_max_lifetime_s
        return min(self.ws_max_lifetime_s, self.faults.lifetime_s)


def options() -> list[tuple[str, Any, Option]]:
    """(field name, resolved type, declaration) of every option, in declaration order."""
    hints = _hints()
    return [(f.name, hints[f.name], f.metadata["option"]) for f in fields(ServerConfig)]


def default_of(name: str) -> Any:
    f = ServerConfig.__dataclass_fields__[name]
    if f.default_factory is not MISSING:
        return f.default_factory()
    return f.default


_HINTS: dict[str, Any] = {}


def _hints() -> dict[str, Any]:
    if not _HINTS:
        _HINTS.update(typing.get_type_hints(ServerConfig))
    return _HINTS


def _type_problem(hint: Any, value: Any) -> str | None:
    """What ``value`` should have been if it is not of the declared type, else None."""
    args = typing.get_args(hint)
    if type(None) in args:
        if value is None:
            return None
        hint = next(a for a in args if a is not type(None))
    origin = typing.get_origin(hint) or hint
    if hint is bool:
        return None if isinstance(value, bool) else "true or false"
    if isinstance(value, bool):  # bool is an int subclass: never a number here
        return _TYPE_NAMES.get(origin, origin.__name__)
    if hint is float:
        ok = isinstance(value, int | float) and value == value
        return None if ok else "a number"
    if origin is tuple:
        return (
            None
            if isinstance(value, tuple) and all(isinstance(v, str) for v in value)
            else ("a tuple of strings")
        )
    if origin is dict:
        ok = isinstance(value, dict) and all(
            isinstance(k, str) and isinstance(v, str) for k, v in value.items()
        )
        return None if ok else "a mapping of strings to strings"
    return None if isinstance(value, origin) else _TYPE_NAMES.get(origin, origin.__name__)


_TYPE_NAMES: dict[Any, str] = {int: "an integer", str: "a string", FaultSpec: "a FaultSpec"}


def _shown(value: Any) -> str:
    return repr(value) if isinstance(value, str) else str(value)
