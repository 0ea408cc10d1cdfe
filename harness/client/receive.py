"""From received bytes to the stream state machine, for both edges.

These run per chunk or per message, so they add one call and no allocation to
what :class:`~harness.client.stream.ResponseStream` does per event.
"""

from __future__ import annotations

from harness.client.api_errors import api_error_from_event
from harness.client.stream import ResponseStream
from harness.wire.events import loads
from harness.wire.sse import SSEDecoder


class SseFeed:
    """SSE body bytes in, events into ``stream``; ``[DONE]`` is skipped.

    Every event goes to the stream, even after its terminal event: only a
    ``response.failed`` may follow an ``error``, anything else is a protocol error.
    """

    __slots__ = ("decoder", "stream")

    def __init__(self, stream: ResponseStream) -> None:
        self.stream = stream
        self.decoder = SSEDecoder()

    def feed(self, chunk: bytes, t_ns: int, user_ns: int = 0) -> int:
        """Feed one chunk; returns how many events it completed (the edge's idle timeout
        counts events, not bytes).

        ``user_ns``: when ``t_ns`` is the kernel's receive stamp of the read, the user-space
        one (the turn keeps the first token's pair); 0 when ``t_ns`` is the user-space stamp.
        """
        stream = self.stream
        msgs = self.decoder.feed(chunk)
        waiting = user_ns and not stream.rec.first_token_ns
        for msg in msgs:
            if msg.raw.startswith(b"[DONE]"):
                continue
            stream.feed(loads(msg.raw), t_ns)
        if user_ns:
            stream.rx_kernel = True
            if waiting and stream.rec.first_token_ns:
                stream.first_token_user_ns = user_ns
        return len(msgs)


def feed_ws_message(stream: ResponseStream, raw: str | bytes, t_ns: int, user_ns: int = 0) -> None:
    """One WebSocket text message into ``stream``.

    An ``error`` event without ``sequence_number`` belongs to the connection, not to
    the response: it is raised as :class:`~harness.wire.errors.APIError`.  ``user_ns`` as
    for :meth:`SseFeed.feed`.
    """
    event = loads(raw, strict_utf8=True)
    if event.get("type") == "error" and "sequence_number" not in event:
        raise api_error_from_event(event)
    if not user_ns:
        stream.feed(event, t_ns)
        return
    stream.rx_kernel = True
    waiting = not stream.rec.first_token_ns
    stream.feed(event, t_ns)
    if waiting and stream.rec.first_token_ns:
        stream.first_token_user_ns = user_ns
