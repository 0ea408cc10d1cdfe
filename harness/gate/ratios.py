"""Ratio statistics of the relative rules: candidate / baseline with a bootstrap CI, pairing.

Pure and seeded: the same samples and seed always give the same interval.
"""

from __future__ import annotations

import math

import numpy as np

from harness.gate.samples import FloatArray, Key, Samples
from harness.metrics.stats import paired_speedup

#: paired comparison needs this share of samples to have a partner
PAIRED_SHARE = 0.9
#: fewer samples than this on a side: nothing to test
MIN_SAMPLES = 3

_QUANTILES = {"p50": 50.0, "p90": 90.0, "p99": 99.0}


def statistic(values: FloatArray, stat: str) -> float:
    if stat == "mean":
        return float(np.mean(values))
    return float(np.percentile(values, _QUANTILES[stat]))


def _stat_rows(matrix: FloatArray, stat: str) -> FloatArray:
    if stat == "mean":
        return np.asarray(matrix.mean(axis=1), dtype=np.float64)
    return np.asarray(np.percentile(matrix, _QUANTILES[stat], axis=1), dtype=np.float64)


def _ci(boot: FloatArray, alpha: float) -> tuple[float, float]:
    lo, hi = np.quantile(boot, [alpha / 2.0, 1.0 - alpha / 2.0])
    return float(lo), float(hi)


def median_order_ci(values: FloatArray, alpha: float) -> tuple[float, float]:
    """Distribution-free ``1 - alpha`` interval of the median: order statistics by the sign test.

    ``[x(k), x(n+1-k)]`` with the largest ``k`` such that ``P(Binomial(n, 1/2) < k) <= alpha/2``,
    so coverage is at least ``1 - alpha`` whatever the distribution (``k = 1``, the full range,
    when ``n`` is too small for anything tighter).
    """
    x = np.sort(np.asarray(values, dtype=np.float64))
    n = int(x.size)
    k, below = 1, 0.0
    for j in range(n):  # below = P(B <= j)
        below += math.comb(n, j) / 2.0**n
        if below > alpha / 2.0:
            break
        k = j + 1
    k = min(k, (n + 1) // 2)
    return float(x[k - 1]), float(x[n - k])


def ratio_with_ci(
    baseline: FloatArray,
    candidate: FloatArray,
    stat: str,
    *,
    paired: bool,
    alpha: float,
    resamples: int,
    seed: int,
) -> tuple[float, tuple[float, float]]:
    """Candidate / baseline and its percentile-bootstrap CI at level ``1 - alpha``.

    Paired p50: median of per-pair ratios (the shared per-rollout variance
    cancels, as in the run's own speedup figure).  Paired other statistics:
    pairs are resampled together.  Unpaired: each side is resampled alone.
    """
    if paired and stat == "p50":
        # paired_speedup reports baseline/candidate; swapping the arguments gives candidate/baseline.
        res = paired_speedup(candidate, baseline, n_boot=resamples, seed=seed, level=1.0 - alpha)
        # The percentile bootstrap of a median is too narrow for a handful of pairs (with 6
        # rollouts it calls "5 of 6 slower" significant); never report less than the
        # distribution-free interval of the median.
        lo, hi = median_order_ci(candidate / baseline, alpha)
        if res.ci95 is None:  # too few pairs for a bootstrap: the order-statistic interval alone
            return res.median_ratio, (lo, hi)
        return res.median_ratio, (min(res.ci95[0], lo), max(res.ci95[1], hi))
    rng = np.random.default_rng(seed)
    estimate = statistic(candidate, stat) / statistic(baseline, stat)
    # Blocks keep resamples x n from materialising as one huge matrix on big runs.
    block = max(1, (1 << 20) // max(baseline.size, candidate.size))
    boot = np.empty(resamples, dtype=np.float64)
    for start in range(0, resamples, block):
        stop = min(resamples, start + block)
        if paired:
            idx = rng.integers(0, baseline.size, size=(stop - start, baseline.size))
            b, c = baseline[idx], candidate[idx]
        else:
            b = baseline[rng.integers(0, baseline.size, size=(stop - start, baseline.size))]
            c = candidate[rng.integers(0, candidate.size, size=(stop - start, candidate.size))]
        boot[start:stop] = _stat_rows(c, stat) / _stat_rows(b, stat)
    return estimate, _ci(boot, alpha)


def align(base: Samples, cand: Samples) -> tuple[FloatArray, FloatArray, bool]:
    """Values of both sides, aligned by key when enough keys match (then ``paired``)."""
    b = dict(zip(base.keys, base.values.tolist(), strict=True))
    c = dict(zip(cand.keys, cand.values.tolist(), strict=True))
    common = sorted(b.keys() & c.keys())
    if len(common) >= MIN_SAMPLES and len(common) >= PAIRED_SHARE * max(len(b), len(c)):
        return (
            np.asarray([b[k] for k in common], dtype=np.float64),
            np.asarray([c[k] for k in common], dtype=np.float64),
            True,
        )
    return base.values, cand.values, False


def per_round(s: Samples, stat: str) -> Samples:
    rounds = s.by_round()
    keys: list[Key] = [(r,) for r in rounds]
    return Samples.of(keys, [statistic(v, stat) for v in rounds.values()])
