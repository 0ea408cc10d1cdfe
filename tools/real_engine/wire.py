"""The loopback wire of one TCP port, stamped by the kernel: when each request really left the
client and when its response's first bytes came back (docs/real-engine.md, "Where a slow
turn's time goes").

loopbench's TTFT runs from ``sent_ns`` (user space, before the request is handed to the
transport) to the kernel's receive stamp of the first token's read.  What lies between is the
client's own send delay, then vLLM's front end and engine.  An ``AF_PACKET`` socket on ``lo``
(root) sees every segment of the port as the receiving side's kernel does, with the same
receive stamp (``SO_TIMESTAMPNS``), whether or not the capturing process runs at that moment:
:func:`capture` writes one JSON line per segment, :func:`decompose` joins them with a run's
``turns.csv.gz`` rows.  ``python -m tools.real_engine.wire --port P --out F`` runs a capture
beside anything (SIGTERM or SIGINT ends it).
"""

from __future__ import annotations

import ctypes
import json
import re
import signal
import socket
import struct
import sys
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TextIO

from harness.transports.rx_socket import SO_TIMESTAMPNS, RealtimeClock
from harness.wire.exit_codes import ExitCode, UsageParser
from tools.real_engine.compare import rank_quantile
from tools.real_engine.engine_metrics import PREFILL, QUEUE, TTFT, Snapshot

ETH_P_ALL = 0x0003
ETH_P_IP = 0x0800
PACKET_HOST = 0  # the receiving side's copy: stamped as the receiving socket sees it
SO_ATTACH_FILTER = 26
#: how long the capture sleeps once it has read every queued segment (its 64 MiB buffer holds
#: minutes of one window's segments)
DRAIN_S = 0.05
#: the line ``main`` writes to stderr once it captures (what a caller waits for)
READY = "capturing"
SO_RCVBUFFORCE = 33
#: bytes of each frame kept: Ethernet + IPv4 + TCP headers (with options) and the payload's
#: start, enough for the first SSE event of a segment to say whether it carries a token
HEAD = 320
SNAP = 14 + 60 + 60 + HEAD
#: an SSE event that carries output (chat: a non-empty content or a tool call; Responses: an
#: output text delta; Messages: a content block delta): the first one is the turn's TTFT
TOKEN = re.compile(r'"content":"[^"]|"tool_calls":\[|output_text\.delta|content_block_delta')
DATA = "data:"
_TIMESPEC = struct.Struct("@ll")
#: classic BPF: (code, jt, jf, k)
_Insn = tuple[int, int, int, int]
_SKF_AD_PKTTYPE = -0x1000 + 4


def port_filter(port: int, snap: int = SNAP) -> list[_Insn]:
    """A classic BPF program keeping the receiving side's copy of IPv4 TCP segments from or to
    ``port`` (first ``snap`` bytes): the kernel drops everything else, so a busy loopback costs
    the capture nothing."""
    drop, keep = 0, snap
    prog: list[_Insn] = [
        (0x20, 0, 0, _SKF_AD_PKTTYPE & 0xFFFFFFFF),  # ld pkttype
        (0x15, 0, 11, PACKET_HOST),  # not the receiving side's copy: drop
        (0x28, 0, 0, 12),  # ldh ethertype
        (0x15, 0, 9, ETH_P_IP),
        (0x30, 0, 0, 23),  # ldb ip protocol
        (0x15, 0, 7, 6),  # tcp
        (0x28, 0, 0, 20),  # ldh fragment offset
        (0x45, 5, 0, 0x1FFF),  # a fragment: drop
        (0xB1, 0, 0, 14),  # ldx 4*(ip[0]&0xf)
        (0x48, 0, 0, 14),  # ldh src port
        (0x15, 3, 0, port),
        (0x48, 0, 0, 16),  # ldh dst port
        (0x15, 1, 0, port),
        (0x06, 0, 0, drop),
        (0x06, 0, 0, keep),
    ]
    return prog


def _attach(sock: socket.socket, prog: Sequence[_Insn]) -> None:
    raw = b"".join(struct.pack("HBBI", *insn) for insn in prog)
    buf = ctypes.create_string_buffer(raw)
    fprog = struct.pack("HL", len(prog), ctypes.addressof(buf))
    sock.setsockopt(socket.SOL_SOCKET, SO_ATTACH_FILTER, fprog)


@dataclass(frozen=True)
class Segment:
    """One TCP segment of the port as the kernel received it."""

    t_ns: int  # the receive stamp, perf_counter clock
    client: int  # the client's port: the connection
    to_server: bool
    seq: int
    flags: int
    length: int  # payload bytes
    head: str  # the payload's first bytes (latin-1), to tell an HTTP head from data

    @property
    def syn(self) -> bool:
        return bool(self.flags & 0x02)


def parse_frame(frame: bytes, port: int, t_ns: int) -> Segment | None:
    """An Ethernet/IPv4/TCP frame of ``port`` (possibly cut at :data:`SNAP`), else None."""
    if len(frame) < 34 or struct.unpack_from("!H", frame, 12)[0] != ETH_P_IP:
        return None
    ihl = (frame[14] & 0x0F) * 4
    total = struct.unpack_from("!H", frame, 16)[0]
    if frame[23] != 6 or len(frame) < 14 + ihl + 20:
        return None
    tcp = 14 + ihl
    src, dst, seq = struct.unpack_from("!HHI", frame, tcp)
    off = (frame[tcp + 12] >> 4) * 4
    flags = frame[tcp + 13]
    if port not in (src, dst):
        return None
    to_server = dst == port
    payload = frame[tcp + off : tcp + off + HEAD]
    return Segment(
        t_ns,
        src if to_server else dst,
        to_server,
        seq,
        flags,
        total - ihl - off,
        payload.decode("latin-1"),
    )


def to_json(seg: Segment) -> str:
    return json.dumps(seg.__dict__, separators=(",", ":"))


def read_segments(lines: Iterable[str]) -> list[Segment]:
    return [Segment(**json.loads(line)) for line in lines if line.strip()]


def capture(port: int, out: TextIO, stop: Any, iface: str = "lo", ready: Any = lambda: None) -> int:
    """Segments of ``port`` on ``iface`` as JSON lines into ``out`` until ``stop()`` is true
    (checked every :data:`DRAIN_S` when idle); ``ready()`` once the socket listens; returns
    how many."""
    sock = socket.socket(socket.AF_PACKET, socket.SOCK_RAW, socket.htons(ETH_P_ALL))
    try:
        _attach(sock, port_filter(port))
        sock.setsockopt(socket.SOL_SOCKET, SO_TIMESTAMPNS, 1)
        sock.setsockopt(socket.SOL_SOCKET, SO_RCVBUFFORCE, 64 * 1024 * 1024)
        sock.bind((iface, ETH_P_ALL))
        sock.setblocking(False)
        clock = RealtimeClock()
        anc = socket.CMSG_SPACE(_TIMESPEC.size)
        n = 0
        ready()
        while True:
            try:
                frame, ancdata, _, _ = sock.recvmsg(SNAP, anc)
            except BlockingIOError:
                # Told to stop: only once what the socket still holds is written (the window's
                # last turns arrive last and would otherwise be lost).
                if stop():
                    break
                # The kernel stamped every segment as it came: waking per segment would only
                # take CPU from the client and vLLM it watches, so drain in batches.
                time.sleep(DRAIN_S)
                continue
            real = 0
            for level, kind, data in ancdata:
                if level == socket.SOL_SOCKET and kind == SO_TIMESTAMPNS:
                    sec, nsec = _TIMESPEC.unpack(data[: _TIMESPEC.size])
                    real = sec * 1_000_000_000 + nsec
            seg = parse_frame(frame, port, clock.to_perf(real, time.perf_counter_ns()))
            if seg is not None and real:
                out.write(to_json(seg) + "\n")
                n += 1
        return n
    finally:
        sock.close()


@dataclass
class Exchange:
    """One request on a connection and its response, on the wire."""

    client: int
    syn_ns: int = 0  # the connection's SYN, when this is its first request
    out_first_ns: int = 0  # the request's first segment
    out_last_ns: int = 0  # its last
    out_bytes: int = 0
    out_segments: int = 0
    back: list[tuple[int, int]] = field(default_factory=list)  # the response: (t_ns, bytes)
    first_data_ns: int = 0  # the first segment with an SSE event: the first event
    first_token_ns: int = 0  # the first with an output token (:data:`TOKEN`)


def exchanges(segments: Iterable[Segment]) -> list[Exchange]:
    """Requests and their responses per connection: a request is the client's payload after
    the server's (or the connection's start), the response what the server sent next."""
    found: list[Exchange] = []
    open_: dict[int, Exchange] = {}
    syn: dict[int, int] = {}
    for seg in sorted(segments, key=lambda s: s.t_ns):
        if seg.syn and seg.to_server:
            syn[seg.client] = seg.t_ns
            continue
        if seg.length <= 0:
            continue
        ex = open_.get(seg.client)
        if seg.to_server:
            if ex is None or ex.back:
                ex = Exchange(seg.client, syn.pop(seg.client, 0), seg.t_ns)
                open_[seg.client] = ex
                found.append(ex)
            ex.out_last_ns = seg.t_ns
            ex.out_bytes += seg.length
            ex.out_segments += 1
        elif ex is not None:
            ex.back.append((seg.t_ns, seg.length))
            if not ex.first_data_ns and DATA in seg.head:
                ex.first_data_ns = seg.t_ns
            if not ex.first_token_ns and TOKEN.search(seg.head):
                ex.first_token_ns = seg.t_ns
    return found


#: how far a client's kernel stamp may lie from the capture's stamp of the same segment (two
#: clock conversions, each ~0.1 µs; generous)
MATCH_NS = 50_000


@dataclass(frozen=True)
class TurnWire:
    """One turn's TTFT split at the wire (ms): ``send`` (sent_ns -> the request's last segment
    out), ``server`` (that -> the segment with the first token reached the client's kernel),
    ``read`` (that -> loopbench's stamp of the first token: 0 when the client read it as it
    came; a late read returns several segments with the last one's stamp).  ``ttft = send +
    server + read``.  ``head``: request out -> the response's first byte; ``first_event``:
    request out -> its first SSE event."""

    row: int  # index in the turns given
    client: int
    ttft_ms: float
    send_ms: float
    server_ms: float
    read_ms: float
    head_ms: float
    first_event_ms: float
    new_connection: bool
    out_segments: int
    matched: bool  # a captured segment carries the client's stamp of its first token


def _after(t_ns: int, base_ns: int) -> float:
    return round((t_ns - base_ns) / 1e6, 3) if t_ns else -1.0


def decompose(turns: Sequence[Mapping[str, str]], segments: Iterable[Segment]) -> list[TurnWire]:
    """Each turn of ``turns`` (``turns.csv.gz`` rows, kernel-stamped) joined with its exchange:
    the one whose request left after the turn's ``sent_ns`` and whose response holds a segment
    stamped at the turn's first token (else the first request out after ``sent_ns``)."""
    exs = exchanges(segments)
    taken: set[int] = set()
    found: list[TurnWire] = []
    for i, t in enumerate(turns):
        sent, first = int(t.get("sent_ns") or 0), int(t.get("first_token_ns") or 0)
        if sent <= 0 or first <= 0:
            continue
        best: tuple[int, int, int] | None = None  # (no match, out after sent, index)
        for j, ex in enumerate(exs):
            if j in taken or ex.out_last_ns < sent or ex.out_first_ns > first:
                continue
            hit = any(abs(tb - first) <= MATCH_NS for tb, _ in ex.back)
            key = (0 if hit else 1, ex.out_first_ns - sent, j)
            if best is None or key < best:
                best = key
        if best is None:
            continue
        taken.add(best[2])
        ex = exs[best[2]]
        out = ex.out_last_ns
        wire_first = ex.first_token_ns or first
        found.append(
            TurnWire(
                i,
                ex.client,
                _after(first, sent),
                _after(out, sent),
                _after(wire_first, out),
                _after(first, wire_first),
                _after(ex.back[0][0] if ex.back else 0, out),
                _after(ex.first_data_ns, out),
                str(t.get("new_connection", "")).lower() in ("true", "1") or bool(ex.syn_ns),
                ex.out_segments,
                best[0] == 0,
            )
        )
    return found


#: the figures of a turn's split that a window summarizes
PARTS = ("ttft", "send", "server", "read", "head", "first_event")


def _ms(snap: Snapshot, name: str, q: float) -> float | None:
    h = snap.histograms.get(name)
    got = h.quantile(q) if h is not None else None
    return None if got is None else round(got[0] * 1000, 3)


def _outside(turn: TurnWire, vllm_max_ms: float | None) -> float | None:
    if vllm_max_ms is None or turn.head_ms < 0:
        return None
    return round(max(0.0, turn.server_ms - turn.head_ms - vllm_max_ms), 3)


def wire_doc(split: Sequence[TurnWire], engine: Snapshot) -> dict[str, Any]:
    """A window's turns split at the wire, beside vLLM's own figures over the window: its
    TTFT p50/p99/slowest (the slowest: the upper edge of the bucket holding it) and the
    engine core's queue and prefill times (its slowest)."""
    vmax = _ms(engine, TTFT, 1.0)

    def stats(values: Sequence[float]) -> dict[str, float | None]:
        return {
            "p50": rank_quantile(values, 0.5),
            "p99": rank_quantile(values, 0.99),
            "max": max(values, default=None),
        }

    return {
        "turns": len(split),
        "matched": sum(t.matched for t in split),
        **{f"{part}_ms": stats([getattr(t, f"{part}_ms") for t in split]) for part in PARTS},
        "vllm_ms": {
            "ttft_p50": _ms(engine, TTFT, 0.5),
            "ttft_p99": _ms(engine, TTFT, 0.99),
            "ttft_max_at_most": _ms(engine, TTFT, 1.0),
            "queue_max_at_most": _ms(engine, QUEUE, 1.0),
            "prefill_max_at_most": _ms(engine, PREFILL, 1.0),
        },
        # vLLM's arrival_time is taken before it answers with the HTTP head, and no request of
        # the window took longer than its slowest TTFT: what is left of a turn's server time is
        # outside vLLM's histogram (after its output loop got the first token), at least
        "slowest": [
            {**t.__dict__, "outside_vllm_ttft_at_least_ms": _outside(t, vmax)}
            for t in sorted(split, key=lambda t: -t.ttft_ms)[:3]
        ],
        "every": [t.__dict__ for t in split],
    }


def wire_summary(split: Sequence[TurnWire], engine: Snapshot) -> str:
    """The console's line: the slowest turn split, and what vLLM saw at its slowest."""
    if not split:
        return "no turn joined with the capture"
    doc = wire_doc(split, engine)
    slow = doc["slowest"][0]
    vllm = doc["vllm_ms"]
    return (
        f"{doc['matched']}/{len(split)} turns matched; slowest TTFT {slow['ttft_ms']} ms = send "
        f"{slow['send_ms']} + server {slow['server_ms']} + read {slow['read_ms']} (its head "
        f"after {slow['head_ms']}); p99 of TTFT {doc['ttft_ms']['p99']}, send "
        f"{doc['send_ms']['p99']}, server {doc['server_ms']['p99']}, read "
        f"{doc['read_ms']['p99']}; vLLM TTFT p99 {vllm['ttft_p99']}, slowest <= "
        f"{vllm['ttft_max_at_most']} (queue <= {vllm['queue_max_at_most']}, prefill <= "
        f"{vllm['prefill_max_at_most']}) ms; the slowest turn's server time outside vLLM's "
        f"TTFT at least {slow['outside_vllm_ttft_at_least_ms']} ms"
    )


def main(argv: Sequence[str] | None = None) -> int:
    p = UsageParser(
        prog="python -m tools.real_engine.wire",
        description="Capture the loopback segments of one TCP port with the kernel's receive "
        "stamps (perf_counter clock) as JSON lines, until SIGTERM/SIGINT (needs root).",
    )
    p.add_argument("--port", type=int, required=True)
    p.add_argument("--out", type=Path, required=True)
    p.add_argument("--iface", default="lo")
    args = p.parse_args(argv)
    stopped = False

    def stop(*_: object) -> None:
        nonlocal stopped
        stopped = True

    signal.signal(signal.SIGTERM, stop)
    signal.signal(signal.SIGINT, stop)
    try:
        with args.out.open("w", encoding="utf-8") as f:
            n = capture(
                args.port,
                f,
                lambda: stopped,
                args.iface,
                lambda: print(READY, file=sys.stderr, flush=True),
            )
    except PermissionError:
        print("error: an AF_PACKET capture needs root (CAP_NET_RAW)", file=sys.stderr)
        return int(ExitCode.USAGE)
    print(f"{n} segments of port {args.port} in {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
