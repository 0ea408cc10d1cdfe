"""The asyncio edge: transports by name, their capabilities read from harness/wire/transports.py."""

from __future__ import annotations

from harness.client.options import TransportOptions
from harness.transports.api_http import ApiHttpTransport
from harness.transports.base import Session, Transport
from harness.transports.http import HttpTransport
from harness.transports.ws import WsTransport
from harness.wire.transports import transport_spec


def make_transport(name: str, options: TransportOptions) -> Transport:
    """The transport ``name`` (an unknown name is a UsageError listing the known ones)."""
    spec = transport_spec(name)
    if spec.websocket:
        return WsTransport(spec, options)
    if spec.api != "responses":
        return ApiHttpTransport(spec, options)
    return HttpTransport(spec, options)


__all__ = ["Session", "Transport", "TransportOptions", "make_transport"]
