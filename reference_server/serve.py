"""Run the reference server: one process, or ``--workers N`` sharing one socket.

``reference_server/cli.py`` (``python -m reference_server``) and ``loopbench
serve`` build a :class:`ServerConfig` and call :func:`serve`.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Sequence

from reference_server.core.config import ServerConfig
from reference_server.process import serve_process
from reference_server.workers import serve_workers


def serve(config: ServerConfig) -> None:
    """Serve until stopped."""
    warning = bind_warning(config.host, config.api_keys)
    if warning is not None:
        print(warning, file=sys.stderr, flush=True)
    if config.workers > 1:
        serve_workers(config)
    else:
        serve_process(config)


def bind_warning(host: str, api_keys: Sequence[str]) -> str | None:
    """A warning when the server is reachable beyond this machine and accepts any key."""
    if api_keys or _is_loopback(host):
        return None
    return (
        f"warning: listening on {host}, which is not a loopback address, without API keys: "
        "anyone who can reach it can use this server. Pass --api-key, --api-key-file or "
        "LOOPBENCH_API_KEYS, or bind 127.0.0.1."
    )


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name: assume it may be reachable
