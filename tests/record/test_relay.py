"""The recording proxy's relay: flow control, TCP_NODELAY, short slices, half-closes.

Real sockets on 127.0.0.1, upstreams started here on port 0; no wall-clock thresholds.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import os
import socket
import subprocess
import threading
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path

import pytest

from bench.proxy.latency import (
    BARE_RELAY,
    THIS_PROXY,
)
from harness.record.proxy import READY_PREFIX, RecordingProxy, Upstream, record_until_stopped
from harness.run.short_slice import SLICE_NS, request_short_slice, thread_slice_ns
from tests.runs import ROOT

pytestmark = pytest.mark.timeout(120)

BIG = 8 * 1024 * 1024  # far more than both legs' socket buffers and the transports' limits


BLOCK = bytes(range(256)) * 256  # 64 KiB
HEAD = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n"


async def _big_upstream(heads: list[bytes] | None = None) -> asyncio.Server:
    """Answers one request with a BIG chunked body, as fast as it may write; the request
    heads it got go to ``heads``."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            if heads is not None:
                heads.append(head)
            writer.write(HEAD)
            for _ in range(BIG // len(BLOCK)):
                writer.write(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")
                await writer.drain()
            writer.write(b"0\r\n\r\n")
            await writer.drain()
            await reader.read()
        finally:
            writer.close()

    return await asyncio.start_server(serve, "127.0.0.1", 0)


MODELS = b"GET /v1/models HTTP/1.1\r\nHost: x\r\n\r\n"


def _answering(
    answer: bytes, *, until_closed: bool
) -> Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]:
    """An upstream answering a request with ``answer``, then closing (``until_closed``: once
    the client closed its end)."""

    async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(answer)
        await writer.drain()
        if until_closed:
            await reader.read()
        writer.close()

    return serve


def _big_digest() -> bytes:
    """What a client of :func:`_big_upstream` must receive, hashed."""
    want = hashlib.sha256(HEAD)
    for _ in range(BIG // len(BLOCK)):
        want.update(b"%x\r\n" % len(BLOCK) + BLOCK + b"\r\n")
    want.update(b"0\r\n\r\n")
    return want.digest()


async def _read_chunked_digest(reader: asyncio.StreamReader) -> bytes:
    """Read through the chunked body's last chunk; the bytes read, hashed."""
    got = hashlib.sha256()
    seen = b""
    while not seen.endswith(b"0\r\n\r\n"):
        chunk = await reader.read(1 << 20)
        if not chunk:
            break
        got.update(chunk)
        seen = (seen + chunk)[-16:]
    return got.digest()


@contextlib.asynccontextmanager
async def _proxy_before(serve: Callable[..., Awaitable[None]]) -> AsyncIterator[RecordingProxy]:
    """A recording proxy in front of an upstream answering with ``serve``."""
    server = await asyncio.start_server(serve, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    proxy = RecordingProxy(Upstream.parse(f"http://127.0.0.1:{port}/v1"))
    await proxy.start()
    try:
        yield proxy
    finally:
        await proxy.stop()
        server.close()


def test_a_response_larger_than_every_buffer_reaches_a_slow_client_whole() -> None:
    """The relay holds the upstream back while the client does not read (no unbounded
    buffering, nothing dropped): every byte arrives, in order."""

    async def main() -> tuple[bytes, list[int]]:
        server = await _big_upstream()
        port = server.sockets[0].getsockname()[1]
        proxy = RecordingProxy(Upstream.parse(f"http://127.0.0.1:{port}/v1"))
        await proxy.start()
        try:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(MODELS)
            await asyncio.sleep(0.5)  # not reading: the proxy must stop reading upstream
            # what the proxy holds for this client meanwhile: bounded by the flow control
            buffered = [r.client.get_write_buffer_size() for r in proxy._relays]
            got = await _read_chunked_digest(reader)
            writer.close()
        finally:
            await proxy.stop()
            server.close()
        return got, buffered

    got, buffered = asyncio.run(asyncio.wait_for(main(), 90))
    assert got == _big_digest()
    assert buffered and max(buffered) < BIG // 4


def test_both_legs_send_each_chunk_at_once() -> None:
    """TCP_NODELAY on the client's and the upstream's socket of a relayed connection."""

    async def main() -> list[int]:
        serve = _answering(b"HTTP/1.1 204 No Content\r\n\r\n", until_closed=True)
        async with _proxy_before(serve) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(MODELS)
            assert (await reader.readuntil(b"\r\n\r\n")).startswith(b"HTTP/1.1 204")
            [relay] = proxy._relays
            assert relay.up is not None
            flags = [
                t.get_extra_info("socket").getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY)
                for t in (relay.client, relay.up)
            ]
            writer.close()
        return flags

    assert all(asyncio.run(asyncio.wait_for(main(), 60)))


def _descendants(pid: int) -> dict[int, str]:
    """Live descendants of ``pid`` and their command lines (Linux ``/proc``)."""
    found: dict[int, str] = {}
    todo = [pid]
    while todo:
        p = todo.pop()
        with contextlib.suppress(OSError, ValueError):
            for task in os.listdir(f"/proc/{p}/task"):
                with open(f"/proc/{p}/task/{task}/children") as fh:
                    kids = [int(k) for k in fh.read().split()]
                for kid in kids:
                    with open(f"/proc/{kid}/cmdline", "rb") as fh:
                        found[kid] = fh.read().replace(b"\0", b" ").decode()
                todo.extend(kids)
    return found


def _alive(pid: int) -> bool:
    """Running, not a zombie waiting for whoever it was re-parented to."""
    try:
        with open(f"/proc/{pid}/stat") as fh:
            return fh.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _sched_slice(pid: int) -> int | None:
    with open(f"/proc/{pid}/sched") as fh:
        for line in fh:
            if line.startswith("se.slice"):
                return int(line.split(":")[1])
    return None


def _kernel_takes_a_slice() -> bool:
    got: list[bool] = []
    t = threading.Thread(target=lambda: got.append(request_short_slice()))
    t.start()
    t.join(10)
    return got == [True]


@pytest.mark.skipif(not os.path.exists("/proc/self/sched"), reason="Linux /proc")
def test_record_until_stopped_gives_its_caller_thread_its_slice_back(tmp_path: Path) -> None:
    """Used as a library, the recorder relays with the short slice and leaves the calling
    thread with the slice it had, not with 0.1 ms for whatever it does next."""
    if not _kernel_takes_a_slice():
        pytest.skip(f"this kernel keeps its own slice ({os.uname().release})")
    seen: dict[str, int | None] = {}

    def caller() -> None:
        seen["before"] = thread_slice_ns()
        stop = asyncio.Event()

        def ready(_port: int) -> None:
            seen["relaying"] = thread_slice_ns()
            stop.set()

        asyncio.run(
            record_until_stopped(
                "http://127.0.0.1:9/v1",
                str(tmp_path / "t.jsonl"),
                observer="thread",
                on_ready=ready,
                stop=stop,
            )
        )
        seen["after"] = thread_slice_ns()

    t = threading.Thread(target=caller)
    t.start()
    t.join(60)
    assert seen["relaying"] == SLICE_NS
    assert seen["before"] != SLICE_NS
    assert seen["after"] == seen["before"]


@pytest.mark.skipif(not os.path.exists("/proc/self/sched"), reason="Linux /proc")
def test_the_relays_ask_for_a_short_slice_and_their_helpers_do_not(tmp_path: Path) -> None:
    """The proxy's event loop and the bare relay run with SLICE_NS; the observer's process,
    which reads milliseconds of JSON at a time, keeps the kernel's default."""
    if not _kernel_takes_a_slice():
        pytest.skip(f"this kernel keeps its own slice ({os.uname().release})")
    default = _sched_slice(os.getpid())
    assert default != SLICE_NS
    argvs = [
        [*THIS_PROXY.argv, "--out", str(tmp_path / "t.jsonl")],
        [*BARE_RELAY.argv],
    ]
    for argv in argvs:
        proc = subprocess.Popen(
            [*argv, "--upstream", "http://127.0.0.1:9/v1", "--port", "0"],
            cwd=ROOT,
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            assert proc.stdout.readline().startswith(READY_PREFIX)
            assert _sched_slice(proc.pid) == SLICE_NS, argv
            helpers = _descendants(proc.pid)
            assert all(_sched_slice(k) == default for k in helpers), helpers
            if argv[: len(THIS_PROXY.argv)] == list(THIS_PROXY.argv):
                # the observer's process is among them (besides multiprocessing's tracker)
                assert any("spawn_main" in cmd for cmd in helpers.values()), helpers
        finally:
            proc.terminate()
            proc.communicate(timeout=30)


def test_a_client_that_half_closes_after_its_request_still_gets_the_response() -> None:
    """Request, then shutdown(SHUT_WR) on a fresh connection: the client's end arrives
    before the response, which must still be relayed whole."""

    async def main() -> bytes:
        serve = _answering(b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok", until_closed=False)
        async with _proxy_before(serve) as proxy:
            reader, writer = await asyncio.open_connection("127.0.0.1", proxy.port)
            writer.write(MODELS)
            writer.write_eof()
            got = await reader.read()
            writer.close()
        return got

    assert asyncio.run(asyncio.wait_for(main(), 60)) == (
        b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\nok"
    )
