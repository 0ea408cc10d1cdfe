"""The throughput step's bare servers, bare readers and pipeline: they run and count right.

Timing verdicts are ``make bench``'s; here every reader must count exactly the
events each server sent (the flood server and the library server), however the
bytes are split into reads.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Iterator

import pytest

from bench.selfbench import lib_server, raw_server
from bench.selfbench.pipeline import drive
from bench.selfbench.procs import child, process_cpu_s
from bench.selfbench.raw import SseReader, WsReader, ceiling, read_streams
from bench.selfbench.raw_server import (
    LIFECYCLE_EVENTS,
    encode_streams,
    json_payload,
    response_events,
    sse_blocks,
)
from harness.run.event_loop import run_async

DELTAS = 300
_SERVERS = {
    "flood": ("bench.selfbench.raw_server", raw_server.READY_PREFIX),
    "library": ("bench.selfbench.lib_server", lib_server.READY_PREFIX),
}


@pytest.fixture(scope="module", params=sorted(_SERVERS))
def ports(request: pytest.FixtureRequest) -> Iterator[dict[str, int]]:
    """Each server in turn: the port its SSE and its WebSocket stream are read on."""
    module, prefix = _SERVERS[request.param]
    with child(["-m", module, "--deltas", str(DELTAS)], prefix, timeout_s=30) as (proc, ready):
        numbers = [int(p) for p in ready.split()]
        # The flood server serves both on one port, the library server on two.
        assert len(numbers) == (1 if request.param == "flood" else 2)
        cpu = process_cpu_s(proc.pid)
        assert cpu is None or cpu >= 0
        yield {"sse": numbers[0], "ws": numbers[-1], "http": numbers[0]}


def test_the_stream_is_a_complete_responses_answer() -> None:
    events = response_events(3)
    types = [e["type"] for e in events]
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[4:7] == ["response.output_text.delta"] * 3
    assert types[7:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    completed = events[-1]["response"]
    assert isinstance(completed, dict)
    assert completed["usage"]["output_tokens"] == 3 and "sim_timing" not in completed
    assert encode_streams(3).events == 3 + LIFECYCLE_EVENTS


def test_both_servers_send_the_same_events() -> None:
    blocks = sse_blocks(4)
    assert len(blocks) == encode_streams(4).events == 4 + LIFECYCLE_EVENTS
    # The library server's WebSocket messages are the flood server's frame payloads.
    for block, frame in zip(blocks, encode_streams(4).ws, strict=True):
        payload = json_payload(block)
        assert frame.endswith(payload) and payload.startswith(b'{"type":')


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["sse", "ws"])
def test_the_bare_reader_counts_exactly_the_events_the_server_sent(
    ports: dict[str, int], kind: str
) -> None:
    sent = encode_streams(DELTAS).events
    counts = run_async(read_streams(kind, ports[kind], 3, sent))
    assert counts == [sent, sent, sent]
    rate = run_async(ceiling(kind, ports[kind], 2, sent))
    assert rate.count == 2 * sent and rate.cpu_s > 0 and rate.per_s > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["http", "ws"])
def test_the_pipeline_reads_the_same_server_and_counts_the_same_events(
    ports: dict[str, int], transport: str
) -> None:
    rate = run_async(drive(f"http://127.0.0.1:{ports[transport]}/v1", transport, 2, DELTAS))
    assert rate.count == 2 * encode_streams(DELTAS).events
    assert rate.cpu_s > 0


class _Sink(asyncio.Transport):
    """Where a reader fed by hand writes (its requests) and closes."""

    def __init__(self) -> None:
        super().__init__()
        self.written: list[bytes] = []
        self.closed = False

    def write(self, data: bytes | bytearray | memoryview) -> None:
        self.written.append(bytes(data))

    def close(self) -> None:
        self.closed = True


@pytest.mark.parametrize("piece", [1, 3, 7, 4096])
def test_the_readers_count_across_any_split_of_the_bytes(piece: int) -> None:
    streams = encode_streams(5)
    sse_body = b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n" + b"".join(streams.sse)
    ws_body = (
        b"HTTP/1.1 101 Switching Protocols\r\n\r\n"
        + b"".join(streams.ws)
        + b"\x88\x02\x03\xe8"  # the server's close frame
    )
    loop = asyncio.new_event_loop()
    try:
        for reader, body in (
            (SseReader(loop.create_future(), "h"), sse_body + b"0\r\n\r\n"),
            (WsReader(loop.create_future(), "h", streams.events), ws_body),
        ):
            sink = _Sink()
            reader.connection_made(sink)
            for i in range(0, len(body), piece):
                reader.data_received(body[i : i + piece])
            assert reader.done.result() == streams.events and sink.closed
    finally:
        loop.close()


@pytest.mark.timeout(60)
def test_the_library_server_sends_each_sse_event_as_its_own_chunk() -> None:
    """One ``http.response.body`` message per event: uvicorn frames each as one chunk."""
    args = ["-m", "bench.selfbench.lib_server", "--deltas", "5"]
    with child(args, lib_server.READY_PREFIX, timeout_s=30) as (_, ready):
        port = int(ready.split()[0])
        with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
            sock.sendall(b"POST /v1/responses HTTP/1.1\r\nhost: x\r\ncontent-length: 2\r\n\r\n{}")
            data = b""
            while not data.endswith(b"\r\n0\r\n\r\n"):
                more = sock.recv(65536)
                assert more, "the library server closed before the last chunk"
                data += more
    head, _, body = data.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200") and b"text/event-stream" in head.lower()
    chunks = []
    while True:
        size_line, _, body = body.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            break
        chunks.append(body[:size])
        body = body[size + 2 :]
    assert chunks == sse_blocks(5)
