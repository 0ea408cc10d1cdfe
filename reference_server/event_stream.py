"""An SSE response written straight to the ASGI ``send``, and cancellation on disconnect.

Starlette's ``StreamingResponse`` pulls from an async iterator inside an anyio
task group that also listens for the disconnect; feeding it from a generation
task takes a queue and a second task, so every batch of due events crossed the
event loop once more before it reached the socket — time that showed up in the
measured TTFT and inter-token latency.  :class:`EventStream` runs the
generation in the request's own task and writes each batch as it is produced.

Back-pressure is the ASGI server's: a body ``send`` waits while the socket's
write buffer is above its high-water mark, so a reader that falls behind makes
its own generation wait, and the connection guard drops one that stops reading
(``send_timeout_s``).  A client that disconnects cancels the generation
(:func:`until_disconnect`) instead of letting it run to the end unread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Coroutine, Mapping, Sequence
from typing import Any, TypeVar

from starlette.responses import Response

from harness.wire.sse import encode_event
from reference_server.fault_send import CutAnswer, InjectedDisconnect, Send

SendEvents = Send
Receive = Callable[[], Awaitable[Mapping[str, Any]]]
AsgiSend = Callable[[dict[str, Any]], Awaitable[None]]
T = TypeVar("T")


async def until_disconnect(receive: Receive, work: Coroutine[Any, Any, Any]) -> bool:
    """Await ``work`` in this task; cancel it if the client disconnects first.

    Returns True if ``work`` finished, False if the disconnect cancelled it.
    Call it after the request body has been read: from then on the only
    message ``receive`` can return is ``http.disconnect``.
    """
    task = asyncio.current_task()
    assert task is not None
    gone = False

    async def watch() -> None:
        nonlocal gone
        while (await receive())["type"] != "http.disconnect":
            pass
        gone = True
        task.cancel()

    watcher = asyncio.ensure_future(watch())
    try:
        await work
    except asyncio.CancelledError:
        if not gone:
            raise  # someone else's cancellation (shutdown, the slow-reader guard)
        if task.uncancel() > 0:
            raise  # someone else cancelled in the same moment: theirs still stands
        return False
    finally:
        watcher.cancel()
    return True


async def unless_gone(receive: Receive, work: Coroutine[Any, Any, T]) -> T | Response:
    """What ``work`` returns, or the answer for a non-streamed request whose client left
    (499: stop generating for nobody; the access log shows it) or whose answer the
    ``disconnect`` fault cuts."""
    done: list[T] = []

    async def keep() -> None:
        done.append(await work)

    try:
        if not await until_disconnect(receive, keep()):
            return Response(status_code=499)
    except InjectedDisconnect:
        return CutAnswer()
    return done[0]


class SseResponse(Response):
    """``text/event-stream`` written by :meth:`produce`, one body write per batch.

    ``produce`` returns True if the stream ended normally: only then does ``done_marker``
    add the ``data: [DONE]`` line some clients expect.  A disconnect cancels it.
    """

    def __init__(self, headers: Mapping[str, str] | None = None, *, done_marker: bool) -> None:
        # Not Response.__init__: a streamed body has no content-length.
        self.status_code = 200
        self.media_type = "text/event-stream"
        self.background = None
        # A stream is never a cached answer (every SSE route of the API says so).
        self.init_headers({**(headers or {}), "cache-control": "no-cache"})
        self._done_marker = done_marker

    async def produce(self, write: Callable[[bytes], Awaitable[None]]) -> bool:
        raise NotImplementedError

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        asgi_send: AsgiSend = send
        await asgi_send(
            {"type": "http.response.start", "status": self.status_code, "headers": self.raw_headers}
        )

        async def write(body: bytes) -> None:
            await asgi_send({"type": "http.response.body", "body": body, "more_body": True})

        ended: list[bool] = []

        async def run() -> None:
            ended.append(await self.produce(write))

        if not await until_disconnect(receive, run()):
            return  # nobody is reading: no end of body to send
        tail = b"data: [DONE]\n\n" if self._done_marker and ended[0] else b""
        await asgi_send({"type": "http.response.body", "body": tail, "more_body": False})


class EventStream(SseResponse):
    """The events ``run(send_events)`` sends, encoded (``run`` returns :meth:`produce`'s
    verdict)."""

    def __init__(
        self,
        run: Callable[[SendEvents], Coroutine[Any, Any, bool]],
        headers: Mapping[str, str] | None = None,
        *,
        done_marker: bool = False,
        encode: Callable[[dict[str, Any]], bytes] = encode_event,
    ) -> None:
        super().__init__(headers, done_marker=done_marker)
        self._run = run
        # Chat Completions frames are `data:` lines without an `event:` name.
        self._encode = encode

    async def produce(self, write: Callable[[bytes], Awaitable[None]]) -> bool:
        encode = self._encode

        async def send_events(events: Sequence[dict[str, Any]]) -> None:
            if not events:
                return
            await write(
                encode(events[0]) if len(events) == 1 else b"".join(encode(e) for e in events)
            )

        return await self._run(send_events)
