"""The client's own health over a run: CPU share and how late its event loop woke.

Every measuring process (the ``run`` process, each ``--procs`` child, each Locust
worker's edge host) keeps one :class:`ClientHealth`; the run's validity rules
(:mod:`harness.run.validity`) judge each of them the same way.  The watchdogs that
fill ``loop_lag`` are :mod:`harness.run.passes`'s; they wake every
:data:`LOOP_WATCH_INTERVAL_S`.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from harness.metrics.hdr import Histogram

#: period of the event-loop watchdogs: how late a 10 ms sleep wakes is the loop's own lag
LOOP_WATCH_INTERVAL_S = 0.01


def round_ms(x: float) -> float | None:
    """Milliseconds to 3 decimals for a summary; None for NaN or infinity (empty histograms)."""
    return round(x, 3) if math.isfinite(x) else None


def loop_lag_dict(hist: Histogram) -> dict[str, float | None]:
    loop50, loop99 = hist.percentiles_ms((50, 99))
    return {"p50": round_ms(loop50), "p99": round_ms(loop99), "max": round_ms(hist.max / 1000.0)}


@dataclass(slots=True)
class ClientHealth:
    """One measuring process: its CPU share of one core, wall time and loop wake-up lag.

    ``name`` prefixes the validity reasons of a process among several
    (``"client process 1"``, ``"worker <node>"``); empty for the run's own process.
    """

    cpu_share: float
    wall_s: float
    loop_lag: Histogram = field(default_factory=Histogram)
    name: str = ""

    def as_dict(self) -> dict[str, Any]:
        return {"cpu_share": round(self.cpu_share, 3), "loop_lag_ms": loop_lag_dict(self.loop_lag)}

    def to_state(self) -> dict[str, Any]:
        return {
            "cpu_share": self.cpu_share,
            "wall_s": self.wall_s,
            "loop_lag": self.loop_lag.encode(),
        }

    @classmethod
    def from_state(cls, state: Mapping[str, Any], name: str = "") -> ClientHealth:
        return cls(
            cpu_share=float(state["cpu_share"]),
            wall_s=float(state["wall_s"]),
            loop_lag=Histogram.decode(state["loop_lag"]),
            name=name,
        )


class CpuMeter:
    """CPU time of this process over wall time since construction, as a share of one core."""

    __slots__ = ("_cpu0", "_wall0")

    def __init__(self) -> None:
        self._cpu0 = os.times()
        self._wall0 = time.monotonic()

    def read(self, loop_lag: Histogram, name: str = "") -> ClientHealth:
        cpu1 = os.times()
        wall = max(1e-9, time.monotonic() - self._wall0)
        used = (cpu1.user - self._cpu0.user) + (cpu1.system - self._cpu0.system)
        return ClientHealth(cpu_share=used / wall, wall_s=wall, loop_lag=loop_lag, name=name)


def client_summary(
    clients: Iterable[ClientHealth], several: bool
) -> tuple[float | None, dict[str, Any]]:
    """``client_cpu_share`` and the ``client`` block of a summary.

    A run measured by several processes (``several``) reports the busiest
    process's CPU share, the loop lag of all their wake-ups together, and each
    process on its own.
    """
    clients = list(clients)
    if not several:
        (only,) = clients
        block = only.as_dict()
        return block["cpu_share"], block
    merged = Histogram()
    for c in clients:
        merged.merge(c.loop_lag)
    per_process = [c.as_dict() for c in clients]
    cpu = max((p["cpu_share"] for p in per_process), default=None)
    return cpu, {
        "cpu_share": cpu,
        "loop_lag_ms": loop_lag_dict(merged),
        "procs": len(clients),
        "per_process": per_process,
    }
