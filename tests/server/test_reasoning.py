"""Reasoning over every server path: events, items, usage, timing and charging (docs/protocol.md §1.4).

One server without bursts, so modelled reasoning times are exact multiples of the
sustained token gap, and with a profile budget (``engine.reasoning_tokens``) that
the metadata hint overrides per request.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from openai import OpenAI
from openai.types.responses import Response
from websockets.asyncio.client import connect

from reference_server.core.conversation import ITEM_OVERHEAD_TOKENS
from reference_server.core.reasoning import summary_tokens
from tests.server.conftest import configured_server, ws_url
from tests.server.test_sdk_conformance import SDK_WS_LEGACY
from tests.server.test_ws_protocol import one, one_or_done
from tests.wire.test_events import validate

PROFILE_BUDGET = 25
SUSTAINED_TPS = 1000.0  # engine-cerebras-spark
N = 60  # reasoning tokens asked by hint
VISIBLE = 12
INCLUDE = ["reasoning.encrypted_content"]


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with configured_server(
        "--set",
        "engine.burst_probability=0",
        "--set",
        f"engine.reasoning_tokens={PROFILE_BUDGET}",
    ) as base:
        yield base


def hints(reasoning: int | None = N, visible: int = VISIBLE) -> dict[str, str]:
    meta = {"loopbench.output_tokens": str(visible)}
    if reasoning is not None:
        meta["loopbench.reasoning_tokens"] = str(reasoning)
    return meta


def sse(url: str, body: dict[str, Any]) -> list[dict[str, Any]]:
    """Every event of a streamed create, decoded from the raw SSE body."""
    events = []
    with httpx.Client(timeout=30) as http:
        resp = http.post(f"{url}/responses", json={**body, "stream": True})
        assert resp.status_code == 200, resp.text
        for line in resp.text.splitlines():
            if line.startswith("data: ") and line != "data: [DONE]":
                events.append(orjson.loads(line[6:]))
    return events


def post(url: str, body: dict[str, Any]) -> dict[str, Any]:
    with httpx.Client(timeout=30) as http:
        resp = http.post(f"{url}/responses", json=body)
    assert resp.status_code == 200, resp.text
    out: dict[str, Any] = resp.json()
    return out


def strict(url: str) -> OpenAI:
    return OpenAI(api_key="sk-test", base_url=url, max_retries=0, _strict_response_validation=True)


def check_reasoning_stream(events: list[dict[str, Any]], *, summary: bool, include: bool) -> None:
    """The contract's order and shapes, after strict SDK validation of every event."""
    validate(events)
    types = [e["type"] for e in events]
    added = events[2]
    assert added["type"] == "response.output_item.added" and added["output_index"] == 0
    assert added["item"]["type"] == "reasoning" and added["item"]["summary"] == []
    assert added["item"]["id"].startswith("rs_")
    done_at = next(
        i
        for i, e in enumerate(events)
        if e["type"] == "response.output_item.done" and e["item"]["type"] == "reasoning"
    )
    first_visible = next(
        i
        for i, e in enumerate(events)
        if e["type"] in ("response.output_text.delta", "response.function_call_arguments.delta")
    )
    assert 2 < done_at < first_visible
    assert all(e.get("output_index", 1) == 1 for e in events[done_at + 1 : -1])
    item = events[done_at]["item"]
    summary_events = [t for t in types[:done_at] if "reasoning_summary" in t]
    if summary:
        assert summary_events[0] == "response.reasoning_summary_part.added"
        assert summary_events[-2:] == [
            "response.reasoning_summary_text.done",
            "response.reasoning_summary_part.done",
        ]
        deltas = "".join(
            e["delta"] for e in events if e["type"] == "response.reasoning_summary_text.delta"
        )
        assert len(deltas) == 4 * summary_tokens(N)
        assert item["summary"] == [{"type": "summary_text", "text": deltas}]
    else:
        assert summary_events == [] and item["summary"] == []
    assert ("encrypted_content" in item) is include
    if include:
        assert abs(len(item["encrypted_content"]) - 4 * N) <= 4
    final = events[-1]["response"]
    Response.model_validate(final, strict=True)
    assert [o["type"] for o in final["output"]] == ["reasoning", "message"]
    assert final["output"][0] == item
    usage = final["usage"]
    assert usage["output_tokens"] == N + VISIBLE
    assert usage["output_tokens_details"]["reasoning_tokens"] == N
    timing = final["sim_timing"]
    # The first visible token is N gaps after the first token; the last N + VISIBLE - 1.
    assert timing["reasoning_ms"] == pytest.approx(N * 1000 / SUSTAINED_TPS)
    assert timing["decode"] == pytest.approx((N + VISIBLE - 1) * 1000 / SUSTAINED_TPS)


@pytest.mark.parametrize("summary", [False, True])
@pytest.mark.parametrize("include", [False, True])
def test_http_stream_strict(url: str, summary: bool, include: bool) -> None:
    body: dict[str, Any] = {"model": "sim", "input": "think", "metadata": hints()}
    if summary:
        body["reasoning"] = {"effort": "high", "summary": "auto"}
    if include:
        body["include"] = INCLUDE
    check_reasoning_stream(sse(url, body), summary=summary, include=include)


def test_sdk_stream_and_non_streamed_strict(url: str) -> None:
    with strict(url) as client:
        seen = [
            e.type
            for e in client.responses.create(
                model="sim",
                input="think",
                stream=True,
                include=["reasoning.encrypted_content"],
                reasoning={"effort": "medium", "summary": "detailed"},
                metadata=hints(),
            )
        ]
        assert seen[2:4] == [
            "response.output_item.added",
            "response.reasoning_summary_part.added",
        ]
        resp = client.responses.create(
            model="sim", input="think", include=["reasoning.encrypted_content"], metadata=hints()
        )
    assert resp.status == "completed"
    assert [o.type for o in resp.output] == ["reasoning", "message"]
    first = resp.output[0]
    assert first.type == "reasoning" and first.encrypted_content
    assert resp.usage is not None and resp.usage.output_tokens_details.reasoning_tokens == N
    assert resp.usage.output_tokens == N + VISIBLE


def test_sdk_stream_helper_accumulates_the_reasoning(url: str) -> None:
    with (
        strict(url) as client,
        client.responses.stream(
            model="sim",
            input="think",
            include=["reasoning.encrypted_content"],
            reasoning={"summary": "auto"},
            metadata=hints(),
        ) as stream,
    ):
        final = stream.get_final_response()
    first = final.output[0]
    assert first.type == "reasoning" and first.encrypted_content
    assert len(first.summary[0].text) == 4 * summary_tokens(N)
    assert final.output_text and len(final.output_text) == 4 * VISIBLE


@SDK_WS_LEGACY
def test_sdk_websocket_parses_every_reasoning_event(url: str) -> None:
    client = OpenAI(api_key="sk-test", base_url=url, max_retries=0)
    with client.responses.connect() as conn:
        conn.response.create(
            model="sim",
            store=False,
            input="think",
            include=["reasoning.encrypted_content"],
            reasoning={"summary": "auto"},
            metadata=hints(),
        )
        types = []
        for event in conn:
            assert event.type != "error", event
            types.append(event.type)
            if event.type == "response.completed":
                usage = event.response.usage
                break
    assert usage is not None and usage.output_tokens_details.reasoning_tokens == N
    assert types[2:4] == ["response.output_item.added", "response.reasoning_summary_part.added"]
    assert "response.reasoning_summary_text.delta" in types


def test_function_call_follows_the_reasoning(url: str) -> None:
    tool = {"type": "function", "name": "run", "parameters": {"type": "object", "properties": {}}}
    events = sse(
        url,
        {
            "model": "sim",
            "input": "do it",
            "tools": [tool],
            "tool_choice": "required",
            "metadata": hints(),
        },
    )
    validate(events)
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == ["reasoning", "function_call"]
    added = [e for e in events if e["type"] == "response.output_item.added"]
    assert [e["output_index"] for e in added] == [0, 1]


def test_websocket_stream_strict_and_the_cache_keeps_the_reasoning(url: str) -> None:
    async def main() -> tuple[list[dict[str, Any]], dict[str, Any]]:
        async with connect(ws_url(url)) as conn:
            first = await one(
                conn,
                orjson.dumps(
                    {
                        "type": "response.create",
                        "model": "sim",
                        "store": False,
                        "input": "think",
                        "include": INCLUDE,
                        "reasoning": {"summary": "concise"},
                        "metadata": hints(),
                    }
                ).decode(),
            )
            second = await one(
                conn,
                orjson.dumps(
                    {
                        "type": "response.create",
                        "model": "sim",
                        "store": False,
                        "previous_response_id": first[-1]["response"]["id"],
                        "input": "and then?",
                        "metadata": hints(reasoning=0),
                    }
                ).decode(),
            )
            return first, second[-1]["response"]

    first, second = asyncio.run(main())
    check_reasoning_stream(first, summary=True, include=True)
    usage1 = first[-1]["response"]["usage"]
    timing2 = second["sim_timing"]
    assert timing2["cache"] == "hit"
    new_tokens = 3 + ITEM_OVERHEAD_TOKENS  # "and then?": 9 characters
    assert timing2["processed_input_tokens"] == new_tokens
    # The cached conversation holds the reasoning: counted as context, and as cached.
    reasoning_in = N + summary_tokens(N) + ITEM_OVERHEAD_TOKENS
    message_in = VISIBLE + ITEM_OVERHEAD_TOKENS
    expected_input = usage1["input_tokens"] + reasoning_in + message_in + new_tokens
    assert second["usage"]["input_tokens"] == expected_input
    assert timing2["cached_input_tokens"] >= usage1["input_tokens"] + reasoning_in
    assert second["usage"]["output_tokens_details"]["reasoning_tokens"] == 0


def test_resent_encrypted_reasoning_is_charged_as_input(url: str) -> None:
    first = post(
        url,
        {
            "model": "sim",
            "input": "think",
            "store": False,
            "include": INCLUDE,
            "metadata": hints(),
        },
    )
    reasoning_item, message = first["output"]
    history = [{"role": "user", "content": "think"}]
    follow = {"role": "user", "content": "next"}
    without = post(
        url,
        {
            "model": "sim",
            "input": [*history, message, follow],
            "store": False,
            "metadata": hints(reasoning=0),
        },
    )
    with_it = post(
        url,
        {
            "model": "sim",
            "input": [*history, reasoning_item, message, follow],
            "store": False,
            "metadata": hints(reasoning=0),
        },
    )
    grown = with_it["usage"]["input_tokens"] - without["usage"]["input_tokens"]
    assert grown == N + ITEM_OVERHEAD_TOKENS
    assert (
        with_it["sim_timing"]["processed_input_tokens"]
        - without["sim_timing"]["processed_input_tokens"]
        == grown
    )
    # The engine kept the KV of the reasoning it decoded: the re-sent copy is a cache hit.
    assert with_it["usage"]["input_tokens_details"]["cached_tokens"] >= (
        first["usage"]["input_tokens"] + grown
    )


def test_stored_chain_keeps_the_reasoning_without_resending_it(url: str) -> None:
    first = post(url, {"model": "sim", "input": "think", "metadata": hints()})
    assert "encrypted_content" not in first["output"][0]  # not asked for
    second = post(
        url,
        {
            "model": "sim",
            "input": "next",
            "previous_response_id": first["id"],
            "metadata": hints(reasoning=0),
        },
    )
    reasoning_in = N + ITEM_OVERHEAD_TOKENS
    message_in = VISIBLE + ITEM_OVERHEAD_TOKENS
    new_in = 1 + ITEM_OVERHEAD_TOKENS
    assert second["usage"]["input_tokens"] == (
        first["usage"]["input_tokens"] + reasoning_in + message_in + new_in
    )
    assert second["sim_timing"]["cache"] == "store"
    assert second["usage"]["input_tokens_details"]["cached_tokens"] >= (
        first["usage"]["input_tokens"] + reasoning_in
    )


def test_profile_budget_applies_and_effort_none_turns_it_off(url: str) -> None:
    default = post(url, {"model": "sim", "input": "hi", "metadata": hints(reasoning=None)})
    assert default["usage"]["output_tokens_details"]["reasoning_tokens"] == PROFILE_BUDGET
    assert default["output"][0]["type"] == "reasoning"
    off = post(
        url,
        {"model": "sim", "input": "hi", "reasoning": {"effort": "none"}, "metadata": hints()},
    )
    Response.model_validate({k: v for k, v in off.items() if k != "sim_timing"}, strict=True)
    assert off["usage"]["output_tokens_details"]["reasoning_tokens"] == 0
    assert off["usage"]["output_tokens"] == VISIBLE
    assert [o["type"] for o in off["output"]] == ["message"]
    assert off["sim_timing"]["reasoning_ms"] == 0.0


def test_reasoning_that_exhausts_max_output_tokens_is_incomplete(url: str) -> None:
    events = sse(url, {"model": "sim", "input": "hi", "max_output_tokens": 30, "metadata": hints()})
    validate(events)
    final = events[-1]
    assert final["type"] == "response.incomplete"
    resp = final["response"]
    assert resp["incomplete_details"] == {"reason": "max_output_tokens"}
    assert [o["type"] for o in resp["output"]] == ["reasoning"]
    assert resp["usage"]["output_tokens"] == 30
    assert resp["usage"]["output_tokens_details"]["reasoning_tokens"] == 30
    assert not any(e["type"] == "response.output_text.delta" for e in events)


def test_bad_reasoning_fields_are_refused(url: str) -> None:
    with httpx.Client(timeout=30) as http:
        for body, param in (
            ({"reasoning": {"effort": "extreme"}}, "reasoning.effort"),
            ({"reasoning": {"summary": "long"}}, "reasoning.summary"),
            ({"include": "reasoning.encrypted_content"}, "include"),
            (
                {"input": [{"type": "reasoning", "id": "rs_1", "summary": "x"}]},
                "input[0].summary",
            ),
        ):
            resp = http.post(f"{url}/responses", json={"model": "sim", "input": "hi", **body})
            assert resp.status_code == 400, body
            assert resp.json()["error"]["param"] == param


def test_append_mode_reasons_in_every_segment_and_sums_the_usage(url: str) -> None:
    tool = {"type": "function", "name": "run", "parameters": {"type": "object", "properties": {}}}

    async def main() -> list[dict[str, Any]]:
        async with connect(ws_url(url) + "?mode=append") as conn:
            create = {
                "type": "response.create",
                "model": "sim",
                "store": False,
                "input": "go",
                "tools": [tool],
                "tool_choice": "required",
                "metadata": hints(),
            }
            first = await one_or_done(conn, orjson.dumps(create).decode())
            call = next(
                e["item"]
                for e in first
                if e["type"] == "response.output_item.done" and e["item"]["type"] == "function_call"
            )
            append = {
                "type": "response.append",
                "response_id": first[-1]["response"]["id"],
                "input": [
                    {"type": "function_call_output", "call_id": call["call_id"], "output": "ok"}
                ],
                "tool_choice": "none",
            }
            return first + await one_or_done(conn, orjson.dumps(append).decode())

    events = asyncio.run(main())
    final = events[-1]["response"]
    assert [o["type"] for o in final["output"]] == [
        "reasoning",
        "function_call",
        "reasoning",
        "message",
    ]
    assert final["usage"]["output_tokens_details"]["reasoning_tokens"] == 2 * N
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2, 3]
