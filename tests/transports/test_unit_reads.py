"""Unit reads switch on before each response's first visible output and off after it, over
real loopback connections: the HTTP keep-alive pool, a WebSocket connection of its own and
WebSocket lanes (docs/metrics.md §1.9).

Each test traces the kernel-stamping transport's reads: whether the read was a unit read, and
whether the turn already had its first visible output when the read began.  A read must be a
unit read exactly when it had not: so the reads up to the one that carried the first output
are unit reads, the later ones full reads, and the next turn on the same connection starts
with unit reads again.  Only real sockets carry the switch:
the transport, the protocol and the turn's reader each hold a part of it.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator

import pytest
from websockets.asyncio.server import ServerConnection, serve

from harness.client.options import TransportOptions
from harness.client.receive import SseFeed
from harness.client.stream import ResponseStream
from harness.transports.rx_socket import RxTransport, kernel_stamps_supported
from harness.transports.ws import WsTransport
from harness.transports.ws_conn import WsConnection
from harness.wire.events import ResponseBuilder
from harness.wire.sse import encode_event
from harness.wire.transports import transport_spec
from harness.workload.agent import TurnInput
from harness.workload.plan import TurnPlan
from harness.workload.records import TurnRecord
from tests.transports.test_h1client import pool as h1_pool

pytestmark = pytest.mark.skipif(
    not kernel_stamps_supported(), reason="kernel receive stamps need Linux (SO_TIMESTAMPNS)"
)

TURNS = 2
DELTAS = 6
#: between two events: each comes in a read of its own
GAP_S = 0.003


class Trace:
    """Per turn, one ``(unit read, first output seen before it)`` per read that took bytes."""

    def __init__(self) -> None:
        self.turns: list[list[tuple[bool, bool]]] = []
        self.stream: ResponseStream | None = None

    def turn(self, stream: ResponseStream) -> None:
        self.stream = stream
        self.turns.append([])

    def seen(self) -> bool:
        return self.stream is not None and bool(self.stream.rec.first_output_ns)

    def read(self, units: bool, seen: bool) -> None:
        if self.stream is not None:
            self.turns[-1].append((units, seen))


@pytest.fixture
def trace(monkeypatch: pytest.MonkeyPatch) -> Iterator[Trace]:
    log = Trace()
    original = RxTransport._read_ready

    def traced(self: RxTransport) -> None:
        units = self.unit_end is not None
        seen = log.seen()
        before = (self.rx_ns, self.rx_user_ns)
        original(self)
        if (self.rx_ns, self.rx_user_ns) != before:  # it took bytes (not EOF, not EAGAIN)
            log.read(units, seen)

    monkeypatch.setattr(RxTransport, "_read_ready", traced)
    yield log


def _assert_switches(trace: Trace) -> None:
    """Unit reads until the first output was read, full reads from then on, every turn."""
    assert len(trace.turns) == TURNS
    for reads in trace.turns:
        assert reads[0] == (True, False), reads
        assert all(units != seen for units, seen in reads), str(reads)
        # the later deltas come GAP_S apart: some in reads of their own, however busy the
        # machine is
        assert any(seen for _, seen in reads), reads


def _events(rid: str) -> list[dict[str, object]]:
    b = ResponseBuilder(rid, model="sim", created_at=1, request={})
    events = b.start() + b.begin_message() + [b.text_delta(f" w{i}") for i in range(DELTAS)]
    usage = {"input_tokens": 1, "output_tokens": DELTAS, "total_tokens": DELTAS + 1}
    return [*events, *b.end_message(), b.complete(usage)]


# -- HTTP: the keep-alive pool ---------------------------------------------------------------


async def _http_server() -> tuple[asyncio.Server, int]:
    """Answers every request on a connection with an event stream, one chunk at a time."""

    async def on_conn(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            for n in range(TURNS):
                await reader.readuntil(b"\r\n\r\n")  # the requests carry no body
                writer.write(b"HTTP/1.1 200 OK\r\ntransfer-encoding: chunked\r\n\r\n")
                for event in _events(f"resp_{n}"):
                    await asyncio.sleep(GAP_S)
                    data = encode_event(event)
                    writer.write(b"%x\r\n%s\r\n" % (len(data), data))
                writer.write(b"0\r\n\r\n")
            await reader.read()
        except (asyncio.IncompleteReadError, ConnectionError):
            pass
        finally:
            writer.close()

    server = await asyncio.start_server(on_conn, "127.0.0.1", 0)
    return server, server.sockets[0].getsockname()[1]


@pytest.mark.parametrize("rx_stamp", ["kernel", "user"])
def test_the_http_pool_reads_units_until_each_responses_first_output(
    trace: Trace, rx_stamp: str
) -> None:
    """Two requests on one keep-alive connection; with ``rx_stamp="user"`` the loop's own
    transport reads (no RxTransport, nothing traced)."""

    async def main() -> list[bool]:
        server, port = await _http_server()
        pool = h1_pool(port, rx_stamp=rx_stamp)
        stamped: list[bool] = []
        async with server, asyncio.timeout(20):
            for _ in range(TURNS):
                stream = ResponseStream(time.perf_counter_ns())
                trace.turn(stream)
                await pool.request("POST", "/responses", [], b"", SseFeed(stream).feed, stream)
                assert stream.status == "completed"
                conns = [*pool._idle]
                assert len(conns) == 1
                stamped.append(isinstance(conns[0].transport, RxTransport))
            await pool.aclose()
        return stamped

    stamped = asyncio.run(main())
    if rx_stamp == "user":
        assert stamped == [False] * TURNS and not any(trace.turns)
        return
    assert stamped == [True] * TURNS
    _assert_switches(trace)


# -- WebSocket: a connection of its own, and lanes -----------------------------------------


async def _ws_handler(conn: ServerConnection) -> None:
    """Answers each ``response.create`` with a response, one frame at a time."""
    n = 0
    async for _ in conn:
        for event in _events(f"resp_{n}"):
            await asyncio.sleep(GAP_S)
            await conn.send(json.dumps(event))
        n += 1


def _turn_input() -> TurnInput:
    user = {"type": "message", "role": "user", "content": "go"}
    return TurnInput(
        turn=TurnPlan(index=0, tool_calls=0, output_tokens=DELTAS),
        history=[user],
        new_items=[user],
        instructions="You are a coding agent.",
        tools=[],
        tool_choice="auto",
        metadata={},
        max_output_tokens=100,
        model="m",
    )


@pytest.mark.parametrize("subagents", ["connection", "lanes"])
def test_a_websocket_reads_units_until_each_responses_first_output(
    trace: Trace, subagents: str
) -> None:
    """Two turns of one conversation: ``connection`` reads them with
    ``WsConnection.read_into``, ``lanes`` through the lane reader's ``recv`` and the lane's
    queue, where the reads once kept unit reads on for every event of the stream."""

    async def main() -> None:
        async with serve(_ws_handler, "127.0.0.1", 0, compression=None) as server:
            port = server.sockets[0].getsockname()[1]
            options = TransportOptions(
                base_url=f"http://127.0.0.1:{port}/v1", rx_stamp="kernel", ws_subagents=subagents
            )
            transport = WsTransport(transport_spec("ws"), options)
            session = await transport.session()
            read_turn = session._receive

            async def receive(conn: WsConnection, stream: ResponseStream, timeout_s: float) -> None:
                trace.turn(stream)  # after the send: no byte of the answer is read yet
                await read_turn(conn, stream, timeout_s)

            session._receive = receive  # type: ignore[method-assign]
            async with asyncio.timeout(20):
                for _ in range(TURNS):
                    stream = await session.turn(_turn_input(), TurnRecord("ws", 0, 0))
                    assert stream.status == "completed"
                await session.close()
            await transport.aclose()

    asyncio.run(main())
    _assert_switches(trace)
