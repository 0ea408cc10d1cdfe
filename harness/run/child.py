"""A child process that says on stdout when it is ready, and is always stopped after.

The embedded reference server, the soak's server and the self-benchmark's raw
servers all bind port 0 and print one line with what they bound, so nothing
races for a port; the parent waits for that line, then uses the child.
"""

from __future__ import annotations

import os
import signal
import subprocess
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

from harness.wire.errors import LoopbenchError


@dataclass(slots=True)
class ReadyChild:
    """A started child: the process, the rest of its ready line, the last lines of its stderr."""

    proc: subprocess.Popen[str]
    ready: str
    stderr: list[str]


@contextmanager
def ready_child(
    cmd: Sequence[str],
    ready_prefix: str,
    *,
    what: str,
    timeout_s: float,
    error: type[Exception] = LoopbenchError,
    env: dict[str, str] | None = None,
    keep_stderr: int = 50,
) -> Iterator[ReadyChild]:
    """Run ``cmd``; yield once it prints a line starting with ``ready_prefix``; stop it after.

    Raises ``error`` naming ``what`` when the child exits, or stays silent for
    ``timeout_s``, before that line.
    """
    full_env = dict(os.environ if env is None else env, PYTHONUNBUFFERED="1")
    proc = subprocess.Popen(
        cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=full_env
    )
    stderr: list[str] = []
    ready: list[str] = []
    settled = threading.Event()  # the ready line came, or stdout ended without it

    def read_stdout() -> None:
        assert proc.stdout is not None
        # Reading on after the ready line keeps a chatty child from blocking on a full pipe.
        for line in proc.stdout:
            if not ready and line.startswith(ready_prefix):
                ready.append(line[len(ready_prefix) :].strip())
                settled.set()
        settled.set()

    def read_stderr() -> None:
        assert proc.stderr is not None
        for line in proc.stderr:
            stderr.append(line)
            del stderr[:-keep_stderr]

    readers = [threading.Thread(target=f, daemon=True) for f in (read_stdout, read_stderr)]
    for reader in readers:
        reader.start()
    try:
        if not settled.wait(timeout_s):
            raise error(f"{what} did not report ready within {timeout_s:.0f} s")
        if not ready:
            readers[1].join(2)  # its last words
            tail = "".join(stderr[-10:]).strip()
            raise error(f"{what} exited with code {_exit_code(proc)} before it was ready: {tail}")
        yield ReadyChild(proc, ready[0], stderr)
    finally:
        stop_process(proc)
        for reader in readers:
            reader.join(2)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def _exit_code(proc: subprocess.Popen[str]) -> int | None:
    # Its stdout has closed, so it is exiting: give it a moment to be reaped.
    try:
        return proc.wait(2)
    except subprocess.TimeoutExpired:
        return None


def stop_process(proc: subprocess.Popen[str], timeout_s: float = 10.0) -> None:
    """SIGTERM, then SIGKILL if it has not exited within ``timeout_s``."""
    if proc.poll() is not None:
        return
    proc.send_signal(signal.SIGTERM)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
