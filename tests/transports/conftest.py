"""Run ``loopbench run`` with a user's arguments and load what it wrote."""

from __future__ import annotations

from pathlib import Path

from harness.report.results import Run, load_run
from tests.runs import in_process

ROOT = Path(__file__).resolve().parents[2]
TINY = str(ROOT / "scenarios" / "tiny.yaml")


def loopbench_run(out: Path, run_id: str, *args: str, report: bool = False) -> tuple[Run, str]:
    """``loopbench run tiny <args>`` (the built-in tiny.yaml); fails the test on a non-zero exit.

    Through ``main`` in this process and, unless ``report``, without rendering the report:
    these tests read the run's files and console table over real sockets; the process around
    ``main`` is test_run_e2e's (and tests/cli's) claim, the report the report tests'.
    """
    argv = ["run", TINY, "--out", str(out), "--run-id", run_id, "-q", *args]
    code, console = in_process(*argv, report=report)
    assert code == 0, console
    return load_run(out / run_id), console
