"""The recording proxy: forwards an agent's HTTP/1.1 and WebSocket traffic byte for byte.

Each client connection gets its own upstream connection; a chunk is written to the other
socket from inside the protocol's ``data_received`` before anything looks at it, and the
only rewrite is the request head's ``Host`` (and the ``/v1`` prefix), which a real upstream
needs.  A copy of each body goes, once its response ended, to the observer
(:mod:`harness.record.observer`), so the relaying loop does no JSON work
(docs/traces.md, "Recording any agent").  Raw asyncio protocols rather than an ASGI app
and an HTTP client: both re-frame the bytes (headers normalised, chunks re-sized, SSE
re-buffered), which a byte-exact relay must not do, and add per-chunk Python work that
would show in the client's TTFT (docs/traces.md, "Overhead").
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import socket
import ssl
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, cast
from urllib.parse import urlsplit

from harness.client.h1 import H1Error, ResponseParser
from harness.record.observe import Exchange, RequestHead, api_of, build_trace, parse_request_head
from harness.record.observer import Observed, Observer
from harness.record.observer_process import ObserverProcess
from harness.run.short_slice import request_short_slice, thread_slice_ns
from harness.wire import quiet_gc
from harness.wire.errors import LoopbenchError
from harness.workload.trace import dump_trace

_READ = 256 * 1024
_MAX_HEAD = 64 * 1024
#: how ``loopbench record`` (and the bench's bare relay) say where they listen: the URL follows
READY_PREFIX = "loopbench record listening on "
#: where the proxy's exchanges are read (:class:`RecordingProxy`)
OBSERVERS = ("process", "thread")
#: the GIL switch interval while recording: the longest the relay waits for the observer's
#: thread (``--observer thread``)
_SWITCH_S = 0.0001


class UpstreamError(LoopbenchError):
    """The ``--upstream`` URL, ``--port`` or ``--out`` cannot be used."""


@dataclass(frozen=True, slots=True)
class Upstream:
    host: str
    port: int
    tls: bool
    base_path: str  # without a trailing slash, e.g. "/v1"
    host_header: str

    @classmethod
    def parse(cls, url: str) -> Upstream:
        parts = urlsplit(url)
        if parts.scheme not in ("http", "https") or not parts.hostname:
            raise UpstreamError(
                f"--upstream: expected an http:// or https:// URL such as "
                f"http://127.0.0.1:8000/v1, got {url!r}"
            )
        tls = parts.scheme == "https"
        port = parts.port or (443 if tls else 80)
        default = (tls and port == 443) or (not tls and port == 80)
        host_header = parts.hostname if default else f"{parts.hostname}:{port}"
        return cls(parts.hostname, port, tls, parts.path.rstrip("/") or "/v1", host_header)

    def target(self, path: str) -> str:
        """The upstream's request target for the client's ``path`` (sent to ``/v1/…``)."""
        if self.base_path == "/v1":
            return path
        if path == "/v1" or path.startswith(("/v1/", "/v1?")):
            return self.base_path + path[3:]
        return path


class RecordingProxy:
    """Listen on ``host:port``, forward to ``upstream``, collect :class:`Exchange` summaries.

    ``observer``: where the exchanges are read (``harness.record.observer``): ``"process"``
    (the default: no GIL shared with the relay) or ``"thread"`` (one process fewer;
    docs/traces.md compares the two).
    """

    def __init__(
        self, upstream: Upstream, *, keep_content: bool = False, observer: str = "process"
    ) -> None:
        if observer not in OBSERVERS:
            raise ValueError(f"observer: expected one of {', '.join(OBSERVERS)}, got {observer!r}")
        self.upstream = upstream
        self.keep_content = keep_content
        self.observer = observer
        #: why connections broke (an unparsable head, a reset): the relay goes on
        self.errors: list[str] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._relays: set[_Relay] = set()
        self._ssl = ssl.create_default_context() if upstream.tls else None
        self._conn_ids = 0
        #: observing steps for the thread observer, in the order the relay met them
        self._steps: queue.SimpleQueue[tuple[int, str, tuple[Any, ...]] | None]
        self._steps = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        #: the process observer, once started (it takes the steps instead of ``_steps``)
        self._process: ObserverProcess | None = None
        #: where a step goes: the thread observer's queue, or the observer process
        self._put: Callable[[tuple[int, str, tuple[Any, ...]]], None] = self._steps.put
        #: the exchanges read, and why any could not be: the thread observer's (read as it
        #: goes), or the process observer's (complete once stopped)
        self.observed = Observed()
        #: the port it listens on, once started
        self.port = 0

    @property
    def exchanges(self) -> list[Exchange]:
        return self.observed.exchanges

    @property
    def open_connections(self) -> int:
        """Client connections being relayed now."""
        return len(self._relays)

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        """Start the observer, then listen; returns the port.

        Raises :class:`ObserverError` when the observer's process does not start, and
        ``OSError`` when ``host:port`` cannot be listened on.
        """
        loop = asyncio.get_running_loop()
        if self.observer == "process":
            process = ObserverProcess(self.keep_content)
            await process.start()
            self._process = process
            self._put = process.put
        try:
            self._server = await loop.create_server(lambda: _Side(self, None), host, port)
        except BaseException:
            if self._process is not None:
                await self._process.stop()
                self._process = None
            raise
        self.port = int(self._server.sockets[0].getsockname()[1])
        if self._process is None:
            observer = Observer(self.keep_content)
            self.observed = observer.out
            self._worker = threading.Thread(
                target=self._observe_here, args=(observer,), name="loopbench-record-observer"
            )
            self._worker.daemon = True
            self._worker.start()
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        # Closing a connection observes what was in flight on it (as failed).
        gone = [r.gone for r in self._relays]
        for relay in list(self._relays):
            relay.close()
        if gone:
            await asyncio.wait(gone, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        # Every step queued so far is summarised before the trace is written.
        if self._worker is not None:
            self._steps.put(None)
            await asyncio.to_thread(self._worker.join)
            self._worker = None
        if self._process is not None:
            self.observed = await self._process.stop()

    def _observe(self, conn: int, step: str, *args: Any) -> None:
        """Queue one observing step (a name in ``STEPS``) for the observer: the relay goes on."""
        self._put((conn, step, args))

    def _observe_here(self, observer: Observer) -> None:
        """The thread observer's worker: each step read on this thread."""
        while (item := self._steps.get()) is not None:
            observer.step(*item)

    def _head_bytes(self, raw: bytes) -> bytes:
        """The request head as sent, but for ``Host`` and the path prefix (see the module)."""
        up = self.upstream
        lines = raw.split(b"\r\n")
        method, target, version = lines[0].split(b" ")
        new_target = up.target(target.decode("latin-1")).encode("latin-1")
        if new_target != target:
            lines[0] = b" ".join((method, new_target, version))
        host = up.host_header.encode("latin-1")
        for i in range(1, len(lines)):
            if lines[i][:5].lower() == b"host:":
                lines[i] = lines[i][:5] + b" " + host
        return b"\r\n".join(lines) + b"\r\n\r\n"

    def _bad_gateway(self, exc: OSError) -> bytes:
        up = self.upstream
        why = exc.strerror or type(exc).__name__
        body = (
            '{"error":{"message":"loopbench record could not connect to the upstream '
            f'{up.host}:{up.port} ({why}).","type":"upstream_unreachable","code":"bad_gateway"}}}}'
        ).encode()
        return (
            b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )


def _nodelay(transport: asyncio.BaseTransport) -> None:
    """Each chunk leaves as it is written: no coalescing with the next (Nagle) on either leg.

    asyncio and uvloop set it already on TCP sockets; set here so that the relay does not
    depend on it."""
    sock = transport.get_extra_info("socket")
    if sock is not None and sock.family in (socket.AF_INET, socket.AF_INET6):
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)


class _Side(asyncio.Protocol):
    """One socket of a relayed connection: what it receives goes to the relay at once.

    A chunk is written to the other socket from inside ``data_received``: no reader
    buffer, no task to wake, no await between a chunk's arrival and its way on.
    """

    def __init__(self, proxy: RecordingProxy, relay: _Relay | None) -> None:
        self.proxy = proxy
        self.relay = relay  # None: the client's side, whose relay it creates
        self.upstream = relay is not None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        # uvloop's transports are not asyncio.Transport subclasses, only alike
        tr = cast(asyncio.Transport, transport)
        _nodelay(tr)
        if self.relay is None:
            self.relay = _Relay(self.proxy, tr)
        else:
            self.relay.up = tr

    def data_received(self, data: bytes) -> None:
        assert self.relay is not None
        if self.upstream:
            self.relay.from_upstream(data)
        else:
            self.relay.from_client(data)

    def eof_received(self) -> bool:
        assert self.relay is not None
        return self.relay.eof(self.upstream)

    def connection_lost(self, exc: Exception | None) -> None:
        if self.relay is not None:
            self.relay.lost(self.upstream, exc)

    # A full send buffer on this side holds back reading on the other (the relay's drain).
    def pause_writing(self) -> None:
        if self.relay is not None:
            self.relay.hold(self.upstream, True)

    def resume_writing(self) -> None:
        if self.relay is not None:
            self.relay.hold(self.upstream, False)


# what the client's bytes are, in the relay's request direction
_HEAD, _CONNECTING, _BODY, _AWAIT, _EARLY, _ANSWERED, _WS, _CLOSED = range(8)


class _Relay:
    """One client connection and its upstream connection, relayed chunk by chunk.

    The client's side is parsed only as far as forwarding needs it (a request's head, to
    rewrite ``Host``; its body's framing, to find the next head); the upstream's side is
    written on first and parsed after (its framing, to find where an exchange ends).  A
    copy of each exchange goes to the proxy's observer once it ends.
    """

    def __init__(self, proxy: RecordingProxy, client: asyncio.Transport) -> None:
        proxy._conn_ids += 1
        proxy._relays.add(self)
        self.proxy = proxy
        self.conn = proxy._conn_ids
        self.client = client
        self.up: asyncio.Transport | None = None
        self.gone: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.mode = _HEAD
        self.buf = b""  # the client's next request head, until it is whole
        self.held = bytearray()  # client bytes that wait for the upstream or a response's end
        self.held_paused = False
        self.client_eof = False
        self.ws_eofs = 0
        # the exchange in flight
        self.inflight = False
        self.api: str | None = None
        self.t_start = 0
        self.body = ResponseParser()
        self.request = bytearray()
        self.resp = ResponseParser()
        self.response = bytearray()
        self.upgrade = False
        self.hbuf = b""  # an upgrade's answer head, until it is whole
        self.early = bytearray()  # frames the client sent before the upgrade was answered

    # --- the client's bytes ---------------------------------------------------------------

    def from_client(self, data: bytes) -> None:
        mode = self.mode
        if mode == _WS:
            assert self.up is not None
            self.up.write(data)
            self.proxy._observe(self.conn, "ws_client", self.conn, data, time.perf_counter_ns())
        elif mode == _BODY:
            assert self.up is not None
            self.up.write(data)
            try:
                self.request += self.body.feed(data)
            except H1Error as exc:
                self._error(exc)
                return
            if self.body.complete:
                self.mode = _AWAIT
        elif mode in (_EARLY, _ANSWERED):
            # frames before the upgrade's answer, or a body the upstream no longer waits for
            assert self.up is not None
            self.up.write(data)
            if mode == _EARLY:
                self.early += data
        elif mode in (_CONNECTING, _AWAIT):
            self.held += data  # the next request waits for this one's response
            if len(self.held) > _READ and not self.held_paused:
                self.held_paused = True
                self.client.pause_reading()  # until it is this one's turn
        elif mode == _HEAD:
            self._head(data)

    def _head(self, data: bytes) -> None:
        buf = self.buf + data if self.buf else data
        stop = buf.find(b"\r\n\r\n")
        if stop < 0:
            if len(buf) > _MAX_HEAD:
                self._error(ValueError("request head larger than 64 KiB"))
            else:
                self.buf = buf
            return
        self.buf = b""
        self.t_start = time.perf_counter_ns()
        raw, rest = buf[:stop], buf[stop + 4 :]
        try:
            head = parse_request_head(raw)
        except ValueError as exc:
            self._error(exc)
            return
        if self.up is None or self.up.is_closing():
            self.mode = _CONNECTING
            self.client.pause_reading()
            task = asyncio.ensure_future(self._connect(head, raw, rest))
            self.proxy._tasks.add(task)
            task.add_done_callback(self.proxy._tasks.discard)
            return
        self._send(head, raw, rest)

    async def _connect(self, head: RequestHead, raw: bytes, rest: bytes) -> None:
        up = self.proxy.upstream
        loop = asyncio.get_running_loop()
        try:
            await loop.create_connection(
                lambda: _Side(self.proxy, self),
                up.host,
                up.port,
                ssl=self.proxy._ssl,
                server_hostname=up.host if up.tls else None,
            )
        except OSError as exc:
            if not self.client.is_closing():
                self.client.write(self.proxy._bad_gateway(exc))
            self.close()
            return
        if self.mode == _CLOSED:
            self.close()
            return
        self._send(head, raw, rest)
        self.client.resume_reading()
        if self.held and self.mode != _AWAIT:
            held = bytes(self.held)
            self.held.clear()
            self.from_client(held)

    def _send(self, head: RequestHead, raw: bytes, rest: bytes) -> None:
        assert self.up is not None
        self.up.write(self.proxy._head_bytes(raw) + rest)
        self.api = api_of(head.target) if head.method == "POST" else None
        self.inflight = True
        # A HEAD's answer announces a length it never sends (Claude Code's connectivity check
        # is one): waiting for that body would stall the connection's next request.
        self.resp = ResponseParser(no_body=head.method == "HEAD")
        self.response = bytearray()
        self.request = bytearray()
        self.upgrade = "websocket" in head.headers.get("upgrade", "").lower()
        if self.upgrade:
            # After an upgrade request come frames, not a body (forwarded already, observed
            # once the upgrade is accepted).
            self.hbuf = b""
            self.early = bytearray(rest)
            self.mode = _EARLY
            return
        # The request body's framing is the response parser's (Content-Length or
        # chunked): prime one with a head that carries the request's framing headers.
        body = self.body = ResponseParser()
        framing = ["HTTP/1.1 200 OK"]
        if "chunked" in head.headers.get("transfer-encoding", "").lower():
            framing.append("transfer-encoding: chunked")
        else:
            framing.append(f"content-length: {int(head.headers.get('content-length') or 0)}")
        body.feed(("\r\n".join(framing) + "\r\n\r\n").encode())
        self.mode = _BODY
        if rest:
            try:
                self.request += body.feed(rest)
            except H1Error as exc:
                self._error(exc)
                return
        if body.complete:
            self.mode = _AWAIT

    # --- the upstream's bytes -------------------------------------------------------------

    def from_upstream(self, data: bytes) -> None:
        self.client.write(data)  # on its way before anything looks at it
        if self.mode == _WS:
            self.proxy._observe(self.conn, "ws_server", self.conn, data, time.perf_counter_ns())
            return
        if not self.inflight:
            return  # nothing asked for it: relayed, not observed
        if self.upgrade:
            # The 101 head ends the HTTP part: what follows are frames, not a body.
            hbuf = self.hbuf = self.hbuf + data
            end = hbuf.find(b"\r\n\r\n")
            if end < 0:
                return
            if hbuf[:12].split(b" ")[1:2] == [b"101"]:
                self._websocket(hbuf, end)
                return
            self.upgrade = False  # refused (401, 426…): an ordinary response
            self.mode = _AWAIT
            data = hbuf
        resp = self.resp
        try:
            part = resp.feed(data)
        except H1Error as exc:
            self._error(exc)
            return
        if self.api is not None:
            self.response += part
        if resp.head_done and self.mode == _BODY:
            # A final answer before the whole body (a refused Expect: 100-continue, a 413):
            # whatever the client still sends cannot be told from a next request.
            self.mode = _ANSWERED
        if resp.complete:
            self._ended()

    def _websocket(self, hbuf: bytes, end: int) -> None:
        answer = parse_request_head(b"GET / HTTP/1.1" + hbuf[hbuf.find(b"\r\n") : end])
        ext = answer.headers.get("sec-websocket-extensions", "")
        self.proxy._observe(self.conn, "ws_open", self.conn, ext)
        self.mode = _WS
        self.inflight = False
        now = time.perf_counter_ns()
        if self.early:
            self.proxy._observe(self.conn, "ws_client", self.conn, bytes(self.early), self.t_start)
            self.early = bytearray()
        if leftover := hbuf[end + 4 :]:
            self.proxy._observe(self.conn, "ws_server", self.conn, leftover, now)

    def _ended(self) -> None:
        """The response is whole: hand the exchange to the observer, then the next request."""
        self._observe_exchange()
        if not self.resp.keep_alive or self.mode == _ANSWERED or self.client_eof:
            self.close()
            return
        self.mode = _HEAD
        if self.held:
            held = bytes(self.held)
            self.held.clear()
            if self.held_paused:
                self.held_paused = False
                self.client.resume_reading()
            self.from_client(held)

    def _observe_exchange(self) -> None:
        self.inflight = False
        if self.api is not None and self.request:
            self.proxy._observe(
                self.conn,
                "http",
                self.api,
                self.conn,
                bytes(self.request),
                self.resp.status,
                bytes(self.response),
                dict(self.resp.headers),
                (self.t_start, time.perf_counter_ns()),
            )

    # --- ends -----------------------------------------------------------------------------

    def hold(self, client: bool, paused: bool) -> None:
        """Pause or resume reading from the client's (``client``) or the upstream's side."""
        side = self.client if client else self.up
        if side is None or side.is_closing():
            return
        if paused:
            side.pause_reading()
        else:
            side.resume_reading()

    def eof(self, upstream: bool) -> bool:
        """One side sent its last byte: ``True`` keeps that socket open to write to."""
        if upstream:
            if self.inflight and self.mode != _WS:
                with contextlib.suppress(H1Error):
                    self.resp.eof()  # a body delimited by the close ends here
                self._observe_exchange()
                self.close()
            elif self.mode == _WS:
                return self._ws_eof(self.client)
            else:
                self.up = None  # an idle keep-alive connection: the next request opens one
            return False
        self.client_eof = True
        if self.mode == _WS and self.up is not None:
            return self._ws_eof(self.up)
        if self.inflight or self.mode == _CONNECTING:
            return True  # the response still goes out; the connection closes after it
        self.close()
        return False

    def _ws_eof(self, other: asyncio.Transport) -> bool:
        """One side of a WebSocket ended: so does the other's sending, and the
        connection closes once both have, or a second later (the other side's close frame
        still reaches its peer)."""
        self.ws_eofs += 1
        if self.ws_eofs >= 2 or not other.can_write_eof():
            self.close()
            return False
        other.write_eof()
        asyncio.get_running_loop().call_later(1.0, self.close)
        return True

    def lost(self, upstream: bool, exc: Exception | None) -> None:
        if exc is not None:
            self.proxy.errors.append(
                f"connection {self.conn}: {type(exc).__name__}: {exc}"
                + (" (upstream)" if upstream else "")
            )
        if upstream and self.mode != _WS and not self.inflight:
            if self.up is not None and self.up.is_closing():
                self.up = None
            return  # the upstream closed between requests: the next one reconnects
        if self.inflight and self.mode != _WS and self.api is not None and self.request:
            self.inflight = False
            why = (
                "the client closed the connection before the response ended"
                if not upstream
                else "the upstream closed the connection before the response ended"
            )
            now = time.perf_counter_ns()
            self.proxy._observe(
                self.conn, "failed", self.api, "http", self.conn, self.t_start, now, 499, why
            )
        self.close()

    def _error(self, exc: Exception) -> None:
        self.proxy.errors.append(f"connection {self.conn}: {type(exc).__name__}: {exc}")
        self.close()

    def close(self) -> None:
        if self.mode == _CLOSED:
            if self.up is not None and not self.up.is_closing():
                self.up.close()
            return
        if self.mode == _WS:
            self.proxy._observe(self.conn, "ws_close", self.conn, time.perf_counter_ns())
        self.mode = _CLOSED
        self.inflight = False
        # close() sends what is buffered first: a response's last bytes still arrive
        self.client.close()
        if self.up is not None:
            self.up.close()
        self.proxy._relays.discard(self)
        if not self.gone.done():
            self.gone.set_result(None)


def write_trace(
    exchanges: list[Exchange], path: str, meta: dict[str, object] | None = None
) -> tuple[int, int]:
    """Write the trace of ``exchanges`` to ``path``; returns (rollouts, failed exchanges).

    Written to a temporary file and renamed, so an interrupted write leaves no half trace.
    """
    header, rollouts = build_trace(exchanges, meta=dict(meta or {}))
    unread = (meta or {}).get("unreadable", 0)
    if isinstance(unread, int) and unread:
        header.meta["failed"] = int(header.meta.get("failed", 0)) + unread
    tmp = f"{path}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(dump_trace(rollouts, header))
    os.replace(tmp, path)
    return len(rollouts), int(header.meta.get("failed", 0))


async def record_until_stopped(
    upstream_url: str,
    out: str,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    keep_content: bool = False,
    observer: str = "process",
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
) -> tuple[RecordingProxy, int, int]:
    """Run the proxy until ``stop`` is set or SIGINT/SIGTERM arrives, then write the trace
    (whatever was recorded so far: a conversation cut by the stop is closed as truncated)."""
    proxy = RecordingProxy(
        Upstream.parse(upstream_url), keep_content=keep_content, observer=observer
    )
    try:
        bound = await proxy.start(host, port)
    except OSError as exc:
        raise UpstreamError(
            f"--port {port}: cannot listen on {host}:{port} ({exc.strerror or exc}); "
            "choose a free port, or 0 for any"
        ) from None
    stop = stop or asyncio.Event()
    loop = asyncio.get_running_loop()
    installed = []
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(sig, stop.set)
            installed.append(sig)
    # With `--observer thread`, the observer's thread holds the GIL for up to the switch
    # interval (5 ms by default) whenever the relay's loop wakes up with bytes to forward: a
    # short one bounds that wait.  (The observer's process shares no GIL with the loop.)
    switch = sys.getswitchinterval()
    if observer == "thread":
        sys.setswitchinterval(_SWITCH_S)
    # The collector's pauses would land on whichever chunk is being relayed: what exists
    # now is frozen out of it, and it runs as seldom as in a measuring run.
    gc_before = quiet_gc.begin()
    # After proxy.start(): the observer's process (or thread) keeps the default.  The
    # caller's thread gets its own slice back at the end (a library caller goes on with it).
    slice_before = thread_slice_ns()
    request_short_slice()
    on_ready(bound)
    try:
        await stop.wait()
    finally:
        try:
            for sig in installed:
                loop.remove_signal_handler(sig)
            await proxy.stop()
        finally:
            quiet_gc.end(gc_before)
            sys.setswitchinterval(switch)
            # The value it had (now marked as the thread's own: it no longer follows a later
            # change of the kernel's default, which a caller of this function does not make).
            if slice_before is not None:
                request_short_slice(slice_before)
    meta: dict[str, object] = {"upstream": upstream_url, "keep_content": keep_content}
    if proxy.observed.unread_without_exchange:
        meta["unreadable"] = proxy.observed.unread_without_exchange
    if proxy.observed.lost:
        # in the file too: a trace that looks whole to a script that ignored the exit code
        meta["lost"] = list(proxy.observed.lost)
    rollouts, failed = write_trace(proxy.exchanges, out, meta)
    return proxy, rollouts, failed
