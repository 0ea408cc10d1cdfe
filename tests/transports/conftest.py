"""Run ``loopbench run`` as a user does and load what it wrote."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from harness.report.results import Run, load_run

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "scenarios" / "tiny.yaml")


def loopbench_run(out: Path, run_id: str, *args: str) -> tuple[Run, str]:
    """``loopbench run tiny <args>`` (the built-in tiny.yaml); fails the test on a non-zero exit."""
    cmd = [sys.executable, "-m", "harness", "run", TINY, "--out", str(out), "--run-id", run_id]
    proc = subprocess.run(
        [*cmd, "-q", *args],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
    )
    assert proc.returncode == 0, proc.stderr + proc.stdout
    return load_run(out / run_id), proc.stdout
