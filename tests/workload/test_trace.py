"""The generic JSONL trace format: parsing, one-line errors, round trip, replay plans."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from harness.wire.errors import ScenarioError
from harness.workload.trace import (
    TraceHeader,
    dump_trace,
    parse_trace,
    read_trace,
    resolve_trace_path,
    trace_plan,
)

ROLLOUT: dict[str, Any] = {
    "type": "rollout",
    "id": "s#0",
    "system_tokens": 3000,
    "tool_schema_tokens": 500,
    "user_prompt_tokens": 40,
    "turns": [
        {"output_tokens": 120, "tool_calls": [{"latency_ms": 850.5, "output_tokens": 400}]},
        {
            "output_tokens": 90,
            "tool_calls": [
                {"latency_ms": 400, "output_tokens": 300},
                {"latency_ms": 1490, "output_tokens": 100},
            ],
            "think_ms": 12,
        },
        {"output_tokens": 60},
    ],
}


def _line(**changes: Any) -> str:
    return json.dumps({**ROLLOUT, **changes})


def test_parse_and_derived_figures() -> None:
    header = json.dumps({"type": "trace", "version": 1, "source": "codex"})
    [r] = parse_trace([header, "", _line()], "t.jsonl")
    assert r.id == "s#0" and len(r.turns) == 3
    assert r.output_tokens == 270
    assert r.tool_call_count == 3
    # system + schema + prompt + (120 + 400) + (90 + 300 + 100)
    assert r.final_history_tokens == 3540 + 520 + 490


def test_round_trip() -> None:
    rollouts = parse_trace([_line(), _line(id="s#1")])
    text = dump_trace(rollouts, TraceHeader(type="trace", version=1, source="test"))
    assert text.splitlines()[0] == '{"type":"trace","version":1,"source":"test","meta":{}}'
    assert parse_trace(text.splitlines()) == rollouts


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["{not json"], "t.jsonl: line 1: invalid JSON: "),
        (["[1, 2]"], "t.jsonl: line 1: expected a JSON object, got [1, 2]"),
        ([json.dumps({"type": "session"})], "t.jsonl: line 1: type: expected trace or rollout"),
        ([], "t.jsonl: expected at least one rollout line, got none"),
        (
            ["", _line(user_prompt_tokens=0)],
            "t.jsonl: line 2: user_prompt_tokens: expected an integer at least 1, got 0",
        ),
        (
            [
                _line(
                    turns=[
                        {
                            "output_tokens": 5,
                            "tool_calls": [{"latency_ms": -1, "output_tokens": 3}],
                        },
                        {"output_tokens": 1},
                    ]
                )
            ],
            "t.jsonl: line 1: turns[0].tool_calls[0].latency_ms: expected a non-negative number, got -1",
        ),
        (
            [_line(turns=[{"output_tokens": 5}, {"output_tokens": 1}])],
            "t.jsonl: line 1: turns[0].tool_calls: expected at least one tool call before the "
            "last turn, got []",
        ),
        (
            [
                _line(
                    turns=[
                        {"output_tokens": 5, "tool_calls": [{"latency_ms": 1, "output_tokens": 3}]}
                    ]
                )
            ],
            "t.jsonl: line 1: turns[0].tool_calls: expected no tool calls on the last turn "
            "(the final answer), got 1",
        ),
        ([_line(turns=[])], "t.jsonl: line 1: turns: expected a non-empty list, got []"),
        ([_line(colour="red")], "t.jsonl: line 1: colour: unknown field"),
        (
            [_line(), json.dumps({"type": "trace", "version": 1})],
            "t.jsonl: line 2: type: expected the header only on line 1",
        ),
        (
            [json.dumps({"type": "trace", "version": 2}), _line()],
            "t.jsonl: line 1: version: expected one of 1, got 2",
        ),
    ],
)
def test_bad_trace_is_one_line(lines: list[str], message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_trace(lines, "t.jsonl")
    text = str(err.value)
    assert "\n" not in text
    assert text.startswith(message), text


def test_trace_plan_replays_every_turn() -> None:
    [r] = parse_trace([_line()])
    plan = trace_plan(r, 7, 99, 1_000, {"phase": "measure"})
    assert plan.rollout_id == 7 and plan.seed == 99 and plan.start_offset_ns == 1_000
    assert (plan.system_tokens, plan.tool_schema_tokens, plan.user_prompt_tokens) == (3000, 500, 40)
    assert [t.output_tokens for t in plan.turns] == [120, 90, 60]
    assert [t.tool_calls for t in plan.turns] == [1, 2, 0]
    assert plan.turns[1].tool_latency_ms == (400.0, 1490.0)
    assert plan.turns[1].tool_output_tokens == (300, 100)
    assert plan.turns[1].think_ms == 12.0
    assert plan.turns[2].final


def test_resolve_relative_to_scenario_then_cwd(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    (tmp_path / "sc" / "traces").mkdir(parents=True)
    trace = tmp_path / "sc" / "traces" / "a.jsonl"
    trace.write_text(_line() + "\n")
    scenario = str(tmp_path / "sc" / "x.yaml")
    assert resolve_trace_path("traces/a.jsonl", scenario) == str(trace)
    monkeypatch.chdir(tmp_path)
    assert resolve_trace_path("sc/traces/a.jsonl", scenario) == "sc/traces/a.jsonl"
    assert resolve_trace_path(str(trace), "<scenario>") == str(trace)
    with pytest.raises(
        ScenarioError,
        match=r"x.yaml: rollout.trace: expected an existing trace file, got 'nope.jsonl'",
    ):
        resolve_trace_path("nope.jsonl", scenario)
    assert read_trace(trace)[0].id == "s#0"
    with pytest.raises(ScenarioError, match="file not found"):
        read_trace(tmp_path / "missing.jsonl")
