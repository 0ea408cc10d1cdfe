"""``sim_timing.last_token_late_ms``: how late the server wrote a response's last token.

Records in, ``sim_timing`` out: a segment's first and last delta stamps against its
arrival and modelled times.  With ``first_token_late_ms`` it splits a client's decode span
that is longer than the modelled one into the server's part (last − first lateness) and
the wire's and the client's (the rest); the peer bench's ws row was read this way
(BENCHMARKS.md, docs/peers.md).
"""

from __future__ import annotations

import random

from harness.wire import events as ev
from reference_server.core.output import OutputCursor, OutputPlan
from reference_server.service import Segment

MS = 1_000_000


def _segment(first_ns: int | None, last_ns: int | None) -> Segment:
    builder = ev.ResponseBuilder("resp_1", model="m", created_at=0, request={})
    cursor = OutputCursor(builder, OutputPlan((), 200, truncated=False), random.Random(1))
    return Segment(
        output_tokens=200,
        cached_tokens=0,
        input_tokens=50,
        calls=0,
        truncated=False,
        engine_ttft=20.0,
        timing={"engine_queue": 0.0, "prefill": 20.0, "decode": 199.0, "reasoning_ms": 0.0},
        reasoning_tokens=0,
        cursor=cursor,
        first_delta_ns=first_ns,
        last_delta_ns=last_ns,
    )


def _timing() -> dict[str, float]:
    return {"api_pre": 41.0, "api_queue": 0.0}


def test_the_last_tokens_lateness_is_its_write_against_arrival_plus_ttft_plus_decode() -> None:
    arrived = 1_000 * MS
    # first token due at 61 ms (41 + 20), written 0.25 ms late; last due at 260 ms, 2.5 ms late
    seg = _segment(arrived + 61 * MS + MS // 4, arrived + 260 * MS + 5 * MS // 2)
    timing = _timing()
    seg.record(timing, arrived)
    assert timing["first_token_late_ms"] == 0.25
    assert timing["last_token_late_ms"] == 2.5
    # the server's share of a client's decode span 2.25 ms longer than modelled
    assert timing["last_token_late_ms"] - timing["first_token_late_ms"] == 2.25


def test_no_lateness_without_an_arrival_or_a_delta() -> None:
    arrived = 1_000 * MS
    timing = _timing()
    _segment(None, None).record(timing, arrived)
    assert "last_token_late_ms" not in timing
    later = _timing()  # a later segment of an append-mode response: no arrival of its own
    _segment(arrived + 61 * MS, arrived + 260 * MS).record(later, None)
    assert "last_token_late_ms" not in later
