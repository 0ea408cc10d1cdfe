"""The kernel-stamping transport against real sockets on loopback (docs/metrics.md §1.9)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import socket
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from pathlib import Path
from typing import Any, cast

import pytest
import uvloop

from harness.client.h1 import ResponseParser
from harness.client.options import ClientSettings
from harness.report.rebuild import rebuild_summary
from harness.run.runner import RunOptions
from harness.transports import rx_socket
from harness.transports.h1client import H1Pool
from harness.transports.rx_socket import (
    RealtimeClock,
    RxTransport,
    kernel_stamps_supported,
    resolve_rx_stamp,
    stamped_transport,
    tcp_socket,
)
from harness.wire.ws_frames import OP_TEXT, FrameReader, encode_frame
from tests.transports.conftest import loopbench_run

pytestmark = pytest.mark.skipif(
    not kernel_stamps_supported(), reason="kernel receive stamps need Linux (SO_TIMESTAMPNS)"
)

Runner = Callable[[Coroutine[Any, Any, Any]], Any]
LOOPS: dict[str, Runner] = {"asyncio": asyncio.run, "uvloop": uvloop.run}


class Recorder(asyncio.Protocol):
    """Keeps what arrives and, over an RxTransport, each read's stamps."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.chunks: list[bytes] = []
        #: (rx_ns, rx_user_ns, rx_kernel, rx_diff_ns) per read
        self.stamps: list[tuple[int, int, bool, int]] = []
        self.eof = False
        self.lost: asyncio.Future[Exception | None] = loop.create_future()
        self.transport: asyncio.BaseTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.chunks.append(data)
        t = self.transport
        if isinstance(t, RxTransport):
            self.stamps.append((t.rx_ns, t.rx_user_ns, t.rx_kernel, t.rx_diff_ns))

    def eof_received(self) -> bool | None:
        self.eof = True
        return None

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.lost.done():
            self.lost.set_result(exc)


async def open_pair(kind: str, port: int) -> tuple[asyncio.BaseTransport, Recorder]:
    """A client connection to ``port``: over our transport (``rx``) or the loop's (``loop``)."""
    loop = asyncio.get_running_loop()
    sock = await tcp_socket("127.0.0.1", port)
    proto = Recorder(loop)
    if kind == "rx":
        transport = stamped_transport(loop, sock, proto)
        assert isinstance(transport, RxTransport)
        return transport, proto
    transport, _ = await loop.create_connection(lambda: proto, sock=sock)
    return transport, proto


async def echo_exchange(kind: str, payloads: list[bytes]) -> tuple[bytes, Recorder, int]:
    """Send ``payloads`` then half-close; the server echoes all it reads, then ``bye`` and
    closes.  Returns what the client read, its recorder and how many bytes the server read."""
    got = [0]

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while data := await reader.read(65536):
            got[0] += len(data)
            writer.write(data)
            await writer.drain()
        writer.write(b"bye")  # after the client's EOF: the half-closed socket still reads
        await writer.drain()
        writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    async with server:
        opened, proto = await open_pair(kind, port)
        # uvloop's transports implement asyncio.Transport without subclassing it
        transport = cast(asyncio.Transport, opened)
        for p in payloads:
            transport.write(p)
        transport.write_eof()
        async with asyncio.timeout(30):
            exc = await proto.lost
        assert exc is None
        assert proto.eof
        assert transport.is_closing()
    return b"".join(proto.chunks), proto, got[0]


@pytest.mark.parametrize("loop_name", sorted(LOOPS))
def test_the_transport_delivers_what_the_loops_transport_does(loop_name: str) -> None:
    """Echo of small writes and of a 4 MiB one (more than the socket buffers: the write
    buffer drains through add_writer), then a half-close answered by the peer."""
    big = os.urandom(4 * 1024 * 1024)
    payloads = [b"hello ", b"world", big, b"tail"]
    want = b"".join(payloads) + b"bye"

    async def both() -> tuple[tuple[bytes, Recorder, int], tuple[bytes, Recorder, int]]:
        return await echo_exchange("rx", payloads), await echo_exchange("loop", payloads)

    (rx_bytes, rx_proto, rx_read), (loop_bytes, _, loop_read) = LOOPS[loop_name](both())
    assert rx_read == loop_read == len(want) - 3
    assert rx_bytes == loop_bytes == want
    assert rx_proto.stamps and all(kernel for _, _, kernel, _ in rx_proto.stamps)


@contextlib.asynccontextmanager
async def rx_pair() -> AsyncIterator[tuple[socket.socket, RxTransport, Recorder]]:
    """A loopback connection: the server's accepted socket, and the client's end over our
    transport with the protocol that records what it reads."""
    loop = asyncio.get_running_loop()
    with socket.create_server(("127.0.0.1", 0)) as listener:
        listener.setblocking(False)
        connecting = asyncio.ensure_future(open_pair("rx", listener.getsockname()[1]))
        server, _ = await loop.sock_accept(listener)
        transport, proto = await connecting
        assert isinstance(transport, RxTransport)
        yield server, transport, proto


def test_every_kernel_stamp_falls_inside_the_servers_write_and_before_the_user_stamp() -> None:
    """On loopback the kernel stamps a packet inside the sender's send call: each read's
    converted stamp lies within one server write (± the clock offset's error) and never after
    the user-space stamp of the same read."""
    writes: list[tuple[int, int]] = []

    async def main() -> tuple[Recorder, int]:
        async with rx_pair() as (server, _, proto):
            with server:
                for i in range(40):
                    before = time.perf_counter_ns()
                    server.send(b"event %d\n" % i)  # one send call per event
                    writes.append((before, time.perf_counter_ns()))
                    await asyncio.sleep(0.001 if i % 2 else 0)
            async with asyncio.timeout(30):
                await proto.lost
        return proto, rx_socket._clock().error_ns

    proto, error_ns = uvloop.run(main())
    assert b"".join(proto.chunks) == b"".join(b"event %d\n" % i for i in range(40))
    assert proto.stamps
    for rx_ns, user_ns, kernel, diff_ns in proto.stamps:
        assert kernel
        raw_kernel = user_ns - diff_ns
        assert diff_ns >= -error_ns, "a kernel stamp after the read returned"
        assert rx_ns <= user_ns
        assert any(a - error_ns <= raw_kernel <= b + error_ns for a, b in writes), (
            f"kernel stamp {raw_kernel} inside no server write {writes}"
        )


def test_the_realtime_offset_converts_time_ns_into_perf_counter_time() -> None:
    clock = RealtimeClock()
    assert clock.error_ns > 0
    for _ in range(100):
        a = time.perf_counter_ns()
        real = time.time_ns()
        b = time.perf_counter_ns()
        t = clock.to_perf(real, b)
        assert a - clock.error_ns <= t <= b + clock.error_ns


def test_the_kernel_pool_streams_the_same_body_as_the_user_pool_with_both_stamps() -> None:
    parts = [b'data: {"n": %d}\n\n' % i for i in range(30)]
    head = (
        b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\ntransfer-encoding: chunked\r\n\r\n"
    )

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        while True:
            try:
                request = await reader.readuntil(b"\r\n\r\n")
            except asyncio.IncompleteReadError:
                break
            length = next(
                (
                    int(x.split(b":")[1])
                    for x in request.split(b"\r\n")
                    if x.lower().startswith(b"content-length:")
                ),
                0,
            )
            await reader.readexactly(length)
            writer.write(head)
            for p in parts:
                writer.write(b"%x\r\n%s\r\n" % (len(p), p))
                await writer.drain()
                await asyncio.sleep(0.0005)
            writer.write(b"0\r\n\r\n")
            await writer.drain()
        writer.close()

    async def stream(rx_stamp: str) -> tuple[bytes, list[tuple[int, int]]]:
        server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        seen: list[bytes] = []
        stamps: list[tuple[int, int]] = []

        def sink(chunk: bytes, t_ns: int, user_ns: int = 0) -> int:
            seen.append(chunk)
            stamps.append((t_ns, user_ns))
            return 1

        async with server:
            pool = H1Pool(
                f"http://127.0.0.1:{port}/v1",
                max_connections=2,
                keepalive=True,
                verify_tls=True,
                connect_timeout_s=5,
                read_timeout_s=5,
                rx_stamp=rx_stamp,
            )
            for _ in range(2):  # the second request reuses the connection
                resp = await pool.request("POST", "/responses", [], b"{}", sink)
                assert resp.status == 200
            await pool.aclose()
        return b"".join(seen), stamps

    kernel_body, kernel_stamps = uvloop.run(stream("kernel"))
    user_body, user_stamps = uvloop.run(stream("user"))
    assert kernel_body == user_body == b"".join(parts) * 2
    assert all(u == 0 for _, u in user_stamps)
    assert all(0 < t <= u for t, u in kernel_stamps)


def test_without_kernel_support_auto_falls_back_to_user_stamps_and_kernel_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    assert resolve_rx_stamp("auto") == "kernel"
    monkeypatch.setattr(rx_socket, "PLATFORM", "darwin")
    assert not kernel_stamps_supported()
    assert resolve_rx_stamp("auto") == "user"
    assert resolve_rx_stamp("user") == "user"
    with pytest.raises(ValueError, match="--rx-stamp kernel: this machine cannot stamp"):
        resolve_rx_stamp("kernel")
    options = RunOptions(client=ClientSettings(rx_stamp="auto")).client_options()
    assert (options["rx_stamp"], options["rx_stamp_option"]) == ("user", "auto")


@pytest.mark.parametrize("mode", ["kernel", "user"])
def test_a_run_over_http_and_ws_records_how_each_turn_was_stamped(
    tmp_path: Path, mode: str
) -> None:
    run, _ = loopbench_run(tmp_path, f"rx-{mode}", "--transports", "http,ws", "--rx-stamp", mode)
    assert run.summary is not None and run.summary["valid"]
    assert run.manifest["client_options"]["rx_stamp"] == mode
    turns = run.turns
    assert set(turns["transport"]) == {"http", "ws"}
    assert (turns["rx_stamp"] == mode).all()
    diffs = turns["rx_user_minus_kernel_us"]
    for name in ("http", "ws"):
        block = run.summary["transports"][name]["rx_stamp"]
        n = int((turns["transport"] == name).sum())
        assert block[f"{mode}_turns"] == n
        if mode == "kernel":
            # every turn of this short run is inside the diagnostic window
            mine = diffs[turns["transport"] == name]
            assert mine.notna().all() and (mine >= 0).all()
            assert block["user_minus_kernel_us"]["count"] == n
            assert block["user_minus_kernel_us"]["max"] == pytest.approx(mine.max(), abs=0.01)
        else:
            assert diffs.isna().all()
            assert block["user_minus_kernel_us"] == {
                "count": 0,
                "p50": None,
                "p99": None,
                "max": None,
                "mean": None,
            }
    # A run killed before its summary gets the same block back from its rows.
    copy = tmp_path / "killed"
    shutil.copytree(run.path, copy, ignore=shutil.ignore_patterns("summary.json"))
    rebuilt = rebuild_summary(copy)
    for name in ("http", "ws"):
        assert (
            rebuilt["transports"][name]["rx_stamp"] == run.summary["transports"][name]["rx_stamp"]
        )


def test_paused_reading_holds_data_back_and_abort_ends_the_connection_at_once() -> None:
    async def main() -> None:
        async with rx_pair() as (server, transport, proto):
            with server:
                transport.pause_reading()
                assert not transport.is_reading()
                server.send(b"held")
                await asyncio.sleep(0.05)
                assert proto.chunks == []
                transport.resume_reading()
                async with asyncio.timeout(10):
                    while not proto.chunks:
                        await asyncio.sleep(0.001)
                assert proto.chunks == [b"held"]
                # a write the peer never reads stays buffered; abort drops it and ends now
                transport.write(b"x" * (16 * 1024 * 1024))
                assert transport.get_write_buffer_size() > 0
                transport.abort()
                async with asyncio.timeout(10):
                    assert await proto.lost is None
                assert transport.get_write_buffer_size() == 0

    uvloop.run(main())


def _chunked_units() -> tuple[Callable[[bytes], int], bytes, bytes]:
    parser = ResponseParser()
    parser.feed(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
    one, two = b"data: first token\n\n", b"data: second\n\n"
    return parser.unit_end, b"%x\r\n%s\r\n" % (len(one), one), b"%x\r\n%s\r\n" % (len(two), two)


def _ws_units() -> tuple[Callable[[bytes], int], bytes, bytes]:
    one, two = b'{"type":"first token"}', b'{"type":"second"}'
    return (
        FrameReader(1 << 20).frame_end,
        encode_frame(OP_TEXT, one, masked=False),
        encode_frame(OP_TEXT, two, masked=False),
    )


@pytest.mark.parametrize("framing", [_chunked_units, _ws_units], ids=["http-chunk", "ws-frame"])
def test_a_unit_read_before_the_first_token_keeps_its_own_segments_stamp(
    framing: Callable[[], tuple[Callable[[bytes], int], bytes, bytes]],
) -> None:
    """Two units sent as two segments, a moment apart, both waiting when the client reads (as
    when its loop was busy): one read of both gives the first the second's stamp, as the kernel
    stamps a read with the last segment it copied.  With the framing's ``unit_end`` each read
    ends with a unit, and the first is stamped before the second, except where the kernel had
    already merged the two segments into one buffer, keeping the later stamp: on a fresh
    connection's first exchange, whose segments are ACKed at once (docs/metrics.md §1.9), so
    most rounds, not each, must show it.  A real loopback socket: only the kernel's stamping
    is the defect."""
    unit_end, first, second = framing()
    both = len(first + second)

    async def main() -> list[tuple[list[bytes], list[int]]]:
        loop = asyncio.get_running_loop()
        rounds: list[tuple[list[bytes], list[int]]] = []
        async with rx_pair() as (server, transport, proto):
            transport.unit_end = unit_end
            client: socket.socket = transport.get_extra_info("socket")
            with server:
                server.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
                for _ in range(8):
                    transport.pause_reading()
                    server.send(first)
                    await asyncio.sleep(0.002)  # the second segment a moment later
                    server.send(second)
                    async with asyncio.timeout(10):
                        while len(client.recv(4096, socket.MSG_PEEK)) < both:
                            await asyncio.sleep(0.001)
                    start = len(proto.chunks)
                    transport.resume_reading()
                    async with asyncio.timeout(10):
                        while sum(map(len, proto.chunks[start:])) < both:
                            await asyncio.sleep(0.001)
                    stamps = [kernel and rx_ns for rx_ns, _, kernel, _ in proto.stamps[start:]]
                    rounds.append((proto.chunks[start:], stamps))
                    transport.write(b"next")  # the client's next request, as between turns
                    await loop.sock_recv(server, 16)
            transport.close()
        return rounds

    rounds = uvloop.run(main())
    for chunks, stamps in rounds:
        assert chunks == [first, second], "a read did not end with its unit"
        assert all(stamps) and stamps[0] <= stamps[1]
    apart = sum(stamps[0] < stamps[1] for _, stamps in rounds)
    assert apart >= len(rounds) // 2, rounds


@pytest.mark.parametrize("partial", [False, True], ids=["unit-ends-with-the-peek", "no-unit-end"])
def test_a_unit_read_takes_no_byte_that_arrived_after_its_peek(partial: bool) -> None:
    """A segment that arrives between the peek and the read stays for the next read, both
    when the unit ends exactly where the peeked bytes end and when no unit ends in them: read
    with the peeked bytes, it would give them its later stamp (docs/metrics.md §1.9).  The
    late segment is sent from inside ``unit_end``, so it is waiting before the read, every
    time; a real socket, as only its receive queue can hold bytes the peek did not see."""

    async def main() -> list[bytes]:
        async with rx_pair() as (server, transport, proto):
            client: socket.socket = transport.get_extra_info("socket")
            calls: list[bytes] = []

            def unit_end(data: bytes) -> int:
                calls.append(data)
                if len(calls) == 1:
                    server.send(b"late")
                    for _ in range(10_000):  # until the kernel queued it for the client
                        if len(client.recv(64, socket.MSG_PEEK)) >= len(data) + 4:
                            break
                    return 0 if partial else len(data)
                return len(data)

            with server:
                transport.pause_reading()
                server.send(b"unit")
                async with asyncio.timeout(10):
                    while len(client.recv(64, socket.MSG_PEEK)) < 4:
                        await asyncio.sleep(0.001)
                transport.unit_end = unit_end
                transport.resume_reading()
                async with asyncio.timeout(10):
                    while sum(map(len, proto.chunks)) < 8:
                        await asyncio.sleep(0.001)
            transport.close()
        return proto.chunks

    assert uvloop.run(main()) == [b"unit", b"late"]
