"""``loopbench locust`` shapes requests as ``loopbench run`` does: headers, session header,
extra body fields and the model, on the gevent edge (a real master and worker on loopback)."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

from harness.report.results import load_run
from tests.header_recorder import SHAPE, recording_target
from tests.runs import loopbench

SECRET = "locust-secret-77"
SCENARIO = f"""
name: locust-shaped
seed: 3
transports: [http, ws]
{SHAPE}target:
  session_header: X-Session-ID
  extra_body: {{temperature: 0.5}}
"""


def test_locust_sends_the_shaping(tmp_path: Path) -> None:
    scenario = tmp_path / "s.yaml"
    scenario.write_text(SCENARIO)
    with recording_target() as (url, recording):
        proc = loopbench(
            "locust", scenario, "--target", url, "--workers", "1", "--out", tmp_path,
            "--run-id", "L", "-q", "--header", "X-Team: perf",
            "--header", f"Authorization: Bearer {SECRET}", "--model", "loc-model",
            # the claim is what reached the target and the run's files: no report to render
            timeout=180, report=False,
        )  # fmt: skip
    assert proc.returncode == 0, proc.stderr + proc.stdout
    turns = load_run(tmp_path / "L").turns
    assert len(turns) and turns["status"].eq("completed").all()
    http = [e for e in recording.http("/responses") if "x-session-id" in e.headers]
    ws = [e for e in recording.ws() if "x-session-id" in e.headers]
    sessions = Counter(e.headers["x-session-id"] for e in http)
    for conn in ws:
        sessions[conn.headers["x-session-id"]] += len(conn.bodies)
    assert sessions == Counter(
        f"L-{t}-{r}" for t, r in zip(turns.transport, turns.rollout_id, strict=True)
    )
    for exchange in [*http, *ws]:
        assert exchange.headers["x-team"] == "perf"
        assert exchange.headers["authorization"] == f"Bearer {SECRET}"
        for body in exchange.bodies:
            assert body["temperature"] == 0.5 and body["model"] == "loc-model"
    manifest = json.loads((tmp_path / "L" / "manifest.json").read_text())
    assert manifest["client_options"]["shaping"]["headers"] == ["X-Team", "Authorization"]
    assert SECRET not in (tmp_path / "L" / "manifest.json").read_text()
    assert SECRET not in proc.stdout + proc.stderr
