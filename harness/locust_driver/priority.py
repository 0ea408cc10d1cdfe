"""The Locust master and worker step aside for the edge host, the process that stamps time.

A local run puts four processes on the machine: the master (claims, rows, the results
writer), the gevent worker (relaying records, Locust's stats and heartbeats), its edge host
(the asyncio edge that sends requests and stamps every event) and, often, the server.
On two cores a burst of the master's or the worker's bookkeeping that runs while a first
token arrives makes the edge wait for a core: the stamp is late by up to a scheduler slice
(milliseconds).  Measured on the peer bench's 64-stream Locust row, that was the row's
client-side error p99 (docs/distributed.md, "Priorities").  A higher nice value makes the
scheduler let a waking edge host in at once; the bookkeeping still gets the CPU the edge
leaves, which is most of a core.
"""

from __future__ import annotations

import contextlib
import os
import sys

#: how much lower than the edge host the master and the worker run (``nice``)
BOOKKEEPING_NICE = 10


def step_aside(nice: int = BOOKKEEPING_NICE) -> int | None:
    """Raise this process's nice value by ``nice``, every thread of it; the nice value now.

    Per thread on Linux (a thread started before the call, as zmq's I/O thread is,
    keeps its own otherwise).  Call it after starting the edge host: a child inherits the
    value, and an unprivileged process cannot lower it again.  None where nothing changed.
    """
    if nice <= 0 or not hasattr(os, "setpriority"):
        return None
    tids = _threads()
    if tids is None:
        with contextlib.suppress(OSError):
            return os.nice(nice)
        return None
    for tid in tids:
        # a thread that ended meanwhile: nothing to lower
        with contextlib.suppress(OSError):
            os.setpriority(os.PRIO_PROCESS, tid, os.getpriority(os.PRIO_PROCESS, tid) + nice)
    return os.getpriority(os.PRIO_PROCESS, 0)


def _threads() -> list[int] | None:
    if not sys.platform.startswith("linux"):
        return None
    try:
        return [int(name) for name in os.listdir("/proc/self/task")]
    except OSError:
        return None
