"""Blocking sockets for the gevent world: target URLs, connect (optionally TLS), the clock.

All timestamps of the Locust driver come from :func:`now_ns`: the monotonic
``perf_counter_ns`` shifted once per process onto the Unix epoch, so records of
workers on different machines share an origin (to NTP accuracy) while staying
monotonic within a process.
"""

from __future__ import annotations

import functools
import socket
import ssl
import time
from dataclasses import dataclass
from urllib.parse import urlsplit

from harness.client.api_errors import describe_os_error
from harness.wire.errors import ErrorKind, TransportError

_SHIFT_NS = time.time_ns() - time.perf_counter_ns()


def now_ns() -> int:
    """Monotonic nanoseconds on an epoch-anchored origin (see the module docstring)."""
    return time.perf_counter_ns() + _SHIFT_NS


@dataclass(frozen=True, slots=True)
class Endpoint:
    """Where a base URL such as ``http://127.0.0.1:8000/v1`` points."""

    tls: bool
    host: str
    port: int
    base_path: str

    @classmethod
    def from_url(cls, url: str) -> Endpoint:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise TransportError(
                ErrorKind.URL,
                f"target {url!r}: expected http(s)://host[:port]/path, got scheme {parts.scheme!r}",
            )
        tls = parts.scheme == "https"
        return cls(
            tls=tls,
            host=parts.hostname,
            port=parts.port or (443 if tls else 80),
            base_path=parts.path.rstrip("/"),
        )

    @property
    def host_header(self) -> str:
        default = 443 if self.tls else 80
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == default else f"{host}:{self.port}"

    def ws_url(self, path: str) -> str:
        scheme = "wss" if self.tls else "ws"
        return f"{scheme}://{self.host_header}{self.base_path}{path}"


@functools.cache
def tls_context(verify: bool) -> ssl.SSLContext:
    # One per setting for the process: loading the CA store takes milliseconds.
    ctx = ssl.create_default_context()
    if not verify:
        ctx.check_hostname = False
        ctx.verify_mode = ssl.CERT_NONE
    return ctx


#: when a new connection's TCP connect began and ended, and its TLS handshake ended (0: no TLS)
ConnectStamps = tuple[int, int, int]


def open_socket(
    ep: Endpoint, *, connect_timeout_s: float, read_timeout_s: float, verify_tls: bool
) -> tuple[socket.socket, ConnectStamps]:
    """A connected TCP (or TLS) socket with Nagle off, and when each step ended.

    Raises :class:`TransportError`.
    """
    ctx = tls_context(verify_tls) if ep.tls else None
    started = now_ns()
    tls_ns = 0
    try:
        sock = socket.create_connection((ep.host, ep.port), timeout=connect_timeout_s)
        tcp_ns = now_ns()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        if ctx is not None:
            sock = ctx.wrap_socket(sock, server_hostname=ep.host)
            tls_ns = now_ns()
    except TimeoutError as exc:
        raise TransportError(
            ErrorKind.TIMEOUT, f"connecting to {ep.host}:{ep.port} timed out"
        ) from exc
    except OSError as exc:
        raise TransportError(
            ErrorKind.CONNECTION, describe_os_error(exc, f"{ep.host}:{ep.port}")
        ) from exc
    sock.settimeout(read_timeout_s)
    return sock, (started, tcp_ns, tls_ns)
