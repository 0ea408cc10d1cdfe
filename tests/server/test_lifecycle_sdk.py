"""The response lifecycle and background mode, through the official SDK with strict validation.

``client.responses.retrieve`` (also ``stream=True, starting_after=N``), ``delete``,
``input_items.list`` (and its auto-pagination), ``cancel``, and ``background: true``
creates polled and streamed, against real reference servers on port 0
(docs/server.md "Endpoints", "Background mode").  Long generations use the
gpu-legacy engine (65 tokens/s) so a background response is observably in
progress; nothing asserts on how long anything took.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import openai
import pytest
from openai import AsyncOpenAI, OpenAI

from tests.server.conftest import configured_server

TERMINAL = ("completed", "failed", "incomplete", "cancelled")
# A slow engine: an answer of N tokens takes about N / 65 s to decode.
SLOW = ("--engine-profile", "gpu-legacy")


def _client(url: str) -> OpenAI:
    return OpenAI(api_key="sk-test", base_url=url, max_retries=0, _strict_response_validation=True)


@pytest.fixture()
def client(server_url: str) -> Iterator[OpenAI]:
    with _client(server_url) as c:
        yield c


@pytest.fixture(scope="module")
def slow_url() -> Iterator[str]:
    with configured_server(*SLOW, "--max-background", "4") as url:
        yield url


@pytest.fixture()
def slow(slow_url: str) -> Iterator[OpenAI]:
    with _client(slow_url) as c:
        yield c


def _tokens(n: int) -> dict[str, str]:
    return {"loopbench.output_tokens": str(n)}


def _poll(client: OpenAI, rid: str, until: tuple[str, ...], limit_s: float = 60.0) -> list[str]:
    """Statuses seen (each change once) until one in ``until``; bounded so a bug cannot hang."""
    seen: list[str] = []
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        status = client.responses.retrieve(rid).status
        assert status is not None
        if not seen or seen[-1] != status:
            seen.append(status)
        if status in until:
            return seen
        time.sleep(0.02)
    raise AssertionError(f"response {rid} never reached {until}; saw {seen}")


# -- retrieve ----------------------------------------------------------------------------------


def test_retrieve_returns_the_stored_response(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="hello", metadata=_tokens(12))
    got = client.responses.retrieve(created.id)
    assert got.id == created.id and got.status == "completed"
    assert got.output_text == created.output_text and len(got.output_text) == 48
    assert got.usage is not None and got.usage.output_tokens == 12
    assert got.background is False


def test_retrieve_a_streamed_response(client: OpenAI) -> None:
    stream = client.responses.create(model="sim", input="hi", stream=True, metadata=_tokens(8))
    final = [e.response for e in stream if e.type == "response.completed"]
    assert len(final) == 1
    # Stored before the terminal event went out: a retrieve right after it finds it.
    assert client.responses.retrieve(final[0].id).output_text == final[0].output_text


def test_unknown_id_is_404_on_every_route(client: OpenAI) -> None:
    message = "Response with id 'resp_nope' not found."
    calls = [
        lambda: client.responses.retrieve("resp_nope"),
        lambda: client.responses.delete("resp_nope"),
        lambda: client.responses.input_items.list("resp_nope"),
        lambda: client.responses.cancel("resp_nope"),
    ]
    for call in calls:
        with pytest.raises(openai.NotFoundError) as info:
            call()
        assert info.value.body == {
            "message": message,
            "type": "invalid_request_error",
            "param": None,
            "code": None,
        }


def test_store_false_is_not_retrievable(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="x", store=False, metadata=_tokens(2))
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)


# -- delete ------------------------------------------------------------------------------------


def test_delete_then_404(client: OpenAI, server_url: str) -> None:
    created = client.responses.create(model="sim", input="bye", metadata=_tokens(3))
    # The SDK returns None; the body is the API's deleted object.
    raw = httpx.delete(f"{server_url}/responses/{created.id}", timeout=10)
    assert raw.status_code == 200
    assert raw.json() == {"id": created.id, "object": "response", "deleted": True}
    with pytest.raises(openai.NotFoundError):
        client.responses.retrieve(created.id)
    with pytest.raises(openai.NotFoundError):
        client.responses.delete(created.id)
    # Its data is gone: it cannot be continued either.
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="sim", input="more", previous_response_id=created.id)
    assert info.value.code == "previous_response_not_found"


def test_delete_through_the_sdk(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="bye", metadata=_tokens(3))
    assert client.responses.delete(created.id) is None
    with pytest.raises(openai.NotFoundError):
        client.responses.input_items.list(created.id)


# -- input_items -------------------------------------------------------------------------------


def _messages(n: int) -> list[dict[str, str]]:
    return [{"role": "user", "content": f"message {i}"} for i in range(n)]


def test_input_items_pages_in_both_orders(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input=_messages(25), metadata=_tokens(2))  # type: ignore[arg-type]
    first = client.responses.input_items.list(created.id, limit=10, order="asc")
    texts = [item.content[0].text for item in first.data]  # type: ignore[union-attr]
    assert texts == [f"message {i}" for i in range(10)]
    assert first.has_more is True
    assert first.first_id == first.data[0].id and first.last_id == first.data[-1].id
    second = client.responses.input_items.list(
        created.id, limit=10, order="asc", after=first.data[-1].id
    )
    assert [i.content[0].text for i in second.data] == [  # type: ignore[union-attr]
        f"message {i}" for i in range(10, 20)
    ]
    # Auto-pagination walks every page (7 + 7 + 7 + 4).
    every = list(client.responses.input_items.list(created.id, limit=7, order="asc"))
    assert [i.content[0].text for i in every] == [f"message {i}" for i in range(25)]  # type: ignore[union-attr]
    assert len({i.id for i in every}) == 25
    # The default: newest first, 20 a page.
    newest = client.responses.input_items.list(created.id)
    assert len(newest.data) == 20 and newest.has_more is True
    assert newest.data[0].content[0].text == "message 24"  # type: ignore[union-attr]
    last = client.responses.input_items.list(created.id, after=newest.data[-1].id)
    assert [i.content[0].text for i in last.data] == [  # type: ignore[union-attr]
        f"message {i}" for i in range(4, -1, -1)
    ]
    assert last.has_more is False


def test_input_items_of_a_chain_list_its_whole_context(client: OpenAI) -> None:
    first = client.responses.create(model="sim", input="one", metadata=_tokens(2))
    second = client.responses.create(
        model="sim", input="two", previous_response_id=first.id, metadata=_tokens(2)
    )
    items = list(client.responses.input_items.list(second.id, order="asc"))
    kinds = [(i.type, getattr(i, "role", None)) for i in items]
    assert kinds == [("message", "user"), ("message", "assistant"), ("message", "user")]
    assert items[1].id == first.output[0].id  # an output item keeps its id


def test_input_items_function_calls_round_trip(client: OpenAI) -> None:
    call = {"type": "function_call", "call_id": "call_1", "name": "f", "arguments": "{}"}
    out = {"type": "function_call_output", "call_id": "call_1", "output": "42"}
    created = client.responses.create(
        model="sim",
        input=[{"role": "user", "content": "go"}, call, out],  # type: ignore[list-item]
        metadata=_tokens(2),
    )
    items = list(client.responses.input_items.list(created.id, order="asc"))
    assert [i.type for i in items] == ["message", "function_call", "function_call_output"]


def test_input_items_query_is_checked(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="x", metadata=_tokens(2))
    for bad in ({"limit": 0}, {"limit": 101}, {"after": "msg_elsewhere"}):
        with pytest.raises(openai.BadRequestError) as info:
            client.responses.input_items.list(created.id, **bad)  # type: ignore[arg-type]
        assert info.value.param in ("limit", "after")
    with pytest.raises(openai.BadRequestError):
        client.responses.input_items.list(created.id, extra_query={"order": "sideways"})


# -- cancel ------------------------------------------------------------------------------------


def test_cancel_of_a_foreground_response_is_400(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="x", metadata=_tokens(2))
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.cancel(created.id)
    assert info.value.message.endswith("Cannot cancel a synchronous response.")
    assert client.responses.retrieve(created.id).status == "completed"


def test_background_cancel(slow: OpenAI, slow_url: str) -> None:
    created = slow.responses.create(
        model="sim", input="long task", background=True, metadata=_tokens(20_000)
    )
    assert created.status == "queued" and created.background is True
    _poll(slow, created.id, ("in_progress",))
    cancelled = slow.responses.cancel(created.id)
    assert cancelled.status == "cancelled" and cancelled.id == created.id
    # The modelled work stopped: its engine slot is free once cancel has answered.
    health = httpx.get(slow_url.removesuffix("/v1") + "/health", timeout=10).json()
    assert health["engine"] == {"active": 0, "queued": 0}
    assert slow.responses.retrieve(created.id).status == "cancelled"
    # Cancelling again answers the response again (the API's idempotent cancel).
    assert slow.responses.cancel(created.id).status == "cancelled"
    # Its input stays listable; its stream ends without a terminal event.
    assert [i.type for i in slow.responses.input_items.list(created.id)] == ["message"]
    replay = list(slow.responses.retrieve(created.id, stream=True))
    assert [e.type for e in replay[:3]] == [
        "response.created",
        "response.queued",
        "response.in_progress",
    ]
    assert replay[-1].type not in ("response.completed", "response.failed")


def test_cancel_of_a_finished_background_response_is_400(slow: OpenAI) -> None:
    created = slow.responses.create(model="sim", input="x", background=True, metadata=_tokens(3))
    _poll(slow, created.id, TERMINAL)
    with pytest.raises(openai.BadRequestError) as info:
        slow.responses.cancel(created.id)
    assert info.value.message.endswith("Cannot cancel a completed response.")


# -- background mode ---------------------------------------------------------------------------


def test_background_polling_sees_queued_in_progress_completed(slow: OpenAI) -> None:
    created = slow.responses.create(
        model="sim", input="write", background=True, metadata=_tokens(150)
    )
    assert created.status == "queued" and created.output == [] and created.usage is None
    seen = ["queued", *_poll(slow, created.id, TERMINAL)]
    # Each status at most once, in lifecycle order (a poll may miss queued, never go back).
    order = ["queued", "in_progress", "completed"]
    deduped = [s for i, s in enumerate(seen) if i == 0 or seen[i - 1] != s]
    assert deduped == [s for s in order if s in deduped] and deduped[-1] == "completed"
    assert "in_progress" in deduped  # 150 tokens take seconds: a 20 ms poll sees it
    done = slow.responses.retrieve(created.id)
    assert done.usage is not None and done.usage.output_tokens == 150
    assert len(done.output_text) == 600 and done.background is True
    assert [i.type for i in slow.responses.input_items.list(created.id)] == ["message"]


def test_background_requires_store(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="sim", input="x", background=True, store=False)
    assert info.value.param == "background"


def test_streamed_background_resumes_after_a_disconnect(slow: OpenAI) -> None:
    stream = slow.responses.create(
        model="sim", input="story", background=True, stream=True, metadata=_tokens(120)
    )
    first: list[openai.types.responses.ResponseStreamEvent] = []
    for event in stream:
        first.append(event)
        if event.sequence_number >= 12:
            break
    stream.close()  # the client leaves: the background response goes on
    assert first[0].type == "response.created" and first[0].response.status == "queued"
    rid = first[0].response.id
    n = first[-1].sequence_number
    assert [e.sequence_number for e in first] == list(range(n + 1))

    resumed = list(slow.responses.retrieve(rid, stream=True, starting_after=n))
    seqs = [e.sequence_number for e in resumed]
    assert seqs == list(range(n + 1, n + 1 + len(seqs)))  # after N only, no gaps
    assert resumed[-1].type == "response.completed"
    deltas = [e.delta for e in first + resumed if e.type == "response.output_text.delta"]
    final = slow.responses.retrieve(rid)
    assert final.status == "completed" and "".join(deltas) == final.output_text

    # After it ended, the stored events replay the same way, from any point.
    again = list(slow.responses.retrieve(rid, stream=True, starting_after=n))
    assert [e.sequence_number for e in again] == seqs
    whole = list(slow.responses.retrieve(rid, stream=True))
    assert [e.sequence_number for e in whole] == list(range(seqs[-1] + 1))


def test_stream_of_a_foreground_response_is_refused(client: OpenAI) -> None:
    created = client.responses.create(model="sim", input="x", metadata=_tokens(2))
    with pytest.raises(openai.BadRequestError) as info:
        list(client.responses.retrieve(created.id, stream=True))
    assert info.value.param == "stream"


def test_background_cap() -> None:
    with configured_server(*SLOW, "--max-background", "1") as url, _client(url) as c:
        running = c.responses.create(
            model="sim", input="long", background=True, metadata=_tokens(20_000)
        )
        with pytest.raises(openai.RateLimitError) as info:
            c.responses.create(model="sim", input="second", background=True)
        assert info.value.code == "too_many_background_responses"
        assert c.responses.cancel(running.id).status == "cancelled"
        # The slot is free again.
        again = c.responses.create(model="sim", input="x", background=True, metadata=_tokens(2))
        assert again.status == "queued"


# -- the store's bound -------------------------------------------------------------------------


def test_store_cap_prunes_the_oldest() -> None:
    with configured_server("--store-max-responses", "5") as url, _client(url) as c:
        ids = [
            c.responses.create(model="sim", input=f"n{i}", metadata=_tokens(1)).id
            for i in range(12)
        ]
        for rid in ids[:7]:
            with pytest.raises(openai.NotFoundError):
                c.responses.retrieve(rid)
        assert [c.responses.retrieve(rid).id for rid in ids[7:]] == ids[7:]
        with pytest.raises(openai.BadRequestError) as info:
            c.responses.create(model="sim", input="x", previous_response_id=ids[0])
        assert info.value.code == "previous_response_not_found"


def test_async_client_pages_and_resumes(slow_url: str) -> None:
    async def run() -> None:
        async with AsyncOpenAI(
            api_key="k", base_url=slow_url, max_retries=0, _strict_response_validation=True
        ) as client:
            created = await client.responses.create(
                model="sim",
                input=_messages(25),
                background=True,
                metadata=_tokens(30),  # type: ignore[arg-type]
            )
            items = [i async for i in client.responses.input_items.list(created.id, limit=10)]
            assert [i.content[0].text for i in items] == [  # type: ignore[union-attr]
                f"message {i}" for i in range(24, -1, -1)
            ]
            stream = await client.responses.retrieve(created.id, stream=True, starting_after=1)
            events = [e async for e in stream]
            assert events[0].sequence_number == 2 and events[0].type == "response.in_progress"
            assert events[-1].type == "response.completed"

    asyncio.run(run())
