"""Run the reference server under uvicorn (command line and embedded use).

Binding our own socket lets ``--port 0`` pick a free port and print it before
serving, which is how ``loopbench run`` finds the embedded server it started.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import socket
import sys
from collections.abc import Sequence

from reference_server.config import ServerConfig

READY_PREFIX = "loopbench reference server listening on "


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
    parser.add_argument("--log-level", default="warning", help="uvicorn log level")


def config_from_args(args: argparse.Namespace) -> ServerConfig:
    overrides: dict[str, str] = {}
    for item in args.set:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise SystemExit(f"error: --set {item!r}: expected KEY=VALUE")
        overrides[key.strip()] = value.strip()
    return ServerConfig(
        host=args.host,
        port=args.port,
        api_profile=args.api_profile,
        engine_profile=args.engine_profile,
        overrides=overrides,
        seed=args.seed,
        default_auto_tool_calls=args.default_tool_calls,
        sse_done_marker=args.sse_done,
        sse_error_shape=args.sse_error_shape,
        min_delta_interval_ms=args.min_delta_interval_ms,
        log_level=args.log_level,
    )


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((host, port))
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def serve(config: ServerConfig) -> None:
    import uvicorn

    from reference_server.app import ReferenceServer

    server_app = ReferenceServer(config)
    sock = _bind(config.host, config.port)
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    uv_config = uvicorn.Config(
        server_app.app,
        log_level=config.log_level,
        access_log=False,
        loop="uvloop" if _has_uvloop() else "asyncio",
        ws="websockets-sansio" if _has_ws_sansio() else "websockets",
        ws_max_size=config.max_ws_message_bytes,
        ws_per_message_deflate=True,
        timeout_keep_alive=30,
        lifespan="off",
    )
    server = uvicorn.Server(uv_config)
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
