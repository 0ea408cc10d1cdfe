"""The endpoint's errors as typed exceptions, and the name each error gets in the results.

An HTTP error body (``{"error": {"code", "type", "message"}}``) and a WebSocket
``error`` event without ``sequence_number`` (one that belongs to the connection,
not to a response) both become :class:`~harness.wire.errors.APIError`.
"""

from __future__ import annotations

from typing import Any

from harness.wire.errors import APIError, LoopbenchError, TransportError
from harness.wire.events import loads


def api_error_from_body(status: int, body: bytes) -> APIError:
    """The error of an HTTP response with ``status`` >= 400 (a non-JSON body is quoted)."""
    try:
        err = loads(body).get("error") or {}
        return APIError(
            status, err.get("code") or err.get("type"), str(err.get("message", ""))[:500]
        )
    except LoopbenchError:
        return APIError(status, None, body[:200].decode("utf-8", "replace"))


def api_error_from_event(event: dict[str, Any]) -> APIError:
    """The error of a connection-level WebSocket ``error`` event."""
    err = event.get("error") or {}
    return APIError(int(event.get("status", 400)), err.get("code"), str(err.get("message", "")))


def error_kind(exc: LoopbenchError) -> str:
    """The ``error_kind`` a failed turn is recorded with.

    The server's error code for an API error, the :class:`~harness.wire.errors.ErrorKind`
    of a transport error, else the exception's class name (a protocol violation).
    """
    if isinstance(exc, APIError) and exc.code:
        return exc.code
    return str(exc.kind) if isinstance(exc, TransportError) else type(exc).__name__
