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
    recording_gaps,
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
            "t.jsonl: line 2: user_prompt_tokens: expected an integer ≥ 1, got 0",
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
            "t.jsonl: line 1: turns[0].tool_calls[0].latency_ms: expected a number ≥ 0, got -1",
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
            [json.dumps({"type": "trace", "version": 3}), _line()],
            "t.jsonl: line 1: version: expected one of 1, 2, got 3",
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


# Version 2: reasoning, recorded input/cached tokens, and a sub-agent that itself forks one.
SUB_INNER: dict[str, Any] = {
    "id": "conv-3",
    "system_tokens": 100,
    "user_prompt_tokens": 20,
    "result_tokens": 15,
    "turns": [{"output_tokens": 15}],
}
SUB: dict[str, Any] = {
    "id": "conv-2",
    "join": "wait",
    "system_tokens": 900,
    "tool_schema_tokens": 300,
    "user_prompt_tokens": 200,
    "result_tokens": 90,
    "turns": [
        {
            "output_tokens": 30,
            "tool_calls": [{"latency_ms": 0, "output_tokens": 15, "subagent": 0}],
            "subagents": [SUB_INNER],
        },
        {"output_tokens": 90, "reasoning_tokens": 12},
    ],
}
V2_TURNS: list[dict[str, Any]] = [
    {
        "output_tokens": 60,
        "reasoning_tokens": 25,
        "input_tokens": 1600,
        "cached_tokens": 1024,
        "tool_calls": [
            {"latency_ms": 120.0, "output_tokens": 350},
            {"latency_ms": 0, "output_tokens": 90, "subagent": 1},
            {"latency_ms": 0, "output_tokens": 7, "subagent": 0},
        ],
        "subagents": [
            {**SUB_INNER, "id": "conv-4", "join": "detach", "result_tokens": 7},
            SUB,
        ],
    },
    {"output_tokens": 40},
]


def _v2_line(**changes: Any) -> str:
    return json.dumps({**ROLLOUT, "id": "conv-1", "turns": V2_TURNS, **changes})


def test_v2_round_trip() -> None:
    header = json.dumps({"type": "trace", "version": 2, "source": "loopbench-record"})
    rollouts = parse_trace([header, _v2_line()], "t.jsonl")
    [r] = rollouts
    assert r.uses_v2 and r.subagent_count == 3
    assert r.turns[0].reasoning_tokens == 25 and r.turns[0].cached_tokens == 1024
    assert r.turns[0].subagents[1].turns[0].subagents[0].id == "conv-3"
    text = dump_trace(rollouts, TraceHeader(type="trace", version=1, source="x"))
    first = json.loads(text.splitlines()[0])
    assert first["version"] == 2  # a v1 header would misdescribe sub-agents
    assert parse_trace(text.splitlines()) == rollouts
    assert dump_trace(parse_trace(text.splitlines())) == dump_trace(rollouts)


def test_v1_file_is_written_as_v1() -> None:
    """A trace using no v2 field is dumped byte for byte as version 1 wrote it."""
    rollouts = parse_trace([_line()])
    text = dump_trace(rollouts, TraceHeader(type="trace", version=2, source="test"))
    assert text.splitlines()[0] == '{"type":"trace","version":1,"source":"test","meta":{}}'
    for key in ("reasoning_tokens", "subagents", "subagent", "input_tokens", "cached_tokens"):
        assert key not in text


def _sub_error(**turn0: Any) -> str:
    return _v2_line(turns=[{**V2_TURNS[0], **turn0}, V2_TURNS[1]])


#: the first turn's calls up to the one that names sub-agent 1 (none names sub-agent 0)
NAMES_SUB_1: list[dict[str, Any]] = V2_TURNS[0]["tool_calls"][:2]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (
            _sub_error(subagents=[V2_TURNS[0]["subagents"][0], {**SUB, "user_prompt_tokens": 0}]),
            "line 1: turns[0].subagents[1].user_prompt_tokens: expected an integer ≥ 1",
        ),
        (
            _sub_error(
                subagents=[
                    V2_TURNS[0]["subagents"][0],
                    {**SUB, "turns": [SUB["turns"][0], {**SUB["turns"][1], "output_tokens": 0}]},
                ]
            ),
            "line 1: turns[0].subagents[1].turns[1].output_tokens: expected an integer ≥ 1",
        ),
        (
            _sub_error(subagents=[V2_TURNS[0]["subagents"][0], {**SUB, "join": "later"}]),
            "line 1: turns[0].subagents[1].join: expected one of wait, detach, got 'later'",
        ),
        (
            _sub_error(
                subagents=[V2_TURNS[0]["subagents"][0], {**SUB, "turns": [SUB["turns"][0]]}]
            ),
            "line 1: turns[0].subagents[1].turns[0].tool_calls: expected no tool calls on the "
            "last turn (the final answer), got 1",
        ),
        (
            _sub_error(
                tool_calls=[*NAMES_SUB_1, {"latency_ms": 0, "output_tokens": 7, "subagent": 2}]
            ),
            "line 1: turns[0].tool_calls[2].subagent: expected an index into this turn's "
            "subagents (0 to 1), got 2",
        ),
        (
            _sub_error(tool_calls=NAMES_SUB_1),
            "line 1: turns[0].subagents[0]: expected a sub-agent named by one of this turn's "
            "tool_calls",
        ),
        (
            _sub_error(
                tool_calls=[
                    {"latency_ms": 0, "output_tokens": 91, "subagent": 1},
                    {"latency_ms": 0, "output_tokens": 7, "subagent": 0},
                ]
            ),
            "line 1: turns[0].tool_calls[0].output_tokens: expected the sub-agent's "
            "result_tokens (90), got 91",
        ),
        (
            _sub_error(reasoning_tokens=-1),
            "line 1: turns[0].reasoning_tokens: expected an integer ≥ 0, got -1",
        ),
    ],
)
def test_v2_errors_name_line_and_field(line: str, message: str) -> None:
    with pytest.raises(ScenarioError) as err:
        parse_trace([line], "t.jsonl")
    assert str(err.value).startswith("t.jsonl: " + message), str(err.value)


def test_trace_plan_maps_subagents_depth_first() -> None:
    [r] = parse_trace([_v2_line()])
    plan = trace_plan(r, 3, 42, 0, {})
    turn = plan.turns[0]
    assert turn.reasoning_tokens == 25 and turn.tool_calls == 3
    # depth-first in fork order: conv-4 = 1, conv-2 = 2, its own conv-3 = 3
    first, second = turn.subagents
    assert (first.subagent_id, first.call_index, first.join, first.result_tokens) == (
        1,
        2,
        "detach",
        7,
    )
    assert (second.subagent_id, second.call_index, second.result_tokens) == (2, 1, 90)
    [inner] = second.turns[0].subagents
    assert inner.subagent_id == 3 and inner.call_index == 0
    assert second.turns[1].reasoning_tokens == 12 and second.turns[1].final
    assert len({first.seed, second.seed, inner.seed, plan.seed}) == 4
    # the same trace and seed give the same plan (paired replays)
    assert trace_plan(r, 3, 42, 0, {}) == plan


def test_recording_gaps_are_the_headers_lost_reasons_and_nothing_else(tmp_path: Path) -> None:
    """What `loopbench record` wrote into ``meta.lost`` when its observer fell behind, hung or
    died; a whole trace, a trace without header or an unreadable first line has none."""
    rollout = '{"type": "rollout", "turns": [{"output_tokens": 5}]}'
    cases = {
        "lost": '{"type": "trace", "version": 1, "meta": {"lost": ["fell 128 MiB behind"]}}',
        "whole": '{"type": "trace", "version": 1, "meta": {"failed": 2}}',
        "headless": rollout,
        "garbled": "{not json",
    }
    gaps = {}
    for name, first in cases.items():
        path = tmp_path / f"{name}.jsonl"
        path.write_text(f"{first}\n{rollout}\n")
        gaps[name] = recording_gaps(path)
    gaps["missing"] = recording_gaps(tmp_path / "nowhere.jsonl")
    assert gaps == {
        "lost": ["fell 128 MiB behind"],
        "whole": [],
        "headless": [],
        "garbled": [],
        "missing": [],
    }
