"""The Codex CLI importer on a synthetic session file written in the Codex rollout format.

``data/codex-session.jsonl`` follows the Codex CLI rollout recorder's lines
(``{timestamp, type, payload}``: session_meta, turn_context, response_item with
message / reasoning / function_call / function_call_output / custom_tool_call /
custom_tool_call_output, event_msg token_count with total/last token usage, and
compacted).  Its numbers are chosen so that every derivation rule shows up in
exactly one place; the expected values below are worked out by hand.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from harness.wire.errors import UsageError
from harness.workload.importers import find_session_files, import_sessions
from harness.workload.importers.codex import (
    SessionImportError,
    import_codex_files,
    parse_codex_session,
)
from harness.workload.trace import TraceRollout, read_trace
from tests.runs import ROOT, run_cli

SESSION = Path(__file__).parent / "data" / "codex-session.jsonl"
SESSION_ID = "0199a1b2-c3d4-7e5f-8a9b-0c1d2e3f4a5b"


@pytest.fixture(scope="module")
def rollouts() -> list[TraceRollout]:
    return import_codex_files([str(SESSION)])


def test_one_rollout_per_task_and_per_compaction_segment(rollouts: list[TraceRollout]) -> None:
    assert [r.id for r in rollouts] == [f"{SESSION_ID}#{i}" for i in range(3)]
    assert [r.meta.get("model") for r in rollouts] == ["gpt-5-codex"] * 3
    assert rollouts[1].meta["ended_by_compaction"] and rollouts[1].meta["truncated"]
    assert rollouts[2].meta["starts_from_compaction"]


def test_first_task_turns(rollouts: list[TraceRollout]) -> None:
    task = rollouts[0]
    # Injected <user_instructions>/<environment_context> are context; the prompt is 83 chars.
    assert task.user_prompt_tokens == 21
    # First call's input_tokens (6021) minus the prompt.
    assert task.system_tokens == 6000
    # Output tokens from last_token_usage; the repeated token_count at the end is ignored.
    assert [t.output_tokens for t in task.turns] == [150, 90, 210, 40]
    assert [len(t.tool_calls) for t in task.turns] == [1, 2, 1, 0]
    # Latency = output timestamp - call timestamp, per call (parallel calls each their own).
    latencies = [[c.latency_ms for c in t.tool_calls] for t in task.turns]
    assert latencies == [[850.0], [400.0, 1490.0], [250.0], []]
    # Tool output tokens = growth of the next input minus the visible output just produced:
    # 6500 - 6021 - (150 - 96) = 425; 7000 - 6500 - (90 - 40) = 450 split 1,260:460 chars
    # by output length; 7200 - 7000 - (210 - 60) = 50.
    outputs = [[c.output_tokens for c in t.tool_calls] for t in task.turns]
    assert outputs == [[425], [328, 122], [50], []]
    assert all(t.think_ms == 0 for t in task.turns)


def test_task_cut_by_compaction_uses_text_sizes(rollouts: list[TraceRollout]) -> None:
    task = rollouts[1]
    assert task.user_prompt_tokens == 11
    assert task.system_tokens == 7400 - 11  # earlier conversation is part of the context
    # No later call in this segment: the output's size comes from its text (2,000 chars).
    assert [(c.latency_ms, c.output_tokens) for c in task.turns[0].tool_calls] == [(12000.0, 500)]
    # It stopped on a tool call: a one-token answer closes it.
    assert [t.output_tokens for t in task.turns] == [70, 1]


def test_segment_after_compaction_starts_from_the_summary(rollouts: list[TraceRollout]) -> None:
    task = rollouts[2]
    assert task.user_prompt_tokens == 23  # the 92-character summary
    assert task.system_tokens == 3100 - 23
    assert [(c.latency_ms, c.output_tokens) for c in task.turns[0].tool_calls] == [(120.0, 40)]
    assert [t.output_tokens for t in task.turns] == [50, 30]


def test_without_usage_events_sizes_come_from_text() -> None:
    lines = [
        line
        for line in SESSION.read_text().splitlines()
        if '"token_count"' not in line and '"compacted"' not in line
    ]
    first = parse_codex_session(lines, "no-usage.jsonl")[0]
    assert not first.meta["usage"]
    # Output estimated from the items' text: reasoning summary + function call name/args.
    assert all(t.output_tokens >= 1 for t in first.turns)
    assert [len(t.tool_calls) for t in first.turns] == [1, 2, 1, 0]
    # The first call's output is the JSON-wrapped shell result (text length / 4).
    [payload] = [
        json.loads(line)["payload"]["output"]
        for line in lines
        if '"function_call_output"' in line and "call_A1" in line
    ]
    assert first.turns[0].tool_calls[0].output_tokens == -(-len(payload) // 4)


def test_bad_session_lines() -> None:
    with pytest.raises(SessionImportError, match=r"^s.jsonl: line 2: invalid JSON"):
        parse_codex_session(['{"type": "session_meta", "payload": {}}', "{oops"], "s.jsonl")
    with pytest.raises(SessionImportError, match=r"^s.jsonl: line 1: expected a \{timestamp"):
        parse_codex_session(["[1]"], "s.jsonl")
    # Unknown line types and payloads are skipped (the format grows over versions).
    assert parse_codex_session(['{"type": "new_kind", "payload": {"x": 1}}'], "s.jsonl") == []


def test_a_binary_file_is_a_located_error(tmp_path: Path) -> None:
    """Not a UTF-8 text file: named like every importer names it, not a UnicodeDecodeError."""
    path = tmp_path / "rollout.jsonl"
    path.write_bytes(b"\xff\xfe\x00 not text")
    with pytest.raises(
        SessionImportError, match=r"rollout.jsonl: expected UTF-8 JSON lines, got binary"
    ):
        import_codex_files([str(path)])


def test_import_writes_a_trace_the_scenario_reads(tmp_path: Path) -> None:
    (tmp_path / "sessions" / "2025" / "11").mkdir(parents=True)
    copy = tmp_path / "sessions" / "2025" / "11" / "rollout-a.jsonl"
    copy.write_text(SESSION.read_text())
    assert find_session_files([str(tmp_path / "sessions")]) == [str(copy)]
    out = tmp_path / "traces" / "mine.jsonl"
    report = import_sessions("codex", [str(tmp_path / "sessions")], str(out))
    assert report.startswith("wrote 3 rollouts (8 turns, 6 tool calls, history up to ")
    assert read_trace(out) == import_codex_files([str(SESSION)])
    header = json.loads(out.read_text().splitlines()[0])
    assert header == {
        "type": "trace",
        "version": 1,
        "source": "codex",
        "meta": {"files": ["rollout-a.jsonl"]},
    }
    with pytest.raises(UsageError, match="expected a session file or folder"):
        import_sessions("codex", [str(tmp_path / "nothing")], str(out))
    with pytest.raises(UsageError, match="unknown format"):
        import_sessions("claude", [str(copy)], str(out))


def test_cli_import(tmp_path: Path) -> None:
    out = tmp_path / "t.jsonl"
    proc = run_cli("import", "codex", SESSION, "-o", out, timeout=60)
    assert "wrote 3 rollouts" in proc.stdout
    assert len(read_trace(out)) == 3


def test_shipped_sample_trace_is_this_import() -> None:
    shipped = read_trace(ROOT / "scenarios" / "traces" / "codex-sample.jsonl")
    assert shipped == import_codex_files([str(SESSION)])
