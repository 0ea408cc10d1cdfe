"""CPU time a process and its live descendants have used so far (Linux ``/proc``).

A process's own ``utime``/``stime`` leave out children that are still running (they are
added to ``cutime``/``cstime`` only once reaped), so a server's workers or a proxy's
observer process would go uncounted: each process of the tree is read on its own.
"""

from __future__ import annotations

import os
from pathlib import Path


def tree_cpu_seconds(pid: int, *, reaped: bool = False) -> float | None:
    """User + system CPU seconds of ``pid`` and its live descendants; None off Linux.

    ``reaped``: also the descendants that already ended and were waited for (each
    process's ``cutime``/``cstime``), so a server or tool started and stopped between two
    readings is counted too.
    """
    if not Path(f"/proc/{pid}/stat").exists():
        return None  # no /proc (or no such process): nothing to read
    tick = os.sysconf("SC_CLK_TCK")
    total = 0.0
    todo = [pid]
    seen = 0
    while todo:
        p = todo.pop()
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
            # after the command's ")": state is field 3, utime and stime fields 14 and 15,
            # cutime and cstime 16 and 17
            fields = stat.rsplit(")", 1)[1].split()
            used = int(fields[11]) + int(fields[12])
            if reaped:
                used += int(fields[13]) + int(fields[14])
            total += used / tick
            seen += 1
            tasks = list(Path(f"/proc/{p}/task").iterdir())
        except (OSError, ValueError, IndexError):
            continue  # gone meanwhile: what it used is lost with it
        for task in tasks:
            # one thread ending meanwhile must not hide its siblings' children
            try:
                todo.extend(int(k) for k in (task / "children").read_text().split())
            except (OSError, ValueError):
                continue
    return total if seen else None
