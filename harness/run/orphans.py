"""Child processes that end when the command that started them dies.

``loopbench locust`` starts the Locust master and workers in sessions of their
own (so a terminal's Ctrl-C reaches only the command, which then stops the run
gracefully).  Killed itself (``kill -9``, an OOM kill), it leaves them
re-parented and loading the target unsupervised.  Each is told the command's
pid in :data:`PARENT_PID_ENV` and watches its own parent pid: once that
changes, a worker exits and a master ends the run as *orphaned* (its summary
says so and is invalid), then exits.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

#: the pid of the process that started this one; its death ends this one
PARENT_PID_ENV = "LOOPBENCH_PARENT_PID"


def watched_env(base: Mapping[str, str] | None = None) -> dict[str, str]:
    """``base`` (default: this environment) plus this process's pid for a child to watch."""
    return {**(os.environ if base is None else base), PARENT_PID_ENV: str(os.getpid())}


def watched_parent() -> int | None:
    """The pid whose death ends this process, if it was given one (a parent that died
    before this process looked shows as a parent pid that differs already)."""
    value = os.environ.get(PARENT_PID_ENV, "")
    return int(value) if value.isdigit() else None
