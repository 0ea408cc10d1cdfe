"""The throughput step's bare server, bare readers and pipeline: they run and count right.

Timing verdicts are ``make bench``'s; here every reader must count exactly the
events the server sent, however the bytes are split into reads.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator

import pytest

from harness.run.event_loop import run_async
from harness.tools.selfbench.pipeline import drive
from harness.tools.selfbench.procs import child
from harness.tools.selfbench.raw import SseReader, WsReader, ceiling, read_streams
from harness.tools.selfbench.raw_server import (
    LIFECYCLE_EVENTS,
    READY_PREFIX,
    encode_streams,
    response_events,
)

DELTAS = 300


@pytest.fixture(scope="module")
def port() -> Iterator[int]:
    args = ["-m", "harness.tools.selfbench.raw_server", "--deltas", str(DELTAS)]
    with child(args, READY_PREFIX, timeout_s=30) as (_, ready):
        yield int(ready)


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


@pytest.mark.timeout(60)
@pytest.mark.parametrize("kind", ["sse", "ws"])
def test_the_bare_reader_counts_exactly_the_events_the_server_sent(port: int, kind: str) -> None:
    sent = encode_streams(DELTAS).events
    counts = run_async(read_streams(kind, port, 3, sent))
    assert counts == [sent, sent, sent]
    rate = run_async(ceiling(kind, port, 2, sent))
    assert rate.count == 2 * sent and rate.cpu_s > 0 and rate.per_s > 0


@pytest.mark.timeout(60)
@pytest.mark.parametrize("transport", ["http", "ws"])
def test_the_pipeline_reads_the_same_server_and_counts_the_same_events(
    port: int, transport: str
) -> None:
    rate = run_async(drive(f"http://127.0.0.1:{port}/v1", transport, 2, DELTAS))
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
