"""The accumulator's aggregate-TPS buckets as a series, for the tests that hold them to the
report's vectorised :func:`harness.metrics.timeseries.token_rate_series`."""

from __future__ import annotations

from harness.metrics.summary import Accumulator
from harness.metrics.timeseries import AGGREGATE_BUCKET_NS


def aggregate_tps_series(acc: Accumulator, transport: str) -> list[tuple[float, float]]:
    """``[(start_s, tokens/s)]`` per bucket from ``acc.t0_ns``, buckets without output 0."""
    buckets = acc._by_transport[transport].agg_buckets
    width = AGGREGATE_BUCKET_NS / 1e9
    return [(k * width, buckets.get(k, 0.0) / width) for k in range(min(buckets), max(buckets) + 1)]
