"""The master and the worker step aside for the edge host: every thread of theirs, not its child.

Run in a subprocess: a nice value raised cannot be lowered again without privilege.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

pytestmark = pytest.mark.skipif(
    not sys.platform.startswith("linux"), reason="nice values per thread are Linux's"
)

PROGRAM = """
import json, os, subprocess, sys, threading
from harness.locust_driver.priority import step_aside

# a thread started before the call (as zmq's I/O thread is) and a child (the edge host)
stop = threading.Event()
early = threading.Thread(target=stop.wait)
early.start()
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(30)"])
base = os.getpriority(os.PRIO_PROCESS, 0)
now = step_aside(7)
late = []
thread = threading.Thread(target=lambda: late.append(os.getpriority(os.PRIO_PROCESS, 0)))
thread.start()
thread.join()
threads = {
    int(t): os.getpriority(os.PRIO_PROCESS, int(t)) for t in os.listdir("/proc/self/task")
}
print(json.dumps({"base": base, "now": now, "threads": sorted(set(threads.values())),
                  "late": late[0], "child": os.getpriority(os.PRIO_PROCESS, child.pid)}))
stop.set()
child.kill()
"""


def test_every_thread_runs_lower_and_the_child_started_before_does_not() -> None:
    done = subprocess.run(
        [sys.executable, "-c", PROGRAM], capture_output=True, text=True, timeout=60, check=True
    )
    got = json.loads(done.stdout)
    base = got["base"]
    if base + 7 > 19:
        pytest.skip(f"this test process already runs at nice {base}")
    assert got == {
        "base": base,
        "now": base + 7,
        "threads": [base + 7],  # the thread started before the call too
        "late": base + 7,  # threads started after inherit it
        "child": base,  # the edge host keeps the priority it was born with
    }


def test_nothing_changes_for_zero() -> None:
    from harness.locust_driver.priority import step_aside

    before = os.getpriority(os.PRIO_PROCESS, 0)
    assert step_aside(0) is None
    assert os.getpriority(os.PRIO_PROCESS, 0) == before
