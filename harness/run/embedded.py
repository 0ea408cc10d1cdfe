"""Start and stop the bundled reference server as a child process.

A separate process keeps the server's CPU off the measuring event loop (on two
cores that matters) and lets the harness measure real sockets.  The child binds
port 0 and prints its URL; we read that line, so nothing races for a port.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from harness.wire.errors import LoopbenchError

READY_PREFIX = "loopbench reference server listening on "


class EmbeddedServerError(LoopbenchError):
    """The embedded reference server did not start or died."""


@contextmanager
def embedded_server(
    *,
    api_profile: str = "optimized",
    engine_profile: str = "cerebras-spark",
    overrides: dict[str, str] | None = None,
    extra_args: Sequence[str] = (),
    seed: int = 0,
    host: str = "127.0.0.1",
    startup_timeout_s: float = 60.0,
) -> Iterator[str]:
    """Yield the base URL (``http://127.0.0.1:PORT/v1``) of a freshly started server."""
    cmd = [
        sys.executable,
        "-m",
        "reference_server",
        "--host",
        host,
        "--port",
        "0",
        "--api-profile",
        api_profile,
        "--engine-profile",
        engine_profile,
        "--seed",
        str(seed),
    ]
    for key, value in (overrides or {}).items():
        cmd += ["--set", f"{key}={value}"]
    cmd += list(extra_args)
    if "--store" not in extra_args:
        # The embedded server lives only as long as the run: its store need not outlive it.
        cmd += ["--store", ":memory:"]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    stderr_lines: list[str] = []

    def drain_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr_lines.append(line)
            del stderr_lines[:-50]

    err_reader = threading.Thread(target=drain_stderr, daemon=True)
    err_reader.start()
    readers = [err_reader]
    try:
        url = _wait_ready(proc, startup_timeout_s, stderr_lines)
        # Keep reading stdout so a chatty server never blocks on a full pipe.
        out_reader = threading.Thread(target=lambda: [None for _ in proc.stdout or ()], daemon=True)
        out_reader.start()
        readers.append(out_reader)
        yield url
    finally:
        stop_process(proc)
        for reader in readers:
            reader.join(2)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _wait_ready(proc: subprocess.Popen[str], timeout_s: float, stderr_lines: list[str]) -> str:
    assert proc.stdout is not None
    deadline = time.monotonic() + timeout_s
    result: list[str] = []

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if line.startswith(READY_PREFIX):
                result.append(line[len(READY_PREFIX) :].strip())
                return

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    while time.monotonic() < deadline and not result:
        reader.join(0.05)
        if proc.poll() is not None and not result:
            time.sleep(0.1)
            tail = "".join(stderr_lines[-10:]).strip()
            raise EmbeddedServerError(
                f"reference server exited with code {proc.returncode} during startup: {tail}"
            )
    if not result:
        stop_process(proc)
        raise EmbeddedServerError(f"reference server did not report ready within {timeout_s:.0f} s")
    return result[0]


def stop_process(proc: subprocess.Popen[str], timeout_s: float = 10.0) -> None:
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
