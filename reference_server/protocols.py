"""uvicorn protocol classes that tell the app when a request's bytes arrived.

The modelled API-tier time stands for the work a real server does from the moment a
request reaches it; started when the app first sees the request, it would leave out
uvicorn's reading, parsing and task scheduling, which then showed up as measurement
overhead (docs/server.md "Under uvicorn", BENCHMARKS.md).  These subclasses stamp
``perf_counter_ns`` when ``data_received`` is entered and pass it to the app:

* HTTP: ``scope["loopbench.arrived_ns"]`` (left out for a pipelined request,
  which waits for the one before it);
* WebSocket: ``message["loopbench.arrived_ns"]`` on each ``websocket.receive``.

The WebSocket class also offers one ASGI extension,
``scope["extensions"]["loopbench.send_batch"]``: a ``websocket.send`` message
carrying ``"loopbench.texts"`` (a list of UTF-8 encoded text messages) is sent
as that many frames in one transport write — the events a response emits
together (an output item opening with its first delta, say) cost one syscall
and one trip through the ASGI stack instead of one each.

On a WebSocket upgrade the HTTP protocol also drops its parser, whose callbacks
point back at it: otherwise each closed WebSocket connection lingers as cyclic
garbage until a collection pause frees it.

Both are optional to the app: it falls back to stamping arrival itself and to
one ASGI message per event when they are absent (another ASGI server, or a
uvicorn without these classes).  They depend on uvicorn internals
(``data_received``, ``on_message_begin``, the ``queue`` of received messages,
``conn``/``transport`` of the sans-I/O WebSocket protocol); ``available()``
says whether this uvicorn has them, and the server uses uvicorn's own classes
otherwise.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from typing import Any

ARRIVED_KEY = "loopbench.arrived_ns"
#: ``scope[CONNECTION_KEY]``: ``(loop time the HTTP connection opened, its request number from 1)``
CONNECTION_KEY = "loopbench.connection"
BATCH_EXTENSION = "loopbench.send_batch"
BATCH_KEY = "loopbench.texts"

try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
    from uvicorn.protocols.utils import ClientDisconnected
    from uvicorn.protocols.websockets.websockets_sansio_impl import WebSocketsSansIOProtocol
    from websockets.exceptions import InvalidState

    _AVAILABLE = True
except ImportError:  # an older uvicorn, or httptools missing: uvicorn's own classes are used
    _AVAILABLE = False


def available() -> bool:
    """True if this uvicorn has the protocol classes these stamp (httptools + sans-I/O websockets)."""
    return _AVAILABLE


if _AVAILABLE:

    class StampedHttpToolsProtocol(HttpToolsProtocol):
        """httptools protocol that records when each request's first bytes arrived."""

        _arrived_ns = 0
        _opened = 0.0
        _requests = 0

        def connection_made(self, transport: Any) -> None:
            super().connection_made(transport)
            self._opened = self.loop.time()

        def data_received(self, data: bytes) -> None:
            self._arrived_ns = time.perf_counter_ns()
            super().data_received(data)

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self.scope[ARRIVED_KEY] = self._arrived_ns  # type: ignore[literal-required]
            # What the connection is (new, how old) travels with each request, so the app
            # keeps no table of connections it has seen: such a table outlives the
            # connections and grew with every one a soak opened (docs/reliability.md).
            self._requests += 1
            self.scope[CONNECTION_KEY] = (self._opened, self._requests)  # type: ignore[literal-required]

        def handle_websocket_upgrade(self) -> None:
            super().handle_websocket_upgrade()
            # This protocol is done: the WebSocket protocol owns the transport now.  Its
            # parser's callbacks point back at it, and it still holds the transport, which
            # holds the WebSocket protocol: without this, every closed WebSocket connection
            # stayed alive as ~100 objects of cyclic garbage, and the young-generation
            # collection that freed a few hundred connections' worth stopped the event loop
            # for 10-35 ms — a late token in every stream (BENCHMARKS.md).
            self.parser = None  # type: ignore[assignment]

        def on_headers_complete(self) -> None:
            super().on_headers_complete()
            # A pipelined request waits for the response before it: its API tier has not started.
            if self.pipeline and self.pipeline[0][0] is self.cycle:
                self.scope.pop(ARRIVED_KEY, None)  # type: ignore[misc]

    class _StampingQueue(asyncio.Queue[Any]):
        # Holds the stamp itself rather than a reference to its protocol (no reference cycle).
        arrived_ns = 0

        def put_nowait(self, item: Any) -> None:
            if item.get("type") == "websocket.receive":
                item[ARRIVED_KEY] = self.arrived_ns
            super().put_nowait(item)

    class StampedWebSocketProtocol(WebSocketsSansIOProtocol):
        """Sans-I/O websockets protocol: arrival stamps on received messages, batched sends."""

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.queue: _StampingQueue = _StampingQueue()

        def data_received(self, data: bytes) -> None:
            self.queue.arrived_ns = time.perf_counter_ns()
            super().data_received(data)

        def send_receive_event_to_app(self) -> None:
            # uvicorn answers a text message of invalid UTF-8 with close 1007; when the
            # connection is already closing (the client's close came in the same read) that
            # close raises InvalidState, which uvicorn leaves to the event loop: a "Fatal
            # error on transport" traceback per such client (found by tools/fuzz.py).
            # The close handshake is under way, so the message is simply dropped.
            with contextlib.suppress(InvalidState):
                super().send_receive_event_to_app()

        def handle_connect(self, event: Any) -> None:
            super().handle_connect(event)
            scope = getattr(self, "scope", None)
            if scope is not None:
                scope.setdefault("extensions", {})[BATCH_EXTENSION] = {}

        async def send(self, message: Any) -> None:
            texts = message.get(BATCH_KEY) if message["type"] == "websocket.send" else None
            if texts is None or not (self.handshake_complete and self.initial_response is None):
                await super().send(message)
                return
            await self.writable.wait()
            if self.disconnected:
                raise ClientDisconnected()
            if self.close_sent:
                raise RuntimeError(
                    "Unexpected ASGI message 'websocket.send', after sending 'websocket.close'."
                )
            try:
                for text in texts:
                    self.conn.send_text(text)
            except InvalidState:
                raise ClientDisconnected() from None
            self.transport.write(b"".join(self.conn.data_to_send()))


def uvicorn_protocols() -> dict[str, Any]:
    """``http=`` and ``ws=`` arguments for ``uvicorn.Config`` (empty when unavailable)."""
    if not _AVAILABLE:
        return {}
    return {"http": StampedHttpToolsProtocol, "ws": StampedWebSocketProtocol}
