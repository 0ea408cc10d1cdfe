"""Transports by name (docs/architecture.md); the names are part of the CLI and of results."""

from __future__ import annotations

from harness.transports.base import Session, Transport, TransportOptions
from harness.wire.errors import UsageError

TRANSPORT_NAMES = ("http", "http-chained", "ws", "ws-store", "ws-append")


def make_transport(name: str, options: TransportOptions) -> Transport:
    if name == "http":
        from harness.transports.http import HttpTransport

        return HttpTransport(options)
    if name == "http-chained":
        from harness.transports.http import HttpTransport

        return HttpTransport(options, chained=True)
    if name == "ws":
        from harness.transports.ws import WsTransport

        return WsTransport(options)
    if name == "ws-store":
        from harness.transports.ws import WsTransport

        return WsTransport(options, store=True)
    if name == "ws-append":
        from harness.transports.ws_append import WsAppendTransport

        return WsAppendTransport(options)
    raise UsageError(f"unknown transport {name!r}; expected one of {', '.join(TRANSPORT_NAMES)}")


__all__ = ["TRANSPORT_NAMES", "Session", "Transport", "TransportOptions", "make_transport"]
