"""Time slices: per-interval percentiles and throughput per transport (docs/metrics.md §7).

What a slice holds, and why one slice spanning a whole pass gives the summary's exact
percentiles: docs/metrics.md §7.  Computed once over the turn rows after the run, not per
record on the hot path.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from harness.metrics import definitions as D
from harness.metrics.hdr import nearest_rank
from harness.metrics.live import LIVE_LATENCY, QUANTILES
from harness.metrics.sample_size import min_samples
from harness.metrics.timeseries import pick_bucket_ns, turns_rate_series

if TYPE_CHECKING:
    import pandas as pd

#: the statistics of each latency metric per slice, as the live export names them
STATS: tuple[str, ...] = tuple(f"p{round(q * 100)}" for q in QUANTILES)
#: the automatic slice width gives at most this many slices over the longest pass (no ``--slice-s``)
AUTO_SLICES = 60
#: the automatic width is never below this: narrower slices hold too few turns for a percentile
AUTO_MIN_NS = 100_000_000

#: the stamps a turn may have ended at, latest first wins (a failed turn has no done_ns)
_END_STAMPS = ("done_ns", "last_token_ns", "first_token_ns", "first_event_ns", "sent_ns")


def columns() -> list[str]:
    """The columns of :func:`slice_table` (and ``slices.csv.gz``), in order."""
    cols = [
        "transport",
        "slice",
        "start_s",
        "end_s",
        "turns",
        "errors",
        "turns_per_s",
        "errors_per_s",
        "output_tokens_per_s",
    ]
    for _, name in LIVE_LATENCY:
        cols.append(f"{name}_n")
        cols.extend(f"{name}_{s}_ms" for s in STATS)
    return cols


def auto_slice_ns(turns: pd.DataFrame) -> int:
    """The width used when none is asked for: at most :data:`AUTO_SLICES` slices over the longest
    transport's span, on the readable steps of :func:`pick_bucket_ns`, at least 100 ms."""
    spans = [0]
    for _, g in turns.groupby("transport", sort=False):
        start, end = _origin(g), _end_ns(g)
        end = end[end > 0]
        if start and len(end):
            spans.append(int(end.max()) - start)
    return max(AUTO_MIN_NS, pick_bucket_ns(max(spans), target_buckets=AUTO_SLICES))


def _origin(g: pd.DataFrame) -> int:
    """The transport's first intended start (its schedule's clock), else its first request."""
    for col in ("intended_start_ns", "sent_ns"):
        v = g[col][g[col] > 0]
        if len(v):
            return int(v.min())
    return 0


def _end_ns(g: pd.DataFrame) -> np.ndarray:
    """When each turn ended: its last non-zero stamp (0: never sent)."""
    stamps = np.stack([g[c].to_numpy(dtype=np.int64) for c in _END_STAMPS])
    return np.asarray(stamps.max(axis=0), dtype=np.int64)


def _percentiles(sorted_us: np.ndarray) -> list[float]:
    """Nearest-rank percentiles (ms) of sorted integer µs values, as :class:`~harness.metrics.
    hdr.Histogram` gives them exactly; NaN for no value."""
    n = len(sorted_us)
    if not n:
        return [float("nan")] * len(QUANTILES)
    return [float(sorted_us[nearest_rank(q * 100, n) - 1]) / 1000.0 for q in QUANTILES]


def slice_table(
    turns: pd.DataFrame,
    slice_ns: int,
    *,
    warmup_rollouts: int = 0,
    transports: list[str] | None = None,
) -> pd.DataFrame:
    """One row per transport and slice, from the turn rows (``turns.csv.gz`` columns).

    ``warmup_rollouts``: rollouts below this id are not measured (as the summary drops them)
    but their stamps still place the origin, so t = 0 is when the pass began.  Slices run
    from 0 to the last one a measured turn ended in, empty ones included (a stall is a real
    0 turns/s; its percentiles are NaN).  ``transports`` orders the rows (default: as met).
    """
    import pandas as pd  # heavy: only for the tables

    if slice_ns <= 0:
        raise ValueError(f"slice_ns: expected a positive number of nanoseconds, got {slice_ns}")
    rows: list[dict[str, Any]] = []
    groups = {str(name): g for name, g in turns.groupby("transport", sort=False)}
    order = [t for t in (transports or []) if t in groups]
    order += [t for t in groups if t not in order]
    width_s = slice_ns / 1e9
    for name in order:
        g = groups[name]
        origin = _origin(g)
        if not origin:
            continue
        g = g[g["rollout_id"] >= warmup_rollouts]
        end = _end_ns(g)
        keep = end >= origin
        g, end = g[keep], end[keep]
        if not len(g):
            continue
        idx = (end - origin) // slice_ns
        n_slices = int(idx.max()) + 1
        ok = g["status"].isin(D.TURN_OK).to_numpy()
        model_turn = ~g["compaction"].astype(bool).to_numpy()
        turns_n = np.bincount(idx[model_turn & ok], minlength=n_slices)
        errors_n = np.bincount(idx[~ok], minlength=n_slices)
        # every response's tokens, failed ones too (they loaded the engine), as the summary's
        # aggregate TPS; a response running past the last slice is cut off there
        tps = np.zeros(n_slices)
        starts, rates = turns_rate_series(g, bucket_ns=slice_ns, origin_ns=origin)
        for s, r in zip(np.rint(starts / width_s).astype(np.int64), rates, strict=True):
            if 0 <= s < n_slices:
                tps[s] = r
        per_metric: list[tuple[np.ndarray, np.ndarray]] = []
        for metric, _ in LIVE_LATENCY:
            ms = D.column(D.get(metric), g).to_numpy(dtype=np.float64)
            has = ~np.isnan(ms)
            # µs as the summary's histograms record them (Histogram.record_ns rounds half up)
            ns = np.rint(ms[has] * 1e6).astype(np.int64)
            us = (ns + 500) // 1000
            # sorted by slice then value: each slice's values are one sorted run, cut at bounds
            by_slice = np.lexsort((us, idx[has]))
            bounds = np.searchsorted(idx[has][by_slice], np.arange(n_slices + 1))
            per_metric.append((bounds, us[by_slice]))
        for k in range(n_slices):
            row: dict[str, Any] = {
                "transport": name,
                "slice": k,
                "start_s": round(k * width_s, 9),
                "end_s": round((k + 1) * width_s, 9),
                "turns": int(turns_n[k]),
                "errors": int(errors_n[k]),
                "turns_per_s": turns_n[k] / width_s,
                "errors_per_s": errors_n[k] / width_s,
                "output_tokens_per_s": float(tps[k]),
            }
            for (_, short), (bounds, us) in zip(LIVE_LATENCY, per_metric, strict=True):
                values = us[bounds[k] : bounds[k + 1]]
                row[f"{short}_n"] = len(values)
                for s, v in zip(STATS, _percentiles(values), strict=True):
                    row[f"{short}_{s}_ms"] = v
            rows.append(row)
    return pd.DataFrame(rows, columns=columns())


def too_few(table: pd.DataFrame, short: str, stat: str) -> Any:
    """Boolean column: the slice's ``<short>_<stat>_ms`` rests on fewer samples than the
    statistic needs (docs/metrics.md §1.4: p99 of fewer than 100 values is the maximum)."""
    return table[f"{short}_n"] < min_samples(stat)
