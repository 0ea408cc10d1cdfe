"""The ``chat`` and ``messages`` transports over asyncio: Chat Completions and Anthropic Messages.

The same HTTP/1.1 pool as ``http`` (:mod:`harness.transports.http`), one module for both
APIs: the spec's ``api`` picks the path, the headers, the body and the stream's translator
(:class:`harness.client.api_conversation.ApiConversation`).  Each received chunk is stamped
when it is read and translated in the same call, so the metrics mean what they mean for
``http``.
"""

from __future__ import annotations

import time

from harness.client.api_conversation import ApiConversation, api_headers
from harness.client.bodies import http_headers
from harness.client.options import TransportOptions
from harness.client.shaping import session_headers
from harness.client.stream import ResponseStream
from harness.transports.http import HttpTransport, compact
from harness.wire.transports import TransportSpec
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


class ApiHttpTransport(HttpTransport):
    """POST /chat/completions or /messages with ``stream: true``, the whole conversation."""

    def __init__(self, spec: TransportSpec, options: TransportOptions) -> None:
        super().__init__(spec, options)
        self.headers = api_headers(spec, options)

    async def session(self, rollout_key: str | None = None) -> ApiHttpSession:  # type: ignore[override]
        return ApiHttpSession(self, rollout_key)


class ApiHttpSession:
    def __init__(self, transport: ApiHttpTransport, rollout_key: str | None = None) -> None:
        self.t = transport
        options = transport.options
        self.conv = ApiConversation(
            transport.spec, options.cache_control, shaping=options.shaping, tokens=options.tokens
        )
        self.session = session_headers(options.shaping, rollout_key)
        self.headers = [*transport.headers, *self.session]

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        t = self.t
        if inp.compaction:
            # Neither API compacts: the reference server's /responses/compact does, as for http.
            headers = [*http_headers(t.options), *self.session]
            return await compact(t.pool, headers, self.conv, inp, rec)
        conv = self.conv
        payload = conv.http_request(inp, rec)
        feed = conv.http_sent(rec, time.perf_counter_ns())
        resp = await t.pool.request("POST", conv.path, self.headers, payload, feed.feed)
        return conv.http_answer(rec, feed, resp)

    async def close(self) -> None:
        return None
