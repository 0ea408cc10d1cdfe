"""A run stopped with SIGINT midway keeps every flushed row and says it is partial."""

from __future__ import annotations

import asyncio
import io
import json
import signal
import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from harness.report import load_run, read_csv_gz
from harness.run.interrupt import RunInterrupts
from harness.run.runner import RunOptions, RunResult, run_scenario
from harness.workload.scenario import load_scenario
from tests.runs import TINY, interrupt_run

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


def test_the_handler_cancels_once_then_only_says_it_is_still_writing(tmp_path: Path) -> None:
    async def main() -> tuple[bool, int, bool, str]:
        task = asyncio.ensure_future(asyncio.sleep(10))
        out = io.StringIO()
        handler = RunInterrupts(task, tmp_path / "r", out)
        handler()
        handler()
        await asyncio.gather(task, return_exceptions=True)
        return task.cancelled(), task.cancelling(), handler.late, out.getvalue()

    cancelled, cancelling, late, said = asyncio.run(main())
    assert cancelled and cancelling == 1  # cancelled once, not once per signal
    assert not late
    assert said.splitlines() == [
        f"interrupted: stopping; what was measured is being written to {tmp_path / 'r'}",
        f"interrupted: still writing {tmp_path / 'r'} (the turns measured are on disk)",
    ]


def test_a_sigint_once_writing_has_begun_cancels_nothing_and_is_late(tmp_path: Path) -> None:
    async def main() -> tuple[bool, bool]:
        task = asyncio.ensure_future(asyncio.sleep(0.01))
        handler = RunInterrupts(task, tmp_path / "r", io.StringIO())
        handler.writing = True
        handler()
        await task
        return task.cancelled(), handler.late

    assert asyncio.run(main()) == (False, True)


@pytest.fixture
def sigint_handler() -> Iterator[None]:
    assert threading.current_thread() is threading.main_thread()
    previous = signal.getsignal(signal.SIGINT)
    yield
    signal.signal(signal.SIGINT, previous)


def _custom(signum: int, frame: object) -> None:
    raise AssertionError("the run's handler should have been in place")


def test_the_previous_handler_is_restored_exactly(tmp_path: Path, sigint_handler: None) -> None:
    signal.signal(signal.SIGINT, _custom)
    with RunInterrupts(None, tmp_path) as handler:
        assert signal.getsignal(signal.SIGINT) is handler
    assert signal.getsignal(signal.SIGINT) is _custom


def test_an_ignored_sigint_stays_ignored(tmp_path: Path, sigint_handler: None) -> None:
    # A --procs child ignores SIGINT on purpose: its parent stops it with SIGTERM.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    with RunInterrupts(None, tmp_path):
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN
    assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN


class _SigintAt:
    """A progress display that sends this process SIGINT at its first update or at close."""

    def __init__(self, at: str) -> None:
        self.at = at
        self.sent = False

    def _send(self) -> None:
        if not self.sent:
            self.sent = True
            signal.raise_signal(signal.SIGINT)

    def update(self, progress: object) -> None:
        if self.at == "update":
            self._send()

    def close(self) -> None:
        if self.at == "close":
            self._send()


def _run_tiny(tmp_path: Path, run_id: str, rollouts: int, sink: _SigintAt) -> RunResult:
    """The tiny scenario run in this process, one rollout at a time, with ``sink`` as progress."""
    scenario = load_scenario(str(TINY), {"rollout.count": str(rollouts), "load.concurrency": "1"})
    opts = RunOptions(
        transports=["http"], results_root=tmp_path, run_id=run_id, progress=False, render=False
    )
    return run_scenario(scenario, str(TINY), opts, progress=sink)


def test_sigint_while_measuring_in_process_ends_the_run_interrupted(
    tmp_path: Path, sigint_handler: None
) -> None:
    before = signal.getsignal(signal.SIGINT)
    sink = _SigintAt("update")
    result = _run_tiny(tmp_path, "mid", 400, sink)
    assert sink.sent
    assert result.summary["interrupted"] and result.summary["partial"]
    assert json.loads((tmp_path / "mid" / "summary.json").read_text())["interrupted"]
    assert signal.getsignal(signal.SIGINT) is before
    # a command that runs several runs stops at this one
    with pytest.raises(KeyboardInterrupt):
        result.stop_if_interrupted()


def test_sigint_while_writing_keeps_the_whole_run_then_stops(
    tmp_path: Path, sigint_handler: None
) -> None:
    before = signal.getsignal(signal.SIGINT)
    sink = _SigintAt("close")
    with pytest.raises(KeyboardInterrupt):
        _run_tiny(tmp_path, "late", 4, sink)
    assert sink.sent
    summary = json.loads((tmp_path / "late" / "summary.json").read_text())
    assert not summary["interrupted"] and not summary["partial"]
    assert summary["transports"]["http"]["rollouts"]["count"] == 4
    assert signal.getsignal(signal.SIGINT) is before
