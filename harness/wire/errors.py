"""One exception tree for loopbench.

Every error a user can see derives from :class:`LoopbenchError`.  Messages say
where (file, field, url), what was expected and what came, in one line.
"""

from __future__ import annotations


class LoopbenchError(Exception):
    """Base class of every error loopbench raises on purpose."""


class ScenarioError(LoopbenchError):
    """A scenario file is missing, unreadable or invalid.

    ``str(err)`` is one line: ``scenarios/x.yaml: load.arrival.rate: expected a
    positive number, got -2``.
    """

    def __init__(self, path: str, field: str, message: str) -> None:
        self.path = path
        self.field = field
        self.detail = message
        where = f"{path}: {field}: " if field else f"{path}: "
        super().__init__(where + message)


class ProtocolError(LoopbenchError):
    """The peer sent something the Responses protocol does not allow here."""


class SSEError(ProtocolError):
    """The byte stream is not valid server-sent events."""


class StreamOrderError(ProtocolError):
    """Events of one response arrived in an order the protocol forbids."""


class TransportError(LoopbenchError):
    """A transport could not complete a turn (connect, send or receive failed)."""

    def __init__(self, kind: str, message: str) -> None:
        self.kind = kind
        super().__init__(f"{kind}: {message}")


class APIError(TransportError):
    """The endpoint answered with an OpenAI-style error (HTTP status or ``error`` event)."""

    def __init__(self, status: int, code: str | None, message: str) -> None:
        self.status = status
        self.code = code
        super().__init__(code or f"http_{status}", message)


class ResultsError(LoopbenchError):
    """A results folder is missing, unreadable or of an unknown format version."""


class UsageError(LoopbenchError):
    """The command line asked for something inconsistent."""
