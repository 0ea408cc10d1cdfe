"""Aggregate token-rate time series: output tokens per second across all streams.

docs/metrics.md §1 defines aggregate TPS as a time series.  Each response's output
tokens are taken as emitted uniformly between its first and last token (the
per-delta times are not kept in the row files) and added to fixed-width
buckets; a bucket's rate is its tokens divided by its width.  The
:class:`~harness.metrics.summary.Accumulator` does the same incrementally with
:data:`AGGREGATE_BUCKET_NS` buckets; this module does it in one vectorised pass over a
table, with any bucket width, for plots and notebooks.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import numpy.typing as npt

#: the bucket of aggregate TPS: the summary's ``aggregate_peak`` is its fullest bucket, and the
#: report's throughput plot draws these buckets (aligned to the same clock) so the two agree
AGGREGATE_BUCKET_NS = 1_000_000_000


def token_rate_series(
    first_ns: npt.ArrayLike,
    last_ns: npt.ArrayLike,
    tokens: npt.ArrayLike,
    *,
    bucket_ns: int,
    origin_ns: int = 0,
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """Bucket starts (s after ``origin_ns``) and tokens/s in each bucket.

    ``first_ns``/``last_ns``/``tokens`` are per response; responses with no
    token (``tokens <= 0`` or ``first_ns == 0``) are skipped.  A response whose
    last token is not after its first puts all its tokens in one bucket.  The
    series runs from the bucket of the earliest first token to that of the
    latest last token, empty buckets included (a gap in output is a real 0).
    """
    if bucket_ns <= 0:
        raise ValueError(f"bucket_ns: expected a positive integer, got {bucket_ns}")
    first = np.asarray(first_ns, dtype=np.int64)
    last = np.asarray(last_ns, dtype=np.int64)
    n = np.asarray(tokens, dtype=np.float64)
    if not (first.shape == last.shape == n.shape) or first.ndim != 1:
        raise ValueError(
            f"token_rate_series: expected three 1-d arrays of one length, got shapes "
            f"{first.shape}, {last.shape}, {n.shape}"
        )
    keep = (n > 0) & (first != 0)
    if not keep.any():
        return np.zeros(0), np.zeros(0)
    a = first[keep] - origin_ns
    b = np.maximum(first[keep], last[keep]) - origin_ns
    n = n[keep]
    lo_bucket = int(a.min() // bucket_ns)
    hi_bucket = int(b.max() // bucket_ns)
    edges = np.arange(lo_bucket, hi_bucket + 2, dtype=np.int64) * bucket_ns
    totals = np.zeros(len(edges) - 1, dtype=np.float64)

    point = a == b
    if point.any():
        idx = a[point] // bucket_ns - lo_bucket
        np.add.at(totals, idx, n[point])
    span = ~point
    if span.any() and int(span.sum()) * len(edges) > _DIRECT_MAX:
        totals += np.diff(_cumulative_sorted(a[span], b[span], n[span], edges))
    elif span.any():
        # Cumulative tokens emitted by every spread response up to each edge: with
        # a uniform rate, tokens(t) = n * clip((t - a) / (b - a), 0, 1).
        sa, sb, sn = a[span], b[span], n[span]
        cum = np.zeros(len(edges), dtype=np.float64)
        for start in range(0, len(sa), 4096):
            stop = start + 4096
            frac = (edges[None, :] - sa[start:stop, None]) / (sb - sa)[start:stop, None]
            cum += (np.clip(frac, 0.0, 1.0) * sn[start:stop, None]).sum(axis=0)
        totals += np.diff(cum)
    starts = edges[:-1] / 1e9
    return starts.astype(np.float64), totals * (1e9 / bucket_ns)


#: above this many (response, edge) pairs the cumulative sum is taken from sorted prefix sums
#: (n log n) instead of the direct n × edges matrix: many responses in fine buckets (time slices)
_DIRECT_MAX = 20_000_000


def turns_rate_series(
    turns: Any, *, bucket_ns: int, origin_ns: int = 0
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """:func:`token_rate_series` of a table of turn rows (``turns.csv.gz``: a pandas frame, or
    any mapping of ``first_token_ns``, ``last_token_ns`` and ``output_tokens`` columns)."""
    return token_rate_series(
        np.asarray(turns["first_token_ns"]),
        np.asarray(turns["last_token_ns"]),
        np.asarray(turns["output_tokens"]),
        bucket_ns=bucket_ns,
        origin_ns=origin_ns,
    )


def _cumulative_sorted(
    a: npt.NDArray[np.int64], b: npt.NDArray[np.int64], n: npt.NDArray[np.float64], edges: Any
) -> npt.NDArray[np.float64]:
    """The direct sum's cumulative tokens at each edge, in O((responses + edges) log responses).

    Each response adds ``r (t - a)`` for ``a < t``, less ``r (t - b)`` for ``b < t`` (``r`` its
    rate): at an edge ``e`` that is ``e · Σr - Σ r·a`` over the starts before ``e`` minus the
    same over the ends before it, four prefix sums read at the edge's rank.
    """
    r = n / (b - a)
    e = edges.astype(np.float64)

    def before(x: npt.NDArray[np.int64]) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
        order = np.argsort(x, kind="stable")
        xs = x[order]
        rate = np.concatenate(([0.0], np.cumsum(r[order])))
        moment = np.concatenate(([0.0], np.cumsum(r[order] * xs.astype(np.float64))))
        k = np.searchsorted(xs, edges, side="left")
        return rate[k], moment[k]

    ra, ma = before(a)
    rb, mb = before(b)
    return np.asarray(e * (ra - rb) - (ma - mb), dtype=np.float64)


def pick_bucket_ns(span_ns: int, target_buckets: int = 120) -> int:
    """A readable bucket width for a timeline of ``span_ns``: 10 ms … 60 s, about ``target_buckets``."""
    steps = (10, 20, 50, 100, 200, 250, 500, 1000, 2000, 5000, 10000, 30000, 60000)
    want_ms = max(span_ns, 1) / 1e6 / max(1, target_buckets)
    for ms in steps:
        if ms >= want_ms:
            return ms * 1_000_000
    return steps[-1] * 1_000_000
