"""``loopbench report RUN`` writes into RUN only: not into the working folder, not beside RUN."""

from __future__ import annotations

import hashlib
import shutil
import subprocess
import sys
from pathlib import Path

from tests.runs import ROOT


def _snapshot(root: Path) -> dict[Path, str]:
    return {
        p.relative_to(root): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in root.rglob("*")
        if p.is_file()
    }


def test_report_writes_into_the_run_folder_only(tmp_path: Path) -> None:
    run = tmp_path / "results" / "cand"
    shutil.copytree(ROOT / "results" / "baseline", run)
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    before = _snapshot(tmp_path)
    proc = subprocess.run(
        [sys.executable, "-m", "harness", "report", str(run)],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=cwd,
    )
    assert proc.returncode == 0, proc.stderr
    after = _snapshot(tmp_path)
    changed = {p for p in after if before.get(p) != after[p]}
    assert set(before) <= set(after), "report deleted files"
    assert changed, "report wrote nothing"
    run_rel = run.relative_to(tmp_path)
    outside = sorted(str(p) for p in changed if run_rel not in p.parents)
    assert not outside, f"report wrote outside {run}: {outside}"
    written = {p.relative_to(run_rel) for p in changed}
    assert {Path("report.md"), Path("report.html")} <= written
    # The measured data is read, never rewritten; what is derived from it (the plots, the report,
    # the time slices of the turn rows) is written anew.
    derived = ("report.", "slices.csv.gz")
    assert all(p.parts[0] == "plots" or p.name.startswith(derived) for p in written), written
    assert not written & {Path("turns.csv.gz"), Path("rollouts.csv.gz"), Path("summary.json")}
    assert not any(cwd.iterdir())
