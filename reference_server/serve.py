"""Run the reference server under uvicorn (command line and embedded use).

Binding our own socket lets ``--port 0`` pick a free port and print it before
serving, which is how ``loopbench run`` finds the embedded server it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import os
import socket
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from reference_server.core.config import ServerConfig
from reference_server.core.faults import (
    FaultSpec,
    FaultSpecError,
    parse_fault_args,
    parse_fault_spec,
)

READY_PREFIX = "loopbench reference server listening on "
API_KEYS_ENV = "LOOPBENCH_API_KEYS"


def add_server_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--host", default="127.0.0.1", help="address to bind (default 127.0.0.1: loopback only)"
    )
    parser.add_argument(
        "--port", type=int, default=8000, help="port to bind; 0 picks a free port and prints it"
    )
    parser.add_argument(
        "--api-profile",
        default="optimized",
        help="API-tier profile: legacy, optimized or a YAML path",
    )
    parser.add_argument(
        "--engine-profile",
        default="cerebras-spark",
        help="engine profile: cerebras-spark, gpu-legacy or a YAML path",
    )
    parser.add_argument(
        "--profile",
        action="append",
        default=[],
        metavar="NAME[+NAME]",
        help="shipped profile(s) by short name, either kind, e.g. legacy+gpu-legacy "
        "(api:PATH / engine:PATH for files); wins over --api-profile/--engine-profile",
    )
    parser.add_argument(
        "--set",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="override a profile parameter, e.g. engine.sustained_tps=500 (repeatable)",
    )
    parser.add_argument(
        "--seed", type=int, default=0, help="seed of the simulated model's randomness"
    )
    parser.add_argument(
        "--default-tool-calls",
        type=int,
        default=3,
        help="function calls a tool_choice=auto chain makes before answering",
    )
    parser.add_argument(
        "--sse-done", action="store_true", help="end SSE streams with 'data: [DONE]'"
    )
    parser.add_argument(
        "--sse-error-shape",
        choices=("nested", "flat"),
        default="nested",
        help="shape of mid-stream SSE error events",
    )
    parser.add_argument(
        "--min-delta-interval-ms",
        type=float,
        default=None,
        help="coalesce due tokens so deltas are at least this far apart (default: profile)",
    )
    store = parser.add_argument_group("store")
    store.add_argument(
        "--store",
        dest="store_path",
        default=None,
        metavar="PATH",
        help="SQLite file for store:true responses (default: <user cache dir>/loopbench/"
        "responses.sqlite3); ':memory:' keeps them in process only",
    )
    store.add_argument(
        "--store-retention-s",
        type=float,
        default=30 * 24 * 3600.0,
        help="drop stored responses older than this at startup (default 30 days)",
    )
    access = parser.add_argument_group("access")
    access.add_argument(
        "--api-key",
        dest="api_keys",
        action="append",
        default=[],
        metavar="KEY",
        help="accept only this bearer key (repeatable; default: any key; also "
        f"{API_KEYS_ENV}=k1,k2 and --api-key-file)",
    )
    access.add_argument(
        "--api-key-file",
        default=None,
        metavar="PATH",
        help="accept the bearer keys listed in this file, one per line (# comments)",
    )
    access.add_argument(
        "--max-connections-per-client",
        type=int,
        default=1024,
        help="open connections per client address (429 beyond; 0: no limit)",
    )
    access.add_argument(
        "--rate-limit-rps",
        type=float,
        default=None,
        help="admit at most this many requests/creates per second (429 + retry-after beyond)",
    )
    access.add_argument(
        "--rate-limit-burst",
        type=float,
        default=None,
        help="token-bucket depth (default: 1 s worth)",
    )
    limits = parser.add_argument_group("limits")
    limits.add_argument("--max-body-bytes", type=int, default=16 * 1024 * 1024)
    limits.add_argument("--max-ws-message-bytes", type=int, default=16 * 1024 * 1024)
    limits.add_argument(
        "--max-connections",
        type=int,
        default=4096,
        help="open WebSockets + HTTP requests in progress (503 beyond)",
    )
    limits.add_argument(
        "--ws-max-lanes", type=int, default=32, help="named stream_ids per connection"
    )
    limits.add_argument(
        "--ws-max-in-flight",
        type=int,
        default=16,
        help="responses generating at once per connection",
    )
    limits.add_argument(
        "--ws-max-queued", type=int, default=256, help="creates waiting per connection (429 beyond)"
    )
    limits.add_argument(
        "--ws-max-cached-bytes",
        type=int,
        default=64 * 1024 * 1024,
        help="lane cache per connection; least recently used lanes are dropped beyond it",
    )
    limits.add_argument(
        "--ws-max-lifetime-s",
        type=float,
        default=3600.0,
        help="connection lifetime; later creates get websocket_connection_limit_reached",
    )
    limits.add_argument(
        "--ws-lifetime-close-code",
        type=int,
        default=1001,
        help="close code sent after the lifetime error (1001: SDK auto-reconnect engages)",
    )
    faults = parser.add_argument_group("fault injection (client recovery tests)")
    faults.add_argument(
        "--ws-fault-close-after",
        type=int,
        default=0,
        metavar="N",
        help="cut the N-th response of every WebSocket connection after its first delta (0: off)",
    )
    faults.add_argument(
        "--ws-fault-close-code", type=int, default=1011, help="close code of the injected cut"
    )
    faults.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="seeded per-request faults, e.g. error_rate.503=0.02, disconnect_rate=0.01, "
        "stall_rate=0.01, stall_s=30, spike_rate=0.05, spike_ms=300, evict_rate=0.1, "
        "lifetime_s=5, seed=1 (repeatable; docs/reliability.md)",
    )
    faults.add_argument(
        "--faults-file",
        default=None,
        metavar="PATH",
        help="YAML file with a faults: mapping of the same keys (--fault entries win)",
    )
    reliability = parser.add_argument_group("reliability")
    reliability.add_argument(
        "--send-timeout-s",
        type=float,
        default=30.0,
        help="drop a peer that has not read for this long (its send stays blocked)",
    )
    reliability.add_argument(
        "--drain-timeout-s",
        type=float,
        default=30.0,
        help="on SIGTERM, how long responses in flight may take to finish before they are cut",
    )
    reliability.add_argument(
        "--ws-ping-interval-s",
        type=float,
        default=20.0,
        help="WebSocket keepalive pings; a peer that does not answer within as long is dropped",
    )
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")
    parser.add_argument(
        "--workers",
        type=int,
        default=1,
        help="server processes sharing the port, each with 1/N of the modelled capacity "
        "(needs a --store file when > 1; see BENCHMARKS.md)",
    )


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    for name in (
        "max_body_bytes",
        "max_ws_message_bytes",
        "max_connections",
        "ws_max_lanes",
        "ws_max_in_flight",
        "ws_max_queued",
    ):
        if getattr(args, name) < 1:
            raise SystemExit(
                f"error: --{name.replace('_', '-')}: expected an integer >= 1, got {getattr(args, name)}"
            )
    if args.ws_max_lifetime_s <= 0:
        raise SystemExit(
            f"error: --ws-max-lifetime-s: expected a positive number, got {args.ws_max_lifetime_s}"
        )
    if args.rate_limit_rps is not None and args.rate_limit_rps <= 0:
        raise SystemExit(
            f"error: --rate-limit-rps: expected a positive number, got {args.rate_limit_rps}"
        )
    for name in ("ws_lifetime_close_code", "ws_fault_close_code"):
        code = getattr(args, name)
        if not (code == 1000 or 1001 <= code <= 1014 or 3000 <= code <= 4999) or code in (
            1004,
            1005,
            1006,
        ):
            raise SystemExit(
                f"error: --{name.replace('_', '-')}: expected a WebSocket close code, got {code}"
            )
    for name in ("send_timeout_s", "drain_timeout_s", "ws_ping_interval_s"):
        if not getattr(args, name) > 0:
            raise SystemExit(
                f"error: --{name.replace('_', '-')}: expected a positive number, got {getattr(args, name)}"
            )
    if args.max_connections_per_client < 0:
        raise SystemExit(
            "error: --max-connections-per-client: expected an integer >= 0, "
            f"got {args.max_connections_per_client}"
        )
    profiles = _profile_choice(args)
    keys = _api_keys(args.api_keys, args.api_key_file, os.environ.get(API_KEYS_ENV))
    fault_spec = _fault_spec(args.fault, args.faults_file)
    lifetime = args.ws_max_lifetime_s
    if fault_spec.lifetime_s is not None:
        lifetime = min(lifetime, fault_spec.lifetime_s)
    return ServerConfig(
        host=args.host,
        port=args.port,
        api_profile=profiles[0],
        engine_profile=profiles[1],
        overrides=overrides,
        seed=args.seed,
        default_auto_tool_calls=args.default_tool_calls,
        sse_done_marker=args.sse_done,
        sse_error_shape=args.sse_error_shape,
        min_delta_interval_ms=args.min_delta_interval_ms,
        store_path=args.store_path,
        store_retention_s=args.store_retention_s,
        api_keys=keys,
        rate_limit_rps=args.rate_limit_rps,
        rate_limit_burst=args.rate_limit_burst,
        max_body_bytes=args.max_body_bytes,
        max_ws_message_bytes=args.max_ws_message_bytes,
        max_connections=args.max_connections,
        ws_max_lanes=args.ws_max_lanes,
        ws_max_in_flight=args.ws_max_in_flight,
        ws_max_queued=args.ws_max_queued,
        ws_max_cached_bytes=args.ws_max_cached_bytes,
        ws_max_lifetime_s=lifetime,
        ws_lifetime_close_code=args.ws_lifetime_close_code,
        ws_fault_close_after=args.ws_fault_close_after,
        ws_fault_close_code=args.ws_fault_close_code,
        faults=fault_spec,
        max_connections_per_client=args.max_connections_per_client,
        send_timeout_s=args.send_timeout_s,
        drain_timeout_s=args.drain_timeout_s,
        ws_ping_interval_s=args.ws_ping_interval_s,
        log_level=args.log_level,
        workers=args.workers,
    )


def _api_keys(given: Sequence[str], path: str | None, env: str | None) -> tuple[str, ...]:
    """Keys from ``--api-key``, ``--api-key-file`` and the environment, in that order, deduplicated."""
    keys = [k.strip() for k in given if k.strip()]
    if env:
        keys += [k for k in env.replace(",", " ").split() if k]
    if path is not None:
        try:
            text = Path(path).read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError) as exc:
            raise SystemExit(f"error: --api-key-file {path}: cannot read: {exc}") from None
        from_file = [
            line.strip() for line in text.splitlines() if line.strip() and not line.startswith("#")
        ]
        if not from_file:
            raise SystemExit(f"error: --api-key-file {path}: expected one key per line, got none")
        keys += from_file
    return tuple(dict.fromkeys(keys))


def _fault_spec(items: Sequence[str], path: str | None) -> FaultSpec:
    entries: dict[str, Any] = {}
    try:
        if path is not None:
            entries.update(_fault_file(path))
        entries.update(parse_fault_args(list(items)))
        return parse_fault_spec(entries)
    except FaultSpecError as exc:
        where = f"{path}: " if path is not None and not items else ""
        raise SystemExit(f"error: {where}{exc}") from None


def _fault_file(path: str) -> dict[str, Any]:
    import yaml

    try:
        doc = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError) as exc:
        raise SystemExit(f"error: --faults-file {path}: cannot read: {exc}") from None
    section = doc.get("faults", doc) if isinstance(doc, dict) else None
    if not isinstance(section, dict):
        raise SystemExit(
            f"error: --faults-file {path}: expected a mapping (or a faults: mapping), "
            f"got {type(doc).__name__}"
        )
    return section


def bind_warning(host: str, api_keys: Sequence[str]) -> str | None:
    """A warning when the server is reachable beyond this machine and accepts any key."""
    if api_keys or _is_loopback(host):
        return None
    return (
        f"warning: listening on {host}, which is not a loopback address, without API keys: "
        "anyone who can reach it can use this server. Pass --api-key, --api-key-file or "
        f"{API_KEYS_ENV}, or bind 127.0.0.1."
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it may be reachable


def _profile_choice(args: argparse.Namespace) -> tuple[str, str]:
    from reference_server.core.profiles import ProfileError, combine_profile_args

    try:
        return combine_profile_args(args.api_profile, args.engine_profile, args.profile)
    except ProfileError as exc:
        raise SystemExit(f"error: {exc}") from None


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(config: ServerConfig, sock: socket.socket | None = None) -> None:
    """Serve until stopped; ``sock``: an already bound socket (a worker of ``--workers``)."""
    warning = bind_warning(config.host, config.api_keys) if sock is None else None
    if warning is not None:  # once, from the process that binds
        print(warning, file=sys.stderr, flush=True)
    if config.workers > 1 and sock is None:
        from reference_server.workers import serve_workers

        serve_workers(config)
        return
    import uvicorn

    from reference_server.app import ReferenceServer
    from reference_server.core.faults import install_log_filter
    from reference_server.core.profiles import ProfileError
    from reference_server.protocols import uvicorn_protocols
    from reference_server.shutdown import DrainingServer

    try:
        server_app = ReferenceServer(config)
    except ProfileError as exc:
        raise SystemExit(f"error: {exc}") from None
    announce = sock is None  # a worker's supervisor has announced the port already
    if sock is None:
        sock = _bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    protocols: dict[str, Any] = {"ws": "websockets-sansio" if _has_ws_sansio() else "websockets"}
    # Arrival stamps and batched WebSocket sends (reference_server/protocols.py).
    protocols.update(uvicorn_protocols())
    uv_config = uvicorn.Config(
        server_app.app,
        log_level=config.log_level,
        access_log=False,
        loop="uvloop" if _has_uvloop() else "asyncio",
        **protocols,
        # Frames a little over the app's limit still reach it and get a message_too_large
        # error event; far larger ones are refused by the protocol layer (close 1009).
        ws_max_size=config.max_ws_message_bytes + 1024 * 1024,
        ws_per_message_deflate=True,
        ws_ping_interval=config.ws_ping_interval_s,
        ws_ping_timeout=config.ws_ping_interval_s,
        timeout_keep_alive=30,
        lifespan="on",
    )
    # After uvicorn.Config, which configures logging: intentional drops are not errors.
    install_log_filter()
    server = DrainingServer(uv_config, server_app, config.drain_timeout_s)
    from reference_server.runtime import quiet_gc

    quiet_gc()
    if announce:
        print(f"{READY_PREFIX}http://{shown}:{port}/v1", flush=True)
    with contextlib.suppress(KeyboardInterrupt):
        asyncio.run(server.serve(sockets=[sock])) if not _has_uvloop() else _run_uvloop(
            server, sock
        )


def _run_uvloop(server: object, sock: socket.socket) -> None:
    import uvloop

    uvloop.run(server.serve(sockets=[sock]))  # type: ignore[attr-defined]


def _has_uvloop() -> bool:
    try:
        import uvloop  # noqa: F401
    except ImportError:
        return False
    return True


def _has_ws_sansio() -> bool:
    try:
        import uvicorn.protocols.websockets.websockets_sansio_impl  # noqa: F401
    except ImportError:
        return False
    return True


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        prog="python -m reference_server",
        description="The loopbench reference Responses API server (HTTP+SSE and WebSocket mode on /v1/responses).",
    )
    add_server_arguments(parser)
    args = parser.parse_args(argv)
    serve(config_from_args(args))
    sys.exit(0)
