"""The context window over real sockets: the 400 before any modelled work, truncation: auto.

The huge-input tests run a server whose engine prefills 1,000 tokens/s, so a 1.25M-token
input that reached the engine would be answered after a modelled ~21 minutes: the client's
timeout (a fraction of that) makes the test fail if the refusal comes after the modelled
work instead of before it, with no wall-clock threshold of its own.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import orjson
import pytest
from openai import OpenAI
from websockets.asyncio.client import connect

from tests.server.conftest import configured_server, ws_url

PREFILL_TPS = 1000
HUGE_TOKENS = 1_250_000  # a ~5 MB body
MODELLED_PREFILL_S = HUGE_TOKENS / PREFILL_TPS
# Far below the modelled prefill: a response that waited for it cannot arrive in time.
CLIENT_TIMEOUT_S = MODELLED_PREFILL_S / 10
SMALL_WINDOW = 2000


@pytest.fixture(scope="module")
def slow_prefill() -> Iterator[str]:
    with configured_server("--set", f"engine.prefill_tps={PREFILL_TPS}") as url:
        yield url


@pytest.fixture(scope="module")
def small_window() -> Iterator[str]:
    with configured_server(
        "--set",
        f"engine.context_window_tokens={SMALL_WINDOW}",
        "--set",
        "engine.max_output_tokens=500",
    ) as url:
        yield url


def huge_input() -> str:
    return "abcd" * HUGE_TOKENS


def assert_context_error(error: dict[str, Any], input_tokens: int, window: int) -> None:
    assert error["code"] == "context_length_exceeded"
    assert error["type"] == "invalid_request_error"
    assert error["param"] == "input"
    assert error["message"].startswith("Your input exceeds the context window of this model.")
    assert f"{input_tokens} input tokens" in error["message"]
    assert f"context window of {window} tokens" in error["message"]


def engine_idle(base_url: str) -> dict[str, Any]:
    doc = httpx.get(base_url.removesuffix("/v1") + "/health", timeout=10).json()
    return dict(doc["engine"])


def test_http_huge_input_refused_before_modelled_work(slow_prefill: str) -> None:
    body = orjson.dumps({"model": "sim", "input": huge_input(), "stream": True})
    assert len(body) > 5_000_000
    started = time.perf_counter()
    resp = httpx.post(
        slow_prefill + "/responses",
        content=body,
        headers={"content-type": "application/json"},
        timeout=CLIENT_TIMEOUT_S,
    )
    elapsed = time.perf_counter() - started
    assert resp.status_code == 400
    assert resp.headers["content-type"].startswith("application/json")
    # 1,250,000 tokens of text + 4 framing tokens of the one message item.
    assert_context_error(resp.json()["error"], HUGE_TOKENS + 4, 400_000)
    assert elapsed < MODELLED_PREFILL_S
    assert engine_idle(slow_prefill) == {"active": 0, "queued": 0}


def test_websocket_huge_input_refused_before_modelled_work(slow_prefill: str) -> None:
    async def go() -> dict[str, Any]:
        async with connect(ws_url(slow_prefill), max_size=None) as conn:
            await conn.send(
                orjson.dumps(
                    {"type": "response.create", "model": "sim", "input": huge_input()}
                ).decode()
            )
            return dict(orjson.loads(await asyncio.wait_for(conn.recv(), CLIENT_TIMEOUT_S)))

    event = asyncio.run(go())
    assert event["type"] == "error"
    assert event["status"] == 400
    assert "sequence_number" not in event  # refused before a response existed
    assert_context_error(event["error"], HUGE_TOKENS + 4, 400_000)
    assert engine_idle(slow_prefill) == {"active": 0, "queued": 0}


def test_requested_output_counts_against_the_window(small_window: str) -> None:
    # 1,604 input tokens fit alone; with 450 tokens of requested output they do not.
    text = "abcd" * 1600
    ok = httpx.post(
        small_window + "/responses",
        json={"model": "sim", "input": text, "max_output_tokens": 300},
        timeout=30,
    )
    assert ok.status_code == 200, ok.text
    refused = httpx.post(
        small_window + "/responses",
        json={"model": "sim", "input": text, "max_output_tokens": 450},
        timeout=30,
    )
    assert refused.status_code == 400
    assert_context_error(refused.json()["error"], 1604, SMALL_WINDOW)
    assert "+ 450 requested output tokens" in refused.json()["error"]["message"]


def test_max_output_tokens_above_the_cap_is_refused(small_window: str) -> None:
    resp = httpx.post(
        small_window + "/responses",
        json={"model": "sim", "input": "hi", "max_output_tokens": 501},
        timeout=30,
    )
    assert resp.status_code == 400
    error = resp.json()["error"]
    assert error["code"] == "integer_above_max_value"
    assert error["param"] == "max_output_tokens"
    assert "<= 500, but got 501" in error["message"]


def test_chained_request_counts_the_stored_history(small_window: str) -> None:
    first = httpx.post(
        small_window + "/responses",
        json={
            "model": "sim",
            "input": "abcd" * 1000,
            "store": True,
            "max_output_tokens": 50,
            "metadata": {"loopbench.output_tokens": "50"},
        },
        timeout=30,
    ).json()
    # Alone the new input fits easily; on top of the stored 1,004 + 54 tokens it does not.
    resp = httpx.post(
        small_window + "/responses",
        json={
            "model": "sim",
            "input": "abcd" * 900,
            "previous_response_id": first["id"],
            "max_output_tokens": 50,
        },
        timeout=30,
    )
    assert resp.status_code == 400
    assert_context_error(resp.json()["error"], 1004 + 54 + 904, SMALL_WINDOW)


def test_invalid_truncation_value(small_window: str) -> None:
    resp = httpx.post(
        small_window + "/responses",
        json={"model": "sim", "input": "hi", "truncation": "sometimes"},
        timeout=30,
    )
    assert resp.status_code == 400
    assert resp.json()["error"]["param"] == "truncation"
    assert "Supported values are: 'auto' and 'disabled'" in resp.json()["error"]["message"]


def strict_client(base_url: str) -> OpenAI:
    return OpenAI(
        api_key="sk-test", base_url=base_url, max_retries=0, _strict_response_validation=True
    )


def test_truncation_auto_drops_the_oldest_items_sdk_strict(small_window: str) -> None:
    items: list[Any] = [
        {"role": "user", "content": "abcd" * 100},  # 104 tokens, the oldest: dropped
        {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},  # 5
        {"type": "function_call_output", "call_id": "c1", "output": "abcd" * 400},  # 404
        {"role": "user", "content": "abcd" * 800},  # 804
        {"role": "user", "content": "abcd" * 600},  # 604
    ]
    with strict_client(small_window) as client:
        resp = client.responses.create(
            model="sim",
            input=items,
            instructions="abcd" * 100,
            truncation="auto",
            max_output_tokens=100,
            metadata={"loopbench.output_tokens": "100"},
        )
        assert resp.truncation == "auto"
        assert resp.status == "completed"
        timing = (resp.model_extra or {})["sim_timing"]
        # 104 instructions + 1,921 of items + 100 output = 2,125 > 2,000: the oldest message
        # goes first (2,021 left), then the call, taking its output with it (1,612).
        assert timing["truncated_items"] == 3
        assert timing["truncated_tokens"] == 104 + 5 + 404
        assert resp.usage is not None and resp.usage.input_tokens == 104 + 804 + 604

        with pytest.raises(openai.BadRequestError) as refused:
            client.responses.create(
                model="sim", input=items, instructions="abcd" * 100, max_output_tokens=100
            )
        assert refused.value.code == "context_length_exceeded"
        assert refused.value.param == "input"


def test_truncation_auto_cannot_drop_the_newest_item(small_window: str) -> None:
    with strict_client(small_window) as client, pytest.raises(openai.BadRequestError) as refused:
        client.responses.create(
            model="sim",
            input=[{"role": "user", "content": "hi"}, {"role": "user", "content": "abcd" * 3000}],
            truncation="auto",
        )
    assert refused.value.code == "context_length_exceeded"


def test_websocket_chain_counts_the_cached_history_and_truncates(small_window: str) -> None:
    async def go() -> list[dict[str, Any]]:
        async with connect(ws_url(small_window), max_size=None) as conn:

            async def create(**fields: Any) -> dict[str, Any]:
                body = {"type": "response.create", "model": "sim", "store": False, **fields}
                await conn.send(orjson.dumps(body).decode())
                while True:
                    event = dict(orjson.loads(await asyncio.wait_for(conn.recv(), 30)))
                    if event["type"] in ("error", "response.completed", "response.incomplete"):
                        return event

            first = await create(
                input="abcd" * 1000,
                metadata={"loopbench.output_tokens": "50"},
                max_output_tokens=50,
            )
            rid = first["response"]["id"]
            # 1,004 + 54 cached tokens + 904 new + 50 requested output > 2,000.
            more: dict[str, Any] = {
                "previous_response_id": rid,
                "input": "abcd" * 900,
                "max_output_tokens": 50,
                "metadata": {"loopbench.output_tokens": "50"},
            }
            refused = await create(**more)
            # The failed create evicted the cached response: chain from a fresh one.
            again = await create(
                input="abcd" * 1000,
                metadata={"loopbench.output_tokens": "50"},
                max_output_tokens=50,
            )
            more["previous_response_id"] = again["response"]["id"]
            truncated = await create(**more, truncation="auto")
            return [refused, truncated]

    refused, truncated = asyncio.run(go())
    assert refused["type"] == "error"
    assert_context_error(refused["error"], 1004 + 54 + 904, SMALL_WINDOW)
    assert truncated["type"] == "response.completed"
    resp = truncated["response"]
    assert resp["truncation"] == "auto"
    # The oldest item (the first 1,004-token message) goes; its answer and the new input stay.
    assert resp["sim_timing"]["truncated_items"] == 1
    assert resp["sim_timing"]["truncated_tokens"] == 1004
    assert resp["usage"]["input_tokens"] == 54 + 904
