"""HTTP transports over asyncio: ``http`` (stateless, whole history) and ``http-chained``.

Built on a lean HTTP/1.1 client (:mod:`harness.transports.h1client`): each
received chunk is timestamped in the protocol's ``data_received`` and decoded
in the same call, so every event of that chunk carries the time it reached the
process.  (Until issue #10 this was an httpx stream; its per-chunk cost showed
up in every measured TTFT, see BENCHMARKS.md.)  Bodies, error parsing and the
chain are :class:`harness.client.conversation.Conversation`'s.
"""

from __future__ import annotations

import time

from harness.client.bodies import http_headers
from harness.client.conversation import Conversation
from harness.client.options import TransportOptions
from harness.client.shaping import session_headers
from harness.client.stream import ResponseStream
from harness.transports.h1client import H1Pool
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


class HttpTransport:
    """POST /responses with ``stream: true``; a chained spec sends previous_response_id + new items."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        self.name = spec.name
        self.spec = spec
        self.options = options
        self.headers = http_headers(options)
        self.pool = H1Pool(
            options.base_url,
            max_connections=options.max_connections,
            keepalive=options.keepalive,
            verify_tls=options.verify_tls,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.request_timeout_s,
            # Anything else (a JSON answer, an HTML page) is kept whole and named in the error.
            stream_types=("text/event-stream",),
            rx_stamp=options.rx_stamp,
        )
        #: compaction is the Responses API's whatever the transport's API (its headers)
        self.compact_headers = self.headers

    def conversation(self) -> Conversation:
        options = self.options
        return Conversation(self.spec, shaping=options.shaping, tokens=options.tokens)

    async def session(self, rollout_key: str | None = None) -> HttpSession:
        return HttpSession(self, rollout_key)

    async def aclose(self) -> None:
        await self.pool.aclose()


class HttpSession:
    def __init__(self, transport: HttpTransport, rollout_key: str | None = None) -> None:
        self.t = transport
        self.conv = transport.conversation()
        self.session = session_headers(transport.options.shaping, rollout_key)
        self.headers = [*transport.headers, *self.session] if self.session else transport.headers

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        t = self.t
        conv = self.conv
        if inp.compaction:
            headers = [*t.compact_headers, *self.session]
            return await compact(t.pool, headers, conv, inp, rec)
        payload = conv.http_request(inp, rec)
        feed = conv.http_sent(rec, time.perf_counter_ns())
        # The whole body is read even after the terminal event, so the connection goes
        # back to the pool (a response left unread would cost a new connection per turn).
        resp = await t.pool.request(
            "POST", conv.path, self.headers, payload, feed.feed, feed.stream
        )
        return conv.http_answer(rec, feed, resp)

    async def close(self) -> None:
        return None


async def compact(
    pool: H1Pool,
    headers: list[tuple[str, str]],
    conv: Conversation,
    inp: TurnInput,
    rec: TurnRecord,
) -> ResponseStream:
    """``POST /responses/compact`` for any transport's session; the next turn starts a new chain."""
    payload = conv.compact_request(inp, rec)
    sent_ns = time.perf_counter_ns()
    resp = await pool.request("POST", "/responses/compact", headers, payload)
    return conv.compact_answer(rec, sent_ns, resp, time.perf_counter_ns())
