"""SIGTERM drains responses in flight (bounded), refuses new work and closes WebSockets with 1001."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
import time
from typing import Any

import httpx
import pytest
import websockets

from tests.server.conftest import hinted_body
from tools.soak import ServerProcess, server_process


async def _http_stream(url: str, tokens: int, first_delta: asyncio.Event) -> list[str]:
    types: list[str] = []
    async with (
        httpx.AsyncClient(timeout=60) as client,
        client.stream(
            "POST", url + "/responses", json={**hinted_body(tokens), "stream": True}
        ) as resp,
    ):
        try:
            async for line in resp.aiter_lines():
                if line.startswith("data: "):
                    types.append(json.loads(line[6:])["type"])
                    if types[-1].endswith(".delta"):
                        first_delta.set()
        except httpx.HTTPError as exc:
            types.append(f"cut:{type(exc).__name__}")
    return types


async def _ws_stream(
    url: str, tokens: int, first_delta: asyncio.Event, terminated: asyncio.Event
) -> tuple[list[str], int | None, list[str]]:
    """(event types of the response, close code, codes of errors answered after SIGTERM)."""
    types: list[str] = []
    late_errors: list[str] = []
    ws_url = url.replace("http://", "ws://") + "/responses"
    async with websockets.connect(ws_url, compression=None, max_size=None) as conn:
        await conn.send(json.dumps({"type": "response.create", **hinted_body(tokens)}))
        sent_late = False
        try:
            async for raw in conn:
                event = json.loads(raw)
                if event["type"] == "error" and "sequence_number" not in event:
                    late_errors.append(event["error"]["code"])
                    continue
                types.append(event["type"])
                if event["type"].endswith(".delta"):
                    first_delta.set()
                if terminated.is_set() and not sent_late:
                    sent_late = True  # a create after SIGTERM must be refused
                    await conn.send(json.dumps({"type": "response.create", **hinted_body(10)}))
        except websockets.ConnectionClosed:
            pass
        code = conn.close_code
    return types, code, late_errors


async def _scenario(server: ServerProcess, tokens: int) -> dict[str, Any]:
    http_delta, ws_delta, terminated = asyncio.Event(), asyncio.Event(), asyncio.Event()
    http_task = asyncio.ensure_future(_http_stream(server.url, tokens, http_delta))
    ws_task = asyncio.ensure_future(_ws_stream(server.url, tokens, ws_delta, terminated))
    await asyncio.wait_for(asyncio.gather(http_delta.wait(), ws_delta.wait()), 30)
    t0 = time.monotonic()
    server.proc.send_signal(signal.SIGTERM)
    terminated.set()
    http_types, (ws_types, code, late) = await asyncio.wait_for(
        asyncio.gather(http_task, ws_task), 60
    )
    # A new connection is refused once the listener is closed.
    refused = False
    try:
        async with httpx.AsyncClient(timeout=5) as client:
            await client.get(server.health_url)
    except httpx.HTTPError:
        refused = True
    exit_code = await asyncio.to_thread(server.proc.wait, 60)
    return {
        "http": http_types,
        "ws": ws_types,
        "ws_close": code,
        "late_errors": late,
        "refused": refused,
        "exit": exit_code,
        "exit_after_s": time.monotonic() - t0,
    }


def test_sigterm_lets_responses_in_flight_finish_then_closes_websockets_with_1001() -> None:
    # 1,500 tokens at 1,000 TPS: still streaming when the signal arrives.
    with server_process(["--store", ":memory:", "--drain-timeout-s", "20"]) as server:
        out = asyncio.run(_scenario(server, 1500))
        log = "".join(server.stderr)
    assert out["http"][-1] == "response.completed", out["http"][-3:]
    assert out["ws"][-1] == "response.completed", out["ws"][-3:]
    assert out["ws_close"] == 1001
    # Sent mid-stream after the signal: refused whether it arrived before the drain began
    # (queued behind the response) or after.
    assert out["late_errors"] == ["server_shutting_down"], out["late_errors"]
    assert out["refused"]
    # uvicorn re-raises the signal after its graceful shutdown: "terminated by SIGTERM".
    assert out["exit"] in (0, -signal.SIGTERM)
    assert "Traceback" not in log, log


def test_drain_is_bounded_by_the_drain_timeout() -> None:
    # 60,000 tokens would take a minute; the drain timeout cuts them after 0.5 s.
    with server_process(["--store", ":memory:", "--drain-timeout-s", "0.5"]) as server:
        out = asyncio.run(_scenario(server, 60_000))
        log = "".join(server.stderr)
    assert "Traceback" not in log and "drain timeout" in log, log
    assert "response.completed" not in out["http"] and "response.completed" not in out["ws"]
    assert out["ws_close"] == 1001
    assert out["exit"] in (0, -signal.SIGTERM)
    # Generous against a loaded machine, far below the minute the responses needed.
    assert out["exit_after_s"] < 20, out["exit_after_s"]


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_idle_server_exits_cleanly_on_signal(sig: signal.Signals) -> None:
    with server_process(["--store", ":memory:"]) as server:
        server.proc.send_signal(sig)
        try:
            code = server.proc.wait(30)
        except subprocess.TimeoutExpired:
            pytest.fail("server ignored the signal")
    assert code in (0, -sig)
