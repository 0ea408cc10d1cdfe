"""The lineage rules of docs/traces.md on exchanges built by hand (pure: no sockets)."""

from __future__ import annotations

import zlib

import orjson
import pytest

from harness.record.observe import Exchange, WsDecoder, build_trace, summarize
from harness.record.observer import Observer
from harness.wire.tokens import count_tokens
from harness.wire.ws_frames import OP_CONT, OP_PING, OP_TEXT, encode_frame

MS = 1_000_000


def ex(t0: int, t1: int, rid: str, calls: tuple[str, ...] = (), **kw: object) -> Exchange:
    e = Exchange("responses", "ws", 1, t0 * MS, t1 * MS, 200)
    e.response_id, e.calls, e.output_tokens = rid, calls, 10
    e.user_tokens, e.input_tokens = 5, 50
    for k, v in kw.items():
        setattr(e, k, v)
    return e


def test_chain_fork_and_overlap() -> None:
    outs = {"c1": (7, "h-a"), "c2": (9, "h-b")}
    exchanges = [
        # root: r1 asks for two calls, r2 answers them, r3 is the final answer
        ex(0, 10, "r1", ("c1", "c2")),
        ex(40, 50, "r2", ("c3",), previous_response_id="r1", outputs=outs),
        ex(60, 70, "r3", previous_response_id="r2", outputs={"c3": (3, "x")}),
        # started while the root ran its tools, answered c2 (its answer is c2's output)
        ex(12, 20, "s1", ("d1",)),
        ex(22, 30, "s2", previous_response_id="s1", outputs={"d1": (4, "y")}, answer_hash="h-b"),
        # chains from r1 too but answers nothing: a fork of the root, during r1's tools
        ex(15, 18, "f1", previous_response_id="r1"),
        # started during r1's tools too, but neither forks nor answers: not a sub-agent
        # (time overlap alone is no evidence), a rollout of its own
        ex(13, 16, "o1", item_hashes=("o",), answer_hash="h-other", connection=3),
    ]
    header, [root, other] = build_trace(exchanges)
    assert header.version == 2 and header.meta["exchanges"] == 7
    assert other.id == "conv-3" and other.meta["overlapped_with"] == ["conv-1"]
    assert [len(t.tool_calls) for t in root.turns] == [2, 1, 0]
    first = root.turns[0]
    assert [s.id for s in first.subagents] == ["conv-2", "conv-4"]
    by_id = {s.id: s for s in first.subagents}
    # conv-2 (s1, s2) answers c2 by its answer hash; the fork takes the other call
    assert first.tool_calls[1].subagent == 0 and first.tool_calls[1].output_tokens == 9
    assert first.tool_calls[0].subagent == 1
    assert [len(t.tool_calls) for t in by_id["conv-2"].turns] == [1, 0]
    assert by_id["conv-2"].turns[0].tool_calls[0].latency_ms == 2.0
    assert by_id["conv-2"].join == "wait"
    # tool time: from r2's end to r3's start
    assert root.turns[1].tool_calls[0].latency_ms == 10.0


def test_conversation_left_on_a_tool_call_is_closed_and_marked() -> None:
    _, [r] = build_trace([ex(0, 10, "r1", ("c1",))])
    assert [len(t.tool_calls) for t in r.turns] == [1, 0]
    assert r.meta["truncated"] is True


def test_ws_decoder_unmasks_and_joins_fragments() -> None:
    key = b"\x01\x02\x03\x04"
    payload = b'{"type":"response.create"}'
    data = (
        encode_frame(OP_TEXT, payload[:10], fin=False, key=key)
        + encode_frame(OP_PING, b"", key=key)
        + encode_frame(OP_CONT, payload[10:], key=key)
    )
    dec = WsDecoder(masked=True)
    assert dec.feed(data[:5]) == []
    assert dec.feed(data[5:]) == [payload]


def test_ws_decoders_read_compressed_traffic_as_the_extension_answer_says() -> None:
    """The server's extension answer sets each direction's context takeover."""
    obs = Observer()
    obs.ws_open(7, "permessage-deflate; client_no_context_takeover")
    ws = obs._ws[7]
    create = b'{"type":"response.create","input":"hi hi hi"}'
    reset = zlib.compressobj(wbits=-15)
    kept = zlib.compressobj(wbits=-15)
    to_server = b""
    to_client = b""
    for _ in range(2):
        c = reset.compress(create) + reset.flush(zlib.Z_SYNC_FLUSH)
        reset = zlib.compressobj(wbits=-15)  # the client starts afresh every message
        to_server += encode_frame(OP_TEXT, c[:-4], rsv=4)
        s = kept.compress(create) + kept.flush(zlib.Z_SYNC_FLUSH)
        to_client += encode_frame(OP_TEXT, s[:-4], masked=False, rsv=4)
    assert ws.to_server.feed(to_server) == [create, create]
    assert ws.to_client.feed(to_client) == [create, create]


def test_ws_decoder_stops_at_broken_framing_and_says_why() -> None:
    dec = WsDecoder(masked=True)
    before = encode_frame(OP_TEXT, b'{"a":1}')
    assert dec.feed(before + encode_frame(OP_TEXT, b"{}", masked=False)) == [b'{"a":1}']
    assert dec.broken == "an unmasked frame (a client must mask its frames)"
    assert dec.feed(encode_frame(OP_TEXT, b"{}")) == []


def test_websocket_connection_carries_a_conversation_without_chain() -> None:
    first = ex(0, 10, "w1", ("c1",), item_hashes=("a",))
    # only the new item (the output), no previous_response_id: same connection continues
    second = ex(15, 20, "w2", item_hashes=("b",), outputs={"c1": (4, "z")})
    other = ex(16, 18, "w3", item_hashes=("q",), connection=2)
    _, rollouts = build_trace([first, second, other])
    lengths = sorted(len(r.turns) for r in rollouts)
    assert lengths == [1, 2]


def test_concurrent_independent_agents_stay_rollouts_of_their_own() -> None:
    # B starts while A runs its tool, but B's answer is no output of A's: no lineage
    a1 = ex(0, 10, "a1", ("c1",), item_hashes=("p",), answer_hash="")
    a2 = ex(
        40,
        50,
        "a2",
        previous_response_id="a1",
        outputs={"c1": (6, "tool-text")},
        answer_hash="ans-a",
    )
    b1 = ex(12, 20, "b1", item_hashes=("q",), answer_hash="ans-b", connection=2)
    _, rollouts = build_trace([a1, a2, b1])
    assert len(rollouts) == 2
    assert not any(t.subagents for r in rollouts for t in r.turns)
    by_id = {r.id: r for r in rollouts}
    # A keeps its own tool call, with its own output and tool time
    assert by_id["conv-1"].turns[0].tool_calls[0].subagent is None
    assert by_id["conv-1"].turns[0].tool_calls[0].output_tokens == 6
    assert by_id["conv-2"].meta["overlapped_with"] == ["conv-1"]
    assert "forked_from" not in by_id["conv-2"].meta


def test_a_warmup_belongs_to_the_next_conversation_on_its_connection() -> None:
    """Without a chain from it, a warm-up is the next new conversation's on its connection;
    one nothing followed is counted, never a rollout."""
    warm = ex(0, 1, "w1", warmup=True, output_tokens=0, input_tokens=40)
    unfollowed = ex(0, 1, "w2", warmup=True, output_tokens=0, connection=2)
    first = ex(2, 10, "r1", ("c1",), item_hashes=("a",))
    last = ex(20, 30, "r2", previous_response_id="r1", outputs={"c1": (3, "x")})
    header, [rollout] = build_trace([warm, unfollowed, first, last])
    assert rollout.warmup is not None and rollout.warmup.input_tokens == 40
    assert [len(t.tool_calls) for t in rollout.turns] == [1, 0]
    assert rollout.meta["start_ms"] == 0.0  # the session began with its warm-up
    assert header.meta["warmups"] == 2 and header.meta["warmups_unfollowed"] == 1


def test_requests_in_flight_on_a_connection_whose_frames_broke_say_why_they_failed() -> None:
    obs = Observer()
    obs.ws_open(3, "")
    create = b'{"type":"response.create","model":"m","input":[]}'
    obs.ws_client(3, encode_frame(OP_TEXT, create), 10)
    obs.ws_server(3, encode_frame(OP_TEXT, b"{}", key=b"abcd"), 20)  # a server must not mask
    obs.ws_close(3, 30)
    assert obs.out.unread == [
        "connection 3: a responses exchange over ws: the server's frames could not be read "
        "after a masked frame (a server must not mask its frames)"
    ]


@pytest.mark.parametrize(
    ("call_kind", "output_kind"),
    [
        ("function_call", "function_call_output"),
        ("custom_tool_call", "custom_tool_call_output"),
        # Codex's shell tool: its output was once not read as the call's answer, so the
        # next request looked like a fork and the rollout ended truncated
        ("local_shell_call", "local_shell_call_output"),
    ],
)
def test_every_responses_call_kind_is_answered_by_its_output_item(
    call_kind: str, output_kind: str
) -> None:
    def exchange(i: int, req: dict[str, object], output: list[dict[str, object]]) -> Exchange:
        resp = {
            "id": f"resp_{i}",
            "status": "completed",
            "output": output,
            "usage": {"input_tokens": 50, "output_tokens": 10},
        }
        body = b"data: " + orjson.dumps({"type": "response.completed", "response": resp}) + b"\n\n"
        times = (i * 100 * MS, i * 100 * MS + 10 * MS)
        e = summarize("responses", "http", 1, orjson.dumps(req), 200, body, {}, times)
        assert e is not None
        return e

    call = {"type": call_kind, "id": "fc_1", "call_id": "call_1", "name": "shell"}
    answer = {"type": output_kind, "call_id": "call_1", "output": "one two three"}
    first = exchange(0, {"model": "m", "input": "list the files"}, [call])
    second = exchange(
        1,
        {"model": "m", "previous_response_id": "resp_0", "input": [answer]},
        [
            {
                "type": "message",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "ok"}],
            }
        ],
    )
    _, [rollout] = build_trace([first, second])
    [tool_call] = rollout.turns[0].tool_calls
    assert tool_call.subagent is None
    assert tool_call.output_tokens == count_tokens("one two three")
    assert not rollout.meta.get("truncated")


def _sse(*events: object) -> bytes:
    return b"".join(
        b"data: " + (e.encode() if isinstance(e, str) else orjson.dumps(e)) + b"\n\n"
        for e in events
    )


CALL = {"id": "call_1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}
CHAT_USAGE = {"prompt_tokens": 50, "completion_tokens": 12}
CHAT_WHOLE = {
    "id": "chatcmpl-1",
    "object": "chat.completion",
    "choices": [
        {
            "index": 0,
            "message": {"role": "assistant", "content": "Done.", "tool_calls": [CALL]},
            "finish_reason": "tool_calls",
        }
    ],
    "usage": CHAT_USAGE,
}
CHAT_STREAM = _sse(
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "Do"}}]},
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"content": "ne."}}]},
    {
        "id": "chatcmpl-1",
        "choices": [{"index": 0, "delta": {"tool_calls": [{"index": 0, **CALL}]}}],
    },
    {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    {"id": "chatcmpl-1", "choices": [], "usage": CHAT_USAGE},
    "[DONE]",
)
TOOL_USE = {"type": "tool_use", "id": "call_1", "name": "ls", "input": {}}
MESSAGES_WHOLE = {
    "id": "msg_1",
    "type": "message",
    "content": [{"type": "text", "text": "Done."}, TOOL_USE],
    "stop_reason": "tool_use",
    "usage": {"input_tokens": 20, "cache_read_input_tokens": 30, "output_tokens": 12},
}
MESSAGES_STREAM = _sse(
    {
        "type": "message_start",
        "message": {
            **MESSAGES_WHOLE,
            "content": [],
            "usage": {"input_tokens": 20, "cache_read_input_tokens": 30},
        },
    },
    {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Done."}},
    {"type": "content_block_stop", "index": 0},
    {"type": "content_block_start", "index": 1, "content_block": TOOL_USE},
    {"type": "content_block_stop", "index": 1},
    {"type": "message_delta", "delta": {"stop_reason": "tool_use"}, "usage": {"output_tokens": 12}},
    {"type": "message_stop"},
)


@pytest.mark.parametrize(
    ("api", "rid", "body"),
    [
        ("chat", "chatcmpl-1", orjson.dumps(CHAT_WHOLE)),
        ("chat", "chatcmpl-1", CHAT_STREAM),
        ("messages", "msg_1", orjson.dumps(MESSAGES_WHOLE)),
        ("messages", "msg_1", MESSAGES_STREAM),
    ],
)
def test_chat_and_messages_responses_read_alike_whole_or_streamed(
    api: str, rid: str, body: bytes
) -> None:
    """Both APIs' answers, one JSON body or a stream, read through the client's translators:
    the same id, tool call, usage and answer."""
    req = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "list"}]})
    e = summarize(api, "http", 1, req, 200, body, {}, (0, 2 * MS))
    assert e is not None and e.ok
    assert (e.response_id, e.calls, e.input_tokens, e.output_tokens) == (rid, ("call_1",), 50, 12)
    # a Chat usage without prompt_tokens_details says nothing of the cache: unknown, not 0
    assert e.cached_tokens == (30 if api == "messages" else None)
    answer = {"type": "message", "content": [{"type": "output_text", "text": "Done."}]}
    whole = orjson.dumps({"id": "r", "output": [answer]})
    same = summarize("responses", "http", 1, req, 200, whole, {}, (0, 2 * MS))
    assert same is not None and e.answer_hash and e.answer_hash == same.answer_hash


@pytest.mark.parametrize("api", ["chat", "messages"])
def test_a_whole_answer_keeps_every_tool_call_and_its_arguments(api: str) -> None:
    """A whole (non-streamed) answer with two tool calls: both are calls the next request may
    answer, each with its own arguments in --keep-content's output.  (Chat: a whole message's
    calls carry no index, and read as one stream they merged into one call with arguments
    '{"x":1}{"y":2}'; Messages: a whole tool_use's input is no delta, and its arguments read
    empty.)"""
    if api == "chat":
        calls = [
            {"id": f"call_{n}", "type": "function", "function": {"name": n, "arguments": a}}
            for n, a in (("f", '{"x":1}'), ("g", '{"y":2}'))
        ]
        message = {"role": "assistant", "content": None, "tool_calls": calls}
        choice = {"index": 0, "message": message, "finish_reason": "tool_calls"}
        body = {"id": "c", "choices": [choice], "usage": CHAT_USAGE}
    else:
        blocks = [
            {"type": "tool_use", "id": f"call_{n}", "name": n, "input": i}
            for n, i in (("f", {"x": 1}), ("g", {"y": 2}))
        ]
        body = {**MESSAGES_WHOLE, "content": blocks}
    req = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "go"}]})
    e = summarize(api, "http", 1, req, 200, orjson.dumps(body), {}, (0, 2 * MS), keep_content=True)
    assert e is not None and e.ok and e.calls == ("call_f", "call_g")
    assert e.content is not None
    got = [(i["name"], orjson.loads(i["arguments"])) for i in e.content["output"]]
    assert got == [("f", {"x": 1}), ("g", {"y": 2})]


def test_a_messages_thinking_block_is_reasoning_but_no_resend_evidence() -> None:
    """Thinking reads as reasoning inside the reported output (as the client measures it),
    while ``resends_reasoning`` stays a Responses finding: Messages requests' reasoning is not
    counted, so an answer's thinking block must not count either (it would read as never
    re-sent)."""
    thinking = {"type": "thinking", "thinking": "", "signature": ""}
    body = _sse(
        {"type": "message_start", "message": {"id": "msg_1", "usage": {"input_tokens": 20}}},
        {"type": "content_block_start", "index": 0, "content_block": thinking},
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "x" * 400},
        },
        {"type": "content_block_stop", "index": 0},
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "ok"}},
        {"type": "content_block_stop", "index": 1},
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn"},
            "usage": {"output_tokens": 120},
        },
        {"type": "message_stop"},
    )
    req = orjson.dumps({"model": "m", "messages": [{"role": "user", "content": "hi"}]})
    e = summarize("messages", "http", 1, req, 200, body, {}, (0, 2 * MS))
    assert e is not None and e.ok
    assert e.reasoning_tokens >= count_tokens("x" * 400) and e.output_tokens >= 1
    assert e.output_tokens + e.reasoning_tokens == 120
    assert (e.output_reasoning, e.output_keys) == (0, ())
