"""WsConnection: a client message that arrives while a token is due is handled after the
token's write (reference_server/timer.py yield_to_due; docs/server.md).

A unit test with a Service, a stand-in for Starlette's WebSocket and no socket: over
WebSocket a finished stream's next response.create arrives exactly when the other
streams' last tokens are due, and its parsing must not make them late.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest

from reference_server.core.config import ServerConfig
from reference_server.service import Service
from reference_server.timer import fine_timer, sleep_until
from reference_server.ws_connection import WsConnection


class _Socket:
    """What WsConnection uses of Starlette's WebSocket: its scope, headers and send."""

    def __init__(self, order: list[str]) -> None:
        self.scope: dict[str, Any] = {"extensions": {}}
        self.headers: dict[str, str] = {}
        self.order = order

    async def send(self, message: dict[str, Any]) -> None:
        self.order.append(orjson.loads(message["text"])["error"]["code"])


@pytest.mark.parametrize("text", ["{not json", '{"type": "response.nothing"}'])
def test_a_message_is_handled_after_the_token_due_first(text: str) -> None:
    order: list[str] = []

    async def main() -> None:
        if fine_timer(asyncio.get_running_loop()) is None:
            pytest.skip("no timerfd here: nothing is ordered")
        conn = WsConnection(
            Service(ServerConfig(store_path=":memory:")), _Socket(order), append_mode=False
        )  # type: ignore[arg-type]

        async def token() -> None:
            await sleep_until(time.perf_counter_ns() + 500_000)
            order.append("token")

        due = asyncio.ensure_future(token())
        await asyncio.sleep(0)
        await conn.on_message({"type": "websocket.receive", "text": text})
        await due

    asyncio.run(asyncio.wait_for(main(), 5))
    assert order[0] == "token" and len(order) == 2, order
