"""The loopback capture's pieces (tools/real_engine/wire.py): a recorded frame parsed, a
recorded exchange joined with its turn, and the kernel filter on a real socket pair."""

from __future__ import annotations

import io
import socket
import threading
import time

import pytest

from tools.real_engine import wire
from tools.real_engine.engine_metrics import TTFT, Histogram, Snapshot

# A request segment as an AF_PACKET socket on lo read it (client port 45630 -> 38445).
REQUEST_FRAME = bytes.fromhex(
    "0000000000000000000000000800450000657ce240004006bfae7f0000017f000001b23e962dc82765fe"
    "e353eb1580180040fe5900000101080a0f7e0ea246d0979a504f5354202f76312f636861742f636f6d70"
    "6c6574696f6e7320485454502f312e310d0a686f73743a20780d0a0d0a7b7d"
)
# The server's SYN-ACK of the same capture: no payload.
SYN_ACK_FRAME = bytes.fromhex(
    "00000000000000000000000008004500003c0000400040063cba7f0000017f000001962db23ee353eb14"
    "c82765fea012ffcbfe3000000204ffd70402080a46d0979a0f7e0ea20103030a"
)


def test_a_recorded_request_frame_is_the_clients_segment_to_the_server() -> None:
    seg = wire.parse_frame(REQUEST_FRAME, 38445, 7)
    assert seg is not None
    assert (seg.client, seg.to_server, seg.length, seg.t_ns) == (45630, True, 49, 7)
    assert seg.head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    back = wire.parse_frame(SYN_ACK_FRAME, 38445, 8)
    assert back is not None and (back.to_server, back.length, back.client) == (False, 0, 45630)
    assert wire.parse_frame(REQUEST_FRAME, 9999, 7) is None  # another port's


def _seg(t: int, to_server: bool, length: int, head: str, client: int = 53620) -> wire.Segment:
    return wire.Segment(t, client, to_server, 0, 24, length, head)


# One Responses turn of a loaded run (results of `--wire`, heads cut): the request left 25 µs
# after sent_ns, the first text delta reached the client's kernel 11.08 ms after the send, and
# loopbench read the whole stream at once at 167.59 ms, its stamp the last segment's.
SENT = 49791347045725
RECORDED = [
    _seg(49791347070863, True, 931, "POST /v1/responses HTTP/1.1\r\nhost: 127.0.0.1:8765"),
    _seg(49791351081935, False, 163, "HTTP/1.1 200 OK\r\ndate: Mon, 07 Dec 2026 19:01:09"),
    _seg(49791351169456, False, 1151, '478\r\nevent: response.created\ndata: {"response":'),
    _seg(49791351210457, False, 1159, '480\r\nevent: response.in_progress\ndata: {"resp'),
    _seg(49791358095826, False, 244, 'ee\r\nevent: response.output_item.added\ndata: {"'),
    _seg(49791358108615, False, 246, "f0\r\nevent: response.content_part.added\ndata: {"),
    _seg(49791358123528, False, 202, 'c4\r\nevent: response.output_text.delta\ndata: {"'),
    _seg(49791514630646, False, 5, "0\r\n\r\n"),
]
ROW = {"sent_ns": str(SENT), "first_token_ns": "49791514630957", "new_connection": "False"}


def test_a_late_read_is_split_from_the_servers_time() -> None:
    (turn,) = wire.decompose([ROW], RECORDED)
    assert turn.matched  # a captured segment carries loopbench's stamp
    assert (turn.send_ms, turn.server_ms, turn.read_ms) == (0.025, 11.053, 156.507)
    assert turn.ttft_ms == pytest.approx(turn.send_ms + turn.server_ms + turn.read_ms, abs=0.002)
    assert (turn.head_ms, turn.first_event_ms) == (4.011, 4.099)
    assert not turn.new_connection and turn.out_segments == 1


def test_each_turn_takes_the_exchange_holding_its_first_token() -> None:
    # two connections whose requests left 0.2 ms apart: the order of the sends does not decide
    ms = 1_000_000
    a = [
        _seg(10 * ms, True, 100, "POST /v1/chat/completions", client=1),
        _seg(30 * ms, False, 200, 'data: {"choices":[{"delta":{"content":"x"}}]}', client=1),
    ]
    b = [
        _seg(10 * ms + 200_000, True, 100, "POST /v1/chat/completions", client=2),
        _seg(
            14 * ms,
            False,
            200,
            'data: {"choices":[{"delta":{"role":"assistant","content":""',
            client=2,
        ),
        _seg(15 * ms, False, 200, 'data: {"choices":[{"delta":{"content":"y"}}]}', client=2),
    ]
    rows = [
        {"sent_ns": str(10 * ms - 50_000), "first_token_ns": str(15 * ms)},
        {"sent_ns": str(10 * ms - 40_000), "first_token_ns": str(30 * ms)},
    ]
    first, second = wire.decompose(rows, a + b)
    assert (first.client, first.server_ms, first.first_event_ms) == (2, 4.8, 3.8)
    assert (second.client, second.server_ms, second.read_ms) == (1, 20.0, 0.0)


def test_the_window_doc_sets_the_split_beside_vllms_slowest_ttft() -> None:
    (turn,) = wire.decompose([ROW], RECORDED)
    hist = Histogram({0.01: 0.0, 0.012: 1.0, float("inf"): 1.0}, 0.0115, 1.0)
    doc = wire.wire_doc([turn], Snapshot({TTFT: hist}))
    assert doc["vllm_ms"]["ttft_max_at_most"] == 12.0
    assert doc["read_ms"]["p99"] == 156.507 and doc["server_ms"]["max"] == 11.053
    assert "read 156.507" in wire.wire_summary([turn], Snapshot({TTFT: hist}))
    # arrival is before the head (4.011 ms), vLLM's TTFT at most 12 ms: 11.053 - 4.011 - 12 < 0
    assert doc["slowest"][0]["outside_vllm_ttft_at_least_ms"] == 0.0
    quick = Histogram({0.002: 0.0, 0.003: 1.0, float("inf"): 1.0}, 0.0025, 1.0)
    doc = wire.wire_doc([turn], Snapshot({TTFT: quick}))
    assert doc["slowest"][0]["outside_vllm_ttft_at_least_ms"] == 4.042  # 11.053 - 4.011 - 3


def _root_or_skip() -> None:
    try:
        probe = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(wire.ETH_P_ALL))
    except PermissionError:
        pytest.skip("an AF_PACKET socket needs root (CAP_NET_RAW)")
    probe.close()


def _captured(linger_s: float) -> tuple[str, int, int]:
    """A capture of one request and answer on a fresh port (another port's traffic beside
    it), told to stop ``linger_s`` after the answer: (its lines, the port, the send's stamp)."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    port = srv.getsockname()[1]
    out, stop, ready = io.StringIO(), threading.Event(), threading.Event()
    th = threading.Thread(target=wire.capture, args=(port, out, stop.is_set, "lo", ready.set))
    th.start()
    try:
        assert ready.wait(5)
        other = socket.socket()  # another port's traffic: filtered out
        other.bind(("127.0.0.1", 0))
        other.listen()
        with socket.create_connection(other.getsockname()) as c2, other.accept()[0] as s2:
            c2.sendall(b"not ours")
            s2.recv(16)
        with socket.create_connection(("127.0.0.1", port)) as c:
            c.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
            s, _ = srv.accept()
            with s:
                sent = time.perf_counter_ns()
                c.sendall(b"POST / HTTP/1.1\r\n\r\n")
                s.recv(64)
                s.sendall(b"HTTP/1.1 200 OK\r\n\r\n")
                c.recv(64)
        time.sleep(linger_s)
    finally:
        stop.set()
        th.join(5)
        srv.close()
        other.close()
    return out.getvalue(), port, sent


def test_the_kernel_filter_keeps_one_copy_of_the_ports_segments() -> None:
    """Over real sockets: only the kernel runs the BPF program and stamps the segments."""
    _root_or_skip()
    lines, port, sent = _captured(0.3)
    segs = wire.read_segments(lines.splitlines())
    data = [g for g in segs if g.length > 0]
    assert [(g.to_server, g.length) for g in data] == [(True, 19), (False, 19)]
    assert all(g.client != port for g in segs) and any(g.syn for g in segs)
    # the request's stamp lies in the send, on the perf_counter clock
    assert 0 <= data[0].t_ns - sent < 50_000_000


def test_segments_still_queued_when_told_to_stop_are_written(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The window's last segments arrive last: a capture asleep between its batches when the
    run ends must still write what the socket holds."""
    _root_or_skip()
    monkeypatch.setattr(wire, "DRAIN_S", 1.0)  # asleep through the exchange and the stop
    lines, _, _ = _captured(0.0)
    data = [g for g in wire.read_segments(lines.splitlines()) if g.length > 0]
    assert [(g.to_server, g.length) for g in data] == [(True, 19), (False, 19)]
