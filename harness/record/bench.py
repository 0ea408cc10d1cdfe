"""``loopbench record --bench N``: the latency the recording proxy adds to a turn, paired.

The proxy runs as its own process (``loopbench record``, as an agent would meet it); one
client connection goes to the upstream directly and one through the proxy, both kept
alive.  Each pair sends the same streaming Responses request both ways, in alternating
order, and compares the time to the first output delta (TTFT) and to the end of the
stream.  The numbers are the differences within pairs (proxied − direct), so the
upstream's own variation cancels out as far as it can.

``streams`` runs that many such paired streams at once (each its own three connections),
so that one stream's exchange being observed overlaps the others' relaying; ``history``
makes each request carry that many earlier messages of ~100 tokens (a long conversation's
request, which is what costs the observer time).
"""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass

import orjson

from harness.client.h1 import ResponseParser
from harness.record.proxy import Upstream

__all__ = ["BenchResult", "run_bench"]

_MARK = b"response.output_text.delta"


@dataclass(frozen=True, slots=True)
class BenchResult:
    pairs: int
    streams: int
    history: int
    direct_ttft_ms: tuple[float, float]
    proxied_ttft_ms: tuple[float, float]
    #: p50, p99 of proxied − direct, per pair
    added_ttft_ms: tuple[float, float]
    added_total_ms: tuple[float, float]
    #: p50, p99 of direct − direct (a second direct connection): the noise floor of a pair
    control_ttft_ms: tuple[float, float]

    def lines(self) -> list[str]:
        def two(name: str, v: tuple[float, float]) -> str:
            return f"  {name:<24} p50 {v[0]:8.3f} ms   p99 {v[1]:8.3f} ms"

        return [
            f"loopbench record --bench: {self.pairs} paired turns (direct vs through the proxy), "
            f"{self.streams} concurrent stream(s), {self.history} history messages per request",
            two("TTFT direct", self.direct_ttft_ms),
            two("TTFT proxied", self.proxied_ttft_ms),
            two("added TTFT (paired)", self.added_ttft_ms),
            two("added turn time (paired)", self.added_total_ms),
            two("control: direct − direct", self.control_ttft_ms),
        ]


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))]


class _Conn:
    def __init__(self, up: Upstream) -> None:
        self.up = up
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None

    async def turn(self, request: bytes) -> tuple[int, int]:
        """(TTFT, whole turn) in ns for one streamed request."""
        if self.writer is None:
            self.reader, self.writer = await asyncio.open_connection(self.up.host, self.up.port)
        assert self.reader is not None
        parser = ResponseParser()
        t0 = time.perf_counter_ns()
        self.writer.write(request)
        first = 0
        while not parser.complete:
            data = await self.reader.read(262144)
            if not data:
                raise ConnectionError("the server closed the connection mid-response")
            if not first and _MARK in data:
                first = time.perf_counter_ns()
            parser.feed(data)
        if parser.status != 200:
            raise ConnectionError(f"the server answered {parser.status} to the bench request")
        return first - t0, time.perf_counter_ns() - t0

    def close(self) -> None:
        if self.writer is not None:
            self.writer.close()


async def _pairs(
    direct: Upstream, proxied: Upstream, n: int, streams: int = 1, history: int = 0
) -> list[tuple[int, int, int, int, int]]:
    per = max(1, n // max(1, streams))
    runs = [_stream(direct, proxied, per, history) for _ in range(max(1, streams))]
    return [row for rows in await asyncio.gather(*runs) for row in rows]


async def _stream(
    direct: Upstream, proxied: Upstream, n: int, history: int
) -> list[tuple[int, int, int, int, int]]:
    earlier = [
        {"role": "user" if i % 2 == 0 else "assistant", "content": f"message {i} " + "w" * 400}
        for i in range(history)
    ]
    body = orjson.dumps(
        {
            "model": "sim",
            "input": [*earlier, {"role": "user", "content": "benchmark turn"}],
            "stream": True,
            "tool_choice": "none",
            "store": False,
            "metadata": {"loopbench.output_tokens": "50"},
        }
    )
    a, b, c = _Conn(direct), _Conn(proxied), _Conn(direct)

    def request(up: Upstream) -> bytes:
        return (
            f"POST {up.base_path}/responses HTTP/1.1\r\nhost: {up.host_header}\r\n"
            "authorization: Bearer sk-loopbench\r\ncontent-type: application/json\r\n"
            f"content-length: {len(body)}\r\n\r\n"
        ).encode() + body

    ra, rb = request(direct), request(proxied)
    out = []
    try:
        for _ in range(min(20, n)):  # warm the connections and the server
            await a.turn(ra)
            await b.turn(rb)
            await c.turn(ra)
        for i in range(n):
            # rotate the order so that no side always goes first
            k = i % 3
            got = {}
            for j in (k, (k + 1) % 3, (k + 2) % 3):
                got[j] = await (a, b, c)[j].turn(rb if j == 1 else ra)
            pa, pb, pc = got[0], got[1], got[2]
            out.append((pa[0], pb[0], pa[1], pb[1], pc[0]))
    finally:
        a.close()
        b.close()
        c.close()
    return out


def run_bench(upstream_url: str, pairs: int, streams: int = 1, history: int = 0) -> BenchResult:
    """Start ``loopbench record`` against ``upstream_url`` and measure ``pairs`` paired turns
    (over ``streams`` concurrent paired streams)."""
    direct = Upstream.parse(upstream_url)
    with tempfile.TemporaryDirectory(prefix="loopbench-record-bench-") as tmp:
        proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "harness",
                "record",
                "--upstream",
                upstream_url,
                "--port",
                "0",
                "--out",
                os.path.join(tmp, "bench.jsonl"),
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline()
            if not line.startswith("loopbench record listening on "):
                raise RuntimeError("loopbench record did not start (no listening line)")
            proxied = Upstream.parse(line.split()[4])
            rows = asyncio.run(_pairs(direct, proxied, pairs, streams, history))
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
    ms = 1e6
    added = [(pb - pa) / ms for pa, pb, _, _, _ in rows]
    added_total = [(tb - ta) / ms for _, _, ta, tb, _ in rows]
    control = [(pc - pa) / ms for pa, _, _, _, pc in rows]
    direct_ttft = [pa / ms for pa, _, _, _, _ in rows]
    proxied_ttft = [pb / ms for _, pb, _, _, _ in rows]
    return BenchResult(
        pairs=len(rows),
        streams=streams,
        history=history,
        direct_ttft_ms=(_pct(direct_ttft, 0.5), _pct(direct_ttft, 0.99)),
        proxied_ttft_ms=(_pct(proxied_ttft, 0.5), _pct(proxied_ttft, 0.99)),
        added_ttft_ms=(_pct(added, 0.5), _pct(added, 0.99)),
        added_total_ms=(_pct(added_total, 0.5), _pct(added_total, 0.99)),
        control_ttft_ms=(_pct(control, 0.5), _pct(control, 0.99)),
    )
