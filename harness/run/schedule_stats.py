"""What happened to one transport's intended starts: the schedule half of a run's validity."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import astuple, dataclass, fields
from typing import Any

from harness.workload.records import RolloutRecord


@dataclass(slots=True)
class ScheduleStats:
    """What happened to one transport's intended starts (measured rollouts only).

    ``intended``: starts the plan asked for; ``started``: rollouts begun;
    ``late``: begun more than ``load.max_schedule_lag_ms`` after their intended
    time; ``dropped``: never begun because ``load.max_in_flight`` rollouts were
    in flight; ``not_started``: left over when a closed loop reached
    ``duration_s`` or the run was interrupted.  In the summary, ``cancelled``
    are the rollouts begun but cut off by an interruption (their turns so far are
    kept, the rollout is not recorded), so that ``intended = started + cancelled +
    dropped + not_started`` always holds.
    """

    intended: int = 0
    started: int = 0
    late: int = 0
    dropped: int = 0
    not_started: int = 0
    lag_max_ns: int = 0
    lag_sum_ns: int = 0

    def observe(self, rec: RolloutRecord, late_ns: int) -> bool:
        """Count a finished rollout; True if it started late."""
        self.started += 1
        lag = rec.schedule_lag_ns
        self.lag_sum_ns += lag
        if lag > self.lag_max_ns:
            self.lag_max_ns = lag
        if lag > late_ns:
            self.late += 1
            return True
        return False

    @property
    def cancelled(self) -> int:
        """Begun but never finished: in flight when the run was interrupted."""
        return max(0, self.intended - self.started - self.dropped - self.not_started)

    def merge(self, other: ScheduleStats) -> None:
        for f in fields(self):
            mine, theirs = getattr(self, f.name), getattr(other, f.name)
            setattr(self, f.name, max(mine, theirs) if f.name == "lag_max_ns" else mine + theirs)

    def to_state(self) -> list[int]:
        """The fields' values in their declared order."""
        return list(astuple(self))

    @classmethod
    def from_state(cls, state: Sequence[int]) -> ScheduleStats:
        return cls(*(int(x) for x in state))

    def as_dict(self) -> dict[str, Any]:
        started = self.started
        return {
            "intended": self.intended,
            "started": started,
            "late": self.late,
            "dropped": self.dropped,
            "cancelled": self.cancelled,
            "not_started": self.not_started,
            "lag_mean_ms": round(self.lag_sum_ns / started / 1e6, 3) if started else None,
            "lag_max_ms": round(self.lag_max_ns / 1e6, 3) if started else None,
        }
