"""The official openai SDK as a real client of the reference server (PROTOCOL §1-§3)."""

from __future__ import annotations

import json

import httpx
import openai
import pytest
from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "name": "get_weather",
        "strict": True,
        "parameters": {
            "type": "object",
            "properties": {
                "location": {"type": "string"},
                "unit": {"type": "string", "enum": ["c", "f"]},
            },
            "required": ["location", "unit"],
            "additionalProperties": False,
        },
    }
]


@pytest.fixture()
def client(server_url: str) -> OpenAI:
    return OpenAI(
        api_key="sk-test", base_url=server_url, max_retries=0, _strict_response_validation=True
    )


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
        ok = http.post(
            "/responses",
            json={
                "model": "sim",
                "input": "still there?",
                "metadata": {"loopbench.output_tokens": "3"},
            },
        )
        assert ok.status_code == 200 and ok.json()["status"] == "completed"
