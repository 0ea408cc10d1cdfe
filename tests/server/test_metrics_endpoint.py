"""``GET /metrics`` after real traffic, read with prometheus_client's own parser (docs/server.md)."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import orjson
import pytest
from prometheus_client.parser import text_string_to_metric_families
from websockets.asyncio.client import connect

from tests.server.conftest import configured_server, ws_url

Key = tuple[str, frozenset[tuple[str, str]]]


@pytest.fixture(scope="module")
def server() -> Iterator[str]:
    with configured_server() as url:
        yield url


def scrape(base_url: str) -> dict[Key, float]:
    root = base_url.removesuffix("/v1")
    r = httpx.get(f"{root}/metrics", timeout=10)
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/plain")
    out: dict[Key, float] = {}
    for family in text_string_to_metric_families(r.text):
        for s in family.samples:
            labels = {k: v for k, v in s.labels.items() if k != "worker"}
            out[(s.name, frozenset(labels.items()))] = s.value
    return out


def value(samples: dict[Key, float], name: str, **labels: str) -> float:
    return samples.get((name, frozenset(labels.items())), 0.0)


def errors(samples: dict[Key, float], transport: str, status: str, code: str) -> float:
    """``loopbench_server_errors_total`` of one kind of refusal on ``/v1/responses``."""
    labels = {"transport": transport, "route": "/v1/responses", "status": status, "code": code}
    return value(samples, "loopbench_server_errors_total", **labels)


def create(base_url: str, **body: object) -> httpx.Response:
    # The hint plans 8 tokens: a drawn answer may be cut by the cap (incomplete).
    doc = {
        "model": "sim-model",
        "input": "hello metrics",
        "max_output_tokens": 8,
        "metadata": {"loopbench.output_tokens": "8"},
        **body,
    }
    return httpx.post(f"{base_url}/responses", json=doc, timeout=30)


def test_requests_by_route_and_the_engine_counters_move(server: str) -> None:
    before = scrape(server)
    (info,) = [dict(k[1]) for k in before if k[0] == "loopbench_server_info"]
    assert info["api_profile"] == "optimized" and info["pid"].isdigit()
    r = create(server, stream=False)
    assert r.status_code == 200
    response_id = r.json()["id"]
    assert create(server, stream=True, previous_response_id=response_id).status_code == 200
    after = scrape(server)

    route = {"method": "POST", "route": "/v1/responses", "status": "200"}
    assert (
        value(after, "loopbench_server_http_requests_total", **route)
        == value(before, "loopbench_server_http_requests_total", **route) + 2
    )
    for name in (
        "loopbench_server_output_tokens_total",
        "loopbench_server_input_tokens_total",
        "loopbench_server_prefix_cache_misses_total",
    ):
        assert value(after, name) > value(before, name), name
    done = {"status": "completed"}
    assert value(after, "loopbench_server_responses_total", **done) == (
        value(before, "loopbench_server_responses_total", **done) + 2
    )
    for component in ("api_pre", "prefill", "decode"):
        key = {"component": component}
        assert value(after, "loopbench_server_modelled_seconds_total", **key) > value(
            before, "loopbench_server_modelled_seconds_total", **key
        ), component
    # the second turn chained from the store over HTTP
    store = {"transport": "http", "source": "store"}
    assert value(after, "loopbench_server_context_resolved_total", **store) == 1
    # nothing is in flight between requests but the scrape itself
    assert value(after, "loopbench_server_http_requests_in_flight") == 1
    assert value(after, "loopbench_server_engine_running_streams") == 0
    assert value(after, "loopbench_server_api_queue_depth") == 0


def test_errors_are_counted_by_route_status_and_code(server: str) -> None:
    before = scrape(server)
    bad = httpx.post(
        f"{server}/responses", content=b"{not json", headers={"content-type": "application/json"}
    )
    assert bad.status_code == 400
    missing = httpx.get(f"{server}/responses/resp_nope", timeout=10)
    assert missing.status_code == 404
    assert httpx.get(server.removesuffix("/v1") + "/no/such/route", timeout=10).status_code == 404
    after = scrape(server)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert (
        errors(after, "http", "400", "invalid_json") - errors(before, "http", "400", "invalid_json")
        == 1
    )
    # the route template, not the path with its id
    template = {"method": "GET", "route": "/v1/responses/{response_id}", "status": "404"}
    assert grew("loopbench_server_http_requests_total", **template) == 1
    unmatched = {"method": "GET", "route": "unmatched", "status": "404"}
    assert grew("loopbench_server_http_requests_total", **unmatched) == 1
    assert not any("resp_nope" in str(k) or "/no/such" in str(k) for k in after)


def test_websocket_connections_while_one_is_open(server: str) -> None:
    async def scenario() -> None:
        before = await asyncio.to_thread(scrape, server)
        assert value(before, "loopbench_server_websocket_connections") == 0
        async with connect(ws_url(server)) as ws:
            during = await asyncio.to_thread(scrape, server)
            assert value(during, "loopbench_server_websocket_connections") == 1
            await ws.send(
                orjson.dumps(
                    {
                        "type": "response.create",
                        "model": "sim-model",
                        "input": "x",
                        "previous_response_id": "resp_unknown",
                    }
                ).decode()
            )
            event = orjson.loads(await asyncio.wait_for(ws.recv(), 10))
            assert event["type"] == "error"
        # the server notices the close a moment later; bounded wait
        deadline = time.monotonic() + 10
        while True:
            after = await asyncio.to_thread(scrape, server)
            if value(after, "loopbench_server_websocket_connections") == 0:
                break
            assert time.monotonic() < deadline, "the closed WebSocket is still counted as open"
            await asyncio.sleep(0.05)
        opened = "loopbench_server_websocket_connections_opened_total"
        assert value(after, opened) == value(before, opened) + 1
        assert errors(after, "websocket", "400", "previous_response_not_found") == 1

    asyncio.run(scenario())
