"""What the real agents get back: answers they can act on (end to end).

Claude Code asks for up to 128,000 output tokens with adaptive thinking, Codex for
``reasoning.effort: medium`` with no cap.  Only a real server shows that the service
wires the engine profile's lengths, effort table and tool weights into the plan: the
answer thinks, then calls a tool with valid arguments or answers in a few hundred
tokens, and says ``max_tokens`` / ``incomplete`` only when a cap cut it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import httpx
import jsonschema
import orjson
import pytest

from harness.wire.sse import SSEDecoder
from tests.agent_requests import captured
from tests.runs import FAST_DECODE
from tests.server.conftest import configured_server

# Each seed is a different server generator: several answers per agent, not one lucky one.
SEEDS = (1, 2, 3)


@pytest.fixture(scope="module", params=SEEDS)
def url(request: pytest.FixtureRequest) -> Iterator[str]:
    with configured_server(*FAST_DECODE, "--seed", str(request.param)) as base:
        yield base


def _post(url: str, req: dict[str, Any], headers: dict[str, str]) -> list[dict[str, Any]]:
    query = f"?{req['query']}" if req.get("query") else ""
    r = httpx.post(
        f"{url.removesuffix('/v1')}{req['path']}{query}",
        content=orjson.dumps(req["body"]),
        headers=headers,
        timeout=60,
    )
    assert r.status_code == 200, r.text
    events = SSEDecoder().feed(r.content)
    return [orjson.loads(e.data) for e in events if e.data and e.data != "[DONE]"]


def _valid(schema: dict[str, Any], args: Any) -> None:
    cls = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    cls(schema, format_checker=cls.FORMAT_CHECKER).validate(args)


def test_claude_code_gets_thinking_then_an_action_well_inside_max_tokens(url: str) -> None:
    doc = captured("claude-code")
    req = doc["requests"][0]
    body = req["body"]
    assert body["thinking"]["type"] == "adaptive" and body["max_tokens"] >= 32_000
    events = _post(url, req, {"x-api-key": "k", "anthropic-version": "2023-06-01"})
    blocks = [e["content_block"] for e in events if e["type"] == "content_block_start"]
    kinds = [b["type"] for b in blocks]
    assert kinds[0] == "thinking" and len(kinds) >= 2, kinds
    assert set(kinds[1:]) <= {"text", "tool_use"}
    (delta,) = [e for e in events if e["type"] == "message_delta"]
    assert delta["delta"]["stop_reason"] in ("tool_use", "end_turn")
    assert delta["usage"]["output_tokens"] < 20_000  # medium effort and a drawn answer, not the cap
    schemas = {t["name"]: t["input_schema"] for t in body["tools"] if "input_schema" in t}
    index = {
        e["index"]: b
        for e, b in zip(
            [e for e in events if e["type"] == "content_block_start"], blocks, strict=True
        )
    }
    partial: dict[int, str] = {}
    for e in events:
        if e["type"] == "content_block_delta" and e["delta"]["type"] == "input_json_delta":
            partial[e["index"]] = partial.get(e["index"], "") + e["delta"]["partial_json"]
    for i, text in partial.items():
        _valid(schemas[index[i]["name"]], orjson.loads(text))


def test_codex_gets_reasoning_then_a_valid_call_or_an_answer(url: str) -> None:
    doc = captured("codex-http")
    req = doc["requests"][0]
    body = req["body"]
    assert body["reasoning"]["effort"] == "medium" and "max_output_tokens" not in body
    events = _post(url, req, {"authorization": "Bearer k"})
    (done,) = [e for e in events if e["type"] in ("response.completed", "response.incomplete")]
    response = done["response"]
    assert response["status"] == "completed"
    kinds = [it["type"] for it in response["output"]]
    assert kinds[0] == "reasoning" and set(kinds[1:]) <= {"message", "function_call"}, kinds
    assert len(kinds) >= 2
    assert response["usage"]["output_tokens_details"]["reasoning_tokens"] > 0
    schemas = {t["name"]: t["parameters"] for t in body["tools"] if t.get("type") == "function"}
    for item in response["output"]:
        if item["type"] == "function_call":
            _valid(schemas[item["name"]], orjson.loads(item["arguments"]))
