"""The recording proxy: forwards an agent's HTTP/1.1 and WebSocket traffic byte for byte.

Each client connection gets its own upstream connection, and bytes are relayed as they
arrive, in both directions: a chunk is written on before anything looks at it.  The only
rewrite is the request head's ``Host`` (and the path prefix when the upstream's base path
is not ``/v1``), which a real upstream needs to route the request.  A copy of each
request and response body is kept until the response ends, then handed to a worker
thread that summarises it (:func:`harness.record.observe.summarize`) and drops it; over
WebSocket the frames themselves are decoded there too.  The event loop that relays every
connection's bytes does no parsing beyond the HTTP framing it needs to find a message's
end: a large exchange's summary (milliseconds of JSON) would otherwise stall every other
stream relayed meanwhile.

Why raw asyncio rather than an ASGI app and an HTTP client: both of those re-frame the
bytes (headers normalised, chunks re-sized, SSE re-buffered), which a byte-exact relay must
not do, and they add per-chunk Python work that would show in the client's TTFT.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import queue
import signal
import ssl
import threading
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import urlsplit

import orjson

from harness.client.h1 import H1Error, ResponseParser
from harness.record.observe import (
    Exchange,
    WsDecoder,
    api_of,
    build_trace,
    parse_request_head,
    summarize,
)
from harness.wire.errors import LoopbenchError
from harness.workload.trace import dump_trace

__all__ = ["RecordingProxy", "Upstream", "UpstreamError", "record_until_stopped", "write_trace"]

_READ = 256 * 1024
_MAX_HEAD = 64 * 1024


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


@dataclass
class _Stats:
    connections: int = 0
    exchanges: int = 0
    errors: list[str] = field(default_factory=list)
    #: why each exchange the trace could not read was lost (each counted as failed)
    unread: list[str] = field(default_factory=list)
    #: of those, the ones that left no :class:`Exchange` behind (an observer's error)
    unread_without_exchange: int = 0


class RecordingProxy:
    """Listen on ``host:port``, forward to ``upstream``, collect :class:`Exchange` summaries."""

    def __init__(self, upstream: Upstream, *, keep_content: bool = False) -> None:
        self.upstream = upstream
        self.keep_content = keep_content
        self.exchanges: list[Exchange] = []
        self.stats = _Stats()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self._ssl = ssl.create_default_context() if upstream.tls else None
        self._conn_ids = 0
        #: observing steps for the worker thread, in the order the relay met them
        self._steps: queue.SimpleQueue[tuple[int, Callable[..., object], tuple[Any, ...]] | None]
        self._steps = queue.SimpleQueue()
        self._worker: threading.Thread | None = None
        #: the port it listens on, once started
        self.port = 0

    async def start(self, host: str = "127.0.0.1", port: int = 0) -> int:
        self._server = await asyncio.start_server(self._client, host, port)
        self.port = int(self._server.sockets[0].getsockname()[1])
        self._worker = threading.Thread(
            target=self._work, name="loopbench-record-observer", daemon=True
        )
        self._worker.start()
        return self.port

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        if self._tasks:
            await asyncio.wait(self._tasks, timeout=2.0)
        if self._server is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 2.0)
        # Every step queued so far is summarised before the trace is written.
        if self._worker is not None:
            self._steps.put(None)
            await asyncio.to_thread(self._worker.join)
            self._worker = None

    def _record(self, ex: Exchange | None) -> None:
        if ex is not None:
            self.exchanges.append(ex)
            self.stats.exchanges += 1

    def _summarize(self, *args: Any) -> None:
        ex = summarize(*args)
        if ex is None:
            api, transport, conn, _, _, _, _, (t_start, _, t_end), _ = args
            self._failed(api, transport, conn, t_start, t_end, 400, "its request body is not JSON")
            return
        self._record(ex)

    def _failed(
        self, api: str, transport: str, conn: int, t_start: int, t_end: int, status: int, why: str
    ) -> None:
        """Count an exchange the trace cannot use: in the header's ``failed``, with why."""
        self._record(Exchange(api, transport, conn, t_start, t_end, t_start, status))
        self.stats.unread.append(f"connection {conn}: a {api} exchange over {transport}: {why}")

    def _observe(self, conn: int, step: Callable[..., object], *args: Any) -> None:
        """Queue one observing step for the worker thread (the relay goes on at once)."""
        self._steps.put((conn, step, args))

    def _work(self) -> None:
        while (item := self._steps.get()) is not None:
            conn, step, args = item
            try:
                step(*args)
            except Exception as exc:  # the bytes were forwarded: only the trace loses this one
                self.stats.unread_without_exchange += 1
                self.stats.unread.append(
                    f"connection {conn}: could not read an exchange for the trace "
                    f"({type(exc).__name__}: {exc}); it was forwarded unchanged"
                )

    async def _client(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        self._conn_ids += 1
        conn = self._conn_ids
        self.stats.connections += 1
        upstreams: list[asyncio.StreamWriter] = []
        try:
            upgraded = await self._relay_http(conn, reader, writer, upstreams)
            if upgraded is not None:
                await self._relay_ws(conn, reader, writer, *upgraded)
        except (ConnectionError, asyncio.IncompleteReadError, H1Error, ValueError) as exc:
            self.stats.errors.append(f"connection {conn}: {type(exc).__name__}: {exc}")
        except asyncio.CancelledError:
            pass
        finally:
            for w in (writer, *upstreams):
                w.close()
            for w in (writer, *upstreams):
                with contextlib.suppress(Exception, asyncio.CancelledError):
                    await w.wait_closed()
            self._tasks.discard(task)

    async def _connect(self) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
        up = self.upstream
        return await asyncio.open_connection(
            up.host, up.port, ssl=self._ssl, server_hostname=up.host if up.tls else None
        )

    async def _relay_http(
        self,
        conn: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        upstreams: list[asyncio.StreamWriter],
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter, dict[str, str], bytes, bytes] | None:
        """Requests and responses until the connection ends, or upgrades (then what the
        WebSocket relay needs: the upstream streams, the 101's headers, the frames each side
        sent before it was read)."""
        buf = b""
        up_r: asyncio.StreamReader | None = None
        up_w: asyncio.StreamWriter | None = None
        while True:
            while (stop := buf.find(b"\r\n\r\n")) < 0:
                if len(buf) > _MAX_HEAD:
                    raise ValueError("request head larger than 64 KiB")
                data = await reader.read(_READ)
                if not data:
                    return None
                buf += data
            t_start = time.perf_counter_ns()
            buf_head = buf[:stop]
            head = parse_request_head(buf_head)
            rest = buf[stop + 4 :]
            buf = b""
            if up_w is None or up_w.is_closing():
                try:
                    up_r, up_w = await self._connect()
                    upstreams.append(up_w)
                except OSError as exc:
                    await self._bad_gateway(writer, exc)
                    return None
            assert up_r is not None
            up_w.write(self._head_bytes(buf_head) + rest)
            # The request body's framing is the response parser's (Content-Length or
            # chunked): prime one with a head that carries the request's framing headers.
            body = ResponseParser()
            framing = ["HTTP/1.1 200 OK"]
            upgrade = "websocket" in head.headers.get("upgrade", "").lower()
            if "chunked" in head.headers.get("transfer-encoding", "").lower():
                framing.append("transfer-encoding: chunked")
            else:
                framing.append(f"content-length: {int(head.headers.get('content-length') or 0)}")
            body.feed(("\r\n".join(framing) + "\r\n\r\n").encode())
            # After an upgrade request come frames, not a body (forwarded already, observed
            # once the upgrade is accepted).
            early_frames = rest if upgrade else b""
            request = bytearray(body.feed(rest)) if rest and not upgrade else bytearray()
            answered = b""  # an upstream's final head that came before the body was sent
            if not body.complete and "100-continue" in head.headers.get("expect", "").lower():
                got = await self._expect_continue(reader, writer, up_r, up_w, body, request)
                if got is None:
                    return None
                answered = got
            while not answered and not body.complete:
                data = await reader.read(_READ)
                if not data:
                    return None
                up_w.write(data)
                request += body.feed(data)
            api = api_of(head.target) if head.method == "POST" else None
            resp = ResponseParser()
            response = bytearray()
            t_first = 0
            if answered:
                writer.write(answered)
                t_first = time.perf_counter_ns()
                if api is not None:
                    response += resp.feed(answered)
                else:
                    resp.feed(answered)
            if upgrade:
                # The 101 head ends the HTTP part: what follows are frames, not a body.
                hbuf = b""
                while (end := hbuf.find(b"\r\n\r\n")) < 0:
                    data = await up_r.read(_READ)
                    if not data:
                        return None
                    writer.write(data)
                    hbuf += data
                if hbuf[:12].split(b" ")[1:2] == [b"101"]:
                    answer = parse_request_head(b"GET / HTTP/1.1" + hbuf[hbuf.find(b"\r\n") : end])
                    return up_r, up_w, answer.headers, early_frames, hbuf[end + 4 :]
                resp.feed(hbuf)  # refused (401, 426…): an ordinary response
            try:
                while not resp.complete:
                    data = await up_r.read(_READ)
                    if not data:
                        with contextlib.suppress(H1Error):
                            resp.eof()
                        break
                    writer.write(data)
                    await writer.drain()
                    if not t_first:
                        t_first = time.perf_counter_ns()
                    if api is not None:
                        response += resp.feed(data)
                    else:
                        resp.feed(data)
            except (OSError, H1Error) as exc:
                if api is not None and request:
                    why = (
                        "the client closed the connection before the response ended"
                        if writer.is_closing() or isinstance(exc, ConnectionError)
                        else f"the response could not be relayed ({type(exc).__name__})"
                    )
                    now = time.perf_counter_ns()
                    self._observe(conn, self._failed, api, "http", conn, t_start, now, 499, why)
                raise
            t_end = time.perf_counter_ns()
            if api is not None and request:
                self._observe(
                    conn,
                    self._summarize,
                    api,
                    "http",
                    conn,
                    bytes(request),
                    resp.status,
                    bytes(response),
                    resp.headers,
                    (t_start, t_first, t_end),
                    self.keep_content,
                )
            if not resp.keep_alive or not resp.complete or answered:
                # after a refused Expect the client may still send the body: the connection
                # cannot tell it from a next request
                return None

    async def _expect_continue(
        self,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
        body: ResponseParser,
        request: bytearray,
    ) -> bytes | None:
        """Relay a request body whose client waits for ``100 Continue`` before sending it.

        The upstream's interim answer reaches the client while the body is still to come;
        a final answer instead (417, 401…) is returned, to be relayed as the response.  Both
        sides are read at once: an upstream that ignores ``Expect`` waits for the body the
        client sends after its own timeout.  ``None``: the client went away.
        """
        # readuntil consumes nothing until the whole head is there: safe to cancel
        up_head = asyncio.ensure_future(up_r.readuntil(b"\r\n\r\n"))
        try:
            while not body.complete:
                client_read = asyncio.ensure_future(reader.read(_READ))
                waiting: set[asyncio.Future[bytes]] = {client_read}
                if not up_head.done():
                    waiting.add(up_head)
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if up_head in waiting and up_head.done():
                    head = up_head.result()
                    if head[9:10] != b"1":
                        client_read.cancel()
                        return head  # a final answer: the body is not wanted
                    writer.write(head)  # 100 Continue (or another interim answer)
                    if not client_read.done():
                        continue_read = await client_read
                    else:
                        continue_read = client_read.result()
                else:
                    continue_read = await client_read
                if not continue_read:
                    return None
                up_w.write(continue_read)
                request += body.feed(continue_read)
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            return None
        finally:
            if not up_head.done():
                up_head.cancel()
        return b""

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

    async def _bad_gateway(self, writer: asyncio.StreamWriter, exc: OSError) -> None:
        up = self.upstream
        why = exc.strerror or type(exc).__name__
        body = (
            '{"error":{"message":"loopbench record could not connect to the upstream '
            f'{up.host}:{up.port} ({why}).","type":"upstream_unreachable","code":"bad_gateway"}}}}'
        ).encode()
        writer.write(
            b"HTTP/1.1 502 Bad Gateway\r\ncontent-type: application/json\r\n"
            + f"content-length: {len(body)}\r\nconnection: close\r\n\r\n".encode()
            + body
        )
        with contextlib.suppress(ConnectionError):
            await writer.drain()

    async def _relay_ws(
        self,
        conn: int,
        reader: asyncio.StreamReader,
        writer: asyncio.StreamWriter,
        up_r: asyncio.StreamReader,
        up_w: asyncio.StreamWriter,
        answer: dict[str, str],
        early: bytes,
        leftover: bytes,
    ) -> None:
        ext = answer.get("sec-websocket-extensions", "").lower()
        deflate = "permessage-deflate" in ext
        to_server = WsDecoder(deflate, "client_no_context_takeover" in ext)
        to_client = WsDecoder(deflate, "server_no_context_takeover" in ext)
        lanes = _WsLanes(self, conn)

        clock = time.perf_counter_ns
        if early:
            self._observe(conn, lanes.from_client_bytes, to_server, early, clock())

        async def upstream_to_client() -> None:
            if leftover:
                self._observe(conn, lanes.from_server_bytes, to_client, leftover, clock())
            while data := await up_r.read(_READ):
                writer.write(data)
                self._observe(conn, lanes.from_server_bytes, to_client, data, clock())
            if writer.can_write_eof():
                writer.write_eof()

        async def client_to_upstream() -> None:
            while data := await reader.read(_READ):
                up_w.write(data)
                self._observe(conn, lanes.from_client_bytes, to_server, data, clock())
            if up_w.can_write_eof():
                up_w.write_eof()

        down = asyncio.ensure_future(upstream_to_client())
        upward = asyncio.ensure_future(client_to_upstream())
        try:
            await asyncio.wait({down, upward}, return_when=asyncio.FIRST_COMPLETED)
            await asyncio.wait({down}, timeout=1.0)
        finally:
            for t in (down, upward):
                t.cancel()
            self._observe(conn, lanes.close)


class _WsLanes:
    """Requests in flight on one WebSocket connection, per lane (``stream_id``).

    Runs on the proxy's worker thread: ``t_ns`` is when the relay saw the bytes.
    """

    def __init__(self, proxy: RecordingProxy, conn: int) -> None:
        self.proxy = proxy
        self.conn = conn
        self.pending: dict[str | None, deque[tuple[bytes, int, int, list[bytes]]]] = {}

    def from_client_bytes(self, decoder: WsDecoder, data: bytes, t_ns: int) -> None:
        self.from_client(decoder.feed(data), t_ns)

    def from_server_bytes(self, decoder: WsDecoder, data: bytes, t_ns: int) -> None:
        self.from_server(decoder.feed(data), t_ns)

    def from_client(self, messages: list[bytes], t_ns: int) -> None:
        for m in messages:
            if b"response.create" not in m:
                continue  # cheap: most client messages are not one
            event = _event(m)
            if event is None or event.get("type") != "response.create":
                continue
            lane = _lane_of(event)
            self.pending.setdefault(lane, deque()).append((m, t_ns, 0, []))

    def from_server(self, messages: list[bytes], t_ns: int) -> None:
        now = t_ns
        for m in messages:
            # The event's own type, not a substring: a response object carries "error": null
            # from its first event on, and any text may contain an event name.
            event = _event(m)
            if event is None:
                continue
            queue = self.pending.get(_lane_of(event)) or self.pending.get(None)
            if not queue:
                continue
            request, t_start, t_first, events = queue[0]
            if not t_first:
                queue[0] = (request, t_start, now, events)
            events.append(m)
            kind = event.get("type")
            if kind in _TERMINAL:
                queue.popleft()
                status = 200 if kind in ("response.completed", "response.incomplete") else 500
                self.proxy._record(
                    summarize(
                        "responses",
                        "ws",
                        self.conn,
                        request,
                        status,
                        b"\n".join(events),
                        {},
                        (t_start, t_first or now, now),
                        self.proxy.keep_content,
                    )
                )

    def close(self) -> None:
        """The connection ended: requests still waiting for their response end failed."""
        now = time.perf_counter_ns()
        for queue_ in self.pending.values():
            for _, t_start, _, _ in queue_:
                self.proxy._failed(
                    "responses",
                    "ws",
                    self.conn,
                    t_start,
                    now,
                    499,
                    "the connection closed before the response ended",
                )
        self.pending.clear()


_TERMINAL = frozenset(("response.completed", "response.failed", "response.incomplete", "error"))


def _event(message: bytes) -> dict[str, Any] | None:
    try:
        event = orjson.loads(message)
    except orjson.JSONDecodeError:
        return None
    return event if isinstance(event, dict) else None


def _lane_of(event: dict[str, Any]) -> str | None:
    lane = event.get("stream_id")
    return lane if isinstance(lane, str) else None


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
    on_ready: Callable[[int], None] = lambda port: None,
    stop: asyncio.Event | None = None,
) -> tuple[RecordingProxy, int, int]:
    """Run the proxy until ``stop`` is set or SIGINT/SIGTERM arrives, then write the trace
    (whatever was recorded so far: a conversation cut by the stop is closed as truncated)."""
    proxy = RecordingProxy(Upstream.parse(upstream_url), keep_content=keep_content)
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
    on_ready(bound)
    try:
        await stop.wait()
    finally:
        for sig in installed:
            loop.remove_signal_handler(sig)
        await proxy.stop()
    meta: dict[str, object] = {"upstream": upstream_url, "keep_content": keep_content}
    if proxy.stats.unread_without_exchange:
        meta["unreadable"] = proxy.stats.unread_without_exchange
    rollouts, failed = write_trace(proxy.exchanges, out, meta)
    return proxy, rollouts, failed
