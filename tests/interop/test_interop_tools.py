"""``make interop``'s pure parts: the scrubber of captured bodies, the replay's verdict, the table.

The agents themselves run in ``make interop`` (docs/agents.md), not in the test suite.
"""

from __future__ import annotations

import json

from tests.agent_requests import DATA
from tools.interop.cases import CASES
from tools.interop.record_replay import Recorded, Recorder, Replayed, compare, recording_problems
from tools.interop.scrub import placeholder, scrub_body
from tools.interop.table import Row, Tally, render


def test_scrub_replaces_prose_by_same_length_text_and_keeps_the_interface() -> None:
    tool = {
        "type": "function",
        "name": "exec_command",
        "description": "Runs a command in a PTY, returning output.",
        "parameters": {
            "type": "object",
            "properties": {
                "cmd": {"type": "string", "description": "Shell command to execute."},
                "tty": {"type": "boolean", "enum": [True, False]},
            },
            "required": ["cmd"],
        },
    }
    body = {
        "instructions": "You are Codex, a coding agent.",
        "input": [
            {"role": "developer", "content": [{"type": "input_text", "text": "Be careful."}]},
            {"role": "user", "content": "the task"},
            {"type": "function_call_output", "call_id": "c1", "output": "exit 0"},
            {"type": "function_call_output", "call_id": "c2", "output": "x" * 500},
        ],
        "tools": [tool],
    }
    out = scrub_body(body, frozenset({"the task"}))
    assert out["instructions"] == placeholder(len(body["instructions"]))
    assert out["input"][0]["content"][0]["text"] == placeholder(len("Be careful."))
    assert out["input"][1]["content"] == "the task"  # the capture's own task is kept
    assert out["input"][2]["output"] == "exit 0"  # a short status line is interface
    assert out["input"][3]["output"] == placeholder(500)
    params = out["tools"][0]["parameters"]
    assert params["required"] == ["cmd"] and params["properties"]["tty"]["enum"] == [True, False]
    assert params["properties"]["cmd"]["description"] == placeholder(
        len("Shell command to execute.")
    )
    assert body["tools"][0]["description"].startswith("Runs")  # the input is not changed


def test_the_committed_captures_hold_no_authored_prose() -> None:
    """Every description in the committed captures is placeholder text."""
    for path in DATA.glob("*.json"):
        text = path.read_text()
        for marker in ("You are Codex", "You are Claude", "IMPORTANT:", "<system-reminder>"):
            assert marker not in text, (path.name, marker)
        json.loads(text)


def test_replay_verdict_tolerates_prompt_framing_not_a_different_session() -> None:
    rec = Recorded(1, 4, 1000, 10_000, 0, 0, 0)
    same = Replayed(0, 4, 0, 1020, 10_200, ())
    assert compare(rec, same) == []
    small = Recorded(1, 4, 100, 1000, 0, 0, 0)
    assert compare(small, Replayed(0, 4, 0, 100, 1150, ())) == []  # 38 tokens a turn
    assert compare(small, Replayed(0, 4, 0, 100, 2400, ())) == [
        "input tokens 2,400 replayed vs 1,000 recorded"
    ]
    assert compare(rec, Replayed(0, 3, 1, 1200, 10_000, ())) == [
        "replayed 3 turns, recorded 4",
        "1 replayed turns failed",
        "output tokens 1,200 replayed vs 1,000 recorded",
    ]


def test_a_codex_websocket_recording_is_one_rollout_with_its_warm_up() -> None:
    """The verdict on a recording: one rollout, the warm-up Codex opens a WebSocket session
    with, and one recovery per cut the server made; a split session or a warm-up recorded as
    a rollout of its own (issue 36) is a failure."""
    by_name = {c.name: c for c in CASES}
    ws, cut, http = by_name["codex-ws"], by_name["codex-ws-reconnect"], by_name["codex-http"]
    assert recording_problems(ws, Recorded(1, 4, 100, 1000, 1, 0, 0)) == []
    assert recording_problems(cut, Recorded(1, 4, 100, 1000, 1, 1, 0)) == []
    assert recording_problems(http, Recorded(1, 4, 100, 1000, 0, 0, 0)) == []
    assert recording_problems(ws, Recorded(2, 4, 100, 1000, 0, 0, 0)) == [
        "2 rollouts for one session",
        "0 warm-ups, 1 expected",
    ]
    assert recording_problems(cut, Recorded(1, 4, 100, 1000, 1, 0, 0)) == [
        "0 recoveries, 1 expected"
    ]


def test_the_table_counts_failures() -> None:
    ok, bad = Tally(), Tally()
    ok.add([], 4)
    ok.add([], 5)
    bad.add(["no answer within 180 s"], 1)
    text = render([Row(CASES[0], "direct", ok), Row(CASES[1], "record", bad)], 12.0)
    assert "| 2/2     | 4-5   | 0" in text
    assert "no answer within 180 s" in text
    assert text.endswith("interop: 3 runs, 1 failed, 12 s")


def test_a_recorder_stopped_by_ctrl_c_ended_as_it_should() -> None:
    """``loopbench record`` exits 130 after writing its trace when stopped by Ctrl-C (the
    exit-code table), which is how the interop run stops it; anything else is a failure."""
    assert Recorder(returncode=130).problem() is None
    assert Recorder(returncode=0).problem() is None
    assert Recorder(returncode=3).problem() == "loopbench record exited 3"
    assert Recorder(returncode=None).problem() == "loopbench record exited None"
