"""Speedup statistics between transports: paired bootstrap, unpaired fallback, Mann–Whitney.

Pure functions: the random generator is built from an explicit ``seed``, so the
same inputs always give the same interval.  Ratios are ``baseline / candidate``
(> 1 means the candidate is faster); reductions are ``1 - candidate / baseline``
in percent.

Why the median of per-pair ratios: the transports replay the *same* seeded
rollouts, so most of the variance between rollouts (length, tool latencies) is
shared and cancels in the per-rollout ratio; the median keeps one pathological
rollout (a reconnect, a GC pause) from moving the headline figure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from harness.wire.plural import counted

#: fewer pairs (paired) or samples on a side (unpaired) than this: no confidence interval.
#: A percentile bootstrap over 2–4 pairs resamples so few distinct values that its interval is
#: an artefact (two rollouts gave "1.35x [1.34, 1.36]", one "6.42x [6.42, 6.42]").
MIN_CI_PAIRS = 5


def ci_reason(n: int, minimum: int = MIN_CI_PAIRS) -> str | None:
    """Why a sample of size ``n`` gets no confidence interval; None when it gets one."""
    return None if n >= minimum else f"n={n}: too few for a CI (need {minimum})"


# Bootstrap resamples are drawn in blocks of at most this many values so that
# n_boot x n never materialises as one huge matrix.
_BLOCK_VALUES = 1 << 21

#: latencies: any sequence of numbers, or a 1-d numpy array
Values = Sequence[float] | npt.NDArray[Any]


@dataclass(frozen=True, slots=True)
class PairedResult:
    """Speedup of a candidate over a baseline.

    ``median_ratio``: baseline / candidate (median of per-pair ratios when
    ``paired``, ratio of medians otherwise); ``ci95``: percentile-bootstrap 95 %
    interval of that statistic, None below :data:`MIN_CI_PAIRS` (``ci_reason`` says
    why); ``reduction_pct``: ``(1 - median(candidate /
    baseline)) * 100`` (ratio of medians when unpaired); ``n``: pairs (paired)
    or the smaller sample size (unpaired).
    """

    median_ratio: float
    ci95: tuple[float, float] | None
    reduction_pct: float
    n: int
    paired: bool = True

    @property
    def ci_reason(self) -> str | None:
        """Why there is no CI ("n=2: too few for a CI (need 5)"); None when there is one."""
        return ci_reason(self.n)


def _numbers(name: str, values: Values) -> np.ndarray:
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim != 1 or arr.size == 0:
        raise ValueError(
            f"{name}: expected a non-empty sequence of numbers, got {counted(arr.size, 'value')}"
        )
    return arr


def _positive_array(name: str, values: Values) -> np.ndarray:
    arr = _numbers(name, values)
    if not np.all(np.isfinite(arr)) or np.any(arr <= 0):
        bad = arr[~(np.isfinite(arr) & (arr > 0))][0]
        raise ValueError(f"{name}: expected positive finite latencies, got {bad!r}")
    return arr


def _resamples(n: int, n_boot: int, rng: np.random.Generator) -> Iterator[tuple[slice, np.ndarray]]:
    """``n_boot`` resamples of ``n`` indices (with replacement), in blocks: (rows, indices)."""
    rows = max(1, _BLOCK_VALUES // n)
    for start in range(0, n_boot, rows):
        stop = min(n_boot, start + rows)
        yield slice(start, stop), rng.integers(0, n, size=(stop - start, n))


def _bootstrap_medians(values: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """Medians of ``n_boot`` resamples (with replacement) of ``values``."""
    out = np.empty(n_boot, dtype=np.float64)
    for rows, idx in _resamples(values.size, n_boot, rng):
        out[rows] = np.median(values[idx], axis=1)
    return out


def _ci(samples: np.ndarray, level: float) -> tuple[float, float]:
    alpha = (1.0 - level) / 2.0
    lo, hi = np.quantile(samples, [alpha, 1.0 - alpha])
    return float(lo), float(hi)


def _pairs(
    what: str,
    baseline: Values,
    candidate: Values,
    check: Callable[[str, Values], np.ndarray],
) -> tuple[np.ndarray, np.ndarray]:
    """Both sides checked by ``check`` and of one length (``baseline[i]`` pairs ``candidate[i]``)."""
    base, cand = check("baseline", baseline), check("candidate", candidate)
    if base.size != cand.size:
        raise ValueError(
            f"{what}: expected as many candidate as baseline values, "
            f"got {cand.size} and {base.size}"
        )
    return base, cand


def _check_boot(n_boot: int, level: float) -> None:
    if n_boot < 1:
        raise ValueError(f"n_boot: expected a positive integer, got {n_boot}")
    if not 0.0 < level < 1.0:
        raise ValueError(f"level: expected a confidence level in (0, 1), got {level}")


def paired_speedup(
    baseline: Values,
    candidate: Values,
    *,
    paired: bool = True,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> PairedResult:
    """Median per-pair speedup ``baseline[i] / candidate[i]`` with a bootstrap CI over pairs.

    ``baseline[i]`` and ``candidate[i]`` must be latencies of the same rollout.  ``paired``
    False, the fallback when rollouts cannot be paired: the ratio of medians with an
    independent bootstrap of each side.
    """
    if not paired:
        ratio, boot_ci = bootstrap_ratio_of_medians(
            baseline, candidate, n_boot=n_boot, seed=seed, level=level
        )
        n = min(len(baseline), len(candidate))
        ci = boot_ci if ci_reason(n) is None else None
        return PairedResult(ratio, ci, (1.0 - 1.0 / ratio) * 100.0, n, paired=False)
    _check_boot(n_boot, level)
    base, cand = _pairs("paired_speedup", baseline, candidate, _positive_array)
    ratios = base / cand
    ci = None
    if ci_reason(int(base.size)) is None:
        ci = _ci(_bootstrap_medians(ratios, n_boot, np.random.default_rng(seed)), level)
    return PairedResult(
        median_ratio=float(np.median(ratios)),
        ci95=ci,
        reduction_pct=float((1.0 - np.median(cand / base)) * 100.0),
        n=int(base.size),
        paired=True,
    )


def bootstrap_ratio_of_medians(
    a: Values,
    b: Values,
    *,
    n_boot: int = 2000,
    seed: int = 0,
    level: float = 0.95,
) -> tuple[float, tuple[float, float]]:
    """``median(a) / median(b)`` and its percentile-bootstrap CI, resampling a and b independently."""
    _check_boot(n_boot, level)
    arr_a = _positive_array("a", a)
    arr_b = _positive_array("b", b)
    rng = np.random.default_rng(seed)
    boot = _bootstrap_medians(arr_a, n_boot, rng) / _bootstrap_medians(arr_b, n_boot, rng)
    return float(np.median(arr_a) / np.median(arr_b)), _ci(boot, level)


def _average_ranks(values: np.ndarray) -> tuple[np.ndarray, float]:
    """1-based ranks with ties averaged, and the tie term sum(t^3 - t)."""
    order = np.argsort(values, kind="mergesort")
    sorted_vals = values[order]
    n = values.size
    # boundaries of runs of equal values
    starts = np.flatnonzero(np.r_[True, sorted_vals[1:] != sorted_vals[:-1]])
    ends = np.r_[starts[1:], n]
    run_ranks = (starts + ends + 1) / 2.0  # mean of ranks starts+1 .. ends
    ranks = np.empty(n, dtype=np.float64)
    ranks[order] = np.repeat(run_ranks, ends - starts)
    t = (ends - starts).astype(np.float64)
    return ranks, float(np.sum(t**3 - t))


def mann_whitney_u(a: Values, b: Values) -> tuple[float, float]:
    """Mann–Whitney U of ``a`` and the two-sided p-value (normal approximation).

    ``U`` counts pairs (x in a, y in b) with x > y, ties counting 1/2 (scipy's
    ``U1``).  The variance carries the tie correction and the z-score a
    continuity correction of 0.5, as ``scipy.stats.mannwhitneyu(...,
    method="asymptotic")`` does by default.  All values tied: p = 1.
    """
    x = np.asarray(a, dtype=np.float64)
    y = np.asarray(b, dtype=np.float64)
    n1, n2 = x.size, y.size
    if n1 == 0 or n2 == 0:
        raise ValueError(f"mann_whitney_u: expected two non-empty samples, got {n1} and {n2}")
    if not (np.all(np.isfinite(x)) and np.all(np.isfinite(y))):
        raise ValueError("mann_whitney_u: expected finite values")
    ranks, tie_term = _average_ranks(np.concatenate([x, y]))
    u1 = float(ranks[:n1].sum() - n1 * (n1 + 1) / 2.0)
    n = n1 + n2
    mu = n1 * n2 / 2.0
    var = n1 * n2 / 12.0 * ((n + 1) - tie_term / (n * (n - 1)))
    if var <= 0:
        return u1, 1.0
    z = (abs(u1 - mu) - 0.5) / math.sqrt(var)
    if z <= 0:
        return u1, 1.0
    return u1, min(1.0, math.erfc(z / math.sqrt(2.0)))


def bootstrap_median(
    values: Values, *, n_boot: int = 2000, seed: int = 0, level: float = 0.95
) -> tuple[float, tuple[float, float]]:
    """``median(values)`` and its percentile-bootstrap CI."""
    _check_boot(n_boot, level)
    arr = _positive_array("values", values)
    boot = _bootstrap_medians(arr, n_boot, np.random.default_rng(seed))
    return float(np.median(arr)), _ci(boot, level)
