"""The harness loses nothing: a target that dies mid-run, and SIGTERM, still give complete results."""

from __future__ import annotations

import glob
import json
import os
import signal
from pathlib import Path

from harness.report.results import load_run
from harness.workload.records import TurnRecord
from tests.runs import interrupt_run, run_tiny


def _children() -> list[int]:
    pids: list[int] = []
    for path in glob.glob(f"/proc/{os.getpid()}/task/*/children"):
        with open(path) as f:
            pids += [int(p) for p in f.read().split()]
    return pids


def test_a_target_that_dies_mid_run_gives_a_completed_run_with_the_errors(tmp_path: Path) -> None:
    before = set(_children())
    killed: list[int] = []
    seen = [0]

    def kill_server_after_a_few_turns(rec: TurnRecord) -> None:
        # Called synchronously with every turn record: with the 5th, kill -9 the
        # embedded server (the child process this run started).
        seen[0] += 1
        if seen[0] == 5:
            (server,) = set(_children()) - before
            os.kill(server, signal.SIGKILL)
            killed.append(server)

    run = run_tiny(
        tmp_path,
        ["http", "ws"],
        {"rollout.count": "4", "load.concurrency": "1"},
        run_id="dies",
        request_timeout_s=5,
        turn_hook=kill_server_after_a_few_turns,
    )
    assert killed
    assert run.summary is not None and run.summary["partial"] is False
    for name in ("http", "ws"):
        t = run.summary["transports"][name]
        # Every planned rollout is accounted for: finished before the kill, or failed after it.
        assert t["rollouts"]["count"] == 4, name
        assert t["rollouts"]["errors"] >= 1, name
        assert sum(t["errors_by_kind"].values()) >= 1, t["errors_by_kind"]
    ws = run.summary["transports"]["ws"]
    assert ws["rollouts"]["errors"] == 4 and set(ws["errors_by_kind"]) == {"connection"}
    # What was measured before the kill is on disk, row by row.
    http_ok = run.turns[(run.turns["transport"] == "http") & (run.turns["status"] == "completed")]
    assert len(http_ok) == 5  # every turn that completed before the kill (it came with the 5th)


def test_sigterm_midway_leaves_readable_rows_and_a_partial_summary(tmp_path: Path) -> None:
    """Started as a script's ``loopbench run … &`` (SIGINT ignored): SIGTERM, raised as that
    ignored SIGINT, was lost and the run went on to its end."""
    seen, code, err = interrupt_run(
        tmp_path, "term", "ws", 40, signal.SIGTERM, background=True, report=False
    )
    summary = json.loads((tmp_path / "term" / "summary.json").read_text())
    assert summary["partial"] is True and summary["valid"] is False
    n = summary["transports"]["ws"]["rollouts"]["count"]
    assert 0 < n < 40
    run = load_run(tmp_path / "term")
    assert len(run.rollouts) == n and len(run.turns) >= seen
    assert code == 130, (code, err)
