"""Codex CLI sessions as ``loopbench record`` saw them, read by the pure observer.

``data/codex-*.jsonl.gz`` hold what the recording proxy handed its observer while Codex CLI
0.171.0 (``codex exec``, a custom provider with ``wire_api = "responses"`` and
``supports_websockets = true``) ran against the reference server: each line one call of
:func:`~harness.record.observe.summarize` (the request body and the response's WebSocket
events, with every text replaced by filler of the same length) or one exchange the observer
saw fail.  ``tests/record/codex_capture.py`` made them.  The sequences are Codex's own: a
``generate: false`` warm-up first on each connection, the task chained from it; after the
server closes the socket mid-response, a new connection whose first request re-sends the
whole context without ``previous_response_id``.
"""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson

from harness.record.observe import Exchange, build_trace, summarize
from harness.workload.trace import TraceRollout, dump_trace, parse_trace

DATA = Path(__file__).parent / "data"


def exchanges(name: str) -> list[Exchange]:
    out: list[Exchange] = []
    with gzip.open(DATA / f"{name}.jsonl.gz", "rt", encoding="utf-8") as fh:
        for line in fh:
            r = orjson.loads(line)
            if r["kind"] == "failed":
                t_start, t_end = r["times"]
                ex = Exchange(r["api"], r["transport"], r["connection"], t_start, t_end)
                ex.status = r["status"]
                out.append(ex)
                continue
            start, *_, end = r["times"]  # older captures hold the first byte's time between
            summary = summarize(
                r["api"],
                r["transport"],
                r["connection"],
                r["request"].encode(),
                r["status"],
                r["response"].encode(),
                r["headers"],
                (start, end),
            )
            assert summary is not None
            out.append(summary)
    return out


def trace(name: str) -> tuple[dict[str, object], list[TraceRollout]]:
    header, rollouts = build_trace(exchanges(name))
    # What the recorder writes must read back as a valid trace.
    assert parse_trace(dump_trace(rollouts, header).splitlines(), name) == rollouts
    return header.meta, rollouts


def test_a_websocket_session_is_one_rollout_with_its_warmup() -> None:
    """The warm-up is the rollout's, not a 1-turn rollout the task then "follows"."""
    meta, rollouts = trace("codex-warmup")
    assert meta["exchanges"] == 5 and meta["failed"] == 0 and meta["warmups"] == 1
    [rollout] = rollouts
    assert rollout.warmup is not None and rollout.warmup.input_tokens == 8799
    assert [len(t.tool_calls) for t in rollout.turns] == [1, 1, 1, 0]
    assert "follows" not in rollout.meta and "truncated" not in rollout.meta
    # The first turn's prompt is the task's, the warm-up's context in system_tokens.
    first = rollout.turns[0]
    assert first.input_tokens == (
        rollout.system_tokens + rollout.tool_schema_tokens + rollout.user_prompt_tokens
    )
    assert all(t.output_tokens > 1 for t in rollout.turns)


def test_a_session_that_reconnects_is_one_rollout_whose_failed_requests_are_recoveries() -> None:
    """Each re-send of the whole context continues the session (it extends the items the
    session had) and is marked a recovery; the requests cut with the socket are recorded
    as failed attempts of that turn, not closed with invented one-token answers."""
    meta, rollouts = trace("codex-reconnect")
    assert meta["exchanges"] == 7 and meta["failed"] == 2
    [rollout] = rollouts
    assert rollout.warmup is not None
    assert "truncated" not in rollout.meta and "follows" not in rollout.meta
    turns = rollout.turns
    assert [len(t.tool_calls) for t in turns] == [1, 1, 1, 0]
    assert all(t.output_tokens > 1 for t in turns)
    recovered = [i for i, t in enumerate(turns) if t.recovery is not None]
    # the server cut the third response of each connection: twice in this session
    assert recovered == [1, 3]
    for i in recovered:
        recovery = turns[i].recovery
        assert recovery is not None
        assert recovery.failed_attempts == 1 and recovery.status == 499
        assert recovery.lost_ms > 0
        # the tools ran until the failed request went out, not until the re-send
        assert turns[i - 1].tool_calls[0].latency_ms < recovery.lost_ms
    # the re-sent context grew by the tool outputs of the turns before, as a chain would
    assert turns[1].input_tokens is not None and turns[0].input_tokens is not None
    assert turns[1].input_tokens > turns[0].input_tokens


def test_two_concurrent_sessions_are_two_rollouts() -> None:
    """Two Codex processes at once: each connection's warm-up starts its own session.  One
    of them ended on a request the server refused: closed there, and said so."""
    meta, rollouts = trace("codex-concurrent")
    assert meta["warmups"] == 2
    assert len(rollouts) == 2
    one, two = rollouts
    assert one.warmup is not None and two.warmup is not None
    assert [len(t.tool_calls) for t in one.turns] == [1, 1, 1, 0]
    assert "truncated" not in one.meta
    for r in rollouts:
        assert "follows" not in r.meta and "overlapped_with" not in r.meta
        assert "forked_from" not in r.meta and r.subagent_count == 0
    assert two.meta["truncated"] is True
    assert two.meta["ended_on_failure"] == {"requests": 1, "status": 500}
