"""The loopback ceiling: bare servers (:mod:`.raw_server`) read by bare clients.

The clients only count messages: no JSON parsing, no timestamps, no records.
What they reach is the most this machine moves through a WebSocket or an SSE
stream on loopback with these libraries, one server process and one client
process, which is what the full pipeline is compared with.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import httpx
import orjson
from websockets.asyncio.client import ClientConnection, connect

from harness.run.event_loop import run_async
from harness.tools.selfbench.procs import child
from harness.tools.selfbench.raw_server import READY_PREFIX


@dataclass(frozen=True, slots=True)
class Rate:
    """``count`` messages (or events) in ``seconds`` over ``streams`` concurrent streams."""

    count: int
    seconds: float
    streams: int

    @property
    def per_s(self) -> float:
        return self.count / self.seconds if self.seconds > 0 else 0.0


async def ws_ceiling(port: int, streams: int, per_stream: int) -> Rate:
    url = f"ws://127.0.0.1:{port}/"
    conns = [
        await connect(url, compression=None, max_size=None, ping_interval=None)
        for _ in range(streams)
    ]
    request = orjson.dumps({"n": per_stream}).decode()

    async def one(conn: ClientConnection) -> int:
        await conn.send(request)
        for _ in range(per_stream):
            await conn.recv()
        return per_stream

    try:
        t0 = time.perf_counter_ns()
        counts = await asyncio.gather(*(one(c) for c in conns))
        t1 = time.perf_counter_ns()
    finally:
        for c in conns:
            await c.close()
    return Rate(sum(counts), (t1 - t0) / 1e9, streams)


async def sse_ceiling(port: int, streams: int, per_stream: int) -> Rate:
    limits = httpx.Limits(max_connections=streams, max_keepalive_connections=streams)
    async with httpx.AsyncClient(
        base_url=f"http://127.0.0.1:{port}", limits=limits, timeout=60.0
    ) as client:

        async def one() -> int:
            seen = 0
            carry = b""
            async with client.stream("GET", f"/?n={per_stream}") as resp:
                async for chunk in resp.aiter_raw():
                    data = carry + chunk
                    seen += data.count(b"\n\n")
                    carry = data[-1:]
            return seen

        # One warm request so connection setup is not in the measured window.
        async with client.stream("GET", "/?n=1") as resp:
            await resp.aread()
        t0 = time.perf_counter_ns()
        counts = await asyncio.gather(*(one() for _ in range(streams)))
        t1 = time.perf_counter_ns()
    return Rate(sum(counts), (t1 - t0) / 1e9, streams)


def measure_raw(kind: str, streams: int, per_stream: int) -> Rate:
    """Start the bare ``kind`` server (``ws`` or ``sse``), stream, stop it."""
    with child(["-m", "harness.tools.selfbench.raw_server", kind], READY_PREFIX) as (_, port_text):
        port = int(port_text)
        if kind == "ws":
            return run_async(ws_ceiling(port, streams, per_stream))
        return run_async(sse_ceiling(port, streams, per_stream))
