"""The p99 shift the proxy's latency bench reports: how far a side's quantile moved, with a
paired bootstrap CI over the trials (the module docstring of :mod:`bench.proxy.latency` says why
a shift of the quantile and not the quantile of the differences)."""

from __future__ import annotations

import math

import numpy as np

from harness.metrics.stats import Values, _check_boot, _ci, _numbers, _pairs, _resamples


def _finite_array(name: str, values: Values) -> np.ndarray:
    arr = _numbers(name, values)
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{name}: expected finite numbers, got {arr[~np.isfinite(arr)][0]!r}")
    return arr


#: values beyond the quantile a paired quantile shift needs for a confidence interval (so
#: 1,000 pairs for a p99).  With fewer, a resample's quantile is one of its few largest
#: values and the interval describes which outlier was drawn: in a simulation of iid pairs
#: a nominal 95 % interval of the p99 shift covered 85 % of the time at 100 pairs and 92 %
#: at 300.
MIN_TAIL_VALUES = 10


def min_tail_pairs(q: float) -> int:
    """Pairs a shift of quantile ``q`` needs for a CI: :data:`MIN_TAIL_VALUES` beyond it."""
    # rounded first: 10 / (1 - 0.99) is 1000.0000000000001 in floating point
    return math.ceil(round(MIN_TAIL_VALUES / (1.0 - max(q, 1.0 - q)), 6))


def paired_quantile_shift(
    baseline: Values,
    candidate: Values,
    *,
    q: float = 0.99,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, tuple[float, float] | None]:
    """How far the candidate's ``q`` quantile lies from the baseline's, with a paired CI.

    ``quantile(candidate, q) - quantile(baseline, q)``; the CI resamples *pairs* (the same
    indices on both sides), so what the two sides share (the upstream's drift in a trial)
    stays shared in every resample.  This is not the quantile of the per-pair differences:
    one late stamp on either side makes a large difference, but moves a side's p99 only as
    much as the tail of that side moves.  The CI is None below :func:`min_tail_pairs` pairs.
    It treats the pairs as independent draws: where late episodes cluster in time it is
    optimistic, and it says nothing of how a machine drifts between runs.
    """
    _check_boot(n_boot, level)
    if not 0.0 < q < 1.0:
        raise ValueError(f"q: expected a quantile in (0, 1), got {q}")
    base, cand = _pairs("paired_quantile_shift", baseline, candidate, _finite_array)
    shift = float(np.quantile(cand, q) - np.quantile(base, q))
    if base.size < min_tail_pairs(q):
        return shift, None
    boot = np.empty(n_boot, dtype=np.float64)
    for rows, idx in _resamples(base.size, n_boot, np.random.default_rng(seed)):
        boot[rows] = np.quantile(cand[idx], q, axis=1) - np.quantile(base[idx], q, axis=1)
    return shift, _ci(boot, level)
