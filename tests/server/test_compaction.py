"""POST /v1/responses/compact through the official SDK (strict), and its item sent back."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
from openai import OpenAI

from tests.server.conftest import configured_server

HISTORY: list[Any] = [
    {"role": "user", "content": "abcd" * 5000},  # 5,004 tokens
    {"type": "function_call", "call_id": "c1", "name": "f", "arguments": "{}"},  # 5
    {"type": "function_call_output", "call_id": "c1", "output": "abcd" * 20000},  # 20,004
]
HISTORY_TOKENS = 5004 + 5 + 20004


@pytest.fixture(scope="module")
def client() -> Iterator[OpenAI]:
    # A small window so the compact request's own window check is cheap to reach.
    with (
        configured_server(
            "--set", "engine.context_window_tokens=40000", "--set", "engine.max_output_tokens=8000"
        ) as url,
        OpenAI(
            api_key="sk-test", base_url=url, max_retries=0, _strict_response_validation=True
        ) as strict,
    ):
        yield strict


def test_compact_returns_one_compaction_item_with_its_modelled_cost(client: OpenAI) -> None:
    compacted = client.responses.compact(model="sim", input=HISTORY, instructions="be brief")
    assert compacted.object == "response.compaction"
    assert compacted.id.startswith("resp_")
    [item] = compacted.output
    assert item.type == "compaction" and item.id.startswith("cmp_")
    # 10% of the input (instructions: 2 + 4 tokens) as the compacted summary.
    summary = round((HISTORY_TOKENS + 6) * 0.10)
    assert item.encrypted_content.startswith(f"lbcmp1.{summary}.")
    assert len(item.encrypted_content) == 4 * summary
    assert compacted.usage.input_tokens == HISTORY_TOKENS + 6
    assert compacted.usage.output_tokens == summary
    timing = (compacted.model_extra or {})["sim_timing"]
    # Decoding the summary at the default engine's 1,000 tokens/s (bursts to 4,000); prefill
    # of the input.
    assert summary / 4 <= timing["decode"] <= summary
    assert timing["prefill"] > 0 and timing["compacted_tokens"] == summary


def test_a_compaction_item_sent_back_counts_as_its_tokens(client: OpenAI) -> None:
    [item] = client.responses.compact(model="sim", input=HISTORY).output
    summary = len(item.encrypted_content) // 4  # 4 characters a token, header included
    resp = client.responses.create(
        model="sim",
        input=[HISTORY[0], item.model_dump(exclude_none=True), {"role": "user", "content": "go"}],
        metadata={"loopbench.output_tokens": "10"},
    )
    assert resp.usage is not None
    assert resp.usage.input_tokens == 5004 + (summary + 4) + (1 + 4)


def test_compact_from_a_stored_response(client: OpenAI) -> None:
    first = client.responses.create(
        model="sim", input=HISTORY, metadata={"loopbench.output_tokens": "20"}, store=True
    )
    compacted = client.responses.compact(
        model="sim", previous_response_id=first.id, input=[{"role": "user", "content": "more"}]
    )
    assert compacted.usage.input_tokens == HISTORY_TOKENS + 24 + 5


def test_compact_errors(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as missing:
        client.responses.compact(model="sim", previous_response_id="resp_nope")
    assert missing.value.code == "previous_response_not_found"
    with pytest.raises(openai.BadRequestError) as too_big:
        client.responses.compact(model="sim", input="abcd" * 40000)
    assert too_big.value.code == "context_length_exceeded"
    bad = httpx.post(
        str(client.base_url) + "responses",
        json={"model": "sim", "input": [{"type": "compaction"}]},
        timeout=10,
    )
    assert bad.status_code == 400
    assert bad.json()["error"]["param"] == "input[0].encrypted_content"
