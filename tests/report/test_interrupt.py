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


def test_a_second_sigint_does_not_cut_off_the_summary_or_the_report(tmp_path: Path) -> None:
    """``timeout -s INT`` signals the process and then its group (two SIGINTs within
    milliseconds), and an impatient user presses Ctrl-C again while the report is written:
    neither loses the summary or the report, and the first line says where they go."""
    seen, code, err = interrupt_run(
        tmp_path, "twice", "http", PLANNED_ROLLOUTS, signal.SIGINT, again_after_s=(0.005, 0.3)
    )
    assert code == 130, (code, err)
    assert err.splitlines()[0] == (
        f"interrupted: stopping; what was measured is being written to {tmp_path / 'twice'}"
    )
    assert "Traceback" not in err
    summary = json.loads((tmp_path / "twice" / "summary.json").read_text())
    assert summary["partial"] is True and summary["interrupted"]
    assert len(read_csv_gz(tmp_path / "twice" / "turns.csv.gz")) >= seen
    assert "Partial run" in (tmp_path / "twice" / "report.md").read_text()


def test_the_runs_sigint_handler_cancels_once_then_only_says_it_is_still_writing(
    tmp_path: Path,
) -> None:
    import asyncio
    import io

    from harness.run.interrupt import RunInterrupts

    async def main() -> tuple[bool, int, str]:
        task = asyncio.ensure_future(asyncio.sleep(10))
        out = io.StringIO()
        handler = RunInterrupts(task, tmp_path / "r", out)
        handler()
        handler()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled(), task.cancelling(), out.getvalue()

    cancelled, cancelling, said = asyncio.run(main())
    assert cancelled and cancelling == 1  # cancelled once, not once per signal
    assert said.splitlines() == [
        f"interrupted: stopping; what was measured is being written to {tmp_path / 'r'}",
        f"still writing {tmp_path / 'r'} (the turns measured are on disk already)",
    ]
