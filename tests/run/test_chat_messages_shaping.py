"""Request shaping over ``chat`` and ``messages``: ``loopbench run --target`` against the
recording reference server, each API's ``extra_body`` merged into its own bodies only, the
session header on every request of a rollout, the extra headers beside each API's own."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from harness.cli.main import main
from harness.report.results import load_run
from tests.header_recorder import recording_target

APIS = ("chat", "messages")
SCENARIO = """
name: shaped-apis
seed: 7
rollout:
  count: 2
  system_tokens: 60
  tool_schema_tokens: 50
  user_prompt_tokens: 20
  tool_calls: 2
  tool_output_tokens: 30
  tool_latency_ms: 1
  step_output_tokens: 20
  final_answer_tokens: 30
load:
  mode: closed
  concurrency: 2
target:
  headers:
    X-Team: perf
  session_header: X-Session-ID
  extra_body:
    chat:
      temperature: 0.25
    messages:
      top_k: 5
"""


def test_shaping_reaches_chat_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    scenario = tmp_path / "shaped.yaml"
    scenario.write_text(SCENARIO)
    with recording_target() as (url, recording), pytest.raises(SystemExit) as exited:
        main(
            ["run", str(scenario), "--target", url, "--no-probe", "--transports", ",".join(APIS),
             "--out", str(tmp_path), "--run-id", "r1", "-q"]
        )  # fmt: skip
    out = capsys.readouterr()
    assert exited.value.code == 0, out.err + out.out
    turns = load_run(tmp_path / "r1").turns
    assert len(turns) and turns["status"].eq("completed").all()
    chat = recording.http("/chat/completions")
    msgs = recording.http("/messages")
    assert len(chat) + len(msgs) == len(turns)
    for ex in [*chat, *msgs]:
        assert ex.headers["x-team"] == "perf"
    assert all("authorization" in ex.headers and "x-api-key" not in ex.headers for ex in chat)
    assert all(ex.headers["x-api-key"] and "authorization" not in ex.headers for ex in msgs)
    # each API's own extra fields, and only those
    for ex in chat:
        assert ex.bodies[0]["temperature"] == 0.25 and "top_k" not in ex.bodies[0]
    for ex in msgs:
        assert ex.bodies[0]["top_k"] == 5 and "temperature" not in ex.bodies[0]
    sessions = Counter(ex.headers["x-session-id"] for ex in [*chat, *msgs])
    per_rollout = Counter(
        f"r1-{t}-{r}" for t, r in zip(turns.transport, turns.rollout_id, strict=True)
    )
    assert sessions == per_rollout
