"""harness.wire.events: every builder sequence must validate against the official SDK types."""

from __future__ import annotations

import random
from typing import Any

import openai
import pydantic
import pytest
from openai import omit
from openai.lib.streaming.responses import ResponseStreamState
from openai.types.responses import Response, ResponseStreamEvent
from openai.types.responses.responses_server_event import ResponsesServerEvent

from harness.client.stream import ResponseStream
from harness.wire import events as ev
from harness.wire.errors import ProtocolError
from harness.wire.events import ResponseBuilder, usage
from tests.client.test_stream import stamps
from tests.function_tools import strict_tool

STREAM_EVENT = pydantic.TypeAdapter(ResponseStreamEvent)
WS_EVENT = pydantic.TypeAdapter(ResponsesServerEvent)

TOOLS = [strict_tool("get_weather", location={"type": "string"})]
REQUEST: dict[str, Any] = {
    "model": "sim-model",
    "input": "weather?",
    "tools": TOOLS,
    "tool_choice": "auto",
    "parallel_tool_calls": True,
    "store": False,
    "max_output_tokens": 64,
    "metadata": {"loopbench.output_tokens": "2"},
    "instructions": "be brief",
    "previous_response_id": "resp_prev",
}
RESPONSE_FIELDS = {
    *("id", "object", "created_at", "status", "completed_at", "background", "error"),
    *("incomplete_details", "instructions", "max_output_tokens", "max_tool_calls", "model"),
    *("output", "parallel_tool_calls", "previous_response_id", "reasoning", "service_tier"),
    *("store", "temperature", "text", "tool_choice", "tools", "top_p", "truncation", "user"),
    *("metadata", "usage"),
}


def builder(stream_id: str | None = None, request: dict[str, Any] | None = None) -> ResponseBuilder:
    return ResponseBuilder(
        "resp_0123",
        model="sim-model",
        created_at=1_751_569_118,
        request=REQUEST if request is None else request,
        stream_id=stream_id,
    )


def validate(events: list[dict[str, Any]]) -> None:
    """Strict SDK validation of every event; the loopbench-only response.done by its response."""
    for e in events:
        if e["type"] == ev.DONE:
            Response.model_validate(e["response"], strict=True)
            assert isinstance(e["sequence_number"], int)
        elif e["type"] == ev.ERROR and "error" in e:
            # the nested shape is typed only as the WebSocket error event
            WS_EVENT.validate_python(e, strict=True)
        elif e["type"] == ev.ERROR:
            # the flat shape is typed only as the SSE error event
            STREAM_EVENT.validate_python(e, strict=True)
        else:
            STREAM_EVENT.validate_python(e, strict=True)
            WS_EVENT.validate_python(e, strict=True)
    assert [e["sequence_number"] for e in events] == list(range(len(events)))


def text_answer(b: ResponseBuilder, pieces: list[str]) -> list[dict[str, Any]]:
    out = b.begin_message()
    out += [b.text_delta(p) for p in pieces]
    return out + b.end_message()


def call(b: ResponseBuilder, name: str, call_id: str, pieces: list[str]) -> list[dict[str, Any]]:
    out = b.begin_function_call(name, call_id)
    out += [b.arguments_delta(p) for p in pieces]
    return out + b.end_function_call()


def types(events: list[dict[str, Any]]) -> list[str]:
    return [e["type"] for e in events]


# --- codec ------------------------------------------------------------------------------------


def test_dumps_loads_round_trip_is_one_line() -> None:
    obj = {"type": "x", "text": "a\nb é", "n": [1, 2.5, None]}
    data = ev.dumps(obj)
    assert isinstance(data, bytes) and b"\n" not in data
    assert ev.loads(data) == obj
    assert ev.loads(data.decode()) == obj


@pytest.mark.parametrize(
    ("data", "fragment"),
    [
        (b"{not json", "invalid JSON"),
        (b"[1, 2]", "expected a JSON object, got list"),
        ("", "invalid JSON"),
    ],
)
def test_loads_rejects_with_clear_message(data: bytes | str, fragment: str) -> None:
    with pytest.raises(ProtocolError, match=fragment):
        ev.loads(data)


def test_new_id_is_prefixed_hex_and_seeded() -> None:
    a = ev.new_id("resp", random.Random(7))
    assert a == ev.new_id("resp", random.Random(7))
    prefix, hexpart = a.split("_")
    assert prefix == "resp" and len(hexpart) == 32 and int(hexpart, 16) >= 0
    rng = random.Random(1)
    assert len({ev.new_id("call", rng) for _ in range(100)}) == 100


def test_usage_has_every_required_field() -> None:
    u = usage(20, 8, 5)
    assert u == {
        "input_tokens": 20,
        "input_tokens_details": {"cached_tokens": 8, "cache_write_tokens": 0},
        "output_tokens": 5,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 25,
    }
    openai.types.responses.ResponseUsage.model_validate(u, strict=True)


def test_error_body_shape() -> None:
    body = ev.error_body(
        400,
        "previous_response_not_found",
        "Previous response with id 'resp_abc' not found.",
        "previous_response_id",
    )
    assert body == {
        "error": {
            "message": "Previous response with id 'resp_abc' not found.",
            "type": "invalid_request_error",
            "param": "previous_response_id",
            "code": "previous_response_not_found",
        }
    }
    assert ev.error_body(500, None, "x")["error"]["type"] == "server_error"
    assert (
        ev.error_body(429, "rate_limit_exceeded", "x", type_="tokens")["error"]["type"] == "tokens"
    )


def test_ws_error_event_shapes_validate() -> None:
    lane = ev.ws_error_event(400, "websocket_stream_limit_reached", "limit", stream_id="main")
    assert lane == {
        "type": "error",
        "status": 400,
        "stream_id": "main",
        "error": {
            "message": "limit",
            "type": "invalid_request_error",
            "param": None,
            "code": "websocket_stream_limit_reached",
        },
    }
    plain = ev.ws_error_event(400, "invalid_stream_id", "bad", param="stream_id")
    assert "stream_id" not in plain and "sequence_number" not in plain
    inside = ev.ws_error_event(500, "server_error", "boom", sequence_number=7)
    assert inside["sequence_number"] == 7
    for e in (lane, plain, inside):
        m = WS_EVENT.validate_python(e, strict=True)
        assert m.type == "error"


# --- builder ----------------------------------------------------------------------------------


def test_text_answer_sequence_validates_and_matches_protocol_order() -> None:
    b = builder()
    events = b.start() + text_answer(b, [" the", " and"])
    events.append(
        b.complete(usage(20, 0, 2), {"sim_timing": {"decode": 2.0}}, completed_at=1_751_569_119)
    )
    validate(events)
    assert types(events) == [
        "response.created",
        "response.in_progress",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.delta",
        "response.output_text.delta",
        "response.output_text.done",
        "response.content_part.done",
        "response.output_item.done",
        "response.completed",
    ]
    created = events[0]["response"]
    assert (
        created["status"] == "in_progress" and created["output"] == [] and created["usage"] is None
    )
    assert events[2]["item"]["status"] == "in_progress" and events[2]["item"]["content"] == []
    assert events[6]["text"] == " the and"
    assert events[8]["item"]["content"][0]["text"] == " the and"
    final = events[-1]["response"]
    assert final["status"] == "completed" and final["completed_at"] == 1_751_569_119
    assert final["sim_timing"] == {"decode": 2.0}
    assert final["output"] == [events[8]["item"]]
    assert all("stream_id" not in e for e in events)
    parsed = Response.model_validate(b.response_object(), strict=True)
    assert parsed.output_text == " the and"
    assert parsed.usage is not None and parsed.usage.total_tokens == 22


def test_response_object_has_every_protocol_field_and_echoes_request() -> None:
    b = builder()
    b.start()
    text_answer(b, ["abcd"])
    b.complete(usage(3, 0, 1))
    obj = b.response_object()
    assert set(obj) >= RESPONSE_FIELDS
    assert obj["model"] == "sim-model" and obj["tools"] == TOOLS and obj["store"] is False
    assert obj["max_output_tokens"] == 64 and obj["instructions"] == "be brief"
    assert obj["previous_response_id"] == "resp_prev"
    assert obj["metadata"] == {"loopbench.output_tokens": "2"}
    defaults = ResponseBuilder("resp_1", created_at=5, request={"model": "m"}).response_object()
    assert (
        defaults["model"] == "m" and defaults["tools"] == [] and defaults["tool_choice"] == "auto"
    )
    assert defaults["parallel_tool_calls"] is True and defaults["truncation"] == "disabled"
    Response.model_validate(defaults, strict=True)


def test_function_call_sequence_passes_sdk_stream_accumulator() -> None:
    b = builder(stream_id="lane-a")
    events = b.start() + call(b, "get_weather", "call_1", ['{"location":', '"Paris"}'])
    events.append(b.complete(usage(30, 10, 5)))
    validate(events)
    assert types(events)[2:] == [
        "response.output_item.added",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.delta",
        "response.function_call_arguments.done",
        "response.output_item.done",
        "response.completed",
    ]
    assert all(e["stream_id"] == "lane-a" for e in events)
    assert events[5]["arguments"] == '{"location":"Paris"}'
    # The SDK's own stream helper enforces the §1.3 invariants and parses strict-tool arguments.
    state: ResponseStreamState[object] = ResponseStreamState(input_tools=TOOLS, text_format=omit)
    final = None
    for e in events:
        for out in state.handle_event(STREAM_EVENT.validate_python(e, strict=True)):
            if out.type == "response.completed":
                final = out.response
    assert final is not None
    assert final.output[0].type == "function_call"
    assert final.output[0].parsed_arguments == {"location": "Paris"}


def test_two_parallel_calls_get_consecutive_output_indexes() -> None:
    b = builder()
    events = b.start() + call(b, "get_weather", "call_a", ['{"location":"A"}'])
    events += call(b, "get_weather", "call_b", ['{"location":"B"}'])
    events.append(b.complete(usage(30, 0, 8)))
    validate(events)
    added = [e for e in events if e["type"] == ev.OUTPUT_ITEM_ADDED]
    assert [e["output_index"] for e in added] == [0, 1]
    assert added[0]["item"]["id"] != added[1]["item"]["id"]
    final = events[-1]["response"]["output"]
    assert [i["call_id"] for i in final] == ["call_a", "call_b"]
    assert all(i["status"] == "completed" for i in final)


def test_incomplete_sequence() -> None:
    b = builder()
    events = b.start() + b.begin_message() + [b.text_delta(" abc")] + b.end_message("incomplete")
    events.append(b.incomplete("max_output_tokens", usage(5, 0, 1)))
    validate(events)
    resp = events[-1]["response"]
    assert events[-1]["type"] == "response.incomplete"
    assert resp["status"] == "incomplete" and resp["incomplete_details"] == {
        "reason": "max_output_tokens"
    }
    assert resp["completed_at"] is None and resp["output"][0]["status"] == "incomplete"


@pytest.mark.parametrize("nested", [True, False])
def test_failed_sequence_nested_and_flat(nested: bool) -> None:
    b = builder(stream_id="s1")
    events = b.start() + b.begin_message() + [b.text_delta(" x")]
    events += b.fail("server_error", "engine crashed", nested=nested)
    validate(events)
    err, failed = events[-2], events[-1]
    if nested:
        assert err["error"] == {
            "type": "server_error",
            "code": "server_error",
            "message": "engine crashed",
            "param": None,
        }
        assert "code" not in err
    else:
        assert (err["code"], err["message"], err["param"]) == (
            "server_error",
            "engine crashed",
            None,
        )
        assert "error" not in err
    assert err["stream_id"] == failed["stream_id"] == "s1"
    assert failed["response"]["status"] == "failed"
    assert failed["response"]["error"] == {"code": "server_error", "message": "engine crashed"}
    assert failed["response"]["output"] == []  # the half-written message is dropped


def test_fail_maps_unknown_code_in_response_error_only() -> None:
    b = builder()
    events = b.start() + b.fail("engine_overloaded", "busy")
    validate(events)
    assert events[-2]["error"]["code"] == "engine_overloaded"
    assert events[-1]["response"]["error"]["code"] == "server_error"


def test_pause_resume_continues_sequence_numbers() -> None:
    b = builder()
    events = b.start() + call(b, "get_weather", "call_1", ['{"location":"P"}'])
    pause = b.pause({"sim_timing": {"decode": 1.0}})
    events.append(pause)
    events += text_answer(b, [" ok"])
    events.append(b.complete(usage(40, 0, 6)))
    validate(events)
    assert pause["type"] == "response.done" and pause["response"]["status"] == "in_progress"
    assert pause["response"]["output"][0]["call_id"] == "call_1"
    assert pause["response"]["sim_timing"] == {"decode": 1.0}
    after = events[events.index(pause) + 1]
    assert after["sequence_number"] == pause["sequence_number"] + 1 and after["output_index"] == 1
    assert [i["type"] for i in events[-1]["response"]["output"]] == ["function_call", "message"]


def test_builder_rejects_misuse() -> None:
    b = builder()
    b.start()
    with pytest.raises(ValueError, match="no open message"):
        b.text_delta("x")
    b.begin_message()
    with pytest.raises(ValueError, match="still open"):
        b.begin_function_call("f", "c")
    with pytest.raises(ValueError, match="still open"):
        b.complete(usage(1, 0, 0))
    b.end_message()
    b.complete(usage(1, 0, 0))
    with pytest.raises(ValueError, match="already ended"):
        b.complete(usage(1, 0, 0))


# --- builder output through the client state machine -------------------------------------------


def test_builder_output_feeds_response_stream_into_record() -> None:
    b = builder(stream_id="lane")
    events = b.start() + call(b, "get_weather", "call_1", ['{"loc', 'ation":"P"}'])
    sim = {
        "api_pre": 1.5,
        "api_queue": 0,
        "engine_queue": 0.25,
        "prefill": 3.0,
        "decode": 4.0,
        "api_post": 0.5,
        "cache": "hit",
    }
    events.append(b.complete(usage(50, 40, 5), {"sim_timing": sim}))
    s = ResponseStream(sent_ns=1_000)
    for i, e in enumerate(events):
        s.feed(ev.loads(ev.dumps(e)), 2_000 + i * 1_000)
    assert s.done and s.status == "completed" and s.response_id == "resp_0123"
    assert [c["call_id"] for c in s.function_calls] == ["call_1"]
    rec = s.fill()
    assert (rec.status, rec.response_id) == ("completed", "resp_0123")
    assert stamps(rec) == (1_000, 2_000, 5_000, 6_000, 2_000 + (len(events) - 1) * 1_000)
    assert (rec.input_tokens, rec.cached_tokens, rec.output_tokens) == (50, 40, 5)
    assert rec.delta_events == 2 and rec.itl_ns == [1_000]
    assert (rec.sim_api_pre_ms, rec.sim_engine_queue_ms, rec.sim_api_post_ms) == (1.5, 0.25, 0.5)
    assert rec.sim_ttft_ms == -1.0 and rec.sim_cache == "hit"
