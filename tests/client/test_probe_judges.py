"""The probe's judges, fed bytes: the reference server's recorded answers (tests/client/data/probe,
recorded once by its ``record.py``) and hand-made ones for the gaps of foreign servers.

Each answer is read as a run reads it (the SSE decoder, the chat and messages translators, the
Responses stream state machine) and judged without a server (docs/probe.md).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.client.probe import (
    CHAINING,
    CHAT_TOOLS,
    FEATURES,
    KEY_HINT,
    MESSAGES_CACHE,
    WEBSOCKET,
    Finding,
    judge_chain,
    judge_chat,
    judge_chat_cached,
    judge_chat_tools,
    judge_chat_usage,
    judge_lanes,
    judge_messages,
    judge_prompt_cache,
    judge_sse,
    judge_upgrade,
    judge_ws,
    refusal,
    table,
)
from harness.client.probe_answers import (
    CHAT_API,
    MESSAGES_API,
    PROBE_TOOL,
    RESPONSES_API,
    StreamReading,
    chat_create,
    http_create,
    messages_create,
    read_body,
    ws_create,
)
from harness.wire.sse import encode_event
from harness.wire.transports import transport_spec
from tests.foreign_servers import canned_events

DATA = Path(__file__).parent / "data" / "probe"
SSE = "text/event-stream"
CHAT_URL = "http://h/v1/chat/completions"
WS_URL = "ws://h/v1/responses"


def recorded(name: str) -> bytes:
    return (DATA / name).read_bytes()


def chat_stream(*deltas: dict[str, Any], finish: str, usage: bool = True) -> bytes:
    """A Chat Completions stream as vLLM sends one: a role chunk, ``deltas``, the finish
    reason, the usage chunk, ``[DONE]``."""
    head = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "model": "m"}
    chunks = [{**head, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}]
    chunks += [{**head, "choices": [{"index": 0, "delta": d}]} for d in deltas]
    chunks.append({**head, "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]})
    if usage:
        chunks.append(
            {**head, "choices": [], "usage": {"prompt_tokens": 9, "completion_tokens": 48}}
        )
    return b"".join(f"data: {json.dumps(c)}\n\n".encode() for c in chunks) + b"data: [DONE]\n\n"


def call(arguments: str, *, name: str | None = None) -> dict[str, Any]:
    fn: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        fn["name"] = name
    return {"tool_calls": [{"index": 0, "id": "call_1", "type": "function", "function": fn}]}


# -- the reference server's answers -----------------------------------------------------------


def test_the_reference_servers_answers_pass_every_check() -> None:
    """The recorded answers give docs/probe.md's table, read by the run's own state machine."""
    responses = read_body(RESPONSES_API, recorded("responses.sse"))
    assert judge_sse("U", 200, SSE, responses) == Finding(
        "sse",
        True,
        "POST U answered 200 text/event-stream: 10 events ending with response.completed",
    )
    chat = read_body(CHAT_API, recorded("chat.sse"))
    assert judge_chat("U", 200, SSE, chat).evidence == (
        "POST U answered 200 text/event-stream: 5 chunks, finish_reason stop, then data: [DONE]"
    )
    assert judge_chat_usage(chat).evidence == (
        "a chunk carried usage: prompt_tokens 15, completion_tokens 16"
    )
    assert judge_chat_cached(chat).evidence == (
        "usage.prompt_tokens_details.cached_tokens reported: 15 of 15 prompt tokens"
    )
    tools = read_body(CHAT_API, recorded("chat_tools.sse"))
    assert judge_chat_tools("U", 200, SSE, tools) == Finding(
        CHAT_TOOLS,
        True,
        f"a call to {PROBE_TOOL} streamed in 7 tool-call deltas, finish_reason tool_calls",
    )
    messages = read_body(MESSAGES_API, recorded("messages.sse"))
    assert judge_messages("U", 200, SSE, messages).evidence == (
        "POST U answered 200 text/event-stream: message_start ... message_stop in 8 events, "
        "stop_reason end_turn"
    )


def test_the_table_names_each_feature() -> None:
    """(Was an end-to-end CLI test against the reference server.)"""
    findings = [Finding(f, True, f"{f} evidence") for f, _ in FEATURES]
    shown = table("u", findings)
    rows = [line.strip() for line in shown.splitlines()]
    for feature, label in FEATURES:
        i = next(i for i, row in enumerate(rows) if row.startswith(label))
        assert rows[i].endswith(" yes") and rows[i + 1] == f"{feature} evidence"
    assert "APIs: Responses API yes, Chat Completions API yes, Anthropic Messages API yes" in shown


def test_a_websocket_exchange_is_read_one_message_at_a_time() -> None:
    lines = (DATA / "ws_lane.jsonl").read_text().splitlines()
    reading = StreamReading()
    ended = [reading.feed(line) for line in lines]
    assert ended == [False] * (len(lines) - 1) + [True]  # the edge stops at the terminal event
    assert judge_ws(WS_URL, reading).supported is True
    assert judge_lanes(reading).evidence == "stream_id 'loopbench-probe' echoed in all 10 events"
    # the same events without the lane's stream_id in one of them: no lanes
    bare = StreamReading()
    for i, line in enumerate(lines):
        event = json.loads(line)
        if i == 3:
            event.pop("stream_id")
        bare.feed(json.dumps(event))
    assert judge_lanes(bare).supported is False


def test_the_requests_are_the_transports_bodies_of_a_one_message_turn() -> None:
    """No instructions, no tools unless the check is about them, no loopbench.* hints."""
    plain = chat_create("m")
    assert plain["messages"] == [{"role": "user", "content": plain["messages"][0]["content"]}]
    assert "tools" not in plain and "tool_choice" not in plain
    assert plain["stream_options"] == {"include_usage": True}
    forced = chat_create("m", tools=True)
    assert forced["tool_choice"] == "required" and forced["parallel_tool_calls"] is True
    assert forced["tools"][0]["function"]["name"] == PROBE_TOOL
    assert "instructions" not in http_create("m", store=False)
    chained = http_create("m", store=True, previous_response_id="resp_1")
    assert chained["store"] is True and chained["previous_response_id"] == "resp_1"
    assert ws_create("m", generate=False)["generate"] is False
    assert "system" not in messages_create("m") and "tool_choice" not in messages_create("m")
    cached = messages_create("m", cached=True)
    assert cached["system"][0]["cache_control"] == {"type": "ephemeral"}


# -- foreign servers' gaps ---------------------------------------------------------------------


def test_a_tool_call_cut_off_by_the_token_limit_is_not_streamed() -> None:
    """A forced call that runs into max_completion_tokens: a call opened and streamed, but not
    a complete one, so "yes" would be a guess (the old probe said yes)."""
    cut = read_body(
        CHAT_API,
        chat_stream(call("", name=PROBE_TOOL), call('{"text": "'), call("aaaa"), finish="length"),
    )
    found = judge_chat_tools(CHAT_URL, 200, SSE, cut)
    assert found.supported is None, found
    assert found.evidence == (
        f"a call to {PROBE_TOOL} was cut off by finish_reason length after 3 tool-call deltas: "
        "no complete call within 512 tokens, so whether calls are streamed cannot be told"
    )
    assert refusal([found], [transport_spec("chat")], "u") is None


def test_a_tool_call_delivered_in_one_delta_arrives_whole() -> None:
    """vLLM withholds a forced call until its JSON parses and sends it whole: not streamed,
    though a run still goes (its tool-call turns are measured for what they are)."""
    whole = read_body(
        CHAT_API, chat_stream(call('{"text": "ok"}', name=PROBE_TOOL), finish="tool_calls")
    )
    found = judge_chat_tools(CHAT_URL, 200, SSE, whole)
    assert found == Finding(
        CHAT_TOOLS,
        False,
        f"a call to {PROBE_TOOL} arrived whole in one tool-call delta, finish_reason tool_calls: "
        "not streamed (arrives whole)",
        runs_anyway=True,
    )
    assert refusal([found], [transport_spec("chat")], "u") is None
    assert "  tool calls streamed  no\n" in table("u", [found])
    # the name in one delta and the whole arguments in the next: two deltas, streamed
    two = read_body(
        CHAT_API,
        chat_stream(call("", name=PROBE_TOOL), call('{"text": "ok"}'), finish="tool_calls"),
    )
    assert judge_chat_tools(CHAT_URL, 200, SSE, two).supported is True


def test_a_text_answer_to_a_forced_call_refuses_a_chat_run() -> None:
    text = read_body(CHAT_API, chat_stream({"content": "ok"}, finish="stop"))
    found = judge_chat_tools(CHAT_URL, 200, SSE, text)
    assert found.supported is False and not found.runs_anyway
    assert refusal([found], [transport_spec("chat")], "u") == (
        f"transport chat cannot run against u: {found.evidence}"
    )


def test_a_stream_ending_in_an_error_event_is_no_answer() -> None:
    """The reference server's first events, then the server's error: unknown, and it says why."""
    head = recorded("responses.sse").split(b"\n\n")[:3]
    error = {
        "type": "error",
        "sequence_number": 3,
        "error": {"code": "server_error", "message": "m"},
    }
    body = b"\n\n".join(head) + b"\n\n" + f"data: {json.dumps(error)}\n\n".encode()
    found = judge_sse("U", 200, SSE, read_body(RESPONSES_API, body))
    assert found.supported is None and found.stopped_by == "server", found
    assert found.evidence == (
        "POST U answered 200 text/event-stream, but the server answered with an error "
        "(server_error): m (a server error, not an answer about the Responses API; try again later)"
    )


def test_a_json_answer_to_a_streamed_request_is_no_sse() -> None:
    """(Was an end-to-end probe and run against a JSON-not-SSE server.)"""
    got = read_body(RESPONSES_API, json.dumps({"id": "resp_1", "object": "response"}).encode())
    found = judge_sse("U", 200, "application/json; charset=utf-8", got)
    assert found == Finding("sse", False, "POST U answered 200 application/json, not an SSE stream")
    assert refusal([found], [transport_spec("http")], "u") == (
        f"transport http cannot run against u: {found.evidence}"
    )


def test_a_server_that_ignores_previous_response_id_is_caught() -> None:
    """Usage as if nothing was chained: accepted but ignored, and http-chained refused.
    (Was an end-to-end probe and run against a canned SSE server.)"""

    def canned(rid: str) -> StreamReading:
        return read_body(RESPONSES_API, b"".join(encode_event(e) for e in canned_events(rid)))

    first, second = canned("resp_1"), canned("resp_2")
    found = judge_chain(CHAINING, "POST U", first, second)
    assert found == Finding(
        CHAINING,
        False,
        "POST U: previous_response_id was accepted but ignored: input_tokens 10 -> 10, "
        "expected at least 12 with the history",
    )
    cause = refusal([found], [transport_spec("http-chained")], "u")
    assert cause == f"transport http-chained cannot run against u: {found.evidence}"


def test_a_chat_stream_without_finish_reason_is_not_a_completion() -> None:
    chunk = {"object": "chat.completion.chunk", "choices": [{"delta": {"content": "a"}}]}
    cut = read_body(CHAT_API, f"data: {json.dumps(chunk)}\n\n".encode())
    assert not cut.finished and cut.events == 1 and not cut.done
    assert judge_chat("U", 200, SSE, cut).evidence == (
        "POST U answered 200 text/event-stream, but the stream ended after 1 chunks without a "
        "finish_reason"
    )
    err = read_body(CHAT_API, b'data: {"error": {"message": "boom", "type": "server_error"}}\n\n')
    assert err.problem == "the stream carried an error: boom"


@pytest.mark.parametrize(
    ("status", "message", "key_accepted", "evidence"),
    [
        # vLLM: Starlette refuses every upgrade so, though the key got 200 over HTTP
        (
            403,
            "",
            True,
            f"no Responses API WebSocket mode at {WS_URL}: the upgrade was answered with HTTP 403 "
            "with no body, while HTTP requests with the same key were answered",
        ),
        (
            404,
            "",
            False,
            f"no Responses API WebSocket mode at {WS_URL}: the upgrade was answered with HTTP 404",
        ),
        (
            405,
            "",
            False,
            f"no Responses API WebSocket mode at {WS_URL}: the upgrade was answered with HTTP 405",
        ),
    ],
)
def test_an_upgrade_refused_without_a_word_is_no_websocket_mode(
    status: int, message: str, key_accepted: bool, evidence: str
) -> None:
    found = judge_upgrade(WS_URL, status, message, placeholder_key=True, key_accepted=key_accepted)
    assert found == Finding(WEBSOCKET, False, evidence)
    assert KEY_HINT not in found.evidence


@pytest.mark.parametrize(
    ("message", "key_accepted"), [("", False), ("model_not_allowed: no access", True)]
)
def test_a_403_upgrade_is_forbidden_when_nothing_says_the_key_got_in(
    message: str, key_accepted: bool
) -> None:
    """A 403 with the server's words, or where no HTTP request got past the key: forbidden."""
    found = judge_upgrade(WS_URL, 403, message, placeholder_key=True, key_accepted=key_accepted)
    assert found.supported is None and found.stopped_by == "forbidden"
    assert f"{WS_URL} answered forbidden (HTTP 403" in found.evidence
    assert found.evidence.endswith(KEY_HINT)


def test_a_failed_upgrade_is_no_answer() -> None:
    found = judge_upgrade(WS_URL, 503, "", key_accepted=True)
    assert found.supported is None and found.stopped_by == "server"


def _messages(usage: dict[str, int]) -> StreamReading:
    events = [
        {"type": "message_start", "message": {"id": "msg_1", "usage": usage}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}},
        {"type": "message_stop"},
    ]
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in events)
    return read_body(MESSAGES_API, body)


def test_prompt_cache_verdicts() -> None:
    none = _messages({"input_tokens": 10})
    zeros = _messages(
        {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
    )
    wrote = _messages(
        {"input_tokens": 10, "cache_creation_input_tokens": 1100, "cache_read_input_tokens": 0}
    )
    read = _messages(
        {"input_tokens": 10, "cache_creation_input_tokens": 0, "cache_read_input_tokens": 1100}
    )
    assert judge_prompt_cache("u", (200, none), (200, none)).supported is False
    assert judge_prompt_cache("u", (200, zeros), (200, zeros)).supported is None
    assert judge_prompt_cache("u", (200, wrote), (200, zeros)).supported is False
    assert judge_prompt_cache("u", (200, wrote), (200, read)).evidence == (
        "a repeated 1110-token prompt marked with cache_control was read from the cache: "
        "cache_creation_input_tokens 1100, then cache_read_input_tokens 1100"
    )
    refused = judge_prompt_cache("u", (400, "invalid_request_error: bad"), (200, read))
    assert refused == Finding(
        MESSAGES_CACHE,
        False,
        "a system prompt with cache_control was refused: POST u answered HTTP 400: "
        "invalid_request_error: bad",
    )
