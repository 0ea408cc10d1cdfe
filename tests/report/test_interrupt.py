"""A run stopped with SIGINT midway keeps every flushed row and says it is partial."""

from __future__ import annotations

import json
import signal
from pathlib import Path

from harness.report import load_run, read_csv_gz
from tests.runs import interrupt_run

PLANNED_ROLLOUTS = 40


def test_sigint_midway_leaves_readable_rows_and_a_partial_summary(tmp_path: Path) -> None:
    seen, code, err = interrupt_run(tmp_path, "cut", "http", PLANNED_ROLLOUTS, signal.SIGINT)
    rows = read_csv_gz(tmp_path / "cut" / "turns.csv.gz")
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
    assert code in (0, 130), (code, err)
