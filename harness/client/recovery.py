"""The recovery policy: which failure of a turn is recovered, and how.

One table for both edges (docs/protocol.md §4):

* ``previous_response_not_found`` on a chained WebSocket transport → resend the
  full context as a new chain on the same connection (once per turn); once the
  rollout compacted, the full context is every item (``recover_from=full``, the
  default) or the compacted base and the items since (``recover_from=compacted``,
  :class:`~harness.client.options.TransportOptions`);
* ``context_length_exceeded`` is never retried: the same context cannot fit again;
* ``response_not_found``, ``response_not_paused`` or ``invalid_append_input`` on
  the append prototype → restart the rollout's response with the full context;
* ``websocket_connection_limit_reached`` or a recoverable close code (1001, 1005,
  1006, 1011, 1012, 1013, 1015, as the official SDK treats them) → reconnect:
  with ``store: true`` the chain is kept (the server falls back to its store;
  a turn that already had to resend its full context goes on doing so),
  otherwise the full context is resent (the new connection has no cache);
* anything else, and every HTTP error, fails the turn (HTTP drivers never retry).

A turn recovers at most :data:`MAX_RECOVERIES_PER_TURN` times.
"""

from __future__ import annotations

from enum import Enum

from harness.wire.errors import APIError, TransportError, WsClosed
from harness.wire.transports import TransportSpec

RECOVERABLE_CLOSE_CODES = frozenset({1001, 1005, 1006, 1011, 1012, 1013, 1015})
RECONNECT_CODES = frozenset({"websocket_connection_limit_reached"})
RESTART_CODES = frozenset({"response_not_found", "response_not_paused", "invalid_append_input"})
MAX_RECOVERIES_PER_TURN = 3


class Recovery(Enum):
    #: same connection, the full context as a new chain (or a new append response)
    RESEND_FULL = "resend_full"
    #: new connection, the full context
    RECONNECT = "reconnect"
    #: new connection, still chained by id
    RECONNECT_KEEP_CHAIN = "reconnect_keep_chain"
    #: the turn fails with the error
    FAIL = "fail"


def recovery_for(spec: TransportSpec, exc: TransportError, *, full_sent: bool) -> Recovery:
    """What a turn over ``spec`` does after ``exc``; ``full_sent``: this turn already resent."""
    if not spec.websocket:
        return Recovery.FAIL
    if isinstance(exc, WsClosed):
        return _reconnect(spec) if exc.code in RECOVERABLE_CLOSE_CODES else Recovery.FAIL
    if isinstance(exc, APIError):
        code = exc.code
        if code in RECONNECT_CODES:
            return _reconnect(spec)
        if spec.append and code in RESTART_CODES:
            return Recovery.RESEND_FULL
        if spec.chained and code == "previous_response_not_found" and not full_sent:
            return Recovery.RESEND_FULL
    return Recovery.FAIL


def _reconnect(spec: TransportSpec) -> Recovery:
    return Recovery.RECONNECT_KEEP_CHAIN if spec.chained and spec.store else Recovery.RECONNECT
