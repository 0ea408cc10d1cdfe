"""Request shaping reaches the server: ``loopbench run --target`` against a recording server.

The scenario's ``target:`` section and the flags (``--header``, ``--session-header``,
``--extra-body``, ``--model``) over ``http``, ``http-chained`` and ``ws``: every request
carries the headers, the session header is the rollout's key on each of its turns (and
on its WebSocket handshake), every body has the extra fields merged in, and no
credential's value is printed or recorded.  Over ``chat`` and ``messages``: each API's
``extra_body`` merged into its own bodies only, the session header on every request of a
rollout, the extra headers beside each API's own.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pandas as pd
import pytest

from harness.cli.main import main
from harness.report.results import load_run
from tests.header_recorder import SHAPE, Recording, recording_target

TRANSPORTS = ["http", "http-chained", "ws"]
SECRET_IN_FILE = "file-secret-4f1c"
SECRET_ON_CLI = "cli-secret-9a2e"

SCENARIO = f"""
name: shaped
seed: 7
model: file-model
transports: [http]
{SHAPE}target:
  headers:
    X-Team: perf
    X-Api-Key: {SECRET_IN_FILE}
  session_header: X-Session-ID
  extra_body:
    responses:
      temperature: 0.25
      metadata: {{team: perf}}
      max_output_tokens: "{{output_tokens}}"
"""

API_SCENARIO = f"""
name: shaped-apis
seed: 7
{SHAPE}target:
  headers:
    X-Team: perf
  session_header: X-Session-ID
  extra_body:
    chat:
      temperature: 0.25
    messages:
      top_k: 5
"""


def _run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], scenario_text: str, flags: list[str]
) -> tuple[Recording, pd.DataFrame, pytest.CaptureResult[str]]:
    """``loopbench run`` of the scenario against a recording server: what it received,
    the run's turns (all completed) and what the command printed."""
    scenario = tmp_path / "shaped.yaml"
    scenario.write_text(scenario_text)
    with recording_target() as (url, recording), pytest.raises(SystemExit) as exited:
        main(["run", str(scenario), "--target", url, "--out", str(tmp_path), "--run-id", "r1",
              *flags])  # fmt: skip
    out = capsys.readouterr()
    # The reference server accepts any key when it was started without --api-key.
    assert exited.value.code == 0, out.err + out.out
    turns = load_run(tmp_path / "r1").turns
    assert len(turns) and turns["status"].eq("completed").all()
    return recording, turns, out


def _turns_per_rollout(turns: pd.DataFrame) -> Counter[str]:
    """How many turns each rollout's session key should have carried."""
    return Counter(f"r1-{t}-{r}" for t, r in zip(turns.transport, turns.rollout_id, strict=True))


def test_headers_session_and_extra_body_reach_the_server(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording, turns, out = _run(
        tmp_path,
        capsys,
        SCENARIO,
        [
            "--transports",
            ",".join(TRANSPORTS),
            "--header",
            "X-Trace: from-cli",
            "--header",
            f"Authorization: Bearer {SECRET_ON_CLI}",
            "--extra-body",
            '{"metadata": {"origin": "cli"}, "top_p": 0.5}',
            "--model",
            "cli-model",
        ],
    )
    expected_keys = {f"r1-{t}-{i}" for t in TRANSPORTS for i in range(2)}

    # -- headers: on every request, the probe's included; the session header on the run's --
    model_http = recording.http("/responses")
    assert model_http, "no POST /v1/responses recorded"
    for ex in [*model_http, *recording.ws()]:
        assert ex.headers["x-team"] == "perf"
        assert ex.headers["x-trace"] == "from-cli"
        assert ex.headers["x-api-key"] == SECRET_IN_FILE
        assert ex.headers["authorization"] == f"Bearer {SECRET_ON_CLI}"
    run_http = [e for e in model_http if "x-session-id" in e.headers]
    run_ws = [e for e in recording.ws() if "x-session-id" in e.headers]
    sessions = Counter(e.headers["x-session-id"] for e in run_http)
    for ws in run_ws:
        sessions[ws.headers["x-session-id"]] += len(
            [b for b in ws.bodies if b.get("type") == "response.create"]
        )
    assert set(sessions) == expected_keys
    # one request per turn, each under its own rollout's key
    assert sessions == _turns_per_rollout(turns)
    # one WebSocket per ws rollout, its handshake carrying that rollout's key
    assert sorted(e.headers["x-session-id"] for e in run_ws) == ["r1-ws-0", "r1-ws-1"]

    # -- bodies: the extra fields merged in, the hints kept, the model from --model --
    bodies = [b for e in run_http for b in e.bodies] + [
        b for e in run_ws for b in e.bodies if b.get("type") == "response.create"
    ]
    assert len(bodies) == len(turns)
    for body in bodies:
        assert body["temperature"] == 0.25 and body["top_p"] == 0.5
        assert body["metadata"]["team"] == "perf" and body["metadata"]["origin"] == "cli"
        assert "loopbench.output_tokens" in body["metadata"]
        assert body["model"] == "cli-model"
        assert body.get("type") == "response.create" or body["stream"] is True
    # "{output_tokens}" became each turn's planned output, turn by turn of each rollout
    sent: dict[str, list[int]] = {}
    for e in run_http:
        sent.setdefault(e.headers["x-session-id"], []).extend(
            b["max_output_tokens"] for b in e.bodies
        )
    for e in run_ws:
        sent[e.headers["x-session-id"]] = [
            b["max_output_tokens"] for b in e.bodies if b.get("type") == "response.create"
        ]
    planned = {
        f"r1-{t}-{r}": list(g.sort_values("turn_index").planned_output_tokens)
        for (t, r), g in turns.groupby(["transport", "rollout_id"])
    }
    assert sent == planned
    chained = [b for e in run_http for b in e.bodies if "previous_response_id" in b]
    assert chained, "http-chained sent no chained request"

    # -- what is recorded and printed: header names, never a credential's value --
    manifest = json.loads((tmp_path / "r1" / "manifest.json").read_text())
    shaping = manifest["client_options"]["shaping"]
    assert shaping["headers"] == ["X-Team", "X-Api-Key", "X-Trace", "Authorization"]
    assert shaping["session_header"] == "X-Session-ID"
    assert shaping["extra_body"]["responses"] == {
        "temperature": 0.25,
        "metadata": {"team": "perf", "origin": "cli"},
        "max_output_tokens": "{output_tokens}",
        "top_p": 0.5,
    }
    assert manifest["scenario"]["target"]["headers"] == {"X-Team": "***", "X-Api-Key": "***"}
    for path in (tmp_path / "r1").rglob("*"):
        if path.is_file() and path.suffix in (".json", ".md", ".html", ".csv"):
            text = path.read_text(errors="replace")
            assert SECRET_IN_FILE not in text and SECRET_ON_CLI not in text, path
    assert SECRET_IN_FILE not in out.err + out.out
    assert SECRET_ON_CLI not in out.err + out.out
    assert "request shaping: headers X-Team: perf, X-Api-Key: ***" in out.err


def test_shaping_reaches_chat_and_messages(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    recording, turns, _ = _run(
        tmp_path, capsys, API_SCENARIO, ["--no-probe", "--transports", "chat,messages", "-q"]
    )
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
    assert sessions == _turns_per_rollout(turns)
