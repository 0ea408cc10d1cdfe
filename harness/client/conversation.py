"""One rollout's conversation over one transport, sans I/O: what each turn sends and what its
answer means.

The edge (:mod:`harness.transports`, under ``run`` and in a Locust worker's edge host)
owns the sockets and the clock; it asks a :class:`Conversation` for the
request of a turn, sends it, feeds what arrives into the turn's
:class:`~harness.client.stream.ResponseStream`, and hands failures back to learn
whether to resend, reconnect or fail (:mod:`harness.client.recovery`).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Protocol

from harness.client.api_errors import api_error_from_body, body_start, not_sse
from harness.client.bodies import (
    compact_body,
    http_body,
    sent_tokens,
    ws_append,
    ws_create,
    ws_warmup,
)
from harness.client.receive import SseFeed
from harness.client.recovery import MAX_RECOVERIES_PER_TURN, Recovery, recovery_for
from harness.client.shaping import NO_SHAPING, RequestShaping, planned_output, shape_body
from harness.client.stream import ResponseStream
from harness.wire.errors import ErrorKind, LoopbenchError, ProtocolError, TransportError
from harness.wire.events import dumps, loads
from harness.wire.tokens import FIXED_WIDTH, TokenConvention
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput, items_tokens
from harness.workload.records import TurnRecord

_CHAIN_STATUSES = ("completed", "incomplete")


class HttpResponse(Protocol):
    """What an edge's HTTP exchange reports (the body only for error statuses)."""

    @property
    def status(self) -> int: ...
    @property
    def headers(self) -> dict[str, str]: ...
    @property
    def body(self) -> bytes: ...
    @property
    def new_connection(self) -> bool: ...
    @property
    def connected_ns(self) -> int: ...
    @property
    def connect_start_ns(self) -> int: ...
    @property
    def tcp_connected_ns(self) -> int: ...
    @property
    def tls_done_ns(self) -> int: ...


class Conversation:
    """The client state one rollout carries from turn to turn: the chain, the paused response."""

    __slots__ = ("paused", "previous_response_id", "recover_from", "shaping", "spec", "tokens")

    def __init__(
        self,
        spec: TransportSpec,
        recover_from: str = "full",
        shaping: RequestShaping = NO_SHAPING,
        tokens: TokenConvention = FIXED_WIDTH,
    ) -> None:
        self.spec = spec
        self.recover_from = recover_from
        #: the run's extra body fields, merged into every turn's body (harness/client/shaping.py)
        self.shaping = shaping
        #: counts each turn's streamed text (the run's --tokenizer, else 4 characters a token)
        self.tokens = tokens
        self.previous_response_id: str | None = None
        self.paused: ResponseStream | None = None  # append prototype: the rollout's response

    def reset(self) -> None:
        """A new rollout: nothing to chain to."""
        self.previous_response_id = None
        self.paused = None

    @property
    def ws_query(self) -> str:
        """Appended to the WebSocket URL: the append prototype asks for its mode."""
        return "?mode=append" if self.spec.append else ""

    #: what a complete stream ends with, for the truncation error (another API's marker)
    stream_end = "a terminal event"
    #: the request path after the base URL's ``/v1`` (another API's path)
    path = "/responses"

    # -- HTTP --------------------------------------------------------------------------------

    def http_request(self, inp: TurnInput, rec: TurnRecord) -> bytes:
        body = http_body(self.spec, inp, self.previous_response_id)
        rec.sent_input_tokens = sent_tokens(body, inp)
        payload = dumps(shape_body(body, "responses", self.shaping, planned_output(inp)))
        rec.bytes_sent = len(payload)
        return payload

    def http_sent(self, rec: TurnRecord, sent_ns: int) -> SseFeed:
        """The request goes out now: its stream, fed by the response body."""
        return SseFeed(ResponseStream(sent_ns, tokens=self.tokens, rec=rec))

    def http_answer(self, rec: TurnRecord, feed: SseFeed, resp: HttpResponse) -> ResponseStream:
        """The turn's stream once the exchange ended; raises the API or truncation error."""
        rec.new_connection = resp.new_connection
        rec.connected_ns = resp.connected_ns
        rec.connect_start_ns = resp.connect_start_ns
        rec.tcp_connected_ns = resp.tcp_connected_ns
        rec.tls_done_ns = resp.tls_done_ns
        if resp.status >= 400:
            raise api_error_from_body(resp.status, resp.body)
        content_type = resp.headers.get("content-type", "")
        if not content_type.startswith("text/event-stream"):
            raise TransportError(ErrorKind.NOT_SSE, not_sse(content_type, resp.body))
        stream = feed.stream
        if not stream.done:
            raise TransportError(
                ErrorKind.TRUNCATED_STREAM, f"the SSE stream ended before {self.stream_end}"
            )
        if stream.response_id and stream.status in _CHAIN_STATUSES:
            self.previous_response_id = stream.response_id
        return stream

    # -- compaction (any transport, over HTTP) -------------------------------------------------

    @staticmethod
    def compact_request(inp: TurnInput, rec: TurnRecord) -> bytes:
        payload = dumps(compact_body(inp))
        rec.sent_input_tokens = inp.history_tokens
        rec.bytes_sent = len(payload)
        return payload

    def compact_answer(
        self, rec: TurnRecord, sent_ns: int, resp: HttpResponse, done_ns: int
    ) -> ResponseStream:
        """The compaction's answer as a finished stream (its output: the compaction item).

        Whatever the transport, the next request starts a new chain from the compacted
        history: the server's chain still holds everything that was compacted.
        """
        stream = ResponseStream(sent_ns, rec=rec)
        rec.new_connection = resp.new_connection
        rec.connected_ns = resp.connected_ns
        if resp.status >= 400:
            raise api_error_from_body(resp.status, resp.body)
        try:
            doc = loads(resp.body)
        except LoopbenchError:
            doc = None
        if not isinstance(doc, dict) or not isinstance(doc.get("output"), list):
            raise ProtocolError(
                "POST /responses/compact: expected a compacted response (JSON with an 'output' "
                f"list), got {body_start(resp.body)}"
            )
        response = {**doc, "status": "completed"}
        stream.whole(response, done_ns)
        self.previous_response_id = None
        self.paused = None
        return stream

    # -- WebSocket ---------------------------------------------------------------------------

    def ws_turn(self, inp: TurnInput, rec: TurnRecord) -> WsTurn:
        return WsTurn(self, inp, rec)

    def ws_warmup(self, inp: TurnInput) -> bytes | None:
        """The ``generate: false`` request to send before this turn (``None``: none).

        Only a turn the trace recorded a warm-up before (a rollout's first), only on a fresh
        chain; the append prototype keeps one response per rollout and has no warm-up."""
        if not inp.turn.warmup or self.spec.append or self.previous_response_id is not None:
            return None
        return dumps(ws_warmup(self.spec, inp))

    def warmed(self, stream: ResponseStream) -> None:
        """The warm-up's answer: the turn that follows chains from it."""
        if stream.response_id and stream.status in _CHAIN_STATUSES:
            self.previous_response_id = stream.response_id


def on_lane(payload: bytes, stream_id: str | None) -> bytes:
    """A WebSocket message for lane ``stream_id`` of a multiplexed connection (None: as is)."""
    if stream_id is None:
        return payload
    # The body is a JSON object: the lane goes in as its first key.
    return b'{"stream_id":' + dumps(stream_id) + b"," + payload[1:]


class WsTurn:
    """One WebSocket turn and its recoveries.

    Per attempt the edge calls :meth:`request` (the message to send), :meth:`start`
    with the send time (the stream to feed), then :meth:`finish` on success or
    :meth:`recover` on an :class:`~harness.wire.errors.APIError` or
    :class:`~harness.wire.errors.WsClosed`.  The turn is measured from its first
    send; the time until the send that succeeded is its recovery time.
    """

    __slots__ = (
        "attempts",
        "conv",
        "first_send",
        "full",
        "inp",
        "last_send",
        "rec",
        "resume",
        "stream",
    )

    def __init__(self, conv: Conversation, inp: TurnInput, rec: TurnRecord) -> None:
        self.conv = conv
        self.inp = inp
        self.rec = rec
        self.full = False  # resend the whole context whatever the chain says
        self.first_send = 0
        self.last_send = 0
        self.attempts = 0
        self.resume: ResponseStream | None = None
        self.stream: ResponseStream | None = None

    def request(self, stream_id: str | None = None) -> bytes:
        """The message of this attempt; ``stream_id``: the lane of a multiplexed connection."""
        conv = self.conv
        paused = conv.paused
        if paused is not None and paused.status == "paused" and paused.response_id:
            self.resume = paused
            body = ws_append(self.inp, paused.response_id)
            self.rec.sent_input_tokens = sent_tokens(body, self.inp)
        else:
            self.resume = None
            previous = None if self.full else conv.previous_response_id
            inp = self.inp
            if self.full and conv.recover_from == "full" and inp.full_history is not None:
                # Resend everything, as a client that keeps no compacted base does.
                inp = replace(
                    inp,
                    history=inp.full_history,
                    history_tokens=inp.base_tokens + items_tokens(inp.full_history, conv.tokens),
                )
            create = ws_create(conv.spec, inp, previous)
            # a recovery's resend is what this turn sent (its last attempt's)
            self.rec.sent_input_tokens = sent_tokens(create, inp)
            body = shape_body(create, "responses", conv.shaping, planned_output(inp))
        payload = dumps(body)
        payload = on_lane(payload, stream_id)
        self.rec.bytes_sent = len(payload)  # bytes, as over HTTP: not characters
        return payload

    def start(self, sent_ns: int) -> ResponseStream:
        # The turn is measured from its first send, recovery included: every attempt's stream
        # starts there, and the time until this send is the recovery's (finish()).
        if not self.first_send:
            self.first_send = sent_ns
        self.last_send = sent_ns
        stream = self.resume
        if stream is not None:
            stream.resume(self.first_send, self.rec)
        else:
            stream = ResponseStream(self.first_send, tokens=self.conv.tokens, rec=self.rec)
        self.stream = stream
        return stream

    def recover(self, exc: TransportError) -> Recovery:
        """Count and apply the recovery for ``exc``; raises when the turn must fail instead."""
        conv = self.conv
        action = recovery_for(conv.spec, exc, full_sent=self.full)
        if action is Recovery.FAIL:
            raise exc
        self.attempts += 1
        self.rec.recoveries += 1
        if self.attempts > MAX_RECOVERIES_PER_TURN:
            raise TransportError(
                ErrorKind.RECOVERY_EXHAUSTED,
                f"gave up after {MAX_RECOVERIES_PER_TURN} recoveries in one turn; the last: {exc}",
            )
        conv.paused = None
        if action is Recovery.RECONNECT:
            conv.previous_response_id = None
            self.full = True
        elif action is Recovery.RESEND_FULL:
            self.full = True
        # RECONNECT_KEEP_CHAIN: the next request names the same previous response
        return action

    def finish(self) -> ResponseStream:
        stream = self.stream
        assert stream is not None, "finish() before start()"
        self.rec.recovery_ns += self.last_send - self.first_send
        conv = self.conv
        if conv.spec.append:
            conv.paused = stream if stream.status == "paused" else None
        elif stream.response_id and stream.status in _CHAIN_STATUSES:
            conv.previous_response_id = stream.response_id
        else:
            conv.previous_response_id = None
        return stream
