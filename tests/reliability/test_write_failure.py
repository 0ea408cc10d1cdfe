"""A results file that cannot be written: before the load (checked), and mid-run (one line).

Mid-run is end-to-end on purpose: the failure is the kernel's (a file-size limit,
``RLIMIT_FSIZE``, refusing a write with EFBIG as a full disk refuses with ENOSPC), met deep
in a rollout's task group, which only a real run reaches.
"""

from __future__ import annotations

import resource
import signal
import subprocess
from collections.abc import Callable
from pathlib import Path

from harness.report.results import read_csv_gz
from harness.wire.exit_codes import ExitCode
from tests.reliability.test_locust_faults import SCENARIO
from tests.runs import ROOT, TINY, _argv, loopbench

LIMIT_BYTES = 4000


def _file_size_limit(limit: int) -> Callable[[], None]:
    """A ``preexec_fn``: files of the child and its own children stop at ``limit`` bytes."""

    def apply() -> None:
        # Ignored, SIGXFSZ turns into a failed write (EFBIG) instead of killing the process.
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        resource.setrlimit(resource.RLIMIT_FSIZE, (limit, limit))

    return apply


def test_a_write_that_fails_mid_run_ends_it_with_one_line_and_keeps_the_rows(
    tmp_path: Path, server_url: str
) -> None:
    proc = subprocess.run(
        _argv(("run", TINY, "--set", "rollout.count=40", "--set", "load.concurrency=2",
               "--transports", "http", "--target", server_url, "--no-probe",
               "--out", tmp_path, "--run-id", "full", "-q")),
        capture_output=True, text=True, cwd=ROOT, timeout=120, preexec_fn=_file_size_limit(LIMIT_BYTES),
    )  # fmt: skip
    assert proc.returncode == ExitCode.USAGE, proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr[-3000:]
    assert lines[0].startswith(f"error: {tmp_path / 'full' / 'turns.csv.gz'}: cannot write: ")
    assert "File too large" in lines[0] and "loopbench report" in lines[0]
    # Stopped at the failure: no summary over rows that stop short; those rows read back.
    run_dir = tmp_path / "full"
    assert not (run_dir / "summary.json").exists()
    rows = read_csv_gz(run_dir / "turns.csv.gz")
    assert 0 < len(rows) < 40 * 4


def test_locust_checks_its_results_folder_before_starting_anything(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a folder")
    proc = loopbench("locust", TINY, "--out", blocker / "results", "--run-id", "x", timeout=30)
    assert proc.returncode == ExitCode.USAGE, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        f"error: {blocker / 'results' / 'x'}: cannot write the results folder: Not a directory"
    ]


LOCUST_LIMIT_BYTES = 6000  # the manifest (~3 KB) fits; the turn rows outgrow it within seconds


def test_a_write_that_fails_on_the_locust_master_ends_the_run_with_one_line(
    tmp_path: Path, server_url: str
) -> None:
    """The master (its own process, under the same limit) meets the failure writing rows."""
    scenario = tmp_path / "faults.yaml"
    # Fast turns: the rows outgrow the limit well before Locust's own stats history does.
    fast = SCENARIO.replace("count: 24", "count: 400").replace(
        "min: 150, max: 250", "min: 5, max: 10"
    )
    scenario.write_text(fast.replace("concurrency: 4", "concurrency: 8"))
    proc = subprocess.run(
        _argv(("locust", scenario, "--workers", "2", "--target", server_url,
               "--out", tmp_path, "--run-id", "full", "-q")),
        capture_output=True, text=True, cwd=ROOT, timeout=120, preexec_fn=_file_size_limit(LOCUST_LIMIT_BYTES),
    )  # fmt: skip
    assert proc.returncode == ExitCode.USAGE, proc.stderr[-3000:]
    errors = [line for line in proc.stderr.splitlines() if "error" in line.lower()]
    assert (
        errors
        == [
            line
            for line in errors
            if line.startswith(f"error: {tmp_path / 'full' / 'turns.csv.gz'}")
        ]
        and len(errors) == 1
    ), proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr
    assert not (tmp_path / "full" / "summary.json").exists()
    assert len(read_csv_gz(tmp_path / "full" / "turns.csv.gz")) > 0
