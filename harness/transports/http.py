"""HTTP transports: ``http`` (stateless, whole history) and ``http-chained`` (stored chain).

Built on a lean HTTP/1.1 client (:mod:`harness.transports.h1client`): each
received chunk is timestamped in the protocol's ``data_received`` and decoded
in the same call, so every event of that chunk carries the time it reached the
process.  (Until issue #10 this was an httpx stream; its per-chunk cost showed
up in every measured TTFT, see BENCHMARKS.md.)
"""

from __future__ import annotations

import time
from typing import Any

from harness.client.stream import ResponseStream
from harness.transports.base import TransportOptions
from harness.transports.h1client import H1Pool
from harness.wire.errors import APIError, LoopbenchError, TransportError
from harness.wire.events import dumps, loads
from harness.wire.sse import SSEDecoder
from harness.workload.agent import TurnInput
from harness.workload.records import TurnRecord


def _error_from_body(status: int, body: bytes) -> APIError:
    try:
        err = loads(body).get("error") or {}
        return APIError(
            status, err.get("code") or err.get("type"), str(err.get("message", ""))[:500]
        )
    except LoopbenchError:
        return APIError(status, None, body[:200].decode("utf-8", "replace"))


class HttpTransport:
    """POST /responses with ``stream: true``; ``chained`` sends previous_response_id + new items."""

    def __init__(self, options: TransportOptions, *, chained: bool = False) -> None:
        self.name = "http-chained" if chained else "http"
        self.options = options
        self.chained = chained
        headers = {
            "user-agent": "loopbench",
            "accept": "text/event-stream",
            "authorization": f"Bearer {options.api_key}",
            "content-type": "application/json",
        }
        headers.update({k.lower(): v for k, v in options.extra_headers.items()})
        self.headers = list(headers.items())
        self.pool = H1Pool(
            options.base_url,
            max_connections=options.max_connections,
            keepalive=options.keepalive,
            verify_tls=options.verify_tls,
            connect_timeout_s=options.connect_timeout_s,
            read_timeout_s=options.request_timeout_s,
        )

    async def session(self) -> HttpSession:
        return HttpSession(self)

    async def aclose(self) -> None:
        await self.pool.aclose()


class HttpSession:
    def __init__(self, transport: HttpTransport) -> None:
        self.t = transport
        self.previous_response_id: str | None = None

    def body(self, inp: TurnInput) -> dict[str, Any]:
        body: dict[str, Any] = {
            "model": inp.model,
            "instructions": inp.instructions,
            "tools": inp.tools,
            "tool_choice": inp.tool_choice,
            "metadata": inp.metadata,
            "max_output_tokens": inp.max_output_tokens,
            "stream": True,
        }
        if self.t.chained and self.previous_response_id is not None:
            body["input"] = inp.new_items
            body["previous_response_id"] = self.previous_response_id
            body["store"] = True
        else:
            body["input"] = inp.history
            body["store"] = self.t.chained
        return body

    async def turn(self, inp: TurnInput, rec: TurnRecord) -> ResponseStream:
        payload = dumps(self.body(inp))
        rec.bytes_sent = len(payload)
        rec.new_connection = not self.t.options.keepalive
        decoder = SSEDecoder()
        rec.sent_ns = time.perf_counter_ns()
        stream = ResponseStream(rec.sent_ns)

        def sink(chunk: bytes, t_ns: int) -> None:
            for msg in decoder.feed(chunk):
                if msg.data.startswith("[DONE]"):
                    continue
                stream.feed(loads(msg.data), t_ns)

        # The whole body is read even after the terminal event, so the connection goes
        # back to the pool (a response left unread would cost a new connection per turn).
        resp = await self.t.pool.request("POST", "/responses", self.t.headers, payload, sink)
        if resp.status >= 400:
            raise _error_from_body(resp.status, resp.body)
        if not stream.done:
            raise TransportError("truncated_stream", "the SSE stream ended before a terminal event")
        if stream.response_id and stream.status in ("completed", "incomplete"):
            self.previous_response_id = stream.response_id
        return stream

    async def close(self) -> None:
        return None
