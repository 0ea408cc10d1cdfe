"""The ``chat`` and ``messages`` protocols, sans I/O: bodies from the transcript, headers, the
stream translators into ResponseStream (the metrics they give), and their errors."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from harness.client.api_conversation import api_headers
from harness.client.api_errors import api_error_from_body, error_class, retryable
from harness.client.chat_api import ChatTranslator, chat_body
from harness.client.messages_api import MessagesTranslator, messages_body
from harness.client.options import TransportOptions
from harness.client.stream import ResponseStream
from harness.client.translate import TranslatedFeed, Translator
from harness.wire.errors import ErrorKind, TransportError
from harness.wire.transports import TRANSPORTS, transport_spec
from harness.workload.agent import TurnInput
from harness.workload.plan import TurnPlan
from harness.workload.records import TurnRecord
from tools.model_predict import request_cost

MS = 1_000_000
USER = {"type": "message", "role": "user", "content": "fix the bug"}
REASONING = {
    "type": "reasoning",
    "summary": [],
    "content": [{"type": "reasoning_text", "text": "think"}],
    "encrypted_content": "sig1",
}
CALLS = [
    {
        "type": "function_call",
        "call_id": "call_a",
        "name": "run_tool",
        "arguments": '{"command": "ls"}',
    },
    {
        "type": "function_call",
        "call_id": "call_b",
        "name": "run_tool",
        "arguments": '{"command": "pwd"}',
    },
]
OUTPUTS = [
    {"type": "function_call_output", "call_id": "call_a", "output": "a.py"},
    {"type": "function_call_output", "call_id": "call_b", "output": "/src"},
]
TOOL = {
    "type": "function",
    "name": "run_tool",
    "description": "Run a shell command.",
    "strict": True,
    "parameters": {"type": "object", "properties": {"command": {"type": "string"}}},
}


def turn_input(tool_choice: str = "required", reasoning_tokens: int = 0) -> TurnInput:
    history = [USER, REASONING, *CALLS, *OUTPUTS]
    return TurnInput(
        turn=TurnPlan(index=1, tool_calls=2, output_tokens=20, reasoning_tokens=reasoning_tokens),
        history=history,
        new_items=list(OUTPUTS),
        instructions="You are a coding agent.",
        tools=[TOOL],
        tool_choice=tool_choice,
        metadata={"loopbench.output_tokens": "20"},
        max_output_tokens=200,
        model="m",
        reasoning={"summary": "auto"} if reasoning_tokens else None,
    )


# -- registry -------------------------------------------------------------------------------


def test_the_registry_declares_both_apis_stateless_and_under_locust() -> None:
    assert {t.name: t.api for t in TRANSPORTS if t.api != "responses"} == {
        "chat": "chat",
        "messages": "messages",
    }
    for name in ("chat", "messages"):
        spec = transport_spec(name)
        assert (spec.websocket, spec.chained, spec.store, spec.append, spec.locust) == (
            False,
            False,
            False,
            False,
            True,
        )
    assert len({t.colour for t in TRANSPORTS}) == len(TRANSPORTS)


# -- bodies ---------------------------------------------------------------------------------


def test_chat_body_sends_the_whole_conversation_as_messages() -> None:
    body = chat_body(turn_input())
    assert body["stream"] is True and body["stream_options"] == {"include_usage": True}
    assert body["tool_choice"] == "required" and body["parallel_tool_calls"] is True
    assert body["max_completion_tokens"] == 200 and body["metadata"] == {
        "loopbench.output_tokens": "20"
    }
    assert body["tools"] == [
        {
            "type": "function",
            "function": {k: TOOL[k] for k in ("name", "description", "parameters", "strict")},
        }
    ]
    # system, user, ONE assistant message with both parallel calls, a tool message per output;
    # the reasoning item is dropped (the API cannot carry it back)
    assert body["messages"] == [
        {"role": "system", "content": "You are a coding agent."},
        {"role": "user", "content": "fix the bug"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": c["call_id"],
                    "type": "function",
                    "function": {"name": "run_tool", "arguments": c["arguments"]},
                }
                for c in CALLS
            ],
        },
        {"role": "tool", "tool_call_id": "call_a", "content": "a.py"},
        {"role": "tool", "tool_call_id": "call_b", "content": "/src"},
    ]
    assert "reasoning" not in orjson.dumps(body).decode()


def test_messages_body_alternates_roles_with_thinking_first_and_results_grouped() -> None:
    body = messages_body(turn_input(reasoning_tokens=40))
    assert body["stream"] is True and body["tool_choice"] == {"type": "any"}
    assert body["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    # room for the thinking budget on top of the turn's output (the API requires more)
    assert body["max_tokens"] == 1024 + 200
    msgs = body["messages"]
    assert [m["role"] for m in msgs] == ["user", "assistant", "user"]
    assert [b["type"] for b in msgs[1]["content"]] == ["thinking", "tool_use", "tool_use"]
    assert msgs[1]["content"][0] == {"type": "thinking", "thinking": "think", "signature": "sig1"}
    assert msgs[1]["content"][1] == {
        "type": "tool_use",
        "id": "call_a",
        "name": "run_tool",
        "input": {"command": "ls"},
    }
    results = msgs[2]["content"]
    assert [(b["type"], b["tool_use_id"]) for b in results] == [
        ("tool_result", "call_a"),
        ("tool_result", "call_b"),
    ]
    assert body["tools"][0]["input_schema"] == TOOL["parameters"]
    for choice, expected in (("none", "none"), ("auto", "auto"), ("required", "any")):
        assert messages_body(turn_input(choice))["tool_choice"] == {"type": expected}


def _marks(body: dict[str, Any]) -> list[str]:
    where = []
    for i, block in enumerate(body["system"]):
        if "cache_control" in block:
            where.append(f"system[{i}]")
    for i, tool in enumerate(body["tools"]):
        if "cache_control" in tool:
            where.append(f"tools[{i}]")
    for i, msg in enumerate(body["messages"]):
        for j, block in enumerate(msg["content"]):
            if "cache_control" in block:
                where.append(f"messages[{i}][{j}]")
    return where


@pytest.mark.parametrize(
    ("placement", "expected"),
    [
        ("none", []),
        ("system", ["system[0]", "tools[0]"]),
        ("conversation", ["system[0]", "tools[0]", "messages[2][1]"]),
    ],
)
def test_cache_control_placement(placement: str, expected: list[str]) -> None:
    body = messages_body(turn_input(), placement)
    assert _marks(body) == expected
    assert len(expected) <= 4  # the API's limit
    assert all(
        b["cache_control"] == {"type": "ephemeral"}
        for b in [*body["system"], *body["tools"]]
        if "cache_control" in b
    )


def test_an_unknown_cache_control_placement_is_refused_by_name() -> None:
    with pytest.raises(
        ValueError, match="cache_control: expected one of none, system, conversation"
    ):
        messages_body(turn_input(), "everywhere")


def test_messages_authenticates_with_x_api_key_and_keeps_extra_headers() -> None:
    options = TransportOptions("http://h/v1", api_key="k1", extra_headers={"X-Extra": "1"})
    headers = dict(api_headers(transport_spec("messages"), options))
    assert headers["x-api-key"] == "k1" and headers["anthropic-version"] == "2023-06-01"
    assert "authorization" not in headers and headers["x-extra"] == "1"
    chat = dict(api_headers(transport_spec("chat"), options))
    assert chat["authorization"] == "Bearer k1" and chat["x-extra"] == "1"
    assert "x-api-key" not in chat
    # a user's own version or key header wins
    own = TransportOptions(
        "http://h/v1", extra_headers={"anthropic-version": "2024-01-01", "x-api-key": "mine"}
    )
    mine = api_headers(transport_spec("messages"), own)
    assert dict(mine)["anthropic-version"] == "2024-01-01"
    assert [v for k, v in mine if k == "x-api-key"] == ["mine"]


# -- stream translators ---------------------------------------------------------------------


def sse(data: dict[str, Any] | str, event: str | None = None) -> bytes:
    text = data if isinstance(data, str) else orjson.dumps(data).decode()
    head = f"event: {event}\n" if event else ""
    return f"{head}data: {text}\n\n".encode()


def feed_all(translator: Translator, chunks: list[bytes]) -> ResponseStream:
    """Each chunk arrives 1 ms after the previous (sent at 0)."""
    feed = TranslatedFeed(ResponseStream(0), translator)
    for i, chunk in enumerate(chunks):
        feed.feed(chunk, (i + 1) * MS)
    return feed.stream


def record(stream: ResponseStream) -> TurnRecord:
    rec = stream.fill()
    rec.transport, rec.rollout_id = "chat", 1
    return rec


def chunk(delta: dict[str, Any] | None = None, finish: str | None = None, **extra: Any) -> bytes:
    choices = [] if delta is None else [{"index": 0, "delta": delta, "finish_reason": finish}]
    return sse({"id": "chatcmpl-1", "object": "chat.completion.chunk", "choices": choices, **extra})


CHAT_USAGE = {
    "prompt_tokens": 100,
    "completion_tokens": 12,
    "total_tokens": 112,
    "prompt_tokens_details": {"cached_tokens": 64},
    "completion_tokens_details": {"reasoning_tokens": 4},
}


def test_chat_stream_times_reasoning_then_parallel_calls_and_reads_usage() -> None:
    call = {"type": "function", "function": {"name": "run_tool", "arguments": ""}}
    stream = feed_all(
        ChatTranslator(),
        [
            chunk({"role": "assistant", "content": ""}),  # 1 ms: the first event, no token
            chunk({"reasoning_content": "hmm."}),  # 2 ms: TTFT
            chunk({"tool_calls": [{"index": 0, "id": "call_x", **call}]}),  # 3 ms: TTFOT (name)
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command":'}}]}),
            chunk({"tool_calls": [{"index": 1, "id": "call_y", **call}]}),
            chunk({"tool_calls": [{"index": 1, "function": {"arguments": ' "ls"}'}}]}),  # 6 ms
            chunk({}, "tool_calls"),
            chunk(None, usage=CHAT_USAGE, sim_timing={"ttft": 7.5, "cache": "hit"}),
            b"data: [DONE]\n\n",  # 9 ms
        ],
    )
    rec = record(stream)
    assert rec.status == "completed" and stream.response_id == "chatcmpl-1"
    assert (rec.first_event_ns, rec.first_token_ns, rec.first_output_ns) == (MS, 2 * MS, 3 * MS)
    assert (rec.last_token_ns, rec.done_ns) == (6 * MS, 9 * MS)
    # ITL between the argument deltas only: a name is a token without text, not a delta
    assert rec.itl_ns == [2 * MS] and rec.delta_events == 3
    assert (rec.input_tokens, rec.cached_tokens, rec.output_tokens, rec.reasoning_tokens) == (
        100,
        64,
        12,
        4,
    )
    assert rec.sim_ttft_ms == 7.5 and rec.sim_cache == "hit"
    assert [(c["call_id"], c["arguments"]) for c in stream.function_calls] == [
        ("call_x", '{"command":'),
        ("call_y", ' "ls"}'),
    ]
    assert [i["type"] for i in stream.output_items] == [
        "reasoning",
        "function_call",
        "function_call",
    ]


def test_chat_text_answer_and_a_length_cut_is_incomplete() -> None:
    stream = feed_all(
        ChatTranslator(),
        [
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "abcd"}),
            chunk({"content": "efgh"}),
            chunk({}, "length"),
            b"data: [DONE]\n\n",
        ],
    )
    rec = record(stream)
    assert rec.status == "incomplete" and rec.first_output_ns == 2 * MS
    # no usage chunk: output counted from the streamed text, 4 characters a token
    assert rec.output_tokens == 2 and rec.streamed_tokens == 2
    assert stream.output_items[0]["content"][0]["text"] == "abcdefgh"


def test_chat_errors_mid_stream_and_done_without_a_finish_reason() -> None:
    err = {"error": {"message": "engine died", "type": "server_error", "code": "server_error"}}
    stream = feed_all(ChatTranslator(), [chunk({"content": "abcd"}), sse(err)])
    rec = record(stream)
    assert (rec.status, rec.error_kind, rec.error_message) == (
        "error",
        "server_error",
        "engine died",
    )
    with pytest.raises(TransportError) as info:
        feed_all(ChatTranslator(), [chunk({"content": "abcd"}), b"data: [DONE]\n\n"])
    assert info.value.kind == ErrorKind.TRUNCATED_STREAM
    assert "[DONE] before any choice had a finish_reason" in str(info.value)


def mevent(name: str, **data: Any) -> bytes:
    return sse({"type": name, **data}, event=name)


MSG_USAGE = {"input_tokens": 10, "cache_creation_input_tokens": 30, "cache_read_input_tokens": 200}


def test_messages_stream_thinking_text_and_tool_use_with_cache_usage() -> None:
    start = {"id": "msg_1", "type": "message", "role": "assistant", "content": [], "model": "m",
             "usage": {**MSG_USAGE, "output_tokens": 1}}  # fmt: skip
    stream = feed_all(
        MessagesTranslator(),
        [
            mevent("message_start", message=start),  # 1 ms
            mevent("ping"),
            mevent("content_block_start", index=0, content_block={"type": "thinking", "thinking": "", "signature": ""}),
            mevent("content_block_delta", index=0, delta={"type": "thinking_delta", "thinking": "plan"}),  # 4: TTFT
            mevent("content_block_delta", index=0, delta={"type": "signature_delta", "signature": "SIG"}),
            mevent("content_block_stop", index=0),
            mevent("content_block_start", index=1, content_block={"type": "text", "text": ""}),
            mevent("content_block_delta", index=1, delta={"type": "text_delta", "text": "ok, "}),  # 8: TTFOT
            mevent("content_block_stop", index=1),
            mevent("content_block_start", index=2, content_block={"type": "tool_use", "id": "toolu_1", "name": "run_tool", "input": {}}),
            mevent("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": ""}),
            mevent("content_block_delta", index=2, delta={"type": "input_json_delta", "partial_json": '{"command": "ls"}'}),  # 12
            mevent("content_block_stop", index=2),
            mevent("message_delta", delta={"stop_reason": "tool_use"}, usage={"output_tokens": 9}, sim_timing={"prefill": 2.0}),
            mevent("message_stop"),  # 15 ms
        ],
    )  # fmt: skip
    rec = record(stream)
    assert rec.status == "completed" and stream.response_id == "msg_1"
    assert (rec.first_event_ns, rec.first_token_ns, rec.first_output_ns) == (MS, 4 * MS, 8 * MS)
    assert (rec.last_token_ns, rec.done_ns) == (12 * MS, 15 * MS)
    assert rec.itl_ns == [4 * MS]
    # input = uncached + read + written (comparable with the other APIs); cached = read
    assert (rec.input_tokens, rec.cached_tokens, rec.output_tokens) == (240, 200, 9)
    # no usage field for thinking: what the 9 output tokens hold beyond the 6 visible ones
    # ("ok, " and the arguments), at least the thinking streamed ("plan": 1 token)
    assert rec.reasoning_tokens == 3
    assert rec.sim_prefill_ms == 2.0
    reasoning, _text, call = stream.output_items
    assert reasoning == {
        "type": "reasoning",
        "summary": [],
        "content": [{"type": "reasoning_text", "text": "plan"}],
        "encrypted_content": "SIG",
        "status": "completed",
    }
    assert (call["call_id"], call["arguments"]) == ("toolu_1", '{"command": "ls"}')


def test_messages_error_event_is_the_api_error_of_its_type() -> None:
    start = {"id": "msg_1", "usage": {"input_tokens": 1}}
    err = {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}
    stream = feed_all(
        MessagesTranslator(), [mevent("message_start", message=start), sse(err, event="error")]
    )
    rec = record(stream)
    assert (rec.status, rec.error_kind, rec.error_message) == (
        "error",
        "overloaded_error",
        "Overloaded",
    )
    assert retryable(0, rec.error_kind)
    # a max_tokens stop is an incomplete response, as Responses says it
    cut = feed_all(
        MessagesTranslator(),
        [
            mevent("message_start", message=start),
            mevent(
                "message_delta", delta={"stop_reason": "max_tokens"}, usage={"output_tokens": 3}
            ),
            mevent("message_stop"),
        ],
    )
    assert record(cut).status == "incomplete"


# -- error bodies ---------------------------------------------------------------------------


def anthropic_error(kind: str) -> bytes:
    return orjson.dumps(
        {"type": "error", "error": {"type": kind, "message": f"{kind} says no"}, "request_id": "r"}
    )


@pytest.mark.parametrize(
    ("status", "kind", "klass", "retry"),
    [
        (529, "overloaded_error", "overloaded", True),
        (429, "rate_limit_error", "rate_limited", True),
        (500, "api_error", "server_error", True),
        (401, "authentication_error", "authentication", False),
        (403, "permission_error", "permission", False),
        (404, "not_found_error", "not_found", False),
        (400, "invalid_request_error", "invalid_request", False),
        (413, "request_too_large", "invalid_request", False),
    ],
)
def test_anthropic_error_bodies_classify_like_their_openai_peers(
    status: int, kind: str, klass: str, retry: bool
) -> None:
    err = api_error_from_body(status, anthropic_error(kind))
    assert (err.status, err.kind) == (status, kind)
    assert str(err) == f"{kind} (HTTP {status}): {kind} says no"
    assert error_class(err.status, err.code) == klass and retryable(err.status, err.code) is retry


def test_openai_and_reference_server_codes_share_the_classes() -> None:
    assert (
        error_class(503, "service_unavailable")
        == error_class(529, "overloaded_error")
        == "overloaded"
    )
    assert error_class(429, "rate_limit_exceeded") == error_class(429, "rate_limit_error")
    assert error_class(401, "invalid_api_key") == error_class(401, "authentication_error")
    assert retryable(502, None) and not retryable(400, "context_length_exceeded")


def test_the_server_predicts_both_like_http() -> None:
    for name in ("chat", "messages"):
        for history, new, fresh in ((0, 500, True), (4000, 300, False)):
            assert request_cost(name, history, new, new_connection=fresh) == request_cost(
                "http", history, new, new_connection=fresh
            )


@pytest.mark.parametrize(("args_with_the_name", "together"), [(False, 1), (True, 2)])
def test_first_arrival_deltas_counts_a_tool_calls_name_as_output(
    args_with_the_name: bool, together: int
) -> None:
    """A Chat tool call's name is the first visible output (no delta): read alone it is 1
    output in its read, read with the first arguments 2, as two deltas would be (docs/metrics.md
    §1.6's turn-row table)."""
    call = {"type": "function", "function": {"name": "run_tool", "arguments": ""}}
    name = chunk({"tool_calls": [{"index": 0, "id": "call_x", **call}]})
    args = chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"command": "ls"}'}}]})
    reads = [name + args] if args_with_the_name else [name, args]
    end = [chunk({}, "tool_calls"), chunk(None, usage=CHAT_USAGE), b"data: [DONE]\n\n"]
    rec = record(feed_all(ChatTranslator(), [*reads, *end]))
    assert rec.status == "completed" and rec.first_output_ns == MS
    assert rec.first_arrival_deltas == together
