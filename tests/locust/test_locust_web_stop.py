"""``loopbench locust --web`` stopped while idle returns promptly (issue 16).

Before the fix the idle master ignored the stop file (Locust's main greenlet is the web
server, which ``runner.quit()`` leaves running) and was killed only after the ~80 s of
``STOP_WAIT_S`` + ``EXIT_GRACE_S``.
"""

from __future__ import annotations

import signal
import socket
import subprocess
import time
import urllib.request
from pathlib import Path

import pytest

from harness.cli.locust import EXIT_GRACE_S, STOP_WAIT_S, _free_port
from tests.runs import ROOT, TINY, _argv

pytestmark = [pytest.mark.slow, pytest.mark.timeout(240)]


def _wait_for_web(port: int, proc: subprocess.Popen[bytes], bound_s: float = 120) -> None:
    deadline = time.monotonic() + bound_s
    while time.monotonic() < deadline and proc.poll() is None:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/", timeout=2):
                return
        except OSError:
            time.sleep(0.2)
    raise AssertionError(f"the web UI on port {port} did not answer within {bound_s:g} s")


def test_an_idle_web_master_stops_without_the_kill_grace(tmp_path: Path) -> None:
    web_port = _free_port("127.0.0.1")
    args = ["locust", TINY, "--web", "--web-port", str(web_port), "--out", tmp_path, "-q"]
    log = (tmp_path / "locust.log").open("wb")
    proc = subprocess.Popen(_argv(tuple(args)), stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
    try:
        _wait_for_web(web_port, proc)
        stopped = time.monotonic()
        proc.send_signal(signal.SIGTERM)
        # Half of the wait the old path needed before it killed the master.
        proc.wait(timeout=(STOP_WAIT_S + EXIT_GRACE_S) / 2)
        took = time.monotonic() - stopped
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(30)
        log.close()
    assert took < STOP_WAIT_S, took
    # The web port is released: nothing is left serving.
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", web_port)) != 0
