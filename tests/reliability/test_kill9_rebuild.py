"""``kill -9`` of the harness mid-run: the rows already written rebuild ``summary.json`` and the report.

A real ``loopbench run`` subprocess (embedded server) is killed with SIGKILL once rows are on
disk; ``loopbench report RUN`` then folds the rows into a summary marked ``rebuilt``,
``partial`` and invalid (the verdict line says why) and renders the report.  The writer's
bound (a kill loses at most one block: 256 rows or 0.5 s) is checked on a child that writes
rows and says how many it has handed over.
"""

from __future__ import annotations

import contextlib
import gzip
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from harness.report.results import load_run, read_csv_gz
from harness.workload.records import TurnRecord
from tests.runs import ROOT, TINY, _argv, loopbench, rows_flushed


def _children(pid: int) -> list[int]:
    """The child processes of ``pid`` (Linux ``/proc``)."""
    text = Path(f"/proc/{pid}/task/{pid}/children").read_text()
    return [int(p) for p in text.split()]


def _alive(pid: int) -> bool:
    """Still running: present in ``/proc`` and not a zombie waiting for a reaper."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except FileNotFoundError:
        return False
    return "\nState:\tZ" not in status


def test_report_rebuilds_the_summary_of_a_run_killed_with_sigkill(tmp_path: Path) -> None:
    args: list[str | Path] = ["run", TINY, "--set", "rollout.count=400"]
    args += ["--set", "load.concurrency=2", "--transports", "http,ws"]
    args += ["--out", tmp_path, "--run-id", "killed", "-q"]
    # Its own session, so the embedded server it starts is killed with it afterwards.
    proc = subprocess.Popen(
        _argv(tuple(args)),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        cwd=ROOT,
        start_new_session=True,
    )
    turns_path = tmp_path / "killed" / "turns.csv.gz"
    try:
        seen = rows_flushed(proc, turns_path, 40)
        assert proc.poll() is None, f"the run ended (exit {proc.returncode}) before the kill"
        assert seen >= 40
        servers = _children(proc.pid)
        assert len(servers) == 1, servers  # the embedded reference server
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait(30)
        # Orphaned, the server notices (--exit-with-parent) and drains: nothing is left behind.
        deadline = time.monotonic() + 30
        while _alive(servers[0]) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert not _alive(servers[0]), "the embedded server outlived the harness killed with -9"
    finally:
        # whatever the test's outcome, nothing of the session may outlive it
        with contextlib.suppress(ProcessLookupError):
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(30)
    assert proc.returncode == -signal.SIGKILL
    run_dir = tmp_path / "killed"
    assert not (run_dir / "summary.json").exists()
    # A kill inside a block write leaves a truncated gzip member: append one.
    half = gzip.compress(b"ws,999,0,0" * 100)
    with open(turns_path, "ab") as f:
        f.write(half[: len(half) // 2])
    on_disk = len(read_csv_gz(turns_path))
    assert on_disk >= seen

    rep = loopbench("report", run_dir, timeout=120)
    assert rep.returncode == 0, rep.stderr + rep.stdout
    assert f"summary.json rebuilt from {on_disk:,} turn rows" in rep.stdout
    assert "verdict: INVALID: rebuilt by loopbench report" in rep.stdout
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["rebuilt"] is True and summary["partial"] is True
    assert summary["interrupted"] is True and summary["valid"] is False
    assert summary["rebuilt_from"]["turns"] == on_disk
    counted = sum(t["turns"]["count"] for t in summary["transports"].values())
    assert counted == on_disk
    md = (run_dir / "report.md").read_text()
    assert "verdict: INVALID: rebuilt" in md and "Rebuilt: the run did not finish" in md
    assert (run_dir / "report.html").exists()
    # loaded back, it is a finished run now; a second report does not rebuild again
    assert load_run(run_dir).finished
    again = loopbench("report", run_dir, timeout=120)
    assert again.returncode == 0 and "rebuilt from" not in again.stdout


_WRITER = """
import sys, time
from harness.report.results import ResultsWriter
from harness.workload.records import TurnRecord
w = ResultsWriter(sys.argv[1], {"run_id": "w"})
for i in range(1_000_000):
    w.add_turn(TurnRecord(transport="http", rollout_id=i, turn_index=0, status="completed"))
    print(i + 1, flush=True)
    time.sleep(0.0005)
"""


def test_a_kill_loses_at_most_the_last_block_of_rows(tmp_path: Path) -> None:
    out = tmp_path / "w"
    proc = subprocess.Popen(
        [sys.executable, "-c", _WRITER, str(out)], stdout=subprocess.PIPE, text=True, cwd=ROOT
    )
    assert proc.stdout is not None
    handed = 0
    deadline = time.monotonic() + 60
    while handed < 2000 and time.monotonic() < deadline:
        handed = int(proc.stdout.readline())
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait(30)
    proc.stdout.close()
    # rows handed over after the last line read are a bonus; those before it are the bound
    rows = read_csv_gz(out / "turns.csv.gz")
    assert handed >= 2000
    assert handed - 256 <= len(rows), (handed, len(rows))
    assert list(rows["rollout_id"]) == list(range(len(rows)))  # whole rows, in order
    assert set(rows.columns) >= {f for f in TurnRecord.__slots__ if f != "itl_ns"}


def test_a_rebuilt_summary_keeps_errors_flags_and_refuses_a_finished_run(tmp_path: Path) -> None:
    from harness.report.rebuild import rebuild_summary
    from harness.report.results import ResultsWriter
    from harness.wire.errors import ResultsError

    w = ResultsWriter(tmp_path / "r", {"run_id": "r", "transports": ["http", "ws"]})
    for i in range(6):
        ok = i % 3 != 0
        w.add_turn(
            TurnRecord(
                transport="http",
                rollout_id=i,
                turn_index=0,
                sent_ns=1_000_000 * i,
                first_token_ns=1_000_000 * i + 500_000,
                done_ns=1_000_000 * i + 900_000,
                status="completed" if ok else "error",
                error_kind="" if ok else "timeout",
                error_message="" if ok else "timeout: no data from x for 2 s",
                new_connection=i == 1,
                chain_ignored=i == 2,
            )
        )
    w.close()  # what a kill leaves: rows, no summary
    summary = rebuild_summary(tmp_path / "r")
    http = summary["transports"]["http"]
    assert http["turns"] == {"count": 6, "errors": 2}
    assert http["errors_by_kind"] == {"timeout": 2}
    assert summary["errors"]["http"]["timeout"]["example"] == "no data from x for 2 s"
    assert summary["honesty"]["http"]["chain_ignored"] == 1
    assert summary["not_run"]["transports"] == ["ws"]
    assert summary["rebuilt"] and not summary["valid"]
    with pytest.raises(ResultsError, match="only an unfinished run is rebuilt"):
        rebuild_summary(tmp_path / "r")


def test_a_rebuilt_summary_lists_every_transport_without_complete_results(tmp_path: Path) -> None:
    """It listed only the transport that never started: ``http`` cut off part way (rollouts
    never begun, one cut mid-way) read as complete."""
    from harness.cli.run import not_run_text
    from harness.report.rebuild import rebuild_summary
    from harness.report.results import ResultsWriter
    from harness.workload.records import RolloutRecord

    manifest = {"run_id": "r", "transports": ["ws", "http", "chat"], "rollouts_planned": 4}
    w = ResultsWriter(tmp_path / "r", manifest)
    for name, complete, cut in (("ws", 4, 0), ("http", 1, 1)):
        for i in range(complete + cut):
            w.add_turn(TurnRecord(transport=name, rollout_id=i, turn_index=0, status="completed"))
            if i < complete:
                w.add_rollout(RolloutRecord(transport=name, rollout_id=i, status="completed"))
    w.close()
    summary = rebuild_summary(tmp_path / "r")
    assert summary["not_run"] == {
        "transports": ["chat"],
        "rollouts": {"http": 2, "chat": 4},
        "cancelled": {"http": 1},
    }
    assert not_run_text(summary) == (
        "never ran: transports chat; rollouts http 2, chat 4; cut off mid-rollout: http 1"
    )
