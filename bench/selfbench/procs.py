"""Child processes of the self-benchmark: start, wait for a ready line, always stop."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from harness.run.child import ready_child
from harness.wire.errors import LoopbenchError


class SelfbenchError(LoopbenchError):
    """A self-benchmark step could not run (a child process failed, a figure is missing)."""


@contextmanager
def child(
    args: Sequence[str], ready_prefix: str, *, timeout_s: float = 60.0
) -> Iterator[tuple[subprocess.Popen[str], str]]:
    """Run ``python args...``; yield (process, rest of the first stdout line starting with ``ready_prefix``)."""
    with ready_child(
        [sys.executable, *args],
        ready_prefix,
        what=" ".join(args),
        timeout_s=timeout_s,
        error=SelfbenchError,
        keep_stderr=20,
    ) as started:
        yield started.proc, started.ready


def process_cpu_s(pid: int) -> float | None:
    """CPU time (user + system) process ``pid`` has used so far; ``None`` without ``/proc``."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            stat = f.read()
    except OSError:
        return None
    # After the command name (which may hold spaces and parentheses): state is field 3,
    # utime and stime fields 14 and 15, in clock ticks.
    fields = stat.rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
