"""``tree_cpu_seconds`` counts a live child's CPU, which the parent's own counters leave out."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import pytest

from harness.run.proc_cpu import tree_cpu_seconds

pytestmark = pytest.mark.skipif(not os.path.exists("/proc/self/stat"), reason="Linux /proc")

# burns ~0.4 s of CPU, says so, then waits (alive) until its stdin closes
_BURN = (
    "import sys, time\n"
    "t = time.process_time()\n"
    "while time.process_time() - t < 0.4: pass\n"
    "print('burnt', flush=True)\n"
    "sys.stdin.read()\n"
)


def test_a_live_child_is_counted_and_a_missing_process_is_none() -> None:
    with subprocess.Popen(
        [sys.executable, "-c", _BURN], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    ) as child:
        assert child.stdout is not None and child.stdout.readline() == "burnt\n"
        own = time.process_time()  # this process alone, threads included
        tree = tree_cpu_seconds(os.getpid())
        child_alone = tree_cpu_seconds(child.pid)
        assert child.stdin is not None
        child.stdin.close()
        child.wait(10)
    assert tree is not None
    # /proc counts in clock ticks (1/100 s): allow two ticks of rounding per process
    assert tree >= own + 0.4 - 0.04, (tree, own)
    assert child_alone is not None and child_alone >= 0.4 - 0.02
    assert tree_cpu_seconds(child.pid) is None  # reaped: nothing left to read
