"""Child processes of the self-benchmark: start, wait for a ready line, always stop."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from harness.run.embedded import stop_process
from harness.wire.errors import LoopbenchError


class SelfbenchError(LoopbenchError):
    """A self-benchmark step could not run (a child process failed, a figure is missing)."""


@contextmanager
def child(
    args: Sequence[str], ready_prefix: str, *, timeout_s: float = 60.0
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``python args...``; yield (process, rest of the first stdout line starting with ``ready_prefix``)."""
    cmd = [sys.executable, *args]
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    found: list[str] = []
    tail: list[str] = []

    def read_out() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            if not found and line.startswith(ready_prefix):
                found.append(line[len(ready_prefix) :].strip())

    def read_err() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            tail.append(line)
            del tail[:-20]

    readers = [threading.Thread(target=f, daemon=True) for f in (read_out, read_err)]
    for r in readers:
        r.start()
    try:
        deadline = time.monotonic() + timeout_s
        while not found:
            if proc.poll() is not None:
                raise SelfbenchError(
                    f"{' '.join(args)}: exited with code {proc.returncode} before it was ready: "
                    + "".join(tail[-5:]).strip()
                )
            if time.monotonic() > deadline:
                raise SelfbenchError(f"{' '.join(args)}: not ready within {timeout_s:.0f} s")
            time.sleep(0.02)
        yield proc, found[0]
    finally:
        stop_process(proc)
        for r in readers:
            r.join(2)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()
