"""A run stopped with SIGINT midway keeps every flushed row and says it is partial."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

from harness.report import load_run, read_csv_gz
from tests.conftest import rows_flushed

ROOT = Path(__file__).resolve().parents[2]
PLANNED_ROLLOUTS = 40


def test_sigint_midway_leaves_readable_rows_and_a_partial_summary(tmp_path: Path) -> None:
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "harness",
            "run",
            str(ROOT / "scenarios" / "tiny.yaml"),
            "--set",
            f"rollout.count={PLANNED_ROLLOUTS}",
            "--set",
            "load.concurrency=1",
            "--transports",
            "http",
            "--out",
            str(tmp_path),
            "--run-id",
            "cut",
            "-q",
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    turns = tmp_path / "cut" / "turns.csv.gz"
    try:
        seen = rows_flushed(proc, turns, 6)
        assert proc.poll() is None, f"run ended before it could be interrupted: {proc.stderr}"
        assert seen >= 6, "no rows flushed within 120 s"
        proc.send_signal(signal.SIGINT)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)

    rows = read_csv_gz(turns)
    assert len(rows) >= seen
    assert (rows["transport"] == "http").all()
    completed = rows[rows["status"] == "completed"]
    assert len(completed) >= 6 and (completed["done_ns"] > completed["sent_ns"]).all()
    summary = json.loads((tmp_path / "cut" / "summary.json").read_text())
    assert summary["partial"] is True and summary["valid"] is False
    assert any("interrupted" in r for r in summary["invalid_reasons"]), summary["invalid_reasons"]
    n = summary["transports"]["http"]["rollouts"]["count"]
    assert 0 < n < PLANNED_ROLLOUTS, n
    run = load_run(tmp_path / "cut")
    assert len(run.rollouts) == n
    # the report of a partial run is rendered too, and says so
    assert "Partial run" in (tmp_path / "cut" / "report.md").read_text()
    assert proc.returncode in (0, 130), (proc.returncode, err)
