"""One server process: the app under uvicorn on a socket we bind ourselves.

Binding our own socket lets ``--port 0`` pick a free port and print it before
serving, which is how ``loopbench run`` finds the embedded server it started;
a worker of ``--workers`` gets the supervisor's socket instead.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib.util
import socket

import uvicorn

from harness.wire import quiet_gc
from reference_server.allocator import fix_mmap_threshold
from reference_server.app import ReferenceServer
from reference_server.core.config import ServerConfig
from reference_server.core.profiles import ProfileError
from reference_server.fault_send import install_log_filter
from reference_server.protocols import uvicorn_protocols
from reference_server.shutdown import DrainingServer

READY_PREFIX = "loopbench reference server listening on "


def bind(host: str, port: int) -> socket.socket:
    """The listening socket; a host or port it cannot use ends the process with one line."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:  # socket.gaierror included: an unknown host name
        sock.close()
        reason = exc.strerror or str(exc)
        raise SystemExit(f"error: cannot listen on {host}:{port}: {reason}") from None
    sock.listen(2048)
    sock.set_inheritable(True)
    return sock


def ready_line(sock: socket.socket, *, tls: bool = False) -> str:
    """The line ``loopbench run`` (harness/run/embedded.py) waits for: where ``sock`` listens."""
    host, port = sock.getsockname()[:2]
    shown = f"[{host}]" if ":" in host else host
    return f"{READY_PREFIX}{'https' if tls else 'http'}://{shown}:{port}/v1"


def serve_process(config: ServerConfig, sock: socket.socket | None = None) -> int | None:
    """Serve until stopped; ``sock``: the supervisor's socket (a worker of ``--workers``).

    Returns the signal that stopped the server (SIGINT, SIGTERM), None if none did.
    """
    try:
        server_app = ReferenceServer(config)
    except ProfileError as exc:
        raise SystemExit(f"error: {exc}") from None
    own_socket = sock is None  # a worker's supervisor has announced the port already
    if sock is None:
        sock = bind(config.host, config.port)
    uvloop = _has_uvloop()
    uv_config = uvicorn.Config(
        server_app.app,
        log_level=config.log_level,
        access_log=False,
        loop="uvloop" if uvloop else "asyncio",
        # Arrival stamps, our WebSocket protocol, batched sends (reference_server/protocols.py).
        **uvicorn_protocols(),
        # Frames a little over the app's limit still reach it and get a message_too_large
        # error event; far larger ones are refused by the protocol layer (close 1009).
        ws_max_size=config.max_ws_message_bytes + 1024 * 1024,
        ws_per_message_deflate=True,
        ws_ping_interval=config.ws_ping_interval_s,
        ws_ping_timeout=config.ws_ping_interval_s,
        timeout_keep_alive=30,
        lifespan="on",
        # Checked (or made) by reference_server/serve.py before any worker started.
        ssl_certfile=config.tls_cert,
        ssl_keyfile=config.tls_key,
    )
    if uv_config.is_ssl:
        # No TLS 1.3 session tickets.  A client that reads in one thread while it writes in
        # another on one ssl.SSLSocket (websockets' sync client, so the openai SDK's
        # responses.connect: its reader thread starts before the upgrade request is sent)
        # processed the tickets in SSL_read while SSL_write sent the request, and the
        # request never left it: about 1 wss handshake in 700 on a loaded machine got no
        # 101 (tests/server/test_tls.py).  Without tickets nothing comes after the
        # handshake to race with; a benchmark's connections are not resumed anyway.
        # Loaded here, not in serve(), so the context is changed before its first use.
        uv_config.load()
        assert uv_config.ssl is not None
        uv_config.ssl.num_tickets = 0
    # After uvicorn.Config, which configures logging: intentional drops are not errors.
    install_log_filter()
    ready = ready_line(sock, tls=config.tls)
    announce = (lambda: print(ready, flush=True)) if own_socket else None
    server = DrainingServer(uv_config, server_app, config.drain_timeout_s, announce)
    # A full collection of the startup heap took tens of ms, a late token in every stream:
    # freeze it and collect the young generation rarely (harness/wire/quiet_gc.py).
    quiet_gc.begin()
    fix_mmap_threshold()
    try:
        with contextlib.suppress(KeyboardInterrupt):
            if uvloop:
                _run_uvloop(server, sock)
            else:
                asyncio.run(server.serve(sockets=[sock]))
    finally:
        # A worker leaves with os._exit (no atexit): the lines still queued go out here.
        if server_app.service.timing_log is not None:
            server_app.service.timing_log.close()
    return server.stopped_by


def _run_uvloop(server: DrainingServer, sock: socket.socket) -> None:
    import uvloop  # optional (the "fast" extra): only imported where it is installed

    uvloop.run(server.serve(sockets=[sock]))


def _has_uvloop() -> bool:
    return importlib.util.find_spec("uvloop") is not None
