"""harness.client.stream: ordering invariants, timing metrics and the TurnRecord it fills."""

from __future__ import annotations

import copy
import re
from collections.abc import Callable
from typing import Any

import pytest

from harness.client import honesty
from harness.client.stream import ResponseStream
from harness.metrics import definitions as D
from harness.wire.errors import StreamOrderError
from harness.wire.events import ResponseBuilder, usage
from harness.workload.records import TurnRecord

MS = 1_000_000
Events = list[dict[str, Any]]


def text_stream(pieces: list[str], out_tokens: int | None = None, rid: str = "resp_1") -> Events:
    b = ResponseBuilder(rid, model="sim", created_at=100, request={})
    events = b.start() + b.begin_message() + [b.text_delta(p) for p in pieces] + b.end_message()
    n = out_tokens if out_tokens is not None else sum(len(p) for p in pieces) // 4
    events.append(b.complete(usage(12, 4, n)))
    return events


def call_stream() -> Events:
    b = ResponseBuilder("resp_1", model="sim", created_at=100, request={})
    events = b.start() + b.begin_function_call("f", "call_1") + [b.arguments_delta("{}")]
    return events + b.end_function_call() + [b.complete(usage(1, 0, 1))]


def run(events: Events, times: list[int] | None = None, **kw: Any) -> ResponseStream:
    s = ResponseStream(sent_ns=0, **kw)
    for i, e in enumerate(events):
        s.feed(e, times[i] if times else (i + 1) * MS)
    return s


def stamps(rec: TurnRecord) -> tuple[int, int, int, int, int]:
    """A turn's timestamps in order: sent, first event, first token, last token, done."""
    return (rec.sent_ns, rec.first_event_ns, rec.first_token_ns, rec.last_token_ns, rec.done_ns)


def record(s: ResponseStream) -> TurnRecord:
    rec = s.fill()
    rec.transport, rec.rollout_id = "http", 1
    return rec


def renumber(events: Events) -> Events:
    for i, e in enumerate(events):
        e["sequence_number"] = i
    return events


# --- the catalogue of bad streams --------------------------------------------------------------


def _swap(events: Events, i: int, j: int) -> Events:
    events[i], events[j] = events[j], events[i]
    return renumber(events)


def _first_in_progress(ev: Events) -> Events:
    return renumber(ev[1:])


def _other_id(ev: Events) -> Events:
    ev[1]["response"]["id"] = "resp_other"
    return ev


def _added_twice(ev: Events) -> Events:
    return renumber([*ev[:3], copy.deepcopy(ev[2]), *ev[3:]])


def _delta_before_added(ev: Events) -> Events:
    return renumber([ev[0], ev[1], ev[4], *ev[2:4], *ev[5:]])


def _delta_before_part(ev: Events) -> Events:
    return _swap(ev, 3, 4)


def _after_terminal(ev: Events) -> Events:
    late = copy.deepcopy(ev[4])
    late["sequence_number"] = len(ev)
    return [*ev, late]


def _seq_gap(ev: Events) -> Events:
    for e in ev[5:]:
        e["sequence_number"] += 1
    return ev


def _seq_repeat(ev: Events) -> Events:
    ev[3]["sequence_number"] = 2
    return ev


def _delta_after_item_done(ev: Events) -> Events:
    late = copy.deepcopy(ev[4])
    return renumber([*ev[:-1], late, ev[-1]])


def _completed_with_open_item(ev: Events) -> Events:
    # an item still open is allowed only if the final output carries it
    ev[-1]["response"]["output"] = []
    return renumber([*ev[:5], ev[-1]])


def _created_twice(ev: Events) -> Events:
    return renumber([*ev[:2], copy.deepcopy(ev[0]), *ev[2:]])


def _wrong_item_id(ev: Events) -> Events:
    ev[4]["item_id"] = "msg_nope"
    return ev


def _string_index(ev: Events) -> Events:
    ev[2]["output_index"] = "0"
    return ev


def _no_type(ev: Events) -> Events:
    del ev[2]["type"]
    return ev


def _failed_without_created(ev: Events) -> Events:
    failed = {"type": "response.failed", "sequence_number": 0, "response": dict(ev[0]["response"])}
    return [failed]


BAD: list[tuple[str, Callable[[Events], Events], str]] = [
    (
        "first event",
        _first_in_progress,
        r"response\.in_progress at sequence_number 0: expected response\.created as the first event",
    ),
    (
        "response id",
        _other_id,
        r"response\.in_progress at sequence_number 1 \(response resp_1\): expected response\.id 'resp_1', got 'resp_other'",
    ),
    (
        "added twice",
        _added_twice,
        r"response\.output_item\.added at sequence_number 3 .*expected output_index 0 added once",
    ),
    (
        "delta before item",
        _delta_before_added,
        r"response\.output_text\.delta at sequence_number 2 .*expected response\.output_item\.added for output_index 0 first",
    ),
    (
        "delta before part",
        _delta_before_part,
        r"response\.output_text\.delta at sequence_number 3 .*expected response\.content_part\.added for output_index 0 content_index 0 first",
    ),
    (
        "after terminal",
        _after_terminal,
        r"response\.output_text\.delta at sequence_number 10 .*expected no event after the terminal event \(status completed\)",
    ),
    (
        "sequence gap",
        _seq_gap,
        r"response\.output_text\.delta at sequence_number 6 .*expected sequence_number 5, got 6",
    ),
    (
        "sequence repeat",
        _seq_repeat,
        r"response\.content_part\.added at sequence_number 2 .*expected sequence_number 3, got 2",
    ),
    (
        "delta after item done",
        _delta_after_item_done,
        r"response\.output_text\.delta at sequence_number 9 .*expected output_index 0 still open",
    ),
    (
        "completed with open item",
        _completed_with_open_item,
        r"response\.completed at sequence_number 5 .*expected output_item\.done for every added item first \(output_index \[0\] open\)",
    ),
    (
        "created twice",
        _created_twice,
        r"response\.created at sequence_number 2 .*expected a single response\.created",
    ),
    (
        "item id",
        _wrong_item_id,
        r"response\.output_text\.delta at sequence_number 4 .*expected item_id 'msg_\w+' for output_index 0, got 'msg_nope'",
    ),
    (
        "index type",
        _string_index,
        r"response\.output_item\.added at sequence_number 2 .*expected an integer output_index, got '0'",
    ),
    ("no type", _no_type, r"event without a string 'type' after sequence_number 1"),
    (
        "failed first",
        _failed_without_created,
        r"response\.failed at sequence_number 0: expected response\.created as the first event",
    ),
]


@pytest.mark.parametrize(
    ("mutate", "pattern"), [(m, p) for _, m, p in BAD], ids=[n for n, _, _ in BAD]
)
def test_bad_streams_raise_precise_errors(mutate: Callable[[Events], Events], pattern: str) -> None:
    events = mutate(text_stream([" abc", " def"]))
    with pytest.raises(StreamOrderError, match=pattern):
        run(events)


def test_unmodified_catalogue_base_is_valid() -> None:
    s = run(text_stream([" abc", " def"]))
    assert s.done and s.status == "completed"


def test_non_integer_sequence_number_rejected() -> None:
    events = text_stream([" abc"])
    events[2]["sequence_number"] = "2"
    with pytest.raises(
        StreamOrderError, match=re.escape("expected an integer sequence_number, got '2'")
    ):
        run(events)


# --- tolerated variations ------------------------------------------------------------------------


def test_unknown_events_and_fields_are_ignored() -> None:
    events = text_stream([" abc"])
    events.insert(0, {"type": "keepalive"})
    events[1]["obfuscation"] = "xyz"
    events.insert(5, {"type": "response.future_thing", "sequence_number": 4, "x": 1})
    for e in events[6:]:
        e["sequence_number"] += 1
    s = run(events)
    assert s.status == "completed" and s.delta_events == 1
    assert s.first_event_ns == 1 * MS  # the keepalive is the first byte back from the server


def test_events_without_sequence_numbers_are_accepted() -> None:
    events = text_stream([" abc", " def"])
    for e in events:
        del e["sequence_number"]
    s = run(events)
    assert s.status == "completed" and s.output_items[0]["content"][0]["text"] == " abc def"


def test_items_reported_only_in_final_output() -> None:
    events = text_stream([" abc"])
    s = run(renumber([events[0], events[1], events[-1]]))
    assert s.status == "completed" and s.output_items == events[-1]["response"]["output"]


def test_incomplete_may_leave_an_item_open() -> None:
    b = ResponseBuilder("resp_1", created_at=1, request={"model": "m"})
    events = b.start() + b.begin_message() + [b.text_delta(" abc")]
    b._open = None  # simulate a server that ends without closing the item
    events.append(b.incomplete("max_output_tokens", usage(3, 0, 1)))
    s = run(events)
    assert s.status == "incomplete" and record(s).status == "incomplete"


# --- timing metrics --------------------------------------------------------------------------------


def test_timestamps_itl_and_delta_count() -> None:
    pieces = [" abc", " def", " ghi", " jkl"]
    events = text_stream(pieces)  # 4 head events, 4 deltas, 3 done events, completed
    times = [5, 6, 7, 8, 10, 13, 20, 30, 31, 32, 33, 40]
    s = run(events, [t * MS for t in times])
    s_sent = ResponseStream(sent_ns=2 * MS)
    for e, t in zip(events, times, strict=True):
        s_sent.feed(e, t * MS)
    rec = record(s_sent)
    assert stamps(rec) == (2 * MS, 5 * MS, 10 * MS, 30 * MS, 40 * MS)
    assert D.sample(D.get("ttft_ms"), rec) == 8 and D.sample(D.get("turn_ms"), rec) == 38
    assert rec.delta_events == 4 and len(rec.itl_ns) == rec.delta_events - 1
    assert rec.itl_ns == [3 * MS, 7 * MS, 10 * MS]
    assert s.itl_ns == rec.itl_ns


@pytest.mark.parametrize(
    ("delta_ms", "together"),
    [
        ([10, 13, 20, 30], 1),  # each delta its own read
        ([13, 13, 20, 30], 2),  # the first read late: it carried the second delta too
        ([30, 30, 30, 30], 4),  # every delta in one read
    ],
)
def test_first_arrival_deltas_counts_the_deltas_sharing_the_first_ones_stamp(
    delta_ms: list[int], together: int
) -> None:
    """docs/metrics.md §1.9: a first token stamped with a later delta's arrival is counted."""
    events = text_stream([" abc", " def", " ghi", " jkl"])
    times = [5, 6, 7, 8, *delta_ms, 31, 32, 33, 40]
    rec = record(run(events, [t * MS for t in times]))
    assert rec.first_arrival_deltas == together
    assert TurnRecord("http", 0, 0).first_arrival_deltas == -1  # a row written before the count
    # counted at the terminal event: a stream cut before it reads 0, as docs/metrics.md says
    assert record(run(events[:-1], [t * MS for t in times[:-1]])).first_arrival_deltas == 0


def _burst_events(out_tokens: int | None) -> tuple[Events, list[int]]:
    # delta (t ms, chars): (0,8) (40,4) (100,16) (130,4) (190,4) (230,4): 40 chars = 10 tokens
    pieces = ["a" * 8, "b" * 4, "c" * 16, "d" * 4, "e" * 4, "f" * 4]
    events = text_stream(pieces, out_tokens=out_tokens or 0)
    if out_tokens is None:
        events[-1]["response"]["usage"] = None
    delta_t = [0, 40, 100, 130, 190, 230]
    times = [0, 0, 0, 0, *delta_t, 240, 240, 240, 250]
    return events, [t * MS for t in times]


@pytest.mark.parametrize(
    ("out_tokens", "expected"),
    [
        # best windows [40, 140) and [100, 200) hold 24 chars; the window is half-open, so
        # [0, 100) does not include the 16-char delta at 100 ms (a closed one would give 28)
        (10, 6),  # 24/40 * 10 = 6
        (9, 5),  # 24/40 * 9 = 5.4
        (25, 15),  # 24/40 * 25 = 15
        (7, 4),  # 24/40 * 7 = 4.2
        (None, 6),  # no usage: 40 chars -> 10 tokens by the text convention
    ],
)
def test_burst_window_on_hand_made_timeline(out_tokens: int | None, expected: int) -> None:
    events, times = _burst_events(out_tokens)
    s = run(events, times)
    assert s.burst_tokens_max == expected
    assert record(s).burst_tokens_max == expected


def test_burst_window_size_matters() -> None:
    events, times = _burst_events(10)
    # window 50 ms: [100, 150) holds 16+4 = 20 chars -> 5 tokens
    assert run(events, times, burst_window_ns=50 * MS).burst_tokens_max == 5
    # window 1 s: everything -> 10 tokens
    assert run(events, times, burst_window_ns=1000 * MS).burst_tokens_max == 10
    # window 1 ns: the largest single delta, 16 chars -> 4 tokens
    assert run(events, times, burst_window_ns=1).burst_tokens_max == 4


def test_usage_fallback_counts_tokens_from_delta_text() -> None:
    events = text_stream([" abc", " de"], out_tokens=0)  # 7 chars -> ceil(7/4) = 2 tokens
    events[-1]["response"]["usage"] = None
    s = run(events)
    assert s.usage is None and s.output_tokens == 2
    rec = record(s)
    assert (rec.output_tokens, rec.input_tokens, rec.cached_tokens) == (2, 0, 0)
    with_usage = run(text_stream([" abc", " de"], out_tokens=9))
    assert with_usage.output_tokens == 9 and record(with_usage).cached_tokens == 4


def test_sim_timing_is_copied_into_turn_record() -> None:
    events = text_stream([" abc"])
    sim = {
        "api_pre": 2.5,
        "api_queue": 1,
        "engine_queue": 0.0,
        "prefill": 7.25,
        "decode": 1.0,
        "api_post": 0.75,
        "ttft": 12.0,
        "cache": "miss",
        "processed_input_tokens": 12,
    }
    events[-1]["response"]["sim_timing"] = sim
    s = run(events)
    assert s.sim_timing == sim
    rec = record(s)
    assert (rec.sim_api_pre_ms, rec.sim_api_queue_ms, rec.sim_engine_queue_ms) == (2.5, 1.0, 0.0)
    assert (rec.sim_prefill_ms, rec.sim_decode_ms, rec.sim_api_post_ms) == (7.25, 1.0, 0.75)
    assert rec.sim_ttft_ms == 12.0 and rec.sim_cache == "miss"
    plain = record(run(text_stream([" abc"])))
    assert plain.sim_prefill_ms == -1.0 and plain.sim_cache == ""


# --- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize("nested", [True, False])
def test_error_then_failed_keeps_error_code(nested: bool) -> None:
    b = ResponseBuilder("resp_9", created_at=1, request={"model": "m"})
    events = (
        b.start()
        + b.begin_message()
        + [b.text_delta(" ab")]
        + b.fail("engine_down", "gone", nested=nested)
    )
    s = ResponseStream(sent_ns=0)
    for i, e in enumerate(events[:-1]):
        s.feed(e, i)
    assert s.done and s.status == "error" and s.error_code == "engine_down"
    s.feed(events[-1], 100)
    assert s.status == "failed" and s.done_ns == 100
    assert (s.error_code, s.error_message) == ("engine_down", "gone")
    rec = record(s)
    assert (rec.status, rec.error_kind, rec.error_message) == ("failed", "engine_down", "gone")
    assert not rec.ok


def test_failed_without_error_event_uses_response_error() -> None:
    b = ResponseBuilder("resp_9", created_at=1, request={"model": "m"})
    events = b.start() + b.fail("rate_limit_exceeded", "slow down")
    s = run(renumber([*events[:2], events[-1]]))
    assert (s.status, s.error_code, s.error_message) == (
        "failed",
        "rate_limit_exceeded",
        "slow down",
    )


def test_request_scoped_ws_error_before_created() -> None:
    s = ResponseStream(sent_ns=0)
    s.feed(
        {
            "type": "error",
            "status": 400,
            "error": {
                "type": "invalid_request_error",
                "code": "previous_response_not_found",
                "message": "nope",
                "param": None,
            },
        },
        7,
    )
    assert s.done and s.status == "error" and s.done_ns == 7
    rec = record(s)
    assert (rec.status, rec.error_kind, rec.error_message) == (
        "error",
        "previous_response_not_found",
        "nope",
    )
    with pytest.raises(StreamOrderError, match="no event after the terminal event"):
        s.feed({"type": "response.in_progress"}, 8)


def test_unfinished_stream_is_recorded_as_error() -> None:
    events = text_stream([" abc"])[:5]
    rec = record(run(events))
    assert rec.status == "error" and rec.error_message == "stream ended before a terminal event"


# --- append prototype ------------------------------------------------------------------------------


def test_pause_and_resume_measures_each_segment() -> None:
    b = ResponseBuilder("resp_a", created_at=1, request={"model": "m"})
    seg1 = b.start() + b.begin_function_call("f", "call_1") + [b.arguments_delta('{"x":1}')]
    seg1 += [*b.end_function_call(), b.pause({"sim_timing": {"decode": 1.0}})]
    seg2 = [*b.begin_message(), b.text_delta(" abc"), b.text_delta(" def"), *b.end_message()]
    seg2.append(b.complete(usage(30, 0, 4)))  # 2 tokens of arguments + 2 of text
    s = ResponseStream(sent_ns=0)
    for i, e in enumerate(seg1):
        s.feed(e, (i + 1) * MS)
    assert s.done and s.status == "paused" and s.function_calls[0]["call_id"] == "call_1"
    assert s.output_tokens == 2 and s.sim_timing == {"decode": 1.0}
    rec1 = record(s)
    assert (
        rec1.status == "completed"
        and rec1.done_ns == len(seg1) * MS
        and rec1.first_token_ns == 4 * MS
    )
    with pytest.raises(StreamOrderError, match="expected no event after the terminal event"):
        s.feed(seg2[0], 99 * MS)
    s.resume(100 * MS)
    assert not s.done and s.first_event_ns == 0 and s.delta_events == 0
    for i, e in enumerate(seg2):
        s.feed(e, (101 + i) * MS)
    assert s.status == "completed" and s.response_id == "resp_a"
    rec2 = record(s)
    assert (rec2.sent_ns, rec2.first_event_ns, rec2.first_token_ns, rec2.last_token_ns) == (
        100 * MS,
        101 * MS,
        103 * MS,
        104 * MS,
    )
    assert rec2.output_tokens == 2 and rec2.delta_events == 2 and rec2.itl_ns == [MS]
    assert [i["type"] for i in s.output_items] == ["message"] and s.function_calls == []


def test_resume_keeps_ordering_state() -> None:
    b = ResponseBuilder("resp_a", created_at=1, request={"model": "m"})
    seg1 = b.start() + b.begin_function_call("f", "c") + b.end_function_call() + [b.pause()]
    s = run(seg1)
    s.resume(0)
    bad = b.begin_message()[0]
    bad["output_index"] = 0  # reuse of an index from before the pause
    with pytest.raises(StreamOrderError, match="output_index 0 added once"):
        s.feed(bad, 1)
    s2 = run(seg1)
    s2.resume(0)
    skipped = dict(bad, output_index=1, sequence_number=bad["sequence_number"] + 1)
    with pytest.raises(StreamOrderError, match=r"expected sequence_number \d+, got \d+"):
        s2.feed(skipped, 1)


def test_resume_requires_pause() -> None:
    s = run(call_stream())
    with pytest.raises(StreamOrderError, match="expected status paused, got completed"):
        s.resume(0)


# --- reasoning (docs/metrics.md §1.1): TTFT at the first reasoning token, TTFOT at the first visible


def reasoning_stream(
    reasoning: int, visible: list[str] | None = None, *, call: bool = False, summary: bool = True
) -> Events:
    """A response that reasons first (output_index 0, as the reasoning contract orders it), then
    answers with ``visible`` text (or one function call); usage counts both."""
    b = ResponseBuilder("resp_r", model="sim", created_at=100, request={})
    head = b.start()
    if call:
        body = [*b.begin_function_call("f", "call_1"), b.arguments_delta('{"a":1}')]
        body += b.end_function_call()
        shown = 2
    else:
        body = b.begin_message() + [b.text_delta(p) for p in visible or []] + b.end_message()
        shown = sum(len(p) for p in visible or []) // 4
    for e in body:
        if "output_index" in e:
            e["output_index"] += 1
    item = {"type": "reasoning", "id": "rs_1", "summary": []}
    done = {**item, "encrypted_content": "bGJyMS4zMDAu" + "x" * 40}
    thinking: Events = [{"type": "response.output_item.added", "output_index": 0, "item": item}]
    if summary:
        part = {"type": "summary_text", "text": ""}
        ids = {"item_id": "rs_1", "output_index": 0, "summary_index": 0}
        thinking += [
            {"type": "response.reasoning_summary_part.added", **ids, "part": part},
            {"type": "response.reasoning_summary_text.delta", **ids, "delta": "Looking."},
            {"type": "response.reasoning_summary_text.done", **ids, "text": "Looking."},
            {"type": "response.reasoning_summary_part.done", **ids, "part": part},
        ]
    thinking.append({"type": "response.output_item.done", "output_index": 0, "item": done})
    end = b.complete(usage(12, 4, reasoning + shown, reasoning_tokens=reasoning))
    end["response"]["output"].insert(0, done)
    return renumber([*head, *thinking, *body, end])


def _times(events: Events, at: dict[int, int]) -> list[int]:
    """Stamps: event i at ``at[i]`` ms when given, else 1 ms after the one before."""
    out, t = [], 0
    for i in range(len(events)):
        t = at.get(i, t + 1)
        out.append(t * MS)
    return out


def test_reasoning_turn_ttft_at_the_reasoning_item_ttfot_at_the_first_visible_delta() -> None:
    pieces = ["abcd"] * 101  # 101 visible tokens
    events = reasoning_stream(300, pieces)
    # created 1, in_progress 2, reasoning added 10 (the first reasoning token), summary
    # events, reasoning done at 300; message head; visible deltas 310, 311, ..., 410 ms
    first_delta = next(i for i, e in enumerate(events) if e["type"] == "response.output_text.delta")
    at = {2: 10, 3: 50, 4: 60, 5: 200, 6: 250, 7: 300, first_delta: 310}
    s = ResponseStream(sent_ns=MS // 2)
    for e, t in zip(events, _times(events, at), strict=True):
        s.feed(e, t)
    rec = record(s)
    assert rec.first_token_ns == 10 * MS and rec.first_output_ns == 310 * MS
    assert D.sample(D.get("ttft_ms"), rec) == 9.5 and D.sample(D.get("ttfot_ms"), rec) == 309.5
    assert (rec.output_tokens, rec.reasoning_tokens, rec.streamed_tokens) == (401, 300, 101)
    assert D.sample(D.get("reasoning_tokens"), rec) == 300
    # ITL, decode rate and burst: the visible output only (100 gaps of 1 ms, 1,000 tokens/s)
    assert rec.itl_ns == [MS] * 100 and rec.last_token_ns == 410 * MS
    assert D.sample(D.get("decode_tps"), rec) == pytest.approx(1000.0)
    assert D.sample(D.get("tpot_ms"), rec) == pytest.approx(1.0)
    assert rec.burst_tokens_max == 100  # 100 of the 101 visible tokens in one 100 ms window
    # the delta count says what was streamed: the one summary delta and the visible deltas
    assert rec.delta_events == 102
    # the reasoning was not streamed, and is not output the stream failed to carry
    rec.status = "completed"
    assert not honesty.decode_implausible(rec)
    # the item as received, encrypted content and all, is among the output items
    assert s.output_items[0]["type"] == "reasoning" and "encrypted_content" in s.output_items[0]


def test_reasoning_before_a_tool_call_and_without_a_summary() -> None:
    events = reasoning_stream(50, call=True, summary=False)
    s = run(events)  # event i at (i + 1) ms
    rec = record(s)
    added = next(i for i, e in enumerate(events) if e["type"] == "response.output_item.added")
    args = next(
        i for i, e in enumerate(events) if e["type"] == "response.function_call_arguments.delta"
    )
    assert rec.first_token_ns == (added + 1) * MS and rec.first_output_ns == (args + 1) * MS
    assert rec.first_output_ns > rec.first_token_ns
    assert rec.reasoning_tokens == 50 and rec.delta_events == 1
    assert [c["call_id"] for c in s.function_calls] == ["call_1"]


def test_without_reasoning_ttfot_is_ttft() -> None:
    rec = record(run(text_stream([" abc", " def"])))
    assert rec.first_output_ns == rec.first_token_ns > 0 and rec.reasoning_tokens == 0
    assert D.sample(D.get("ttfot_ms"), rec) == D.sample(D.get("ttft_ms"), rec)
    assert D.sample(D.get("reasoning_tokens"), rec) is None  # a turn that did not reason


def test_reasoning_that_used_the_whole_budget_leaves_no_visible_output() -> None:
    events = reasoning_stream(64, [])
    # max_output_tokens spent on reasoning: incomplete, no visible output, no decode rate
    events[-1]["type"] = "response.incomplete"
    events[-1]["response"]["status"] = "incomplete"
    rec = record(run(events))
    assert rec.status == "incomplete" and rec.first_token_ns > 0 and rec.first_output_ns == 0
    assert D.sample(D.get("ttfot_ms"), rec) is None and D.sample(D.get("decode_tps"), rec) is None
    assert rec.reasoning_tokens == 64 and rec.streamed_tokens == 0


def test_streamed_reasoning_text_counts_as_reasoning_when_usage_does_not_say() -> None:
    # a server streaming raw reasoning text (reasoning_text.delta) with usage lacking details
    b = ResponseBuilder("resp_t", model="sim", created_at=100, request={})
    events = b.start() + b.begin_message()
    events.append(
        {"type": "response.reasoning_text.delta", "item_id": events[-2]["item"]["id"],
         "output_index": 0, "content_index": 0, "delta": "x" * 400}
    )  # fmt: skip
    events += [b.text_delta("abcd" * 10), *b.end_message(), b.complete(usage(1, 0, 110))]
    renumber(events)
    rec = record(run(events))
    assert (rec.output_tokens, rec.reasoning_tokens, rec.streamed_tokens) == (110, 100, 10)
    reasoning_delta = next(i for i, e in enumerate(events) if "reasoning_text" in e["type"])
    assert rec.first_token_ns == (reasoning_delta + 1) * MS < rec.first_output_ns


@pytest.mark.parametrize(
    ("field", "value", "pattern"),
    [
        (
            "item_id",
            "msg_nope",
            r"sequence_number 6 .*expected item_id 'msg_\w+' for output_index 0",
        ),
        ("output_index", True, r"sequence_number 6 .*expected an integer output_index, got True"),
        (
            "content_index",
            1,
            r"expected response\.content_part\.added for output_index 0 content_index 1",
        ),
        ("sequence_number", 7, r"at sequence_number 7 .*expected sequence_number 6, got 7"),
        ("sequence_number", True, r"expected an integer sequence_number, got True"),
    ],
)
def test_a_delta_after_checked_ones_is_checked_as_fully(
    field: str, value: Any, pattern: str
) -> None:
    # The third delta follows two that passed every check (the state machine's fast path).
    events = text_stream([" abc", " def", " ghi"])
    assert events[6]["type"] == "response.output_text.delta"
    events[6][field] = value
    with pytest.raises(StreamOrderError, match=pattern):
        run(events)


def test_deltas_on_the_fast_path_measure_what_the_full_checks_measure() -> None:
    events = text_stream([" abc", " de", " fghij"])
    fast = record(run(events))
    s = ResponseStream(sent_ns=0)
    for i, e in enumerate(events):
        s._hot = None  # every event through the full checks
        s.feed(e, (i + 1) * MS)
    slow = record(s)
    assert fast == slow and fast.delta_events == 3 and fast.itl_ns == [MS, MS]


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        # one host: the server read the request 0.5 ms after it was sent (first token 5 ms later)
        ({"arrived_clock_ns": MS + MS // 2}, 0.5),
        # the gevent edge stamps on the Unix epoch: the second field is the one that fits
        ({"arrived_clock_ns": 10**15, "arrived_unix_ns": 3 * MS}, 2.0),
        # another host's monotonic clock: no arrival falls between the send and the first
        # token, so the read delay is unknown and no client-side error is claimed
        ({"arrived_clock_ns": 10**15, "arrived_unix_ns": 10**18}, None),
        ({"arrived_clock_ns": 0}, None),
        ({}, None),
    ],
)
def test_the_servers_read_delay_is_kept_only_when_the_clocks_agree(
    fields: dict[str, int], expected: float | None
) -> None:
    events = text_stream([" abc"])
    events[-1]["response"]["sim_timing"] = {"ttft": 1.0, "first_token_late_ms": 0.25, **fields}
    s = ResponseStream(sent_ns=MS)
    for i, e in enumerate(events):
        s.feed(e, (i + 2) * MS)
    rec = record(s)  # sent at 1 ms, first token (the 5th event) at 6 ms
    assert rec.first_token_ns - rec.sent_ns == 5 * MS
    assert rec.server_read_ms == expected
    client = D.sample(D.get("client_error_ms"), rec)
    if expected is None:
        assert client is None
    else:
        assert client == pytest.approx(5.0 - 1.0 - 0.25 - expected)
