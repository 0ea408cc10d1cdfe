"""``bench.peers.bench.timed``: a tool runs in a session of its own, so an interrupt of the
bench (Ctrl-C, or a SIGTERM that tools.real_engine turns into one) must kill it; nothing else
would stop it loading the target after the bench is gone."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from types import FrameType

import pytest

from bench.peers.bench import timed


def test_an_interrupted_run_kills_the_tools_session(tmp_path: Path) -> None:
    pidfile = tmp_path / "pid"

    def interrupt(signum: int, frame: FrameType | None) -> None:
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGALRM, interrupt)
    signal.setitimer(signal.ITIMER_REAL, 1.0)
    try:
        with pytest.raises(KeyboardInterrupt):
            timed(
                ["sh", "-c", f"echo $$ > {pidfile}; exec sleep 30"],
                env=dict(os.environ),
                log=tmp_path / "log",
                timeout_s=60,
            )
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
    pid = int(pidfile.read_text())
    deadline = time.monotonic() + 5
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)
    pytest.fail(f"the tool (pid {pid}) outlived the interrupted run")
