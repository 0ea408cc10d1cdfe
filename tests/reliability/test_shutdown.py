"""SIGTERM drains responses in flight (bounded), refuses new work and closes WebSockets with 1001."""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import subprocess
import time
from typing import Any

import httpx
import pytest
import uvicorn
import websockets

from reference_server import protocols
from reference_server.app import ReferenceServer
from reference_server.core.config import ServerConfig
from reference_server.process import bind
from reference_server.protocols import uvicorn_protocols
from reference_server.shutdown import DrainingServer
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


def test_an_upgrade_parked_behind_due_tokens_when_the_drain_begins_is_drained_too(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """An upgrade waits for due tokens before the app sees it (reference_server/timer.py
    yield_to_due).  If the drain lists the open WebSockets during that wait, the connection
    registers afterwards: it must still refuse creates and close with 1001, not accept work
    and be cut with 1012 at the drain timeout.  End to end, in-process: only a real server's
    shutdown lists its connections; the wait is held open by a stand-in for yield_to_due."""
    parked, release = asyncio.Event(), asyncio.Event()

    async def held_wait() -> None:
        parked.set()
        await release.wait()

    monkeypatch.setattr(protocols, "yield_to_due", held_wait)

    async def main() -> tuple[list[str], int | None, float]:
        config = ServerConfig(store_path=":memory:", drain_timeout_s=5.0)
        app = ReferenceServer(config)
        sock = bind("127.0.0.1", 0)
        uv = uvicorn.Config(app.app, log_level="warning", lifespan="on", **uvicorn_protocols())
        server = DrainingServer(uv, app, config.drain_timeout_s)
        serving = asyncio.ensure_future(server.serve(sockets=[sock]))
        while not server.started:
            await asyncio.sleep(0.01)
        url = f"ws://127.0.0.1:{sock.getsockname()[1]}/v1/responses"
        connecting = asyncio.ensure_future(websockets.connect(url, compression=None))
        await asyncio.wait_for(parked.wait(), 10)
        t0 = time.monotonic()
        server.should_exit = True  # what SIGTERM does (uvicorn's handle_exit)
        while server.servers[0].is_serving():  # closed, then the WebSockets listed, at once
            await asyncio.sleep(0.005)
        release.set()
        seen: list[str] = []
        async with await asyncio.wait_for(connecting, 10) as conn:
            with contextlib.suppress(websockets.ConnectionClosed):
                await conn.send(json.dumps({"type": "response.create", **hinted_body(10)}))
                async for raw in conn:
                    event = json.loads(raw)
                    seen.append(event.get("error", {}).get("code") or event["type"])
        await asyncio.wait_for(serving, 30)
        return seen, conn.close_code, time.monotonic() - t0

    seen, code, took_s = asyncio.run(main())
    assert code == 1001, (code, seen)
    # Closed at once (nothing had started), or the create refused first.
    assert seen in ([], ["server_shutting_down"]), seen
    assert took_s < 4.0, took_s  # not held until the drain timeout
