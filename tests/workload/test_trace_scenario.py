"""A trace given where a scenario goes (``loopbench run/validate TRACE.jsonl``) and
``loopbench trace show``: pure parts on text and models, then the CLI on files."""

from __future__ import annotations

from pathlib import Path

import orjson

from harness.workload.rollout import generate_rollouts
from harness.workload.scenario import load_scenario
from harness.workload.trace import (
    TraceClient,
    TraceHeader,
    TraceRecovery,
    TraceRollout,
    TraceToolCall,
    TraceTurn,
    TraceWarmup,
    dump_trace,
    parse_trace,
    trace_plan,
)
from harness.workload.trace_scenario import looks_like_trace, trace_scenario
from harness.workload.trace_summary import summarize_rollout, trace_summary_lines
from tests.runs import loopbench


def _rollout(rid: str, start_ms: float | None, **kw: object) -> TraceRollout:
    meta = {} if start_ms is None else {"start_ms": start_ms}
    return TraceRollout(
        type="rollout",
        id=rid,
        system_tokens=100,
        tool_schema_tokens=20,
        user_prompt_tokens=10,
        turns=[
            TraceTurn(output_tokens=5, tool_calls=[TraceToolCall(latency_ms=30, output_tokens=7)]),
            TraceTurn(output_tokens=40),
        ],
        meta=meta,
        **kw,  # type: ignore[arg-type]
    )


def _write(path: Path, rollouts: list[TraceRollout]) -> Path:
    header = TraceHeader(type="trace", version=2, source="test", meta={"exchanges": 5})
    path.write_text(dump_trace(rollouts, header))
    return path


def test_a_trace_is_told_from_a_yaml_scenario() -> None:
    assert looks_like_trace("x.jsonl", "")
    assert looks_like_trace("x.txt", '{"type": "rollout", "turns": []}\n')
    assert looks_like_trace("x", '\n{"type":"trace","version":2}\n')
    assert not looks_like_trace("x.yaml", "name: x\nload: {mode: closed}\n")
    # a one-line JSON scenario is YAML, not a trace
    assert not looks_like_trace("x.json", '{"name": "x"}\n')


def test_recorded_starts_become_an_open_loop_at_those_times(tmp_path: Path) -> None:
    path = _write(tmp_path / "Rec 1.jsonl", [_rollout("a", 0.0), _rollout("b", 250.5)])
    scenario = load_scenario(path)
    assert scenario.name == "rec-1" and scenario.load.mode == "open"
    plans = generate_rollouts(scenario)
    assert [p.start_offset_ns for p in plans] == [0, 250_500_000]
    assert [len(p.turns) for p in plans] == [2, 2]
    # --set switches it like any scenario: a closed loop of two agents
    closed = load_scenario(path, {"load.mode": "closed", "load.concurrency": "2"})
    assert closed.load.concurrency == 2
    assert [p.start_offset_ns for p in generate_rollouts(closed)] == [0, 0]


def test_without_recorded_starts_it_is_a_closed_loop_of_one_agent(tmp_path: Path) -> None:
    # one rollout has no start: the n-th start could not be paired with the n-th rollout
    data = trace_scenario("t.jsonl", dump_trace([_rollout("a", 10.0), _rollout("b", None)], None))
    assert data["load"] == {"mode": "closed", "concurrency": 1}
    # starts out of file order: the same
    out_of_order = dump_trace([_rollout("a", 10.0), _rollout("b", 5.0)], None)
    assert trace_scenario("t.jsonl", out_of_order)["load"]["mode"] == "closed"


def test_a_warmup_reaches_the_first_turns_plan_only() -> None:
    r = _rollout("a", 0.0, warmup=TraceWarmup(input_tokens=90))
    plan = trace_plan(r, 0, 1, 0, {})
    assert [t.warmup for t in plan.turns] == [True, False]
    assert not any(t.warmup for t in trace_plan(_rollout("b", 0.0), 0, 1, 0, {}).turns)
    # a warm-up or a recovery makes the trace version 2, and reads back
    text = dump_trace([r], TraceHeader(type="trace", version=1))
    assert orjson.loads(text.splitlines()[0])["version"] == 2
    assert parse_trace(text.splitlines()) == [r]


def test_show_says_what_the_client_did_with_its_context() -> None:
    r = _rollout("a", 0.0, client=TraceClient(ws_chains=False, resends_reasoning=False))
    assert summarize_rollout(r).notes == ("ws re-sends the input", "no reasoning back")
    r = _rollout("a", 0.0, client=TraceClient(resends_reasoning=True))
    assert summarize_rollout(r).notes == ("reasoning re-sent",)


def test_show_counts_warmups_recoveries_and_tool_time() -> None:
    base = _rollout("a", 0.0, warmup=TraceWarmup())
    recovered = base.turns[1].model_copy(
        update={"recovery": TraceRecovery(failed_attempts=2, status=499, lost_ms=300.0)}
    )
    r = base.model_copy(update={"turns": [base.turns[0], recovered], "meta": {"truncated": True}})
    s = summarize_rollout(r)
    assert (s.turns, s.tool_calls, s.output_tokens, s.tool_ms) == (2, 1, 45, 30.0)
    assert (s.warmup, s.recoveries, s.failed_attempts) == (True, 1, 2)
    assert s.first_input_tokens == 130 and s.notes == ("truncated",)
    lines = trace_summary_lines(
        "t.jsonl",
        [r, _rollout("b", 5.0)],
        TraceHeader(type="trace", version=2, meta={"warmups": 1}),
    )
    assert lines[0] == "t.jsonl: 2 rollouts"
    assert lines[1] == "recorded: version 2, 1 warm-ups"
    header, row_a, row_b, total = lines[2:]
    assert row_b.split()[0] == "b"
    assert header.split()[:2] == ["rollout", "turns"]
    assert row_a.split()[0] == "a" and "1 (2 failed)" in row_a and row_a.endswith("truncated")
    assert total.split()[:4] == ["total", "4", "2", "90"]


def test_the_cli_validates_shows_and_refuses_a_malformed_trace(tmp_path: Path) -> None:
    good = _write(tmp_path / "good.jsonl", [_rollout("a", 0.0, warmup=TraceWarmup())])
    done = loopbench("validate", good)
    assert done.returncode == 0 and done.stdout.strip() == f"{good}: ok", done.stderr
    shown = loopbench("trace", "show", good)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.splitlines()[0] == f"{good}: 1 rollout"
    assert "yes" in shown.stdout.splitlines()[-1]  # the warm-up column
    bad = tmp_path / "bad.jsonl"
    bad.write_text(good.read_text().replace('"output_tokens":40', '"output_tokens":0'))
    for argv in (("validate", bad), ("trace", "show", bad), ("run", bad, "--transports", "http")):
        refused = loopbench(*argv)
        assert refused.returncode == 4, (argv, refused.stdout, refused.stderr)
        assert (
            f"{bad}: line 2: turns[1].output_tokens: expected an integer ≥ 1, got 0"
            in refused.stderr
        ), refused.stderr
        assert "YAML" not in refused.stderr
