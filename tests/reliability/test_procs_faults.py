"""``loopbench run --procs 2`` with one client process killed (``kill -9``) mid-run.

End-to-end on purpose: the fault is a real process dying without a word (no message on
its pipe), which only a real kill produces.  Small and bounded in time.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from harness.report.results import load_run, read_csv_gz
from harness.wire.exit_codes import ExitCode
from tests.reliability.test_locust_faults import SCENARIO, alive, children, cmdline
from tests.runs import ROOT, _argv

pytestmark = pytest.mark.skipif(
    not Path("/proc/self/stat").exists(), reason="finds and kills processes through /proc"
)


def test_a_killed_client_process_leaves_the_survivors_rows_and_a_folder_that_names_it(
    tmp_path: Path, server_url: str
) -> None:
    scenario = tmp_path / "faults.yaml"
    scenario.write_text(SCENARIO.replace("transports: [http]", "transports: [http, ws]"))
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    proc = subprocess.Popen(
        _argv(("run", scenario, "--procs", "2", "--target", server_url, "--no-probe",
               "--out", tmp_path, "--run-id", "p", "-q"), report=False),
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=ROOT,
        env={**os.environ, "TMPDIR": str(tmp)},
    )  # fmt: skip
    victim = None
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and victim is None:
            rows = list(tmp.glob("loopbench-procs-*/procs/p0/turns.csv.gz"))
            if rows and len(read_csv_gz(rows[0])) >= 4:
                victim = next(
                    p for p in children(proc.pid)
                    if "spawn_main" in cmdline(p) and "resource_tracker" not in cmdline(p)
                )  # fmt: skip
            time.sleep(0.1)
        assert victim is not None, "client process 0 wrote no rows within 60 s"
        os.kill(victim, signal.SIGKILL)
        _, err = proc.communicate(timeout=90)
    finally:
        if alive(proc.pid):
            proc.kill()
            proc.communicate(timeout=10)
    assert proc.returncode == ExitCode.INVALID, err[-3000:]
    run = load_run(tmp_path / "p")
    summary = run.summary
    assert summary is not None and summary["valid"] is False and summary["partial"] is True
    died = [r for r in summary["invalid_reasons"] if "died" in r]
    assert len(died) == 1 and f"(pid {victim})" in died[0] and "SIGKILL" in died[0], died
    # the survivor's rollouts all finished; the dead one's rows up to its last flush are kept
    for name, t in summary["transports"].items():
        rows = run.turns[run.turns["transport"] == name]
        assert t["turns"]["count"] == len(rows)
        assert t["rollouts"]["count"] == int((run.rollouts["transport"] == name).sum())
        sched = t["schedule"]
        assert sched["started"] == t["rollouts"]["count"]
        assert sched["intended"] == 24
        assert sched["intended"] == (
            sched["started"] + sched["cancelled"] + sched["dropped"] + sched["not_started"]
        )
    # two were started; one measured its health to the end
    assert run.manifest["procs"] == 2 and summary["client"]["procs"] == 1
