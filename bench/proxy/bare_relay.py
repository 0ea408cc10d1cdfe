"""The floor of ``python -m bench.proxy``: a relay that forwards bytes and does nothing else.

What the recording proxy adds to a turn has two parts: what any relay process costs on the
machine (one more process to wake on each leg, two more socket hops) and what the proxy's
own work adds on top (head rewriting, HTTP framing, copies for the observer).  This relay
has only the first: a connection's bytes are written to the other socket from inside
``data_received``, as the proxy does, on the same event loop and with the collector
quieted the same way, but nothing is parsed, rewritten (the ``Host`` header stays as the
client sent it) or kept.  The bench runs it as one more side of every trial, so the
difference between the two is the recording's own cost, measured in the same trials.

Run as ``python -m bench.proxy.bare_relay --upstream URL --port 0``; it prints the line
the bench waits for (:data:`harness.record.proxy.READY_PREFIX`) and serves until SIGTERM.
``--out`` is accepted, and ignored, so that the bench starts it like the proxy.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Callable, Sequence
from typing import cast

from harness.record.proxy import READY_PREFIX, Upstream
from harness.run.event_loop import run_async
from harness.run.short_slice import request_short_slice
from harness.wire import quiet_gc
from harness.wire.exit_codes import UsageParser


class _End(asyncio.Protocol):
    """One socket of a relayed pair; what it reads goes to ``peer`` at once."""

    def __init__(self, upstream: Upstream | None = None) -> None:
        self.transport: asyncio.Transport | None = None
        self.peer: _End | None = None
        self.upstream = upstream  # set on the client's side: where to connect
        self.early = bytearray()  # the client's bytes before the upstream connection is up
        self.eof = False
        self._connecting: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.Transport, transport)
        if self.upstream is not None:
            # Not pause_reading: uvloop reads what came with the connection regardless, so
            # bytes before the upstream is up wait in ``early``.
            self._connecting = asyncio.ensure_future(self._connect(self.upstream))

    async def _connect(self, up: Upstream) -> None:
        loop = asyncio.get_running_loop()
        try:
            _, peer = await loop.create_connection(_End, up.host, up.port)
        except OSError:
            if self.transport is not None:
                self.transport.close()
            return
        self.peer, peer.peer = peer, self
        assert self.transport is not None and peer.transport is not None
        if self.transport.is_closing():
            peer.transport.close()
            return
        if self.early:
            peer.transport.write(bytes(self.early))
            self.early.clear()
        if self.eof:
            with contextlib.suppress(OSError, RuntimeError):
                peer.transport.write_eof()

    def data_received(self, data: bytes) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.write(data)
        else:
            self.early += data

    def eof_received(self) -> bool:
        self.eof = True
        if self.peer is not None and self.peer.transport is not None:
            if self.peer.eof:
                self.peer.transport.close()
                return False
            with contextlib.suppress(OSError, RuntimeError):
                self.peer.transport.write_eof()
        return True  # half-closed: the answer may still come the other way

    def connection_lost(self, exc: Exception | None) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.close()

    # A full send buffer on this side holds back reading on the other.
    def pause_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.pause_reading()

    def resume_writing(self) -> None:
        if self.peer is not None and self.peer.transport is not None:
            self.peer.transport.resume_reading()


async def serve(
    upstream: Upstream,
    host: str,
    port: int,
    stop: asyncio.Event,
    on_ready: Callable[[int], None],
    clients: set[_End] | None = None,
) -> None:
    """Relay ``host:port`` to ``upstream`` until ``stop`` is set; ``on_ready(port)`` once
    listening; ``clients`` (tests): each client's side is added to it."""

    def accept() -> _End:
        end = _End(upstream)
        if clients is not None:
            clients.add(end)
        return end

    loop = asyncio.get_running_loop()
    server = await loop.create_server(accept, host, port)
    on_ready(server.sockets[0].getsockname()[1])
    old = quiet_gc.begin()
    try:
        await stop.wait()
    finally:
        quiet_gc.end(old)
        server.close()


def main(argv: Sequence[str] | None = None) -> None:
    parser = UsageParser(
        prog="python -m bench.proxy.bare_relay",
        description="Forward bytes between clients and --upstream, and nothing else: the "
        "floor `python -m bench.proxy` measures the recording proxy against.",
    )
    parser.add_argument("--upstream", required=True, help="http://HOST:PORT/v1 (plain TCP)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--out", help="ignored (the bench passes it to every proxy it starts)")
    args = parser.parse_args(argv)
    upstream = Upstream.parse(args.upstream)
    if upstream.tls:
        parser.error("--upstream: the bare relay forwards plain TCP only (http://)")

    async def run() -> None:
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGINT, signal.SIGTERM):
            with contextlib.suppress(NotImplementedError, RuntimeError):
                loop.add_signal_handler(sig, stop.set)

        def ready(port: int) -> None:
            # as `loopbench record` does (its record_until_stopped): the floor on the same terms
            request_short_slice()
            print(
                f"{READY_PREFIX}http://{args.host}:{port}/v1 → {upstream.host}:{upstream.port} "
                "(bare relay)",
                flush=True,
            )

        await serve(upstream, args.host, args.port, stop, ready)

    run_async(run())


if __name__ == "__main__":
    main()
