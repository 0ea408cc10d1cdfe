"""The receive-stamp diagnostic: how much later user space saw each first token than the kernel.

Per transport, the first :data:`DIAGNOSTIC_TURNS` turns that carry both stamps of their
first-token read (``TurnRecord.rx_user_minus_kernel_us``) keep them; later turns have the
field cleared before their row is written, so the diagnostic costs nothing in a long run.
The summary gets, per transport, how many turns were stamped each way and the distribution
of the difference (docs/metrics.md §1.9).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from harness.metrics.hdr import nearest_rank
from harness.workload.records import TurnRecord

#: the diagnostic window: turns per transport that keep both stamps
DIAGNOSTIC_TURNS = 200


class RxStampStats:
    """Counts the turns' stamp kinds and keeps the window's differences, per transport."""

    def __init__(self, window: int = DIAGNOSTIC_TURNS) -> None:
        self.window = window
        self.kinds: dict[str, dict[str, int]] = {}
        self.diffs_us: dict[str, list[float]] = {}

    def add(self, rec: TurnRecord) -> None:
        """Count ``rec``; clear its difference once its transport's window is full."""
        kinds = self.kinds.get(rec.transport)
        if kinds is None:
            kinds = self.kinds[rec.transport] = {}
        kinds[rec.rx_stamp] = kinds.get(rec.rx_stamp, 0) + 1
        diff = rec.rx_user_minus_kernel_us
        if diff is None:
            return
        kept = self.diffs_us.setdefault(rec.transport, [])
        if len(kept) < self.window:
            kept.append(diff)
        else:
            rec.rx_user_minus_kernel_us = None

    def to_state(self) -> dict[str, Any]:
        return {"kinds": self.kinds, "diffs_us": self.diffs_us}

    def merge(self, state: Mapping[str, Any]) -> None:
        """Fold in another process's counts and window (``--procs``)."""
        for transport, kinds in (state.get("kinds") or {}).items():
            mine = self.kinds.setdefault(transport, {})
            for kind, n in kinds.items():
                mine[kind] = mine.get(kind, 0) + int(n)
        for transport, diffs in (state.get("diffs_us") or {}).items():
            self.diffs_us.setdefault(transport, []).extend(float(d) for d in diffs)

    def summary(self, transport: str) -> dict[str, Any] | None:
        """``transports.<t>.rx_stamp`` of summary.json; None when the transport has no turn."""
        kinds = self.kinds.get(transport)
        if kinds is None:
            return None
        diffs = sorted(self.diffs_us.get(transport, []))
        block: dict[str, Any] = {
            "kernel_turns": kinds.get("kernel", 0),
            "user_turns": kinds.get("user", 0),
        }
        # The same keys with or without samples: every way to run writes one summary shape.
        block["user_minus_kernel_us"] = {
            "count": len(diffs),
            "p50": round(diffs[nearest_rank(50, len(diffs)) - 1], 2) if diffs else None,
            "p99": round(diffs[nearest_rank(99, len(diffs)) - 1], 2) if diffs else None,
            "max": round(diffs[-1], 2) if diffs else None,
            "mean": round(sum(diffs) / len(diffs), 2) if diffs else None,
        }
        return block
