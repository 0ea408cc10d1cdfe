"""The official openai SDK as a real client of the reference server (docs/protocol.md §1–§3)."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import openai
import pytest
import websockets
from openai import AsyncOpenAI, OpenAI

from tests.function_tools import strict_tool
from tests.server.conftest import configured_server

TOOLS = [
    strict_tool(
        "get_weather", location={"type": "string"}, unit={"type": "string", "enum": ["c", "f"]}
    )
]


@pytest.fixture()
def client(server_url: str) -> Iterator[OpenAI]:
    with OpenAI(
        api_key="sk-test", base_url=server_url, max_retries=0, _strict_response_validation=True
    ) as strict:
        yield strict


def test_streaming_text_answer_strict(client: OpenAI) -> None:
    stream = client.responses.create(
        model="sim", input="hello", stream=True, metadata={"loopbench.output_tokens": "20"}
    )
    types = []
    text = []
    final = None
    for event in stream:
        types.append(event.type)
        if event.type == "response.output_text.delta":
            text.append(event.delta)
        if event.type == "response.completed":
            final = event.response
    assert types[:4] == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
    ]
    assert types[-4:] == [
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert final is not None
    assert final.usage is not None and final.usage.output_tokens == 20
    assert final.output_text == "".join(text)
    assert len("".join(text)) == 80  # 20 tokens of 4 characters


def test_streaming_function_call_strict(client: OpenAI) -> None:
    stream = client.responses.create(
        model="sim", input="weather in Paris?", tools=TOOLS, tool_choice="required", stream=True
    )
    done_items = [e.item for e in stream if e.type == "response.output_item.done"]
    assert len(done_items) == 1
    call = done_items[0]
    assert call.type == "function_call" and call.name == "get_weather"
    args = json.loads(call.arguments)
    assert set(args) == {"location", "unit"} and args["unit"] in ("c", "f")


def test_stream_helper_final_response(client: OpenAI) -> None:
    with client.responses.stream(
        model="sim", input="hi", metadata={"loopbench.output_tokens": "12"}
    ) as stream:
        final = stream.get_final_response()
    assert final.status == "completed"
    assert final.usage is not None and final.usage.output_tokens == 12


def test_non_streaming_create(client: OpenAI) -> None:
    resp = client.responses.create(
        model="sim", input="hi", metadata={"loopbench.output_tokens": "7"}
    )
    assert resp.status == "completed"
    assert resp.usage is not None and resp.usage.output_tokens == 7
    assert resp._request_id and resp._request_id.startswith("req_")


# openai 3.57 opens its sync WebSocket without a context manager, which websockets >= 17.1
# deprecates; the warning is the SDK's, not the server's.
SDK_WS_LEGACY = pytest.mark.filterwarnings(
    "ignore:connect\\(\\) must be used as a context manager:DeprecationWarning"
)


@SDK_WS_LEGACY
def test_websocket_three_turn_tool_loop(server_url: str) -> None:
    client = OpenAI(api_key="sk-test", base_url=server_url, max_retries=0)
    with client.responses.connect() as conn:
        prev = None
        calls_seen = 0
        new_input: object = "weather in Paris, then Rome?"
        for turn in range(3):
            kwargs = {"previous_response_id": prev} if prev else {}
            conn.response.create(
                model="sim",
                store=False,
                input=new_input,  # type: ignore[arg-type]
                tools=TOOLS,  # type: ignore[arg-type]
                tool_choice="required" if turn < 2 else "none",
                **kwargs,  # type: ignore[arg-type]
            )
            calls = []
            status = None
            for event in conn:
                if event.type == "error":
                    raise AssertionError(f"error event: {event}")
                if event.type == "response.output_item.done" and event.item.type == "function_call":
                    calls.append(event.item)
                if event.type in ("response.completed", "response.failed", "response.incomplete"):
                    prev = event.response.id
                    status = event.response.status
                    cache = getattr(event.response, "sim_timing", None) or (
                        event.response.model_extra or {}
                    ).get("sim_timing")
                    break
            assert status == "completed"
            if turn > 0:
                assert cache is not None and cache["cache"] == "hit"
            calls_seen += len(calls)
            new_input = [
                {"type": "function_call_output", "call_id": c.call_id, "output": '{"temp_c": 21}'}
                for c in calls
            ]
        assert calls_seen == 2


def test_unknown_previous_response_is_bad_request(client: OpenAI) -> None:
    with pytest.raises(openai.BadRequestError) as info:
        client.responses.create(model="sim", input="hi", previous_response_id="resp_nope")
    assert info.value.code == "previous_response_not_found"
    assert info.value.param == "previous_response_id"


def test_malformed_body_gets_openai_error_and_server_keeps_serving(server_url: str) -> None:
    with httpx.Client(base_url=server_url, timeout=30) as http:
        bad = http.post(
            "/responses", content=b"{not json", headers={"content-type": "application/json"}
        )
        assert bad.status_code == 400
        err = bad.json()["error"]
        assert err["code"] == "invalid_json" and err["type"] == "invalid_request_error"
        assert "message" in err and "param" in err
        assert bad.headers.get("x-request-id", "").startswith("req_")
        wrong = http.post("/responses", json={"model": "sim", "input": 42})
        assert wrong.status_code == 400 and wrong.json()["error"]["param"] == "input"
        # A model of the wrong type is a type error; a missing or empty one is missing.
        for body, code in (
            ({"model": 5, "input": "hi"}, "invalid_type"),
            ({"input": "hi"}, "missing_required_parameter"),
            ({"model": "", "input": "hi"}, "missing_required_parameter"),
        ):
            answer = http.post("/responses", json=body)
            assert answer.status_code == 400, body
            assert answer.json()["error"]["code"] == code, body
            assert answer.json()["error"]["param"] == "model", body
        ok = http.post(
            "/responses",
            json={
                "model": "sim",
                "input": "still there?",
                "metadata": {"loopbench.output_tokens": "3"},
            },
        )
        assert ok.status_code == 200 and ok.json()["status"] == "completed"


# --- the complete contract (issue 3) ----------------------------------------------------------

READ_FILE = strict_tool(
    "read_file",
    path={"type": "string"},
    encoding={"type": "string", "enum": ["utf-8", "latin-1"]},
    max_lines={"type": "integer", "minimum": 1, "maximum": 500},
    follow={"type": "boolean"},
)


@pytest.fixture(scope="module")
def auth_server() -> Iterator[str]:
    with configured_server("--api-key", "sk-good", "--ws-max-lifetime-s", "1") as url:
        yield url


@pytest.fixture(scope="module")
def rate_server() -> Iterator[str]:
    with configured_server("--rate-limit-rps", "0.5", "--rate-limit-burst", "1") as url:
        yield url


@pytest.fixture(scope="module")
def flat_server() -> Iterator[str]:
    with configured_server(
        "--sse-error-shape", "flat", "--max-body-bytes", "4096", "--max-connections", "2"
    ) as url:
        yield url


def _conforms(args: dict[str, Any], schema: dict[str, Any]) -> None:
    props = schema["properties"]
    assert set(args) == set(schema["required"])
    for key, value in args.items():
        spec = props[key]
        kind = {"string": str, "integer": int, "boolean": bool, "number": (int, float)}[
            spec["type"]
        ]
        assert isinstance(value, kind), (key, value)
        if "enum" in spec:
            assert value in spec["enum"]
        if spec["type"] == "integer":
            assert spec["minimum"] <= value <= spec["maximum"]


def test_parallel_function_calls_strict_and_schema_conforming(client: OpenAI) -> None:
    resp = client.responses.create(
        model="sim",
        input="read three files",
        tools=[READ_FILE],  # type: ignore[list-item]
        tool_choice="required",
        parallel_tool_calls=True,
        metadata={"loopbench.parallel_calls": "3", "loopbench.output_tokens": "60"},
    )
    calls = [item for item in resp.output if item.type == "function_call"]
    assert len(calls) == 3 and len({c.call_id for c in calls}) == 3
    for call in calls:
        _conforms(json.loads(call.arguments), READ_FILE["parameters"])  # type: ignore[arg-type]
    assert resp.usage is not None
    assert resp.usage.input_tokens_details.cached_tokens >= 0
    assert resp.usage.input_tokens_details.cache_write_tokens >= 0  # type: ignore[attr-defined]


def test_incomplete_at_max_output_tokens_strict(client: OpenAI) -> None:
    resp = client.responses.create(
        model="sim",
        input="long please",
        max_output_tokens=16,
        metadata={"loopbench.output_tokens": "40"},
    )
    assert resp.status == "incomplete"
    assert resp.incomplete_details is not None
    assert resp.incomplete_details.reason == "max_output_tokens"
    assert resp.usage is not None and resp.usage.output_tokens == 16
    events = list(
        client.responses.create(
            model="sim",
            input="long please",
            max_output_tokens=16,
            metadata={"loopbench.output_tokens": "40"},
            stream=True,
        )
    )
    assert events[-1].type == "response.incomplete"
    done = [e for e in events if e.type == "response.output_item.done"]
    assert done[0].item.status == "incomplete"  # type: ignore[union-attr]


def test_http_chain_rehydrates_from_the_store(client: OpenAI) -> None:
    first = client.responses.create(
        model="sim",
        input="a" * 400,
        instructions="be brief",
        metadata={"loopbench.output_tokens": "5"},
    )
    second = client.responses.create(
        model="sim",
        input="next",
        previous_response_id=first.id,
        instructions="be brief",
        metadata={"loopbench.output_tokens": "5"},
    )
    timing = (second.model_extra or {})["sim_timing"]
    assert timing["cache"] == "store"
    assert first.usage is not None and second.usage is not None
    # instructions are not inherited: the second context holds them once, not twice
    grown = second.usage.input_tokens - first.usage.input_tokens
    assert grown == first.usage.output_tokens + 4 + 1 + 4  # output item, then "next" with framing


def test_status_codes_map_to_sdk_exceptions(
    client: OpenAI, server_url: str, auth_server: str, rate_server: str, flat_server: str
) -> None:
    bad_tool = {"type": "function", "name": "t", "parameters": {"type": "string"}}
    with pytest.raises(openai.BadRequestError) as bad:
        client.responses.create(model="sim", input="x", tools=[bad_tool])  # type: ignore[list-item]
    assert bad.value.param == "tools[0].parameters" and bad.value.request_id

    with (
        pytest.raises(openai.AuthenticationError) as auth,
        OpenAI(api_key="sk-wrong", base_url=auth_server, max_retries=0) as wrong,
    ):
        wrong.responses.create(model="sim", input="x")
    assert auth.value.code == "invalid_api_key" and auth.value.status_code == 401
    with OpenAI(api_key="sk-good", base_url=auth_server, max_retries=0) as good:
        ok = good.responses.create(
            model="sim", input="x", metadata={"loopbench.output_tokens": "2"}
        )
    assert ok.status == "completed"
    with httpx.Client(base_url=auth_server, timeout=30) as http:
        missing = http.post("/responses", json={"model": "sim", "input": "x"})
        assert missing.status_code == 401 and missing.json()["error"]["code"] == "invalid_api_key"

    with pytest.raises(openai.NotFoundError) as nf:
        client.models.retrieve("no-such-route")
    assert nf.value.status_code == 404

    with (
        OpenAI(api_key="sk", base_url=rate_server, max_retries=0) as rated,
        pytest.raises(openai.RateLimitError) as rl,
    ):
        for _ in range(3):
            rated.responses.create(
                model="sim", input="x", metadata={"loopbench.output_tokens": "2"}
            )
    assert rl.value.code == "rate_limit_exceeded"
    assert int(rl.value.response.headers["retry-after"]) >= 1
    assert int(rl.value.response.headers["retry-after-ms"]) > 0

    with (
        OpenAI(api_key="sk", base_url=flat_server, max_retries=0) as small,
        pytest.raises(openai.APIStatusError) as big,
    ):
        small.responses.create(model="sim", input="y" * 5000)
    assert big.value.status_code == 413 and big.value.code == "request_too_large"
    with httpx.Client(base_url=server_url, timeout=30) as http:
        unknown = http.get("/nowhere")
        assert unknown.status_code == 404 and unknown.json()["error"]["code"] == "not_found"
        assert unknown.headers["x-request-id"].startswith("req_")


def test_connection_limit_gives_503(flat_server: str) -> None:
    url = flat_server.replace("http://", "ws://") + "/responses"

    async def main() -> None:
        async with websockets.connect(url), websockets.connect(url):
            with pytest.raises(websockets.exceptions.InvalidStatus) as info:
                async with websockets.connect(url):
                    pass
            assert info.value.response.status_code == 503
            async with httpx.AsyncClient(base_url=flat_server) as http:
                busy = await http.post("/responses", json={"model": "sim", "input": "x"})
                assert busy.status_code == 503
                assert busy.json()["error"]["code"] == "too_many_connections"
        with OpenAI(api_key="sk", base_url=flat_server, max_retries=0) as sdk:
            async with websockets.connect(url), websockets.connect(url):
                with pytest.raises(openai.InternalServerError):
                    await asyncio.to_thread(sdk.responses.create, model="sim", input="x")

    asyncio.run(main())


def test_mid_stream_failure_nested_raises_flat_yields(client: OpenAI, flat_server: str) -> None:
    fail = {"loopbench.fail": "mid_stream"}
    seen: list[str] = []
    with pytest.raises(openai.APIError, match="injected"):
        for event in client.responses.create(model="sim", input="x", stream=True, metadata=fail):
            seen.append(event.type)
    assert "response.output_text.delta" in seen  # it failed after streaming had started
    with OpenAI(
        api_key="sk", base_url=flat_server, max_retries=0, _strict_response_validation=True
    ) as flat:
        events = list(flat.responses.create(model="sim", input="x", stream=True, metadata=fail))
    assert [e.type for e in events[-2:]] == ["error", "response.failed"]
    assert events[-2].code == "server_error"  # type: ignore[union-attr]
    failed = events[-1].response  # type: ignore[union-attr]
    assert failed.status == "failed" and failed.error is not None
    assert failed.error.code == "server_error"


@SDK_WS_LEGACY
def test_websocket_previous_response_not_found_and_generate_false(server_url: str) -> None:
    client = OpenAI(api_key="sk-test", base_url=server_url, max_retries=0)
    with client.responses.connect() as conn:
        conn.response.create(model="sim", input="x", store=False, previous_response_id="resp_gone")
        event = next(iter(conn))
        assert event.type == "error"
        assert event.error.code == "previous_response_not_found"  # type: ignore[union-attr]
        conn.response.create(model="sim", input="prompt", store=False, generate=False)
        types = []
        for event in conn:
            types.append(event.type)
            if event.type == "response.completed":
                warm = event.response
                break
        assert types == ["response.created", "response.in_progress", "response.completed"]
        assert warm.output == [] and warm.usage is not None and warm.usage.output_tokens == 0
        conn.response.create(
            model="sim",
            input="go",
            store=False,
            previous_response_id=warm.id,
            metadata={"loopbench.output_tokens": "3"},
        )
        for event in conn:
            if event.type == "response.completed":
                assert (event.response.model_extra or {})["sim_timing"]["cache"] == "hit"
                break


def test_websocket_lanes_interleave_on_one_async_connection(server_url: str) -> None:
    async def main() -> dict[str, list[int]]:
        client = AsyncOpenAI(api_key="sk-test", base_url=server_url, max_retries=0)
        order: dict[str, list[int]] = {"a": [], "b": []}
        ids: dict[str, str] = {}
        async with client.responses.connect() as conn:
            for lane in ("a", "b"):
                await conn.response.create(
                    model="sim",
                    input=f"lane {lane}",
                    store=False,
                    stream_id=lane,
                    metadata={"loopbench.output_tokens": "200"},
                )
            n = 0
            async for event in conn:
                lane = getattr(event, "stream_id", None) or (event.model_extra or {}).get(
                    "stream_id"
                )
                assert lane in order
                order[lane].append(n)
                n += 1
                if event.type == "response.completed":
                    ids[lane] = event.response.id
                    if len(ids) == 2:
                        break
        await client.close()
        return order

    order = asyncio.run(main())
    # Each lane's events overlap the other's: neither finished before the other started.
    assert order["a"][0] < order["b"][-1] and order["b"][0] < order["a"][-1]
    assert min(order["b"]) < max(order["a"]) and min(order["a"]) < max(order["b"])


@SDK_WS_LEGACY
def test_websocket_sdk_auto_reconnects_after_the_lifetime_limit(auth_server: str) -> None:
    client = OpenAI(api_key="sk-good", base_url=auth_server, max_retries=0)
    reconnects: list[int] = []
    lock = threading.Lock()
    box: dict[str, Any] = {}

    def on_reconnecting(event: Any) -> None:
        with lock:
            reconnects.append(event.close_code)
        # Sends made while reconnecting are queued and flushed on the new socket.
        box["conn"].response.create(model="sim", input="full context again", store=False)
        return None

    meta = {"loopbench.output_tokens": "3"}
    with client.responses.connect(on_reconnecting=on_reconnecting, initial_delay=0.05) as conn:
        box["conn"] = conn
        conn.response.create(model="sim", input="hi", store=False, metadata=meta)
        completed = 0
        errors: list[str] = []
        for event in conn:
            if event.type == "response.completed":
                completed += 1
                if completed == 1:
                    threading.Event().wait(1.1)  # outlive the 1 s connection lifetime
                    conn.response.create(model="sim", input="late", store=False, metadata=meta)
                else:
                    break
            elif event.type == "error":
                errors.append(event.error.code)  # type: ignore[union-attr]
    assert errors == ["websocket_connection_limit_reached"]
    assert reconnects == [1001] and completed == 2


def test_websocket_upgrade_is_refused_with_401_before_101(auth_server: str) -> None:
    async def main() -> None:
        aclient = AsyncOpenAI(api_key="sk-wrong", base_url=auth_server, max_retries=0)
        with pytest.raises(websockets.exceptions.InvalidStatus) as info:
            async with aclient.responses.connect():
                pass
        assert info.value.response.status_code == 401
        assert b"invalid_api_key" in info.value.response.body
        await aclient.close()

    asyncio.run(main())
