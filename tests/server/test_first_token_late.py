"""``sim_timing.first_token_late_ms``: how late the server wrote a response's first token.

The real reference server (uvicorn with its arrival-stamping protocols, a loopback socket
on port 0) and raw clients share this test's event loop.  One request per API (Responses
over HTTP and WebSocket, Chat Completions, Messages) is sent at once with a modelled TTFT
of about a second; the test then blocks the event loop — the server's — for a stretch
that starts well before the first tokens are due and ends well after.  No token can be
written while the loop is blocked, so each response's lateness must be at least the block's
end minus its due time (arrival + modelled TTFT, both from the timing log of the same
process, on the same clock), and the client's measured − modelled TTFT at least the
lateness.  A second round, unblocked, shows lateness is not a constant offset.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import httpx
from websockets.asyncio.client import connect

from reference_server.app import ReferenceServer
from reference_server.core.config import ServerConfig
from tests.server.test_protocols import serving

BASE_TTFT_MS = 1000.0
# The block starts once all four hold an engine slot (arrived, none due for ~1 s), not after
# a fixed delay: on a busy machine a WebSocket's upgrade alone can take longer than any delay
# short enough to leave the tokens due inside the block.
ARRIVALS_WITHIN_S = 5.0
BLOCK_S = 1.2  # ends ~0.2 s or more after the last first token is due
HINTS = {"loopbench.output_tokens": "6", "loopbench.reasoning_tokens": "0"}
TAGS = {"http": "lbq-http", "ws": "lbq-ws", "chat": "lbq-chat", "messages": "lbq-msg"}


def _is_first_delta(api: str, event: dict[str, Any]) -> bool:
    if api in ("http", "ws"):
        return str(event.get("type", "")).endswith(".delta")
    if api == "chat":
        choices = event.get("choices") or [{}]
        return bool(choices[0].get("delta", {}).get("content"))
    return event.get("type") == "content_block_delta"


def _sim_timing(api: str, event: dict[str, Any]) -> dict[str, Any] | None:
    if api in ("http", "ws"):
        response = event.get("response")
        return response.get("sim_timing") if isinstance(response, dict) else None
    if api == "chat":
        return event.get("sim_timing")  # the usage chunk's
    return event.get("sim_timing") if event.get("type") == "message_delta" else None


async def one_response(port: int, api: str) -> dict[str, Any]:
    """(sent_ns, first delta read ns, sim_timing) of one streamed response."""
    base = f"http://127.0.0.1:{port}/v1"
    text = f"question {TAGS[api]}"
    first_ns = 0
    timing: dict[str, Any] | None = None
    if api == "ws":
        async with connect(f"ws://127.0.0.1:{port}/v1/responses") as ws:
            body = {"type": "response.create", "model": "sim", "input": text, "metadata": HINTS}
            sent_ns = time.perf_counter_ns()
            await ws.send(json.dumps(body))
            async for raw in ws:
                event = json.loads(raw)
                if not first_ns and _is_first_delta(api, event):
                    first_ns = time.perf_counter_ns()
                timing = timing or _sim_timing(api, event)
                if event["type"] in ("response.completed", "response.failed", "error"):
                    break
        return {"sent_ns": sent_ns, "first_ns": first_ns, "timing": timing}
    path, body = {
        "http": ("/responses", {"input": text, "metadata": HINTS}),
        "chat": ("/chat/completions", {"messages": [{"role": "user", "content": text}]}),
        "messages": ("/messages", {"messages": [{"role": "user", "content": text}]}),
    }[api]
    body = {**body, "model": "sim", "stream": True}
    if api == "chat":
        # sim_timing rides on the usage chunk, which only include_usage asks for
        body["metadata"], body["stream_options"] = HINTS, {"include_usage": True}
    if api == "messages":
        body["max_tokens"] = 6
    async with httpx.AsyncClient(base_url=base, timeout=30) as client:
        sent_ns = time.perf_counter_ns()
        async with client.stream("POST", path, json=body) as resp:
            async for line in resp.aiter_lines():
                if not line.startswith("data: ") or line == "data: [DONE]":
                    continue
                event = json.loads(line[6:])
                if not first_ns and _is_first_delta(api, event):
                    first_ns = time.perf_counter_ns()
                timing = timing or _sim_timing(api, event)
    return {"sent_ns": sent_ns, "first_ns": first_ns, "timing": timing}


async def _all_in_the_engine(server: ReferenceServer, n: int) -> None:
    slots = server.service.sim.capacity
    deadline = time.monotonic() + ARRIVALS_WITHIN_S
    while slots.active < n:
        assert time.monotonic() < deadline, f"{slots.active} of {n} requests reached the engine"
        await asyncio.sleep(0.002)


async def round_of_four(
    server: ReferenceServer, port: int, block: bool
) -> tuple[dict[str, dict[str, Any]], int, int]:
    apis = list(TAGS)
    tasks = [asyncio.ensure_future(one_response(port, api)) for api in apis]
    await _all_in_the_engine(server, len(apis))
    block_start = time.perf_counter_ns()
    if block:
        time.sleep(BLOCK_S)  # the server's event loop too: no token can be written meanwhile
    block_end = time.perf_counter_ns()
    results = await asyncio.gather(*tasks)
    return dict(zip(apis, results, strict=True)), block_start, block_end


def test_lateness_covers_a_blocked_event_loop_for_every_api(tmp_path: Path) -> None:
    log = tmp_path / "timing.jsonl"
    config = ServerConfig(
        store_path=":memory:",
        timing_log=str(log),
        overrides={"engine.base_ttft_ms": str(BASE_TTFT_MS)},
    )
    server = ReferenceServer(config)
    timing_log = server.service.timing_log
    assert timing_log is not None

    async def main() -> list[tuple[dict[str, dict[str, Any]], int, int]]:
        async with serving(server.app, lifespan="on") as port:
            blocked = await round_of_four(server, port, block=True)
            free = await round_of_four(server, port, block=False)
        return [blocked, free]

    (blocked, block_start, block_end), (free, _, _) = asyncio.run(asyncio.wait_for(main(), 60))
    timing_log.close()
    for api, got in blocked.items():
        timing = got["timing"]
        assert timing is not None and got["first_ns"], (api, got)
        late_ms = timing["first_token_late_ms"]
        # When the token was due, on the server's clock: arrival + modelled TTFT (ms).
        arrived_ns = _arrived_perf_ns(log, api, blocked_round=True) - timing_log.offset_ns
        due_ns = arrived_ns + round(timing["ttft"] * 1e6)
        assert got["sent_ns"] <= arrived_ns
        assert block_start < due_ns < block_end, "the block must cover the due time"
        assert late_ms * 1e6 >= block_end - due_ns, (api, late_ms)
        # The client cannot read the token before the server wrote it, nor send after arrival.
        measured_ms = (got["first_ns"] - got["sent_ns"]) / 1e6
        assert measured_ms - timing["ttft"] >= late_ms
        free_late = free[api]["timing"]["first_token_late_ms"]
        assert free_late < late_ms, (api, free_late, late_ms)


def _arrived_perf_ns(log: Path, api: str, *, blocked_round: bool) -> int:
    """The arrival stamp (unix ns) of ``api``'s response in the first or the second round."""
    mine = [
        line for line in map(json.loads, log.read_text().splitlines()) if line["tag"] == TAGS[api]
    ]
    assert len(mine) == 2, mine
    mine.sort(key=lambda line: line["arrived_unix_ns"])
    return int(mine[0 if blocked_round else 1]["arrived_unix_ns"])
