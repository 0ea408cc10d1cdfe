"""A WebSocket handshake refused before the ``101`` is in the access log and ``/metrics``.

A client with a wrong key sees only an HTTP status and may fall back to HTTP (Codex CLI
tries three times, then posts): without these the server's own records showed nothing
of the refused attempts.  A real server (``--access-log``, one API key) and the
``websockets`` client, whose handshake is refused with a 401.
"""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest
from websockets.asyncio.client import connect
from websockets.exceptions import InvalidStatus

from harness.run.embedded import server_child
from tests.server.conftest import ws_url
from tests.server.test_metrics_endpoint import errors, scrape, value


def test_a_refused_handshake_is_logged_and_counted_with_its_status() -> None:
    args = ["--host", "127.0.0.1", "--port", "0", "--store", ":memory:", "--access-log"]
    with server_child([*args, "--api-key", "right-key"]) as child:
        base = child.ready

        async def refused() -> int:
            with pytest.raises(InvalidStatus) as caught:
                async with connect(
                    ws_url(base), additional_headers={"authorization": "Bearer wrong-key"}
                ):
                    pass
            return caught.value.response.status_code

        for _ in range(3):
            assert asyncio.run(refused()) == 401
        metrics = scrape(base)
        refused_total = "loopbench_server_websocket_handshakes_refused_total"
        assert value(metrics, refused_total, status="401") == 3
        assert errors(metrics, "websocket", "401", "invalid_api_key") == 3
        assert value(metrics, "loopbench_server_websocket_connections_opened_total") == 0
        # The log line is written as the refusal is sent: wait (bounded) for the child's stderr.
        deadline = time.monotonic() + 10
        while True:
            lines = [ln for ln in child.stderr if "WS /v1/responses handshake 401" in ln]
            if len(lines) == 3 or time.monotonic() > deadline:
                break
            time.sleep(0.05)
        assert len(lines) == 3, child.stderr
        assert all(" ms client=127.0.0.1:" in ln for ln in lines)
        assert httpx.get(base.removesuffix("/v1") + "/health", timeout=10).status_code == 200
