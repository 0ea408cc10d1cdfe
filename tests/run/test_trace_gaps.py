"""A run that replays a trace whose recording missed exchanges says so: on stderr and in
its summary (``load.trace_lost``), so a replay is never taken for the whole recorded work."""

from __future__ import annotations

import json
from pathlib import Path

from tests.runs import run_cli


def test_a_run_replaying_an_incomplete_recording_warns_and_its_summary_says_so(
    tmp_path: Path,
) -> None:
    trace = tmp_path / "cut.jsonl"
    why = "the observer's process fell 130 MiB behind the relay"
    header = {"type": "trace", "version": 1, "meta": {"lost": [why]}}
    turns = [
        {"output_tokens": 8, "tool_calls": [{"latency_ms": 1, "output_tokens": 20}]},
        {"output_tokens": 8},
    ]
    trace.write_text(
        json.dumps(header)
        + "\n"
        + json.dumps(
            {"type": "rollout", "system_tokens": 50, "user_prompt_tokens": 9, "turns": turns}
        )
        + "\n"
    )
    scenario = tmp_path / "replay.yaml"
    scenario.write_text(
        "name: replay\nrollout:\n  trace: cut.jsonl\nload:\n  mode: closed\n  concurrency: 1\n"
    )
    proc = run_cli(
        "run", scenario, "--transports", "http", "--out", tmp_path, "--run-id", "r", report=False
    )
    assert f"warning: rollout.trace cut.jsonl: its recording missed exchanges ({why})" in (
        proc.stderr
    )
    summary = json.loads((tmp_path / "r" / "summary.json").read_text())
    assert summary["load"]["trace_lost"] == [why]
