"""Starting loopbench from tests: its CLI in a subprocess, or tiny.yaml in this process."""

from __future__ import annotations

import contextlib
import io
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from harness.cli.locust import LOCUSTFILE
from harness.report.results import Run, load_run, read_csv_gz
from harness.run.runner import RunOptions, run_scenario
from harness.workload.scenario import load_scenario
from tests.without_reports import no_reports

ROOT = Path(__file__).resolve().parents[1]
TINY = ROOT / "scenarios" / "tiny.yaml"


def _argv(args: tuple[str | Path, ...], *, report: bool = True) -> list[str]:
    """The command line of ``loopbench ARGS``; ``report=False``: the same command without
    rendering reports (:mod:`tests.without_reports`)."""
    entry = "harness" if report else "tests.without_reports"
    return [sys.executable, "-m", entry, *map(str, args)]


def loopbench(*args: str | Path, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    """``loopbench ARGS`` in a subprocess of this interpreter, from the repository root."""
    return subprocess.run(_argv(args), capture_output=True, text=True, timeout=timeout, cwd=ROOT)


def run_cli(*args: str | Path, timeout: float = 240) -> subprocess.CompletedProcess[str]:
    """:func:`loopbench`, failing the test on a non-zero exit."""
    proc = loopbench(*args, timeout=timeout)
    shown = " ".join(map(str, args))
    assert proc.returncode == 0, f"loopbench {shown}: {proc.stderr}\n{proc.stdout}"
    return proc


def in_process(*args: str | Path, report: bool = True) -> tuple[int, str]:
    """``loopbench ARGS`` through ``main`` in this process, from the repository root as
    :func:`loopbench` runs it: (exit code, stdout + stderr).

    For tests of what a command does, not of the process around it.  ``report=False``
    leaves out the rendering of run and sweep reports (the plots are most of a tiny run's
    CPU) where the test reads only the files a run writes.
    """
    from harness.cli.main import main

    out = io.StringIO()
    with contextlib.ExitStack() as stack:
        if not report:
            stack.enter_context(no_reports())
        stack.enter_context(contextlib.chdir(ROOT))
        stack.enter_context(contextlib.redirect_stdout(out))
        stack.enter_context(contextlib.redirect_stderr(out))
        try:
            main([str(a) for a in args])
        except SystemExit as exc:
            code = exc.code
        else:
            code = 0
    assert isinstance(code, int), code
    return code, out.getvalue()


def run_tiny(out: Path, transports: list[str], sets: dict[str, str], **options: Any) -> Run:
    """tiny.yaml with ``--set``-style ``sets``, run in this process, loaded back.

    The embedded server, no progress display, no report; ``options`` are further
    :class:`RunOptions` (``run_id`` is ``r`` unless given).
    """
    options.setdefault("run_id", "r")
    opts = RunOptions(
        transports=transports, results_root=out, progress=False, render=False, **options
    )
    return load_run(run_scenario(load_scenario(str(TINY), sets), str(TINY), opts).run_dir)


def rows_flushed(proc: subprocess.Popen[str], turns: Path, at_least: int) -> int:
    """Rows in a running ``loopbench run``'s turns file once it has ``at_least`` (or 120 s pass).

    Rows reach the file in blocks (every 0.5 s) and there is no event to await from another
    process, so the file is polled, bounded; returns early if the run ends first.
    """
    deadline = time.monotonic() + 120
    seen = 0
    while time.monotonic() < deadline and proc.poll() is None:
        if turns.exists():
            seen = len(read_csv_gz(turns))
            if seen >= at_least:
                break
        time.sleep(0.1)
    return seen


def interrupt_run(
    out: Path,
    run_id: str,
    transport: str,
    rollouts: int,
    sig: signal.Signals,
    *,
    again_after_s: tuple[float, ...] = (),
    report: bool = True,
) -> tuple[int, int, str]:
    """``loopbench run`` of tiny.yaml, one rollout at a time, sent ``sig`` once 6 rows are on disk
    (and once more after each delay of ``again_after_s``, as an impatient user or
    ``timeout -s INT`` does); ``report=False``: the run renders no report.

    Fails the test if the run ends first.  Returns the rows seen before the signal, the
    exit code and stderr.
    """
    args: list[str | Path] = [
        "run",
        TINY,
        "--set",
        f"rollout.count={rollouts}",
        "--set",
        "load.concurrency=1",
    ]
    args += ["--transports", transport, "--out", out, "--run-id", run_id, "-q"]
    proc = subprocess.Popen(
        _argv(tuple(args), report=report),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
    )
    try:
        seen = rows_flushed(proc, out / run_id / "turns.csv.gz", 6)
        assert proc.poll() is None, (
            f"run ended before it could be interrupted: {proc.communicate()[1]}"
        )
        assert seen >= 6, "no rows flushed within 120 s"
        proc.send_signal(sig)
        for delay in again_after_s:
            time.sleep(delay)
            if proc.poll() is None:
                proc.send_signal(sig)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=30)
    return seen, proc.returncode, err


def locust_master_argv(
    port: int, url: str, scenario: Path, out: Path, run_id: str, workers: int, *extra: str
) -> list[str]:
    """A headless Locust master on loopback running ``scenario`` into ``out/run_id``."""
    return [
        sys.executable,
        "-m",
        "locust",
        "-f",
        str(LOCUSTFILE),
        "--master",
        "--headless",
        "--expect-workers",
        str(workers),
        "--expect-workers-max-wait",
        "60",
        "--master-bind-host",
        "127.0.0.1",
        "--master-bind-port",
        str(port),
        "-H",
        url,
        "--scenario",
        str(scenario),
        "--loopbench-out",
        str(out),
        "--loopbench-run-id",
        run_id,
        *extra,
        "--only-summary",
    ]
