"""WebSocket work that no deadline waits for — a client message that arrives while a token
is due, a finished response's tail — runs after the token's write (reference_server/timer.py yield_to_due; docs/server.md).

A unit test with a Service, a stand-in for Starlette's WebSocket and no socket: over
WebSocket a finished stream's next response.create arrives exactly when the other
streams' last tokens are due, and its parsing must not make them late.
"""

from __future__ import annotations

import asyncio
import time
from random import Random
from typing import Any

import orjson
import pytest

from reference_server import ws_connection
from reference_server.core.api_tier import RequestCost
from reference_server.core.config import ServerConfig
from reference_server.core.conversation import Conversation
from reference_server.core.output import OutputCursor, OutputPlan
from reference_server.core.validation import parse_create
from reference_server.protocols import ARRIVED_KEY
from reference_server.service import Job, Segment, Service
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
        socket: Any = _Socket(order)
        conn = WsConnection(Service(ServerConfig(store_path=":memory:")), socket, append_mode=False)

        async def token() -> None:
            await sleep_until(time.perf_counter_ns() + 500_000)
            order.append("token")

        due = asyncio.ensure_future(token())
        await asyncio.sleep(0)
        await conn.on_message({"type": "websocket.receive", "text": text})
        await due

    asyncio.run(asyncio.wait_for(main(), 5))
    assert order[0] == "token" and len(order) == 2, order


def test_a_websocket_responses_tail_waits_for_the_token_due_first() -> None:
    """A response's last token is written; another stream's token is due 0.3 ms later.
    Storing the response and its terminal event (no deadline waits for them) come after
    that token: streams in step finish together, and each tail ran ahead of the others'."""
    order: list[str] = []

    async def main() -> None:
        if fine_timer(asyncio.get_running_loop()) is None:
            pytest.skip("no timerfd here: nothing is ordered")
        service = Service(ServerConfig(store_path=":memory:"))
        req = parse_create({"model": "m", "input": "hi", "store": False}, websocket=True)
        # a new WebSocket connection's first create (new_connection, websocket)
        cost = RequestCost(
            True, True, connection_resolved=False, processed_tokens=1, rehydrated_tokens=0
        )
        job = Job(req, Conversation.build(req.instructions, [], req.input_items), cost, Random(1))
        await service.admit(job)
        job.on_output = lambda conv: order.append("stored")

        async def segment(*args: Any, **kwargs: Any) -> Segment:
            builder = job.builder
            cursor = OutputCursor(builder, OutputPlan((), 2, truncated=False), Random(1))
            other = asyncio.ensure_future(token())
            await asyncio.sleep(0)  # the other stream sleeps until its token is due
            self_done.append(other)
            return Segment(2, 0, 1, 0, False, 1.0, {"decode": 1.0}, 0, cursor, None, None)

        async def token() -> None:
            await sleep_until(time.perf_counter_ns() + 300_000)
            order.append("token")

        async def send(events: Any) -> None:
            order.extend(e["type"] for e in events if e["type"] == "response.completed")

        self_done: list[asyncio.Future[None]] = []
        service.run_segment = segment  # type: ignore[method-assign]
        await service.generate(job, send)
        await asyncio.gather(*self_done)

    asyncio.run(asyncio.wait_for(main(), 5))
    assert order == ["token", "stored", "response.completed"]


class _EventSocket(_Socket):
    """Records the type of every event sent."""

    async def send(self, message: dict[str, Any]) -> None:
        self.order.append(orjson.loads(message["text"])["type"])


def test_a_create_waits_for_due_tokens_once_from_its_arrival(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Two creates on one lane: the first starts at once and waits only when its message is
    parsed (each wait has its own 4 ms cap, so two would add up to 8 ms inside its API-tier
    time); the second waits behind the first, so it waits again when it starts.  Three
    waits, not four."""
    waits: list[int] = []
    order: list[str] = []

    async def counted() -> None:
        waits.append(1)

    monkeypatch.setattr(ws_connection, "yield_to_due", counted)

    async def main() -> None:
        socket: Any = _EventSocket(order)
        conn = WsConnection(Service(ServerConfig(store_path=":memory:")), socket, append_mode=False)
        create = orjson.dumps({"type": "response.create", "model": "m", "input": "hi"}).decode()
        for _ in range(2):
            stamp = time.perf_counter_ns()
            await conn.on_message({"type": "websocket.receive", "text": create, ARRIVED_KEY: stamp})
        await asyncio.gather(*conn.workers.values())

    asyncio.run(asyncio.wait_for(main(), 10))
    assert order.count("response.completed") == 2, order
    assert len(waits) == 3
