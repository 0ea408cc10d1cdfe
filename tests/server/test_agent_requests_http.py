"""The real agents' captured requests through the server's real edges (one per API).

The parsers are tested on these bodies in tests/reference_server/test_agent_requests.py;
only a socket catches what the edges add: Claude Code's ``?beta=true`` query and its
``anthropic-beta`` values, Codex's headers, the WebSocket warm-up followed by turns
chained on the ids the server gave, and a Chat stream with ``stream_options``.  Each
answer's tool calls name a tool the agent can run, never a hosted, custom or deferred one.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import pytest
from websockets.asyncio.client import connect

from harness.wire.sse import SSEDecoder
from tests.agent_requests import bodies, captured
from tests.runs import FAST_DECODE
from tests.server.conftest import configured_server, ws_url

# Fast engine: the agents ask for up to 128,000 output tokens; the edges are what is tested.
# The client library writes these itself (a compressed body or a second handshake key would not be
# what is tested).
SKIP_HEADERS = {"accept-encoding", "connection", "upgrade"}


@pytest.fixture(scope="module")
def url() -> Iterator[str]:
    with configured_server(*FAST_DECODE) as base:
        yield base


def _headers(doc: dict[str, Any]) -> dict[str, str]:
    raw = doc["requests"][0]["headers"] if "requests" in doc else doc["connection"]["headers"]
    return {
        k: v for k, v in raw.items() if k not in SKIP_HEADERS and not k.startswith("sec-websocket")
    }


def _events(response: httpx.Response) -> list[dict[str, Any]]:
    decoder = SSEDecoder()
    events = decoder.feed(response.content)
    return [orjson.loads(e.data) for e in events if e.data and e.data != "[DONE]"]


def _replay(url: str, doc: dict[str, Any]) -> list[dict[str, Any]]:
    """The first captured request sent as the agent sent it: path, query, headers, body."""
    req = doc["requests"][0]
    query = f"?{req['query']}" if req["query"] else ""
    r = httpx.post(
        f"{url.removesuffix('/v1')}{req['path']}{query}",
        content=orjson.dumps(req["body"]),
        headers=_headers(doc),
        timeout=60,
    )
    assert r.status_code == 200, r.text
    return _events(r)


def test_claude_code_request_with_its_betas_and_query(url: str) -> None:
    doc = captured("claude-code")
    req = doc["requests"][0]
    assert req["query"] == "beta=true" and "anthropic-beta" in req["headers"]
    events = _replay(url, doc)
    assert events[0]["type"] == "message_start" and events[-1]["type"] == "message_stop"
    callable_ = {
        t["name"] for t in req["body"]["tools"] if not t.get("type") and not t.get("defer_loading")
    }
    used = {
        e["content_block"]["name"]
        for e in events
        if e["type"] == "content_block_start" and e["content_block"]["type"] == "tool_use"
    }
    assert used <= callable_


def test_codex_http_request_with_its_headers(url: str) -> None:
    doc = captured("codex-http")
    req = doc["requests"][0]
    events = _replay(url, doc)
    assert events[-1]["type"] == "response.completed"
    functions = {t["name"] for t in req["body"]["tools"] if t["type"] == "function"}
    calls = [i for i in events[-1]["response"]["output"] if i["type"] == "function_call"]
    assert {c["name"] for c in calls} <= functions


def test_codex_websocket_session_warm_up_then_chained_turns(url: str) -> None:
    doc = captured("codex-ws")
    messages = bodies("codex-ws")

    async def main() -> list[str]:
        statuses = []
        async with connect(
            ws_url(url), additional_headers=_headers(doc), max_size=None, open_timeout=30
        ) as conn:
            previous = None
            for body in messages:
                if previous is not None:  # chained on the id this server gave, as Codex does
                    body["previous_response_id"] = previous
                await conn.send(orjson.dumps(body).decode())
                while True:
                    event = orjson.loads(await asyncio.wait_for(conn.recv(), 60))
                    if event["type"] in ("response.completed", "response.incomplete", "error"):
                        break
                assert event["type"] != "error", event
                previous = event["response"]["id"]
                statuses.append(event["response"]["status"])
        return statuses

    statuses = asyncio.run(main())
    assert len(statuses) == len(messages) and set(statuses) <= {"completed", "incomplete"}


def test_agents_sdk_chat_stream_with_stream_options(url: str) -> None:
    doc = captured("openai-agents-chat")
    body = doc["requests"][1]["body"]
    assert body["stream"] is True
    body.pop("max_tokens")
    body.update(max_completion_tokens=64, stream_options={"include_usage": True})
    r = httpx.post(f"{url}/chat/completions", json=body, headers=_headers(doc), timeout=60)
    assert r.status_code == 200, r.text
    chunks = _events(r)
    assert chunks[-1]["usage"]["completion_tokens"] <= 64
    assert any(c["choices"] and c["choices"][0]["finish_reason"] for c in chunks)
