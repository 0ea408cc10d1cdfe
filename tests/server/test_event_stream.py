"""reference_server/event_stream.py: SSE straight to ASGI send, and generation cancelled on disconnect.

The pure helpers are tested with fake ``receive``/``send``; the server tests run one
reference server (``--sse-done``, no engine bursts: 20,000 tokens take ~20 s) and
watch ``/health``'s ``engine.active`` to see a generation stop when its client leaves.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterator, Sequence
from typing import Any

import httpx
import orjson
import pytest
from starlette.responses import Response

from harness.wire.sse import SSEDecoder, encode_event
from reference_server.event_stream import EventStream, unless_gone, until_disconnect
from reference_server.fault_send import CutAnswer, InjectedDisconnect
from tests.server.conftest import configured_server, post_and_leave

LONG_TOKENS = "20000"  # ~20 s at 1,000 TPS: far longer than any wait below


@pytest.fixture(scope="module")
def sse_server() -> Iterator[str]:
    with configured_server("--sse-done", "--set", "engine.burst_probability=0") as url:
        yield url


def run(coro: Awaitable[Any]) -> Any:
    async def bounded() -> Any:
        return await asyncio.wait_for(coro, 10)

    return asyncio.run(bounded())


def run_leaving_no_task(main: Callable[[], Awaitable[None]]) -> None:
    """Run ``main`` and check that every task it started has ended when it returns."""

    async def checked() -> None:
        before = asyncio.all_tasks()
        await main()
        assert asyncio.all_tasks() == before

    run(checked())


def create_body(tokens: str, *, stream: bool) -> dict[str, Any]:
    return {
        "model": "sim-model",
        "input": "hi",
        "tool_choice": "none",
        "metadata": {"loopbench.output_tokens": tokens},
        "stream": stream,
    }


# -- until_disconnect ---------------------------------------------------------------------


class FakeReceive:
    """An ASGI ``receive`` fed by the test."""

    def __init__(self) -> None:
        self.queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue()
        self.calls = 0

    async def __call__(self) -> dict[str, Any]:
        self.calls += 1
        return await self.queue.get()

    def put(self, kind: str) -> None:
        self.queue.put_nowait({"type": kind})


class Work:
    """A generation stand-in: runs until ``finish`` is set; records how it ended."""

    def __init__(self) -> None:
        self.started = asyncio.Event()
        self.finish = asyncio.Event()
        self.outcome = "running"

    async def __call__(self) -> str:
        self.started.set()
        try:
            await self.finish.wait()
        except asyncio.CancelledError:
            self.outcome = "cancelled"
            raise
        self.outcome = "finished"
        return "result"


async def _settle() -> None:
    # Let cancelled helper tasks run their last step.
    for _ in range(3):
        await asyncio.sleep(0)


async def _watching() -> tuple[FakeReceive, Work, asyncio.Future[bool]]:
    """until_disconnect over a started Work, as a task the test can cancel."""
    receive, work = FakeReceive(), Work()
    outer = asyncio.ensure_future(until_disconnect(receive, work()))
    await work.started.wait()
    return receive, work, outer


def test_until_disconnect_returns_true_when_work_finishes_first() -> None:
    async def main() -> None:
        receive, work = FakeReceive(), Work()
        work.finish.set()
        assert await until_disconnect(receive, work()) is True
        assert work.outcome == "finished"
        # The watcher is gone: a disconnect arriving now is left unread.
        await _settle()
        receive.put("http.disconnect")
        await _settle()
        assert receive.queue.qsize() == 1

    run_leaving_no_task(main)


def test_until_disconnect_cancels_work_and_returns_false_on_disconnect() -> None:
    async def main() -> None:
        receive, work = FakeReceive(), Work()

        async def client() -> None:
            await work.started.wait()
            receive.put("http.request")  # not a disconnect: ignored
            receive.put("http.disconnect")

        helper = asyncio.ensure_future(client())
        assert await until_disconnect(receive, work()) is False
        await helper
        assert work.outcome == "cancelled"
        assert receive.calls == 2
        # The cancellation was consumed: this task goes on normally.
        task = asyncio.current_task()
        assert task is not None and task.cancelling() == 0
        await asyncio.sleep(0)
        await _settle()

    run_leaving_no_task(main)


def test_until_disconnect_propagates_an_outside_cancellation() -> None:
    async def main() -> None:
        receive, work, outer = await _watching()
        outer.cancel()  # shutdown, the slow-reader guard, ...
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert outer.cancelled()
        assert work.outcome == "cancelled"
        await _settle()
        receive.put("http.disconnect")
        await _settle()
        assert receive.queue.qsize() == 1  # the watcher went with it

    run_leaving_no_task(main)


def test_an_outside_cancellation_arriving_with_the_disconnect_still_propagates() -> None:
    async def main() -> None:
        receive, work, outer = await _watching()
        await _settle()  # the watcher is waiting in receive()
        receive.put("http.disconnect")  # the watcher cancels the work on its next step...
        outer.cancel()  # ...and a shutdown cancels the same task in the same moment
        with pytest.raises(asyncio.CancelledError):
            await outer
        assert work.outcome == "cancelled"

    run(main())


def test_until_disconnect_propagates_the_work_s_exception() -> None:
    async def failing() -> None:
        await asyncio.sleep(0)
        raise ValueError("boom")

    async def main() -> None:
        receive = FakeReceive()
        with pytest.raises(ValueError, match="boom"):
            await until_disconnect(receive, failing())
        await _settle()

    run_leaving_no_task(main)


# -- unless_gone: the answer of a non-streamed request --------------------------------------


def test_unless_gone_answers_the_work_s_value_499_or_the_injected_cut() -> None:
    async def injected() -> None:
        await asyncio.sleep(0)
        raise InjectedDisconnect("cut")

    async def main() -> None:
        receive, work = FakeReceive(), Work()
        work.finish.set()
        assert await unless_gone(receive, work()) == "result"

        receive, work = FakeReceive(), Work()
        receive.put("http.disconnect")
        left = await unless_gone(receive, work())
        assert isinstance(left, Response) and left.status_code == 499
        assert work.outcome == "cancelled"

        assert isinstance(await unless_gone(FakeReceive(), injected()), CutAnswer)
        await _settle()

    run_leaving_no_task(main)


# -- EventStream with a fake ASGI send ----------------------------------------------------

E1 = {"type": "response.created", "sequence_number": 0}
E2 = {"type": "response.output_text.delta", "sequence_number": 1, "delta": "a"}
E3 = {"type": "response.output_text.delta", "sequence_number": 2, "delta": "\u00e9"}


def _stream(
    run_fn: Any, *, done_marker: bool, receive: FakeReceive | None = None
) -> list[dict[str, Any]]:
    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        response = EventStream(run_fn, {"x-request-id": "req_1"}, done_marker=done_marker)
        await response({"type": "http"}, receive or FakeReceive(), send)

    run(main())
    return sent


def _batches(ok: bool) -> Any:
    async def run_fn(send_events: Callable[[Sequence[dict[str, Any]]], Awaitable[None]]) -> bool:
        await send_events([E1])
        await send_events([])  # nothing due: no write
        await send_events([E2, E3])
        return ok

    return run_fn


def test_event_stream_writes_one_body_per_batch_and_done_on_success() -> None:
    sent = _stream(_batches(True), done_marker=True)
    start, *bodies = sent
    assert start["type"] == "http.response.start" and start["status"] == 200
    headers = dict(start["headers"])
    assert headers[b"content-type"].startswith(b"text/event-stream")
    assert headers[b"x-request-id"] == b"req_1"
    assert headers[b"cache-control"] == b"no-cache"
    assert b"content-length" not in headers
    assert bodies == [
        {"type": "http.response.body", "body": encode_event(E1), "more_body": True},
        {
            "type": "http.response.body",
            "body": encode_event(E2) + encode_event(E3),
            "more_body": True,
        },
        {"type": "http.response.body", "body": b"data: [DONE]\n\n", "more_body": False},
    ]


@pytest.mark.parametrize(("ok", "done_marker"), [(False, True), (True, False), (False, False)])
def test_event_stream_ends_without_done_unless_success_and_marker(
    ok: bool, done_marker: bool
) -> None:
    sent = _stream(_batches(ok), done_marker=done_marker)
    assert len(sent) == 4
    assert sent[-1] == {"type": "http.response.body", "body": b"", "more_body": False}
    assert all(b"[DONE]" not in m.get("body", b"") for m in sent)


def test_event_stream_run_exception_propagates_without_ending_the_body() -> None:
    async def run_fn(send_events: Callable[[Sequence[dict[str, Any]]], Awaitable[None]]) -> bool:
        await send_events([E1])
        raise RuntimeError("injected disconnect")

    sent: list[dict[str, Any]] = []

    async def send(message: dict[str, Any]) -> None:
        sent.append(message)

    async def main() -> None:
        response = EventStream(run_fn, done_marker=True)
        await response({"type": "http"}, FakeReceive(), send)

    with pytest.raises(RuntimeError, match="injected disconnect"):
        run(main())
    assert [m.get("more_body") for m in sent] == [None, True]


def test_event_stream_stops_generation_on_disconnect_and_sends_no_end() -> None:
    receive = FakeReceive()
    outcome: list[str] = []

    async def run_fn(send_events: Callable[[Sequence[dict[str, Any]]], Awaitable[None]]) -> bool:
        await send_events([E1])
        receive.put("http.disconnect")
        try:
            await asyncio.Event().wait()
        except asyncio.CancelledError:
            outcome.append("cancelled")
            raise
        return True

    sent = _stream(run_fn, done_marker=True, receive=receive)
    assert outcome == ["cancelled"]
    assert [m.get("more_body") for m in sent] == [None, True]  # no end of body for nobody


# -- against the reference server ---------------------------------------------------------


def _health_url(base_url: str) -> str:
    return base_url.removesuffix("/v1") + "/health"


def _engine(base_url: str) -> dict[str, int]:
    doc = httpx.get(_health_url(base_url), timeout=10).json()
    engine: dict[str, int] = doc["engine"]
    return engine


def _wait_active(base_url: str, active: int, within_s: float = 10.0) -> dict[str, int]:
    """Poll /health until ``engine.active == active``; fail after ``within_s``."""
    deadline = time.monotonic() + within_s
    while True:
        engine = _engine(base_url)
        if engine["active"] == active:
            return engine
        if time.monotonic() > deadline:
            raise AssertionError(
                f"/health engine: expected active == {active} within {within_s} s, got {engine}"
            )
        time.sleep(0.02)


def test_health_reports_engine_slots(sse_server: str) -> None:
    assert _wait_active(sse_server, 0) == {"active": 0, "queued": 0}


def test_streamed_disconnect_after_first_delta_frees_the_engine_slot(sse_server: str) -> None:
    _wait_active(sse_server, 0)
    seen: list[str] = []
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST", sse_server + "/responses", json=create_body(LONG_TOKENS, stream=True)
        ) as resp,
    ):
        assert resp.status_code == 200
        decoder = SSEDecoder()
        # Held, not a for loop: leaving the loop would close the iterator, and with it
        # the connection, before the check below.
        pieces = resp.iter_raw()
        while "response.output_text.delta" not in seen:
            seen += [orjson.loads(m.data)["type"] for m in decoder.feed(next(pieces))]
        # Generating for us now.
        assert _engine(sse_server)["active"] == 1
    # The body was not read to its end: closing the response closed the connection.
    assert "response.completed" not in seen
    assert _wait_active(sse_server, 0, within_s=5.0) == {"active": 0, "queued": 0}


def test_non_streamed_disconnect_frees_the_engine_slot(sse_server: str) -> None:
    _wait_active(sse_server, 0)
    # Leaves once the response holds an engine slot.
    post_and_leave(
        sse_server, create_body(LONG_TOKENS, stream=False), lambda: _wait_active(sse_server, 1)
    )
    # The client is gone ~20 s before the response would be done: the generation stops.
    assert _wait_active(sse_server, 0, within_s=5.0) == {"active": 0, "queued": 0}
    # The server is fine afterwards.
    resp = httpx.post(sse_server + "/responses", json=create_body("3", stream=False), timeout=10)
    assert resp.status_code == 200 and resp.json()["status"] == "completed"


def test_sse_events_arrive_complete_in_order_then_done(sse_server: str) -> None:
    pieces: list[bytes] = []
    with (
        httpx.Client(timeout=10) as client,
        client.stream(
            "POST", sse_server + "/responses", json=create_body("40", stream=True)
        ) as resp,
    ):
        assert resp.status_code == 200
        assert resp.headers["content-type"].startswith("text/event-stream")
        assert resp.headers["cache-control"] == "no-cache"
        assert "content-length" not in resp.headers
        pieces = list(resp.iter_raw())
    # Every write is whole events: nothing is split across body writes.
    assert pieces and all(p.endswith(b"\n\n") for p in pieces)
    raw = b"".join(pieces)
    assert raw.endswith(b"\n\ndata: [DONE]\n\n")
    blocks = raw.split(b"\n\n")
    assert blocks[-2:] == [b"data: [DONE]", b""]
    events = []
    for block in blocks[:-2]:
        event_line, data_line = block.split(b"\n")
        assert event_line.startswith(b"event: ") and data_line.startswith(b"data: ")
        data = orjson.loads(data_line[len(b"data: ") :])
        assert data["type"] == event_line[len(b"event: ") :].decode()
        events.append(data)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    assert events[0]["type"] == "response.created"
    assert events[-1]["type"] == "response.completed"
    deltas = "".join(e["delta"] for e in events if e["type"] == "response.output_text.delta")
    (done,) = [e for e in events if e["type"] == "response.output_text.done"]
    assert deltas == done["text"] and deltas
    assert events[-1]["response"]["usage"]["output_tokens"] == 40
