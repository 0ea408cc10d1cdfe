"""What the lifecycle keeps: the store's bound, response objects, a background run's events.

The store's cap prunes the oldest rows in batches (not per write) and at startup;
a background run's event log drops its oldest frames beyond its byte budget and
says so to a reader; a background response still running at shutdown is stored
as failed; a WebSocket ``store: true`` response is retrievable over HTTP.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import openai
import pytest
import websockets
from openai import OpenAI

from reference_server.background import EventGap, EventLog
from reference_server.core.lifecycle import (
    ListQuery,
    can_move,
    cancel_refusal,
    input_item_views,
    page,
)
from reference_server.store import SqliteStore
from tests.server.conftest import configured_server, ws_url


def _msg(text: str) -> dict[str, str]:
    return {"type": "message", "role": "user", "content": text}


# -- the store's cap ---------------------------------------------------------------------------


def test_cap_prunes_the_oldest_in_batches(tmp_path: Path) -> None:
    async def run() -> None:
        # A cap of 1000 prunes 10 rows at a time: the store may hold up to 1009 between prunings.
        store = SqliteStore(tmp_path / "s.sqlite3", max_responses=1000)
        for i in range(1009):
            store.put(f"r{i}", None, [_msg(str(i))], 0)
        assert await store.count() == 1009
        store.put("r1009", None, [_msg("last")], 0)
        assert await store.count() == 1000
        assert await store.get("r9") is None and await store.get("r10") is not None
        assert await store.get("r1009") is not None
        await store.close()

    asyncio.run(run())


def test_cap_applies_to_objects_and_at_startup(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite3"

    async def write() -> None:
        store = SqliteStore(path, max_responses=3)
        for i in range(6):
            response = {"id": f"r{i}", "status": "completed", "output": []}
            store.put(f"r{i}", None, [_msg(str(i))], 0)
            store.put_object(f"r{i}", response, background=False, n_output=0)
        # Updating an object is not a new row.
        store.put_object(
            "r5", {"id": "r5", "status": "x", "output": []}, background=True, n_output=0
        )
        assert await store.count() == 3
        assert await store.get_object("r2") is None
        got = await store.get_object("r5")
        assert got is not None and got.response["status"] == "x" and got.background
        await store.close()

    async def reopen() -> None:
        store = SqliteStore(path, max_responses=2)  # a smaller cap prunes when the store opens
        assert await store.count() == 2
        assert await store.get_object("r3") is None and await store.get_object("r4") is not None
        assert await store.delete("r4") is True
        assert await store.delete("r4") is False
        assert await store.count() == 1
        await store.close()

    asyncio.run(write())
    asyncio.run(reopen())


def test_events_are_stored_compressed_and_come_back(tmp_path: Path) -> None:
    async def run() -> None:
        store = SqliteStore(":memory:")
        log = EventLog()
        for i in range(500):
            log.append(f"data: {json.dumps({'sequence_number': i, 'pad': 'x' * 100})}\n\n".encode())
        packed = log.pack()
        store.put_object("r", {"id": "r", "status": "completed", "output": []},
                         background=True, n_output=0, events=packed)  # fmt: skip
        assert await store.events("r") == packed
        back = EventLog.unpack(packed)
        assert back.frames == log.frames and back.first == 0
        assert await store.events("nope") is None
        await store.close()

    asyncio.run(run())


# -- a background run's event log --------------------------------------------------------------


def test_event_log_drops_the_oldest_beyond_its_budget() -> None:
    log = EventLog(budget=1000)
    for i in range(100):
        log.append(b"%03d" % i + b"x" * 47)  # 50 bytes each
    assert log.size <= 1000 and log.next_seq == 100
    assert log.after(98) == [log.frames[-1]]
    with pytest.raises(EventGap) as info:
        log.after(0)
    assert info.value.first_kept == log.first > 0
    assert log.after(log.first - 1)[0].startswith(b"%03d" % log.first)
    back = EventLog.unpack(log.pack())
    assert back.first == log.first and back.frames == log.frames


# -- pure decisions ----------------------------------------------------------------------------


def test_status_transitions() -> None:
    assert can_move("queued", "in_progress") and can_move("in_progress", "completed")
    assert can_move("queued", "cancelled") and can_move("in_progress", "cancelled")
    assert not can_move("completed", "cancelled") and not can_move("in_progress", "queued")
    assert not can_move("queued", "completed")


def test_cancel_refusals() -> None:
    refused = cancel_refusal(False, "completed")
    assert refused is not None and refused.status == 400
    assert refused.message == "Cannot cancel a synchronous response."
    assert cancel_refusal(True, "in_progress") is None and cancel_refusal(True, "queued") is None
    assert cancel_refusal(True, "cancelled") is None  # idempotent
    failed = cancel_refusal(True, "failed")
    assert failed is not None and failed.message == "Cannot cancel a failed response."


def test_page_cursor_and_views() -> None:
    views = input_item_views([_msg(str(i)) for i in range(5)], "resp_abc")
    assert len({v["id"] for v in views}) == 5
    assert views[0]["content"] == [{"type": "input_text", "text": "0"}]
    first = page(views, ListQuery(limit=2, order="desc"))
    assert [d["content"][0]["text"] for d in first["data"]] == ["4", "3"] and first["has_more"]
    rest = page(views, ListQuery(limit=10, order="desc", after=first["last_id"]))
    assert [d["content"][0]["text"] for d in rest["data"]] == ["2", "1", "0"]
    assert rest["has_more"] is False
    # The same item sent twice still gets distinct ids: every cursor names one place.
    twice = {"type": "message", "role": "user", "content": "x", "id": "msg_same"}
    ids = [v["id"] for v in input_item_views([twice, twice], "resp_abc")]
    assert ids[0] == "msg_same" and len(set(ids)) == 2
    empty = page([], ListQuery())
    assert empty["data"] == [] and empty["first_id"] is None and empty["has_more"] is False


# -- servers -----------------------------------------------------------------------------------


def test_background_response_cut_by_shutdown_is_stored_failed(tmp_path: Path) -> None:
    store = str(tmp_path / "responses.sqlite3")
    slow = ("--engine-profile", "gpu-legacy", "--drain-timeout-s", "0.2")
    with (
        configured_server(*slow, store=store) as url,
        OpenAI(api_key="k", base_url=url, max_retries=0) as client,
    ):
        created = client.responses.create(
            model="sim",
            input="long",
            background=True,
            metadata={"loopbench.output_tokens": "20000"},
        )
    # Leaving the block sent SIGTERM: the drain ran out and the run was cut and stored.
    with (
        configured_server(store=store) as url,
        OpenAI(api_key="k", base_url=url, max_retries=0, _strict_response_validation=True) as c,
    ):
        cut = c.responses.retrieve(created.id)
        assert cut.status == "failed" and cut.error is not None
        assert "shut down" in cut.error.message
        assert [i.type for i in c.responses.input_items.list(created.id)] == ["message"]
        with pytest.raises(openai.BadRequestError):
            c.responses.cancel(created.id)  # it ended: too late to cancel


def test_websocket_store_true_response_is_retrievable(server_url: str) -> None:
    async def create() -> dict[str, object]:
        async with websockets.connect(ws_url(server_url)) as ws:
            body = {
                "type": "response.create",
                "model": "sim",
                "input": "over ws",
                "metadata": {"loopbench.output_tokens": "5"},
            }
            await ws.send(json.dumps(body))
            while True:
                event = json.loads(await ws.recv())
                if event["type"] == "response.completed":
                    response: dict[str, object] = event["response"]
                    return response

    done = asyncio.run(create())
    with OpenAI(
        api_key="k", base_url=server_url, max_retries=0, _strict_response_validation=True
    ) as client:
        got = client.responses.retrieve(str(done["id"]))
        assert got.status == "completed" and got.output[0].id == done["output"][0]["id"]  # type: ignore[index]
