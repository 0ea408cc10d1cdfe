"""CPU time the hypervisor gave to other guests while a step ran (Linux ``/proc/stat``).

On a virtual machine, "steal" is time this machine's CPUs were runnable but not
running.  It delays timers and wake-ups on both sides of a loopback
measurement without showing up in any process's CPU time, so the self-bench
records it next to every timing step: a trial with high steal is a noisy trial,
not a slow harness.
"""

from __future__ import annotations

from pathlib import Path

_PROC_STAT = Path("/proc/stat")


def read_cpu_times(path: Path = _PROC_STAT) -> tuple[int, ...] | None:
    """The aggregate ``cpu`` line's counters (jiffies), or None where there is no /proc/stat."""
    try:
        with path.open() as f:
            first = f.readline().split()
    except OSError:
        return None
    if not first or first[0] != "cpu":
        return None
    return tuple(int(x) for x in first[1:])


def steal_percent(before: tuple[int, ...] | None, after: tuple[int, ...] | None) -> float | None:
    """Share (%) of all CPU time between two readings that was stolen; None if unknown."""
    # Fields: user nice system idle iowait irq softirq steal [guest guest_nice].
    if before is None or after is None or len(before) < 8 or len(after) < 8:
        return None
    # guest time is already counted in user/nice: the first eight fields are the total.
    total = sum(after[:8]) - sum(before[:8])
    if total <= 0:
        return None
    return round(100.0 * (after[7] - before[7]) / total, 2)
