"""HTTP transports: ``http`` (stateless, whole history) and ``http-chained`` (stored chain).

Built on httpx with streaming reads; timestamps are taken once per received
chunk, at the I/O edge, and every event of that chunk carries it.
"""

from __future__ import annotations

import time
from typing import Any

import httpx

from harness.core.agent import TurnInput
from harness.core.events import dumps, loads
from harness.core.records import TurnRecord
from harness.core.sse import SSEDecoder
from harness.core.stream import ResponseStream
from harness.errors import APIError, LoopbenchError, TransportError
from harness.transports.base import TransportOptions


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
        limits = httpx.Limits(
            max_connections=options.max_connections,
            max_keepalive_connections=options.max_connections if options.keepalive else 0,
        )
        headers = {"authorization": f"Bearer {options.api_key}", "content-type": "application/json"}
        if not options.keepalive:
            headers["connection"] = "close"
        headers.update(options.extra_headers)
        self.client = httpx.AsyncClient(
            base_url=options.base_url.rstrip("/"),
            headers=headers,
            limits=limits,
            timeout=httpx.Timeout(options.request_timeout_s, connect=options.connect_timeout_s),
            verify=options.verify_tls,
        )

    async def session(self) -> HttpSession:
        return HttpSession(self)

    async def aclose(self) -> None:
        await self.client.aclose()


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
        try:
            async with self.t.client.stream("POST", "/responses", content=payload) as resp:
                if resp.status_code >= 400:
                    raise _error_from_body(resp.status_code, await resp.aread())
                async for chunk in resp.aiter_raw():
                    t_ns = time.perf_counter_ns()
                    for msg in decoder.feed(chunk):
                        if msg.data.startswith("[DONE]"):
                            continue
                        stream.feed(loads(msg.data), t_ns)
                # Read to the end of the body even after the terminal event: a response
                # left unread is closed, not returned to the pool, and every turn would
                # then pay a new connection (keep-alive in name only).
        except httpx.TimeoutException as exc:
            raise TransportError(
                "timeout", f"POST {self.t.options.base_url}/responses: {type(exc).__name__}"
            ) from exc
        except httpx.HTTPError as exc:
            raise TransportError(
                "connection", f"POST {self.t.options.base_url}/responses: {exc!r}"
            ) from exc
        if not stream.done:
            raise TransportError("truncated_stream", "the SSE stream ended before a terminal event")
        if stream.response_id and stream.status in ("completed", "incomplete"):
            self.previous_response_id = stream.response_id
        return stream

    async def close(self) -> None:
        return None
