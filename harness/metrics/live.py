"""What the live export (``loopbench run --prometheus-port``) shows, computed without I/O.

The run keeps one cumulative HDR histogram per metric and transport
(:class:`~harness.metrics.summary.Accumulator`); an interval's histogram is the bucket-wise
difference of two snapshots of it, so the live percentiles cost the run nothing: the
exporter's own thread takes the snapshots (:meth:`Accumulator.live`) and
:class:`IntervalPercentiles` turns each pair into the percentiles of what was recorded in
between.  Interval percentiles are HdrHistogram values (3 significant digits), not the
exact order statistics the summary gives up to 10,000 samples.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from harness.metrics import definitions as D
from harness.metrics.hdr import Histogram

#: the latency metrics exported per interval: (metric of the table, series name part)
LIVE_LATENCY: tuple[tuple[str, str], ...] = (
    ("ttft_ms", "ttft"),
    ("ttfot_ms", "ttfot"),
    ("turn_ms", "turn"),
)
#: the quantiles exported, as Prometheus labels them
QUANTILES: tuple[float, ...] = (0.5, 0.9, 0.99)


@dataclass(frozen=True, slots=True)
class Interval:
    """One metric of one transport over the last interval."""

    samples: int
    #: seconds at each of :data:`QUANTILES`; NaN when the interval had no sample
    quantiles: tuple[float, ...]


def _seconds(metric: str) -> float:
    """Divisor from a histogram's recorded unit to seconds (µs for ns metrics)."""
    return 1e6 if D.get(metric).raw == "ns" else 1.0


class IntervalPercentiles:
    """Percentiles of each interval, from successive cumulative snapshots."""

    def __init__(self) -> None:
        self._previous: dict[tuple[str, str], np.ndarray] = {}

    def advance(
        self, snapshot: Mapping[str, Mapping[str, tuple[str, Sequence[int]]]]
    ) -> dict[tuple[str, str], Interval]:
        """``snapshot``: ``{transport: {metric: (unit, cumulative counts)}}``, taken after the
        previous call's; returns ``{(transport, metric): Interval}`` of what lies between
        (the first call: everything recorded so far)."""
        out: dict[tuple[str, str], Interval] = {}
        for transport, hists in snapshot.items():
            for metric, (unit, counts) in hists.items():
                key = (transport, metric)
                now = np.asarray(counts, dtype=np.int64)
                before = self._previous.get(key)
                # counts only grow; a bucket that seems to shrink was copied mid-merge: take 0
                diff = now if before is None else np.maximum(now - before, 0)
                self._previous[key] = now
                n = int(diff.sum())
                if n:
                    h = Histogram.from_counts(unit, diff.tolist())
                    div = _seconds(metric)
                    values = tuple(v / div for v in h.percentiles([q * 100 for q in QUANTILES]))
                else:
                    values = tuple(float("nan") for _ in QUANTILES)
                out[key] = Interval(n, values)
        return out
