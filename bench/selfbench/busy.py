"""Was the machine busy with other work while a bench step ran?  (Linux ``/proc``.)

A loopback bench measures this machine: another process's CPU delays the bench's
timers and wake-ups exactly as a slower harness would.  So each step is timed
against the CPU that *other* processes took meanwhile: every CPU's busy time
from ``/proc/stat`` (user, nice, system, irq, softirq, and steal — what the
hypervisor gave to other guests), minus what the bench's own process tree used
(itself, its servers and tools, live or already reaped).  A step during which
others used more than :data:`OTHERS_MAX_CORE_SHARE` of one core is repeated;
if the machine stays busy, its figures are "not judged" and the bench exits 3
(not comparable) rather than reporting a missed target.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from bench.selfbench.cpu_steal import read_cpu_times
from harness.run.proc_cpu import tree_cpu_seconds

#: other processes' CPU above this share of one core, on average over a step: busy.  A
#: quiet VM's own daemons use 1-3 %; a second bench or a test suite beside it, 50-200 %.
OTHERS_MAX_CORE_SHARE = 0.25
#: a busy step is run this many times in all before its figures are left unjudged
BUSY_ATTEMPTS = 3

T = TypeVar("T")


@dataclass(frozen=True, slots=True)
class Busy:
    """What other processes used while one step ran."""

    #: CPU of processes outside the bench's tree (steal included), in cores on average
    others_cores: float
    #: of which the hypervisor's steal, in cores
    steal_cores: float
    seconds: float

    @property
    def busy(self) -> bool:
        return self.others_cores > OTHERS_MAX_CORE_SHARE

    def text(self) -> str:
        return f"others used {self.others_cores * 100:.0f} % of a core"

    def not_judged(self) -> str:
        """The note a figure of a step that stayed busy carries instead of a verdict."""
        return f"not judged: the machine was busy ({self.text()})"

    def as_dict(self) -> dict[str, float | bool]:
        return {
            "others_core_pct": round(self.others_cores * 100, 1),
            "steal_core_pct": round(self.steal_cores * 100, 1),
            "seconds": round(self.seconds, 2),
            "busy": self.busy,
        }


@dataclass(frozen=True, slots=True)
class _Reading:
    cpu: tuple[int, ...] | None
    own_s: float | None
    at: float


def _read(pid: int) -> _Reading:
    return _Reading(read_cpu_times(), tree_cpu_seconds(pid, reaped=True), time.monotonic())


def others_between(before: _Reading, after: _Reading) -> Busy | None:
    """Other processes' CPU between two readings; None where /proc cannot say."""
    a, b = before.cpu, after.cpu
    wall = after.at - before.at
    if a is None or b is None or len(a) < 8 or len(b) < 8 or wall <= 0:
        return None
    if before.own_s is None or after.own_s is None:
        return None
    tick = os.sysconf("SC_CLK_TCK")
    # user nice system idle iowait irq softirq steal: busy is all but idle and iowait
    busy_s = sum(b[i] - a[i] for i in (0, 1, 2, 5, 6, 7)) / tick
    steal_s = (b[7] - a[7]) / tick
    own_s = after.own_s - before.own_s
    # Clock ticks round both sides: a few ticks below zero is nobody else at all.
    others = max(0.0, busy_s - own_s)
    return Busy(others / wall, steal_s / wall, wall)


def measure_busy(step: Callable[[], T], pid: int | None = None) -> tuple[T, Busy | None]:
    """Run ``step``; its result and what other processes used meanwhile."""
    me = os.getpid() if pid is None else pid
    before = _read(me)
    result = step()
    return result, others_between(before, _read(me))


def until_quiet(
    step: Callable[[], T],
    say: Callable[[str], None] = lambda _: None,
    attempts: int = BUSY_ATTEMPTS,
) -> tuple[T, Busy | None]:
    """Run ``step`` until the machine was quiet during it (at most ``attempts`` times).

    Returns the last run's result and its :class:`Busy` (whose ``busy`` says whether the
    machine stayed busy; None where /proc cannot say, which is judged as quiet).
    """
    for n in range(1, attempts + 1):
        result, busy = measure_busy(step)
        if busy is None or not busy.busy:
            return result, busy
        if n < attempts:
            say(f"  the machine was busy ({busy.text()}): repeating the step ({n + 1}/{attempts})")
    return result, busy
