"""One exception tree for loopbench.

Every error a user can see derives from :class:`LoopbenchError`.  Messages say
where (file, field, url), what was expected and what came, in one line.
"""

from __future__ import annotations

from enum import StrEnum


class LoopbenchError(Exception):
    """Base class of every error loopbench raises on purpose."""


class LocatedError(LoopbenchError):
    """An invalid input, located: ``<source>: <key>: <message>`` (or ``<source>: <message>``)."""

    def __init__(self, source: str, key: str, message: str) -> None:
        self.source = source
        self.key = key
        self.detail = message
        super().__init__(f"{source}: {key}: {message}" if key else f"{source}: {message}")


class ScenarioError(LocatedError):
    """A scenario file is missing, unreadable or invalid.

    ``str(err)`` is one line: ``x.yaml: load.arrival.rate: expected a
    positive number, got -2``.
    """


class ProtocolError(LoopbenchError):
    """The peer sent something the Responses protocol does not allow here.

    ``kind`` is the ``error_kind`` a failed turn is recorded with.
    """

    kind = "invalid_event"  # an event that is not a JSON object


class SSEError(ProtocolError):
    """The byte stream is not valid server-sent events."""

    kind = "invalid_sse"


class StreamOrderError(ProtocolError):
    """Events of one response arrived in an order the protocol forbids."""

    kind = "out_of_order_event"


class ErrorKind(StrEnum):
    """Why a transport could not complete a turn, as both client edges name it.

    The values are written into results (the ``error_kind`` columns), so they never change.
    """

    CONNECTION = "connection"  # connect, send or receive failed; the peer hung up
    TIMEOUT = "timeout"  # no event (HTTP: no byte before the stream) for request_timeout_s
    TRUNCATED_STREAM = "truncated_stream"  # the body ended before a terminal event
    CONNECTION_CLOSED = "connection_closed"  # a WebSocket close code no rule recovers from
    RECOVERY_EXHAUSTED = "recovery_exhausted"  # too many recoveries in one turn
    URL = "url"  # the target is not an http(s) URL
    NOT_SSE = "not_sse"  # a 200 answer to a streaming request that is not text/event-stream
    NO_WEBSOCKET = "no_websocket"  # the WebSocket upgrade was answered with a plain HTTP status


class TransportError(LoopbenchError):
    """A transport could not complete a turn (connect, send or receive failed).

    ``kind`` is an :class:`ErrorKind`, or for an :class:`APIError` the server's error code.
    """

    kind: str

    def __init__(self, kind: ErrorKind, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class StaleConnection(TransportError):
    """A reused keep-alive connection closed before any byte of the response.

    The request never reached the application, so the edge sends it once more on a
    fresh connection; seen on a fresh connection it is an ordinary connection error.
    """

    def __init__(self, where: str) -> None:
        super().__init__(ErrorKind.CONNECTION, f"{where}: closed before a response")


class WsClosed(TransportError):
    """The WebSocket closed; ``code`` is the peer's close code (1006 when none came), or the
    client's when it closed on a protocol violation (``why`` says which).

    The recovery policy (:mod:`harness.client.recovery`) decides from the code whether
    the turn reconnects or fails with this error.
    """

    def __init__(self, code: int, why: str | None = None) -> None:
        self.code = code
        meaning = _CLOSE_MEANINGS.get(code)
        shown = f"{code} ({meaning})" if meaning else str(code)
        # ``why``: the client closed it, for this reason (a server that broke the framing).
        text = (
            f"WebSocket closed with code {shown}: {why}"
            if why
            else f"WebSocket closed with code {shown}"
        )
        super().__init__(ErrorKind.CONNECTION_CLOSED, text)


#: what the close codes a benchmark meets mean (RFC 6455 section 7.4.1), for the error message
_CLOSE_MEANINGS = {
    1000: "normal closure",
    1001: "going away: the server is shutting down",
    1002: "protocol error",
    1006: "no close frame: the peer or the network dropped the connection",
    1007: "a text message that is not UTF-8",
    1008: "policy violation",
    1009: "message too big",
    1011: "internal server error",
    1012: "service restart",
    1013: "try again later",
}


class APIError(TransportError):
    """The endpoint answered with an OpenAI-style error (HTTP status or ``error`` event)."""

    def __init__(
        self, status: int, code: str | None, message: str, *, websocket: bool = False
    ) -> None:
        self.status = status
        self.code = code
        # Named by the server, not by an ErrorKind: the code is what the results record.
        self.kind = code or f"http_{status}"
        # the status next to the server's own code: "server_error: boom" alone does not say
        # whether the endpoint answered 500, 502 or a 200 stream's error event; a WebSocket
        # error event carries a status too, but no HTTP response was answered
        where = f"status {status} on the WebSocket" if websocket else f"HTTP {status}"
        shown = self.kind if self.kind == f"http_{status}" else f"{self.kind} ({where})"
        LoopbenchError.__init__(self, f"{shown}: {message}")


class ResultsError(LoopbenchError):
    """A results folder is unreadable, incomplete or of an unknown format version."""


class ResultsWriteError(ResultsError):
    """A results file could not be written (disk full, read-only, a file-size limit).

    The run stops at once: what is on disk stays (``loopbench report`` rebuilds its
    summary once there is room), and no summary is written over rows that stop short.
    """


class NotAResultsFolder(ResultsError):
    """The path names no results folder at all (a typo, not a broken run).

    Kept apart because the gate's exit codes differ: a broken run is re-measured (3),
    a wrong path is fixed by the user (4).
    """


class UsageError(LoopbenchError):
    """The command line asked for something inconsistent."""
